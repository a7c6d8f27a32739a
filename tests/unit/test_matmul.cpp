// `gpubench matmul` host logic and the GEMM wrapper's rules: data type names and support, shape,
// layout and grid parsing, defaults per mode, alignment/layout errors, rotation sets, repeats,
// the MAMF grid and its refinement, the tolerance table, the split-K reduction schemes allowed,
// the verification order and rejection notes, and text-valued headline keys.
#include <gtest/gtest.h>

#include <limits>
#include <set>
#include <string>
#include <vector>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/gemm.hpp"
#include "gpubench/core/result.hpp"
#include "gpubench/modules/matmul/matmul.hpp"
#include "input_error.hpp"

using namespace gpubench;
using namespace gpubench::matmul;

namespace {

std::string error_of(const Options& o, bool quick = false) {
  return gpubench::testing::input_error_of([&] { (void)resolve_settings(o, quick); });
}

using gpubench::testing::contains;

}  // namespace

TEST(GemmTypes, NamesRoundTripAndUnknownIsRejected) {
  for (GemmDtype t : kAllGemmDtypes) EXPECT_EQ(parse_gemm_dtype(to_string(t)), t);
  EXPECT_EQ(parse_gemm_dtype("fp8"), GemmDtype::Fp8E4M3);
  EXPECT_EQ(parse_gemm_dtype("bfloat16"), GemmDtype::Bf16);  // the one vocabulary's aliases
  EXPECT_EQ(parse_gemm_dtype("fp8e4m3"), GemmDtype::Fp8E4M3);
  EXPECT_EQ(parse_gemm_dtype("double"), GemmDtype::Fp64);
  try {
    parse_gemm_dtype("fp4");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_TRUE(contains(e.what(), "fp4"));
    EXPECT_TRUE(contains(e.what(), "bf16"));
  }
}

TEST(GemmTypes, SupportByComputeCapability) {
  EXPECT_FALSE(gemm_dtype_unsupported(GemmDtype::Fp8E4M3, 9, 0));
  EXPECT_FALSE(gemm_dtype_unsupported(GemmDtype::Fp8E4M3, 8, 9));
  const auto why = gemm_dtype_unsupported(GemmDtype::Fp8E5M2, 8, 0);
  ASSERT_TRUE(why);
  EXPECT_TRUE(contains(*why, "8.9"));
  EXPECT_TRUE(contains(*why, "8.0"));
  EXPECT_TRUE(gemm_dtype_unsupported(GemmDtype::Bf16, 7, 5));
  EXPECT_FALSE(gemm_dtype_unsupported(GemmDtype::Fp64, 6, 0));
  EXPECT_FALSE(gemm_dtype_unsupported(GemmDtype::Tf32, 8, 0));
}

TEST(GemmTypes, AccumulateAndOutputTypesAreDocumented) {
  EXPECT_STREQ(gemm_type_info(GemmDtype::Bf16).accumulate, "fp32");
  EXPECT_STREQ(gemm_type_info(GemmDtype::Fp8E4M3).output, "bf16");
  EXPECT_STREQ(gemm_type_info(GemmDtype::Int8).accumulate, "int32");
  EXPECT_STREQ(gemm_type_info(GemmDtype::Fp64).accumulate, "fp64");
  EXPECT_EQ(gemm_type_info(GemmDtype::Fp8E5M2).b, GemmElement::E4M3);  // no e5m2 x e5m2
}

