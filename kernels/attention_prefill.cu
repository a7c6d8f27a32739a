// Prefill attention on tensor cores in the flash-attention-2 manner. A block of 4 warps owns 128
// queries of one (batch, head) and walks their causal key range in tiles of 64 keys, double-
// buffered in shared memory by cp.async. Each warp owns 32 query rows (two 16-row MMA tiles, so
// every K or V fragment read from shared memory feeds two MMAs). Per tile and warp: S = Q K^T
// with mma.sync m16n8k16 into fp32 registers, an online softmax on those registers (exp2, the
// scale folded into one FMA), then P rounded to bf16/fp16 in registers is fed straight back as
// the A operand of O += P V. No S, P or L x L matrix ever touches memory.
//
// Why Q stays in shared memory for head_dim 128: O (128 fp32) + S (64 fp32) per thread already
// use most of the 255 registers, and 32 rows per warp halve the shared-memory reads per MMA
// compared with 16 rows and Q in registers, which matters more on Hopper. At head_dim 64 there is
// room, and Q fragments are loaded into registers once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "gpubench/kernels/attention.cuh"
#include "gpubench/kernels/device_common.cuh"
#include "gpubench/core/cuda.hpp"

namespace gpubench {

namespace {

constexpr int kBlockM = 128;  // queries per block
constexpr int kBlockN = 64;   // keys per K/V tile
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kWarpRows = kBlockM / kWarps;  // 32 query rows per warp
constexpr int kMTiles = kWarpRows / 16;      // m16 tiles per warp
constexpr int kSTiles = kBlockN / 8;         // n8 tiles of S (keys) per m16 tile
constexpr float kLog2e = 1.4426950408889634f;

// ---------------------------------------------------------------------------------------------
// Fragment layouts of mma.sync.m16n8k16 (16-bit inputs, fp32 accumulators). Lane l of the warp
// has group g = l / 4 and thread-in-group c = l % 4; a register holds two 16-bit values, the lower
// column (or k) index in the low half.
//   A (16 x 16, row-major, here Q or P): a0 = (row g, cols 2c, 2c+1), a1 = (row g+8, cols 2c..),
//     a2 = (row g, cols 2c+8, 2c+9), a3 = (row g+8, cols 2c+8..).
//   B (16 x 8, "col": k x n, here K^T or V): b0 = (k 2c, 2c+1; col n = g), b1 = (k 2c+8, 2c+9; g).
//   C/D (16 x 8, fp32): d0, d1 = (row g, cols 2c, 2c+1), d2, d3 = (row g+8, cols 2c, 2c+1).
// ldmatrix.x4 loads four 8x8 16-bit matrices; lanes 8i..8i+7 give the addresses of the 8 rows
// (16 bytes each) of matrix i, and register i of lane l receives row l / 4, elements 2(l%4),
// 2(l%4)+1 of matrix i; with .trans it receives column l / 4, rows 2(l%4), 2(l%4)+1 instead.
// Hence:
//   A from row-major Q (or any [row][k] tile): matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7),
//     (rows 0-7, k 8-15), (rows 8-15, k 8-15) are a0..a3; lane l points at row l % 16, 16-byte
//     chunk l / 16 of the 16 x 16 block.
//   B from K stored [key][d] (key = n, d = k; K^T in "col" layout is exactly K row-major): one x4
//     covers 16 keys x 16 d, i.e. two n8 tiles: (keys 0-7, d 0-7) = b0 and (keys 0-7, d 8-15) = b1
//     of the first, (keys 8-15, d 0-7) and (keys 8-15, d 8-15) those of the second; lane l points
//     at key (l % 8) + 8 (l / 16), chunk (l / 8) % 2.
//   B from V stored [key][d] (key = k, d = n; row-major k x n, so .trans): one x4.trans covers
//     16 keys x 16 d: (keys 0-7, d 0-7) = b0 and (keys 8-15, d 0-7) = b1 of the first n8 tile,
//     (keys 0-7, d 8-15) and (keys 8-15, d 8-15) those of the second; lane l points at key l % 16,
//     chunk l / 16 (the same pattern as A).
//   P as A: the S accumulators of n8 tiles 2j and 2j+1 (keys 16j .. 16j+15) are, converted in
//     pairs, exactly a0..a3 of the A fragment for k-step j: (d0,d1 | d2,d3) of tile 2j are a0 | a1,
//     those of tile 2j+1 are a2 | a3. No shuffles, no shared memory.
//
// Shared-memory tiles are rows of D 16-bit elements (D / 8 chunks of 16 bytes) with the chunk
// index XORed with row % 8: the 8 rows one 8x8 matrix reads (same logical chunk, consecutive rows)
// then sit in 8 different 16-byte bank groups, so ldmatrix and the cp.async writes are free of
// bank conflicts without padding. Every ldmatrix pattern above starts at a row multiple of 8, so
// row % 8 == lane % 8 and each lane's swizzle is fixed.
// ---------------------------------------------------------------------------------------------

// volatile: the same address is read again after every barrier (new tile data), so these loads
// must neither be merged across iterations nor hoisted out of the loop.
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += A B for one m16n8k16 tile (layouts above).
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const std::uint32_t (&a)[4],
                                          std::uint32_t b0, std::uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// 2^x on the special-function unit; 2^-inf = +0, which is how masked scores vanish.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Two floats rounded to T and packed, `lo` in the low half (the lower column of a fragment).
template <class T>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  std::uint32_t r;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    std::memcpy(&r, &v, 4);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    std::memcpy(&r, &v, 4);
  }
  return r;
}

