// Skinny GEMM, one fused row split over a block's warps: split_gemv_kernel (skinny_gemm.cu's
// comment), its shared tail and its grids.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/kernels/pdl.cuh"
#include "gpubench/kernels/skinny_gemm_common.cuh"

namespace gpubench::skinny {

namespace {

constexpr int split_rows(int pieces) {
  return pieces == 1 ? 16 : pieces == 2 ? 8 : pieces <= 4 ? 4 : 2;
}
constexpr int kSplitMaxPieces = 6;       // x's pieces a thread holds (packed: 24 registers)
constexpr int kSplitMaxNormPieces = 4;   // with the norm, as floats x * nw (32 registers)
constexpr int kSplitMaxFloatPieces = 3;  // without: unpacked once up to here, else at every use

// One level of transpose_sum: the first n values of v, halved across lanes `off` apart.
template <int N, int n, int off>
__device__ __forceinline__ void transpose_level(float (&v)[N], int lane) {
  if constexpr (n > 1) {
    const bool hi = (lane & off) != 0;
#pragma unroll
    for (int i = 0; i < n / 2; ++i) {
      const float send = hi ? v[i] : v[i + n / 2];
      const float keep = hi ? v[i + n / 2] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, off);
    }
    transpose_level<N, n / 2, off / 2>(v, lane);
  }
}

// The sum over the warp's lanes of v[i] for i = lane / (32 / N) (N a power of two, <= 32): one
// butterfly that halves the values at each of its first log2(N) levels.
template <int N>
__device__ __forceinline__ float transpose_sum(float (&v)[N], int lane) {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "a power of two up to 32");
  transpose_level<N, N, 16>(v, lane);
  float s = v[0];
#pragma unroll
  for (int off = 16 / N; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
  return s;
}

// SkinnyFusion::shared_tail (kTail): block b takes steps b * own .. (b + 1) * own - 1 of the
// GEMV's `steps` (a step: a warp's split_rows() rows), then steps from the pool of the rest
// (pool0..), one at a time through an atomic counter, up to `most`: SMs that stream faster take
// more of the tail. ctr[0] is the pool's counter, ctr[1] counts the blocks done; the last block
// sets both back to 0.
struct SplitTail {
  unsigned* ctr = nullptr;
  int own = 0, most = 0;
  std::int64_t pool0 = 0, steps = 0;
};
__device__ __forceinline__ unsigned grab(unsigned* ctr) {
  unsigned v;
  asm volatile("atom.global.add.u32 %0, [%1], 1;" : "=r"(v) : "l"(ctr) : "memory");
  return v;
}

// NT threads a block: 256 (two blocks an SM) or 512 (one, SkinnyFusion::wide_block); thread
// `tid` then holds x's pieces tid + NT j. Dynamic shared memory: with kStage first the staged
// step (uint4 [RS][KP][NT]), then float [NT/32][cap] (the warps' sums of the block's rows, cap
// rows each) and [NT/32] (their x^2); with kTail then int [most] (the pool steps taken).
template <class T, int KP, bool kNorm, bool kPair, int NT = kVecThreads, bool kTail = false,
          bool kStage = false>
__global__ void __launch_bounds__(NT, NT == kVecThreads ? kFusedBlocksPerSm : 1)
    split_gemv_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                      T* __restrict__ y, std::int64_t out, std::int64_t in, std::int64_t ldw,
                      SkinnyFusion f, int cap, SplitTail d) {
  if (!f.late_dependents) pdl_trigger();
  static_assert(!kNorm || KP <= kSplitMaxNormPieces, "the norm keeps x * nw as floats");
  constexpr int RS = split_rows(KP);  // W rows a step
  constexpr int RW = kPair ? 2 : 1;   // W rows a group
  constexpr int RG = RS / RW;         // groups a step
  constexpr bool kFloatX = kNorm || KP <= kSplitMaxFloatPieces;
  constexpr unsigned kFull = 0xffffffffu;
  constexpr int kW = NT / 32;  // warps a block
  // kStage (SkinnyFusion::stage_next): the block's second step of W rows first ([RS][KP][NT]
  // pieces, filled by cp.async before the wait), then the warps' sums.
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr std::size_t kStageBytes =
      kStage ? static_cast<std::size_t>(RS) * KP * NT * sizeof(uint4) : 0;
  [[maybe_unused]] uint4* const staged = reinterpret_cast<uint4*>(smem);
  float* const part = reinterpret_cast<float*>(smem + kStageBytes);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const std::int64_t pieces = in / 8;
  const std::int64_t pair = out / 2;  // kPair: rows g and g + pair (SwiGlu: gate and up)
  const std::int64_t groups = kPair ? pair : out;
  std::int64_t g0 = blockIdx.x * groups / gridDim.x;
  std::int64_t g1 = (blockIdx.x + 1) * groups / gridDim.x;
  // kTail: the block's pool steps in the order taken, -1 while thread 0's grab is on its way
  // (the counter is this kernel's alone: taken before the wait).
  [[maybe_unused]] volatile int* tasks = nullptr;
  if constexpr (kTail) {
    g0 = static_cast<std::int64_t>(blockIdx.x) * d.own * RG;
    g1 = std::min<std::int64_t>(g0 + static_cast<std::int64_t>(d.own) * RG, groups);
    tasks = reinterpret_cast<volatile int*>(part + kW * (cap + 1));
    if (tid == 0) {
      tasks[0] = static_cast<int>(d.pool0 + grab(d.ctr));
      for (int k = 1; k < d.most; ++k) tasks[k] = -1;
    }
    __syncthreads();
  }
  // kTail: the block's own rows, whose warp sums come before its pool steps'.
  [[maybe_unused]] const int own_rows = static_cast<int>((g1 - g0) * RW);
  bool has[KP];  // whether this thread holds piece j
#pragma unroll
  for (int j = 0; j < KP; ++j) has[j] = tid + NT * j < pieces;
  const T* wt = w + tid * 8;

  // The step's W rows: groups s.., rows past the block's range zeros.
  // fn(i, j, ok, p) for piece j of each row i of the step at groups s..: p its address, ok
  // whether the row is below `bound` and the thread holds piece j. Through this one helper the
  // compiler steps each row's pointer by ldw's bytes; with the loops written out in load_step and
  // stage_step it re-reads W's base from the constant bank and shifts a row offset for each load,
  // a longer loop (measured slower on Hopper: docs/DECISIONS.md). The zero fill and the row tests
  // stay on full steps too: skipping them measured slower. Time the step after any change here.
  auto each_piece = [&](std::int64_t s, std::int64_t bound, auto&& fn) {
#pragma unroll
    for (int i = 0; i < RS; ++i) {
      const std::int64_t g = s + i / RW;
      const bool row = g < bound;
      const T* wr = wt + (g + (i % RW) * pair) * ldw;
#pragma unroll
      for (int j = 0; j < KP; ++j) fn(i, j, row && has[j], wr + NT * 8 * j);
    }
  };
  auto load_step = [&](std::int64_t s, uint4(&wv)[RS][KP], std::int64_t bound) {
    each_piece(s, bound, [&](int i, int j, bool ok, const T* p) {
      wv[i][j] = ok ? load_weight(p) : make_uint4(0, 0, 0, 0);
    });
  };
  // kStage: the step after the first into shared memory (16 bytes a thread and piece).
  auto stage_step = [&](std::int64_t s, std::int64_t bound) {
    each_piece(s, bound, [&](int i, int j, bool ok, const T* p) {
      copy_weight(staged + (i * KP + j) * NT + tid, ok ? p : w, ok ? 16u : 0u);
    });
    cp_async_commit();
  };
  uint4 wv[RS][KP];
  [[maybe_unused]] bool stage_pending = kStage && f.weights_ready && g0 + RG < g1;
  if (f.weights_ready) load_step(g0, wv, g1);
  if constexpr (kStage)
    if (stage_pending) stage_step(g0 + RG, g1);
  pdl_wait();
  if (!f.weights_ready) load_step(g0, wv, g1);

  // This thread's pieces of x (times the norm's weight), and of x^2.
  [[maybe_unused]] float xf[kFloatX ? KP : 1][8];
  [[maybe_unused]] uint4 xp[kFloatX ? 1 : KP];
  [[maybe_unused]] float squares = 0;
  const T* xt = x + tid * 8;
  const T* nwt = static_cast<const T*>(f.norm_weight) + tid * 8;
#pragma unroll
  for (int j = 0; j < KP; ++j) {
    const uint4 v =
        has[j] ? __ldg(reinterpret_cast<const uint4*>(xt + NT * 8 * j)) : make_uint4(0, 0, 0, 0);
    if constexpr (kFloatX) {
      unpack8<T>(v, xf[j]);
      if constexpr (kNorm)
        norm_piece<T, true>(has[j] ? __ldg(reinterpret_cast<const uint4*>(nwt + NT * 8 * j))
                                   : make_uint4(0, 0, 0, 0),
                            xf[j], squares);
    } else {
      xp[j] = v;
    }
  }
  // The residual stream's value of the thread's first group, read now rather than at the end.
  const bool early_res = f.epilogue == SkinnyEpilogue::Residual && g0 + tid < g1;
  const float res0 = early_res ? to_float(y[g0 + tid]) : 0.0f;
  if constexpr (kNorm) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) squares += __shfl_xor_sync(kFull, squares, off);
    if (lane == 0) part[kW * cap + warp] = squares;
  }

  // The products of a step (piece(i, j): row i's piece j, from wv or the staged step): the
  // warp's sum of each of its RS rows, lane i * (32 / RS) holding row i.
  auto from_regs = [&](int i, int j) { return wv[i][j]; };
  auto from_stage = [&](int i, int j) { return staged[(i * KP + j) * NT + tid]; };
  auto products = [&](auto&& piece) {
    float acc[RS];
#pragma unroll
    for (int i = 0; i < RS; ++i) acc[i] = 0;
#pragma unroll
    for (int j = 0; j < KP; ++j) {
      float xj[8];
      if constexpr (kFloatX) {
#pragma unroll
        for (int e = 0; e < 8; ++e) xj[e] = xf[j][e];
      } else {
        unpack8<T>(xp[j], xj);
      }
#pragma unroll
      for (int i = 0; i < RS; ++i) acc[i] = dot_piece<T>(piece(i, j), xj, acc[i]);
    }
    return transpose_sum<RS>(acc, lane);
  };
  auto keep = [&](std::int64_t s, float v) {
    const int i = lane / (32 / RS);  // the step's row this lane holds
    if (lane % (32 / RS) == 0 && s + i / RW < g1) part[warp * cap + (s - g0) * RW + i] = v;
  };
  for (std::int64_t s = g0; s < g1;) {
    keep(s, products(from_regs));
    s += RG;
    if (s >= g1) break;
    if constexpr (kStage) {
      if (stage_pending) {
        // Step s is staged: the one after it goes into registers before its products.
        stage_pending = false;
        if (s + RG < g1) load_step(s + RG, wv, g1);
        cp_async_wait<0>();
        keep(s, products(from_stage));
        s += RG;
        if (s >= g1) break;
        continue;
      }
    }
    load_step(s, wv, g1);
  }
  // kTail: pool steps, every warp the same ones (their rows' sums after the block's own). Thread
  // 0 asks for the next step as its warp starts one and publishes it after the products, so the
  // counter's round trip is not waited for.
  [[maybe_unused]] int taken = 0;
  if constexpr (kTail) {
    for (; taken < d.most; ++taken) {
      int t;
      while ((t = tasks[taken]) < 0) continue;  // thread 0 of this block writes it
      if (t >= d.steps) break;
      const bool grabber = tid == 0 && taken + 1 < d.most;
      const unsigned next = grabber ? grab(d.ctr) : 0u;
      load_step(static_cast<std::int64_t>(t) * RG, wv, groups);
      const float v = products(from_regs);
      const int i = lane / (32 / RS);
      if (lane % (32 / RS) == 0) part[warp * cap + own_rows + taken * RS + i] = v;
      if (grabber) tasks[taken + 1] = static_cast<int>(d.pool0 + next);
    }
  }
  __syncthreads();

  [[maybe_unused]] float rstd = 0;
  if constexpr (kNorm) {
    float sq = 0;
#pragma unroll
    for (int i = 0; i < kW; ++i) sq += part[kW * cap + i];
    rstd = rsqrtf(sq / static_cast<float>(in) + f.eps);
  }
  for (std::int64_t lg = tid; lg < g1 - g0; lg += NT) {
    float acc[RW];
#pragma unroll
    for (int r = 0; r < RW; ++r) {
      float sum = 0;
#pragma unroll
      for (int i = 0; i < kW; ++i) sum += part[i * cap + lg * RW + r];
      if constexpr (kNorm) sum *= rstd;
      acc[r] = sum;
    }
    const std::int64_t grp = g0 + lg;
    float res = 0;
    if (f.epilogue == SkinnyEpilogue::Residual) res = lg == tid ? res0 : to_float(y[grp]);
    finish_group<T, RW>(f, bias, y, grp, pair, acc, res);
  }
  if constexpr (kTail) {
    for (int lg = tid; lg < taken * RG; lg += NT) {
      const int k = lg / RG, q = lg % RG;
      const std::int64_t grp = static_cast<std::int64_t>(tasks[k]) * RG + q;
      if (grp >= groups) continue;
      float acc[RW];
#pragma unroll
      for (int r = 0; r < RW; ++r) {
        float sum = 0;
#pragma unroll
        for (int i = 0; i < kW; ++i) sum += part[i * cap + own_rows + k * RS + q * RW + r];
        if constexpr (kNorm) sum *= rstd;
        acc[r] = sum;
      }
      const float res = f.epilogue == SkinnyEpilogue::Residual ? to_float(y[grp]) : 0.0f;
      finish_group<T, RW>(f, bias, y, grp, pair, acc, res);
    }
    if (tid == 0 && atomicAdd(d.ctr + 1, 1u) == gridDim.x - 1) {
      d.ctr[0] = 0;
      d.ctr[1] = 0;
    }
  }
}

