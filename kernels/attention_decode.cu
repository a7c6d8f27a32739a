// Decode attention: one query token per sequence over its KV cache, a memory-bound stream of K and
// V. One block takes one (sequence, KV head, chunk of the context) and serves every query head of
// that KV group (up to 8 at once), so the cache is read once per group. In the block, lane groups
// of head_dim/8 lanes each own one key at a time (8 elements, 16 bytes, a lane) and run their own
// online softmax. K and V rows reach the lanes through a per-thread ring of shared-memory stages
// filled by cp.async, several steps ahead: deep memory parallelism without holding the loads in
// registers. The lane groups are merged in the block, the chunks by a second kernel (skipped
// with one chunk), launched as a programmatic dependent of the first on sm_90+ so that its
// launch overlaps the first kernel. With the step's new key and value given
// (AttentionArgs::k_new), the block whose chunk holds position q_pos0 writes them into the caches
// first, rotated by RoPE where asked, and every block rotates its queries as it loads them: RoPE
// and the cache write need no kernel of their own. With AttentionArgs::cache_ready, the blocks
// whose chunk ends before that position fill their first ring stages before waiting for the
// previous kernel. With AttentionArgs::merge_launches_next, the blocks of long chunks let the merge
// kernel (and through it the next kernel) launch part-way through their chunk.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "gpubench/kernels/attention.cuh"
#include "gpubench/kernels/device_common.cuh"
#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/kernels/pdl.cuh"

namespace gpubench {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
// The engine sizes its workspace for 64 chunks (decode_workspace_bytes(.., 64)): never ask more.
constexpr int kMaxAutoSplits = 64;
// Chunks shorter than this cost more in per-block overhead than they win in parallelism.
constexpr int kMinChunk = 64;
// Largest split count decode_attention takes (the merge keeps 3 floats a chunk in shared memory).
constexpr int kMaxSplits = 1024;
constexpr float kLog2e = 1.4426950408889634f;

// Query heads a block serves: the GQA group rounded up to 1, 2, 4 or 8 (larger groups take
// several blocks per KV head).
int heads_per_block(int group) {
  return group <= 1 ? 1 : group == 2 ? 2 : group <= 4 ? 4 : 8;
}
// Keys each lane group takes per step, and shared-memory stages (steps) in the ring: kStages-1
// steps of K and V rows are in flight while one is computed. 3 stages x 4 keys x (K, V) x 16
// bytes x 128 threads = 48 KiB, the most a block gets without opting in (the kernel has no static
// shared memory).
constexpr int kKeysPerStep = 4;
constexpr int kStages = 3;
constexpr std::size_t kStageBytes =
    static_cast<std::size_t>(kStages) * kKeysPerStep * 2 * kThreads * sizeof(uint4);
// Blocks per SM the kernel is built for (__launch_bounds__ caps the registers to fit them): the
// splits fill exactly this many per SM, so all blocks run in one wave and finish together. 4 x
// 48 KiB of stages fit an SM's 228 KiB; 8 query heads need more registers than 4 blocks allow.
constexpr int blocks_per_sm(int hb) {
  return hb <= 4 ? 4 : 2;
}

struct DecodeParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* ws_o;   // [batch*heads*splits][D] unnormalized outputs of each chunk
  float* ws_ml;  // [batch*heads*splits][2] running max (log2 units) and sum of each chunk
  std::int64_t q_stride, kv_stride;
  int heads, kv_heads, group, hsub, max_context, keys, splits, chunk;
  float qscale;       // softmax scale * log2(e): scores in log2 units, exponentials via exp2f
  const void* k_new;  // AttentionArgs::k_new (null: the caches hold the new row already)
  const void* v_new;
  bool rope;
  double log2_theta;
  bool merge_launches_next;  // AttentionArgs::merge_launches_next
  bool cache_ready;          // AttentionArgs::cache_ready
  bool delay_next;           // with merge_launches_next: the launch lead below
};

