// The cuBLASLt wrapper and its check: the fp64 reference check against a host computation (and
// that it catches a single wrong entry), the seeded fills, every data type's GEMM through the
// heuristic's top candidates against the reference, and `gpubench matmul` end to end.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "../../src/modules/matmul/matmul.hpp"
#include "gemm_check.cuh"
#include "gpubench/core/context.hpp"
#include "gpubench/core/cuda.hpp"
#include "gpubench/core/gemm.hpp"
#include "gpubench/core/module.hpp"
#include "gpubench/core/system.hpp"

namespace gpubench {
ModulePtr make_matmul_module();
}

using namespace gpubench;

namespace {

constexpr int kGpu = 0;

const System& discovered() {
  static const System system = System::discover(false);
  return system;
}

int cc() {
  int major = 0, minor = 0;
  GPB_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, kGpu));
  GPB_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, kGpu));
  return major * 10 + minor;
}

GemmCheckTally run_check(const GemmCheckArgs& args) {
  DeviceBuffer tally(kGpu, sizeof(GemmCheckTally));
  GemmCheckTally zero{};
  zero.first_wrong = -1;
  GPB_CUDA_CHECK(cudaMemcpy(tally.get(), &zero, sizeof(zero), cudaMemcpyHostToDevice));
  check_gemm(args, tally.as<GemmCheckTally>(), nullptr);
  GPB_CUDA_CHECK(cudaDeviceSynchronize());
  GemmCheckTally got{};
  GPB_CUDA_CHECK(cudaMemcpy(&got, tally.get(), sizeof(got), cudaMemcpyDeviceToHost));
  return got;
}

float ratio_of(unsigned bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

}  // namespace

// fp64 inputs, D computed on the host in every layout: the check passes, and one entry off by
// a little more than its tolerance is found (index and count).
TEST(GemmCheck, MatchesHostReferenceAndFindsOneWrongEntry) {
  DeviceGuard guard(kGpu);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const GemmShape s{37, 29, 53, ta, tb};
      std::vector<double> a(s.m * s.k), b(s.k * s.n), d(s.m * s.n);
      DeviceBuffer da(kGpu, a.size() * 8), db(kGpu, b.size() * 8), dd(kGpu, d.size() * 8);
      fill_gemm_operand(da.get(), GemmElement::F64, a.size(), 11, nullptr);
      fill_gemm_operand(db.get(), GemmElement::F64, b.size(), 12, nullptr);
      GPB_CUDA_CHECK(cudaDeviceSynchronize());
      GPB_CUDA_CHECK(cudaMemcpy(a.data(), da.get(), a.size() * 8, cudaMemcpyDeviceToHost));
      GPB_CUDA_CHECK(cudaMemcpy(b.data(), db.get(), b.size() * 8, cudaMemcpyDeviceToHost));
      for (std::int64_t i = 0; i < s.m; ++i)
        for (std::int64_t j = 0; j < s.n; ++j) {
          double sum = 0;
          for (std::int64_t k = 0; k < s.k; ++k) {
            const double av = ta ? a[k + i * s.k] : a[i + k * s.m];
            const double bv = tb ? b[j + k * s.n] : b[k + j * s.k];
            sum += av * bv;
          }
          d[i + j * s.m] = sum;
        }
      GPB_CUDA_CHECK(cudaMemcpy(dd.get(), d.data(), d.size() * 8, cudaMemcpyHostToDevice));
      GemmCheckArgs args;
      args.a_type = args.b_type = args.d_type = GemmElement::F64;
      args.shape = s;
      args.tolerance = gemm_tolerance(GemmDtype::Fp64);
      args.a = da.get();
      args.b = db.get();
      args.d = dd.get();
      args.all = true;
      args.entries = s.m * s.n;
      GemmCheckTally t = run_check(args);
      EXPECT_EQ(t.checked, args.entries) << s.layout();
      EXPECT_EQ(t.wrong, 0u) << s.layout();
      EXPECT_LT(ratio_of(t.max_error_ratio_bits), 1.0f);

      const std::int64_t bad = 5 + 7 * s.m;
      d[bad] += 1e-9 * std::fabs(d[bad]) + 1e-9;
      GPB_CUDA_CHECK(cudaMemcpy(dd.get(), d.data(), d.size() * 8, cudaMemcpyHostToDevice));
      t = run_check(args);
      EXPECT_EQ(t.wrong, 1u) << s.layout();
      EXPECT_EQ(t.first_wrong, bad);
      // Sampled mode checks the requested count (corners included).
      args.all = false;
      args.entries = 100;
      EXPECT_EQ(run_check(args).checked, 100u);
    }
}