// SkinnyFusion::shared_tail: the share of a block's steps it takes as its own (the rest from the
// pool), and the counter pairs, handed out in turn across every instance: each pair is left at
// zero by its kernel's last block, so only kernels kTailPairs launches apart share one.
constexpr int kTailOwnPercent = 80;
constexpr int kTailPairs = 4096;
__device__ unsigned g_tail_counters[2 * kTailPairs];
std::atomic<unsigned> g_tail_next{0};

// The pool's split of `groups` in steps of `step_groups` over `blocks`; own 0 where the pool
// would be empty.
SplitTail tail_split(std::int64_t groups, int step_groups, int blocks) {
  SplitTail d;
  d.steps = (groups + step_groups - 1) / step_groups;
  d.own = std::max(1, static_cast<int>(d.steps * kTailOwnPercent / 100 / blocks));
  d.pool0 = static_cast<std::int64_t>(d.own) * blocks;
  if (d.pool0 >= d.steps) return {};
  const std::int64_t share = (d.steps - d.pool0 + blocks - 1) / blocks;
  d.most = static_cast<int>(std::min<std::int64_t>(4 * share + 2, d.steps - d.pool0 + 1));
  return d;
}

// Shared memory of the kTail kernel for d: the block's own rows and its most pool steps' rows
// (their warps' sums), the warps' x^2, then the pool steps it took. 0 where d has no pool.
std::size_t tail_smem(const SplitTail& d, int step_rows, int threads) {
  if (d.own == 0) return 0;
  return threads / 32 * sizeof(float) * ((d.own + d.most) * step_rows + 1) +
         static_cast<std::size_t>(d.most) * sizeof(int);
}

