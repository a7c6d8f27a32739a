// Stand-alone probe (gpubench's own code: nvcc -O3 -std=c++17 -arch=sm_90 -o layouts layouts.cu).
// Where does the decode step's kernel chain lose against a chain that only reads? The step's reads
// at context 2048 (llama-2-7b: per layer qkv 100.7 MB, KV cache 33.6 MB, out 33.6 MB, gate|up
// 180.4 MB, down 90.2 MB; 32 layers; then the LM head's 262.1 MB), each kernel reading its bytes
// in tiles (16 loads of 16 B a thread in flight, the last tile predicated, no serial tail; chain.cu
// version 5's best shape), replayed from a CUDA graph with programmatic dependent launch, in
// layouts that add the engine's shapes one at a time:
//   regular5   5 kernels a layer, each 2 blocks an SM of 256 threads (shared memory caps the
//              blocks an SM, as registers cap the engine's GEMVs), dependents let launch at the start
//   regular6   + a merge-sized kernel after the cache (32 blocks of 128 threads, 266 KB)
//   out_end    regular6, the out kernel letting its dependents launch only at its end (as the
//              engine's out GEMV, which is itself launched beside attention)
//   grids      regular6 with the engine's grids: qkv 256 blocks, cache 512 blocks of 128 threads
//              (4 an SM, a quarter of a GEMV block's resources each), out 256, gate|up 230, down 256
//   engine     grids + out_end
// Version 2 adds the engine's GEMV access pattern in the engine layout (attention and merge stay
// read kernels): W with the engine's padded rows (4096 + 128 elements, 11008 + 128 for down),
// warp g of the grid taking row groups g, g + warps, ... (qkv, gate|up and the LM head: row pairs
// g and g + rows/2, 8 pieces of 16 B of each a lane and step; out and down: one row, 16 pieces),
// each warp's first step loaded before the wait, as the fused GEMV does:
//   gemv_loads  the GEMVs' loads only, folded by xor
//   gemv_fma    + the arithmetic after the wait: x (a bf16 vector) read through L1 by every lane,
//               the weights' bits masked to small finite bf16, fp32 FMAs, the warp's sums by
//               shuffles, lane 0 writing each row's float (no norm, no epilogue)
//   gemv_ring   gemv_fma's arithmetic, W streamed through a per-lane cp.async ring in shared
//               memory (3 stages of 4 KiB a warp, 2 in flight while one is multiplied, across row
//               groups; 96 KiB a block), so that the loads stay in flight while the warp computes
//   gemv_xpre   gemv_fma with the first step's x loaded before the wait (x never changes here):
//               what the round trip for x after the wait costs
//   gemv_roll   gemv_fma with the step's registers refilled piece by piece: piece j of the warp's
//               next step loaded as soon as piece j of the current one is multiplied
//   gemv_mma    gemv_fma with the products on tensor cores: each lane's 16-byte piece of a row
//               and of x straight into two mma.m16n8k16 (no unpacking), the sums on a diagonal
//   gemv_fma_sync, gemv_mma_sync   the same with a __syncwarp between a step's loads and its
//               products (ptxas otherwise places products between the loads)
//   gemv_xonly  gemv_loads plus the loads of x (through L1, as gemv_fma), folded by xor
//   gemv_mma_nox  gemv_mma with x's fragments constant (bf16 1.0): no loads of x
//   gemv_smx    gemv_fma with x staged once a block in shared memory after the wait and read
//               from there instead of through L1
// Check: every kernel's xor against the host's xor of its bytes, every layout (193 kernels at
// most, each its own result slot; gemv_xonly's GEMV slots, which fold x too, are not compared);
// in the layouts with products, the first 16 outputs of each of layer 0's GEMVs and of the LM
// head against the host (gemv_mma_nox's against x = 1).
// Output: step ms (median of 20 replays), 3 rounds; LAYOUT=name replays one layout 30 times (for a
// kernel tracer); ONLY="a b" times those layouts only. The files 10_ to 16_ came from this file as
// it grew, one variant a call (the README's section says which); layouts_1_to_2.patch leads back
// to the first version (apply with patch -R).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#define CK(x)                                                                            \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));    \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

constexpr int kU = 16;

