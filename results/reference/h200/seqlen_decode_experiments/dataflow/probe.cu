// Dataflow probe: a llama-2-7b-shaped batch-1 decode chain (per layer: qkv GEMV with RMSNorm,
// attention over a KV cache with a last-arriver merge, out GEMV + residual, gate|up GEMV with
// RMSNorm and SwiGLU, down GEMV + residual) as ONE persistent kernel without grid barriers:
// every warp streams its own pieces of W and of the cache into its own shared-memory ring by
// bulk copies, running ahead across phase and layer boundaries (weights and old cache rows do not
// depend on the activations); only the arithmetic waits for the previous phase's counter.
// Timed modes: persistent (the dataflow kernel), no-wait (the same without the waits: what the
// streams and the arithmetic allow), chain (the same warp code launched once per phase),
// stream+copy and zstream (no arithmetic; zstream not even the copy into registers). The
// template parameters: W warps a block (one block per SM), S ring slots a warp, PB bytes a slot.
// Checked against naive kernels (2 layers, 256 keys) before the timings.
// Stand-alone (gpubench's own code); build: nvcc -O3 -std=c++17 -arch=sm_90a -o probe probe.cu
// Run: ./probe 32 (layers); ./probe 2 1|2: one layer's phases as a chain, for a profiler.
// This is version 10 (9 with a choice of polling). versions/ leads back to the earlier ones; the
// README of the folder above names what each version ran.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                      \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

using bf16 = __nv_bfloat16;
constexpr int H = 4096, I = 11008, NH = 32, D = 128, QKV = 3 * H, PAD = 128;
constexpr long LD1 = H + PAD, LD2 = I + PAD;
constexpr int CHUNK = 128;  // keys per attention item
constexpr int NP = 5;       // phases a layer
constexpr float EPS = 1e-5f;
constexpr float LOG2E = 1.4426950408889634f;

struct Params {
  const bf16 *wqkv, *wo, *wgu, *wd, *kc, *vc, *n1, *n2;
  int ctx, nchunk;
  float *xs, *qkv, *att, *xm, *g, *ws, *sq;
  int *att_cnt, *done;
  int pg_begin, pg_end, wait;
  int skip;  // timing probes: bit 0 skips the arithmetic, bit 1 the copy into registers too
  int poll;  // 0: every warp polls the counter (sleeping sleep_ns between polls); 1: one warp a block
  int sleep_ns;
};

// The pieces (ring slots) of PB bytes: a row of 4096 bf16 is ROWP pieces, a down row DOWNP, an
// attention item (CHUNK keys of one head) ATTP pieces, K and V alternating, KPP keys each.
template <int PB>
struct Geo {
  static constexpr int COLS = PB / 2, NU = PB / 512, KPP = PB / 256, ROWP = 8192 / PB,
                       DOWNP = (I * 2 + PB - 1) / PB, ATTP = 2 * CHUNK / KPP,
                       DOWN_LAST = I * 2 - (DOWNP - 1) * PB;
};

__host__ __device__ inline int n_items(int p, int nchunk) {
  return p == 0 ? QKV : p == 1 ? NH * nchunk : p == 2 ? H : p == 3 ? I : H;
}
template <int PB>
__host__ __device__ inline int n_pieces(int p) {
  using G = Geo<PB>;
  return p == 0 ? G::ROWP : p == 1 ? G::ATTP : p == 2 ? G::ROWP : p == 3 ? 2 * G::ROWP : G::DOWNP;
}