// Every element type: no zero, the same seed gives the same data, another seed other data.
TEST(GemmCheck, FillsAreNonZeroAndSeeded) {
  DeviceGuard guard(kGpu);
  for (GemmElement e : {GemmElement::F64, GemmElement::F32, GemmElement::F16, GemmElement::BF16,
                        GemmElement::E4M3, GemmElement::E5M2, GemmElement::I8, GemmElement::I32}) {
    const std::size_t n = 4099, bytes = n * element_bytes(e);
    DeviceBuffer x(kGpu, bytes), y(kGpu, bytes), z(kGpu, bytes);
    fill_gemm_operand(x.get(), e, n, 5, nullptr);
    fill_gemm_operand(y.get(), e, n, 5, nullptr);
    fill_gemm_operand(z.get(), e, n, 6, nullptr);
    GPB_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<unsigned char> hx(bytes), hy(bytes), hz(bytes);
    GPB_CUDA_CHECK(cudaMemcpy(hx.data(), x.get(), bytes, cudaMemcpyDeviceToHost));
    GPB_CUDA_CHECK(cudaMemcpy(hy.data(), y.get(), bytes, cudaMemcpyDeviceToHost));
    GPB_CUDA_CHECK(cudaMemcpy(hz.data(), z.get(), bytes, cudaMemcpyDeviceToHost));
    EXPECT_EQ(hx, hy);
    EXPECT_NE(hx, hz);
    // Zero (either sign) in every format is all bits clear but the sign bit; integers have no
    // sign-bit zero, but their only zero is all bits clear as well.
    const std::size_t eb = element_bytes(e);
    const bool is_float = e != GemmElement::I8 && e != GemmElement::I32;
    std::size_t zeros = 0;
    for (std::size_t i = 0; i < n; ++i) {
      std::uint64_t bits = 0;
      std::memcpy(&bits, &hx[i * eb], eb);  // little-endian: the sign is the top bit
      if (is_float) bits &= ~(1ull << (8 * eb - 1));
      zeros += bits == 0;
    }
    EXPECT_EQ(zeros, 0u) << static_cast<int>(e);
  }
}

// Every data type this GPU has, through the heuristic's first four algorithms, small (every
// entry) and larger (sampled) shapes, in TN and (where allowed) NN.
class GemmDtypes : public ::testing::TestWithParam<GemmDtype> {};