TEST(GemmShapes, BytesFlopsAndLayoutRules) {
  const GemmShape s{8192, 4096, 1024};
  EXPECT_EQ(s.layout(), "TN");
  EXPECT_EQ(s.to_string(), "8192x4096x1024");
  EXPECT_DOUBLE_EQ(gemm_flops(s), 2.0 * 8192 * 4096 * 1024);
  const auto b = gemm_operand_bytes(GemmDtype::Bf16, s);
  EXPECT_EQ(b.a, 8192ull * 1024 * 2);
  EXPECT_EQ(b.b, 1024ull * 4096 * 2);
  EXPECT_EQ(b.d, 8192ull * 4096 * 2);
  const auto f8 = gemm_operand_bytes(GemmDtype::Fp8E4M3, s);
  EXPECT_EQ(f8.a, 8192ull * 1024);
  EXPECT_EQ(f8.d, 8192ull * 4096 * 2);  // bf16 out
  EXPECT_EQ(gemm_operand_bytes(GemmDtype::Int8, s).d, 8192ull * 4096 * 4);

  EXPECT_FALSE(gemm_shape_problem(GemmDtype::Bf16, {100, 3, 7, false, true}));
  EXPECT_TRUE(gemm_shape_problem(GemmDtype::Bf16, {0, 3, 7}));
  const auto align = gemm_shape_problem(GemmDtype::Fp8E4M3, {4096, 4096, 4100});
  ASSERT_TRUE(align);
  EXPECT_TRUE(contains(*align, "multiples of 16"));
  const auto layout = gemm_shape_problem(GemmDtype::Int8, {64, 64, 64, false, false});
  ASSERT_TRUE(layout);
  EXPECT_TRUE(contains(*layout, "TN"));
  EXPECT_TRUE(gemm_shape_problem(GemmDtype::Int8, {64, 64, 66}));
  EXPECT_FALSE(gemm_shape_problem(GemmDtype::Int8, {64, 64, 68}));
  // A's leading dimension (the engine's padded weight rows): at least A's stored rows (K in TN,
  // M in NN), on the dtype's alignment.
  EXPECT_FALSE(gemm_shape_problem(GemmDtype::Bf16, {4096, 16, 4096, true, false, 4224}));
  const auto short_lda = gemm_shape_problem(GemmDtype::Bf16, {4096, 16, 4096, true, false, 4000});
  ASSERT_TRUE(short_lda);
  EXPECT_TRUE(contains(*short_lda, "lda 4000"));
  EXPECT_TRUE(gemm_shape_problem(GemmDtype::Bf16, {4096, 16, 64, false, false, 4000}));
  EXPECT_FALSE(gemm_shape_problem(GemmDtype::Bf16, {4096, 16, 64, false, false, 4104}));
  EXPECT_TRUE(gemm_shape_problem(GemmDtype::Fp8E4M3, {4096, 16, 4096, true, false, 4104}));
  EXPECT_FALSE(gemm_shape_problem(GemmDtype::Fp8E4M3, {4096, 16, 4096, true, false, 4112}));
}

TEST(GemmShapes, ToleranceTableIsOrdered) {
  // Lower precision, looser tolerance; int8 exact.
  EXPECT_LT(gemm_tolerance(GemmDtype::Fp64).eps_out, gemm_tolerance(GemmDtype::Fp32).eps_out);
  EXPECT_LT(gemm_tolerance(GemmDtype::Fp16).eps_out, gemm_tolerance(GemmDtype::Bf16).eps_out);
  EXPECT_GT(gemm_tolerance(GemmDtype::Tf32).eps_acc, gemm_tolerance(GemmDtype::Fp32).eps_acc);
  EXPECT_EQ(gemm_tolerance(GemmDtype::Int8).eps_out, 0.0);
  EXPECT_EQ(gemm_tolerance(GemmDtype::Int8).eps_acc, 0.0);
  EXPECT_EQ(gemm_workspace_bytes(9), 32u << 20);
  EXPECT_EQ(gemm_workspace_bytes(8), 4u << 20);
}