struct It {
  int pg, item, piece;
};
__device__ __forceinline__ void normalize(It& it, const Params& P, int my) {
  while (it.pg < P.pg_end && it.item >= n_items(it.pg % NP, P.nchunk)) {
    ++it.pg;
    it.item = my;
    it.piece = 0;
  }
}
template <int PB>
__device__ __forceinline__ void advance(It& it, const Params& P, int my, int nw) {
  if (++it.piece == n_pieces<PB>(it.pg % NP)) {
    it.piece = 0;
    it.item += nw;
  }
  normalize(it, P, my);
}
template <int PB>
__device__ __forceinline__ const void* piece_src(const It& it, const Params& P, int& bytes) {
  using G = Geo<PB>;
  const int l = it.pg / NP, p = it.pg % NP, r = it.item, j = it.piece;
  bytes = PB;
  switch (p) {
    case 0: return P.wqkv + (long)l * QKV * LD1 + r * LD1 + j * G::COLS;
    case 1: {
      const int h = r / P.nchunk, c = r % P.nchunk;
      const bf16* base = (j & 1) ? P.vc : P.kc;
      return base + (((long)l * NH + h) * P.ctx + c * CHUNK + (j >> 1) * G::KPP) * D;
    }
    case 2: return P.wo + (long)l * H * LD1 + r * LD1 + j * G::COLS;
    case 3: return P.wgu + (long)l * 2 * I * LD1 + (r + (j / G::ROWP) * I) * LD1 + (j % G::ROWP) * G::COLS;
    default:
      bytes = j < G::DOWNP - 1 ? PB : G::DOWN_LAST;
      return P.wd + (long)l * H * LD2 + r * LD2 + j * G::COLS;
  }
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
template <int PB>
__device__ __forceinline__ void issue(const It& it, const Params& P, void* dst, unsigned bar) {
  int bytes;
  const void* src = piece_src<PB>(it, P, bytes);
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void wait_bar(unsigned bar, unsigned parity) {
  unsigned ok = 0;
  do {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(ok)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!ok);
}
__device__ __forceinline__ int ld_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void unpack8(const uint4& u, float (&f)[8]) {
  const unsigned v[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(v[i] << 16);
    f[2 * i + 1] = __uint_as_float(v[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void unpack4(const uint2& u, float (&f)[4]) {
  f[0] = __uint_as_float(u.x << 16);
  f[1] = __uint_as_float(u.x & 0xffff0000u);
  f[2] = __uint_as_float(u.y << 16);
  f[3] = __uint_as_float(u.y & 0xffff0000u);
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o; o /= 2) v += __shfl_xor_sync(~0u, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o; o /= 2) v = fmaxf(v, __shfl_xor_sync(~0u, v, o));
  return v;
}

// A lane's PB/32 bytes of a slot into registers: a GEMV piece as NU x 16 bytes (columns
// j * 256 + lane * 8), a K or V piece as KPP x 8 bytes (key j, dims 4 lane .. 4 lane + 3).
template <int NU>
__device__ __forceinline__ void load_gemv(const unsigned char* slot, uint4 (&b)[NU], int lane) {
#pragma unroll
  for (int j = 0; j < NU; ++j) b[j] = *reinterpret_cast<const uint4*>(slot + (j * 32 + lane) * 16);
}
template <int NU>
__device__ __forceinline__ void load_keys(const unsigned char* slot, uint4 (&b)[NU], int lane) {
#pragma unroll
  for (int j = 0; j < NU; ++j) {
    const uint2 u = *reinterpret_cast<const uint2*>(slot + ((2 * j) * D + 4 * lane) * 2);
    const uint2 v = *reinterpret_cast<const uint2*>(slot + ((2 * j + 1) * D + 4 * lane) * 2);
    b[j] = make_uint4(u.x, u.y, v.x, v.y);
  }
}
template <int NU>
__device__ __forceinline__ uint2 key_of(const uint4 (&b)[NU], int j) {
  return (j & 1) ? make_uint2(b[j >> 1].z, b[j >> 1].w) : make_uint2(b[j >> 1].x, b[j >> 1].y);
}

// One GEMV piece: up to NU * 256 columns of a row (in registers) against the phase's input as
// staged in shared memory (bf16, already scaled by the norm).
template <int NU>
__device__ __forceinline__ float gemv_piece(const uint4 (&b)[NU], const bf16* xs, int ncols, int lane) {
  float acc[2] = {0.f, 0.f};
#pragma unroll
  for (int j = 0; j < NU; ++j) {
    const int e = j * 256 + lane * 8;
    if (e < ncols) {
      float w[8], xv[8];
      unpack8(b[j], w);
      unpack8(*reinterpret_cast<const uint4*>(xs + e), xv);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[j & 1] = fmaf(w[i], xv[i], acc[j & 1]);
    }
  }
  return acc[0] + acc[1];
}

// One reduce-scatter step over 2*O partial sums: lanes with bit O keep the upper half.
template <int O, int N>
__device__ __forceinline__ void stage(float (&part)[N], int lane) {
  const bool up = lane & O;
#pragma unroll
  for (int i = 0; i < O; ++i) {
    const float send = up ? part[i] : part[i + O];
    const float keep = up ? part[i + O] : part[i];
    part[i] = keep + __shfl_xor_sync(~0u, send, O);
  }
}

// Scores of a K piece's KPP keys: lane j (and j + KPP ...) ends with key j % KPP's q.k (lanes
// hold 4 dims of q each).
template <int KPP, int NU>
__device__ __forceinline__ float scores(const uint4 (&b)[NU], const float (&q)[4], int lane) {
  float part[KPP];
#pragma unroll
  for (int j = 0; j < KPP; ++j) {
    float k[4];
    unpack4(key_of(b, j), k);
    part[j] = q[0] * k[0] + q[1] * k[1] + q[2] * k[2] + q[3] * k[3];
  }
  if constexpr (KPP >= 32) stage<16>(part, lane);
  if constexpr (KPP >= 16) stage<8>(part, lane);
  if constexpr (KPP >= 8) stage<4>(part, lane);
  stage<2>(part, lane);
  stage<1>(part, lane);
  float s = part[0];
#pragma unroll
  for (int o = KPP; o < 32; o *= 2) s += __shfl_xor_sync(~0u, s, o);
  return s;
}

template <int W, int S, int PB, int STAGE = 1>
__global__ void __launch_bounds__(W * 32, 1) dataflow(const Params P) {
  using G = Geo<PB>;
  constexpr int NU = G::NU, KPP = G::KPP;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ unsigned long long bars[W * S];
  __shared__ float blk_sq[2];
  __shared__ int blk_cnt, claim;
  __shared__ volatile int staged;
  __shared__ int poller, passed;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int B = gridDim.x, nw = B * W, my = warp * B + blockIdx.x;
  if (threadIdx.x == 0) {
    for (int i = 0; i < W * S; ++i)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bars[i])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    blk_sq[0] = blk_sq[1] = 0.f;
    blk_cnt = 0;
    claim = -1;
    poller = passed = -1;
    staged = -1;
  }
  __syncthreads();
  unsigned char* ring = smem + (long)warp * S * PB;
  bf16* xbuf = reinterpret_cast<bf16*>(smem + W * S * PB);  // [I]
  const unsigned bar0 = smem_addr(&bars[warp * S]);
  It prod{P.pg_begin, my, 0};
  normalize(prod, P, my);
  if (lane == 0)
    for (int s = 0; s < S && prod.pg < P.pg_end; ++s) {
      issue<PB>(prod, P, ring + s * PB, bar0 + 8 * s);
      advance<PB>(prod, P, my, nw);
    }
  unsigned cons = 0;
  // The next piece: wait for it, copy the lane's share into registers, refill the slot (its
  // reads are done: every loaded word feeds `dep`, which must be computed before the warp's
  // barrier), then `use` computes from the registers.
  auto consume = [&](bool keys, auto&& use) {
    const int s = cons % S;
    wait_bar(bar0 + 8 * s, (cons / S) & 1);
    uint4 b[NU];
    if (P.skip & 2)
#pragma unroll
      for (int j = 0; j < NU; ++j) b[j] = make_uint4(0, 0, 0, 0);
    else if (keys)
      load_keys<NU>(ring + s * PB, b, lane);
    else
      load_gemv<NU>(ring + s * PB, b, lane);
    // One word of each 16-byte load (a load returns all its words at once), folded as a tree:
    // a serial chain of 64 xors cost the warp hundreds of cycles a piece.
    unsigned d[NU];
#pragma unroll
    for (int j = 0; j < NU; ++j) d[j] = b[j].x;
#pragma unroll
    for (int w = 1; w < NU; w *= 2)
#pragma unroll
      for (int j = 0; j + w < NU; j += 2 * w) d[j] ^= d[j + w];
    const unsigned dep = d[0];
    asm volatile("" ::"r"(dep) : "memory");
    __syncwarp();
    if (lane == 0 && prod.pg < P.pg_end) {
      issue<PB>(prod, P, ring + s * PB, bar0 + 8 * s);
      advance<PB>(prod, P, my, nw);
    }
    if (!(P.skip & 1)) use(b);
    ++cons;
  };
  const float qscale = rsqrtf((float)D) * LOG2E;
  for (int pg = P.pg_begin; pg < P.pg_end; ++pg) {
    const int l = pg / NP, p = pg % NP;
    if (P.wait && pg > 0) {
      if (P.poll == 0) {
        while (ld_acquire(P.done + pg - 1) < B) __nanosleep(P.sleep_ns);
      } else {  // the first warp of the block to get here polls; the others wait on shared memory
        int mine = 0;
        if (lane == 0) mine = atomicMax(&poller, pg) < pg;
        mine = __shfl_sync(~0u, mine, 0);
        if (mine) {
          while (ld_acquire(P.done + pg - 1) < B) {
          }
          if (lane == 0) atomicMax(&passed, pg);
        } else {
          while (*(volatile int*)&passed < pg) __nanosleep(P.sleep_ns);
        }
        __syncwarp();
        (void)ld_acquire(P.done + pg - 1);
      }
    }
    // The phase's input, scaled by its norm, staged once per block as bf16 (STAGE 1: by every
    // thread of the block, then a block barrier; STAGE 0: by the first warp past the wait while
    // the others spin). Nothing reads the buffer any more: every warp of the block has finished
    // the phase before (the counter says so).
    if (p != 1) {
      const int n = p == 4 ? I : H;
      const float* x = p == 0 ? P.xs + (long)l * H : p == 2 ? P.att + (long)l * H
                     : p == 3 ? P.xm + (long)l * H : P.g + (long)l * I;
      const bf16* nrm = p == 0 ? P.n1 + (long)l * H : p == 3 ? P.n2 + (long)l * H : nullptr;
      auto put = [&](int k) {  // 8 elements from k
        const float rs = nrm ? rsqrtf(__ldcg(P.sq + pg) / H + EPS) : 1.f;
        const float4 a = __ldcg(reinterpret_cast<const float4*>(x + k));
        const float4 c = __ldcg(reinterpret_cast<const float4*>(x + k + 4));
        float v[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
        if (nrm) {
          float nv[8];
          unpack8(__ldg(reinterpret_cast<const uint4*>(nrm + k)), nv);
#pragma unroll
          for (int i = 0; i < 8; ++i) v[i] *= nv[i] * rs;
        }
        __align__(16) bf16 o[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) o[i] = __float2bfloat16(v[i]);
        *reinterpret_cast<uint4*>(xbuf + k) = *reinterpret_cast<const uint4*>(o);
      };
      if (STAGE == 1) {
        for (int k = threadIdx.x * 8; k < n; k += W * 256) put(k);
        __syncthreads();
      } else {
        int mine = 0;
        if (lane == 0) mine = atomicMax(&claim, pg) < pg;
        mine = __shfl_sync(~0u, mine, 0);
        if (mine) {
#pragma unroll 4
          for (int k = lane * 8; k < n; k += 256) put(k);
          __syncwarp();
          __threadfence_block();
          if (lane == 0) staged = pg;
        } else {
          while (staged < pg) __nanosleep(32);
          __threadfence_block();
        }
        __syncwarp();
      }
    }
    float mysq = 0.f;
    const int items = n_items(p, P.nchunk);
    for (int r = my; r < items; r += nw) {
      if (p == 0 || p == 2) {
        float acc = 0.f;
        for (int j = 0; j < G::ROWP; ++j)
          consume(false, [&](const uint4 (&s)[NU]) { acc += gemv_piece<NU>(s, xbuf + j * G::COLS, G::COLS, lane); });
        acc = warp_sum(acc);
        if (lane == 0) {
          if (p == 0) {
            P.qkv[(long)l * QKV + r] = acc;
          } else {
            const float v = P.xs[(long)l * H + r] + acc;
            P.xm[(long)l * H + r] = v;
            mysq += v * v;
          }
        }
      } else if (p == 1) {
        const int h = r / P.nchunk, c = r % P.nchunk;
        float q[4];
        const float4 q4 = __ldcg(reinterpret_cast<const float4*>(P.qkv + (long)l * QKV + h * D + 4 * lane));
        q[0] = q4.x * qscale, q[1] = q4.y * qscale, q[2] = q4.z * qscale, q[3] = q4.w * qscale;
        float m = -INFINITY, lsum = 0.f, acc[4] = {0.f, 0.f, 0.f, 0.f};
        for (int sub = 0; sub < CHUNK / KPP; ++sub) {
          float pr = 0.f;
          consume(true, [&](const uint4 (&s)[NU]) {
            const float sc = scores<KPP, NU>(s, q, lane);
            const float mn = fmaxf(m, warp_max(sc));
            pr = exp2f(sc - mn);
            const float corr = exp2f(m - mn);
            lsum = lsum * corr + warp_sum(lane < KPP ? pr : 0.f);
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[i] *= corr;
            m = mn;
          });
          consume(true, [&](const uint4 (&s)[NU]) {
#pragma unroll
            for (int j = 0; j < KPP; ++j) {
              const float pj = __shfl_sync(~0u, pr, j);
              float v[4];
              unpack4(key_of(s, j), v);
#pragma unroll
              for (int i = 0; i < 4; ++i) acc[i] = fmaf(pj, v[i], acc[i]);
            }
          });
        }
        float* part = P.ws + (((long)l * NH + h) * P.nchunk + c) * (D + 4);
        *reinterpret_cast<float4*>(part + 4 + 4 * lane) = make_float4(acc[0], acc[1], acc[2], acc[3]);
        if (lane == 0) part[0] = m, part[1] = lsum;
        __threadfence();
        int old = 0;
        if (lane == 0) old = atomicAdd(P.att_cnt + l * NH + h, 1);
        old = __shfl_sync(~0u, old, 0);
        if (old == P.nchunk - 1) {  // the last chunk of head h: merge them all
          __threadfence();
          const float* ws = P.ws + ((long)l * NH + h) * P.nchunk * (D + 4);
          float M = -INFINITY, L = 0.f, o[4] = {0.f, 0.f, 0.f, 0.f};
          for (int cc = 0; cc < P.nchunk; ++cc) {
            const float mc = __ldcg(ws + cc * (D + 4)), lc = __ldcg(ws + cc * (D + 4) + 1);
            const float4 a = __ldcg(reinterpret_cast<const float4*>(ws + cc * (D + 4) + 4 + 4 * lane));
            const float mn = fmaxf(M, mc), f0 = exp2f(M - mn), f1 = exp2f(mc - mn);
            L = L * f0 + lc * f1;
            o[0] = o[0] * f0 + a.x * f1, o[1] = o[1] * f0 + a.y * f1;
            o[2] = o[2] * f0 + a.z * f1, o[3] = o[3] * f0 + a.w * f1;
            M = mn;
          }
          *reinterpret_cast<float4*>(P.att + (long)l * H + h * D + 4 * lane) =
              make_float4(o[0] / L, o[1] / L, o[2] / L, o[3] / L);
        }
      } else if (p == 3) {
        float a0 = 0.f, a1 = 0.f;
        for (int j = 0; j < 2 * G::ROWP; ++j)
          consume(false, [&](const uint4 (&s)[NU]) {
            const float v = gemv_piece<NU>(s, xbuf + (j % G::ROWP) * G::COLS, G::COLS, lane);
            if (j < G::ROWP)
              a0 += v;
            else
              a1 += v;
          });
        a0 = warp_sum(a0);
        a1 = warp_sum(a1);
        if (lane == 0) P.g[(long)l * I + r] = a0 / (1.f + __expf(-a0)) * a1;
      } else {
        float acc = 0.f;
        for (int j = 0; j < G::DOWNP; ++j)
          consume(false, [&](const uint4 (&s)[NU]) {
            acc += gemv_piece<NU>(s, xbuf + j * G::COLS, I - j * G::COLS, lane);
          });
        acc = warp_sum(acc);
        if (lane == 0) {
          const float v = P.xm[(long)l * H + r] + acc;
          P.xs[(long)(l + 1) * H + r] = v;
          mysq += v * v;
        }
      }
    }
    // Phase done: the block's last warp adds the block's squares and counts the block in.
    if (lane == 0) {
      __threadfence();
      if (p == 2 || p == 4) atomicAdd(&blk_sq[pg & 1], mysq);
      __threadfence_block();
      const int old = atomicAdd(&blk_cnt, 1);
      if (old == W * (pg - P.pg_begin + 1) - 1) {
        __threadfence_block();
        if (p == 2 || p == 4) {
          atomicAdd(P.sq + pg + 1, atomicExch(&blk_sq[pg & 1], 0.f));
        }
        __threadfence();
        atomicAdd(P.done + pg, 1);
      }
    }
  }
}

// ---------------------------------------------------------------- naive references
__global__ void fill(bf16* p, long n, unsigned seed, float amp) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = __float2bfloat16(amp * ((h & 0xffff) / 32768.f - 1.f));
  }
}
__global__ void init_x(float* x) {
  for (int i = threadIdx.x; i < H; i += blockDim.x) x[i] = sinf(0.37f * i) + 0.1f;
}
__global__ void ref_sumsq(const float* x, int n, float* out) {
  __shared__ float red[32];
  float s = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i] * x[i];
  s = warp_sum(s);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0;
    for (int i = 0; i < blockDim.x / 32; ++i) t += red[i];
    *out = t;
  }
}
// y[row] = sum_k W[row,k] * x[k] * (nw ? nw[k] * rsqrt(*sq/n + eps) : 1)
__global__ void ref_gemv(const bf16* W, long ld, int n, int rows, const float* x, const bf16* nw,
                         const float* sq, float* y) {
  const int row = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float rs = nw ? rsqrtf(*sq / n + EPS) : 1.f;
  float acc = 0;
  for (int k = lane; k < n; k += 32)
    acc += __bfloat162float(W[row * ld + k]) * x[k] * (nw ? __bfloat162float(nw[k]) * rs : 1.f);
  acc = warp_sum(acc);
  if (lane == 0) y[row] = acc;
}
__global__ void ref_add(const float* a, const float* b, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a[i] + b[i];
}
__global__ void ref_swiglu(const float* gu, float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < I) y[i] = gu[i] / (1.f + expf(-gu[i])) * gu[i + I];
}
// One block (128 threads) per head, keys in order, fp32.
__global__ void ref_attn(const float* qkv, const bf16* kc, const bf16* vc, int ctx, float* out) {
  __shared__ float red[4];
  const int h = blockIdx.x, d = threadIdx.x;
  const float q = qkv[h * D + d] / sqrtf((float)D);
  float m = -INFINITY, l = 0, acc = 0;
  for (int t = 0; t < ctx; ++t) {
    float s = warp_sum(q * __bfloat162float(kc[((long)h * ctx + t) * D + d]));
    if (d % 32 == 0) red[d / 32] = s;
    __syncthreads();
    s = red[0] + red[1] + red[2] + red[3];
    __syncthreads();
    const float mn = fmaxf(m, s), c = expf(m - mn), pr = expf(s - mn);
    l = l * c + pr;
    acc = acc * c + pr * __bfloat162float(vc[((long)h * ctx + t) * D + d]);
    m = mn;
  }
  out[h * D + d] = acc / l;
}

