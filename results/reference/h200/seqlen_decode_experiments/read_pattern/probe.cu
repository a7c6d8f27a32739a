// Stand-alone probe (gpubench's own code, built alone: nvcc -O3 -arch=sm_90 -o probe probe.cu).
// Does the decode GEMV's access pattern, or its arithmetic, keep it below HBM's read rate?
// The llama-2-7b gate|up weight (22016 x 4096 bf16, rows padded to 4224 as in the engine) is read
// by five kernels, each timed over 40 launches rotating 4 copies of W (no L2 reuse):
//   seq      grid-stride read of the whole padded buffer (one contiguous front), 16 B a lane;
//   rows     the fused GEMV's loads only: warp w takes row pairs (g, g + 11008), g = w, w + warps,
//            ...; steps of 8 pieces of 16 B of each row a lane (8 KiB a warp), ld.global.nc with
//            L1::no_allocate and L2::256B as in the engine; the bytes folded by xor;
//   fma      rows plus the engine's arithmetic: x read through L1, bf16 unpacked, fp32 FMAs,
//            the warp's sums reduced by shuffles and written (SwiGLU of the two sums);
//   rows_g / fma_g   the same on a grid of 2 blocks an SM (264) instead of the engine's 230.
// Then the seq kernel alone over 33.5 MB to 2 GiB, timed per launch and back to back.
// Each kernel's result is checked: seq/rows against the xor of W computed on the host, fma
// against a host reference of the first 64 pairs.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                   \
  do {                                                                          \
    cudaError_t e_ = (x);                                                       \
    if (e_ != cudaSuccess) {                                                    \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)

constexpr int kIn = 4096, kLd = 4096 + 128, kPair = 11008, kRows = 2 * kPair;
constexpr int kThreads = 256, kWarps = kThreads / 32, KU = 8, kStep = 32 * 8 * KU;  // 2048 k a step
constexpr int kCopies = 4;

__device__ __forceinline__ uint4 load_w(const __nv_bfloat16* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

__device__ __forceinline__ void unpack8(uint4 v, float (&f)[8]) {
  const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(u[i] << 16);
    f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}

// Grid-stride read of n16 16-byte pieces, 4 independent loads a lane per turn.
__global__ void __launch_bounds__(kThreads) seq_kernel(const uint4* __restrict__ p, std::int64_t n16,
                                                        unsigned* out) {
  unsigned acc = 0;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = load_w(reinterpret_cast<const __nv_bfloat16*>(p + i + u * stride));
    __syncwarp();  // all 4 loads in flight before the xors (version 3; before: ptxas interleaved)
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n16; i += stride) {
    uint4 v = load_w(reinterpret_cast<const __nv_bfloat16*>(p + i));
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  atomicXor(out, acc);
}

// The fused GEMV's stream of W (RW = 2 rows a warp, KU pieces of each a lane and step); kFma adds
// its arithmetic. Without kFma the loaded bytes are folded by xor into out[0].
template <bool kFma>
__global__ void __launch_bounds__(kThreads, 2)
    gemv_kernel(const __nv_bfloat16* __restrict__ w, const __nv_bfloat16* __restrict__ x,
                float* __restrict__ y, unsigned* out) {
  const int lane = threadIdx.x % 32;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * kWarps;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  unsigned acc = 0;
  for (std::int64_t g = first; g < kPair; g += warps) {
    const __nv_bfloat16* wr[2] = {w + g * kLd + lane * 8, w + (g + kPair) * kLd + lane * 8};
    float s[2] = {0, 0};
    for (int k0 = 0; k0 < kIn; k0 += kStep) {
      uint4 wv[2][KU];
#pragma unroll
      for (int j = 0; j < KU; ++j)
#pragma unroll
        for (int r = 0; r < 2; ++r) wv[r][j] = load_w(wr[r] + k0 + 256 * j);
      if constexpr (kFma) {
#pragma unroll
        for (int j = 0; j < KU; ++j) {
          float xf[8];
          unpack8(__ldg(reinterpret_cast<const uint4*>(x + k0 + 256 * j + lane * 8)), xf);
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            float wf[8];
            unpack8(wv[r][j], wf);
#pragma unroll
            for (int e = 0; e < 8; ++e) s[r] = fmaf(wf[e], xf[e], s[r]);
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < KU; ++j)
#pragma unroll
          for (int r = 0; r < 2; ++r) acc ^= wv[r][j].x ^ wv[r][j].y ^ wv[r][j].z ^ wv[r][j].w;
      }
    }
    if constexpr (kFma) {
#pragma unroll
      for (int off = 16; off > 0; off /= 2)
#pragma unroll
        for (int r = 0; r < 2; ++r) s[r] += __shfl_xor_sync(0xffffffffu, s[r], off);
      if (lane == 0) y[g] = s[0] / (1.0f + __expf(-s[0])) * s[1];
    }
  }
  if constexpr (!kFma) atomicXor(out, acc);
}

__global__ void fill_kernel(__nv_bfloat16* w, std::int64_t n, unsigned seed) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t col = i % kLd;
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed * 40503u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    const float v = col < kIn ? (static_cast<float>(h & 0xffff) / 65536.0f - 0.5f) * 0.125f : 0.0f;
    w[i] = __float2bfloat16(v);
  }
}

