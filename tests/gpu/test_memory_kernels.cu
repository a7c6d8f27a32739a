// The memory kernels against host references on fresh seeded data: STREAM element-wise kernels
// and reductions (sizes that are not multiples of the vector width, unaligned pointers), the
// on-device checks, the pattern fill/check, the SM copy (device, mapped host, peer) and the
// pointer chase.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "gpubench/core/cuda.hpp"
#include "gpubench/kernels/memory.cuh"

using namespace gpubench;

namespace {

constexpr int kGpu = 0;

// The plain cudaMemcpy/cudaMemset calls below run on the legacy stream, which the non-blocking
// streams of the kernels do not wait for: these functions finish all device work on both sides.
void copy_sync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  GPB_CUDA_CHECK(cudaDeviceSynchronize());
  if (bytes) GPB_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));
  GPB_CUDA_CHECK(cudaDeviceSynchronize());
}

void memset_sync(void* dst, int value, std::size_t bytes) {
  GPB_CUDA_CHECK(cudaDeviceSynchronize());
  GPB_CUDA_CHECK(cudaMemset(dst, value, bytes));
  GPB_CUDA_CHECK(cudaDeviceSynchronize());
}

template <class T>
std::vector<T> to_host(const T* device_ptr, std::size_t n) {
  std::vector<T> h(n);
  copy_sync(h.data(), device_ptr, n * sizeof(T), cudaMemcpyDeviceToHost);
  return h;
}