// ---------------------------------------------------------------- host
struct Model {
  int L, ctx;
  bf16 *wqkv, *wo, *wgu, *wd, *kc, *vc, *n1, *n2;
};
struct Acts {
  float *xs, *qkv, *att, *xm, *g, *ws, *sq;
  int *att_cnt, *done;
};

template <class T>
T* alloc(long n) {
  T* p;
  CK(cudaMalloc(&p, n * sizeof(T)));
  return p;
}

Model make_model(int L, int ctx) {
  Model m{L, ctx};
  const long nq = (long)L * QKV * LD1, no = (long)L * H * LD1, ng = (long)L * 2 * I * LD1,
             nd = (long)L * H * LD2, nk = (long)L * NH * ctx * D;
  m.wqkv = alloc<bf16>(nq), m.wo = alloc<bf16>(no), m.wgu = alloc<bf16>(ng), m.wd = alloc<bf16>(nd);
  m.kc = alloc<bf16>(nk), m.vc = alloc<bf16>(nk);
  m.n1 = alloc<bf16>((long)L * H), m.n2 = alloc<bf16>((long)L * H);
  fill<<<2048, 256>>>(m.wqkv, nq, 1, 0.03f);
  fill<<<2048, 256>>>(m.wo, no, 2, 0.03f);
  fill<<<2048, 256>>>(m.wgu, ng, 3, 0.03f);
  fill<<<2048, 256>>>(m.wd, nd, 4, 0.02f);
  fill<<<2048, 256>>>(m.kc, nk, 5, 1.f);
  fill<<<2048, 256>>>(m.vc, nk, 6, 1.f);
  fill<<<64, 256>>>(m.n1, (long)L * H, 7, 1.f);
  fill<<<64, 256>>>(m.n2, (long)L * H, 8, 1.f);
  CK(cudaDeviceSynchronize());
  return m;
}
Acts make_acts(int L, int ctx) {
  Acts a;
  const int nchunk = ctx / CHUNK;
  a.xs = alloc<float>((long)(L + 1) * H), a.qkv = alloc<float>((long)L * QKV), a.att = alloc<float>((long)L * H);
  a.xm = alloc<float>((long)L * H), a.g = alloc<float>((long)L * I);
  a.ws = alloc<float>((long)L * NH * nchunk * (D + 4));
  a.sq = alloc<float>(L * NP + 1), a.att_cnt = alloc<int>(L * NH), a.done = alloc<int>(L * NP);
  return a;
}
void reset(const Model& m, const Acts& a, cudaStream_t st) {
  CK(cudaMemsetAsync(a.sq, 0, (m.L * NP + 1) * sizeof(float), st));
  CK(cudaMemsetAsync(a.att_cnt, 0, m.L * NH * sizeof(int), st));
  CK(cudaMemsetAsync(a.done, 0, m.L * NP * sizeof(int), st));
  init_x<<<1, 256, 0, st>>>(a.xs);
  ref_sumsq<<<1, 256, 0, st>>>(a.xs, H, a.sq);
}
int g_poll = 0, g_sleep = 20;
Params params(const Model& m, const Acts& a) {
  Params P{m.wqkv, m.wo, m.wgu, m.wd, m.kc, m.vc, m.n1, m.n2, m.ctx, m.ctx / CHUNK,
           a.xs, a.qkv, a.att, a.xm, a.g, a.ws, a.sq, a.att_cnt, a.done, 0, m.L * NP, 1, 0, g_poll, g_sleep};
  return P;
}

