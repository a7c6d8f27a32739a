// Stand-alone probe (gpubench's own code: nvcc -O3 -arch=sm_90 -o chain chain.cu).
// The floor of a kernel chain that only streams: a llama-2-7b decode step's reads at context 2048
// (per layer qkv 100.7 MB, KV cache 33.6 MB, out 33.6 MB, gate|up 180.4 MB, down 90.2 MB; 32
// layers, each its own bytes; then the LM head's 262.1 MB) as 161 read kernels, no arithmetic.
// With PDL, as in the engine: each kernel lets the next launch at its start and issues its first
// loads before griddepcontrol.wait. The step is timed with events, 9 times, median.
// Version 5. Versions 1-4 read with a grid-stride loop of kU loads a thread and finished the
// leftover (up to kU - 1 strides) one load at a time: a serial tail of up to 15 load latencies
// a kernel, which the sizes of the step's kernels hit differently for each kU. Here no load is
// left to a serial tail; two ways of dealing the bytes:
//   stride  every turn of a thread issues kU loads, one grid stride apart; the last turn's loads
//           past the end are predicated off (all of that turn's loads still in flight at once);
//   tiles   a block reads tiles of kU x blockDim contiguous 16-byte pieces, tiles dealt to the
//           blocks in turn (as gpubench's read kernel); the last tile predicated.
// Check: every kernel's xor (every configuration) against the host's xor of its bytes.
// Each configuration's step is timed launched on a stream and replayed from a CUDA graph (as the
// engine's decode step). Then the same kernels alone over sizes, 40 back to back with PDL.
// CHAIN_CFG=stride,2,16 replays one configuration's graph only (for a kernel tracer).
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

