// Transfer kernels and their launchers: the verification pattern (fill and check), the SM copy
// that moves data through a GPU's own SMs (peer and mapped host pointers included), and the
// one-thread pointer chase behind the latency figures.
#include "gpubench/kernels/memory_common.cuh"

namespace gpubench {

namespace {

constexpr int kCopyUnroll = 8;  // the SM copy keeps more loads in flight to cover link latency

// Pattern fill / check. The 16-byte path covers whole groups of four words; the few words and
// bytes after them (or everything, for a buffer that is not 16-byte aligned) go byte by byte.

__device__ __forceinline__ unsigned char pattern_byte(std::uint64_t seed, std::size_t byte_index) {
  return static_cast<unsigned char>(pattern_word(seed, byte_index / 4) >> (8 * (byte_index % 4)));
}

__global__ void __launch_bounds__(kBlock)
    pattern_fill_kernel(unsigned char* dst, std::size_t bytes, std::uint64_t seed, bool vec) {
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t nquad = vec ? bytes / 16 : 0;
  uint4* q = reinterpret_cast<uint4*>(dst);
  for (std::size_t k = tid; k < nquad; k += stride) {
    const std::uint64_t w = 4 * k;
    q[k] = make_uint4(pattern_word(seed, w), pattern_word(seed, w + 1), pattern_word(seed, w + 2),
                      pattern_word(seed, w + 3));
  }
  // Remaining bytes, one word's worth per thread.
  const std::size_t first = nquad * 16;
  for (std::size_t b = first + 4 * tid; b < bytes; b += 4 * stride)
    for (std::size_t j = b; j < b + 4 && j < bytes; ++j) dst[j] = pattern_byte(seed, j);
}

__global__ void __launch_bounds__(kBlock)
    pattern_check_kernel(const unsigned char* buf, std::size_t bytes, std::uint64_t seed, bool vec,
                         unsigned long long* mismatches) {
  __shared__ unsigned long long warp_sums[kBlock / 32];
  unsigned long long bad = 0;
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t nquad = vec ? bytes / 16 : 0;
  const uint4* q = reinterpret_cast<const uint4*>(buf);
  for (std::size_t k = tid; k < nquad; k += stride) {
    const uint4 v = q[k];
    const std::uint64_t w = 4 * k;
    bad += (v.x != pattern_word(seed, w)) + (v.y != pattern_word(seed, w + 1)) +
           (v.z != pattern_word(seed, w + 2)) + (v.w != pattern_word(seed, w + 3));
  }
  const std::size_t first = nquad * 16;
  for (std::size_t b = first + 4 * tid; b < bytes; b += 4 * stride) {
    bool word_bad = false;
    for (std::size_t j = b; j < b + 4 && j < bytes; ++j)
      word_bad |= buf[j] != pattern_byte(seed, j);
    bad += word_bad;
  }
  bad = block_sum(bad, warp_sums);
  if (threadIdx.x == 0 && bad != 0) atomicAdd(mismatches, bad);
}

// ---------------------------------------------------------------------------------------------
// SM copy: plain (coherent) loads so peer and host memory are read like any global memory.

__global__ void __launch_bounds__(kBlock)
    sm_copy_kernel(uint4* dst, const uint4* src, std::size_t nvec) {
  const std::size_t tile = static_cast<std::size_t>(blockDim.x) * kCopyUnroll;
  const std::size_t ntiles = nvec / tile;
  for (std::size_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
    const std::size_t base = t * tile + threadIdx.x;
    uint4 v[kCopyUnroll];
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u)
      v[u] = src[base + static_cast<std::size_t>(u) * blockDim.x];
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u)
      dst[base + static_cast<std::size_t>(u) * blockDim.x] = v[u];
  }
  const std::size_t threads = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t j =
           ntiles * tile + static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       j < nvec; j += threads)
    dst[j] = src[j];
}

__global__ void __launch_bounds__(kBlock)
    byte_copy_kernel(unsigned char* dst, const unsigned char* src, std::size_t bytes) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < bytes;
       i += stride)
    dst[i] = src[i];
}

// ---------------------------------------------------------------------------------------------
// Pointer chase

__global__ void pointer_chase_kernel(const unsigned long long* start, std::uint64_t hops,
                                     std::uint64_t* out) {
  const unsigned long long* p = start;
  const long long t0 = clock64();
  for (std::uint64_t h = 0; h < hops; ++h)
    p = reinterpret_cast<const unsigned long long*>(__ldcg(p));  // dependent; L1 bypassed
  const long long t1 = clock64();
  out[0] = reinterpret_cast<std::uint64_t>(p);
  out[1] = static_cast<std::uint64_t>(t1 - t0);
}

}  // namespace

void launch_pattern_fill(void* dst, std::size_t bytes, std::uint64_t seed, cudaStream_t stream) {
  if (bytes == 0) return;
  const bool vec = aligned16(dst);
  const unsigned grid =
      grid_for(pattern_fill_kernel, vec ? bytes / 16 + 1 : bytes / 4 + 1, kBlock * 4);
  pattern_fill_kernel<<<grid, kBlock, 0, stream>>>(static_cast<unsigned char*>(dst), bytes, seed,
                                                   vec);
  GPB_CHECK_LAUNCH();
}

void launch_pattern_check(const void* buf, std::size_t bytes, std::uint64_t seed,
                          unsigned long long* mismatches, cudaStream_t stream) {
  if (bytes == 0) return;
  const bool vec = aligned16(buf);
  const unsigned grid =
      grid_for(pattern_check_kernel, vec ? bytes / 16 + 1 : bytes / 4 + 1, kBlock * 4);
  pattern_check_kernel<<<grid, kBlock, 0, stream>>>(static_cast<const unsigned char*>(buf), bytes,
                                                    seed, vec, mismatches);
  GPB_CHECK_LAUNCH();
}

void launch_sm_copy(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  std::size_t done = 0;
  if (aligned16(dst) && aligned16(src)) {
    const std::size_t nvec = bytes / 16;
    if (nvec > 0) {
      const unsigned grid = grid_for(sm_copy_kernel, nvec, kBlock * kCopyUnroll);
      sm_copy_kernel<<<grid, kBlock, 0, stream>>>(reinterpret_cast<uint4*>(d),
                                                  reinterpret_cast<const uint4*>(s), nvec);
      GPB_CHECK_LAUNCH();
    }
    done = nvec * 16;
  }
  if (done < bytes) {  // the tail, or all of an unaligned copy
    const unsigned grid = grid_for(byte_copy_kernel, bytes - done, kBlock * 4);
    byte_copy_kernel<<<grid, kBlock, 0, stream>>>(d + done, s + done, bytes - done);
    GPB_CHECK_LAUNCH();
  }
}

void launch_pointer_chase(const void* start, std::uint64_t hops, std::uint64_t* out,
                          cudaStream_t stream) {
  pointer_chase_kernel<<<1, 1, 0, stream>>>(static_cast<const unsigned long long*>(start), hops,
                                            out);
  GPB_CHECK_LAUNCH();
}

}  // namespace gpubench
