// Read-order probe 2: which order of a GEMV's W loads keeps HBM busiest.
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdint>
#include <algorithm>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1);} } while (0)
constexpr int kWarps = 8, kThreads = 256;
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
// 16 pieces of W (p: lane's first, piece j at p + 256 j), products with x*nw at k, into acc[r of piece]
template <int SPLIT>  // pieces j < SPLIT go to acc0, others to acc1
__device__ __forceinline__ void step16(const __nv_bfloat16* p, const __nv_bfloat16* x, const __nv_bfloat16* nw,
                                       long k0a, long k0b, int lane, float& acc0, float& acc1) {
  uint4 wv[16];
#pragma unroll
  for (int j = 0; j < 16; ++j) wv[j] = ldw(p + 256 * j);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const long k = (j < SPLIT ? k0a + 256 * j : k0b + 256 * (j - SPLIT)) + lane * 8;
    float xf[8], nf[8], wf[8];
    unpack8(__ldg(reinterpret_cast<const uint4*>(x + k)), xf);
    unpack8(__ldg(reinterpret_cast<const uint4*>(nw + k)), nf);
    unpack8(wv[j], wf);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      if (j < SPLIT) acc0 = fmaf(wf[e], xf[e] * nf[e], acc0); else acc1 = fmaf(wf[e], xf[e] * nf[e], acc1);
    }
  }
}
// MODE 0 rowpair: rows g, g+pair, 8 pieces of each a step (main's gate|up / qkv order)
// MODE 1 rowfull: rows g, g+pair, one whole 4096-wide stretch of one row a step
// MODE 2 stepmajor2: 2-row groups, a warp's step's 8 KiB contiguous, the grid's warps adjacent
// MODE 3 row: one row a group, 16 pieces a step (out / down order)
// MODE 4 stepmajor1: one-row groups, stepmajor
template <int MODE>
__global__ void __launch_bounds__(kThreads, 2)
gemv(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ nw,
     const __nv_bfloat16* __restrict__ w, float* __restrict__ y, long out, long in) {
  const int lane = threadIdx.x % 32;
  const bool two = MODE <= 2 || MODE >= 5;
  const long pair = out / 2, groups = two ? pair : out;
  const long warps = (long)gridDim.x * kWarps;
  const long gw = (long)blockIdx.x * kWarps + threadIdx.x / 32;
  for (long g = gw; g < groups; g += warps) {
    float a0 = 0, a1 = 0;
    const long round = g / warps;
    if (MODE == 0) {
      for (long s = 0; s < in; s += 2048) {
        // 8 pieces of row g then 8 of row g+pair, in one 16-load step
        uint4 wv[16];
        const __nv_bfloat16* p0 = w + g * in + s + lane * 8;
        const __nv_bfloat16* p1 = w + (g + pair) * in + s + lane * 8;
#pragma unroll
        for (int j = 0; j < 8; ++j) { wv[j] = ldw(p0 + 256 * j); wv[8 + j] = ldw(p1 + 256 * j); }
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const long k = s + 256 * j + lane * 8;
          float xf[8], nf[8], wf[8], uf[8];
          unpack8(__ldg(reinterpret_cast<const uint4*>(x + k)), xf);
          unpack8(__ldg(reinterpret_cast<const uint4*>(nw + k)), nf);
          unpack8(wv[j], wf); unpack8(wv[8 + j], uf);
#pragma unroll
          for (int e = 0; e < 8; ++e) { const float xn = xf[e] * nf[e]; a0 = fmaf(wf[e], xn, a0); a1 = fmaf(uf[e], xn, a1); }
        }
      }
    } else if (MODE == 1) {
      for (long s = 0; s < in; s += 4096) step16<16>(w + g * in + s + lane * 8, x, nw, s, 0, lane, a0, a1);
      for (long s = 0; s < in; s += 4096) step16<0>(w + (g + pair) * in + s + lane * 8, x, nw, 0, s, lane, a0, a1);
    } else if (MODE == 2) {
      const long S = in / 2048;
      for (long s = 0; s < S; ++s)
        step16<8>(w + ((round * S + s) * warps + (g - round * warps)) * 4096 + lane * 8, x, nw, s * 2048, s * 2048, lane, a0, a1);
    } else if (MODE == 3) {
      for (long s = 0; s < in; s += 4096) step16<16>(w + g * in + s + lane * 8, x, nw, s, 0, lane, a0, a1);
    } else if (MODE == 5) {  // rows 2g, 2g+1 adjacent (interleaved gate/up), a whole 4096 stretch a step
      for (long s = 0; s < in; s += 4096) step16<16>(w + 2 * g * in + s + lane * 8, x, nw, s, 0, lane, a0, a1);
      for (long s = 0; s < in; s += 4096) step16<0>(w + (2 * g + 1) * in + s + lane * 8, x, nw, 0, s, lane, a0, a1);
    } else if (MODE == 6) {  // halves-major: [s][g][r][2048], grid-independent
      const long S = in / 2048;
      for (long s = 0; s < S; ++s)
        step16<8>(w + (s * groups + g) * 4096 + lane * 8, x, nw, s * 2048, s * 2048, lane, a0, a1);
    } else {
      const long S = in / 4096;
      for (long s = 0; s < S; ++s)
        step16<16>(w + ((round * S + s) * warps + (g - round * warps)) * 4096 + lane * 8, x, nw, s * 4096, 0, lane, a0, a1);
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) { a0 += __shfl_xor_sync(~0u, a0, off); a1 += __shfl_xor_sync(~0u, a1, off); }
    if (lane == 0) y[g] = a0 * a1 + a0;
  }
}
long balanced(long groups, int sms) {
  long blocks = std::min<long>((groups + kWarps - 1) / kWarps, sms * 2l);
  const long per = (groups + blocks * kWarps - 1) / (blocks * kWarps);
  return (groups + per * kWarps - 1) / (per * kWarps);
}
int main() {
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const long maxn = 32000l * 4096;
  const int copies = 4;
  __nv_bfloat16 *w, *x, *nw; float* y;
  CK(cudaMalloc(&w, maxn * 2 * copies + (96l << 20))); CK(cudaMalloc(&x, 16384 * 2)); CK(cudaMalloc(&nw, 16384 * 2));
  CK(cudaMalloc(&y, 32768 * 4));
  CK(cudaMemset(w, 0x3c, maxn * 2 * copies + (96l << 20))); CK(cudaMemset(x, 0x3c, 16384 * 2)); CK(cudaMemset(nw, 0x3c, 16384 * 2));
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  struct Shape { const char* name; long out, in; int modes[5]; int nm; };
  Shape shapes[] = {{"gate|up 22016x4096", 22016, 4096, {0, 1, 2, 5, 6}, 5}, {"qkv 12288x4096", 12288, 4096, {0, 1, 2, 5, 6}, 5},
                    {"down' 4096x12288", 4096, 12288, {3, 4}, 2}, {"out 4096x4096", 4096, 4096, {3, 4}, 2},
                    {"lm 32000x4096", 32000, 4096, {0, 2, 6}, 3}};
  const char* mname[] = {"rowpair", "rowfull", "stepmajor2", "row", "stepmajor1", "adj-rowfull", "halvesmajor"};
  for (int pass = 0; pass < 3; ++pass)
    for (auto& sh : shapes) {
      const long n = sh.out * sh.in;
      for (int mi = 0; mi < sh.nm; ++mi) {
        const int m = sh.modes[mi];
        const long groups = (m <= 2 || m >= 5) ? sh.out / 2 : sh.out;
        const long blocks = balanced(groups, sms);
        auto launch = [&](int i) {
          const __nv_bfloat16* p = w + (i % copies) * n;
          switch (m) {
            case 0: gemv<0><<<blocks, kThreads>>>(x, nw, p, y, sh.out, sh.in); break;
            case 1: gemv<1><<<blocks, kThreads>>>(x, nw, p, y, sh.out, sh.in); break;
            case 2: gemv<2><<<blocks, kThreads>>>(x, nw, p, y, sh.out, sh.in); break;
            case 3: gemv<3><<<blocks, kThreads>>>(x, nw, p, y, sh.out, sh.in); break;
            case 5: gemv<5><<<blocks, kThreads>>>(x, nw, p, y, sh.out, sh.in); break;
            case 6: gemv<6><<<blocks, kThreads>>>(x, nw, p, y, sh.out, sh.in); break;
            case 4: gemv<4><<<blocks, kThreads>>>(x, nw, p, y, sh.out, sh.in); break;
          }
        };
        for (int i = 0; i < 4; ++i) launch(i);
        CK(cudaDeviceSynchronize());
        const int reps = 60;
        CK(cudaEventRecord(a));
        for (int i = 0; i < reps; ++i) launch(i);
        CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b)); CK(cudaGetLastError());
        float ms; CK(cudaEventElapsedTime(&ms, a, b));
        const double us = ms * 1e3 / reps;
        printf("%-20s %-11s %4ld blocks %8.2f us %6.3f TB/s\n", sh.name, mname[m], blocks, us, n * 2.0 / us * 1e-6);
      }
    }
  return 0;
}