// 16 bytes read once (the query): read-only during the kernel, not worth a place in L1.
__device__ __forceinline__ uint4 load_once(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// A lane's 8 elements of a head (lanes of a P-lane group hold elements 8 li .. 8 li + 7) turned
// by RoPE (device_common.cuh) with the angles' cos and sin of its elements: the partner of element
// i < D/2 is i + D/2, P/2 lanes away. Every lane of the warp takes part.
template <class T, int P>
__device__ __forceinline__ uint4 rope_lane(const uint4& v, int li, const float (&cos_a)[8],
                                           const float (&sin_a)[8]) {
  float x[8], y[8];
  unpack8<T>(v, x);
  const bool first = li < P / 2;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const float other = __shfl_xor_sync(0xffffffffu, x[e], P / 2);
    float y1, y2;
    if (first)
      rope_rotate(x[e], other, cos_a[e], sin_a[e], y1, y2);
    else
      rope_rotate(other, x[e], cos_a[e], sin_a[e], y1, y2);
    y[e] = first ? y1 : y2;
  }
  return pack8<T>(y);
}

// With AttentionArgs::merge_launches_next, the split kernel's blocks let the merge kernel launch
// once they have this many steps of their chunk left (at their start for shorter chunks).
constexpr int kLaunchLead = 8;

// Blocks per SM an instance is built for: the single-head instance with a launch lead keeps the
// 64 registers of the plain one (66 otherwise), so that a fused decode step's output GEMV block,
// launched beside attention, still fits beside 4 of them.
constexpr int min_blocks(int hb, int lead) {
  return lead > 0 && hb == 1 ? 8 : blocks_per_sm(hb);
}