// Starts copying rows [0, Rows) of a tile into swizzled shared memory at `dst` (row r from
// src + r * stride, D elements); rows at or past `valid` are zero-filled, so padded queries and
// keys are finite zeros and never read out of bounds.
template <int D, int Rows, class T>
__device__ __forceinline__ void load_tile(std::uint32_t dst, const T* src, std::int64_t stride,
                                          int valid) {
  constexpr int kChunks = D / 8;                    // 16-byte chunks per row
  constexpr int kRowsPerPass = kThreads / kChunks;  // a multiple of 8: row % 8 is per-thread
  static_assert(Rows % kRowsPerPass == 0 && kRowsPerPass % 8 == 0, "tile shape");
  const int chunk = threadIdx.x % kChunks, row0 = threadIdx.x / kChunks;
  const std::uint32_t col = static_cast<std::uint32_t>((chunk ^ (row0 & 7)) << 4);
#pragma unroll
  for (int it = 0; it < Rows / kRowsPerPass; ++it) {
    const int r = row0 + it * kRowsPerPass;
    const bool ok = r < valid;
    const T* g = src + (ok ? r : 0) * stride + chunk * 8;
    cp_async_cg16(dst + static_cast<std::uint32_t>(r * D * 2) + col, g, ok ? 16 : 0);
  }
}

// The block's work item: head fastest (neighbouring blocks share a KV head in L2), then batch,
// then query block from the last (longest causal range) to the first, so the heavy blocks start
// first and the short ones fill the tail. The block index is read through volatile asm so the
// epilogue decodes it again instead of holding these registers through the main loop.
struct BlockWork {
  int h, b, q0, q_rows;  // head, batch, first query token, valid queries (<= kBlockM)
};
__device__ __forceinline__ BlockWork block_work(const AttentionArgs& a, int q_blocks) {
  unsigned id;
  asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(id));
  int work = static_cast<int>(id);
  BlockWork w;
  w.h = work % a.heads;
  work /= a.heads;
  w.b = work % a.batch;
  work /= a.batch;
  w.q0 = (q_blocks - 1 - work) * kBlockM;
  w.q_rows = min(kBlockM, a.q_tokens - w.q0);
  return w;
}

template <int D>
constexpr int smem_bytes() {
  return (kBlockM + 2 * 2 * kBlockN) * D * 2;  // Q + two stages of K and V
}