// The shared tail of a block-split launch (x's pieces kp a thread, `blocks` of `threads`); own 0,
// the static split, where the pool would be empty or the kTail kernel's shared memory would pass
// its default 48 KiB. The launcher and skinny_shared_tail_applies both ask it.
SplitTail tail_plan(std::int64_t out, bool pair, int kp, int blocks, int threads) {
  const int step_rows = split_rows(kp);
  const SplitTail d = tail_split(pair ? out / 2 : out, step_rows / (pair ? 2 : 1), blocks);
  return tail_smem(d, step_rows, threads) <= 48 * 1024 ? d : SplitTail{};
}

template <class T, int KP, bool kNorm, bool kPair, int NT, bool kStage>
void launch_split_instance(const void* x, const void* w, const void* bias, void* y,
                           std::int64_t out, std::int64_t in, std::int64_t ldw,
                           const SkinnyFusion& f, int blocks, int cap, cudaStream_t stream) {
  constexpr int RS = split_rows(KP);
  constexpr std::size_t kWarpSums = NT / 32 * sizeof(float);
  // kStage: the staged step's pieces before the sums (past the default 48 KiB: opted in).
  constexpr std::size_t kStageBytes =
      kStage ? static_cast<std::size_t>(RS) * KP * NT * sizeof(uint4) : 0;
  auto opt_in = [&](auto kernel, std::size_t smem) {
    if (smem > 48 * 1024)
      GPB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
  };
  SplitTail d = f.shared_tail ? tail_plan(out, kPair, KP, blocks, NT) : SplitTail{};
  if (d.own > 0) {
    const std::size_t smem = kStageBytes + tail_smem(d, RS, NT);
    auto kernel = split_gemv_kernel<T, KP, kNorm, kPair, NT, true, kStage>;
    opt_in(kernel, smem);
    unsigned* pairs = nullptr;
    GPB_CUDA_CHECK(cudaGetSymbolAddress(reinterpret_cast<void**>(&pairs), g_tail_counters));
    d.ctr = pairs + 2 * (g_tail_next.fetch_add(1) % kTailPairs);
    const int rows = (d.own + d.most) * RS;  // the block's own and its most pool steps'
    launch_pdl(kernel, static_cast<unsigned>(blocks), NT, smem, stream, static_cast<const T*>(x),
               static_cast<const T*>(w), static_cast<const T*>(bias), static_cast<T*>(y), out, in,
               ldw, f, rows, d);
    GPB_CHECK_LAUNCH();
    return;
  }
  const std::size_t smem = kStageBytes + kWarpSums * (cap + 1);
  auto kernel = split_gemv_kernel<T, KP, kNorm, kPair, NT, false, kStage>;
  opt_in(kernel, smem);
  launch_pdl(kernel, static_cast<unsigned>(blocks), NT, smem, stream, static_cast<const T*>(x),
             static_cast<const T*>(w), static_cast<const T*>(bias), static_cast<T*>(y), out, in,
             ldw, f, cap, SplitTail{});
  GPB_CHECK_LAUNCH();
}