// Grid: x = (b * kv_heads + g) * hsub + sub (sub: which HB-head slice of the group), y = chunk.
// Dynamic shared memory: kStageBytes, the cp.async ring, reused for the final merge. LEAD: 0, or
// kLaunchLead with AttentionArgs::merge_launches_next.
template <class T, int D, int HB, int LEAD>
__global__ void __launch_bounds__(kThreads, min_blocks(HB, LEAD))
    decode_split_kernel(const DecodeParams p) {
  constexpr int P = D / 8;          // lanes per key: 8 elements (16 bytes) each
  constexpr int GPW = 32 / P;       // lane groups per warp
  constexpr int NG = kWarps * GPW;  // lane groups per block
  constexpr int U = kKeysPerStep;
  constexpr int kStep = NG * U;  // keys per block step
  constexpr unsigned kFull = 0xffffffffu;
  extern __shared__ uint4 ring[];  // [kStages][U][K, V][kThreads]: each thread its own slots

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int gi = warp * GPW + lane / P, li = lane % P;
  int bx = blockIdx.x;
  const int sub = bx % p.hsub;
  bx /= p.hsub;
  const int g = bx % p.kv_heads, b = bx / p.kv_heads;
  const int split = blockIdx.y;
  const int h0 = g * p.group + sub * HB;       // first query head of the block
  const int nh = min(HB, p.group - sub * HB);  // its heads (the rest of HB is padding)
  const int begin = min(p.keys, split * p.chunk), end = min(p.keys, begin + p.chunk);
  const int steps = (end - begin + kStep - 1) / kStep;
  // The merge kernel may launch (it waits for this grid in griddepcontrol.wait): at once, or
  // once the block has LEAD steps of its chunk left.
  if (LEAD == 0 || steps <= LEAD) pdl_trigger();

  const std::int64_t cache_row0 = static_cast<std::int64_t>(b) * p.max_context;
  const T* kb = static_cast<const T*>(p.k) + cache_row0 * p.kv_stride + g * D + li * 8;
  const T* vb = static_cast<const T*>(p.v) + cache_row0 * p.kv_stride + g * D + li * 8;

  // RoPE's cos and sin at the new position for the pairs of a head, a warp's lanes computing
  // D/64 of them each (position and lane only: before the wait, while the previous kernel
  // drains), handed to the lanes that rotate by shuffles. No shared memory: the ring has it all.
  const int pos = p.keys - 1;
  constexpr int kPairs = D / 64;  // pairs a lane computes: D/2 pairs over 32 lanes
  float my_cos[kPairs] = {}, my_sin[kPairs] = {};
  if (p.rope) {
#pragma unroll
    for (int j = 0; j < kPairs; ++j)
      rope_angle(pos, rope_inv_freq(lane * kPairs + j, D, p.log2_theta), my_cos[j], my_sin[j]);
  }
  // A lane's 8 elements turned by RoPE (rope_lane); every lane of the warp takes part.
  auto rotate = [&](const uint4& v) {
    float cos_a[8], sin_a[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int pair = (li % (P / 2)) * 8 + e;
      float c = 0, s = 0;
#pragma unroll
      for (int j = 0; j < kPairs; ++j) {  // shuffle every slot; keep the pair's
        const float cj = __shfl_sync(kFull, my_cos[j], pair / kPairs);
        const float sj = __shfl_sync(kFull, my_sin[j], pair / kPairs);
        if (pair % kPairs == j) {
          c = cj;
          s = sj;
        }
      }
      cos_a[e] = c;
      sin_a[e] = s;
    }
    return rope_lane<T, P>(v, li, cos_a, sin_a);
  };
  // Step `step` of the chunk into ring stage step % kStages. Keys past the end re-read the last
  // key (an L2 hit; masked below). Every call commits a group, empty past the last step, so the
  // wait below always means "the step kStages-1 groups back has landed".
  auto issue = [&](int step) {
    if (step < steps) {
      const int base = begin + step * kStep;
      uint4* st = ring + (step % kStages) * U * 2 * kThreads + tid;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const std::int64_t row = min(base + u * NG + gi, end - 1) * p.kv_stride;
        cp_async_cg16(st + (2 * u) * kThreads, kb + row);
        cp_async_cg16(st + (2 * u + 1) * kThreads, vb + row);
      }
    }
    cp_async_commit();
  };
  // With cache_ready, a block whose chunk ends before the new position reads only rows that no
  // kernel still running writes: its first steps load before the wait, while the previous kernel
  // drains (measured faster on Hopper: docs/DECISIONS.md).
  const bool early = p.cache_ready && end <= pos;
  if (early) {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) issue(s);
  }
  pdl_wait();
  // The new key and value into the caches, by the block whose chunk holds them (one per KV head:
  // hsub is 1), before any thread of it loads that row: warp 0 the key (rotated), warp 1 the
  // value. The row is read back through L2 like the others.
  if (p.k_new != nullptr && begin <= pos && pos < end) {
    if (warp < 2) {  // whole warps, for the shuffles; lanes past P repeat lanes 0..P-1's loads
      const std::int64_t src = static_cast<std::int64_t>(b) * p.q_stride + g * D + li * 8;
      const std::int64_t dst = (cache_row0 + pos) * p.kv_stride + g * D + li * 8;
      if (warp == 0) {
        uint4 key = load_once(static_cast<const T*>(p.k_new) + src);
        if (p.rope) key = rotate(key);
        if (lane < P)
          *reinterpret_cast<uint4*>(const_cast<T*>(static_cast<const T*>(p.k)) + dst) = key;
      } else if (lane < P) {
        *reinterpret_cast<uint4*>(const_cast<T*>(static_cast<const T*>(p.v)) + dst) =
            load_once(static_cast<const T*>(p.v_new) + src);
      }
    }
    __syncthreads();
  }
  if (!early) {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) issue(s);
  }

  // This lane's 8 elements of each query head, pre-scaled; padding heads score 0 and are dropped.
  float q[HB][8];
  {
    const T* qb = static_cast<const T*>(p.q) + static_cast<std::int64_t>(b) * p.q_stride +
                  static_cast<std::int64_t>(h0) * D + li * 8;
#pragma unroll
    for (int hh = 0; hh < HB; ++hh) {
      if (hh < nh) {  // block-uniform: every lane shuffles in rope_lane
        uint4 qv = load_once(qb + hh * D);
        if (p.rope) qv = rotate(qv);
        unpack8<T>(qv, q[hh]);
#pragma unroll
        for (int i = 0; i < 8; ++i) q[hh][i] *= p.qscale;
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) q[hh][i] = 0;
      }
    }
  }

  float m[HB], l[HB], acc[HB][8];
