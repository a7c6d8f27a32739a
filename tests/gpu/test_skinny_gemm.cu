// The skinny GEMM (Y = X W^T + bias for 1..8 rows) against a host fp64 product of the same
// rounded inputs: every row count 1..8 (rows 1..2 take the CUDA-core path, 3..8 the tensor-core
// path), bf16 and fp16, odd `out` (a partial last tile or W row pair), `in` of 8 and not a
// multiple of either path's step, with and without bias, more outputs than the persistent grid has
// warps; a run captured in a CUDA graph; the argument checks; the fused norm prologues and
// epilogues (SkinnyFusion) against the host with the roundings of the separate kernels. A last test
// prints the weight-streaming bandwidth of a 7B model's decode GEMMs (no bound asserted: it is for
// the record).
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/model/transformer.hpp"
#include "graph_timing.hpp"
#include "half_bits.hpp"
#include "gpubench/kernels/skinny_gemm.cuh"

using namespace gpubench;

namespace {

using gpubench::testing::from_bits;
using gpubench::testing::to_bits;

constexpr int kGpu = 0;

// n values uniform in [-scale, scale], rounded to the storage type: bits and their values.
struct HostArray {
  std::vector<std::uint16_t> bits;
  std::vector<double> values;
  HostArray(SkinnyDtype d, std::size_t n, float scale, std::mt19937_64& rng) : bits(n), values(n) {
    std::uniform_real_distribution<float> u(-scale, scale);
    for (std::size_t i = 0; i < n; ++i) {
      bits[i] = to_bits(d, u(rng));
      values[i] = from_bits(d, bits[i]);
    }
  }
};

DeviceBuffer upload(const std::vector<std::uint16_t>& h) {
  DeviceBuffer b(kGpu, std::max<std::size_t>(h.size() * 2, 16));
  GPB_CUDA_CHECK(cudaMemcpy(b.get(), h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  return b;
}

// W [out, in] with its rows `ldw` elements apart (0: packed), NaN bits in the pad after each
// row: a kernel that reads the pad, or steps by `in`, gives NaN or wrong sums.
DeviceBuffer upload_w(const std::vector<std::uint16_t>& w, std::int64_t out, std::int64_t in,
                      std::int64_t ldw) {
  if (ldw == 0 || ldw == in) return upload(w);
  std::vector<std::uint16_t> pitched(static_cast<std::size_t>(out * ldw), 0xFFFF);
  for (std::int64_t o = 0; o < out; ++o)
    std::copy_n(w.begin() + o * in, in, pitched.begin() + o * ldw);
  return upload(pitched);
}

struct Problem {
  SkinnyDtype dtype;
  int rows;
  std::int64_t out, in;
  bool bias;
  std::int64_t ldw = 0;  // W's row pitch (0: packed)
};

// Runs one problem on fresh data and returns the outputs outside the tolerance: output rounding
// (2^-7 relative for bf16, 2^-9 for fp16, twice the half-ulp) plus fp32 accumulation (1e-4 of
// sum |x w|), so a misplaced or missing product fails while rounding passes.
int wrong_outputs(const Problem& p, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const HostArray x(p.dtype, static_cast<std::size_t>(p.rows) * p.in, 1.0f, rng);
  const HostArray w(p.dtype, static_cast<std::size_t>(p.out) * p.in,
                    1.0f / std::sqrt(static_cast<float>(p.in)), rng);
  const HostArray bias(p.dtype, static_cast<std::size_t>(p.out), 0.5f, rng);
  DeviceBuffer dx = upload(x.bits), dw = upload_w(w.bits, p.out, p.in, p.ldw),
               db = upload(bias.bits);
  const std::size_t y_elems = static_cast<std::size_t>(p.rows) * p.out;
  DeviceBuffer dy(kGpu, y_elems * 2);
  GPB_CUDA_CHECK(cudaMemset(dy.get(), 0xFF, y_elems * 2));  // NaN where nothing is written
  skinny_gemm(dx.get(), dw.get(), p.bias ? db.get() : nullptr, dy.get(), p.rows, p.out, p.in,
              p.dtype, nullptr, {}, p.ldw);
  GPB_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<std::uint16_t> y(y_elems);
  GPB_CUDA_CHECK(cudaMemcpy(y.data(), dy.get(), y_elems * 2, cudaMemcpyDeviceToHost));
  const double rel = p.dtype == SkinnyDtype::BF16 ? 0x1.0p-7 : 0x1.0p-9;
  int wrong = 0;
  for (int r = 0; r < p.rows; ++r)
    for (std::int64_t o = 0; o < p.out; ++o) {
      const double* xr = &x.values[static_cast<std::size_t>(r) * p.in];
      const double* wr = &w.values[static_cast<std::size_t>(o) * p.in];
      double ref = p.bias ? bias.values[o] : 0.0, mag = 0;
      for (std::int64_t k = 0; k < p.in; ++k) {
        ref += xr[k] * wr[k];
        mag += std::fabs(xr[k] * wr[k]);
      }
      const double got = from_bits(p.dtype, y[static_cast<std::size_t>(r) * p.out + o]);
      const bool ok = std::fabs(got - ref) <= rel * std::fabs(ref) + 1e-4 * mag + 1e-6;
      if (!ok && wrong < 5)
        ADD_FAILURE() << "row " << r << " out " << o << ": got " << got << " want " << ref;
      wrong += !ok;
    }
  return wrong;
}

// Fusions (one row): the RMSNorm prologue and an epilogue, against the host: the norm and the
// product in fp64 (the kernel does not round the normalized X), the epilogue with the storage
// type's roundings. The tolerance is wrong_outputs' for the product and its epilogue inputs,
// scaled by the epilogue's slope.
struct FusedProblem {
  SkinnyDtype dtype;
  int rows;
  std::int64_t out, in;
  bool bias;
  SkinnyPrologue prologue;
  SkinnyEpilogue epilogue;
  bool weights_ready;
  std::int64_t ldw = 0;  // W's row pitch (0: packed)
  bool wide = false;     // SkinnyFusion::wide_block
};

double silu_host(double v) {
  return v / (1.0 + std::exp(-v));
}

int wrong_fused(const FusedProblem& p, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::size_t xn = static_cast<std::size_t>(p.rows) * p.in;
  const HostArray x(p.dtype, xn, 1.0f, rng);
  const HostArray w(p.dtype, static_cast<std::size_t>(p.out) * p.in,
                    1.0f / std::sqrt(static_cast<float>(p.in)), rng);
  const HostArray bias(p.dtype, static_cast<std::size_t>(p.out), 0.5f, rng);
  HostArray nw(p.dtype, static_cast<std::size_t>(p.in), 0.5f, rng);
  for (std::size_t i = 0; i < nw.bits.size(); ++i) {  // weights in [0.5, 1.5]
    nw.bits[i] = to_bits(p.dtype, static_cast<float>(nw.values[i] + 1.0));
    nw.values[i] = from_bits(p.dtype, nw.bits[i]);
  }
  const bool swiglu = p.epilogue == SkinnyEpilogue::SwiGlu;
  const std::int64_t width = swiglu ? p.out / 2 : p.out;
  const std::size_t yn = static_cast<std::size_t>(p.rows) * width;
  const HostArray y0(p.dtype, yn, 2.0f, rng);  // the residual stream, for Residual

  // X as the product sees it.
  std::vector<double> h = x.values;
  if (p.prologue == SkinnyPrologue::RmsNorm)
    for (int r = 0; r < p.rows; ++r) {
      double* row = &h[static_cast<std::size_t>(r) * p.in];
      double squares = 0;
      for (std::int64_t k = 0; k < p.in; ++k) squares += row[k] * row[k];
      const double rstd = 1.0 / std::sqrt(squares / static_cast<double>(p.in) + 1e-5);
      for (std::int64_t k = 0; k < p.in; ++k) row[k] *= rstd * nw.values[k];
    }

  DeviceBuffer dx = upload(x.bits), dw = upload_w(w.bits, p.out, p.in, p.ldw),
               db = upload(bias.bits), dnw = upload(nw.bits), dy = upload(y0.bits);
  if (p.epilogue != SkinnyEpilogue::Residual)
    GPB_CUDA_CHECK(cudaMemset(dy.get(), 0xFF, yn * 2));  // NaN where nothing is written
  SkinnyFusion f;
  f.prologue = p.prologue;
  f.norm_weight = dnw.get();
  f.eps = 1e-5f;
  f.epilogue = p.epilogue;
  f.weights_ready = p.weights_ready;
  f.wide_block = p.wide;
  GPB_CUDA_CHECK(cudaDeviceSynchronize());
  Stream stream(kGpu);  // a real stream: programmatic dependent launch applies
  skinny_gemm(dx.get(), dw.get(), p.bias ? db.get() : nullptr, dy.get(), p.rows, p.out, p.in,
              p.dtype, stream.get(), f, p.ldw);
  stream.synchronize();
  std::vector<std::uint16_t> y(yn);
  GPB_CUDA_CHECK(cudaMemcpy(y.data(), dy.get(), yn * 2, cudaMemcpyDeviceToHost));

  const double rel = p.dtype == SkinnyDtype::BF16 ? 0x1.0p-7 : 0x1.0p-9;
  auto round_host = [&](double v) { return from_bits(p.dtype, to_bits(p.dtype, float(v))); };
  // Output o of row r before the epilogue, and the tolerance of its product.
  auto product = [&](int r, std::int64_t o, double* tol) {
    const double* hr = &h[static_cast<std::size_t>(r) * p.in];
    const double* wr = &w.values[static_cast<std::size_t>(o) * p.in];
    double ref = p.bias ? bias.values[o] : 0.0, mag = 0;
    for (std::int64_t k = 0; k < p.in; ++k) {
      ref += hr[k] * wr[k];
      mag += std::fabs(hr[k] * wr[k]);
    }
    *tol = rel * std::fabs(ref) + 1e-4 * mag + 1e-6;
    return ref;
  };
  int wrong = 0;
  for (int r = 0; r < p.rows; ++r)
    for (std::int64_t o = 0; o < width; ++o) {
      double tol = 0, want = 0;
      const double v = product(r, o, &tol);
      switch (p.epilogue) {
        case SkinnyEpilogue::None:
          want = v;
          break;
        case SkinnyEpilogue::Residual: {
          const double y_in = y0.values[static_cast<std::size_t>(r) * width + o];
          want = y_in + v;
          tol += rel * (std::fabs(y_in) + std::fabs(v));
          break;
        }
        case SkinnyEpilogue::Relu:
          want = std::max(v, 0.0);
          tol += rel * std::fabs(v);
          break;
        case SkinnyEpilogue::Gelu:
          want = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
          tol = 1.2 * tol + rel * std::fabs(v);
          break;
        case SkinnyEpilogue::GeluTanh:
          want = 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
          tol = 1.2 * tol + rel * std::fabs(v);
          break;
        case SkinnyEpilogue::SwiGlu: {
          double tol_up = 0;
          const double g = round_host(v), u = round_host(product(r, o + width, &tol_up));
          want = silu_host(g) * u;
          tol = 1.2 * (tol + rel * std::fabs(g)) * std::fabs(u) +
                (tol_up + rel * std::fabs(u)) * std::fabs(silu_host(g)) + rel * std::fabs(want);
          break;
        }
      }
      const double got = from_bits(p.dtype, y[static_cast<std::size_t>(r) * width + o]);
      const bool ok = std::fabs(got - want) <= tol + 1e-6;
      if (!ok && wrong < 5)
        ADD_FAILURE() << "row " << r << " out " << o << ": got " << got << " want " << want
                      << " (tolerance " << tol << ")";
      wrong += !ok;
    }
  return wrong;
}

const char* name_of(SkinnyPrologue p) {
  return p == SkinnyPrologue::None ? "none" : "rms";
}
const char* name_of(SkinnyEpilogue e) {
  switch (e) {
    case SkinnyEpilogue::None:
      return "none";
    case SkinnyEpilogue::Residual:
      return "residual";
    case SkinnyEpilogue::Relu:
      return "relu";
    case SkinnyEpilogue::Gelu:
      return "gelu";
    case SkinnyEpilogue::GeluTanh:
      return "gelu_tanh";
    case SkinnyEpilogue::SwiGlu:
      return "swiglu";
  }
  return "?";
}

}  // namespace

// Every prologue with every epilogue (none and none: the fused kernel with weights_ready only),
// bf16 and fp16, with and without bias and weights_ready; shapes with an `in` off the steps, a
// 7B model's width, more W rows (or gate/up pairs) than the grid has warps, and few long rows.
// Both kernels: the block-split one (the default) takes `in` up to 256 x 6 pieces of 8 (x's
// pieces a thread holds: 1, 2, 3, 4 and 6 here; up to 4 with the norm) and the warp-per-row one
// the rest (16392, and 11008 and 8200 with the norm). In the warp-per-row kernel the RMSNorm
// prologue without an epilogue takes the two-row kernel where `out` is even and the one-row
// kernel at 37 (64 x 16392 and 37 x 11008 with the norm); with 8002 rows the warps take several
// groups (x^2 summed in the first). Half the cases have W's rows padded (the engine's
// layout), NaN in the pads. A pass with SkinnyFusion::wide_block runs the block-split kernel on
// 512-thread blocks (x's pieces 1, 2 and 3 a thread here; 16392 falls back). The wide pass runs
// bf16 only (fp16 differs in the unpacking alone, which the default pass covers).
TEST(SkinnyGemm, FusionsMatchHostReference) {
  DeviceGuard guard(kGpu);
  struct Shape {
    std::int64_t out, in;
  };
  const Shape shapes[] = {{998, 264},  {37, 1032},   {4096, 4096}, {8002, 520},  {30, 11008},
                          {37, 11008}, {2500, 8200}, {300, 4104},  {1000, 6152}, {64, 16392}};
  const SkinnyPrologue prologues[] = {SkinnyPrologue::None, SkinnyPrologue::RmsNorm};
  const SkinnyEpilogue epilogues[] = {SkinnyEpilogue::None,     SkinnyEpilogue::Residual,
                                      SkinnyEpilogue::Relu,     SkinnyEpilogue::Gelu,
                                      SkinnyEpilogue::GeluTanh, SkinnyEpilogue::SwiGlu};
  std::uint64_t seed = 100;
  int cases = 0;
  // Passes: the default kernels (fp16 and bf16), then in bf16 SkinnyFusion::wide_block (512-thread
  // blocks where x's pieces are 1-3 a thread: every shape but the last).
  enum class Pass { Default, Wide };
  for (const Pass pass : {Pass::Default, Pass::Wide}) {
    for (SkinnyDtype dt : {SkinnyDtype::BF16, SkinnyDtype::F16})
      for (int rows = 1;
           rows <= skinny_fusion_max_rows() && !(pass != Pass::Default && dt == SkinnyDtype::F16);
           ++rows)
        for (const Shape& s : shapes)
          for (SkinnyPrologue pro : prologues)
            for (SkinnyEpilogue epi : epilogues) {
              const std::int64_t out =
                  epi == SkinnyEpilogue::SwiGlu ? s.out / 2 * 2 : s.out;  // gate and up halves
              // Bias and weights_ready alternate so that every combination meets both.
              ++seed;
              const std::int64_t ldw = seed % 4 < 2 ? s.in + 128 : 0;
              FusedProblem p{dt, rows, out, s.in, seed % 2 == 0, pro, epi, seed % 3 != 0, ldw};
              p.wide = pass == Pass::Wide;
              if (p.wide) {
                SkinnyFusion f;
                f.prologue = pro;
                f.epilogue = epi;
                EXPECT_EQ(skinny_wide_block_applies(rows, out, s.in, f), s.in <= 12288)
                    << "out " << out << " in " << s.in;
              }
              EXPECT_EQ(wrong_fused(p, seed), 0)
                  << (dt == SkinnyDtype::BF16 ? "bf16" : "fp16") << " rows " << rows << " out "
                  << out << " in " << s.in << " prologue " << name_of(pro) << " epilogue "
                  << name_of(epi) << (p.bias ? " bias" : "") << (p.weights_ready ? " ready" : "")
                  << (ldw ? " pitch " + std::to_string(ldw) : std::string())
                  << (p.wide ? " wide" : "");
              ++cases;
            }
  }
  EXPECT_EQ(cases, (2 + 1) * 1 * 10 * 2 * 6);  // the wide pass in bf16 only
}

// SkinnyFusion::shared_tail: the same bits as the static split (every row summed in the same
// order whichever block takes it), three launches in a row and two replays of a captured graph
// (the counters back at zero after each), on the decode step's shapes of a 7B model (gate|up,
// down, out, and qkv on 512-thread blocks) and a small grid.
TEST(SkinnyGemm, SharedTailGivesTheSameBits) {
  DeviceGuard guard(kGpu);
  struct Case {
    std::int64_t out, in;
    SkinnyPrologue pro;
    SkinnyEpilogue epi;
    bool wide, bias;
  };
  const Case cases[] = {
      {22016, 4096, SkinnyPrologue::RmsNorm, SkinnyEpilogue::SwiGlu, false, false},
      {4096, 11008, SkinnyPrologue::None, SkinnyEpilogue::Residual, false, true},
      {4096, 4096, SkinnyPrologue::None, SkinnyEpilogue::Residual, false, false},
      {12288, 4096, SkinnyPrologue::RmsNorm, SkinnyEpilogue::None, true, true},
      {1000, 1024, SkinnyPrologue::None, SkinnyEpilogue::Gelu, false, true},
  };
  std::uint64_t seed = 900;
  for (const Case& c : cases) {
    std::mt19937_64 rng(++seed);
    const SkinnyDtype dt = SkinnyDtype::BF16;
    const HostArray x(dt, c.in, 1.0f, rng);
    const HostArray w(dt, c.out * c.in, 1.0f / std::sqrt(static_cast<float>(c.in)), rng);
    const HostArray bias(dt, c.out, 0.5f, rng), nw(dt, c.in, 1.0f, rng);
    const std::int64_t width = c.epi == SkinnyEpilogue::SwiGlu ? c.out / 2 : c.out;
    const HostArray y0(dt, width, 2.0f, rng);
    const std::int64_t ldw = c.in + 64;
    DeviceBuffer dx = upload(x.bits), dw = upload_w(w.bits, c.out, c.in, ldw),
                 db = upload(bias.bits), dnw = upload(nw.bits);
    SkinnyFusion f;
    f.prologue = c.pro;
    f.norm_weight = dnw.get();
    f.eps = 1e-5f;
    f.epilogue = c.epi;
    f.weights_ready = true;
    f.wide_block = c.wide;
    const std::string what = "out " + std::to_string(c.out) + " in " + std::to_string(c.in);
    Stream stream(kGpu);
    // One launch (or `graph_replays` replays of a graph holding `launches` of them) into y0.
    auto run = [&](bool shared, int launches, int graph_replays, bool staged = false) {
      DeviceBuffer dy = upload(y0.bits);
      SkinnyFusion g = f;
      g.shared_tail = shared;
      g.stage_next = staged;
      auto gemm = [&](cudaStream_t s) {
        skinny_gemm(dx.get(), dw.get(), c.bias ? db.get() : nullptr, dy.get(), 1, c.out, c.in, dt,
                    s, g, ldw);
      };
      if (graph_replays == 0) {
        for (int i = 0; i < launches; ++i) {
          // The residual epilogue adds into y: each launch starts from y0.
          if (c.epi == SkinnyEpilogue::Residual)
            GPB_CUDA_CHECK(cudaMemcpyAsync(dy.get(), y0.bits.data(), width * 2,
                                           cudaMemcpyHostToDevice, stream.get()));
          gemm(stream.get());
        }
      } else {
        CudaGraph graph;
        graph.capture(stream.get(), [&](cudaStream_t s) {
          for (int i = 0; i < launches; ++i) gemm(s);
        });
        for (int i = 0; i < graph_replays; ++i) graph.launch(stream.get());
      }
      stream.synchronize();
      std::vector<std::uint16_t> y(static_cast<std::size_t>(width));
      GPB_CUDA_CHECK(cudaMemcpy(y.data(), dy.get(), y.size() * 2, cudaMemcpyDeviceToHost));
      return y;
    };
    SkinnyFusion probe = f;
    probe.shared_tail = true;
    // (The small grid has no pool on a GPU of 132 SMs; on smaller ones it may.)
    if (c.out != 1000) EXPECT_TRUE(skinny_shared_tail_applies(1, c.out, c.in, probe)) << what;
    probe.shared_tail = false;
    EXPECT_FALSE(skinny_shared_tail_applies(1, c.out, c.in, probe)) << what;
    const std::vector<std::uint16_t> want = run(false, 1, 0);
    EXPECT_EQ(run(true, 3, 0), want) << what << ": three launches";
    // SkinnyFusion::stage_next: the second step through shared memory, the same bits (the wide
    // qkv case ignores it).
    EXPECT_EQ(run(false, 1, 0, true), want) << what << ": staged";
    EXPECT_EQ(run(true, 3, 0, true), want) << what << ": staged, shared tail, three launches";
    if (c.epi != SkinnyEpilogue::Residual)  // a graph's launches would add up in y
      EXPECT_EQ(run(true, 3, 2), want) << what << ": a graph of three, replayed twice";
    else
      EXPECT_EQ(run(true, 1, 2), run(false, 1, 2)) << what << ": a graph replayed twice";
  }
}

TEST(SkinnyGemm, FusionArguments) {
  alignas(16) static std::uint16_t buf[64];
  SkinnyFusion norm;
  norm.prologue = SkinnyPrologue::RmsNorm;
  norm.norm_weight = buf;
  SkinnyFusion swiglu;
  swiglu.epilogue = SkinnyEpilogue::SwiGlu;
  EXPECT_TRUE(skinny_fusion_supported(1, 8, 4096, norm));
  EXPECT_TRUE(skinny_fusion_supported(1, 8, 65536, norm));
  EXPECT_FALSE(skinny_fusion_supported(2, 8, 64, norm));  // one row of X only
  EXPECT_FALSE(skinny_fusion_supported(1, 8, 12, norm));  // `in` not a multiple of 8
  EXPECT_TRUE(skinny_fusion_supported(1, 8, 64, swiglu));
  EXPECT_FALSE(skinny_fusion_supported(1, 7, 64, swiglu));  // gate and up halves
  SkinnyFusion no_weight = norm;
  no_weight.norm_weight = nullptr;
  EXPECT_FALSE(skinny_fusion_supported(1, 8, 64, no_weight));
  // Refused before anything is launched (host pointers are never touched).
  EXPECT_THROW(skinny_gemm(buf, buf, nullptr, buf, 2, 8, 8, SkinnyDtype::BF16, nullptr, swiglu),
               InputError);
  EXPECT_THROW(skinny_gemm(buf, buf, nullptr, buf, 1, 7, 8, SkinnyDtype::BF16, nullptr, swiglu),
               InputError);
  SkinnyFusion misaligned = norm;
  misaligned.norm_weight = buf + 1;
  EXPECT_THROW(skinny_gemm(buf, buf, nullptr, buf, 1, 8, 8, SkinnyDtype::BF16, nullptr, misaligned),
               InputError);
}

TEST(SkinnyGemm, MatchesHostReference) {
  DeviceGuard guard(kGpu);
  struct Shape {
    std::int64_t out, in;
  };
  // Partial last tiles (1000, 37, 8, 5, 1), `in` of one 8-element piece, not a multiple of 64
  // (264, 1032) nor of the CUDA-core steps (1024 / 2048 elements: 1032, 4104, 11008), a 7B
  // model's shapes.
  const Shape shapes[] = {{1000, 264}, {37, 8},    {4096, 4096}, {512, 11008},
                          {8, 72},     {48, 1032}, {5, 4104},    {1, 1032}};
  std::uint64_t seed = 1;
  for (SkinnyDtype dt : {SkinnyDtype::BF16, SkinnyDtype::F16})
    for (int rows = 1; rows <= 8; ++rows)
      for (const Shape& s : shapes)
        for (bool bias : {false, true}) {
          // Every other problem with W's rows 24 elements apart beyond `in` (NaN in the pad).
          const std::int64_t ldw = seed % 2 ? s.in + 24 : 0;
          const Problem p{dt, rows, s.out, s.in, bias, ldw};
          EXPECT_EQ(wrong_outputs(p, ++seed), 0)
              << (dt == SkinnyDtype::BF16 ? "bf16" : "fp16") << " rows " << rows << " out " << s.out
              << " in " << s.in << (bias ? " bias" : "")
              << (ldw ? " pitch " + std::to_string(ldw) : std::string());
        }
}

// An LM head with an odd vocabulary: 2001 tiles, the last one with a single output; on the
// CUDA-core path more W rows (or row pairs) than the persistent grid has warps, so warps loop.
TEST(SkinnyGemm, OddVocabulary) {
  DeviceGuard guard(kGpu);
  EXPECT_EQ(wrong_outputs({SkinnyDtype::BF16, 1, 32001, 4096, true}, 76), 0);
  EXPECT_EQ(wrong_outputs({SkinnyDtype::BF16, 3, 32001, 4096, false}, 77), 0);
  EXPECT_EQ(wrong_outputs({SkinnyDtype::F16, 8, 32001, 1024, true}, 78), 0);
  EXPECT_EQ(wrong_outputs({SkinnyDtype::F16, 2, 20001, 1032, false}, 79), 0);
  EXPECT_EQ(wrong_outputs({SkinnyDtype::BF16, 4, 20001, 1032, true}, 80), 0);
  EXPECT_EQ(wrong_outputs({SkinnyDtype::BF16, 6, 20001, 1032, true}, 81), 0);
}

// Captured in a CUDA graph, replayed, and equal bit for bit to a direct launch: rows 1 and 4
// (CUDA-core path) and 8 (tensor cores, whose launch sets function attributes).
TEST(SkinnyGemm, CapturedInGraph) {
  DeviceGuard guard(kGpu);
  for (int rows : {1, 4, 8}) {
    const std::int64_t out = 3000, in = 2048;
    std::mt19937_64 rng(5 + rows);
    const HostArray x(SkinnyDtype::BF16, rows * in, 1.0f, rng);
    const HostArray w(SkinnyDtype::BF16, out * in, 0.02f, rng);
    const HostArray bias(SkinnyDtype::BF16, out, 0.5f, rng);
    DeviceBuffer dx = upload(x.bits), dw = upload(w.bits), db = upload(bias.bits);
    DeviceBuffer direct(kGpu, rows * out * 2), graphed(kGpu, rows * out * 2);
    Stream stream(kGpu);
    skinny_gemm(dx.get(), dw.get(), db.get(), direct.get(), rows, out, in, SkinnyDtype::BF16,
                stream.get());
    GPB_CUDA_CHECK(cudaMemsetAsync(graphed.get(), 0xFF, rows * out * 2, stream.get()));
    CudaGraph graph;
    graph.capture(stream.get(), [&](cudaStream_t s) {
      skinny_gemm(dx.get(), dw.get(), db.get(), graphed.get(), rows, out, in, SkinnyDtype::BF16, s);
    });
    graph.launch(stream.get());
    graph.launch(stream.get());
    stream.synchronize();
    std::vector<std::uint16_t> a(rows * out), b(rows * out);
    GPB_CUDA_CHECK(cudaMemcpy(a.data(), direct.get(), a.size() * 2, cudaMemcpyDeviceToHost));
    GPB_CUDA_CHECK(cudaMemcpy(b.data(), graphed.get(), b.size() * 2, cudaMemcpyDeviceToHost));
    EXPECT_EQ(a, b) << "rows " << rows;
  }
}

TEST(SkinnyGemm, Arguments) {
  EXPECT_EQ(skinny_gemm_max_rows(), 8);
  EXPECT_TRUE(skinny_gemm_supported(1, 8));
  EXPECT_TRUE(skinny_gemm_supported(8, 4096));
  EXPECT_FALSE(skinny_gemm_supported(0, 4096));
  EXPECT_FALSE(skinny_gemm_supported(9, 4096));
  EXPECT_FALSE(skinny_gemm_supported(1, 12));
  EXPECT_FALSE(skinny_gemm_supported(1, 0));
  alignas(16) static std::uint16_t buf[64];
  EXPECT_THROW(skinny_gemm(buf, buf, nullptr, buf, 9, 8, 8, SkinnyDtype::BF16, nullptr),
               InputError);
  EXPECT_THROW(skinny_gemm(buf + 1, buf, nullptr, buf, 1, 8, 8, SkinnyDtype::BF16, nullptr),
               InputError);
  // A row pitch below `in` or off 16 bytes.
  EXPECT_THROW(skinny_gemm(buf, buf, nullptr, buf, 1, 8, 16, SkinnyDtype::BF16, nullptr, {}, 8),
               InputError);
  EXPECT_THROW(skinny_gemm(buf, buf, nullptr, buf, 1, 8, 16, SkinnyDtype::BF16, nullptr, {}, 20),
               InputError);
  // No outputs: nothing is launched (the host pointers are never touched).
  EXPECT_NO_THROW(skinny_gemm(buf, buf, nullptr, buf, 1, 0, 8, SkinnyDtype::BF16, nullptr));
}

// Weight bandwidth of a 7B model's decode GEMMs (qkv, out, fused gate|up, down, LM head) for
// 1, 2 (CUDA-core path), 3, 4 and 8 rows (tensor-core path). Weights are rotated over more than 3x
// L2 so that every call reads HBM; the calls are replayed from a CUDA graph as in the engine, so
// host launch costs do not count. Bandwidth = W bytes / time (X and Y are negligible).
TEST(SkinnyGemm, ReportBandwidth) {
  DeviceGuard guard(kGpu);
  // Room for the padded rows of the engine's layer weights (EngineOptions::weight_row_pad).
  const std::int64_t pad = gpubench::model::EngineOptions::kWeightRowPad;
  int l2 = 0, mem_khz = 0, bus_bits = 0;
  GPB_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, kGpu));
  GPB_CUDA_CHECK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, kGpu));
  GPB_CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, kGpu));
  const double peak = 2.0 * mem_khz * 1e3 * bus_bits / 8;  // bytes/s (0 if not reported)
  struct Shape {
    const char* name;
    std::int64_t out, in;
  };
  const Shape shapes[] = {{"out", 4096, 4096},
                          {"qkv", 12288, 4096},
                          {"gate_up", 22016, 4096},
                          {"down", 4096, 11008},
                          {"lm_head", 32000, 4096}};
  Stream stream(kGpu);
  for (const Shape& s : shapes) {
    const std::size_t w_bytes = static_cast<std::size_t>(s.out) * s.in * 2;
    const std::size_t stride = static_cast<std::size_t>(s.out) * (s.in + pad) * 2;
    const int copies = static_cast<int>(3 * static_cast<std::size_t>(l2) / w_bytes + 1);
    DeviceBuffer w(kGpu, stride * copies);
    GPB_CUDA_CHECK(cudaMemset(w.get(), 0x3c, w.bytes()));
    DeviceBuffer x(kGpu, 8 * s.in * 2), y(kGpu, 8 * s.out * 2);
    GPB_CUDA_CHECK(cudaMemset(x.get(), 0x3c, x.bytes()));
    // Times `rows` rows of X through skinny_gemm with `f` and prints the line, `what` naming the
    // kernel.
    auto report = [&](int rows, const SkinnyFusion& f, const char* what, std::int64_t ldw = 0) {
      auto run = [&](int i) {
        skinny_gemm(x.get(), w.as<unsigned char>() + (i % copies) * stride, nullptr, y.get(), rows,
                    s.out, s.in, SkinnyDtype::BF16, stream.get(), f, ldw);
      };
      for (int i = 0; i < 3; ++i) run(i);
      const double seconds = gpubench::testing::graph_replay_seconds(kGpu, stream.get(), 30, run);
      const double bw = w_bytes / seconds;
      std::printf("skinny gemm %-7s W %5lld x %5lld bf16 rows %d (%s): %8.2f us/call %7.1f GB/s",
                  s.name, static_cast<long long>(s.out), static_cast<long long>(s.in), rows, what,
                  seconds * 1e6, bw / 1e9);
      if (peak > 0) std::printf(" = %.0f%% of %.0f GB/s peak", 100 * bw / peak, peak / 1e9);
      std::printf("\n");
      EXPECT_GT(bw, 0);
    };
    for (int rows : {1, 2, 3, 4, 8})
      report(rows, SkinnyFusion{}, rows <= 2 ? "cuda-core path" : "tensor-core path");
    // One row through the fused kernel of a decode step (weights_ready: the first step loaded
    // before the wait for the previous call).
    SkinnyFusion f;
    f.weights_ready = true;
    report(1, f, "fused path");
    // With the RMSNorm prologue (qkv, gate|up and the LM head of a decode step).
    DeviceBuffer nw(kGpu, s.in * 2);
    GPB_CUDA_CHECK(cudaMemset(nw.get(), 0x3c, nw.bytes()));
    f.prologue = SkinnyPrologue::RmsNorm;
    f.norm_weight = nw.get();
    f.eps = 1e-5f;
    report(1, f, "fused path, RMSNorm");
    if (std::string(s.name) == "gate_up") {
      f.epilogue = SkinnyEpilogue::SwiGlu;
      report(1, f, "fused path, RMSNorm + SwiGLU");
    }
    // The engine's padded rows, with its fusion of this GEMV in a decode step (the LM head's
    // rows are not padded).
    if (std::string(s.name) != "lm_head") {
      if (std::string(s.name) == "out" || std::string(s.name) == "down") f = SkinnyFusion{};
      f.weights_ready = true;
      report(1, f, "fused path, engine's fusion, padded rows", s.in + pad);
    }
  }
}