template <class T, int KP, bool kNorm, bool kPair, int NT = kVecThreads>
void launch_split_kernel(const void* x, const void* w, const void* bias, void* y, std::int64_t out,
                         std::int64_t in, std::int64_t ldw, const SkinnyFusion& f, int blocks,
                         int cap, cudaStream_t stream) {
  // Staged instances only where the engine asks for them (gate|up: the norm and row pairs; down:
  // neither; both on 256-thread blocks), to keep the file's compile time down.
  if constexpr (NT == kVecThreads && kNorm == kPair) {
    if (f.stage_next && f.weights_ready) {
      launch_split_instance<T, KP, kNorm, kPair, NT, true>(x, w, bias, y, out, in, ldw, f, blocks,
                                                           cap, stream);
      return;
    }
  }
  launch_split_instance<T, KP, kNorm, kPair, NT, false>(x, w, bias, y, out, in, ldw, f, blocks, cap,
                                                        stream);
}

// The block-split kernel's launch for one fused GEMV: x's pieces a thread (KP), blocks and rows a
// block (cap). blocks 0: the kernel does not take it (x's pieces past max_pieces, or the block's
// sums past its default shared memory).
struct SplitGrid {
  int kp = 0, blocks = 0, cap = 0;
};
SplitGrid split_grid(std::int64_t out, std::int64_t in, bool pair, int threads, int blocks_per_sm,
                     int max_pieces) {
  const std::int64_t pieces = (in / 8 + threads - 1) / threads;  // a thread's share of x
  const std::int64_t groups = pair ? out / 2 : out;
  if (pieces > max_pieces || groups < 1) return {};
  const int kp = pieces <= 4 ? static_cast<int>(pieces) : 6;
  const int group_rows = pair ? 2 : 1;
  const int step_groups = split_rows(kp) / group_rows;
  const std::int64_t steps = (groups + step_groups - 1) / step_groups;
  const std::int64_t blocks =
      std::min<std::int64_t>(steps, static_cast<std::int64_t>(sm_count()) * blocks_per_sm);
  const std::int64_t cap = (groups + blocks - 1) / blocks * group_rows;  // rows of a block
  if ((cap + 1) * (threads / 32) * static_cast<std::int64_t>(sizeof(float)) > 48 * 1024) return {};
  return {kp, static_cast<int>(blocks), static_cast<int>(cap)};
}