TEST_P(GemmDtypes, TopCandidatesMatchReference) {
  const GemmDtype t = GetParam();
  int major = cc() / 10, minor = cc() % 10;
  if (auto why = gemm_dtype_unsupported(t, major, minor)) GTEST_SKIP() << *why;
  DeviceGuard guard(kGpu);
  CublasLtHandle handle;
  Stream stream(kGpu);
  DeviceBuffer workspace(kGpu, gemm_workspace_bytes(major));
  const GemmTypeInfo& info = gemm_type_info(t);
  std::vector<GemmShape> shapes = {{256, 128, 512, true, false},
                                   {1024, 2048, 4096, true, false},
                                   {4096, 4096, 4096, true, false}};
  if (!info.tn_only) {
    shapes.push_back({192, 320, 448, false, false});
    shapes.push_back({1000, 1000, 1000, false, true});
  }
  for (const GemmShape& s : shapes) {
    const GemmOperandBytes bytes = gemm_operand_bytes(t, s);
    DeviceBuffer a(kGpu, bytes.a), b(kGpu, bytes.b), d(kGpu, bytes.d);
    fill_gemm_operand(a.get(), info.a, bytes.a / element_bytes(info.a), 21, stream.get());
    fill_gemm_operand(b.get(), info.b, bytes.b / element_bytes(info.b), 22, stream.get());
    const GemmPlan plan(handle, t, s, workspace.bytes());
    const auto candidates = plan.candidates(4);
    ASSERT_FALSE(candidates.empty());
    for (const auto& algo : candidates) {
      GPB_CUDA_CHECK(cudaMemsetAsync(d.get(), 0xFF, bytes.d, stream.get()));  // NaN / -1
      plan.run(algo, a.get(), b.get(), d.get(), workspace.get(), stream.get());
      stream.synchronize();
      GemmCheckArgs args;
      args.a_type = info.a;
      args.b_type = info.b;
      args.d_type = info.d;
      args.shape = s;
      args.tolerance = gemm_tolerance(t);
      args.a = a.get();
      args.b = b.get();
      args.d = d.get();
      const std::uint64_t entries = s.m * s.n;
      args.all = entries <= kGemmCheckAllLimit;
      args.entries = args.all ? entries : kGemmCheckSamples;
      const GemmCheckTally got = run_check(args);
      EXPECT_EQ(got.checked, args.entries);
      EXPECT_EQ(got.wrong, 0u) << to_string(t) << " " << s.to_string() << " " << s.layout() << " "
                               << algo.describe() << " worst " << ratio_of(got.max_error_ratio_bits)
                               << "x tol";
      // The same output checked as if B were transposed must fail: the check sees the layout.
      if (s.m == s.n && s.n == s.k && t != GemmDtype::Int8) {
        GemmCheckArgs wrong = args;
        wrong.shape.trans_b = !s.trans_b;
        EXPECT_GT(run_check(wrong).wrong, 0u) << to_string(t);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GemmDtypes, ::testing::ValuesIn(kAllGemmDtypes),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// `gpubench matmul` on GPU 0 with small shapes: every case verified and measured, headline keys.
TEST(MatmulModule, SmallSweepAndShapes) {
  ModulePtr m = make_matmul_module();
  CLI::App app("matmul");
  m->add_options(app);
  std::vector<std::string> args = {"--dtypes",     "bf16,fp32", "--sizes", "512,1024", "--shapes",
                                   "256x512x1024", "--algos",   "3",       "--layout", "best"};
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  app.parse(reversed);
  m->validate();
  CommonOptions common;
  common.quick = true;
  common.min_time = 0.005;
  Context ctx(discovered(), {kGpu}, common);
  Report r = m->run(ctx);
  ASSERT_EQ(r.results.size(), 6u);
  for (const auto& c : r.results) {
    EXPECT_EQ(c.status, "ok") << c.group << " " << c.name << ": " << c.note;
    const Metric* tf = c.find_metric("tflops");
    ASSERT_NE(tf, nullptr);
    EXPECT_GT(tf->value, 0.1);
    EXPECT_GT(c.params.value("checked_entries", 0ull), 0ull);
    // --layout best: up to 3 TN candidates + 3 for each other layout were timed.
    EXPECT_GT(c.params.value("candidates_timed", 0), 3) << c.name;
  }
  const Metric* best = r.find_headline("bf16_best_tflops");
  ASSERT_NE(best, nullptr);
  EXPECT_GT(best->value, 1.0);
  const Metric* shape = r.find_headline("bf16_best_shape");
  ASSERT_NE(shape, nullptr);
  EXPECT_FALSE(shape->text.empty());
  ASSERT_EQ(r.sweeps.size(), 1u);
  EXPECT_EQ(r.sweeps[0].series.size(), 2u);
}

// A tiny MAMF search (8 shapes; the refinement's neighbours are unit-tested) and a 1 s hold.
TEST(MatmulModule, MamfAndSustained) {
  ModulePtr m = make_matmul_module();
  CLI::App app("matmul");
  m->add_options(app);
  std::vector<std::string> args = {"--mamf", "--mamf-sizes", "1024,2048", "--mamf-refine",
                                   "false",  "--sustained",  "1"};
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  app.parse(reversed);
  m->validate();
  CommonOptions common;
  common.quick = true;
  Context ctx(discovered(), {kGpu}, common);
  Report r = m->run(ctx);
  const Metric* median = r.find_headline("mamf_bf16_tflops");
  const Metric* fastest = r.find_headline("mamf_bf16_tflops_fastest_iteration");
  ASSERT_NE(median, nullptr);
  ASSERT_NE(fastest, nullptr);
  EXPECT_GE(fastest->value, median->value);  // the fastest iteration is at least the median
  EXPECT_NE(r.find_headline("mamf_bf16_shape"), nullptr);
  const Metric* sus = r.find_headline("sustained_bf16_tflops");
  ASSERT_NE(sus, nullptr);
  EXPECT_GT(sus->value, 1.0);
  ASSERT_TRUE(r.extra.contains("mamf"));
  EXPECT_EQ(r.extra["mamf"]["bf16"]["shapes_tried"].get<int>(), 8);
  EXPECT_EQ(r.extra["mamf"]["bf16"]["finalists"].get<int>(), matmul::kMamfFinalists);
}
