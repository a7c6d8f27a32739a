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
// Check: every kernel's xor against the host's xor of its bytes, every layout (193 kernels at
// most, each its own result slot).
// Output: step ms (median of 20 replays), 3 rounds; LAYOUT=name replays one layout 30 times (for a
// kernel tracer).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
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

struct K {
  std::int64_t off, bytes;  // in the buffer
  int grid, threads, smem;
  bool early;
};

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const std::int64_t qkv = 100663296, cache = 33554432, wo = 33554432, gu = 180355072,
                     down = 90177536, lm = 262144000, merge = 32 * 16 * 130 * 4;
  const std::int64_t per_layer = qkv + cache + merge + wo + gu + down;
  const std::int64_t total = 32 * per_layer + lm;
  char* buf;
  CK(cudaMalloc(&buf, total));
  const int gemv_smem = 110 * 1024, cache_smem = 55 * 1024, merge_smem = 8 * 1024;
  auto layout = [&](const std::string& name) {
    const bool six = name != "regular5";
    const bool grids = name == "grids" || name == "engine";
    const bool out_end = name == "out_end" || name == "engine";
    std::vector<K> ks;
    std::int64_t off = 0;
    auto add = [&](std::int64_t bytes, int grid, int threads, int smem, bool early) {
      ks.push_back({off, bytes, grid, threads, smem, early});
    };
    for (int l = 0; l < 32; ++l) {
      add(qkv, grids ? 256 : 2 * sms, 256, gemv_smem, true);
      off += qkv;
      add(cache, grids ? 512 : 2 * sms, grids ? 128 : 256, grids ? cache_smem : gemv_smem, true);
      off += cache;
      if (six) add(merge, 32, 128, merge_smem, true);
      off += merge;
      add(wo, grids ? 256 : 2 * sms, 256, gemv_smem, !out_end);
      off += wo;
      add(gu, grids ? 230 : 2 * sms, 256, gemv_smem, true);
      off += gu;
      add(down, grids ? 256 : 2 * sms, 256, gemv_smem, true);
      off += down;
    }
    add(lm, 2 * sms, 256, gemv_smem, true);
    return ks;
  };
  const char* names[] = {"regular5", "regular6", "out_end", "grids", "engine"};
  // The pattern: each 4-byte word its index times a constant.
  {
    const std::int64_t words = total / 4;
    std::vector<unsigned> chunk(1 << 24);
    for (std::int64_t w0 = 0; w0 < words; w0 += chunk.size()) {
      const std::int64_t m = std::min<std::int64_t>(chunk.size(), words - w0);
      for (std::int64_t q = 0; q < m; ++q) chunk[q] = static_cast<unsigned>((w0 + q) * 2654435761ull);
      CK(cudaMemcpy(buf + w0 * 4, chunk.data(), m * 4, cudaMemcpyHostToDevice));
    }
  }
  CK(cudaFuncSetAttribute(read_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  CK(cudaFuncSetAttribute(read_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  unsigned* out;
  CK(cudaMalloc(&out, 4 * 256));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  auto graph_of = [&](const std::vector<K>& ks) {
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
      const uint4* p = reinterpret_cast<const uint4*>(buf + ks[k].off);
      unsigned* o = out + (k % 256);
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
  // Every layout's kernels read segments of regular6's (the same offsets): their xors once.
  std::vector<std::pair<std::int64_t, unsigned>> seg;
  for (const K& k : layout("regular6")) {
    unsigned x = 0;
    const std::int64_t w0 = k.off / 4, w1 = (k.off + k.bytes) / 4;
    for (std::int64_t w = w0; w < w1; ++w) x ^= static_cast<unsigned>(w * 2654435761ull);
    seg.push_back({k.off, x});
  }
  auto seg_xor = [&](std::int64_t off) {
    for (const auto& s : seg)
      if (s.first == off) return s.second;
    std::fprintf(stderr, "no segment at %lld\n", static_cast<long long>(off));
    std::exit(1);
  };
  for (const char* name : names) {
    const std::vector<K> ks = layout(name);
    std::vector<unsigned> want(256, 0);
    for (std::size_t k = 0; k < ks.size(); ++k) want[k % 256] ^= seg_xor(ks[k].off);
    cudaGraphExec_t ge = graph_of(ks);
    CK(cudaMemsetAsync(out, 0, 4 * 256, st));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaStreamSynchronize(st));
    std::vector<unsigned> got(256);
    CK(cudaMemcpy(got.data(), out, 4 * 256, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int k = 0; k < 256; ++k) bad += got[k] != want[k];
    std::printf("check %-8s %zu kernels: %d of 256 xor slots wrong -> %s\n", name, ks.size(), bad,
                bad ? "FAILED" : "ok");
    CK(cudaGraphExecDestroy(ge));
    if (bad) return 1;
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
    cudaGraphExec_t ge = graph_of(layout(one));
    const auto [med, mn] = time_graph(ge, 30);
    std::printf("layout %s: step median %.3f ms (min %.3f)\n", one, med, mn);
    return 0;
  }
  for (int round = 0; round < 3; ++round)
    for (const char* name : names) {
      cudaGraphExec_t ge = graph_of(layout(name));
      time_graph(ge, 2);
      const auto [med, mn] = time_graph(ge, 20);
      std::printf("round %d %-8s step %.3f ms (min %.3f)  %.3f TB/s\n", round, name, med, mn,
                  total / (med * 1e-3) * 1e-12);
      CK(cudaGraphExecDestroy(ge));
    }
  return 0;
}