// Split-K partials of a D narrower than the accumulate type are summed in the accumulate type
// (no INPLACE or OUTPUT_TYPE scheme, which round them to D's type); a D in the accumulate type
// may use any scheme, and GemmReduction::Any lets every scheme in.
TEST(GemmShapes, ReductionSchemesFollowTheOutputType) {
  const std::uint32_t accumulate_only =
      CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  for (GemmDtype t : {GemmDtype::Fp16, GemmDtype::Bf16, GemmDtype::Fp8E4M3, GemmDtype::Fp8E5M2}) {
    EXPECT_TRUE(gemm_output_narrower(t)) << to_string(t);
    EXPECT_EQ(gemm_reduction_mask(t, GemmReduction::AccumulateType), accumulate_only)
        << to_string(t);
    EXPECT_EQ(gemm_reduction_mask(t, GemmReduction::Any),
              static_cast<std::uint32_t>(CUBLASLT_REDUCTION_SCHEME_MASK));
  }
  for (GemmDtype t : {GemmDtype::Fp64, GemmDtype::Fp32, GemmDtype::Tf32, GemmDtype::Int8}) {
    EXPECT_FALSE(gemm_output_narrower(t)) << to_string(t);
    EXPECT_EQ(gemm_reduction_mask(t, GemmReduction::AccumulateType),
              static_cast<std::uint32_t>(CUBLASLT_REDUCTION_SCHEME_MASK))
        << to_string(t);
  }
  EXPECT_STREQ(reduction_scheme_name(CUBLASLT_REDUCTION_SCHEME_NONE), "none");
  EXPECT_STREQ(reduction_scheme_name(CUBLASLT_REDUCTION_SCHEME_INPLACE), "inplace");
  EXPECT_STREQ(reduction_scheme_name(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE), "compute");
  EXPECT_STREQ(reduction_scheme_name(CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE), "output");
  EXPECT_STREQ(reduction_scheme_name(3), "?");
}

// Candidates are verified fastest first (ties in heuristic order); one that did not run is never
// verified.
TEST(MatmulVerification, OrderIsFastestFirstAmongThoseThatRan) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(verification_order({3e-3, inf, 1e-3, 2e-3, 1e-3}),
            (std::vector<std::size_t>{2, 4, 3, 0}));
  EXPECT_TRUE(verification_order({inf, inf}).empty());
  EXPECT_TRUE(verification_order({}).empty());
  EXPECT_EQ(verification_order({5e-3}), std::vector<std::size_t>{0});
}

// The note names each rejected candidate and why: the faster ones a verified figure passed over,
// or all of them when none verified; past kNotedRejections only a count.
TEST(MatmulVerification, RejectionNoteNamesTheCandidates) {
  const std::string why = check_failure_text(497, 16384, 7.4321, 3, 9);
  EXPECT_EQ(why,
            "497 of 16384 checked entries outside the tolerance, worst 7.43x it, first at row 3 "
            "column 9");
  EXPECT_EQ(rejection_note({}, true), "");
  EXPECT_EQ(rejection_note({}, false), "");
  const RejectedAlgo split{"TN id 21 tile 18 stages 14 splitK 2 reduction inplace swizzle 0", why};
  const std::string passed_over = rejection_note({split}, true);
  EXPECT_EQ(passed_over.rfind("faster candidates failed verification", 0), 0u) << passed_over;
  EXPECT_TRUE(contains(passed_over, "splitK 2 reduction inplace"));
  EXPECT_TRUE(contains(passed_over, "(" + why + ")"));
  std::vector<RejectedAlgo> many(kNotedRejections + 2, split);
  many[0].config = "NN id 1";
  const std::string none = rejection_note(many, false);
  EXPECT_EQ(none.rfind("verification failed for every candidate", 0), 0u) << none;
  EXPECT_TRUE(contains(none, "NN id 1 ("));
  EXPECT_TRUE(contains(none, "; and 2 more"));
}