int g_sms;
template <int W, int S, int PB>
void launch(Params P, bool persistent, cudaStream_t st) {
  const int smem = W * S * PB + I * 2;
  CK(cudaFuncSetAttribute(dataflow<W, S, PB>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  // The smallest carveout that holds the ring, so that x stays in L1 (percent of 228 KiB).
  const int carve = std::min(100, (smem + 1024 + 228 * 1024 / 100 - 1) / (228 * 1024 / 100) + 1);
  CK(cudaFuncSetAttribute(dataflow<W, S, PB>, cudaFuncAttributePreferredSharedMemoryCarveout, carve));
  if (persistent) {
    void* args[] = {&P};
    CK(cudaLaunchCooperativeKernel((void*)dataflow<W, S, PB>, g_sms, W * 32, args, smem, st));
  } else {  // the chain: one launch per phase, stream order as the dependency
    const int b = P.pg_begin, e = P.pg_end;
    for (int pg = b; pg < e; ++pg) {
      P.pg_begin = pg, P.pg_end = pg + 1, P.wait = 0;
      dataflow<W, S, PB><<<g_sms, W * 32, smem, st>>>(P);
    }
  }
  CK(cudaGetLastError());
}

// Reference chain; returns the final residual stream.
std::vector<float> reference(const Model& m, const Acts& a) {
  float *y = alloc<float>(2 * I), *sq = alloc<float>(1), *x = alloc<float>(H), *xm = alloc<float>(H),
        *at = alloc<float>(H), *g = alloc<float>(I);
  init_x<<<1, 256>>>(x);
  ref_sumsq<<<1, 256>>>(x, H, sq);
  for (int l = 0; l < m.L; ++l) {
    ref_gemv<<<QKV / 8, 256>>>(m.wqkv + (long)l * QKV * LD1, LD1, H, QKV, x, m.n1 + (long)l * H, sq, y);
    ref_attn<<<NH, D>>>(y, m.kc + (long)l * NH * m.ctx * D, m.vc + (long)l * NH * m.ctx * D, m.ctx, at);
    ref_gemv<<<H / 8, 256>>>(m.wo + (long)l * H * LD1, LD1, H, H, at, nullptr, nullptr, y);
    ref_add<<<H / 256, 256>>>(x, y, xm, H);
    ref_sumsq<<<1, 256>>>(xm, H, sq);
    ref_gemv<<<2 * I / 8, 256>>>(m.wgu + (long)l * 2 * I * LD1, LD1, H, 2 * I, xm, m.n2 + (long)l * H, sq, y);
    ref_swiglu<<<(I + 255) / 256, 256>>>(y, g);
    ref_gemv<<<H / 8, 256>>>(m.wd + (long)l * H * LD2, LD2, I, H, g, nullptr, nullptr, y);
    ref_add<<<H / 256, 256>>>(xm, y, x, H);
    ref_sumsq<<<1, 256>>>(x, H, sq);
  }
  CK(cudaDeviceSynchronize());
  std::vector<float> out(H);
  CK(cudaMemcpy(out.data(), x, H * 4, cudaMemcpyDeviceToHost));
  return out;
}

template <int W, int S, int PB>
void check(const Model& m, const Acts& a, const std::vector<float>& ref, bool persistent, int wait) {
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  CK(cudaMemset(a.xs + H, 0, (long)m.L * H * 4));
  reset(m, a, st);
  Params P = params(m, a);
  P.wait = wait;
  launch<W, S, PB>(P, persistent, st);
  CK(cudaStreamSynchronize(st));
  std::vector<float> out(H);
  CK(cudaMemcpy(out.data(), a.xs + (long)m.L * H, H * 4, cudaMemcpyDeviceToHost));
  double err = 0, mx = 0;
  for (int i = 0; i < H; ++i) err = std::max(err, (double)std::fabs(out[i] - ref[i])), mx = std::max(mx, (double)std::fabs(ref[i]));
  std::printf("check W=%d S=%d PB=%d %-10s layers %d ctx %d: max |err| %.3g of max |ref| %.3g -> %s\n", W, S, PB,
              persistent ? "persistent" : "chain", m.L, m.ctx, err, mx, err <= 1e-2 * mx ? "PASS" : "FAIL");
  CK(cudaStreamDestroy(st));
}

template <int W, int S, int PB>
void time_it(const Model& m, const Acts& a, const char* mode, double bytes) {
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> t;
  const bool persistent = mode[0] != 'c';
  for (int rep = 0; rep < 7; ++rep) {
    reset(m, a, st);
    Params P = params(m, a);
    P.wait = mode[0] == 'p';
    P.skip = mode[0] == 's' ? 1 : mode[0] == 'z' ? 3 : 0;
    CK(cudaEventRecord(e0, st));
    launch<W, S, PB>(P, persistent, st);
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (rep > 0) t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  const double us = t[t.size() / 2] * 1e3;
  std::printf("time W=%2d S=%d PB=%4d %-12s ctx %5d: %9.1f us, %7.2f us/layer, %5.3f TB/s (min %.1f max %.1f)\n", W, S, PB,
              mode, m.ctx, us, us / m.L, bytes / us * 1e-6, t.front() * 1e3, t.back() * 1e3);
  CK(cudaStreamDestroy(st));
}

template <int W, int S, int PB>
void polls(const Model& m, const Acts& a, double bytes) {
  const int cfg[][2] = {{0, 20}, {0, 200}, {0, 1000}, {1, 20}, {1, 200}, {0, 20}};
  for (const auto& c : cfg) {
    g_poll = c[0], g_sleep = c[1];
    std::printf("poll %d sleep %4d ns: ", g_poll, g_sleep);
    time_it<W, S, PB>(m, a, "persistent", bytes);
  }
  g_poll = 0, g_sleep = 20;
}
template <int W, int S, int PB>
void all_modes(const Model& m, const Acts& a, double bytes) {
  time_it<W, S, PB>(m, a, "persistent", bytes);
  time_it<W, S, PB>(m, a, "no-wait", bytes);
  time_it<W, S, PB>(m, a, "chain", bytes);
  time_it<W, S, PB>(m, a, "stream+copy", bytes);
  time_it<W, S, PB>(m, a, "zstream", bytes);
}

int main(int argc, char** argv) {
  CK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
  const int L = argc > 1 ? std::atoi(argv[1]) : 32;
  if (argc > 2) {  // one chain of a layer's 5 phases, for a profiler
    Model m = make_model(2, 2048);
    Acts a = make_acts(2, 2048);
    reset(m, a, 0);
    Params P = params(m, a);
    P.pg_end = NP;
    if (argv[2][0] == '1') launch<16, 1, 8192>(P, false, 0);
    if (argv[2][0] == '2') launch<16, 3, 4096>(P, false, 0);
    CK(cudaDeviceSynchronize());
    return 0;
  }
  {
    Model m = make_model(2, 256);
    Acts a = make_acts(2, 256);
    const std::vector<float> ref = reference(m, a);
    check<16, 1, 8192>(m, a, ref, true, 1);
    check<16, 3, 4096>(m, a, ref, true, 1);
    check<16, 3, 4096>(m, a, ref, false, 0);
    g_poll = 1;
    check<16, 1, 8192>(m, a, ref, true, 1);
    check<8, 3, 8192>(m, a, ref, true, 1);
    g_poll = 0;
    check<10, 2, 8192>(m, a, ref, true, 1);
    check<12, 2, 8192>(m, a, ref, true, 1);
    check<8, 3, 8192>(m, a, ref, true, 1);
  }
  for (int ctx : {2048}) {
    Model m = make_model(L, ctx);
    Acts a = make_acts(L, ctx);
    const double wbytes = 2.0 * ((double)QKV * H + (double)H * H + 2.0 * I * H + (double)H * I);
    const double bytes = L * (wbytes + 2.0 * 2 * NH * (double)ctx * D);
    std::printf("ctx %d: %.1f MB a layer (W %.1f, cache %.1f)\n", ctx, bytes / L / 1e6, wbytes / 1e6,
                (bytes / L - wbytes) / 1e6);
    polls<16, 1, 8192>(m, a, bytes);
    polls<12, 2, 8192>(m, a, bytes);
    polls<8, 3, 8192>(m, a, bytes);
    CK(cudaFree(m.wqkv)); CK(cudaFree(m.wo)); CK(cudaFree(m.wgu)); CK(cudaFree(m.wd));
    CK(cudaFree(m.kc)); CK(cudaFree(m.vc));
  }
  return 0;
}