#pragma unroll
  for (int hh = 0; hh < HB; ++hh) {
    m[hh] = -INFINITY;
    l[hh] = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[hh][i] = 0;
  }

  // Lane group gi takes keys base + u*NG + gi: neighbouring groups read neighbouring rows, and a
  // short last step is spread over all groups. The trip count is the same for every thread.
  for (int it = 0; it < steps; ++it) {
    if constexpr (LEAD > 0) {
      if (it == steps - LEAD) pdl_trigger();
    }
    issue(it + kStages - 1);
    cp_async_wait<kStages - 1>();  // this thread's copies of step `it` have landed
    const uint4* st = ring + (it % kStages) * U * 2 * kThreads + tid;
    const int base = begin + it * kStep;
    float s[U][HB];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[8];
      unpack8<T>(st[(2 * u) * kThreads], kf);
#pragma unroll
      for (int hh = 0; hh < HB; ++hh) {
        float dot = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) dot = fmaf(q[hh][i], kf[i], dot);
        s[u][hh] = dot;
      }
    }
    // Sum the partial dot products over the key's P lanes; every lane gets the full score.
#pragma unroll
    for (int off = P / 2; off > 0; off /= 2)
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int hh = 0; hh < HB; ++hh) s[u][hh] += __shfl_xor_sync(kFull, s[u][hh], off);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (base + u * NG + gi >= end) {
#pragma unroll
        for (int hh = 0; hh < HB; ++hh) s[u][hh] = -INFINITY;
      }
    }

    // Online softmax: rescale by the new running max, then s becomes the probabilities.
#pragma unroll
    for (int hh = 0; hh < HB; ++hh) {
      float mt = m[hh];
#pragma unroll
      for (int u = 0; u < U; ++u) mt = fmaxf(mt, s[u][hh]);
      const float ms = mt == -INFINITY ? 0.f : mt;  // nothing seen yet: keep everything at 0
      const float corr = exp2f(m[hh] - ms);
      m[hh] = mt;
      l[hh] *= corr;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[hh][i] *= corr;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        s[u][hh] = exp2f(s[u][hh] - ms);
        l[hh] += s[u][hh];
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float vf[8];
      unpack8<T>(st[(2 * u + 1) * kThreads], vf);
#pragma unroll
      for (int hh = 0; hh < HB; ++hh)
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[hh][i] = fmaf(s[u][hh], vf[i], acc[hh][i]);
    }
  }
  cp_async_wait<0>();  // only empty groups are left; the ring is free after the barrier

  // Merge the warp's lane groups (lanes P apart), then the warps through shared memory.
#pragma unroll
  for (int off = P; off < 32; off *= 2)
#pragma unroll
    for (int hh = 0; hh < HB; ++hh) {
      const float mo = __shfl_xor_sync(kFull, m[hh], off);
      const float lo = __shfl_xor_sync(kFull, l[hh], off);
      const float mn = fmaxf(m[hh], mo), ms = mn == -INFINITY ? 0.f : mn;
      const float mine = exp2f(m[hh] - ms), theirs = exp2f(mo - ms);
      l[hh] = l[hh] * mine + lo * theirs;
#pragma unroll
      for (int i = 0; i < 8; ++i)
        acc[hh][i] = acc[hh][i] * mine + __shfl_xor_sync(kFull, acc[hh][i], off) * theirs;
      m[hh] = mn;
    }
  __syncthreads();  // every thread is done with its ring slots
  float(*s_acc)[HB][D] = reinterpret_cast<float(*)[HB][D]>(ring);  // [kWarps][HB][D]
  float(*s_m)[HB] = reinterpret_cast<float(*)[HB]>(ring + kWarps * HB * D / 4);
  float(*s_l)[HB] = s_m + kWarps;
  if (lane < P) {
#pragma unroll
    for (int hh = 0; hh < HB; ++hh) {
#pragma unroll
      for (int i = 0; i < 8; ++i) s_acc[warp][hh][li * 8 + i] = acc[hh][i];
      if (lane == 0) {
        s_m[warp][hh] = m[hh];
        s_l[warp][hh] = l[hh];
      }
    }
  }
  __syncthreads();

  for (int idx = tid; idx < nh * D; idx += kThreads) {
    const int hh = idx / D, d = idx % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, s_m[w][hh]);
    const float ms = mx == -INFINITY ? 0.f : mx;
    float o = 0, sum = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float f = exp2f(s_m[w][hh] - ms);
      o += s_acc[w][hh][d] * f;
      sum += s_l[w][hh] * f;
    }
    const std::int64_t bh = static_cast<std::int64_t>(b) * p.heads + h0 + hh;
    if (p.splits == 1) {
      static_cast<T*>(p.out)[bh * D + d] = from_float<T>(sum > 0 ? o / sum : 0.f);
    } else {
      const std::int64_t part = bh * p.splits + split;
      p.ws_o[part * D + d] = o;
      if (d == 0) {
        p.ws_ml[2 * part] = mx;
        p.ws_ml[2 * part + 1] = sum;
      }
    }
  }
}

