// The training benchmark's backward kernels against plain host fp64 references on seeded random
// inputs, in bf16 and fp16: SwiGLU's gradient (also in place and with saturated gates), tanh
// GELU's gradient (also in place and at extreme inputs), and RMSNorm's input gradient, which is
// accumulated into a buffer that already holds values.
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "half_bits.hpp"
#include "gpubench/kernels/training.cuh"
#include "gpubench/kernels/transformer.cuh"

using namespace gpubench;

namespace {

using gpubench::testing::Bits;
using gpubench::testing::from_bits;
using gpubench::testing::random_bits;
using gpubench::testing::to_bits;
using gpubench::testing::values;

constexpr int kGpu = 0;
constexpr ActDtype kDtypes[] = {ActDtype::BF16, ActDtype::F16};
const std::int64_t kTokens[] = {1, 7, 64};

// ---------------------------------------------------------------------------------------------
// Device transfers

template <class T>
DeviceBuffer upload(const std::vector<T>& host) {
  DeviceBuffer buf(kGpu, std::max<std::size_t>(1, host.size() * sizeof(T)));
  if (!host.empty()) {
    GPB_CUDA_CHECK(
        cudaMemcpy(buf.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  return buf;
}

template <class T>
void copy_to(void* device, const std::vector<T>& host) {
  GPB_CUDA_CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
}

Bits download(const void* device, std::size_t n) {
  GPB_CUDA_CHECK(cudaDeviceSynchronize());
  Bits host(n);
  GPB_CUDA_CHECK(cudaMemcpy(host.data(), device, n * 2, cudaMemcpyDeviceToHost));
  return host;
}

// `host` with one zero element in front: on the device, a pointer to element 1 of it sits 2 bytes
// past a 16-byte boundary and must take the element path.
Bits shifted(const Bits& host) {
  Bits out(1, 0);
  out.insert(out.end(), host.begin(), host.end());
  return out;
}
std::uint16_t* at1(const DeviceBuffer& buf) {
  return buf.as<std::uint16_t>() + 1;
}

// ---------------------------------------------------------------------------------------------
// Comparison with the fp64 reference: every element within rel * |ref| (a few of the storage
// type's roundings) plus floor * max(max |ref|, scale), the fp32 math's error where terms
// cancel; `scale` is the size of those terms where all of ref may be far smaller (a single
// element near a zero of the derivative). No NaN or inf where the reference is finite.

struct Tolerance {
  double rel, floor;
};
Tolerance tolerance(ActDtype d) {
  return d == ActDtype::BF16 ? Tolerance{1e-2, 1e-3} : Tolerance{2e-3, 2e-4};
}

::testing::AssertionResult matches_reference(ActDtype d, const Bits& got,
                                             const std::vector<double>& ref, double scale = 0) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << "size mismatch";
  const Tolerance tol = tolerance(d);
  double max_ref = 0;
  for (double r : ref) max_ref = std::max(max_ref, std::fabs(r));
  const double floor = tol.floor * std::max(max_ref, scale) + 1e-30;
  std::size_t bad = 0, first = 0;
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(from_bits(d, got[i]) - ref[i]);
    if (!(err <= tol.rel * std::fabs(ref[i]) + floor)) {
      if (bad++ == 0) first = i;
    }
    if (!(err <= worst)) worst = err;  // NaN sticks
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements off (max |ref| " << max_ref
         << ", worst error " << worst << "); first at " << first << ": got "
         << from_bits(d, got[first]) << ", reference " << ref[first];
}

std::string label(ActDtype d, const std::string& what) {
  std::ostringstream s;
  s << to_string(d) << " " << what;
  return s.str();
}

// ---------------------------------------------------------------------------------------------
// Host references (fp64)

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

// d_gate_up [tokens, 2*inter] of swiglu_backward.
std::vector<double> swiglu_backward_ref(const std::vector<double>& gate_up,
                                        const std::vector<double>& d_out, std::int64_t tokens,
                                        int inter) {
  std::vector<double> grad(gate_up.size());
  for (std::int64_t t = 0; t < tokens; ++t)
    for (int i = 0; i < inter; ++i) {
      const std::int64_t at = t * 2 * inter + i;
      const double g = gate_up[at], u = gate_up[at + inter], dy = d_out[t * inter + i];
      const double s = sigmoid(g);
      grad[at] = dy * u * s * (1.0 + g * (1.0 - s));
      grad[at + inter] = dy * g * s;
    }
  return grad;
}

// d/dx of 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
double gelu_tanh_grad(double x) {
  const double k = std::sqrt(2.0 / 3.14159265358979323846), c = 0.044715;
  const double t = std::tanh(k * (x + c * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * c * x * x);
}

// The input gradient of y = x * rstd * w, row by row (without the accumulator). `term_scale`,
// when not null, gets the largest |rstd w dy| and |x rstd^3/cols sum(w dy x)|: the two terms
// cancel almost fully when cols is 1 (the gradient is then eps/(x^2 + eps) times the first).
std::vector<double> rms_norm_backward_ref(const std::vector<double>& x,
                                          const std::vector<double>& w,
                                          const std::vector<double>& dy, std::int64_t rows,
                                          int cols, double eps, double* term_scale = nullptr) {
  std::vector<double> dx(x.size());
  double scale = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t at = r * cols;
    double sum_sq = 0, sum_wdyx = 0;
    for (int c = 0; c < cols; ++c) {
      sum_sq += x[at + c] * x[at + c];
      sum_wdyx += w[c] * dy[at + c] * x[at + c];
    }
    const double rstd = 1.0 / std::sqrt(sum_sq / cols + eps);
    for (int c = 0; c < cols; ++c) {
      const double first = rstd * w[c] * dy[at + c];
      const double second = x[at + c] * rstd * rstd * rstd / cols * sum_wdyx;
      dx[at + c] = first - second;
      scale = std::max({scale, std::fabs(first), std::fabs(second)});
    }
  }
  if (term_scale != nullptr) *term_scale = scale;
  return dx;
}

std::vector<double> plus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// SwiGLU backward

// gate_up rows hold gate then up; both halves of the gradient over intermediate sizes of real
// models, 129 and 4 (the element path), with saturated gates (+-100, +-20) and dsilu's zero
// (g near -1.28) among the values. Then in place (d_gate_up == gate_up) on the 16-byte path.
TEST(TrainingSwigluBackward, MatchesHostReference) {
  DeviceGuard guard(kGpu);
  std::uint64_t seed = 100;
  for (ActDtype d : kDtypes)
    for (int inter : {11008, 1600, 129, 4})
      for (std::int64_t tokens : kTokens) {
        SCOPED_TRACE(label(
            d, "intermediate " + std::to_string(inter) + " tokens " + std::to_string(tokens)));
        Bits gu = random_bits(d, tokens * 2 * inter, ++seed, -6.0f, 6.0f);
        const float special[] = {-100.0f, -20.0f, -1.28f, 0.0f, 20.0f, 100.0f};
        for (int k = 0; k < 6 && k < inter; ++k) gu[k] = to_bits(d, special[k]);
        const Bits dy = random_bits(d, tokens * inter, ++seed, -2.0f, 2.0f);
        const auto expected = swiglu_backward_ref(values(d, gu), values(d, dy), tokens, inter);

        DeviceBuffer dgu = upload(gu), ddy = upload(dy), dgrad(kGpu, gu.size() * 2);
        swiglu_backward(dgrad.get(), dgu.get(), ddy.get(), tokens, inter, d, nullptr);
        EXPECT_TRUE(matches_reference(d, download(dgrad.get(), gu.size()), expected));

        swiglu_backward(dgu.get(), dgu.get(), ddy.get(), tokens, inter, d, nullptr);
        EXPECT_TRUE(matches_reference(d, download(dgu.get(), gu.size()), expected)) << "in place";
      }
}

// Pointers 2 bytes off alignment with an intermediate that is a multiple of 8: the element path,
// same results.
TEST(TrainingSwigluBackward, UnalignedPointers) {
  DeviceGuard guard(kGpu);
  for (ActDtype d : kDtypes) {
    SCOPED_TRACE(label(d, "unaligned"));
    const std::int64_t tokens = 7;
    const int inter = 1024;
    const Bits gu = random_bits(d, tokens * 2 * inter, 7, -6.0f, 6.0f);
    const Bits dy = random_bits(d, tokens * inter, 8, -2.0f, 2.0f);
    DeviceBuffer dgu = upload(shifted(gu)), ddy = upload(shifted(dy)),
                 dgrad(kGpu, gu.size() * 2 + 2);
    swiglu_backward(at1(dgrad), at1(dgu), at1(ddy), tokens, inter, d, nullptr);
    EXPECT_TRUE(
        matches_reference(d, download(at1(dgrad), gu.size()),
                          swiglu_backward_ref(values(d, gu), values(d, dy), tokens, inter)));
  }
}

// ---------------------------------------------------------------------------------------------
// tanh GELU backward

// Odd and even lengths, out of place, in place over d_out and in place over in.
TEST(TrainingGeluBackward, MatchesHostReference) {
  DeviceGuard guard(kGpu);
  std::uint64_t seed = 200;
  for (ActDtype d : kDtypes)
    for (int cols : {4096, 129, 1})
      for (std::int64_t tokens : kTokens) {
        const std::int64_t n = tokens * cols;
        SCOPED_TRACE(label(d, "n " + std::to_string(n)));
        const Bits x = random_bits(d, n, ++seed, -6.0f, 6.0f);
        const Bits dy = random_bits(d, n, ++seed, -2.0f, 2.0f);
        const auto xv = values(d, x), dyv = values(d, dy);
        std::vector<double> expected(n);
        double scale = 0;  // gelu' is a sum of terms of size 1: its error scales with |d_out|
        for (std::int64_t i = 0; i < n; ++i) {
          expected[i] = dyv[i] * gelu_tanh_grad(xv[i]);
          scale = std::max(scale, std::fabs(dyv[i]));
        }

        DeviceBuffer dx = upload(x), ddy = upload(dy), dgrad(kGpu, n * 2);
        gelu_tanh_backward(dgrad.get(), dx.get(), ddy.get(), n, d, nullptr);
        EXPECT_TRUE(matches_reference(d, download(dgrad.get(), n), expected, scale));
        gelu_tanh_backward(ddy.get(), dx.get(), ddy.get(), n, d, nullptr);
        EXPECT_TRUE(matches_reference(d, download(ddy.get(), n), expected, scale))
            << "d_in == d_out";
        copy_to(ddy.get(), dy);
        gelu_tanh_backward(dx.get(), dx.get(), ddy.get(), n, d, nullptr);
        EXPECT_TRUE(matches_reference(d, download(dx.get(), n), expected, scale)) << "d_in == in";
      }
}

// Extreme inputs: the gradient saturates to 1 (x large) and 0 (x very negative), with no NaN
// where x^3 overflows fp32 (bf16 only: fp16 tops out at 65504); the element path on a shifted
// pointer gives the same.
TEST(TrainingGeluBackward, ExtremeInputsAndUnalignedPointers) {
  DeviceGuard guard(kGpu);
  for (ActDtype d : kDtypes) {
    SCOPED_TRACE(label(d, "extreme"));
    std::vector<float> xs = {0.0f,   1e-3f,  -1e-3f,  -0.75f, 0.75f, 3.0f, -3.0f, 10.0f,
                             -10.0f, 100.0f, -100.0f, 1e4f,   -1e4f, 6e4f, -6e4f};
    if (d == ActDtype::BF16) {
      for (float v : {1e20f, -1e20f, 3e38f, -3e38f}) xs.push_back(v);
    }
    Bits x, dy;
    for (float v : xs) {
      x.push_back(to_bits(d, v));
      dy.push_back(to_bits(d, 1.0f));
    }
    const auto xv = values(d, x);
    std::vector<double> expected(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) expected[i] = gelu_tanh_grad(xv[i]);
    const std::int64_t n = static_cast<std::int64_t>(x.size());

    DeviceBuffer dx = upload(x), ddy = upload(dy), dgrad(kGpu, n * 2);
    gelu_tanh_backward(dgrad.get(), dx.get(), ddy.get(), n, d, nullptr);
    EXPECT_TRUE(matches_reference(d, download(dgrad.get(), n), expected));

    DeviceBuffer ux = upload(shifted(x)), udy = upload(shifted(dy)), ugrad(kGpu, n * 2 + 2);
    gelu_tanh_backward(at1(ugrad), at1(ux), at1(udy), n, d, nullptr);
    EXPECT_TRUE(matches_reference(d, download(at1(ugrad), n), expected)) << "unaligned";
  }
}

// ---------------------------------------------------------------------------------------------
// RMSNorm backward

// Row lengths of real models up to 16384, and 1000 (16-byte path, not a multiple of 256), 129,
// 100 and 1 (the element path): the gradient is added to random non-zero values already in the
// accumulator, and a second call adds it again to what the first one stored. d_out is partly
// x itself so that the rstd^3 * sum(w dy x) term is as large as the first (with cols 1 the two
// cancel to eps/(x^2 + eps) of the first: the error floor is taken from the terms' size).
TEST(TrainingRmsNormBackward, AccumulatesHostReference) {
  DeviceGuard guard(kGpu);
  std::uint64_t seed = 300;
  for (ActDtype d : kDtypes)
    for (int cols : {16384, 5120, 4096, 1000, 129, 100, 1})
      for (std::int64_t rows : kTokens) {
        SCOPED_TRACE(label(d, "rows " + std::to_string(rows) + " cols " + std::to_string(cols)));
        const std::size_t n = rows * cols;
        const float eps = 1e-5f;
        const Bits x = random_bits(d, n, ++seed, -1.5f, 2.5f);
        const Bits w = random_bits(d, cols, ++seed, 0.5f, 1.5f);
        const Bits noise = random_bits(d, n, ++seed, -1.0f, 1.0f);
        const Bits acc0 = random_bits(d, n, ++seed, -3.0f, 3.0f);
        Bits dy(n);
        for (std::size_t i = 0; i < n; ++i) {
          dy[i] = to_bits(d, 0.5f * from_bits(d, x[i]) + from_bits(d, noise[i]));
        }
        double scale = 0;
        const auto grad = rms_norm_backward_ref(values(d, x), values(d, w), values(d, dy), rows,
                                                cols, eps, &scale);

        DeviceBuffer dx = upload(x), dw = upload(w), ddy = upload(dy), dacc = upload(acc0);
        rms_norm_backward(dacc.get(), dx.get(), dw.get(), ddy.get(), rows, cols, eps, d, nullptr);
        const Bits once = download(dacc.get(), n);
        EXPECT_TRUE(matches_reference(d, once, plus(values(d, acc0), grad), scale)) << "first call";

        rms_norm_backward(dacc.get(), dx.get(), dw.get(), ddy.get(), rows, cols, eps, d, nullptr);
        EXPECT_TRUE(
            matches_reference(d, download(dacc.get(), n), plus(values(d, once), grad), scale))
            << "second call";

        // A zero accumulator holds the gradient alone.
        copy_to(dacc.get(), Bits(n, to_bits(d, 0.0f)));
        rms_norm_backward(dacc.get(), dx.get(), dw.get(), ddy.get(), rows, cols, eps, d, nullptr);
        EXPECT_TRUE(matches_reference(d, download(dacc.get(), n), grad, scale)) << "from zero";
      }
}

// Pointers 2 bytes off alignment with cols a multiple of 8 (the element path), and a row of
// zeros, whose rstd is 1/sqrt(eps): the gradient is then rstd * w * dy.
TEST(TrainingRmsNormBackward, UnalignedPointersAndZeroRow) {
  DeviceGuard guard(kGpu);
  for (ActDtype d : kDtypes) {
    SCOPED_TRACE(label(d, "unaligned"));
    const std::int64_t rows = 7;
    const int cols = 4096;
    const std::size_t n = rows * cols;
    const float eps = 1e-6f;
    Bits x = random_bits(d, n, 11, -2.0f, 2.0f);
    std::fill(x.begin(), x.begin() + cols, to_bits(d, 0.0f));
    const Bits w = random_bits(d, cols, 12, 0.5f, 1.5f);
    const Bits dy = random_bits(d, n, 13, -1e-3f, 1e-3f);  // rstd = 1000 on the zero row
    const Bits acc0 = random_bits(d, n, 14, -1.0f, 1.0f);
    const auto expected =
        plus(values(d, acc0),
             rms_norm_backward_ref(values(d, x), values(d, w), values(d, dy), rows, cols, eps));

    DeviceBuffer ux = upload(shifted(x)), uw = upload(shifted(w)), udy = upload(shifted(dy)),
                 uacc = upload(shifted(acc0));
    rms_norm_backward(at1(uacc), at1(ux), at1(uw), at1(udy), rows, cols, eps, d, nullptr);
    EXPECT_TRUE(matches_reference(d, download(at1(uacc), n), expected)) << "unaligned";

    DeviceBuffer dx = upload(x), dw = upload(w), ddy = upload(dy), dacc = upload(acc0);
    rms_norm_backward(dacc.get(), dx.get(), dw.get(), ddy.get(), rows, cols, eps, d, nullptr);
    EXPECT_TRUE(matches_reference(d, download(dacc.get(), n), expected)) << "aligned";
  }
}

// ---------------------------------------------------------------------------------------------
// Arguments

// Zero counts launch nothing (null pointers are never touched); negative counts and a negative
// or non-finite eps are InputErrors.
TEST(TrainingKernels, ArgumentChecks) {
  DeviceGuard guard(kGpu);
  const ActDtype d = ActDtype::BF16;
  EXPECT_NO_THROW(swiglu_backward(nullptr, nullptr, nullptr, 0, 128, d, nullptr));
  EXPECT_NO_THROW(swiglu_backward(nullptr, nullptr, nullptr, 4, 0, d, nullptr));
  EXPECT_NO_THROW(gelu_tanh_backward(nullptr, nullptr, nullptr, 0, d, nullptr));
  EXPECT_NO_THROW(rms_norm_backward(nullptr, nullptr, nullptr, nullptr, 0, 128, 1e-5f, d, nullptr));
  EXPECT_NO_THROW(rms_norm_backward(nullptr, nullptr, nullptr, nullptr, 4, 0, 1e-5f, d, nullptr));
  GPB_CUDA_CHECK(cudaDeviceSynchronize());

  EXPECT_THROW(swiglu_backward(nullptr, nullptr, nullptr, -1, 128, d, nullptr), InputError);
  EXPECT_THROW(swiglu_backward(nullptr, nullptr, nullptr, 4, -8, d, nullptr), InputError);
  EXPECT_THROW(gelu_tanh_backward(nullptr, nullptr, nullptr, -1, d, nullptr), InputError);
  EXPECT_THROW(rms_norm_backward(nullptr, nullptr, nullptr, nullptr, -1, 128, 1e-5f, d, nullptr),
               InputError);
  EXPECT_THROW(rms_norm_backward(nullptr, nullptr, nullptr, nullptr, 4, -1, 1e-5f, d, nullptr),
               InputError);
  EXPECT_THROW(rms_norm_backward(nullptr, nullptr, nullptr, nullptr, 4, 128, -1e-5f, d, nullptr),
               InputError);
  EXPECT_THROW(rms_norm_backward(nullptr, nullptr, nullptr, nullptr, 4, 128,
                                 std::numeric_limits<float>::quiet_NaN(), d, nullptr),
               InputError);
  EXPECT_THROW(rms_norm_backward(nullptr, nullptr, nullptr, nullptr, 4, 128,
                                 std::numeric_limits<float>::infinity(), d, nullptr),
               InputError);
  EXPECT_THROW(
      rms_norm_backward(nullptr, nullptr, nullptr, nullptr,
                        std::int64_t{std::numeric_limits<int>::max()} + 1, 128, 1e-5f, d, nullptr),
      InputError);
}
