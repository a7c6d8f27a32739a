// Stand-alone probe (gpubench's own code: nvcc -O3 -arch=sm_90 -o chain chain.cu).
// The floor of a kernel chain that only streams: a llama-2-7b decode step's reads at context 2048
// (per layer qkv 100.7 MB, KV cache 33.6 MB, out 33.6 MB, gate|up 180.4 MB, down 90.2 MB; 32
// layers, each its own bytes; then the LM head's 262.1 MB) as 161 read kernels, no arithmetic.
// Each kernel runs 2 blocks an SM (shared memory caps it, as the engine's GEMVs fill the register
// file), every thread keeping 8 loads of 16 B in flight (64 KiB an SM); then 16 loads (128 KiB an
// SM, the engine's GEMVs' 8 KiB a warp), and 4 blocks an SM with 8 and 16 loads. A __syncwarp
// between a turn's loads and its xors keeps every load in flight (version 3). Version 4: 1 to 3
// blocks an SM with 4 to 16 loads a thread. With PDL, as in the
// engine: each kernel lets the next launch at its start and issues its first loads before
// griddepcontrol.wait. The step is timed with events, 9 times, median. Check: the xor of the first
// kernel's bytes against the host.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                            \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));    \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

constexpr int kThreads = 256;

__device__ __forceinline__ uint4 ld(const uint4* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

template <bool kPdl, int kU>
__global__ void __launch_bounds__(kThreads) stream_kernel(const uint4* __restrict__ p,
                                                           std::int64_t n16, unsigned* out) {
  if constexpr (kPdl) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  bool first = true;
  for (; i + (kU - 1) * stride < n16; i += kU * stride) {
    uint4 v[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) v[u] = ld(p + i + u * stride);
    // Keeps ptxas from interleaving each load's xor before the next load: without it, the chain
    // of xors let about 4 loads a thread be in flight whatever kU (versions 1 and 2).
    __syncwarp();
    if (first) {
      if constexpr (kPdl) asm volatile("griddepcontrol.wait;" ::: "memory");
      first = false;
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (first && kPdl) asm volatile("griddepcontrol.wait;" ::: "memory");
  for (; i < n16; i += stride) {
    const uint4 v = ld(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc) atomicXor(out, acc);
}

int main() {
  const std::int64_t layer_sizes[] = {100663296, 33554432, 33554432, 180355072, 90177536};
  const std::int64_t lm = 262144000;
  std::int64_t total = lm;
  for (std::int64_t s : layer_sizes) total += 32 * s;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  char* buf;
  CK(cudaMalloc(&buf, total));
  // A pattern: each 4-byte word its index times a constant (so the xor check sees real data).
  {
    const std::int64_t words = total / 4;
    std::vector<unsigned> chunk(1 << 24);
    for (std::int64_t w0 = 0; w0 < words; w0 += chunk.size()) {
      const std::int64_t m = std::min<std::int64_t>(chunk.size(), words - w0);
      for (std::int64_t k = 0; k < m; ++k) chunk[k] = static_cast<unsigned>((w0 + k) * 2654435761ull);
      CK(cudaMemcpy(buf + w0 * 4, chunk.data(), m * 4, cudaMemcpyHostToDevice));
    }
  }
  unsigned* out;
  CK(cudaMalloc(&out, 4 * 200));
  struct K {
    const uint4* p;
    std::int64_t n16;
  };
  std::vector<K> ks;
  std::int64_t off = 0;
  for (int l = 0; l < 32; ++l)
    for (std::int64_t s : layer_sizes) {
      ks.push_back({reinterpret_cast<const uint4*>(buf + off), s / 16});
      off += s;
    }
  ks.push_back({reinterpret_cast<const uint4*>(buf + off), lm / 16});
  // Configurations: blocks an SM (shared memory caps it) and loads in flight a thread.
  struct Cfg {
    int per_sm, u;
  };
  const Cfg cfgs[] = {{2, 8}, {2, 4}, {2, 6}, {3, 4}, {3, 6}, {1, 16}, {1, 8}};
  auto smem_of = [](int per_sm) { return (220 / per_sm) * 1024; };
  auto set_smem = [&](auto kern) {
    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, 220 * 1024));
  };
  set_smem(stream_kernel<true, 4>);
  set_smem(stream_kernel<false, 4>);
  set_smem(stream_kernel<true, 6>);
  set_smem(stream_kernel<false, 6>);
  set_smem(stream_kernel<true, 8>);
  set_smem(stream_kernel<false, 8>);
  set_smem(stream_kernel<true, 16>);
  set_smem(stream_kernel<false, 16>);
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  auto step = [&](bool pdl, Cfg c) {
    for (std::size_t k = 0; k < ks.size(); ++k) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(c.per_sm * sms);
      cfg.blockDim = dim3(kThreads);
      cfg.dynamicSmemBytes = smem_of(c.per_sm);
      cfg.stream = st;
      cudaLaunchAttribute at[1];
      at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      at[0].val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = at;
      cfg.numAttrs = pdl ? 1 : 0;
#define GO(P, U) CK(cudaLaunchKernelEx(&cfg, stream_kernel<P, U>, ks[k].p, ks[k].n16, out + k))
      if (pdl) {
        if (c.u == 4) GO(true, 4); else if (c.u == 6) GO(true, 6); else if (c.u == 8) GO(true, 8); else GO(true, 16);
      } else {
        if (c.u == 4) GO(false, 4); else if (c.u == 6) GO(false, 6); else if (c.u == 8) GO(false, 8); else GO(false, 16);
      }
#undef GO
    }
  };
  // Check the first kernel's xor.
  CK(cudaMemsetAsync(out, 0, 4 * 200, st));
  step(true, cfgs[0]);
  CK(cudaStreamSynchronize(st));
  unsigned got = 0, want = 0;
  CK(cudaMemcpy(&got, out, 4, cudaMemcpyDeviceToHost));
  for (std::int64_t w = 0; w < layer_sizes[0] / 4; ++w) want ^= static_cast<unsigned>(w * 2654435761ull);
  std::printf("check first kernel xor %08x want %08x %s\n", got, want, got == want ? "ok" : "FAILED");
  if (got != want) return 1;
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  const double bytes = static_cast<double>(total);
  for (int round = 0; round < 2; ++round)
    for (const Cfg& c : cfgs)
    for (bool pdl : {true, false}) {
      std::vector<float> t;
      for (int r = 0; r < 10; ++r) {
        CK(cudaEventRecord(a, st));
        step(pdl, c);
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (r > 0) t.push_back(ms);
      }
      std::sort(t.begin(), t.end());
      const double med = t[t.size() / 2];
      std::printf("round %d %d blocks/SM, %2d loads a thread, %-6s step %.3f ms (min %.3f)  %.3f TB/s  %.1f us a layer with the LM head's "
                  "share removed at the step's rate\n",
                  round, c.per_sm, c.u, pdl ? "pdl" : "no_pdl", med, t[0], bytes / (med * 1e-3) * 1e-12,
                  (med * 1e3) * (bytes - lm) / bytes / 32);
    }
  return 0;
}