// Threads of the merge kernel: many, so that each reads few chunks (its loads are L2 round
// trips, and a long serial walk over 64 chunks costs more than the chunks themselves).
constexpr int kMergeThreads = 512;

// Max (op 0) or sum (op 1) over the block; every thread gets the result. `red` holds a value a
// warp; the barrier at the start makes the buffer reusable right after a previous call.
template <int OP>
__device__ __forceinline__ float block_reduce(float v, float* red) {
  constexpr unsigned kFull = 0xffffffffu;
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const float o = __shfl_xor_sync(kFull, v, off);
    v = OP == 0 ? fmaxf(v, o) : v + o;
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  v = red[0];
  for (int i = 1; i < kMergeThreads / 32; ++i) v = OP == 0 ? fmaxf(v, red[i]) : v + red[i];
  return v;
}

// One block per (sequence, query head): weights of the chunks from their maxima (block-wide
// reductions), then slices of the block sum the chunks' outputs (float4 columns, 4 independent
// loads in flight per thread) and one slice writes the normalized result. Launched as a
// programmatic dependent of the split kernel where the device allows: it waits for the split
// kernel's results (griddepcontrol.wait) instead of for its own launch. With
// merge_launches_next it lets the next kernel launch at its start, before its wait: the fused
// decode step's output GEMV then loads its first weights beside the split kernel (which pays
// only with that GEMV holding back its own dependents, SkinnyFusion::late_dependents, or with
// the MLP staged behind it: Transformer::fused_layer).
template <class T, int D>
__global__ void __launch_bounds__(kMergeThreads) decode_merge_kernel(const DecodeParams p) {
  constexpr int C = D / 4;              // float4 columns
  constexpr int S = kMergeThreads / C;  // slices over the chunks
  extern __shared__ float sh[];         // weight of each chunk
  __shared__ float4 red4[S][C];
  __shared__ float red[kMergeThreads / 32];
  if (p.merge_launches_next) pdl_trigger();
  pdl_wait();
  const int splits = p.splits;
  const std::int64_t bh = blockIdx.x;
  const float* ml = p.ws_ml + bh * splits * 2;
  const int c = threadIdx.x % C, slice = threadIdx.x / C;
  const float4* o = reinterpret_cast<const float4*>(p.ws_o + bh * splits * D) + c;
  // The thread's first 4 chunk outputs are loaded before the weights, so that their L2 round
  // trip overlaps the reductions'.
  float4 first[4];
#pragma unroll
  for (int u = 0; u < 4; ++u)
    first[u] = slice + u * S < splits ? o[static_cast<std::int64_t>(slice + u * S) * C]
                                      : make_float4(0, 0, 0, 0);
  float mx = -INFINITY;
  for (int s = threadIdx.x; s < splits; s += kMergeThreads)
    if (ml[2 * s + 1] > 0) mx = fmaxf(mx, ml[2 * s]);
  mx = block_reduce<0>(mx, red);
  float sum = 0;
  for (int s = threadIdx.x; s < splits; s += kMergeThreads) {
    const float l = ml[2 * s + 1];
    const float w = l > 0 ? exp2f(ml[2 * s] - mx) : 0.f;  // empty chunks weigh nothing
    sh[s] = w;
    sum += w * l;
  }
  sum = block_reduce<1>(sum, red);  // its barriers also publish sh[]

  // Every chunk's output is finite (an empty chunk writes zeros), so zero weights need no test.
  float4 acc = make_float4(0, 0, 0, 0);
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const float w = slice + u * S < splits ? sh[slice + u * S] : 0.f;
    acc.x += w * first[u].x;
    acc.y += w * first[u].y;
    acc.z += w * first[u].z;
    acc.w += w * first[u].w;
  }
  int s = slice + 4 * S;
  for (; s + 3 * S < splits; s += 4 * S) {
    float4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = o[static_cast<std::int64_t>(s + u * S) * C];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const float w = sh[s + u * S];
      acc.x += w * v[u].x;
      acc.y += w * v[u].y;
      acc.z += w * v[u].z;
      acc.w += w * v[u].w;
    }
  }
  for (; s < splits; s += S) {
    const float w = sh[s];
    const float4 v = o[static_cast<std::int64_t>(s) * C];
    acc.x += w * v.x;
    acc.y += w * v.y;
    acc.z += w * v.z;
    acc.w += w * v.w;
  }
  red4[slice][c] = acc;
  __syncthreads();
  if (slice != 0) return;
  const float inv = sum > 0 ? 1.f / sum : 0.f;
  float4 t = red4[0][c];
