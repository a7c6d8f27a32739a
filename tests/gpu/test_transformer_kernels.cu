// The transformer engine's element-wise kernels against plain host references on seeded random
// inputs, in bf16 and fp16: norms (alone, per head, fused with the residual), RoPE, activations,
// adds, embeddings, and the weight fill under which a shard equals its slice of the full weight.
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "half_bits.hpp"
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
const int kNormCols[] = {4096, 5120, 1600, 129, 128};
const std::int64_t kTokens[] = {1, 7, 64};

// Element-wise fp32 sum rounded to the storage type: what the adds store, bit for bit.
Bits rounded_sum(ActDtype d, const Bits& a, const Bits& b) {
  Bits out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    out[i] = to_bits(d, from_bits(d, a[i]) + from_bits(d, b[i]));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Device transfers

template <class T>
DeviceBuffer upload(const std::vector<T>& host, std::size_t extra_elements = 0) {
  DeviceBuffer buf(kGpu, std::max<std::size_t>(1, (host.size() + extra_elements) * sizeof(T)));
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

template <class T = std::uint16_t>
std::vector<T> download(const void* device, std::size_t n) {
  GPB_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> host(n);
  GPB_CUDA_CHECK(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

// ---------------------------------------------------------------------------------------------
// Comparison: the reference is rounded to the storage type first, then |got - ref| <= rel*|ref|
// + abs, which allows one unit in the last place of either rounding (NaN fails).

struct Tolerance {
  double rel, abs;
};
Tolerance tolerance(ActDtype d) {
  return d == ActDtype::BF16 ? Tolerance{1e-2, 1e-2} : Tolerance{2e-3, 2e-3};
}

::testing::AssertionResult matches_reference(ActDtype d, const Bits& got,
                                             const std::vector<double>& ref) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << "size mismatch";
  const Tolerance tol = tolerance(d);
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double expected = from_bits(d, to_bits(d, static_cast<float>(ref[i])));
    const double value = from_bits(d, got[i]);
    if (!(std::fabs(value - expected) <= tol.rel * std::fabs(expected) + tol.abs)) {
      if (bad++ == 0) first = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements off; first at " << first << ": got "
         << from_bits(d, got[first]) << ", reference " << ref[first];
}

std::string label(ActDtype d, const std::string& what) {
  std::ostringstream s;
  s << to_string(d) << " " << what;
  return s.str();
}

// ---------------------------------------------------------------------------------------------
// Host references (fp64)

std::vector<double> rms_norm_ref(const std::vector<double>& x, const std::vector<double>& w,
                                 std::int64_t rows, int cols, double eps) {
  std::vector<double> y(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const double* row = &x[r * cols];
    double sum_sq = 0;
    for (int c = 0; c < cols; ++c) sum_sq += row[c] * row[c];
    const double rstd = 1.0 / std::sqrt(sum_sq / cols + eps);
    for (int c = 0; c < cols; ++c) y[r * cols + c] = row[c] * rstd * w[c];
  }
  return y;
}

// `b` empty: no bias.
std::vector<double> layer_norm_ref(const std::vector<double>& x, const std::vector<double>& w,
                                   const std::vector<double>& b, std::int64_t rows, int cols,
                                   double eps) {
  std::vector<double> y(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const double* row = &x[r * cols];
    double mean = 0, var = 0;
    for (int c = 0; c < cols; ++c) mean += row[c];
    mean /= cols;
    for (int c = 0; c < cols; ++c) var += (row[c] - mean) * (row[c] - mean);
    const double rstd = 1.0 / std::sqrt(var / cols + eps);
    for (int c = 0; c < cols; ++c) {
      y[r * cols + c] = (row[c] - mean) * rstd * w[c] + (b.empty() ? 0.0 : b[c]);
    }
  }
  return y;
}

// HuggingFace's rotate_half RoPE on the heads of `buf` [tokens, stride] that start at column
// `offset`: inv_freq[i] = 1 / theta^(2i/head_dim) as an fp32 table, the angle an fp32 product.
void rope_ref(std::vector<double>& buf, const std::vector<std::int32_t>& positions,
              std::int64_t tokens, int heads, int head_dim, std::int64_t stride,
              std::int64_t offset, double theta) {
  const int half = head_dim / 2;
  for (std::int64_t t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h) {
      double* x = &buf[t * stride + offset + static_cast<std::int64_t>(h) * head_dim];
      for (int i = 0; i < half; ++i) {
        const float inv_freq = static_cast<float>(1.0 / std::pow(theta, 2.0 * i / head_dim));
        const float angle = static_cast<float>(positions[t]) * inv_freq;
        const double c = std::cos(static_cast<double>(angle));
        const double s = std::sin(static_cast<double>(angle));
        const double x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c - x2 * s;
        x[i + half] = x2 * c + x1 * s;
      }
    }
}

double silu(double x) {
  return x / (1.0 + std::exp(-x));
}
double gelu_erf(double x) {
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}
double gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / 3.14159265358979323846);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Norms

// rms_norm, layer_norm (with and without bias), and the fused add_rms_norm / add_layer_norm,
// whose residual must be the rounded sum bit for bit, over row lengths of real models (and 129:
// the element path) and 1, 7, 64 rows.
TEST(TransformerNorm, MatchesHostReference) {
  DeviceGuard guard(kGpu);
  std::uint64_t seed = 100;
  for (ActDtype d : kDtypes)
    for (int cols : kNormCols)
      for (std::int64_t rows : kTokens) {
        SCOPED_TRACE(label(d, "rows " + std::to_string(rows) + " cols " + std::to_string(cols)));
        const std::size_t n = rows * cols;
        const float eps = 1e-5f;
        const Bits x = random_bits(d, n, ++seed, -1.5f, 2.5f);  // mean away from 0
        const Bits res = random_bits(d, n, ++seed, -1.0f, 1.0f);
        const Bits w = random_bits(d, cols, ++seed, 0.5f, 1.5f);
        const Bits b = random_bits(d, cols, ++seed, -0.5f, 0.5f);
        DeviceBuffer dx = upload(x), dres = upload(res), dw = upload(w), db = upload(b);
        DeviceBuffer dout(kGpu, n * 2);
        const auto xv = values(d, x), wv = values(d, w), bv = values(d, b);

        rms_norm(dout.get(), dx.get(), dw.get(), rows, cols, eps, d, nullptr);
        EXPECT_TRUE(
            matches_reference(d, download(dout.get(), n), rms_norm_ref(xv, wv, rows, cols, eps)))
            << "rms_norm";

        layer_norm(dout.get(), dx.get(), dw.get(), db.get(), rows, cols, eps, d, nullptr);
        EXPECT_TRUE(matches_reference(d, download(dout.get(), n),
                                      layer_norm_ref(xv, wv, bv, rows, cols, eps)))
            << "layer_norm";
        layer_norm(dout.get(), dx.get(), dw.get(), nullptr, rows, cols, eps, d, nullptr);
        EXPECT_TRUE(matches_reference(d, download(dout.get(), n),
                                      layer_norm_ref(xv, wv, {}, rows, cols, eps)))
            << "layer_norm without bias";

        const Bits summed = rounded_sum(d, res, x);
        const auto sv = values(d, summed);
        add_rms_norm(dres.get(), dout.get(), dx.get(), dw.get(), rows, cols, eps, d, nullptr);
        EXPECT_EQ(download(dres.get(), n), summed) << "add_rms_norm residual";
        EXPECT_TRUE(
            matches_reference(d, download(dout.get(), n), rms_norm_ref(sv, wv, rows, cols, eps)))
            << "add_rms_norm";

        copy_to(dres.get(), res);
        add_layer_norm(dres.get(), dout.get(), dx.get(), dw.get(), db.get(), rows, cols, eps, d,
                       nullptr);
        EXPECT_EQ(download(dres.get(), n), summed) << "add_layer_norm residual";
        EXPECT_TRUE(matches_reference(d, download(dout.get(), n),
                                      layer_norm_ref(sv, wv, bv, rows, cols, eps)))
            << "add_layer_norm";
      }
}

// In place (out == in) on the 16-byte path, and pointers 2 bytes off alignment, which must take
// the element path and give the same results.
TEST(TransformerNorm, InPlaceAndUnalignedPointers) {
  DeviceGuard guard(kGpu);
  for (ActDtype d : kDtypes) {
    SCOPED_TRACE(label(d, "in place / unaligned"));
    const std::int64_t rows = 7;
    const int cols = 4096;
    const std::size_t n = rows * cols;
    const float eps = 1e-6f;
    const Bits x = random_bits(d, n, 7, -2.0f, 2.0f);
    const Bits w = random_bits(d, cols, 8, 0.5f, 1.5f);
    const Bits b = random_bits(d, cols, 9, -0.5f, 0.5f);
    const auto xv = values(d, x), wv = values(d, w), bv = values(d, b);

    DeviceBuffer dx = upload(x), dw = upload(w), db = upload(b);
    rms_norm(dx.get(), dx.get(), dw.get(), rows, cols, eps, d, nullptr);
    EXPECT_TRUE(matches_reference(d, download(dx.get(), n), rms_norm_ref(xv, wv, rows, cols, eps)));
    copy_to(dx.get(), x);
    layer_norm(dx.get(), dx.get(), dw.get(), db.get(), rows, cols, eps, d, nullptr);
    EXPECT_TRUE(
        matches_reference(d, download(dx.get(), n), layer_norm_ref(xv, wv, bv, rows, cols, eps)));

    // One element in: every pointer is 2 bytes past a 16-byte boundary.
    Bits x_off(1, 0), w_off(1, 0), b_off(1, 0);
    x_off.insert(x_off.end(), x.begin(), x.end());
    w_off.insert(w_off.end(), w.begin(), w.end());
    b_off.insert(b_off.end(), b.begin(), b.end());
    DeviceBuffer ux = upload(x_off), uw = upload(w_off), ub = upload(b_off), uout(kGpu, n * 2 + 2);
    auto at1 = [](const DeviceBuffer& buf) { return buf.as<std::uint16_t>() + 1; };
    rms_norm(at1(uout), at1(ux), at1(uw), rows, cols, eps, d, nullptr);
    EXPECT_TRUE(
        matches_reference(d, download(at1(uout), n), rms_norm_ref(xv, wv, rows, cols, eps)));
    layer_norm(at1(uout), at1(ux), at1(uw), at1(ub), rows, cols, eps, d, nullptr);
    EXPECT_TRUE(
        matches_reference(d, download(at1(uout), n), layer_norm_ref(xv, wv, bv, rows, cols, eps)));
  }
}

// Qwen3's per-head q/k norm inside a fused qkv buffer [tokens, (heads + 2 kv_heads) * head_dim]:
// q's and k's heads are normalized with their own weights, v is untouched.
TEST(TransformerNorm, PerHeadNormInsideFusedQkv) {
  DeviceGuard guard(kGpu);
  for (ActDtype d : kDtypes)
    for (int head_dim : {128, 100})
      for (std::int64_t tokens : kTokens) {
        SCOPED_TRACE(
            label(d, "head_dim " + std::to_string(head_dim) + " tokens " + std::to_string(tokens)));
        const int heads = 5, kv_heads = 2;
        const std::int64_t stride = static_cast<std::int64_t>(heads + 2 * kv_heads) * head_dim;
        const std::size_t n = tokens * stride;
        const float eps = 1e-6f;
        const Bits qkv = random_bits(d, n, 20 + tokens, -3.0f, 3.0f);
        const Bits wq = random_bits(d, head_dim, 21, 0.5f, 1.5f);
        const Bits wk = random_bits(d, head_dim, 22, 0.5f, 1.5f);
        DeviceBuffer dqkv = upload(qkv), dwq = upload(wq), dwk = upload(wk);
        auto* base = dqkv.as<std::uint16_t>();
        rms_norm_heads(base, dwq.get(), tokens, heads, head_dim, stride, eps, d, nullptr);
        rms_norm_heads(base + heads * head_dim, dwk.get(), tokens, kv_heads, head_dim, stride, eps,
                       d, nullptr);
        const Bits got = download(base, n);

        const auto in = values(d, qkv), wqv = values(d, wq), wkv = values(d, wk);
        std::vector<double> expected = in;
        for (std::int64_t t = 0; t < tokens; ++t)
          for (int h = 0; h < heads + kv_heads; ++h) {
            const std::int64_t at = t * stride + static_cast<std::int64_t>(h) * head_dim;
            const std::vector<double> head(in.begin() + at, in.begin() + at + head_dim);
            const auto y = rms_norm_ref(head, h < heads ? wqv : wkv, 1, head_dim, eps);
            std::copy(y.begin(), y.end(), expected.begin() + at);
          }
        EXPECT_TRUE(matches_reference(d, got, expected));
        for (std::int64_t t = 0; t < tokens; ++t) {
          const std::int64_t v0 =
              t * stride + static_cast<std::int64_t>(heads + kv_heads) * head_dim;
          EXPECT_TRUE(
              std::equal(got.begin() + v0, got.begin() + (t + 1) * stride, qkv.begin() + v0))
              << "v of token " << t << " changed";
        }
      }
}

// ---------------------------------------------------------------------------------------------
// RoPE

// Grouped-query q and k inside a fused qkv buffer, positions 0, 1, 4095 (and random ones up to
// 8191 for longer prompts; a single token at 4095 is a decode step), theta 10000 and 500000:
// every q and k head against the host rotate_half, v untouched, position 0 unchanged.
TEST(TransformerRope, MatchesRotateHalfInsideFusedQkv) {
  DeviceGuard guard(kGpu);
  for (ActDtype d : kDtypes)
    for (int head_dim : {128, 64})
      for (float theta : {10000.0f, 500000.0f})
        for (std::int64_t tokens : kTokens) {
          SCOPED_TRACE(label(d, "head_dim " + std::to_string(head_dim) + " theta " +
                                    std::to_string(theta) + " tokens " + std::to_string(tokens)));
          const int heads = 8, kv_heads = 2;
          const std::int64_t stride = static_cast<std::int64_t>(heads + 2 * kv_heads) * head_dim;
          const std::size_t n = tokens * stride;
          std::vector<std::int32_t> positions(tokens);
          std::mt19937 gen(static_cast<unsigned>(tokens * head_dim));
          const std::int32_t first_positions[] = {0, 1, 4095};
          for (std::int64_t t = 0; t < tokens; ++t) {
            positions[t] = t < 3 ? first_positions[t] : static_cast<std::int32_t>(gen() % 8192);
          }
          if (tokens == 1) positions[0] = 4095;
          const Bits qkv = random_bits(d, n, 30 + tokens, -2.0f, 2.0f);
          DeviceBuffer dqkv = upload(qkv), dpos = upload(positions);
          auto* base = dqkv.as<std::uint16_t>();
          rope(base, base + heads * head_dim, dpos.as<std::int32_t>(), tokens, heads, kv_heads,
               head_dim, stride, stride, theta, d, nullptr);
          const Bits got = download(base, n);

          std::vector<double> expected = values(d, qkv);
          rope_ref(expected, positions, tokens, heads, head_dim, stride, 0, theta);
          rope_ref(expected, positions, tokens, kv_heads, head_dim, stride, heads * head_dim,
                   theta);
          EXPECT_TRUE(matches_reference(d, got, expected));
          for (std::int64_t t = 0; t < tokens; ++t) {
            const std::int64_t row = t * stride;
            const std::int64_t v0 = row + static_cast<std::int64_t>(heads + kv_heads) * head_dim;
            EXPECT_TRUE(std::equal(got.begin() + v0, got.begin() + row + stride, qkv.begin() + v0))
                << "v of token " << t << " changed";
            if (positions[t] == 0) {
              EXPECT_TRUE(std::equal(got.begin() + row, got.begin() + v0, qkv.begin() + row))
                  << "position 0 must leave q and k as they are";
            }
          }
        }
}

// Separate contiguous q and k buffers, and q alone (k null).
TEST(TransformerRope, SeparateBuffersAndQueryOnly) {
  DeviceGuard guard(kGpu);
  for (ActDtype d : kDtypes) {
    SCOPED_TRACE(label(d, "separate q and k"));
    const std::int64_t tokens = 7;
    const int heads = 4, kv_heads = 1, head_dim = 128;
    const float theta = 10000.0f;
    std::vector<std::int32_t> positions = {0, 1, 4095, 17, 300, 2048, 4094};
    const Bits q = random_bits(d, tokens * heads * head_dim, 40, -2.0f, 2.0f);
    const Bits k = random_bits(d, tokens * kv_heads * head_dim, 41, -2.0f, 2.0f);
    DeviceBuffer dq = upload(q), dk = upload(k), dpos = upload(positions);
    rope(dq.get(), dk.get(), dpos.as<std::int32_t>(), tokens, heads, kv_heads, head_dim,
         heads * head_dim, kv_heads * head_dim, theta, d, nullptr);
    std::vector<double> eq = values(d, q), ek = values(d, k);
    rope_ref(eq, positions, tokens, heads, head_dim, heads * head_dim, 0, theta);
    rope_ref(ek, positions, tokens, kv_heads, head_dim, kv_heads * head_dim, 0, theta);
    EXPECT_TRUE(matches_reference(d, download(dq.get(), q.size()), eq)) << "q";
    EXPECT_TRUE(matches_reference(d, download(dk.get(), k.size()), ek)) << "k";

    copy_to(dq.get(), q);
    rope(dq.get(), nullptr, dpos.as<std::int32_t>(), tokens, heads, 0, head_dim, heads * head_dim,
         0, theta, d, nullptr);
    EXPECT_TRUE(matches_reference(d, download(dq.get(), q.size()), eq)) << "q alone";
  }
  EXPECT_THROW(
      rope(nullptr, nullptr, nullptr, 1, 1, 0, 127, 127, 0, 10000.0f, ActDtype::BF16, nullptr),
      InputError);
}

// The fused RoPE + cache write equals rope() on the fused buffer followed by copies of k and v
// into each sequence's cache rows; without RoPE it only copies; other cache rows are untouched.
TEST(TransformerRope, QkvToCacheEqualsRopeThenCopies) {
  DeviceGuard guard(kGpu);
  for (ActDtype d : kDtypes)
    for (int head_dim : {128, 64, 6})
      for (bool rotary : {true, false})
        for (int pad : {0, 8}) {  // cache rows packed (pitch 0) or padded
          SCOPED_TRACE(label(d, "head_dim " + std::to_string(head_dim) +
                                    (rotary ? " rope" : " no rope") + " pad " +
                                    std::to_string(pad)));
          const int heads = 8, kv_heads = 2, batch = 3, per_seq = 5, pos0 = 9, max_context = 20;
          const std::int64_t tokens = batch * per_seq, kv_dim = kv_heads * head_dim;
          const std::int64_t pitch = kv_dim + pad;
          const std::int64_t stride = static_cast<std::int64_t>(heads + 2 * kv_heads) * head_dim;
          std::vector<std::int32_t> positions(tokens);
          for (std::int64_t t = 0; t < tokens; ++t) positions[t] = pos0 + t % per_seq;
          const Bits qkv = random_bits(d, tokens * stride, 77 + head_dim, -2.0f, 2.0f);
          const Bits sentinel = random_bits(d, batch * max_context * pitch, 78, -1.0f, 1.0f);
          DeviceBuffer dqkv = upload(qkv), dpos = upload(positions), kc = upload(sentinel),
                       vc = upload(sentinel);
          qkv_to_cache(dqkv.get(), tokens, per_seq, heads, kv_heads, head_dim, stride,
                       dpos.as<std::int32_t>(), rotary, 10000.0f, kc.get(), vc.get(), max_context,
                       pad == 0 ? 0 : pitch, d, nullptr);
          const Bits got_qkv = download(dqkv.get(), qkv.size());
          const Bits got_k = download(kc.get(), sentinel.size());
          const Bits got_v = download(vc.get(), sentinel.size());

          DeviceBuffer ref = upload(qkv);
          auto* base = ref.as<std::uint16_t>();
          if (rotary)
            rope(base, base + heads * head_dim, dpos.as<std::int32_t>(), tokens, heads, kv_heads,
                 head_dim, stride, stride, 10000.0f, d, nullptr);
          const Bits want = download(base, qkv.size());
          Bits want_k = sentinel, want_v = sentinel;
          for (std::int64_t t = 0; t < tokens; ++t) {
            const std::int64_t row = (t / per_seq) * max_context + positions[t];
            for (std::int64_t i = 0; i < kv_dim; ++i) {
              want_k[row * pitch + i] = want[t * stride + heads * head_dim + i];
              want_v[row * pitch + i] = want[t * stride + heads * head_dim + kv_dim + i];
            }
          }
          // q in place and k in the cache as rope() rotates them (to the last unit: the compiler
          // may contract the rotation into FMAs differently in the two kernels); v copied exactly.
          Bits got_q, want_q;
          for (std::int64_t t = 0; t < tokens; ++t) {
            got_q.insert(got_q.end(), got_qkv.begin() + t * stride,
                         got_qkv.begin() + t * stride + heads * head_dim);
            want_q.insert(want_q.end(), want.begin() + t * stride,
                          want.begin() + t * stride + heads * head_dim);
          }
          EXPECT_TRUE(matches_reference(d, got_q, values(d, want_q))) << "q";
          EXPECT_TRUE(matches_reference(d, got_k, values(d, want_k))) << "k cache";
          EXPECT_TRUE(got_v == want_v) << "v cache";
        }
  EXPECT_THROW(qkv_to_cache(nullptr, 1, 1, 1, 1, 7, 21, nullptr, true, 10000.0f, nullptr, nullptr,
                            1, 0, ActDtype::BF16, nullptr),
               InputError);
  // A cache row pitch shorter than the KV heads' row.
  EXPECT_THROW(qkv_to_cache(nullptr, 1, 1, 1, 1, 8, 24, nullptr, true, 10000.0f, nullptr, nullptr,
                            1, 4, ActDtype::BF16, nullptr),
               InputError);
}

// ---------------------------------------------------------------------------------------------
// Activations, adds, embeddings

// gate_up rows hold gate then up: out = silu(gate) * up.
TEST(TransformerPointwise, SwigluGateThenUp) {
  DeviceGuard guard(kGpu);
  for (ActDtype d : kDtypes)
    for (int inter : {11008, 1600, 129})
      for (std::int64_t tokens : kTokens) {
        SCOPED_TRACE(label(
            d, "intermediate " + std::to_string(inter) + " tokens " + std::to_string(tokens)));
        const Bits gu = random_bits(d, tokens * 2 * inter, 50 + inter + tokens, -4.0f, 4.0f);
        DeviceBuffer dgu = upload(gu), dout(kGpu, tokens * inter * 2);
        swiglu(dout.get(), dgu.get(), tokens, inter, d, nullptr);
        const auto g = values(d, gu);
        std::vector<double> expected(tokens * inter);
        for (std::int64_t t = 0; t < tokens; ++t)
          for (int j = 0; j < inter; ++j) {
            const double gate = g[t * 2 * inter + j], up = g[t * 2 * inter + inter + j];
            expected[t * inter + j] = silu(gate) * up;
          }
        EXPECT_TRUE(matches_reference(d, download(dout.get(), expected.size()), expected));
      }
}

// GELU (erf and tanh forms) and ReLU over odd and even lengths, out of place and in place.
TEST(TransformerPointwise, GeluAndRelu) {
  DeviceGuard guard(kGpu);
  for (ActDtype d : kDtypes)
    for (int cols : {4096, 129})
      for (std::int64_t tokens : kTokens) {
        SCOPED_TRACE(label(d, "n " + std::to_string(tokens * cols)));
        const std::int64_t n = tokens * cols;
        const Bits x = random_bits(d, n, 60 + n, -5.0f, 5.0f);
        const auto xv = values(d, x);
        DeviceBuffer dx = upload(x), dout(kGpu, n * 2);
        std::vector<double> erf_ref(n), tanh_ref(n), relu_ref(n);
        for (std::int64_t i = 0; i < n; ++i) {
          erf_ref[i] = gelu_erf(xv[i]);
          tanh_ref[i] = gelu_tanh(xv[i]);
          relu_ref[i] = std::max(xv[i], 0.0);
        }
        gelu(dout.get(), dx.get(), n, false, d, nullptr);
        EXPECT_TRUE(matches_reference(d, download(dout.get(), n), erf_ref)) << "gelu erf";
        gelu(dout.get(), dx.get(), n, true, d, nullptr);
        EXPECT_TRUE(matches_reference(d, download(dout.get(), n), tanh_ref)) << "gelu tanh";
        relu(dout.get(), dx.get(), n, d, nullptr);
        EXPECT_TRUE(matches_reference(d, download(dout.get(), n), relu_ref)) << "relu";
        gelu(dx.get(), dx.get(), n, false, d, nullptr);
        EXPECT_TRUE(matches_reference(d, download(dx.get(), n), erf_ref)) << "gelu in place";
      }
}

// add_bias and residual_add store the rounded fp32 sum, bit for bit.
TEST(TransformerPointwise, BiasAndResidualAdds) {
  DeviceGuard guard(kGpu);
  for (ActDtype d : kDtypes)
    for (int cols : {4096, 1600, 129})
      for (std::int64_t rows : kTokens) {
        SCOPED_TRACE(label(d, "rows " + std::to_string(rows) + " cols " + std::to_string(cols)));
        const std::int64_t n = rows * cols;
        const Bits x = random_bits(d, n, 70 + n, -3.0f, 3.0f);
        const Bits y = random_bits(d, n, 71 + n, -3.0f, 3.0f);
        const Bits bias = random_bits(d, cols, 72 + cols, -1.0f, 1.0f);
        DeviceBuffer dx = upload(x), dy = upload(y), db = upload(bias);

        residual_add(dx.get(), dy.get(), n, d, nullptr);
        EXPECT_EQ(download(dx.get(), n), rounded_sum(d, x, y)) << "residual_add";

        copy_to(dx.get(), x);
        add_bias(dx.get(), db.get(), rows, cols, d, nullptr);
        Bits tiled(n);
        for (std::int64_t i = 0; i < n; ++i) tiled[i] = bias[i % cols];
        EXPECT_EQ(download(dx.get(), n), rounded_sum(d, x, tiled)) << "add_bias";
      }
}

// Rows of the token table, plus rows of the learned position table when given.
TEST(TransformerPointwise, EmbeddingLookup) {
  DeviceGuard guard(kGpu);
  const int vocab = 1000, max_positions = 2050;
  for (ActDtype d : kDtypes)
    for (int hidden : {4096, 129})
      for (std::int64_t tokens : kTokens) {
        SCOPED_TRACE(
            label(d, "hidden " + std::to_string(hidden) + " tokens " + std::to_string(tokens)));
        const Bits table = random_bits(d, static_cast<std::size_t>(vocab) * hidden, 80, -1, 1);
        const Bits pos_table =
            random_bits(d, static_cast<std::size_t>(max_positions) * hidden, 81, -1, 1);
        std::mt19937 gen(static_cast<unsigned>(82 + tokens));
        std::vector<std::int32_t> ids(tokens), positions(tokens);
        for (std::int64_t t = 0; t < tokens; ++t) {
          ids[t] = static_cast<std::int32_t>(gen() % vocab);
          positions[t] = static_cast<std::int32_t>(gen() % max_positions);
        }
        ids[0] = vocab - 1;
        DeviceBuffer dtable = upload(table), dpos_table = upload(pos_table), dids = upload(ids),
                     dpos = upload(positions), dout(kGpu, tokens * hidden * 2);
        const std::size_t n = tokens * hidden;

        embedding_lookup(dout.get(), dtable.get(), dids.as<std::int32_t>(), tokens, hidden, nullptr,
                         nullptr, d, nullptr);
        Bits rows(n), pos_rows(n);
        for (std::int64_t t = 0; t < tokens; ++t)
          for (int c = 0; c < hidden; ++c) {
            rows[t * hidden + c] = table[static_cast<std::size_t>(ids[t]) * hidden + c];
            pos_rows[t * hidden + c] =
                pos_table[static_cast<std::size_t>(positions[t]) * hidden + c];
          }
        EXPECT_EQ(download(dout.get(), n), rows) << "token rows";

        embedding_lookup(dout.get(), dtable.get(), dids.as<std::int32_t>(), tokens, hidden,
                         dpos_table.get(), dpos.as<std::int32_t>(), d, nullptr);
        EXPECT_EQ(download(dout.get(), n), rounded_sum(d, rows, pos_rows)) << "with positions";

        // embedding_step: the same rows from positions it writes itself (pos0 + t % seq_tokens),
        // equal to fill_positions' and to a lookup at those positions.
        for (int batch : {1, 2, 7}) {
          if (tokens % batch != 0) continue;
          const int seq_tokens = static_cast<int>(tokens / batch), pos0 = 5;
          std::vector<std::int32_t> step_pos(tokens);
          for (std::int64_t t = 0; t < tokens; ++t)
            step_pos[t] = pos0 + static_cast<std::int32_t>(t % seq_tokens);
          DeviceBuffer dstep_pos = upload(step_pos), dwritten(kGpu, tokens * 4),
                       dwant(kGpu, tokens * hidden * 2);
          GPB_CUDA_CHECK(cudaMemset(dwritten.get(), 0xff, dwritten.bytes()));
          embedding_lookup(dwant.get(), dtable.get(), dids.as<std::int32_t>(), tokens, hidden,
                           dpos_table.get(), dstep_pos.as<std::int32_t>(), d, nullptr);
          embedding_step(dout.get(), dtable.get(), dids.as<std::int32_t>(), batch, seq_tokens,
                         hidden, dpos_table.get(), pos0, dwritten.as<std::int32_t>(), d, nullptr);
          EXPECT_EQ(download(dout.get(), n), download(dwant.get(), n)) << "step, batch " << batch;
          std::vector<std::int32_t> written(tokens);
          GPB_CUDA_CHECK(
              cudaMemcpy(written.data(), dwritten.get(), tokens * 4, cudaMemcpyDeviceToHost));
          EXPECT_EQ(written, step_pos) << "step positions, batch " << batch;
          embedding_step(dout.get(), dtable.get(), dids.as<std::int32_t>(), batch, seq_tokens,
                         hidden, nullptr, pos0, dwritten.as<std::int32_t>(), d, nullptr);
          EXPECT_EQ(download(dout.get(), n), rows) << "step without a position table";
        }
      }
}

// Zero sizes launch nothing and do not throw.
TEST(TransformerPointwise, EmptySizesAreNoOps) {
  DeviceGuard guard(kGpu);
  EXPECT_NO_THROW(rms_norm(nullptr, nullptr, nullptr, 0, 4096, 1e-5f, ActDtype::BF16, nullptr));
  EXPECT_NO_THROW(swiglu(nullptr, nullptr, 0, 11008, ActDtype::BF16, nullptr));
  EXPECT_NO_THROW(gelu(nullptr, nullptr, 0, true, ActDtype::F16, nullptr));
  EXPECT_NO_THROW(rope(nullptr, nullptr, nullptr, 0, 32, 8, 128, 4096, 1024, 10000.0f,
                       ActDtype::BF16, nullptr));
  GPB_CUDA_CHECK(cudaDeviceSynchronize());
}

// ---------------------------------------------------------------------------------------------
// Deterministic weights and inputs

// A shard filled with its offsets equals the same slice of the full weight bit for bit, and both
// equal the host formula; no zeros, magnitudes in [scale/64, scale], both signs; the same seed
// and weight id repeat, another weight id or seed differs.
TEST(TransformerFill, ShardEqualsSliceOfFullWeight) {
  DeviceGuard guard(kGpu);
  for (ActDtype d : kDtypes) {
    SCOPED_TRACE(to_string(d));
    const std::int64_t rows = 67;
    const int cols = 130;
    const std::uint64_t seed = 42, id = 3;
    const float scale = 0.02f;
    const std::size_t n = rows * cols;
    DeviceBuffer full(kGpu, n * 2), again(kGpu, n * 2), other_id(kGpu, n * 2),
        other_seed(kGpu, n * 2);
    fill_weight(full.get(), rows, cols, 0, 0, cols, seed, id, scale, d, nullptr);
    fill_weight(again.get(), rows, cols, 0, 0, cols, seed, id, scale, d, nullptr);
    fill_weight(other_id.get(), rows, cols, 0, 0, cols, seed, id + 1, scale, d, nullptr);
    fill_weight(other_seed.get(), rows, cols, 0, 0, cols, seed + 1, id, scale, d, nullptr);
    const Bits w = download(full.get(), n);

    Bits formula(n);
    for (std::int64_t r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        formula[r * cols + c] = to_bits(d, weight_value(seed, id, r, c, cols, scale));
      }
    EXPECT_EQ(w, formula) << "device fill differs from weight_value";

    // Shards: a block in the middle, a row range (column-parallel) and a column range
    // (row-parallel), each filled on its own with its offsets.
    struct Shard {
      std::int64_t row0, rows;
      int col0, cols;
    };
    for (const Shard s : {Shard{13, 29, 37, 50}, Shard{32, 35, 0, cols}, Shard{0, rows, 65, 65}}) {
      DeviceBuffer shard(kGpu, s.rows * s.cols * 2);
      fill_weight(shard.get(), s.rows, s.cols, s.row0, s.col0, cols, seed, id, scale, d, nullptr);
      const Bits got = download(shard.get(), s.rows * s.cols);
      Bits slice;
      for (std::int64_t r = s.row0; r < s.row0 + s.rows; ++r) {
        slice.insert(slice.end(), w.begin() + r * cols + s.col0,
                     w.begin() + r * cols + s.col0 + s.cols);
      }
      EXPECT_EQ(got, slice) << "shard at (" << s.row0 << ", " << s.col0 << ")";
    }

    const double lo = from_bits(d, to_bits(d, scale / 64)), hi = from_bits(d, to_bits(d, scale));
    std::size_t zeros = 0, out_of_range = 0, negative = 0;
    for (std::uint16_t bits : w) {
      const double v = from_bits(d, bits);
      zeros += (bits & 0x7fffu) == 0;
      out_of_range += !(std::fabs(v) >= lo && std::fabs(v) <= hi);
      negative += v < 0;
    }
    EXPECT_EQ(zeros, 0u);
    EXPECT_EQ(out_of_range, 0u);
    EXPECT_GT(negative, n / 3);
    EXPECT_LT(negative, 2 * n / 3);

    EXPECT_EQ(download(again.get(), n), w) << "same seed and weight id";
    const Bits by_id = download(other_id.get(), n), by_seed = download(other_seed.get(), n);
    std::size_t same_id = 0, same_seed = 0;
    for (std::size_t i = 0; i < n; ++i) {
      same_id += by_id[i] == w[i];
      same_seed += by_seed[i] == w[i];
    }
    EXPECT_LT(same_id, n / 20) << "another weight id must give other data";
    EXPECT_LT(same_seed, n / 20) << "another seed must give other data";
  }
  // Scales whose smallest magnitude would round to zero, and blocks beyond the weight.
  EXPECT_THROW(fill_weight(nullptr, 1, 1, 0, 0, 1, 1, 1, 0.0f, ActDtype::BF16, nullptr),
               InputError);
  EXPECT_THROW(fill_weight(nullptr, 1, 1, 0, 0, 1, 1, 1, 1e-30f, ActDtype::F16, nullptr),
               InputError);
  EXPECT_THROW(fill_weight(nullptr, 1, 8, 0, 4, 10, 1, 1, 0.02f, ActDtype::BF16, nullptr),
               InputError);
}

TEST(TransformerFill, OnesAndTokens) {
  DeviceGuard guard(kGpu);
  for (ActDtype d : kDtypes) {
    const std::int64_t n = 1001;
    DeviceBuffer ones(kGpu, n * 2);
    fill_ones(ones.get(), n, d, nullptr);
    EXPECT_EQ(download(ones.get(), n), Bits(n, to_bits(d, 1.0f))) << to_string(d);
  }

  const std::int64_t n = 4097;
  const int vocab = 32000;
  DeviceBuffer a(kGpu, n * 4), b(kGpu, n * 4), c(kGpu, n * 4);
  fill_tokens(a.as<std::int32_t>(), n, vocab, 9, nullptr);
  fill_tokens(b.as<std::int32_t>(), n, vocab, 9, nullptr);
  fill_tokens(c.as<std::int32_t>(), n, vocab, 10, nullptr);
  const auto ta = download<std::int32_t>(a.get(), n);
  EXPECT_EQ(download<std::int32_t>(b.get(), n), ta);
  EXPECT_NE(download<std::int32_t>(c.get(), n), ta);
  std::set<std::int32_t> distinct;
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_GE(ta[i], 0);
    ASSERT_LT(ta[i], vocab);
    EXPECT_EQ(ta[i], token_value(9, i, vocab));
    distinct.insert(ta[i]);
  }
  EXPECT_GT(distinct.size(), static_cast<std::size_t>(n / 2));
  EXPECT_THROW(fill_tokens(nullptr, 1, 0, 1, nullptr), InputError);
}