// SkinnyFusion::wide_block: one block of 512 threads an SM, x's pieces at most 3 a thread.
constexpr int kWideThreads = 512;
constexpr int kWideMaxPieces = 3;
SplitGrid wide_grid(std::int64_t out, std::int64_t in, bool pair) {
  return split_grid(out, in, pair, kWideThreads, 1, kWideMaxPieces);
}

// The block-split kernel for this fused GEMV (on 512-thread blocks with f.wide_block where they
// apply), when x's pieces fit its registers and the block's sums its default shared memory;
// false (nothing launched) otherwise.
template <class T, bool kNorm, bool kPair>
bool launch_split_typed(const void* x, const void* w, const void* bias, void* y, std::int64_t out,
                        std::int64_t in, std::int64_t ldw, const SkinnyFusion& f,
                        cudaStream_t stream) {
  if (f.wide_block) {
    const SplitGrid g = wide_grid(out, in, kPair);
    const int b = g.blocks, c = g.cap;
    switch (g.kp) {
      case 1:
        launch_split_kernel<T, 1, kNorm, kPair, kWideThreads>(x, w, bias, y, out, in, ldw, f, b, c,
                                                              stream);
        return true;
      case 2:
        launch_split_kernel<T, 2, kNorm, kPair, kWideThreads>(x, w, bias, y, out, in, ldw, f, b, c,
                                                              stream);
        return true;
      case 3:
        launch_split_kernel<T, 3, kNorm, kPair, kWideThreads>(x, w, bias, y, out, in, ldw, f, b, c,
                                                              stream);
        return true;
      default:
        break;  // not taken: the 256-thread blocks below
    }
  }
  const SplitGrid g = split_grid(out, in, kPair, kVecThreads, kFusedBlocksPerSm,
                                 kNorm ? kSplitMaxNormPieces : kSplitMaxPieces);
  if (g.blocks == 0) return false;
  const int b = g.blocks, c = g.cap;
  switch (g.kp) {
    case 1:
      launch_split_kernel<T, 1, kNorm, kPair>(x, w, bias, y, out, in, ldw, f, b, c, stream);
      break;
    case 2:
      launch_split_kernel<T, 2, kNorm, kPair>(x, w, bias, y, out, in, ldw, f, b, c, stream);
      break;
    case 3:
      launch_split_kernel<T, 3, kNorm, kPair>(x, w, bias, y, out, in, ldw, f, b, c, stream);
      break;
    case 4:
      launch_split_kernel<T, 4, kNorm, kPair>(x, w, bias, y, out, in, ldw, f, b, c, stream);
      break;
    default:
      if constexpr (!kNorm)
        launch_split_kernel<T, 6, kNorm, kPair>(x, w, bias, y, out, in, ldw, f, b, c, stream);
      break;
  }
  return true;
}

}  // namespace