// A verified case lists its passed-over candidates in params and the note; a case with no
// verified candidate has no figure at all.
TEST(MatmulVerification, RowsCarryRejectionsAndNoFigureWithoutAVerifiedOne) {
  CaseOutcome ok;
  ok.gpu = 0;
  ok.spec = {CaseKind::Shape, GemmDtype::Bf16, {8191, 8193, 4097}, ""};
  ok.ok = true;
  ok.tflops = 600;
  ok.median_s = 1e-3;
  ok.rejected = {{"TN id 21", "497 of 16384 checked entries outside the tolerance"}};
  ok.note = rejection_note(ok.rejected, true);
  const CaseResult r = to_case_result(ok, 989.0, false);
  EXPECT_EQ(r.status, "ok");
  EXPECT_EQ(r.note, ok.note);
  ASSERT_TRUE(r.params.contains("rejected_candidates"));
  EXPECT_EQ(r.params["rejected_candidates"].size(), 1u);
  EXPECT_EQ(r.params["rejected_candidates"][0]["config"], "TN id 21");
  ASSERT_NE(r.find_metric("tflops"), nullptr);

  CaseOutcome failed = ok;
  failed.ok = false;
  failed.status = "failed";
  failed.note = rejection_note(failed.rejected, false);
  const CaseResult f = to_case_result(failed, 989.0, false);
  EXPECT_EQ(f.status, "failed");
  EXPECT_EQ(f.find_metric("tflops"), nullptr);
  EXPECT_EQ(f.find_metric("mfu"), nullptr);
  EXPECT_TRUE(contains(f.note, "TN id 21"));
  ASSERT_TRUE(f.params.contains("rejected_candidates"));
  EXPECT_FALSE(f.params.contains("algo"));
}

TEST(MatmulSettings, ParsesShapesLayoutsAndGrids) {
  const GemmShape s = parse_shape("4096x1024x512");
  EXPECT_EQ(s.m, 4096);
  EXPECT_EQ(s.n, 1024);
  EXPECT_EQ(s.k, 512);
  const GemmShape cube = parse_shape(" 2048 ");
  EXPECT_EQ(cube.m, 2048);
  EXPECT_EQ(cube.k, 2048);
  EXPECT_EQ(parse_shapes("1x2x3, 4X5X6").size(), 2u);
  for (const char* bad : {"", "0x1x1", "1x2", "1x2x3x4", "axbxc", "-4x4x4", "4x4x", "1.5x2x2",
                          "4096x4096x99999999999"})
    EXPECT_THROW(parse_shape(bad), InputError) << bad;
  EXPECT_EQ(parse_layout("NT"), std::make_pair(false, true));
  EXPECT_EQ(parse_layout("tn"), std::make_pair(true, false));
  EXPECT_THROW(parse_layout("tx"), InputError);
  EXPECT_EQ(parse_dims("1024:4096:1024", "--sizes"),
            (std::vector<std::int64_t>{1024, 2048, 3072, 4096}));
  EXPECT_EQ(parse_dims("4096,1024,4096", "--sizes"), (std::vector<std::int64_t>{1024, 4096}));
  EXPECT_THROW(parse_dims("4096:1024:1024", "--sizes"), InputError);
  EXPECT_THROW(parse_dims("1:100000:1", "--sizes"), InputError);
  EXPECT_THROW(parse_dims("1:2", "--sizes"), InputError);
  try {
    parse_dims("64,zero", "--sizes");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--sizes", 0), 0u) << e.what();
  }
}