template <class T, int D>
__global__ void __launch_bounds__(kThreads, 2) prefill_kernel(AttentionArgs a, int q_blocks) {
  constexpr int kRowBytes = D * 2;
  constexpr int kTileBytes = kBlockN * kRowBytes;
  constexpr int kKSteps = D / 16;  // k16 steps of Q K^T
  constexpr int kOTiles = D / 8;   // n8 tiles of O
  constexpr bool kQInRegs = D <= 64;
  extern __shared__ __align__(128) unsigned char smem[];
  const std::uint32_t s_q = smem_u32(smem);
  const std::uint32_t s_kv = s_q + kBlockM * kRowBytes;  // stage s: K at + 2s tiles, V after it

  const BlockWork w = block_work(a, q_blocks);
  const int h = w.h, b = w.b, q0 = w.q0, q_rows = w.q_rows;
  const int g = h / (a.heads / a.kv_heads);
  const int pos0 = a.q_pos0 + q0;      // position of the block's first query
  const int last_key = pos0 + q_rows;  // keys [0, last_key) are seen by some valid row
  const int n_tiles = (last_key + kBlockN - 1) / kBlockN;

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int warp_row0 = warp * kWarpRows;       // the warp's first row in the block
  const int warp_pos0 = pos0 + warp_row0;       // and its position
  const bool warp_active = warp_row0 < q_rows;  // padding-only warps skip the math

  const T* q_src = static_cast<const T*>(a.q) +
                   (static_cast<std::int64_t>(b) * a.q_tokens + q0) * a.q_stride +
                   static_cast<std::int64_t>(h) * D;
  const std::int64_t kv_base =
      static_cast<std::int64_t>(b) * a.max_context * a.kv_stride + static_cast<std::int64_t>(g) * D;
  const T* k_src = static_cast<const T*>(a.k) + kv_base;
  const T* v_src = static_cast<const T*>(a.v) + kv_base;
  auto load_kv = [&](int t) {
    const int k0 = t * kBlockN;
    const std::uint32_t dst = s_kv + static_cast<std::uint32_t>((t & 1) * 2 * kTileBytes);
    const std::int64_t off = static_cast<std::int64_t>(k0) * a.kv_stride;
    load_tile<D, kBlockN>(dst, k_src + off, a.kv_stride, last_key - k0);
    load_tile<D, kBlockN>(dst + kTileBytes, v_src + off, a.kv_stride, last_key - k0);
    cp_async_commit();
  };

  // Per-lane byte offsets of the ldmatrix rows within a tile (layout notes at the top). With
  // x = chunk bit ^ (lane % 8), chunk 2j + bit lands at physical (2j) ^ x, and because a row's
  // byte offset has zeros in bits 4.. of the chunk field, row * kRowBytes + ((2j ^ x) << 4) ==
  // (row * kRowBytes + (x << 4)) ^ (j << 5). Offsets of whole 8-row groups are added on top.
  const int sw = lane & 7;
  const std::uint32_t a_rel =  // A from Q, and B from V (.trans): row l % 16, chunk bit l / 16
      static_cast<std::uint32_t>((lane & 15) * kRowBytes + (((lane >> 4) ^ sw) << 4));
  const std::uint32_t k_rel =  // B from K: row (l % 8) + 8 (l / 16), chunk bit (l / 8) % 2
      static_cast<std::uint32_t>(((lane & 7) + ((lane >> 4) << 3)) * kRowBytes +
                                 ((((lane >> 3) & 1) ^ sw) << 4));
  const std::uint32_t q_warp = s_q + static_cast<std::uint32_t>(warp_row0 * kRowBytes);

  load_tile<D, kBlockM>(s_q, q_src, a.q_stride, q_rows);
  load_kv(0);  // one group with Q
  cp_async_wait<0>();
  __syncthreads();

  // Q fragments kept in registers when they fit (head_dim 64): [m tile][k step][a0..a3].
  std::uint32_t q_frag[kMTiles][kQInRegs ? kKSteps : 1][4];
  if constexpr (kQInRegs) {
#pragma unroll
    for (int i = 0; i < kMTiles; ++i)
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk)
        ldmatrix_x4(q_frag[i][kk], q_warp + (a_rel ^ (kk << 5)) + i * 16 * kRowBytes);
  }

  float o[kMTiles][kOTiles][4];  // O accumulators, C layout per n8 tile of head_dim
#pragma unroll
  for (int i = 0; i < kMTiles; ++i)
