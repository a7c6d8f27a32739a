// Read-pattern probe: does the order in which a GEMV's warps read W change the HBM rate?
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1);} } while (0)

constexpr int kWarps = 8, kThreads = 256;
constexpr int KU = 8;                      // pieces per row per step (RW 2, 16 pieces a step)
constexpr int kStep = 32 * 8 * KU;         // 2048 elements

__device__ __forceinline__ uint4 ldw(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}
__device__ __forceinline__ void unpack8(const uint4& u, float (&f)[8]) {
  const unsigned v[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) { f[2*i] = __uint_as_float(v[i] << 16); f[2*i+1] = __uint_as_float(v[i] & 0xffff0000u); }
}

// Layouts. groups = out/2 row pairs, steps S = in / kStep per row.
// 0 rowpair: rows g and g + pair, row-major (main's).
// 1 adjacent: rows g, g+pair stored adjacently (group g = 2*in contiguous).
// 2 stepmajor: piece (round, step, warp) contiguous over the grid's warps: 8 KiB per (group, step).
// 3 random: rowpair, groups visited in a scrambled order.
template <int LAYOUT>
__device__ __forceinline__ const __nv_bfloat16* row_step(const __nv_bfloat16* w, long grp, int r,
                                                         long s, long S, long pair, long in,
                                                         long warps, long gw) {
  if (LAYOUT == 0 || LAYOUT == 3) return w + (grp + r * pair) * in + s * kStep;
  if (LAYOUT == 1) return w + grp * 2 * in + r * in + s * kStep;
  // stepmajor: round = grp / warps (grp = gw + round*warps)
  const long round = grp / warps;
  return w + (((round * S + s) * warps + gw) * 2 + r) * kStep;
}

__device__ __forceinline__ long scramble(long g, long groups) {
  // a bijection on [0, groups) for groups = 11008: multiply by an odd constant mod a power-of-2
  // range and skip values outside (cycle walking)
  long m = 1; while (m < groups) m <<= 1;
  long v = g;
  do { v = (v * 40503 + 12345) & (m - 1); } while (v >= groups);
  return v;
}

template <int LAYOUT, bool MATH>
__global__ void __launch_bounds__(kThreads, 2)
gemv(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ nw,
     const __nv_bfloat16* __restrict__ w, float* __restrict__ y, long out, long in) {
  const int lane = threadIdx.x % 32;
  const long pair = out / 2, groups = pair, S = in / kStep;
  const long warps = (long)gridDim.x * kWarps;
  const long gw = (long)blockIdx.x * kWarps + threadIdx.x / 32;
  for (long gi = gw; gi < groups; gi += warps) {
    const long grp = LAYOUT == 3 ? scramble(gi, groups) : gi;
    float acc[2] = {0, 0};
    unsigned xs = 0;
    for (long s = 0; s < S; ++s) {
      uint4 wv[2][KU];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const __nv_bfloat16* p = row_step<LAYOUT>(w, gi, r, s, S, pair, in, warps, gw) + lane * 8;
        if (LAYOUT == 3) p = row_step<0>(w, grp, r, s, S, pair, in, warps, gw) + lane * 8;
#pragma unroll
        for (int j = 0; j < KU; ++j) wv[r][j] = ldw(p + 256 * j);
      }
#pragma unroll
      for (int j = 0; j < KU; ++j) {
        if (MATH) {
          float xf[8], nf[8];
          const long k = s * kStep + 256 * j + lane * 8;
          unpack8(__ldg(reinterpret_cast<const uint4*>(x + k)), xf);
          unpack8(__ldg(reinterpret_cast<const uint4*>(nw + k)), nf);
#pragma unroll
          for (int e = 0; e < 8; ++e) xf[e] *= nf[e];
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            float wf[8];
            unpack8(wv[r][j], wf);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[r] = fmaf(wf[e], xf[e], acc[r]);
          }
        } else {
#pragma unroll
          for (int r = 0; r < 2; ++r) xs ^= wv[r][j].x ^ wv[r][j].y ^ wv[r][j].z ^ wv[r][j].w;
        }
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
      acc[0] += __shfl_xor_sync(~0u, acc[0], off);
      acc[1] += __shfl_xor_sync(~0u, acc[1], off);
      xs ^= __shfl_xor_sync(~0u, xs, off);
    }
    if (lane == 0) y[grp] = acc[0] * acc[1] + (float)(xs & 1);
  }
}

// Linear read: every thread grid-strides 16-byte pieces, 8 in flight.
__global__ void __launch_bounds__(kThreads, 2) linear(const uint4* __restrict__ w, long n16, float* y) {
  const long t = (long)blockIdx.x * blockDim.x + threadIdx.x, nt = (long)gridDim.x * blockDim.x;
  unsigned xs = 0;
  for (long i = t; i < n16; i += 8 * nt) {
    uint4 v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = i + u * nt < n16 ? ldw(w + i + u * nt) : make_uint4(0,0,0,0);
#pragma unroll
    for (int u = 0; u < 8; ++u) xs ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (xs == 0x12345678u) y[t] = 1;
}

int main() {
  const long out = 22016, in = 4096, n = out * in;
  const int copies = 4;
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  __nv_bfloat16 *w, *x, *nw; float* y;
  CK(cudaMalloc(&w, n * 2 * copies + (64l << 20))); CK(cudaMalloc(&x, in * 2)); CK(cudaMalloc(&nw, in * 2));
  CK(cudaMalloc(&y, out * 4 * 64));
  CK(cudaMemset(w, 0x3c, n * 2 * copies)); CK(cudaMemset(x, 0x3c, in * 2)); CK(cudaMemset(nw, 0x3c, in * 2));
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  const double gb = n * 2.0 / 1e9;
  auto timeit = [&](const char* name, auto launch) {
    for (int i = 0; i < 4; ++i) launch(w + (i % copies) * n);
    CK(cudaDeviceSynchronize());
    const int reps = 60;
    CK(cudaEventRecord(a));
    for (int i = 0; i < reps; ++i) launch(w + (i % copies) * n);
    CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b)); CK(cudaGetLastError());
    float ms; CK(cudaEventElapsedTime(&ms, a, b));
    const double us = ms * 1e3 / reps;
    printf("%-34s %8.2f us %6.3f TB/s\n", name, us, gb / us * 1e3);
  };
  for (int pass = 0; pass < 2; ++pass) {
    for (int blocks : {sms * 2, 230}) {
      char nm[64];
      snprintf(nm, 64, "linear %d blocks", blocks);
      timeit(nm, [&](const __nv_bfloat16* p) { linear<<<blocks, kThreads>>>((const uint4*)p, n / 8, y); });
#define RUN(L, M, NAME) snprintf(nm, 64, "%s %s %d", NAME, M ? "math" : "load", blocks); \
      timeit(nm, [&](const __nv_bfloat16* p) { gemv<L, M><<<blocks, kThreads>>>(x, nw, p, y, out, in); });
      RUN(0, false, "rowpair"); RUN(1, false, "adjacent"); RUN(2, false, "stepmajor"); RUN(3, false, "random");
      RUN(0, true, "rowpair"); RUN(1, true, "adjacent"); RUN(2, true, "stepmajor"); RUN(3, true, "random");
    }
  }
  return 0;
}