static float bf2f(__nv_bfloat16 b) { return __bfloat162float(b); }

int main() {
  const std::int64_t n = static_cast<std::int64_t>(kRows) * kLd;  // elements a copy
  const double gemv_bytes = static_cast<double>(kRows) * kIn * 2, seq_bytes = n * 2.0;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::vector<__nv_bfloat16*> w(kCopies);
  for (int c = 0; c < kCopies; ++c) {
    CK(cudaMalloc(&w[c], n * 2));
    fill_kernel<<<1024, 256>>>(w[c], n, 7 + c);
  }
  __nv_bfloat16* x;
  float* y;
  unsigned* out;
  CK(cudaMalloc(&x, kIn * 2));
  CK(cudaMalloc(&y, kPair * 4));
  CK(cudaMalloc(&out, 64 * 4));
  {
    std::vector<__nv_bfloat16> hx(kIn);
    for (int k = 0; k < kIn; ++k) hx[k] = __float2bfloat16(std::sin(0.37f * k));
    CK(cudaMemcpy(x, hx.data(), kIn * 2, cudaMemcpyHostToDevice));
  }
  CK(cudaDeviceSynchronize());

  // Host references for copy 0: xor of W's 32-bit words (pads are zeros), the first 64 outputs.
  std::vector<__nv_bfloat16> h0(n), hx(kIn);
  CK(cudaMemcpy(h0.data(), w[0], n * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hx.data(), x, kIn * 2, cudaMemcpyDeviceToHost));
  unsigned want_xor = 0;
  {
    const unsigned* u = reinterpret_cast<const unsigned*>(h0.data());
    for (std::int64_t i = 0; i < n / 2; ++i) want_xor ^= u[i];
  }
  const int grid_engine = 230, grid_two = 2 * sms;
  const int seq_grid = 4 * sms;
  struct Mode {
    const char* name;
    int grid;
    int kind;  // 0 seq, 1 rows, 2 fma
  };
  const Mode modes[] = {{"seq", seq_grid, 0},       {"rows", grid_engine, 1}, {"fma", grid_engine, 2},
                        {"rows_g", grid_two, 1},    {"fma_g", grid_two, 2}};
  auto launch = [&](const Mode& m, int c) {
    if (m.kind == 0)
      seq_kernel<<<m.grid, kThreads>>>(reinterpret_cast<const uint4*>(w[c]), n / 8, out + c);
    else if (m.kind == 1)
      gemv_kernel<false><<<m.grid, kThreads>>>(w[c], x, y, out + c);
    else
      gemv_kernel<true><<<m.grid, kThreads>>>(w[c], x, y, out + c);
  };
  // Checks.
  for (const Mode& m : modes) {
    CK(cudaMemset(out, 0, 64 * 4));
    CK(cudaMemset(y, 0, kPair * 4));
    launch(m, 0);
    CK(cudaDeviceSynchronize());
    bool ok = true;
    if (m.kind != 2) {
      unsigned got = 0;
      CK(cudaMemcpy(&got, out, 4, cudaMemcpyDeviceToHost));
      ok = got == want_xor;
      std::printf("check %-7s xor %08x want %08x %s\n", m.name, got, want_xor, ok ? "ok" : "FAILED");
    } else {
      std::vector<float> hy(64);
      CK(cudaMemcpy(hy.data(), y, 64 * 4, cudaMemcpyDeviceToHost));
      double worst = 0;
      for (int g = 0; g < 64; ++g) {
        double s0 = 0, s1 = 0;
        for (int k = 0; k < kIn; ++k) {
          s0 += static_cast<double>(bf2f(h0[g * static_cast<std::int64_t>(kLd) + k])) * bf2f(hx[k]);
          s1 += static_cast<double>(bf2f(h0[(g + kPair) * static_cast<std::int64_t>(kLd) + k])) *
                bf2f(hx[k]);
        }
        const double want = s0 / (1 + std::exp(-s0)) * s1;
        worst = std::max(worst, std::fabs(hy[g] - want) / (std::fabs(want) + 1e-3));
      }
      ok = worst < 1e-3;
      std::printf("check %-7s max rel err %.2e %s\n", m.name, worst, ok ? "ok" : "FAILED");
    }
    if (!ok) return 1;
  }
  // Timings: 3 rounds of 40 launches each, modes interleaved round by round.
  cudaEvent_t ev[41];
  for (auto& e : ev) CK(cudaEventCreate(&e));
  for (int round = 0; round < 3; ++round) {
    for (const Mode& m : modes) {
      for (int i = 0; i < 4; ++i) launch(m, i % kCopies);  // warm-up
      CK(cudaEventRecord(ev[0]));
      for (int i = 0; i < 40; ++i) {
        launch(m, i % kCopies);
        CK(cudaEventRecord(ev[i + 1]));
      }
      CK(cudaEventSynchronize(ev[40]));
      std::vector<float> t(40);
      for (int i = 0; i < 40; ++i) CK(cudaEventElapsedTime(&t[i], ev[i], ev[i + 1]));
      std::sort(t.begin(), t.end());
      const double us = t[20] * 1e3, best = t[0] * 1e3;
      const double bytes = m.kind == 0 ? seq_bytes : gemv_bytes;
      std::printf("round %d %-7s grid %4d  median %7.2f us  %.3f TB/s  (best %7.2f us, %.3f TB/s)\n",
                  round, m.name, m.grid, us, bytes / us * 1e-6, best, bytes / best * 1e-6);
    }
  }
  // The seq kernel over sizes, in a 2 GiB buffer: sizes up to 512 MB rotate over 4 disjoint
  // regions. Per launch (events between launches, median) and per batch (40 launches between
  // two events, the mean).
  {
    const std::int64_t big = std::int64_t{1} << 31;
    uint4* b;
    CK(cudaMalloc(&b, big));
    CK(cudaMemset(b, 0x5a, big));
    const std::int64_t sizes[] = {33554432, 90177536, 180355072, 536870912, big};
    for (int round = 0; round < 2; ++round) {
      for (std::int64_t size : sizes) {
        const int regions = size * 4 <= big ? 4 : 1;
        auto go = [&](int i) {
          const uint4* p = b + (i % regions) * (big / regions / 16);
          seq_kernel<<<seq_grid, kThreads>>>(p, size / 16, out);
        };
        for (int i = 0; i < 4; ++i) go(i);
        CK(cudaEventRecord(ev[0]));
        for (int i = 0; i < 40; ++i) {
          go(i);
          CK(cudaEventRecord(ev[i + 1]));
        }
        CK(cudaEventSynchronize(ev[40]));
        std::vector<float> t(40);
        for (int i = 0; i < 40; ++i) CK(cudaEventElapsedTime(&t[i], ev[i], ev[i + 1]));
        std::sort(t.begin(), t.end());
        CK(cudaEventRecord(ev[0]));
        for (int i = 0; i < 40; ++i) go(i);
        CK(cudaEventRecord(ev[1]));
        CK(cudaEventSynchronize(ev[1]));
        float batch = 0;
        CK(cudaEventElapsedTime(&batch, ev[0], ev[1]));
        const double us = t[20] * 1e3, per = batch * 1e3 / 40;
        std::printf("round %d seq %7.1f MB  per launch median %8.2f us %.3f TB/s  back to back %8.2f us %.3f TB/s\n",
                    round, size / 1e6, us, size / us * 1e-6, per, size / per * 1e-6);
      }
    }
    // The rows kernel back to back too (gate|up's pattern, 180 MB).
    CK(cudaEventRecord(ev[0]));
    for (int i = 0; i < 40; ++i) launch(modes[1], i % kCopies);
    CK(cudaEventRecord(ev[1]));
    CK(cudaEventSynchronize(ev[1]));
    float batch = 0;
    CK(cudaEventElapsedTime(&batch, ev[0], ev[1]));
    std::printf("rows back to back %8.2f us %.3f TB/s\n", batch * 1e3 / 40, gemv_bytes / (batch * 1e3 / 40) * 1e-6);
    CK(cudaFree(b));
  }
  CK(cudaGetLastError());
  return 0;
}