template <class T>
void to_device(T* device_ptr, const std::vector<T>& h) {
  copy_sync(device_ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
}

// Three arrays of n elements starting `offset` elements into their allocations (offset 1 makes
// them unaligned and exercises the element-wise path).
template <class T>
struct Arrays {
  Arrays(std::size_t elements, std::size_t offset)
      : n(elements),
        ba(kGpu, (elements + offset) * sizeof(T)),
        bb(kGpu, (elements + offset) * sizeof(T)),
        bc(kGpu, (elements + offset) * sizeof(T)),
        a(ba.as<T>() + offset),
        b(bb.as<T>() + offset),
        c(bc.as<T>() + offset) {
    for (DeviceBuffer* buf : {&ba, &bb, &bc}) memset_sync(buf->get(), 0, buf->bytes());
  }
  std::size_t n;
  DeviceBuffer ba, bb, bc;
  T *a, *b, *c;
};

const std::size_t kSizes[] = {1, 3, 1000, 1000003, (1u << 20) + 5};

template <class T>
void check_elementwise(std::size_t n, std::size_t offset) {
  SCOPED_TRACE(testing::Message() << "n=" << n << " offset=" << offset
                                  << " bytes/elem=" << sizeof(T));
  Stream s(kGpu);
  Arrays<T> x(n, offset);
  const StreamSeeds seeds{11, 22, 33};
  const T scalar = stream_scalar<T>();
  auto reinit = [&] {
    launch_stream_init<T>(x.a, x.b, x.c, n, seeds, s);
    s.synchronize();
  };

  reinit();
  const auto a0 = to_host(x.a, n), b0 = to_host(x.b, n), c0 = to_host(x.c, n);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(a0[i], init_value<T>(seeds.a, i));
    ASSERT_EQ(b0[i], init_value<T>(seeds.b, i));
    ASSERT_EQ(c0[i], init_value<T>(seeds.c, i));
  }

  launch_stream_copy<T>(x.a, x.c, n, s);
  s.synchronize();
  auto c = to_host(x.c, n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(c[i], a0[i]) << i;

  reinit();
  launch_stream_scale<T>(x.c, x.b, scalar, n, s);
  s.synchronize();
  auto b = to_host(x.b, n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(b[i], scalar * c0[i]) << i;

  reinit();
  launch_stream_add<T>(x.a, x.b, x.c, n, s);
  s.synchronize();
  c = to_host(x.c, n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(c[i], a0[i] + b0[i]) << i;

  reinit();
  launch_stream_triad<T>(x.a, x.b, x.c, scalar, n, s);
  s.synchronize();
  auto a = to_host(x.a, n);
  for (std::size_t i = 0; i < n; ++i) {
    const double ref =
        static_cast<double>(b0[i]) + static_cast<double>(scalar) * static_cast<double>(c0[i]);
    ASSERT_NEAR(a[i], ref, 4 * std::numeric_limits<T>::epsilon() * ref) << i;
  }

  reinit();
  launch_stream_write<T>(x.c, stream_fill_value<T>(), n, s);
  s.synchronize();
  c = to_host(x.c, n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(c[i], stream_fill_value<T>()) << i;
  // The element before an offset array was never written.
  if (offset > 0) EXPECT_EQ(to_host(x.bc.template as<T>(), 1)[0], T(0));
}

template <class T>
void check_reductions(std::size_t n, std::size_t offset) {
  SCOPED_TRACE(testing::Message() << "n=" << n << " offset=" << offset
                                  << " bytes/elem=" << sizeof(T));
  Stream s(kGpu);
  Arrays<T> x(n, offset);
  const StreamSeeds seeds{5, 6, 7};
  launch_stream_init<T>(x.a, x.b, x.c, n, seeds, s);
  ReduceWorkspace ws(kGpu);
  double dot = 0, sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    dot += static_cast<double>(init_value<T>(seeds.a, i)) *
           static_cast<double>(init_value<T>(seeds.b, i));
    sum += static_cast<double>(init_value<T>(seeds.a, i));
  }
  for (int repeat = 0; repeat < 3; ++repeat) {  // the completion counter re-arms itself
    launch_stream_dot<T>(x.a, x.b, n, ws, s);
    EXPECT_NEAR(ws.read_result(s), dot, kReductionTolerance * dot) << repeat;
    launch_stream_read<T>(x.a, n, ws, s);
    EXPECT_NEAR(ws.read_result(s), sum, kReductionTolerance * sum) << repeat;
  }
  DeviceBuffer ref(kGpu, sizeof(double));
  memset_sync(ref.get(), 0, sizeof(double));
  launch_reference_sum<T>(x.a, x.b, n, ref.as<double>(), s);
  s.synchronize();
  EXPECT_NEAR(to_host(ref.as<double>(), 1)[0], dot, kReductionTolerance * dot);
  memset_sync(ref.get(), 0, sizeof(double));
  launch_reference_sum<T>(x.a, static_cast<const T*>(nullptr), n, ref.as<double>(), s);
  s.synchronize();
  EXPECT_NEAR(to_host(ref.as<double>(), 1)[0], sum, kReductionTolerance * sum);
}

std::uint64_t count_stream_mismatches(StreamOp op, const double* out, std::size_t n,
                                      const StreamSeeds& seeds, cudaStream_t s) {
  DeviceBuffer counter(kGpu, sizeof(unsigned long long));
  memset_sync(counter.get(), 0, counter.bytes());
  launch_stream_check<double>(op, out, n, seeds, counter.as<unsigned long long>(), s);
  GPB_CUDA_CHECK(cudaStreamSynchronize(s));
  return to_host(counter.as<unsigned long long>(), 1)[0];
}

std::uint64_t count_pattern_mismatches(const void* buf, std::size_t bytes, std::uint64_t seed,
                                       cudaStream_t s) {
  DeviceBuffer counter(kGpu, sizeof(unsigned long long));
  memset_sync(counter.get(), 0, counter.bytes());
  launch_pattern_check(buf, bytes, seed, counter.as<unsigned long long>(), s);
  GPB_CUDA_CHECK(cudaStreamSynchronize(s));
  return to_host(counter.as<unsigned long long>(), 1)[0];
}

std::vector<unsigned char> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

}  // namespace

TEST(StreamKernels, ElementwiseFloat) {
  for (std::size_t n : kSizes)
    for (std::size_t offset : {0, 1}) check_elementwise<float>(n, offset);
}

TEST(StreamKernels, ElementwiseDouble) {
  for (std::size_t n : kSizes)
    for (std::size_t offset : {0, 1}) check_elementwise<double>(n, offset);
}

TEST(StreamKernels, ReductionsFloat) {
  for (std::size_t n : kSizes)
    for (std::size_t offset : {0, 1}) check_reductions<float>(n, offset);
}

TEST(StreamKernels, ReductionsDouble) {
  for (std::size_t n : kSizes)
    for (std::size_t offset : {0, 1}) check_reductions<double>(n, offset);
}

TEST(StreamKernels, CheckKernelCountsPlantedErrors) {
  Stream s(kGpu);
  const std::size_t n = 1000003;
  Arrays<double> x(n, 0);
  const StreamSeeds seeds{1, 2, 3};
  launch_stream_init<double>(x.a, x.b, x.c, n, seeds, s);
  launch_stream_triad<double>(x.a, x.b, x.c, stream_scalar<double>(), n, s);
  s.synchronize();
  EXPECT_EQ(count_stream_mismatches(StreamOp::Triad, x.a, n, seeds, s), 0u);
  // Copy's expected value is array a's initial value: the arrays not written still match.
  EXPECT_EQ(count_stream_mismatches(StreamOp::Copy, x.b, n, StreamSeeds{seeds.b, 0, 0}, s), 0u);
  const double wrong[2] = {0.0, 123.0};
  copy_sync(x.a + 17, &wrong[0], sizeof(double), cudaMemcpyHostToDevice);
  copy_sync(x.a + n - 1, &wrong[1], sizeof(double), cudaMemcpyHostToDevice);
  EXPECT_EQ(count_stream_mismatches(StreamOp::Triad, x.a, n, seeds, s), 2u);
  // A result one part in 1e12 off is an error for fp64.
  const double off = stream_expected<double>(StreamOp::Triad, seeds, 5) * (1 + 1e-12);
  copy_sync(x.a + 5, &off, sizeof(double), cudaMemcpyHostToDevice);
  EXPECT_EQ(count_stream_mismatches(StreamOp::Triad, x.a, n, seeds, s), 3u);
}

TEST(Pattern, FillMatchesTheHostFormulaAndCheckPasses) {
  Stream s(kGpu);
  for (std::size_t bytes : {std::size_t{1}, std::size_t{3}, std::size_t{17}, std::size_t{4096},
                            std::size_t{1000003}, (std::size_t{1} << 24) + 7}) {
    for (std::size_t offset : {0, 1, 4}) {
      SCOPED_TRACE(testing::Message() << "bytes=" << bytes << " offset=" << offset);
      DeviceBuffer buf(kGpu, bytes + offset + 16);
      auto* p = buf.as<unsigned char>() + offset;
      memset_sync(buf.get(), 0xAB, buf.bytes());
      launch_pattern_fill(p, bytes, 77, s);
      s.synchronize();
      const auto h = to_host(buf.as<unsigned char>(), buf.bytes());
      for (std::size_t j = 0; j < bytes; ++j)
        ASSERT_EQ(h[offset + j],
                  static_cast<unsigned char>(pattern_word(77, j / 4) >> (8 * (j % 4))))
            << j;
      for (std::size_t j = 0; j < offset; ++j) ASSERT_EQ(h[j], 0xAB);  // nothing before
      for (std::size_t j = offset + bytes; j < h.size(); ++j)
        ASSERT_EQ(h[j], 0xAB);  // nothing after
      EXPECT_EQ(count_pattern_mismatches(p, bytes, 77, s), 0u);
      EXPECT_GT(count_pattern_mismatches(p, bytes, 78, s), 0u);  // another seed is another pattern
    }
  }
}

TEST(Pattern, CheckCatchesPlantedWrongWords) {
  Stream s(kGpu);
  const std::size_t bytes = (1u << 22) + 6;  // ends in a partial word
  for (std::size_t offset : {0, 2}) {
    SCOPED_TRACE(testing::Message() << "offset=" << offset);
    DeviceBuffer buf(kGpu, bytes + offset);
    auto* p = buf.as<unsigned char>() + offset;
    launch_pattern_fill(p, bytes, 5, s);
    s.synchronize();
    EXPECT_EQ(count_pattern_mismatches(p, bytes, 5, s), 0u);
    const unsigned char flip = 0x5A;
    for (std::size_t at : {std::size_t{0}, std::size_t{1234567}, bytes - 1}) {
      unsigned char v = 0;
      copy_sync(&v, p + at, 1, cudaMemcpyDeviceToHost);
      v ^= flip;
      copy_sync(p + at, &v, 1, cudaMemcpyHostToDevice);
    }
    EXPECT_EQ(count_pattern_mismatches(p, bytes, 5, s), 3u);
    memset_sync(p, 0, bytes);
    EXPECT_GT(count_pattern_mismatches(p, bytes, 5, s), bytes / 4 - 10);
  }
}

TEST(SmCopy, CopiesExactlyWithTails) {
  Stream s(kGpu);
  for (std::size_t bytes :
       {std::size_t{0}, std::size_t{1}, std::size_t{15}, std::size_t{16}, std::size_t{17},
        std::size_t{4095}, std::size_t{1000003}, (std::size_t{1} << 25) + 9}) {
    for (std::size_t src_off : {0, 3}) {
      for (std::size_t dst_off : {0, 5}) {
        SCOPED_TRACE(testing::Message()
                     << "bytes=" << bytes << " src_off=" << src_off << " dst_off=" << dst_off);
        const auto data = random_bytes(bytes + src_off, static_cast<unsigned>(bytes));
        DeviceBuffer src(kGpu, bytes + src_off + 1), dst(kGpu, bytes + dst_off + 16);
        to_device(src.as<unsigned char>(), data);
        memset_sync(dst.get(), 0xCD, dst.bytes());
        launch_sm_copy(dst.as<unsigned char>() + dst_off, src.as<unsigned char>() + src_off, bytes,
                       s);
        s.synchronize();
        const auto out = to_host(dst.as<unsigned char>(), dst.bytes());
        for (std::size_t j = 0; j < bytes; ++j) ASSERT_EQ(out[dst_off + j], data[src_off + j]) << j;
        for (std::size_t j = 0; j < dst_off; ++j) ASSERT_EQ(out[j], 0xCD);
        for (std::size_t j = dst_off + bytes; j < out.size(); ++j) ASSERT_EQ(out[j], 0xCD);
      }
    }
  }
}

TEST(SmCopy, ToAndFromMappedHostMemory) {
  Stream s(kGpu);
  const std::size_t bytes = (1u << 22) + 3;
  PinnedBuffer host(bytes, /*mapped=*/true);
  DeviceBuffer dev(kGpu, bytes);
  launch_pattern_fill(dev.get(), bytes, 99, s);
  launch_sm_copy(host.device_ptr(), dev.get(), bytes, s);  // write into host memory
  s.synchronize();
  const auto* h = host.as<unsigned char>();
  for (std::size_t j = 0; j < bytes; ++j)
    ASSERT_EQ(h[j], static_cast<unsigned char>(pattern_word(99, j / 4) >> (8 * (j % 4)))) << j;
  memset_sync(dev.get(), 0, bytes);
  launch_sm_copy(dev.get(), host.device_ptr(), bytes, s);  // read it back
  s.synchronize();
  EXPECT_EQ(count_pattern_mismatches(dev.get(), bytes, 99, s), 0u);
}

TEST(SmCopy, FromAPeerGpu) {
  int n = 0;
  GPB_CUDA_CHECK(cudaGetDeviceCount(&n));
  int can = 0;
  if (n >= 2) GPB_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, 0, 1));
  if (!can) GTEST_SKIP() << "needs GPU 0 with peer access to GPU 1";
  {
    DeviceGuard g(0);
    const cudaError_t err = cudaDeviceEnablePeerAccess(1, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled)
      (void)cudaGetLastError();
    else
      GPB_CUDA_CHECK(err);
  }
  const std::size_t bytes = (1u << 24) + 11;
  DeviceBuffer remote(1, bytes), local(0, bytes);
  {
    DeviceGuard g(1);
    Stream s1(1);
    launch_pattern_fill(remote.get(), bytes, 3, s1);
    s1.synchronize();
  }
  Stream s(0);
  launch_sm_copy(local.get(), remote.get(), bytes, s);  // GPU 0 reads GPU 1's memory
  s.synchronize();
  EXPECT_EQ(count_pattern_mismatches(local.get(), bytes, 3, s), 0u);
}

