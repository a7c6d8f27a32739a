// Probe 5: row stride (ld) and the gap between paired rows, for the decode GEMVs' shapes.
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
// RW 2: rows g and g+pair (at + delta), 8 pieces each a step; RW 1: row g, 16 pieces a step.
template <int RW>
__global__ void __launch_bounds__(kThreads, 2)
gemv(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ nw,
     const __nv_bfloat16* __restrict__ w, float* __restrict__ y, long out, long in, long ld, long delta) {
  constexpr int KU = 16 / RW, kStep = 256 * KU;
  const int lane = threadIdx.x % 32;
  const long pair = out / 2, groups = RW == 2 ? pair : out;
  const long warps = (long)gridDim.x * kWarps;
  for (long g = (long)blockIdx.x * kWarps + threadIdx.x / 32; g < groups; g += warps) {
    float acc[RW] = {};
    const __nv_bfloat16* wr[RW];
    wr[0] = w + g * ld + lane * 8;
    if (RW == 2) wr[RW - 1] = w + (g + pair) * ld + delta + lane * 8;
    for (long s = 0; s < in; s += kStep) {
      uint4 wv[RW][KU];
#pragma unroll
      for (int j = 0; j < KU; ++j)
#pragma unroll
        for (int r = 0; r < RW; ++r) wv[r][j] = s + 256 * j + lane * 8 < in ? ldw(wr[r] + s + 256 * j) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int j = 0; j < KU; ++j) {
        const long k = s + 256 * j + lane * 8;
        const bool ok = k < in;
        float xf[8], nf[8];
        unpack8(ok ? __ldg(reinterpret_cast<const uint4*>(x + k)) : make_uint4(0, 0, 0, 0), xf);
        unpack8(ok ? __ldg(reinterpret_cast<const uint4*>(nw + k)) : make_uint4(0, 0, 0, 0), nf);
#pragma unroll
        for (int r = 0; r < RW; ++r) {
          float wf[8];
          unpack8(wv[r][j], wf);
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[r] = fmaf(wf[e], xf[e] * nf[e], acc[r]);
        }
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2)
#pragma unroll
      for (int r = 0; r < RW; ++r) acc[r] += __shfl_xor_sync(~0u, acc[r], off);
    if (lane == 0) y[g] = acc[0] * acc[RW - 1];
  }
}
long balanced(long groups, int sms) {
  long blocks = std::min<long>((groups + kWarps - 1) / kWarps, sms * 2l);
  const long per = (groups + blocks * kWarps - 1) / (blocks * kWarps);
  return (groups + per * kWarps - 1) / (per * kWarps);
}
int main() {
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const long maxn = 32000l * 4608 + (4l << 20);
  const int copies = 4;
  __nv_bfloat16 *w, *x, *nw; float* y;
  CK(cudaMalloc(&w, maxn * 2 * copies)); CK(cudaMalloc(&x, 16384 * 2)); CK(cudaMalloc(&nw, 16384 * 2));
  CK(cudaMalloc(&y, 32768 * 4));
  CK(cudaMemset(w, 0x3c, maxn * 2 * copies)); CK(cudaMemset(x, 0x3c, 16384 * 2)); CK(cudaMemset(nw, 0x3c, 16384 * 2));
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  struct Case { const char* name; int rw; long out, in, ld, delta; };
  Case cases[] = {
    {"gate|up", 2, 22016, 4096, 4096, 0},
    {"gate|up", 2, 22016, 4096, 4128, 0},
    {"gate|up", 2, 22016, 4096, 4160, 0},
    {"gate|up", 2, 22016, 4096, 4224, 0},
    {"gate|up", 2, 22016, 4096, 4288, 0},
    {"gate|up", 2, 22016, 4096, 4352, 0},
    {"gate|up", 2, 22016, 4096, 4480, 0},
    {"gate|up", 2, 22016, 4096, 4608, 0},
    {"qkv", 2, 12288, 4096, 4096, 0},
    {"qkv", 2, 12288, 4096, 4128, 0},
    {"qkv", 2, 12288, 4096, 4160, 0},
    {"qkv", 2, 12288, 4096, 4224, 0},
    {"qkv", 2, 12288, 4096, 4288, 0},
    {"qkv", 2, 12288, 4096, 4352, 0},
    {"qkv", 2, 12288, 4096, 4480, 0},
    {"qkv", 2, 12288, 4096, 4608, 0},
    {"lm", 2, 32000, 4096, 4096, 0},
    {"lm", 2, 32000, 4096, 4128, 0},
    {"lm", 2, 32000, 4096, 4160, 0},
    {"lm", 2, 32000, 4096, 4224, 0},
    {"lm", 2, 32000, 4096, 4288, 0},
    {"lm", 2, 32000, 4096, 4352, 0},
    {"lm", 2, 32000, 4096, 4480, 0},
    {"lm", 2, 32000, 4096, 4608, 0},
    {"down", 1, 4096, 11008, 11008, 0},
    {"down", 1, 4096, 11008, 11040, 0},
    {"down", 1, 4096, 11008, 11072, 0},
    {"down", 1, 4096, 11008, 11136, 0},
    {"down", 1, 4096, 11008, 11200, 0},
    {"down", 1, 4096, 11008, 11264, 0},
    {"down", 1, 4096, 11008, 11392, 0},
    {"down", 1, 4096, 11008, 11520, 0},
    {"out", 1, 4096, 4096, 4096, 0},
    {"out", 1, 4096, 4096, 4128, 0},
    {"out", 1, 4096, 4096, 4160, 0},
    {"out", 1, 4096, 4096, 4224, 0},
    {"out", 1, 4096, 4096, 4288, 0},
    {"out", 1, 4096, 4096, 4352, 0},
    {"out", 1, 4096, 4096, 4480, 0},
    {"out", 1, 4096, 4096, 4608, 0}
  };

  for (int pass = 0; pass < 3; ++pass)
    for (auto& c : cases) {
      const long n = c.out * c.ld + c.delta;
      const long blocks = balanced(c.rw == 2 ? c.out / 2 : c.out, sms);
      auto launch = [&](int i) {
        const __nv_bfloat16* p = w + (i % copies) * (n + 4096);
        if (c.rw == 2) gemv<2><<<blocks, kThreads>>>(x, nw, p, y, c.out, c.in, c.ld, c.delta);
        else gemv<1><<<blocks, kThreads>>>(x, nw, p, y, c.out, c.in, c.ld, 0);
      };
      for (int i = 0; i < 4; ++i) launch(i);
      CK(cudaDeviceSynchronize());
      const int reps = 60;
      CK(cudaEventRecord(a));
      for (int i = 0; i < reps; ++i) launch(i);
      CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b)); CK(cudaGetLastError());
      float ms; CK(cudaEventElapsedTime(&ms, a, b));
      const double us = ms * 1e3 / reps;
      printf("%-8s pad %4ld ld %6ld gap %5ld  %8.2f us %6.3f TB/s\n", c.name, c.ld - c.in, c.ld, c.delta, us, c.out * c.in * 2.0 / us * 1e-6);
    }
  return 0;
}