// kTiles false: stride mode; true: tiles mode.
template <bool kTiles, int kU>
__global__ void __launch_bounds__(kThreads) stream_kernel(const uint4* __restrict__ p,
                                                           std::int64_t n16, unsigned* out) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const std::int64_t threads = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  // Per turn: the first piece of this thread and the distance between its kU pieces.
  std::int64_t first, step, turn_stride;
  if constexpr (kTiles) {
    first = static_cast<std::int64_t>(blockIdx.x) * kU * blockDim.x + threadIdx.x;
    step = blockDim.x;
    turn_stride = static_cast<std::int64_t>(gridDim.x) * kU * blockDim.x;
  } else {
    first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    step = threads;
    turn_stride = kU * threads;
  }
  unsigned acc = 0;
  bool waited = false;
  for (std::int64_t i = first; i < n16; i += turn_stride) {
    uint4 v[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const std::int64_t j = i + u * step;
      v[u] = j < n16 ? ld(p + j) : make_uint4(0, 0, 0, 0);
    }
    // Keeps ptxas from placing each load's xor before the next load (version 3).
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

template <bool T, int U>
void set_smem() {
  CK(cudaFuncSetAttribute(stream_kernel<T, U>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          220 * 1024));
}

struct Cfg {
  bool tiles;
  int per_sm, u;
};

int main() {
  const std::int64_t layer_sizes[] = {100663296, 33554432, 33554432, 180355072, 90177536};
  const std::int64_t lm = 262144000;
  std::int64_t total = lm;
  for (std::int64_t s : layer_sizes) total += 32 * s;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  char* buf;
  CK(cudaMalloc(&buf, total));
  struct K {
    const uint4* p;
    std::int64_t n16;
  };
  std::vector<K> ks;
  std::vector<std::int64_t> word0;  // each kernel's first 4-byte word
  {
    std::int64_t off = 0;
    for (int l = 0; l < 32; ++l)
      for (std::int64_t s : layer_sizes) {
        ks.push_back({reinterpret_cast<const uint4*>(buf + off), s / 16});
        word0.push_back(off / 4);
        off += s;
      }
    ks.push_back({reinterpret_cast<const uint4*>(buf + off), lm / 16});
    word0.push_back(off / 4);
  }
  const int nk = static_cast<int>(ks.size());
  // A pattern: each 4-byte word its index times a constant; each kernel's xor on the host.
  std::vector<unsigned> want(nk, 0);
  {
    const std::int64_t words = total / 4;
    std::vector<unsigned> chunk(1 << 24);
    int k = 0;
    for (std::int64_t w0 = 0; w0 < words; w0 += chunk.size()) {
      const std::int64_t m = std::min<std::int64_t>(chunk.size(), words - w0);
      for (std::int64_t q = 0; q < m; ++q) {
        const std::int64_t w = w0 + q;
        const unsigned v = static_cast<unsigned>(w * 2654435761ull);
        chunk[q] = v;
        while (k + 1 < nk && w >= word0[k + 1]) ++k;
        want[k] ^= v;
      }
      CK(cudaMemcpy(buf + w0 * 4, chunk.data(), m * 4, cudaMemcpyHostToDevice));
    }
  }
  unsigned* out;
  CK(cudaMalloc(&out, 4 * nk));
  set_smem<false, 4>(); set_smem<false, 6>(); set_smem<false, 8>(); set_smem<false, 16>();
  set_smem<true, 4>(); set_smem<true, 6>(); set_smem<true, 8>(); set_smem<true, 16>();
  // Shared memory caps the blocks an SM, as the engine's GEMVs fill the register file.
  auto smem_of = [](int per_sm) { return (220 / per_sm) * 1024; };
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  auto launch = [&](const Cfg& c, const K& k, unsigned* o) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(c.per_sm * sms);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = smem_of(c.per_sm);
    cfg.stream = st;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
#define GO(T, U) CK(cudaLaunchKernelEx(&cfg, stream_kernel<T, U>, k.p, k.n16, o))
    if (c.tiles) {
      if (c.u == 4) GO(true, 4); else if (c.u == 6) GO(true, 6); else if (c.u == 8) GO(true, 8); else GO(true, 16);
    } else {
      if (c.u == 4) GO(false, 4); else if (c.u == 6) GO(false, 6); else if (c.u == 8) GO(false, 8); else GO(false, 16);
    }
#undef GO
  };
  auto step = [&](const Cfg& c) {
    for (int k = 0; k < nk; ++k) launch(c, ks[k], out + k);
  };
  std::vector<Cfg> cfgs;
  for (bool t : {false, true})
    for (int per_sm : {1, 2, 3, 4})
      for (int u : {4, 6, 8, 16}) cfgs.push_back({t, per_sm, u});
  // Check every configuration's every kernel.
  for (const Cfg& c : cfgs) {
    CK(cudaMemsetAsync(out, 0, 4 * nk, st));
    step(c);
    CK(cudaStreamSynchronize(st));
    std::vector<unsigned> got(nk);
    CK(cudaMemcpy(got.data(), out, 4 * nk, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int k = 0; k < nk; ++k) bad += got[k] != want[k];
    std::printf("check %-6s %d blocks/SM %2d loads: %d of %d kernels' xors wrong -> %s\n",
                c.tiles ? "tiles" : "stride", c.per_sm, c.u, bad, nk, bad ? "FAILED" : "ok");
    if (bad) return 1;
  }
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  const double bytes = static_cast<double>(total);
  // The step captured in a CUDA graph, as the engine replays its decode step.
  auto graph_of = [&](const Cfg& c) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    step(c);
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphDestroy(g));
    return ge;
  };
  // CHAIN_CFG=mode,blocks,loads: that configuration's graph alone, 30 replays (for a tracer).
  if (const char* one = std::getenv("CHAIN_CFG")) {
    char mode[16] = {};
    int per_sm = 0, u = 0;
    if (std::sscanf(one, "%15[a-z],%d,%d", mode, &per_sm, &u) != 3) return 2;
    const Cfg c{mode[0] == 't', per_sm, u};
    cudaGraphExec_t ge = graph_of(c);
    std::vector<float> t;
    for (int r = 0; r < 30; ++r) {
      CK(cudaEventRecord(a, st));
      CK(cudaGraphLaunch(ge, st));
      CK(cudaEventRecord(b, st));
      CK(cudaEventSynchronize(b));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, a, b));
      t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    std::printf("graph %s: step median %.3f ms (min %.3f)\n", one, t[15], t[0]);
    return 0;
  }
  for (int round = 0; round < 2; ++round)
    for (const Cfg& c : cfgs)
    for (bool graph : {false, true}) {
      cudaGraphExec_t ge = graph ? graph_of(c) : nullptr;
      std::vector<float> t;
      for (int r = 0; r < 10; ++r) {
        CK(cudaEventRecord(a, st));
        if (graph)
          CK(cudaGraphLaunch(ge, st));
        else
          step(c);
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (r > 0) t.push_back(ms);
      }
      std::sort(t.begin(), t.end());
      const double med = t[t.size() / 2];
      std::printf("round %d %-6s %d blocks/SM, %2d loads a thread, %-6s step %.3f ms (min %.3f)  %.3f TB/s  "
                  "%.1f us a layer with the LM head's share removed at the step's rate\n",
                  round, c.tiles ? "tiles" : "stride", c.per_sm, c.u, graph ? "graph" : "stream", med, t[0],
                  bytes / (med * 1e-3) * 1e-12, (med * 1e3) * (bytes - lm) / bytes / 32);
      if (ge) CK(cudaGraphExecDestroy(ge));
    }
  // One kernel alone over sizes: 40 launches back to back (PDL) over 4 regions of the buffer.
  const std::int64_t sizes[] = {33554432, 90177536, 180355072, 536870912, 2147483648};
  const Cfg size_cfgs[] = {{false, 2, 6}, {false, 2, 8}, {true, 2, 8}, {true, 4, 8}, {false, 4, 16}};
  for (const Cfg& c : size_cfgs)
    for (std::int64_t size : sizes) {
      const int regions = size * 4 <= total ? 4 : 1;
      auto go = [&](int i) {
        const K k{reinterpret_cast<const uint4*>(buf + (i % regions) * size), size / 16};
        launch(c, k, out);
      };
      for (int i = 0; i < 4; ++i) go(i);
      std::vector<float> per;
      for (int r = 0; r < 3; ++r) {
        CK(cudaEventRecord(a, st));
        for (int i = 0; i < 40; ++i) go(i);
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        per.push_back(ms * 1e3f / 40);
      }
      std::sort(per.begin(), per.end());
      std::printf("alone %-6s %d blocks/SM %2d loads: %7.1f MB  %8.2f us  %.3f TB/s  (us above bytes at "
                  "4.40 TB/s: %.2f)\n",
                  c.tiles ? "tiles" : "stride", c.per_sm, c.u, size / 1e6, per[1], size / per[1] * 1e-6,
                  per[1] - size / 4.40e6);
    }
  CK(cudaGetLastError());
  return 0;
}