__device__ __forceinline__ uint4 ld(const uint4* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// Tiles of kU x blockDim pieces, dealt to the blocks in turn; the first tile's loads before the
// wait. kEarly: dependents may launch at the start (else at the end, implicitly).
template <bool kEarly>
__global__ void __launch_bounds__(256) read_kernel(const uint4* __restrict__ p, std::int64_t n16,
                                                    unsigned* out) {
  if constexpr (kEarly) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const std::int64_t turn = static_cast<std::int64_t>(gridDim.x) * kU * blockDim.x;
  unsigned acc = 0;
  bool waited = false;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kU * blockDim.x + threadIdx.x;
       i < n16; i += turn) {
    uint4 v[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const std::int64_t j = i + static_cast<std::int64_t>(u) * blockDim.x;
      v[u] = j < n16 ? ld(p + j) : make_uint4(0, 0, 0, 0);
    }
    __syncwarp();
    if (!waited) {
      asm volatile("griddepcontrol.wait;" ::: "memory");
      waited = true;
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (!waited) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (acc) atomicXor(out, acc);
}

__device__ __forceinline__ void unpack8(uint4 v, float (&f)[8]) {
  const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(u[i] << 16);
    f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}
// Pattern bits to a finite bf16 in +-[1, 2): sign and mantissa kept, exponent 127.
__device__ __host__ __forceinline__ unsigned tame(unsigned w) { return (w & 0x807f807fu) | 0x3f803f80u; }

// The fused GEMV's access pattern (and with FMA its arithmetic, without norm or epilogue).
// w: rows of ldw elements (bf16); out rows (RW 2: pairs g, g + out/2); in elements a row.
__device__ __forceinline__ void mma_bf16(float (&d)[4], unsigned a0, unsigned a1, unsigned a2,
                                         unsigned a3, unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int RW, int KU, bool FMA, bool XPRE = false, bool MMA = false, bool SYNC = false,
          bool XONLY = false, bool NOX = false, bool SMX = false>
__global__ void __launch_bounds__(256, 2) gemv_kernel(const unsigned short* __restrict__ w,
                                                      std::int64_t out, std::int64_t in,
                                                      std::int64_t ldw, const unsigned short* x,
                                                      float* y, unsigned* xr, int early) {
  if (early) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  constexpr int kStep = 32 * 8 * KU;
  const int lane = threadIdx.x % 32;
  const std::int64_t pair = out / 2, groups = RW == 2 ? pair : out;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * 8;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * 8 + threadIdx.x / 32;
  auto load_step = [&](std::int64_t grp, std::int64_t k0, uint4 (&wv)[RW][KU]) {
#pragma unroll
    for (int j = 0; j < KU; ++j) {
      const bool ok = k0 + 256 * j + lane * 8 < in;
#pragma unroll
      for (int r = 0; r < RW; ++r)
        wv[r][j] = ok ? ld(reinterpret_cast<const uint4*>(w + (grp + r * pair) * ldw + k0 + 256 * j +
                                                          lane * 8))
                      : make_uint4(0, 0, 0, 0);
    }
    // Loads only (and SYNC): keeps ptxas from placing each load's consumer before the next load.
    if constexpr (!FMA || SYNC) __syncwarp();
  };
  unsigned acc_x = 0;
  uint4 pre[RW][KU];
  const bool any = first < groups;
  if (any) load_step(first, 0, pre);
  // XPRE: the first step's x loaded before the wait too (possible here, where x never changes;
  // in the engine x is the previous kernel's output): what the x round trip after the wait costs.
  uint4 xpre[XPRE ? KU : 1];
  if constexpr (XPRE)
#pragma unroll
    for (int j = 0; j < KU; ++j)
      xpre[j] = 256 * j + lane * 8 < in ? __ldg(reinterpret_cast<const uint4*>(x + 256 * j + lane * 8))
                                        : make_uint4(0, 0, 0, 0);
  __syncwarp();
  asm volatile("griddepcontrol.wait;" ::: "memory");
  // SMX: x staged once a block in shared memory after the wait, read from there (not through L1).
  extern __shared__ uint4 xs_smem[];
  const unsigned short* xsrc = x;
  if constexpr (SMX) {
    for (std::int64_t i = threadIdx.x; i < in / 8; i += blockDim.x)
      xs_smem[i] = __ldg(reinterpret_cast<const uint4*>(x) + i);
    __syncthreads();
    xsrc = reinterpret_cast<const unsigned short*>(xs_smem);
  }
  // MMA: each lane's piece of a row (8 consecutive k) goes into two mma.m16n8k16 as the A
  // fragment, its x piece as the B fragment (elements 0,1 / 4,5, then 2,3 / 6,7): the products
  // of lane group g land on D1[g][g] and D2[g+8][g] (held by lane (g, g/2)).
  float d1[RW][4] = {}, d2[RW][4] = {};
  auto use = [&](std::int64_t k0, const uint4 (&wv)[RW][KU], float (&acc)[RW], auto pre_tag) {
    constexpr bool kFromPre = XPRE && decltype(pre_tag)::value;
#pragma unroll
    for (int j = 0; j < KU; ++j) {
      if constexpr (XONLY) {  // the loads of W and x, folded by xor: no products
        const bool ok = k0 + 256 * j + lane * 8 < in;
        const uint4 xv = ok ? __ldg(reinterpret_cast<const uint4*>(x + k0 + 256 * j + lane * 8))
                            : make_uint4(0, 0, 0, 0);
        acc_x ^= xv.x ^ xv.w;
#pragma unroll
        for (int r = 0; r < RW; ++r) acc_x ^= wv[r][j].x ^ wv[r][j].y ^ wv[r][j].z ^ wv[r][j].w;
      } else if constexpr (MMA) {
        const bool ok = k0 + 256 * j + lane * 8 < in;
        uint4 xv;
        if constexpr (NOX)  // x's bf16 1.0 in every element (0 past the row): no loads of x
          xv = ok ? make_uint4(0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u)
                  : make_uint4(0, 0, 0, 0);
        else
          xv = ok ? __ldg(reinterpret_cast<const uint4*>(x + k0 + 256 * j + lane * 8))
                  : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int r = 0; r < RW; ++r) {
          const uint4 t = make_uint4(tame(wv[r][j].x), tame(wv[r][j].y), tame(wv[r][j].z),
                                     tame(wv[r][j].w));
          mma_bf16(d1[r], t.x, t.y, t.z, t.w, xv.x, xv.z);
          mma_bf16(d2[r], t.x, t.y, t.z, t.w, xv.y, xv.w);
        }
      } else if constexpr (FMA) {
        const bool ok = k0 + 256 * j + lane * 8 < in;
        float xf[8];
        if constexpr (kFromPre)
          unpack8(xpre[j], xf);
        else if constexpr (SMX)
          unpack8(ok ? *reinterpret_cast<const uint4*>(xsrc + k0 + 256 * j + lane * 8)
                     : make_uint4(0, 0, 0, 0), xf);
        else
          unpack8(ok ? __ldg(reinterpret_cast<const uint4*>(x + k0 + 256 * j + lane * 8))
                     : make_uint4(0, 0, 0, 0), xf);
#pragma unroll
        for (int r = 0; r < RW; ++r) {
          const uint4 t = make_uint4(tame(wv[r][j].x), tame(wv[r][j].y), tame(wv[r][j].z),
                                     tame(wv[r][j].w));
          float wf[8];
          unpack8(t, wf);
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[r] = fmaf(wf[e], xf[e], acc[r]);
        }
      } else {
#pragma unroll
        for (int r = 0; r < RW; ++r) acc_x ^= wv[r][j].x ^ wv[r][j].y ^ wv[r][j].z ^ wv[r][j].w;
      }
    }
  };
  // One row group; the first step given in `p` when kPre (inlined twice, as the engine's kernel,
  // so that the preloaded registers are dead in the later groups).
  auto group = [&](std::int64_t grp, const uint4 (&p)[RW][KU], auto pre_tag) {
    constexpr bool kPre = decltype(pre_tag)::value;
    float acc[RW] = {};
    std::int64_t k0 = 0;
    if constexpr (kPre) {
      use(0, p, acc, std::true_type{});
      k0 = kStep;
    }
    for (; k0 < in; k0 += kStep) {
      uint4 wv[RW][KU];
      load_step(grp, k0, wv);
      use(k0, wv, acc, std::false_type{});
    }
    if constexpr (MMA) {  // the diagonal: lane (g, g/2) holds group g's sums
      const int g = lane / 4, t = lane % 4;
#pragma unroll
      for (int r = 0; r < RW; ++r) {
        acc[r] = t == g / 2 ? ((g & 1) ? d1[r][1] + d2[r][3] : d1[r][0] + d2[r][2]) : 0.f;
#pragma unroll
        for (int i = 0; i < 4; ++i) d1[r][i] = d2[r][i] = 0.f;
      }
    }
    if constexpr (FMA) {
#pragma unroll
      for (int o = 16; o > 0; o /= 2)
#pragma unroll
        for (int r = 0; r < RW; ++r) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
      if (lane == 0)
#pragma unroll
        for (int r = 0; r < RW; ++r) y[grp + r * pair] = acc[r];
    }
  };
  if (any) {
    group(first, pre, std::true_type{});
    for (std::int64_t grp = first + warps; grp < groups; grp += warps)
      group(grp, pre, std::false_type{});
  }
  if (!FMA && acc_x) atomicXor(xr, acc_x);
}

// The same GEMV with the step's registers refilled piece by piece: as soon as piece j of every
// row of a step is multiplied, piece j of the warp's next step (the next step of the row group,
// or the first of its next group) is loaded into the same registers. The warp's loads then stay
// in flight while it computes, with the registers of one step; the first step is loaded before
// the wait, as in gemv_kernel.
template <int RW, int KU>
__global__ void __launch_bounds__(256, 2) gemv_roll_kernel(const unsigned short* __restrict__ w,
                                                           std::int64_t out, std::int64_t in,
                                                           std::int64_t ldw,
                                                           const unsigned short* x, float* y,
                                                           unsigned* xr, int early) {
  if (early) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  constexpr int kStep = 32 * 8 * KU;
  const int lane = threadIdx.x % 32;
  const std::int64_t pair = out / 2, groups = RW == 2 ? pair : out;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * 8;
  // The current unit (row group grp, step at k0) and the next one (ngrp, nk0).
  std::int64_t grp = static_cast<std::int64_t>(blockIdx.x) * 8 + threadIdx.x / 32, k0 = 0;
  std::int64_t ngrp = grp, nk0 = 0;
  auto advance = [&]() {
    nk0 += kStep;
    if (nk0 >= in) {
      nk0 = 0;
      ngrp += warps;
    }
  };
  uint4 cur[RW][KU];
  // Piece j of every row of unit (ngrp, nk0); past the warp's last unit (ngrp >= groups) the
  // loads re-read the current unit's rows (results unused), so that no branch splits the step.
  auto load_next = [&](int j, std::int64_t g) {
    const bool ok = nk0 + 256 * j + lane * 8 < in;
#pragma unroll
    for (int r = 0; r < RW; ++r)
      cur[r][j] = ok ? ld(reinterpret_cast<const uint4*>(w + (g + r * pair) * ldw + nk0 +
                                                         256 * j + lane * 8))
                     : make_uint4(0, 0, 0, 0);
  };
  if (grp < groups)
#pragma unroll
    for (int j = 0; j < KU; ++j) load_next(j, grp);
  advance();
  asm volatile("griddepcontrol.wait;" ::: "memory");
  float acc[RW] = {};
  for (; grp < groups;) {
    const std::int64_t lg = ngrp < groups ? ngrp : grp;  // the rows the next loads read
#pragma unroll
    for (int j = 0; j < KU; ++j) {
      const bool ok = k0 + 256 * j + lane * 8 < in;
      float xf[8];
      unpack8(ok ? __ldg(reinterpret_cast<const uint4*>(x + k0 + 256 * j + lane * 8))
                 : make_uint4(0, 0, 0, 0), xf);
#pragma unroll
      for (int r = 0; r < RW; ++r) {
        const uint4 t = make_uint4(tame(cur[r][j].x), tame(cur[r][j].y), tame(cur[r][j].z),
                                   tame(cur[r][j].w));
        float wf[8];
        unpack8(t, wf);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[r] = fmaf(wf[e], xf[e], acc[r]);
      }
      // The piece's FMAs before the next loads, in the issued order: without this ptxas sank
      // every load of the next step below all of the step's FMAs.
#pragma unroll
      for (int r = 0; r < RW; ++r) asm volatile("" : "+f"(acc[r]));
      load_next(j, lg);
    }
    if (k0 + kStep >= in) {  // the group's last step: sum over the lanes, write
#pragma unroll
      for (int o = 16; o > 0; o /= 2)
#pragma unroll
        for (int r = 0; r < RW; ++r) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
      if (lane == 0)
#pragma unroll
        for (int r = 0; r < RW; ++r) y[grp + r * pair] = acc[r];
#pragma unroll
      for (int r = 0; r < RW; ++r) acc[r] = 0;
    }
    grp = ngrp;
    k0 = nk0;
    advance();
  }
  (void)xr;
}

// The same GEMV with each lane's pieces of W streamed through its own slots of a shared-memory
// ring by cp.async, kStages - 1 steps (of 4 KiB a warp) in flight while one is multiplied, across
// the ends of row groups: the loads stay in flight while the warp computes. The first
// kStages - 1 steps are issued before the wait.
constexpr int kStages = 3;
__device__ __forceinline__ void cp16(void* smem, const void* g, unsigned bytes) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(d), "l"(g), "r"(bytes)
               : "memory");
}
template <int RW, int KU>
__global__ void __launch_bounds__(256, 2) gemv_ring_kernel(const unsigned short* __restrict__ w,
                                                           std::int64_t out, std::int64_t in,
                                                           std::int64_t ldw,
                                                           const unsigned short* x, float* y,
                                                           unsigned* xr, int early) {
  if (early) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  extern __shared__ uint4 smem[];
  constexpr int kStep = 32 * 8 * KU;
  constexpr int kSlots = RW * KU;  // 16-byte slots a lane and stage
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint4* ring = smem + warp * kStages * kSlots * 32;  // [stage][slot][lane]
  const std::int64_t pair = out / 2, groups = RW == 2 ? pair : out;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * 8;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * 8 + warp;
  const std::int64_t steps = (in + kStep - 1) / kStep;  // a group's
  const std::int64_t mine = first < groups ? (groups - first + warps - 1) / warps : 0;
  const std::int64_t units = mine * steps;  // (group, step) pairs of this warp, in order
  auto issue = [&](std::int64_t u) {
    if (u < units) {
      const std::int64_t grp = first + (u / steps) * warps, k0 = (u % steps) * kStep;
      uint4* st = ring + (u % kStages) * kSlots * 32 + lane;
#pragma unroll
      for (int j = 0; j < KU; ++j) {
        const std::int64_t k = k0 + 256 * j + lane * 8;
        const bool ok = k < in;
#pragma unroll
        for (int r = 0; r < RW; ++r)
          cp16(st + (r * KU + j) * 32, w + (grp + r * pair) * ldw + (ok ? k : 0), ok ? 16 : 0);
      }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
#pragma unroll
  for (int u = 0; u < kStages - 1; ++u) issue(u);
  asm volatile("griddepcontrol.wait;" ::: "memory");
  float acc[RW] = {};
  for (std::int64_t u = 0; u < units; ++u) {
    issue(u + kStages - 1);
    asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 1) : "memory");
    const uint4* st = ring + (u % kStages) * kSlots * 32 + lane;
    const std::int64_t k0 = (u % steps) * kStep;
#pragma unroll
    for (int j = 0; j < KU; ++j) {
      const bool ok = k0 + 256 * j + lane * 8 < in;
      float xf[8];
      unpack8(ok ? __ldg(reinterpret_cast<const uint4*>(x + k0 + 256 * j + lane * 8))
                 : make_uint4(0, 0, 0, 0), xf);
#pragma unroll
      for (int r = 0; r < RW; ++r) {
        const uint4 v = st[(r * KU + j) * 32];
        const uint4 t = make_uint4(tame(v.x), tame(v.y), tame(v.z), tame(v.w));
        float wf[8];
        unpack8(t, wf);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[r] = fmaf(wf[e], xf[e], acc[r]);
      }
    }
    if (u % steps == steps - 1) {  // the group's last step: sum over the lanes, write
#pragma unroll
      for (int o = 16; o > 0; o /= 2)
#pragma unroll
        for (int r = 0; r < RW; ++r) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
      const std::int64_t grp = first + (u / steps) * warps;
      if (lane == 0)
#pragma unroll
        for (int r = 0; r < RW; ++r) y[grp + r * pair] = acc[r];
#pragma unroll
      for (int r = 0; r < RW; ++r) acc[r] = 0;
    }
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  (void)xr;
}

struct K {
  std::int64_t off, bytes;  // in the buffer (gemv: its rows' span)
  int grid, threads, smem;
  bool early;
  int rw = 0, ku = 0;  // gemv kernels: rows a warp, pieces a row and step (0: a read kernel)
  std::int64_t out = 0, in = 0, ld = 0;
};

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const std::int64_t qkv = 100663296, cache = 33554432, wo = 33554432, gu = 180355072,
                     down = 90177536, lm = 262144000, merge = 32 * 16 * 130 * 4;
  const std::int64_t per_layer = qkv + cache + merge + wo + gu + down;
  const std::int64_t total = 32 * per_layer + lm;
  // The GEMV layouts' buffer: the engine's padded rows.
  const std::int64_t H = 4096, I = 11008, V = 32000, L1 = H + 128, L2 = I + 128;
  const std::int64_t g_qkv = 3 * H * L1 * 2, g_wo = H * L1 * 2, g_gu = 2 * I * L1 * 2,
                     g_down = H * L2 * 2, g_lm = V * L1 * 2;
  const std::int64_t g_layer = g_qkv + cache + merge + g_wo + g_gu + g_down;
  const std::int64_t g_total = 32 * g_layer + g_lm;
  char *buf, *gbuf;
  CK(cudaMalloc(&buf, total));
  CK(cudaMalloc(&gbuf, g_total));
  const int gemv_smem = 110 * 1024, cache_smem = 55 * 1024, merge_smem = 8 * 1024;
  auto is_gemv = [](const std::string& name) { return name.rfind("gemv", 0) == 0; };
  auto layout = [&](const std::string& name) {
    const bool six = name != "regular5";
    const bool grids = name == "grids" || name == "engine" || is_gemv(name);
    const bool out_end = name == "out_end" || name == "engine" || is_gemv(name);
    const bool gemv = is_gemv(name);
    std::vector<K> ks;
    std::int64_t off = 0;
    auto add = [&](std::int64_t bytes, int grid, int threads, int smem, bool early) {
      ks.push_back({off, bytes, grid, threads, smem, early});
    };
    auto add_gemv = [&](std::int64_t bytes, int grid, bool early, int rw, int ku, std::int64_t o,
                        std::int64_t in, std::int64_t ld) {
      // 110 KiB of shared memory it does not use: 2 blocks an SM and no room beside them for an
      // attention-sized block, as the engine's GEMVs fill the register file.
      K k{off, bytes, grid, 256, gemv_smem, early};
      k.rw = rw, k.ku = ku, k.out = o, k.in = in, k.ld = ld;
      ks.push_back(k);
    };
    for (int l = 0; l < 32; ++l) {
      if (gemv)
        add_gemv(g_qkv, 256, true, 2, 8, 3 * H, H, L1);
      else
        add(qkv, grids ? 256 : 2 * sms, 256, gemv_smem, true);
      off += gemv ? g_qkv : qkv;
      add(cache, grids ? 512 : 2 * sms, grids ? 128 : 256, grids ? cache_smem : gemv_smem, true);
      off += cache;
      if (six) add(merge, 32, 128, merge_smem, true);
      off += merge;
      if (gemv)
        add_gemv(g_wo, 256, false, 1, 16, H, H, L1);
      else
        add(wo, grids ? 256 : 2 * sms, 256, gemv_smem, !out_end);
      off += gemv ? g_wo : wo;
      if (gemv)
        add_gemv(g_gu, 230, true, 2, 8, 2 * I, H, L1);
      else
        add(gu, grids ? 230 : 2 * sms, 256, gemv_smem, true);
      off += gemv ? g_gu : gu;
      if (gemv)
        add_gemv(g_down, 256, true, 1, 16, H, I, L2);
      else
        add(down, grids ? 256 : 2 * sms, 256, gemv_smem, true);
      off += gemv ? g_down : down;
    }
    if (gemv)
      add_gemv(g_lm, 2 * sms, true, 2, 8, V, H, L1);
    else
      add(lm, 2 * sms, 256, gemv_smem, true);
    return ks;
  };
  const char* names[] = {"regular5", "regular6", "out_end", "grids", "engine", "gemv_loads", "gemv_fma",
                         "gemv_ring", "gemv_xpre", "gemv_roll", "gemv_mma", "gemv_fma_sync",
                         "gemv_mma_sync", "gemv_xonly", "gemv_mma_nox", "gemv_smx"};
  // The pattern: each 4-byte word its index times a constant, in both buffers.
  auto fill = [](char* b, std::int64_t bytes) {
    const std::int64_t words = bytes / 4;
    std::vector<unsigned> chunk(1 << 24);
    for (std::int64_t w0 = 0; w0 < words; w0 += chunk.size()) {
      const std::int64_t m = std::min<std::int64_t>(chunk.size(), words - w0);
      for (std::int64_t q = 0; q < m; ++q) chunk[q] = static_cast<unsigned>((w0 + q) * 2654435761ull);
      CK(cudaMemcpy(b + w0 * 4, chunk.data(), m * 4, cudaMemcpyHostToDevice));
    }
  };
  fill(buf, total);
  fill(gbuf, g_total);
  // x: bf16 sin values, as many as the widest row.
  std::vector<unsigned short> hx(L2);
  for (std::int64_t k = 0; k < L2; ++k) {
    const float f = std::sin(0.37f * static_cast<float>(k));
    unsigned u;
    std::memcpy(&u, &f, 4);
    hx[k] = static_cast<unsigned short>(u >> 16);
  }
  unsigned short* x;
  CK(cudaMalloc(&x, L2 * 2));
  CK(cudaMemcpy(x, hx.data(), L2 * 2, cudaMemcpyHostToDevice));
  float* y;
  const std::int64_t y_slot = V;
  CK(cudaMalloc(&y, 256 * y_slot * 4));
  CK(cudaFuncSetAttribute(read_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(read_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(gemv_kernel<2, 8, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(gemv_kernel<2, 8, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(gemv_kernel<1, 16, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(gemv_kernel<1, 16, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(gemv_ring_kernel<2, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(gemv_kernel<2, 8, true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(gemv_roll_kernel<2, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(gemv_kernel<2, 8, true, false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(gemv_kernel<2, 8, true, false, false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(gemv_kernel<2, 8, true, false, false, false, false, false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(gemv_kernel<1, 16, true, false, false, false, false, false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(gemv_kernel<2, 8, false, false, false, false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(gemv_kernel<1, 16, false, false, false, false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(gemv_kernel<2, 8, true, false, true, false, false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(gemv_kernel<1, 16, true, false, true, false, false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(gemv_kernel<1, 16, true, false, false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(gemv_kernel<2, 8, true, false, true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(gemv_kernel<1, 16, true, false, true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(gemv_kernel<1, 16, true, false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(gemv_roll_kernel<1, 16>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(gemv_kernel<1, 16, true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(gemv_ring_kernel<1, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  unsigned* out;
  CK(cudaMalloc(&out, 4 * 256));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  auto graph_of = [&](const std::vector<K>& ks, const std::string& name) {
    const bool xp = name == "gemv_xpre";
    const bool fma = name == "gemv_fma" || xp, ring = name == "gemv_ring", gb = is_gemv(name);
    const bool roll = name == "gemv_roll", mma = name == "gemv_mma";
    const bool fsync = name == "gemv_fma_sync", msync = name == "gemv_mma_sync";
    const bool xonly = name == "gemv_xonly", nox = name == "gemv_mma_nox", smx = name == "gemv_smx";
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (std::size_t k = 0; k < ks.size(); ++k) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(ks[k].grid);
      cfg.blockDim = dim3(ks[k].threads);
      cfg.dynamicSmemBytes = ks[k].smem;
      cfg.stream = st;
      cudaLaunchAttribute at[1];
      at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      at[0].val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = at;
      cfg.numAttrs = 1;
      unsigned* o = out + (k % 256);
      if (ks[k].rw) {
        const auto* w = reinterpret_cast<const unsigned short*>(gbuf + ks[k].off);
        float* yk = y + (k % 256) * y_slot;
        const int e = ks[k].early ? 1 : 0;
#define G(RW, KU, F) CK(cudaLaunchKernelEx(&cfg, gemv_kernel<RW, KU, F>, w, ks[k].out, ks[k].in, ks[k].ld, x, yk, o, e))
#define RG(RW, KU) CK(cudaLaunchKernelEx(&cfg, gemv_ring_kernel<RW, KU>, w, ks[k].out, ks[k].in, ks[k].ld, x, yk, o, e))
        if (ring) {
          if (ks[k].rw == 2) RG(2, 4); else RG(1, 8);
        } else if (smx) {
          if (ks[k].rw == 2)
            CK(cudaLaunchKernelEx(&cfg, gemv_kernel<2, 8, true, false, false, false, false, false, true>, w, ks[k].out, ks[k].in, ks[k].ld, x, yk, o, e));
          else
            CK(cudaLaunchKernelEx(&cfg, gemv_kernel<1, 16, true, false, false, false, false, false, true>, w, ks[k].out, ks[k].in, ks[k].ld, x, yk, o, e));
        } else if (xonly) {
          if (ks[k].rw == 2)
            CK(cudaLaunchKernelEx(&cfg, gemv_kernel<2, 8, false, false, false, false, true>, w, ks[k].out, ks[k].in, ks[k].ld, x, yk, o, e));
          else
            CK(cudaLaunchKernelEx(&cfg, gemv_kernel<1, 16, false, false, false, false, true>, w, ks[k].out, ks[k].in, ks[k].ld, x, yk, o, e));
        } else if (nox) {
          if (ks[k].rw == 2)
            CK(cudaLaunchKernelEx(&cfg, gemv_kernel<2, 8, true, false, true, false, false, true>, w, ks[k].out, ks[k].in, ks[k].ld, x, yk, o, e));
          else
            CK(cudaLaunchKernelEx(&cfg, gemv_kernel<1, 16, true, false, true, false, false, true>, w, ks[k].out, ks[k].in, ks[k].ld, x, yk, o, e));
        } else if (fsync) {
          if (ks[k].rw == 2)
            CK(cudaLaunchKernelEx(&cfg, gemv_kernel<2, 8, true, false, false, true>, w, ks[k].out, ks[k].in, ks[k].ld, x, yk, o, e));
          else
            CK(cudaLaunchKernelEx(&cfg, gemv_kernel<1, 16, true, false, false, true>, w, ks[k].out, ks[k].in, ks[k].ld, x, yk, o, e));
        } else if (msync) {
          if (ks[k].rw == 2)
            CK(cudaLaunchKernelEx(&cfg, gemv_kernel<2, 8, true, false, true, true>, w, ks[k].out, ks[k].in, ks[k].ld, x, yk, o, e));
          else
            CK(cudaLaunchKernelEx(&cfg, gemv_kernel<1, 16, true, false, true, true>, w, ks[k].out, ks[k].in, ks[k].ld, x, yk, o, e));
        } else if (mma) {
          if (ks[k].rw == 2)
            CK(cudaLaunchKernelEx(&cfg, gemv_kernel<2, 8, true, false, true>, w, ks[k].out, ks[k].in, ks[k].ld, x, yk, o, e));
          else
            CK(cudaLaunchKernelEx(&cfg, gemv_kernel<1, 16, true, false, true>, w, ks[k].out, ks[k].in, ks[k].ld, x, yk, o, e));
        } else if (roll) {
          if (ks[k].rw == 2)
            CK(cudaLaunchKernelEx(&cfg, gemv_roll_kernel<2, 8>, w, ks[k].out, ks[k].in, ks[k].ld, x, yk, o, e));
          else
            CK(cudaLaunchKernelEx(&cfg, gemv_roll_kernel<1, 16>, w, ks[k].out, ks[k].in, ks[k].ld, x, yk, o, e));
        } else if (xp) {
          if (ks[k].rw == 2)
            CK(cudaLaunchKernelEx(&cfg, gemv_kernel<2, 8, true, true>, w, ks[k].out, ks[k].in, ks[k].ld, x, yk, o, e));
          else
            CK(cudaLaunchKernelEx(&cfg, gemv_kernel<1, 16, true, true>, w, ks[k].out, ks[k].in, ks[k].ld, x, yk, o, e));
        } else if (ks[k].rw == 2) {
          if (fma) G(2, 8, true); else G(2, 8, false);
        } else {
          if (fma) G(1, 16, true); else G(1, 16, false);
        }
#undef G
#undef RG
        continue;
      }
      const uint4* p = reinterpret_cast<const uint4*>((gb ? gbuf : buf) + ks[k].off);
      if (ks[k].early)
        CK(cudaLaunchKernelEx(&cfg, read_kernel<true>, p, ks[k].bytes / 16, o));
      else
        CK(cudaLaunchKernelEx(&cfg, read_kernel<false>, p, ks[k].bytes / 16, o));
    }
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphDestroy(g));
    return ge;
  };
  // The host's xor of each kernel's bytes: a read kernel's segment, a GEMV's rows (the first
  // `in` elements of each).
  auto words_xor = [](std::int64_t w0, std::int64_t w1) {
    unsigned v = 0;
    for (std::int64_t w = w0; w < w1; ++w) v ^= static_cast<unsigned>(w * 2654435761ull);
    return v;
  };
  std::vector<std::pair<std::int64_t, unsigned>> seg, gseg;
  for (const K& k : layout("regular6")) seg.push_back({k.off, words_xor(k.off / 4, (k.off + k.bytes) / 4)});
  for (const K& k : layout("gemv_loads")) {
    unsigned v = 0;
    if (k.rw == 0) {
      v = words_xor(k.off / 4, (k.off + k.bytes) / 4);
    } else {
      for (std::int64_t r = 0; r < k.out; ++r) {
        const std::int64_t w0 = (k.off + r * k.ld * 2) / 4;
        v ^= words_xor(w0, w0 + k.in / 2);
      }
    }
    gseg.push_back({k.off, v});
  }
  auto find = [](const std::vector<std::pair<std::int64_t, unsigned>>& v, std::int64_t off) {
    for (const auto& s : v)
      if (s.first == off) return s.second;
    std::fprintf(stderr, "no segment at %lld\n", static_cast<long long>(off));
    std::exit(1);
  };
  for (const char* name : names) {
    const std::vector<K> ks = layout(name);
    const bool xonly_check = std::string(name) == "gemv_xonly";  // GEMV slots fold x too: not checked
    const bool nox_check = std::string(name) == "gemv_mma_nox";    // outputs against x = 1
    const bool fma = std::string(name) == "gemv_fma" || std::string(name) == "gemv_ring" || nox_check ||
                     std::string(name) == "gemv_smx" ||
                     std::string(name) == "gemv_xpre" || std::string(name) == "gemv_roll" ||
                     std::string(name) == "gemv_mma" || std::string(name) == "gemv_fma_sync" ||
                     std::string(name) == "gemv_mma_sync";
    std::vector<unsigned> want(256, 0);
    for (std::size_t k = 0; k < ks.size(); ++k)
      if (!((fma || xonly_check) && ks[k].rw)) want[k % 256] ^= find(is_gemv(name) ? gseg : seg, ks[k].off);
    if (xonly_check)
      for (std::size_t k = 0; k < ks.size(); ++k)
        if (ks[k].rw) want[k % 256] = ~0u;  // marked: compared below only where not marked
    cudaGraphExec_t ge = graph_of(ks, name);
    CK(cudaMemsetAsync(out, 0, 4 * 256, st));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaStreamSynchronize(st));
    std::vector<unsigned> got(256);
    CK(cudaMemcpy(got.data(), out, 4 * 256, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int k = 0; k < 256; ++k) bad += want[k] != ~0u && got[k] != want[k];
    // gemv_fma: the first 16 outputs of layer 0's GEMVs and of the LM head against the host.
    int bad_y = 0, checked = 0;
    double worst = 0;
    if (fma) {
      for (std::size_t k = 0; k < ks.size(); ++k) {
        if (!ks[k].rw || (k >= 6 && k + 1 != ks.size())) continue;
        std::vector<float> got_y(16);
        CK(cudaMemcpy(got_y.data(), y + (k % 256) * y_slot, 16 * 4, cudaMemcpyDeviceToHost));
        for (int r = 0; r < 16; ++r) {
          double want_y = 0, mag = 0;
          for (std::int64_t e = 0; e < ks[k].in; ++e) {
            const std::int64_t el = ks[k].off / 2 + r * ks[k].ld + e;
            const unsigned word = tame(static_cast<unsigned>((el / 2) * 2654435761ull));
            const unsigned bits = (el % 2) ? (word & 0xffff0000u) : (word << 16);
            float wf, xf;
            std::memcpy(&wf, &bits, 4);
            const unsigned xb = nox_check ? 0x3f800000u : static_cast<unsigned>(hx[e]) << 16;
            std::memcpy(&xf, &xb, 4);
            want_y += static_cast<double>(wf) * xf;
            mag += std::fabs(static_cast<double>(wf) * xf);
          }
          const double err = std::fabs(got_y[r] - want_y) / mag;
          worst = std::max(worst, err);
          bad_y += err > 1e-5;
          ++checked;
        }
      }
    }
    std::printf("check %-10s %zu kernels: %d of 256 xor slots wrong", name, ks.size(), bad);
    if (fma) std::printf(", %d of %d GEMV outputs off (worst %.2g of the terms' magnitude)", bad_y, checked, worst);
    std::printf(" -> %s\n", bad || bad_y ? "FAILED" : "ok");
    CK(cudaGraphExecDestroy(ge));
    if (bad || bad_y) return 1;
  }
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  auto time_graph = [&](cudaGraphExec_t ge, int reps) {
    std::vector<float> t;
    for (int r = 0; r < reps; ++r) {
      CK(cudaEventRecord(a, st));
      CK(cudaGraphLaunch(ge, st));
      CK(cudaEventRecord(b, st));
      CK(cudaEventSynchronize(b));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, a, b));
      t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    return std::make_pair(t[t.size() / 2], t[0]);
  };
  if (const char* one = std::getenv("LAYOUT")) {
    cudaGraphExec_t ge = graph_of(layout(one), one);
    const auto [med, mn] = time_graph(ge, 30);
    std::printf("layout %s: step median %.3f ms (min %.3f)\n", one, med, mn);
    return 0;
  }
  // ONLY="a b ...": time those layouts only.
  const std::string only = std::getenv("ONLY") ? std::string(" ") + std::getenv("ONLY") + " " : "";
  for (int round = 0; round < 3; ++round)
    for (const char* name : names) {
      if (!only.empty() && only.find(std::string(" ") + name + " ") == std::string::npos) continue;
      cudaGraphExec_t ge = graph_of(layout(name), name);
      time_graph(ge, 2);
      const auto [med, mn] = time_graph(ge, 20);
      std::printf("round %d %-10s step %.3f ms (min %.3f)\n", round, name, med, mn);
      CK(cudaGraphExecDestroy(ge));
    }
  return 0;
}