#pragma unroll
    for (int n = 0; n < kOTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[i][n][e] = 0;
  // Running max (raw scores) and this lane's partial row sum for rows g (hh 0) and g + 8 (hh 1)
  // of each m tile; the sum is reduced over the 4 lanes of a row only at the end.
  float row_max[kMTiles][2], row_sum[kMTiles][2];
#pragma unroll
  for (int i = 0; i < kMTiles; ++i)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      row_max[i][hh] = -INFINITY;
      row_sum[i][hh] = 0;
    }
  const float scale_log2 = a.scale * kLog2e;  // softmax(s * scale) computed as 2^(s*scale*log2e)

  for (int t = 0; t < n_tiles; ++t) {
    // Stage (t+1) % 2 was last read in iteration t-1, which ended with a barrier.
    if (t + 1 < n_tiles) load_kv(t + 1);
    const int k0 = t * kBlockN;
    // Tiles whose keys all follow the warp's last row are fully masked for it: skip. The key
    // tiles are walked in order, so tile 0 (key 0, seen by every row) is never skipped and each
    // row's running max is finite from then on.
    if (warp_active && k0 <= warp_pos0 + kWarpRows - 1) {
      const std::uint32_t s_k = s_kv + static_cast<std::uint32_t>((t & 1) * 2 * kTileBytes);
      const std::uint32_t s_v = s_k + kTileBytes;
      // Opaque copies of the per-lane offsets: otherwise the compiler hoists all 24 XORed
      // addresses out of the tile loop and the registers they hold cause spills at head_dim 128.
      std::uint32_t a_off = a_rel, k_off = k_rel, q_base = q_warp;
      asm volatile("" : "+r"(a_off), "+r"(k_off), "+r"(q_base));

      // S = Q K^T for the warp's 32 rows x 64 keys.
      float s[kMTiles][kSTiles][4];
#pragma unroll
      for (int i = 0; i < kMTiles; ++i)
#pragma unroll
        for (int j = 0; j < kSTiles; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[i][j][e] = 0;
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        std::uint32_t qa[kMTiles][4];
#pragma unroll
        for (int i = 0; i < kMTiles; ++i) {
          if constexpr (kQInRegs) {
#pragma unroll
            for (int r = 0; r < 4; ++r) qa[i][r] = q_frag[i][kk][r];
          } else {
            ldmatrix_x4(qa[i], q_base + (a_off ^ (kk << 5)) + i * 16 * kRowBytes);
          }
        }
#pragma unroll
        for (int nn = 0; nn < kSTiles / 2; ++nn) {
          std::uint32_t kb[4];  // b0, b1 of key tile 2nn, then of key tile 2nn+1
          ldmatrix_x4(kb, s_k + (k_off ^ (kk << 5)) + nn * 16 * kRowBytes);
#pragma unroll
          for (int i = 0; i < kMTiles; ++i) {
            mma_16816<T>(s[i][2 * nn], qa[i], kb[0], kb[1]);
            mma_16816<T>(s[i][2 * nn + 1], qa[i], kb[2], kb[3]);
          }
        }
      }

      // Causal mask, only where some key of the tile follows the warp's first row. Element
      // (i, j, e) is row warp_row0 + 16i + g + 8(e/2), key k0 + 8j + 2c + e%2.
      if (k0 + kBlockN - 1 > warp_pos0) {
        const int ahead = k0 + 2 * (lane & 3) - warp_pos0 - (lane >> 2);  // key - position
#pragma unroll
        for (int i = 0; i < kMTiles; ++i)
#pragma unroll
          for (int j = 0; j < kSTiles; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              if (ahead + 8 * j + (e & 1) - 16 * i - 8 * (e >> 1) > 0) s[i][j][e] = -INFINITY;
      }

      // Online softmax. A row's 64 scores sit in the 4 lanes of its group (16 each).
      float correction[kMTiles][2];
      bool max_moved = false;
#pragma unroll
      for (int i = 0; i < kMTiles; ++i)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          float mx = row_max[i][hh];
#pragma unroll
          for (int j = 0; j < kSTiles; ++j)
            mx = fmaxf(mx, fmaxf(s[i][j][2 * hh], s[i][j][2 * hh + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          // A row with nothing visible yet (cannot happen in order, kept for safety) keeps
          // max -inf: subtracting 0 leaves its p at 2^-inf = 0 instead of NaN.
          const float mx_scaled = mx == -INFINITY ? 0.0f : mx * scale_log2;
          correction[i][hh] = exp2_approx(row_max[i][hh] * scale_log2 - mx_scaled);
          max_moved |= mx != row_max[i][hh];
          row_max[i][hh] = mx;
          float sum = 0;
#pragma unroll
          for (int j = 0; j < kSTiles; ++j)
#pragma unroll
            for (int e = 2 * hh; e < 2 * hh + 2; ++e) {
              const float p = exp2_approx(fmaf(s[i][j][e], scale_log2, -mx_scaled));
              s[i][j][e] = p;
              sum += p;
            }
          row_sum[i][hh] = row_sum[i][hh] * correction[i][hh] + sum;
        }
      // O is rescaled only when some row of the warp got a new maximum (otherwise every
      // correction is exactly 1): past the first tiles of a long row the maximum rarely moves,
      // and the 128 multiplies are over a tenth of the warp's instructions per tile.
      if (__any_sync(0xffffffffu, max_moved)) {
#pragma unroll
        for (int i = 0; i < kMTiles; ++i)
#pragma unroll
          for (int n = 0; n < kOTiles; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[i][n][e] *= correction[i][e >> 1];
      }

      // O += P V, P taken from the S registers k-step by k-step (16 keys each).
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        std::uint32_t pa[kMTiles][4];
#pragma unroll
        for (int i = 0; i < kMTiles; ++i) {
          pa[i][0] = pack2<T>(s[i][2 * kk][0], s[i][2 * kk][1]);
          pa[i][1] = pack2<T>(s[i][2 * kk][2], s[i][2 * kk][3]);
          pa[i][2] = pack2<T>(s[i][2 * kk + 1][0], s[i][2 * kk + 1][1]);
          pa[i][3] = pack2<T>(s[i][2 * kk + 1][2], s[i][2 * kk + 1][3]);
        }
#pragma unroll
        for (int np = 0; np < kOTiles / 2; ++np) {
          std::uint32_t vb[4];  // b0, b1 of head_dim tile 2np, then of tile 2np+1
          ldmatrix_x4_trans(vb, s_v + (a_off ^ (np << 5)) + kk * 16 * kRowBytes);
#pragma unroll
          for (int i = 0; i < kMTiles; ++i) {
            mma_16816<T>(o[i][2 * np], pa[i], vb[0], vb[1]);
            mma_16816<T>(o[i][2 * np + 1], pa[i], vb[2], vb[3]);
          }
        }
      }
    }
    // Tile t+1 has landed for everyone, and stage t % 2 is free for tile t+2.
    cp_async_wait<0>();
    __syncthreads();
  }

  // out = O / l, rows past q_tokens never written. Lanes store 2 elements (4 bytes); a group of 4
  // lanes covers 16 contiguous bytes of a row per n8 tile.
  const BlockWork we = block_work(a, q_blocks);
  T* out = static_cast<T*>(a.out) +
           (static_cast<std::int64_t>(we.b) * a.q_tokens + we.q0) * a.heads * D +
           static_cast<std::int64_t>(we.h) * D + 2 * (lane & 3);
#pragma unroll
  for (int i = 0; i < kMTiles; ++i)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float l = row_sum[i][hh];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int r = warp_row0 + 16 * i + (lane >> 2) + 8 * hh;
      if (r < we.q_rows) {
        const float inv = __frcp_rn(l);
        T* dst = out + static_cast<std::int64_t>(r) * a.heads * D;
#pragma unroll
        for (int n = 0; n < kOTiles; ++n)
          *reinterpret_cast<std::uint32_t*>(dst + 8 * n) =
              pack2<T>(o[i][n][2 * hh] * inv, o[i][n][2 * hh + 1] * inv);
      }
    }
}

template <class T, int D>
void launch(const AttentionArgs& a, cudaStream_t stream) {
  constexpr int smem = smem_bytes<D>();
  GPB_CUDA_CHECK(cudaFuncSetAttribute(prefill_kernel<T, D>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int q_blocks = (a.q_tokens + kBlockM - 1) / kBlockM;
  const long long blocks = static_cast<long long>(q_blocks) * a.heads * a.batch;
  if (blocks > 0x7fffffffLL) throw GpuError("prefill_attention: too many blocks");
  prefill_kernel<T, D><<<static_cast<unsigned>(blocks), kThreads, smem, stream>>>(a, q_blocks);
  GPB_CHECK_LAUNCH();
}

bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

}  // namespace

void prefill_attention(const AttentionArgs& args, cudaStream_t stream) {
  const AttentionArgs a = resolved_attention_args(args);
  if (a.head_dim != 64 && a.head_dim != 128)
    throw GpuError("prefill_attention: head_dim must be 64 or 128");
  if (a.q_stride % 8 || a.kv_stride % 8)
    throw GpuError("prefill_attention: strides must be multiples of 8 elements");
  if (!aligned16(a.q) || !aligned16(a.k) || !aligned16(a.v) || !aligned16(a.out))
    throw GpuError("prefill_attention: pointers must be 16-byte aligned");
  if (a.kv_heads <= 0 || a.heads % a.kv_heads)
    throw GpuError("prefill_attention: heads must be a multiple of kv_heads");
  // The softmax runs on raw scores (max first, scale folded into the exponent), which needs a
  // positive scale.
  if (!(a.scale > 0)) throw GpuError("prefill_attention: scale must be positive");
  if (a.q_pos0 < 0 || a.q_pos0 + a.q_tokens > a.max_context)
    throw GpuError("prefill_attention: positions past the K/V cache");
  if (a.batch <= 0 || a.q_tokens <= 0 || a.heads <= 0) return;
  const bool bf16 = a.dtype == AttnDtype::BF16;
  if (a.head_dim == 128) {
    bf16 ? launch<__nv_bfloat16, 128>(a, stream) : launch<__half, 128>(a, stream);
  } else {
    bf16 ? launch<__nv_bfloat16, 64>(a, stream) : launch<__half, 64>(a, stream);
  }
}

}  // namespace gpubench