TEST(MatmulSettings, DefaultsPerMode) {
  const Settings full = resolve_settings(Options{}, false);
  EXPECT_EQ(full.dtypes.size(), 8u);
  EXPECT_EQ(full.dtypes.front(), GemmDtype::Bf16);
  EXPECT_EQ(full.sizes, (std::vector<std::int64_t>{1024, 2048, 4096, 8192, 16384}));
  EXPECT_EQ(full.cases().size(), 40u);
  const Settings quick = resolve_settings(Options{}, true);
  EXPECT_EQ(quick.sizes, (std::vector<std::int64_t>{4096, 8192}));
  EXPECT_EQ(quick.dtypes.size(), 3u);
  EXPECT_LE(quick.algos, 4);
  Options mamf;
  mamf.mamf = true;
  const Settings m = resolve_settings(mamf, false);
  EXPECT_TRUE(m.cases().empty());  // the search only
  EXPECT_EQ(m.dtypes, std::vector<GemmDtype>{GemmDtype::Bf16});
  EXPECT_EQ(m.mamf_sizes.size(), 6u);
  // A non-TN default layout leaves out the TN-only types instead of failing.
  Options nn;
  nn.layout = "nn";
  for (GemmDtype t : resolve_settings(nn, false).dtypes)
    EXPECT_FALSE(gemm_type_info(t).tn_only) << to_string(t);
  // best: every layout per case, except the TN-only types and quick mode.
  const Settings best = resolve_settings(Options{}, false);
  EXPECT_TRUE(best.any_layout);
  EXPECT_EQ(best.to_json()["layout"], "best");
  for (const auto& c : best.cases())
    EXPECT_EQ(c.any_layout, !gemm_type_info(c.dtype).tn_only) << to_string(c.dtype);
  EXPECT_FALSE(resolve_settings(Options{}, true).any_layout);
  Options explicit_best;
  explicit_best.layout = "best";
  EXPECT_TRUE(resolve_settings(explicit_best, true).any_layout);
  Options tn;
  tn.layout = "TN";
  EXPECT_FALSE(resolve_settings(tn, false).any_layout);
  EXPECT_EQ(resolve_settings(tn, false).to_json()["layout"], "TN");
}

TEST(MatmulSettings, BadInputNamesTheOption) {
  Options o;
  o.dtypes = "bf16,fp4";
  EXPECT_TRUE(contains(error_of(o), "--dtypes"));
  o = Options{};
  o.shapes = "4096x4096";
  EXPECT_TRUE(contains(error_of(o), "--shapes"));
  o = Options{};
  o.sizes = "0";
  EXPECT_TRUE(contains(error_of(o), "--sizes"));
  o = Options{};
  o.dtypes = "fp8_e4m3";
  o.shapes = "4096x4096x4100";
  EXPECT_TRUE(contains(error_of(o), "multiples of 16"));
  o = Options{};
  o.dtypes = "int8";
  o.layout = "nn";
  EXPECT_TRUE(contains(error_of(o), "TN"));
  o = Options{};
  o.algos = 0;
  EXPECT_TRUE(contains(error_of(o), "--algos"));
  o = Options{};
  o.sustained = -1;
  EXPECT_TRUE(contains(error_of(o), "--sustained"));
  o = Options{};
  o.model = "llama-2-7b";
  o.tokens = 0;
  EXPECT_TRUE(contains(error_of(o), "--tokens"));
  o = Options{};
  o.model = "no-such-model";
  EXPECT_TRUE(contains(error_of(o), "no-such-model"));
  o = Options{};
  o.model = "llama-2-7b";
  o.model_config = "x.json";
  EXPECT_TRUE(contains(error_of(o), "--model"));
  o = Options{};
  o.mamf = true;
  o.mamf_sizes = "1:17:1";
  EXPECT_TRUE(contains(error_of(o), "--mamf-sizes"));
}

TEST(MatmulSettings, ModelLayerGemms) {
  Options o;
  o.model = "llama-2-7b";
  o.tokens = 2048;
  o.dtypes = "bf16";
  const Settings s = resolve_settings(o, false);
  EXPECT_TRUE(s.sizes.empty());
  const auto cases = s.cases();
  ASSERT_EQ(cases.size(), 4u);  // qkv, attn_out, mlp_gate_up, mlp_down
  EXPECT_EQ(cases[0].label, "qkv");
  EXPECT_EQ(cases[0].shape.m, 2048);
  EXPECT_EQ(cases[0].shape.n, 3 * 4096);
  EXPECT_EQ(cases[0].shape.k, 4096);
  EXPECT_EQ(cases[3].shape.k, 11008);
  EXPECT_EQ(s.to_json()["model"], "llama-2-7b");
}