#pragma unroll
  for (int i = 1; i < S; ++i) {
    t.x += red4[i][c].x;
    t.y += red4[i][c].y;
    t.z += red4[i][c].z;
    t.w += red4[i][c].w;
  }
  T* out = static_cast<T*>(p.out) + bh * D + c * 4;
  out[0] = from_float<T>(t.x * inv);
  out[1] = from_float<T>(t.y * inv);
  out[2] = from_float<T>(t.z * inv);
  out[3] = from_float<T>(t.w * inv);
}

template <class T, int D, int HB>
void launch(const DecodeParams& p0, int batch, cudaStream_t stream) {
  DecodeParams p = p0;
  p.hsub = (p.group + HB - 1) / HB;
  const dim3 grid(static_cast<unsigned>(batch * p.kv_heads * p.hsub),
                  static_cast<unsigned>(p.splits));
  // The ring wants several blocks' 48 KiB per SM: ask for the largest shared-memory carveout
  // (a host-side attribute of the current device's function, cheap to set on every call).
  auto* kernel =
      p.delay_next ? decode_split_kernel<T, D, HB, kLaunchLead> : decode_split_kernel<T, D, HB, 0>;
  GPB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                      static_cast<int>(cudaSharedmemCarveoutMaxShared)));
  launch_pdl(kernel, grid, kThreads, kStageBytes, stream, p);
  GPB_CHECK_LAUNCH();
  if (p.splits > 1) {
    // A programmatic dependent launch (pdl.cuh): the merge blocks are launched while the split
    // kernel runs and wait in griddepcontrol.wait, which saves the launch gap.
    launch_pdl(decode_merge_kernel<T, D>, dim3(static_cast<unsigned>(batch * p.heads)),
               dim3(kMergeThreads), static_cast<std::size_t>(p.splits) * sizeof(float), stream, p);
  }
}

template <class T, int D>
void launch_heads(const DecodeParams& p, int batch, cudaStream_t stream) {
  switch (heads_per_block(p.group)) {
    case 1:
      return launch<T, D, 1>(p, batch, stream);
    case 2:
      return launch<T, D, 2>(p, batch, stream);
    case 4:
      return launch<T, D, 4>(p, batch, stream);
    default:
      return launch<T, D, 8>(p, batch, stream);
  }
}

bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0;
}

// The automatic split count's two bounds: `fill` chunks a head make one wave (every SM holding
// the blocks it can at once), `most` keeps chunks at kMinChunk keys or more.
struct SplitBounds {
  int fill = 1, most = 1;
};
SplitBounds split_bounds(const AttentionArgs& args, int sm_count) {
  const AttentionArgs a = resolved_attention_args(args);
  const int keys = std::max(1, a.q_pos0 + 1);
  const int kv_heads = std::max(1, a.kv_heads);
  const int group = std::max(1, a.heads / kv_heads);
  const int hb = heads_per_block(group);
  const int per_split = std::max(1, a.batch) * kv_heads * ((group + hb - 1) / hb);
  const int wave = blocks_per_sm(hb) * std::max(sm_count, 1);
  return {wave / per_split, (keys + kMinChunk - 1) / kMinChunk};
}
}  // namespace

