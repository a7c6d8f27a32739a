// Burn-in kernels (see memtest.cuh): memory-test fill and check, bit-for-bit comparison, and
// the order-independent buffer hash.
#include "gpubench/kernels/memory_common.cuh"
#include "gpubench/kernels/memtest.cuh"

namespace gpubench {

namespace {

__global__ void __launch_bounds__(kBlock)
    memtest_fill_kernel(std::uint64_t* buf, std::size_t words, MemPattern p, std::uint64_t pass,
                        std::uint64_t seed) {
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const auto base = reinterpret_cast<std::uint64_t>(buf);
  // Two words per store: each thread writes 16 bytes at a time on an aligned buffer.
  const std::size_t pairs = words / 2;
  auto* q = reinterpret_cast<ulonglong2*>(buf);
  for (std::size_t k = tid; k < pairs; k += stride)
    q[k] = make_ulonglong2(mem_pattern_word(p, pass, seed, base, 2 * k),
                           mem_pattern_word(p, pass, seed, base, 2 * k + 1));
  if (tid == 0 && (words & 1)) buf[words - 1] = mem_pattern_word(p, pass, seed, base, words - 1);
}

__device__ __forceinline__ void memtest_record(MemtestTally* tally, std::size_t i,
                                               std::uint64_t expected, std::uint64_t got) {
  atomicAdd(&tally->words_wrong, 1ull);
  atomicAdd(&tally->bit_errors, static_cast<unsigned long long>(__popcll(expected ^ got)));
  const unsigned slot = atomicAdd(&tally->recorded, 1u);
  if (slot < kMemtestRecorded) tally->wrong[slot] = {i, expected, got};
}

__global__ void __launch_bounds__(kBlock)
    memtest_check_kernel(std::uint64_t* buf, std::size_t words, MemPattern p, std::uint64_t pass,
                         std::uint64_t seed, bool inverted, bool write_inverse,
                         MemtestTally* tally) {
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const auto base = reinterpret_cast<std::uint64_t>(buf);
  const std::uint64_t flip = inverted ? ~0ull : 0ull;
  const std::size_t pairs = words / 2;
  auto* q = reinterpret_cast<ulonglong2*>(buf);
  for (std::size_t k = tid; k < pairs + (words & 1); k += stride) {
    const bool pair = k < pairs;
    const std::size_t i = pair ? 2 * k : words - 1;
    const std::uint64_t e0 = mem_pattern_word(p, pass, seed, base, i) ^ flip;
    const std::uint64_t e1 = pair ? mem_pattern_word(p, pass, seed, base, i + 1) ^ flip : 0;
    std::uint64_t g0, g1 = 0;
    if (pair) {
      const ulonglong2 v = q[k];
      g0 = v.x;
      g1 = v.y;
    } else {
      g0 = buf[i];
    }
    if (g0 != e0) memtest_record(tally, i, e0, g0);
    if (pair && g1 != e1) memtest_record(tally, i + 1, e1, g1);
    if (write_inverse) {
      if (pair)
        q[k] = make_ulonglong2(~e0, ~e1);
      else
        buf[i] = ~e0;
    }
  }
}

__device__ __forceinline__ void compare_record(CompareTally* tally, std::size_t j) {
  const unsigned slot = atomicAdd(&tally->recorded, 1u);
  if (slot < kCompareRecorded) tally->at[slot] = j;
}

template <class E>
__global__ void __launch_bounds__(kBlock)
    compare_kernel(const E* out, const E* golden, std::size_t count, CompareTally* tally) {
  __shared__ unsigned long long warp_sums[kBlock / 32];
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  constexpr std::size_t kPer = 16 / sizeof(E);  // elements per 16-byte vector
  const std::size_t vectors = count / kPer;
  const auto* ov = reinterpret_cast<const uint4*>(out);
  const auto* gv = reinterpret_cast<const uint4*>(golden);
  unsigned long long bad = 0, first = ~0ull;
  for (std::size_t k = tid; k < vectors; k += stride) {
    const uint4 a = ov[k], b = gv[k];
    if (a.x == b.x && a.y == b.y && a.z == b.z && a.w == b.w) continue;
    for (std::size_t j = k * kPer; j < (k + 1) * kPer; ++j)
      if (out[j] != golden[j]) {
        ++bad;
        first = first < j ? first : j;
        compare_record(tally, j);
      }
  }
  for (std::size_t j = vectors * kPer + tid; j < count; j += stride)
    if (out[j] != golden[j]) {
      ++bad;
      first = first < j ? first : j;
      compare_record(tally, j);
    }
  if (first != ~0ull) atomicMin(&tally->first, first);
  bad = block_sum(bad, warp_sums);
  if (threadIdx.x == 0 && bad != 0) atomicAdd(&tally->mismatched, bad);
}

__global__ void compare_reset_kernel(CompareTally* tally) {
  tally->mismatched = 0;
  tally->first = ~0ull;
  tally->recorded = 0;
}

__global__ void __launch_bounds__(kBlock)
    hash_kernel(const std::uint64_t* buf, std::size_t words, unsigned long long* hash) {
  __shared__ unsigned long long warp_sums[kBlock / 32];
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  unsigned long long sum = 0;
  for (std::size_t i = tid; i < words; i += stride)
    sum += mix64(buf[i] ^ (i * 0xD1B54A32D192ED03ull));
  sum = block_sum(sum, warp_sums);
  if (threadIdx.x == 0) atomicAdd(hash, sum);
}

// Memory-test grids are not persistent: many short blocks (a few thousand words each), so a
// higher-priority stream's kernel (stress's GEMM) gets the SMs as soon as the blocks on them end
// instead of waiting for a whole pass over the region.
unsigned short_block_grid(std::size_t pairs) {
  constexpr std::size_t kPairsPerBlock = kBlock * 4;
  const std::size_t blocks = (pairs + kPairsPerBlock - 1) / kPairsPerBlock;
  return static_cast<unsigned>(std::min<std::size_t>(std::max<std::size_t>(blocks, 1), 1u << 30));
}

}  // namespace

void launch_memtest_fill(std::uint64_t* buf, std::size_t words, MemPattern p, std::uint64_t pass,
                         std::uint64_t seed, cudaStream_t stream) {
  if (words == 0) return;
  const unsigned grid = short_block_grid(words / 2 + 1);
  memtest_fill_kernel<<<grid, kBlock, 0, stream>>>(buf, words, p, pass, seed);
  GPB_CHECK_LAUNCH();
}

void launch_memtest_check(std::uint64_t* buf, std::size_t words, MemPattern p, std::uint64_t pass,
                          std::uint64_t seed, bool inverted, bool write_inverse,
                          MemtestTally* tally, cudaStream_t stream) {
  if (words == 0) return;
  const unsigned grid = short_block_grid(words / 2 + 1);
  memtest_check_kernel<<<grid, kBlock, 0, stream>>>(buf, words, p, pass, seed, inverted,
                                                    write_inverse, tally);
  GPB_CHECK_LAUNCH();
}

void launch_compare_reset(CompareTally* tally, cudaStream_t stream) {
  compare_reset_kernel<<<1, 1, 0, stream>>>(tally);
  GPB_CHECK_LAUNCH();
}

void launch_compare_bits(const void* out, const void* golden, std::size_t count,
                         int element_bytes, CompareTally* tally, cudaStream_t stream) {
  if (count == 0) return;
  if (!aligned16(out) || !aligned16(golden))
    throw std::invalid_argument("launch_compare_bits: buffers must be 16-byte aligned");
  const std::size_t vectors = count * static_cast<std::size_t>(element_bytes) / 16 + 1;
  const auto launch = [&](auto kernel, const auto* o, const auto* g) {
    const unsigned grid = grid_for(kernel, vectors, kBlock * 4);
    kernel<<<grid, kBlock, 0, stream>>>(o, g, count, tally);
    GPB_CHECK_LAUNCH();
  };
  switch (element_bytes) {
    case 1:
      return launch(compare_kernel<std::uint8_t>, static_cast<const std::uint8_t*>(out),
                    static_cast<const std::uint8_t*>(golden));
    case 2:
      return launch(compare_kernel<std::uint16_t>, static_cast<const std::uint16_t*>(out),
                    static_cast<const std::uint16_t*>(golden));
    case 4:
      return launch(compare_kernel<std::uint32_t>, static_cast<const std::uint32_t*>(out),
                    static_cast<const std::uint32_t*>(golden));
    case 8:
      return launch(compare_kernel<std::uint64_t>, static_cast<const std::uint64_t*>(out),
                    static_cast<const std::uint64_t*>(golden));
    default:
      throw std::invalid_argument("launch_compare_bits: element size must be 1, 2, 4 or 8");
  }
}

void launch_buffer_hash(const void* buf, std::size_t bytes, unsigned long long* hash,
                        cudaStream_t stream) {
  if (bytes % 8 != 0) throw std::invalid_argument("launch_buffer_hash: bytes must be 8-aligned");
  const std::size_t words = bytes / 8;
  if (words == 0) return;
  const unsigned grid = grid_for(hash_kernel, words, kBlock * 8);
  hash_kernel<<<grid, kBlock, 0, stream>>>(static_cast<const std::uint64_t*>(buf), words, hash);
  GPB_CHECK_LAUNCH();
}

}  // namespace gpubench