TEST(MatmulFormulas, RotationSetsAndRepeats) {
  const std::uint64_t l2 = 50ull << 20;
  EXPECT_EQ(rotation_sets(6ull << 20, l2, 1ull << 40, false), 26);  // 150 MiB / 6 MiB + 1
  EXPECT_EQ(rotation_sets(6ull << 20, l2, 1ull << 40, true), 1);
  EXPECT_EQ(rotation_sets(400ull << 20, l2, 1ull << 40, false), 1);
  EXPECT_EQ(rotation_sets(6ull << 20, l2, 30ull << 20, false), 5);  // the budget caps it
  EXPECT_EQ(rotation_sets(6ull << 20, l2, 1ull << 20, false), 1);
  EXPECT_GT(rotation_sets(6ull << 20, l2, 1ull << 40, false) * (6ull << 20), 3 * l2);
  EXPECT_EQ(repeats_for(1e-3), 1);
  EXPECT_EQ(repeats_for(5e-6), 5);
  EXPECT_EQ(repeats_for(1e-7), kMaxRepeats);
  EXPECT_EQ(repeats_for(0), 1);
}

TEST(MatmulFormulas, BurstIsAFixedShortWindow) {
  MeasureOptions m;
  m.min_time_s = 0.1;
  const MeasureOptions b = burst_options(m);
  EXPECT_EQ(b.fixed_iters, kBurstIters);
  EXPECT_EQ(b.warmup, kBurstWarmup);
  EXPECT_EQ(b.l2, m.l2);
  Options o;
  o.burst = true;
  EXPECT_TRUE(resolve_settings(o, false).to_json()["burst"].get<bool>());
}

TEST(MatmulFormulas, MamfGridAndNeighbours) {
  const auto grid = mamf_grid({2048, 4096, 8192}, true, false);
  EXPECT_EQ(grid.size(), 27u);
  std::set<std::string> names;
  for (const auto& s : grid) names.insert(s.to_string());
  EXPECT_EQ(names.size(), 27u);
  const auto nb = mamf_neighbours({4096, 4096, 4096, true, false}, 512, grid, 64);
  EXPECT_EQ(nb.size(), 26u);  // 27 around it, minus the centre already done
  for (const auto& s : nb) {
    EXPECT_TRUE(s.m == 3584 || s.m == 4096 || s.m == 4608);
    EXPECT_TRUE(s.trans_a);
  }
  // Aligned only; never a non-positive dimension.
  const auto small = mamf_neighbours({64, 64, 64}, 64, {}, 64);
  for (const auto& s : small) EXPECT_GT(s.m, 0);
  EXPECT_EQ(small.size(), 8u);
  EXPECT_TRUE(mamf_neighbours({4096, 4096, 4096}, 100, {}, 64).size() == 1u);  // only the centre
}

TEST(MatmulFormulas, MamfFinalistsAreTheBestDistinctShapes) {
  const GemmShape a{2048, 2048, 8192}, b{4096, 4096, 4096}, c{8192, 8192, 8192};
  const auto f = mamf_finalists({{700, a}, {720, b}, {690, c}, {715, a}}, 2);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].to_string(), b.to_string());
  EXPECT_EQ(f[1].to_string(), a.to_string());  // 715 and 700: one entry
  EXPECT_EQ(mamf_finalists({{1, a}}, 5).size(), 1u);
  EXPECT_TRUE(mamf_finalists({}, 5).empty());
}

TEST(ReportText, TextHeadlineRoundTrips) {
  Report r;
  r.module = "matmul";
  r.set_headline("bf16_best_tflops", 812.5, "TFLOP/s");
  r.set_headline_text("bf16_best_shape", "8192x8192x8192", "MxNxK");
  const ojson j = to_json(r);
  EXPECT_EQ(j["headline"]["bf16_best_shape"]["value"], "8192x8192x8192");
  EXPECT_TRUE(j["headline"]["bf16_best_tflops"]["value"].is_number());
  const Report back = report_from_json(j);
  ASSERT_NE(back.find_headline("bf16_best_shape"), nullptr);
  EXPECT_EQ(back.find_headline("bf16_best_shape")->text, "8192x8192x8192");
  EXPECT_TRUE(back.find_headline("bf16_best_tflops")->text.empty());
}