int decode_attention_splits(const AttentionArgs& a, int sm_count) {
  // As many chunks as fill every SM with the blocks it holds at once (one wave: the blocks
  // stream equal chunks side by side and finish together), never chunks under kMinChunk keys.
  const SplitBounds b = split_bounds(a, sm_count);
  return std::clamp(std::min(b.fill, b.most), 1, kMaxAutoSplits);
}

bool decode_attention_fills_wave(const AttentionArgs& a, int sm_count) {
  const SplitBounds b = split_bounds(a, sm_count);
  return b.fill >= 1 && b.fill <= b.most && b.fill <= kMaxAutoSplits;
}

std::size_t decode_workspace_bytes(const AttentionArgs& a, int splits) {
  return static_cast<std::size_t>(a.batch) * a.heads * splits * (2 + a.head_dim) * sizeof(float);
}

bool decode_append_supported(const AttentionArgs& a) {
  return a.kv_heads >= 1 && a.heads % a.kv_heads == 0 && a.heads / a.kv_heads <= 8;
}

void decode_attention(const AttentionArgs& args, int splits, void* workspace, cudaStream_t stream) {
  const AttentionArgs a = resolved_attention_args(args);
  if (a.head_dim != 64 && a.head_dim != 128)
    throw InputError("decode_attention: head_dim must be 64 or 128");
  if (a.q_tokens != 1 || a.batch < 1 || a.kv_heads < 1 || a.heads % a.kv_heads != 0 ||
      a.q_pos0 < 0 || a.q_pos0 >= a.max_context)
    throw InputError(
        "decode_attention: needs one query token, heads a multiple of kv_heads and "
        "q_pos0 inside the cache");
  if (splits < 1 || splits > kMaxSplits)
    throw InputError("decode_attention: splits must be in 1..1024");
  if (!aligned16(a.q) || !aligned16(a.k) || !aligned16(a.v) || a.q_stride % 8 != 0 ||
      a.kv_stride % 8 != 0)
    throw InputError("decode_attention: q, k, v need 16-byte alignment and strides of 8 elements");
  DecodeParams p{};
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.out = a.out;
  if ((a.k_new != nullptr || a.v_new != nullptr) &&
      (a.k_new == nullptr || a.v_new == nullptr || !decode_append_supported(a) ||
       !aligned16(a.k_new) || !aligned16(a.v_new)))
    throw InputError(
        "decode_attention: the new key and value need each other, 16-byte alignment and at most "
        "8 query heads per KV head");
  p.rope = a.rope && a.k_new != nullptr;
  p.log2_theta = p.rope ? rope_log2_theta(a.rope_theta, "decode_attention") : 0.0;
  const std::size_t o_floats =
      static_cast<std::size_t>(a.batch) * a.heads * splits * static_cast<std::size_t>(a.head_dim);
  p.ws_o = static_cast<float*>(workspace);
  p.ws_ml = p.ws_o + o_floats;
  p.q_stride = a.q_stride;
  p.kv_stride = a.kv_stride;
  p.heads = a.heads;
  p.kv_heads = a.kv_heads;
  p.group = a.heads / a.kv_heads;
  p.max_context = a.max_context;
  p.keys = a.q_pos0 + 1;
  p.splits = splits;
  p.chunk = (p.keys + splits - 1) / splits;
  p.qscale = a.scale * kLog2e;
  p.k_new = a.k_new;
  p.v_new = a.v_new;
  p.merge_launches_next = a.merge_launches_next;
  p.cache_ready = a.cache_ready;
  p.delay_next = a.merge_launches_next;
  const bool bf16 = a.dtype == AttnDtype::BF16;
  if (a.head_dim == 128)
    bf16 ? launch_heads<__nv_bfloat16, 128>(p, a.batch, stream)
         : launch_heads<__half, 128>(p, a.batch, stream);
  else
    bf16 ? launch_heads<__nv_bfloat16, 64>(p, a.batch, stream)
         : launch_heads<__half, 64>(p, a.batch, stream);
}

}  // namespace gpubench