bool launch_split(SkinnyDtype dtype, bool norm, bool pair, const void* x, const void* w,
                  const void* bias, void* y, std::int64_t out, std::int64_t in, std::int64_t ldw,
                  const SkinnyFusion& f, cudaStream_t stream) {
  bool launched = false;
  with_type(dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (norm && pair)
      launched = launch_split_typed<T, true, true>(x, w, bias, y, out, in, ldw, f, stream);
    else if (norm)
      launched = launch_split_typed<T, true, false>(x, w, bias, y, out, in, ldw, f, stream);
    else if (pair)
      launched = launch_split_typed<T, false, true>(x, w, bias, y, out, in, ldw, f, stream);
    else
      launched = launch_split_typed<T, false, false>(x, w, bias, y, out, in, ldw, f, stream);
  });
  return launched;
}

}  // namespace gpubench::skinny

namespace gpubench {

using namespace skinny;  // the grids above

bool skinny_wide_block_applies(int rows, std::int64_t out, std::int64_t in, const SkinnyFusion& f) {
  return rows == 1 && skinny_gemm_supported(rows, in) &&
         wide_grid(out, in, f.epilogue == SkinnyEpilogue::SwiGlu).blocks > 0;
}

bool skinny_shared_tail_applies(int rows, std::int64_t out, std::int64_t in,
                                const SkinnyFusion& f) {
  if (rows != 1 || !skinny_gemm_supported(rows, in)) return false;
  const bool pair = f.epilogue == SkinnyEpilogue::SwiGlu;
  const bool norm = f.prologue == SkinnyPrologue::RmsNorm;
  SplitGrid g = f.wide_block ? wide_grid(out, in, pair) : SplitGrid{};
  int threads = kWideThreads;
  if (g.blocks == 0) {
    g = split_grid(out, in, pair, kVecThreads, kFusedBlocksPerSm,
                   norm ? kSplitMaxNormPieces : kSplitMaxPieces);
    threads = kVecThreads;
  }
  return f.shared_tail && g.blocks > 0 && tail_plan(out, pair, g.kp, g.blocks, threads).own > 0;
}

}  // namespace gpubench