TEST(PointerChase, EndsWhereTheCycleSays) {
  Stream s(kGpu);
  constexpr std::size_t kNodes = 4096, kStride = 128;
  std::vector<std::uint32_t> order(kNodes);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(1));
  DeviceBuffer buf(kGpu, kNodes * kStride);
  const auto base = reinterpret_cast<std::uint64_t>(buf.get());
  std::vector<std::uint64_t> image(kNodes * kStride / 8, 0);
  for (std::size_t p = 0; p < kNodes; ++p)
    image[order[p] * (kStride / 8)] = base + order[(p + 1) % kNodes] * kStride;
  to_device(buf.as<std::uint64_t>(), image);
  DeviceBuffer out(kGpu, 2 * sizeof(std::uint64_t));
  for (std::uint64_t hops : {1ull, 1000ull, 10000ull}) {
    const std::uint64_t start_pos = 7;
    launch_pointer_chase(reinterpret_cast<const void*>(base + order[start_pos] * kStride), hops,
                         out.as<std::uint64_t>(), s);
    s.synchronize();
    const auto h = to_host(out.as<std::uint64_t>(), 2);
    EXPECT_EQ(h[0], base + order[(start_pos + hops) % kNodes] * kStride) << hops;
    EXPECT_GT(h[1], hops) << "each dependent load takes more than a cycle";
  }
}
