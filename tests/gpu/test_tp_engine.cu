// The tensor-parallel engine (Megatron shards): every rank allocates what model::engine_memory
// plans, its weights are the exact slices of the one-GPU model's (rows of qkv and gate|up with
// their biases, columns of out and down), and the output of t ranks equals the TP=1 output within
// bf16 tolerance, prefill and decode after it, with all-reduces and with sequence parallelism
// (reduce-scatter + all-gather in prefill):
//   - on one GPU, t ranks in threads with a host-synchronized sum (covers t = 2 and 4 anywhere);
//   - across GPUs over NCCL (skipped with fewer than 2 GPUs), as `gpubench tp` runs it.
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "gpubench/modules/tp/tp.hpp"
#include "gpubench/core/cuda.hpp"
#include "gpubench/core/gemm.hpp"
#include "gpubench/core/nccl.hpp"
#include "gpubench/core/ranks.hpp"
#include "gpubench/model/presets.hpp"
#include "gpubench/model/shard.hpp"
#include "gpubench/model/transformer.hpp"

using namespace gpubench;
using namespace gpubench::model;

namespace {

constexpr int kGpu = 0;

ModelConfig tiny_qwen() {  // GQA (8 heads, 4 KV heads), qkv bias, SwiGLU
  return parse_model_config(nlohmann::json::parse(R"({
    "model_type": "qwen2", "hidden_size": 512, "intermediate_size": 1024,
    "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4,
    "vocab_size": 1000, "max_position_embeddings": 512, "hidden_act": "silu",
    "rms_norm_eps": 1e-6, "tie_word_embeddings": false})"),
                            "tiny-qwen");
}

ModelConfig tiny_opt() {  // LayerNorm, learned positions, ReLU, biases everywhere
  return parse_model_config(nlohmann::json::parse(R"({
    "model_type": "opt", "hidden_size": 256, "ffn_dim": 1024,
    "num_hidden_layers": 2, "num_attention_heads": 4,
    "vocab_size": 1000, "max_position_embeddings": 512, "activation_function": "relu",
    "enable_bias": true, "do_layer_norm_before": true, "word_embed_proj_dim": 256,
    "tie_word_embeddings": true})"),
                            "tiny-opt");
}

EngineOptions options(int t, int rank, bool sequence_parallel = false, int overlap_chunks = 1) {
  EngineOptions o;
  o.sequence_parallel = sequence_parallel;
  o.overlap_chunks = overlap_chunks;
  o.max_batch = 2;
  o.max_tokens = 48;
  o.max_context = 64;
  o.tp_size = t;
  o.tp_rank = rank;
  return o;
}

std::vector<std::uint16_t> download(const void* p, std::size_t elems) {
  std::vector<std::uint16_t> h(elems);
  GPB_CUDA_CHECK(cudaDeviceSynchronize());
  GPB_CUDA_CHECK(cudaMemcpy(h.data(), p, elems * 2, cudaMemcpyDeviceToHost));
  return h;
}

// A weight matrix [rows, cols] of `t`, packed: its rows are parameter_pitch() apart on the GPU.
// The pad after each row must hold zeros.
std::vector<std::uint16_t> download_matrix(const Transformer& t, const char* name, int layer,
                                           std::int64_t rows, std::int64_t cols) {
  const std::int64_t pitch = t.parameter_pitch(name);
  EXPECT_GE(pitch, cols) << name;
  const auto raw = download(t.parameter(name, layer), static_cast<std::size_t>(rows * pitch));
  std::vector<std::uint16_t> out;
  std::int64_t nonzero_pad = 0;
  for (std::int64_t i = 0; i < rows; ++i) {
    out.insert(out.end(), raw.begin() + i * pitch, raw.begin() + i * pitch + cols);
    for (std::int64_t c = cols; c < pitch; ++c) nonzero_pad += raw[i * pitch + c] != 0;
  }
  EXPECT_EQ(nonzero_pad, 0) << name << " layer " << layer;
  return out;
}

std::vector<float> logits_of(const Transformer& t, int batch) {
  const auto raw = download(t.logits(), static_cast<std::size_t>(batch) * t.model().vocab_size);
  std::vector<float> out(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) {
    __nv_bfloat16 b;
    std::memcpy(&b, &raw[i], 2);
    out[i] = __bfloat162float(b);
  }
  return out;
}

// Rows `r` of a row-major [*, cols] host matrix, stacked.
std::vector<std::uint16_t> rows_of(const std::vector<std::uint16_t>& full, std::int64_t cols,
                                   const std::vector<Range>& ranges) {
  std::vector<std::uint16_t> out;
  for (const Range& r : ranges)
    out.insert(out.end(), full.begin() + r.start * cols, full.begin() + (r.start + r.count) * cols);
  return out;
}
std::vector<std::uint16_t> cols_of(const std::vector<std::uint16_t>& full, std::int64_t rows,
                                   std::int64_t cols, Range c) {
  std::vector<std::uint16_t> out;
  for (std::int64_t i = 0; i < rows; ++i)
    out.insert(out.end(), full.begin() + i * cols + c.start,
               full.begin() + i * cols + c.start + c.count);
  return out;
}

// t ranks of one process on one GPU: the sum is done after every rank has synchronized its
// stream (a host barrier), into rank 0's buffer, then copied back to the others.
struct LocalGroup {
  explicit LocalGroup(int n) : n(n), bufs(static_cast<std::size_t>(n)) {}
  void barrier() {
    std::unique_lock<std::mutex> lock(m);
    const int gen = generation;
    if (++arrived == n) {
      arrived = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != gen; });
    }
  }
  int n;
  std::mutex m;
  std::condition_variable cv;
  int arrived = 0, generation = 0;
  std::vector<void*> bufs;
};

class LocalCollectives : public TpCollectives {
 public:
  LocalCollectives(LocalGroup& g, int rank) : g_(g), rank_(rank) {}
  void all_reduce(void* data, std::int64_t elems, ActDtype dtype, cudaStream_t stream) override {
    exchange(data, stream, [&] {
      if (rank_ != 0) return;
      for (int r = 1; r < g_.n; ++r) residual_add(data, g_.bufs[r], elems, dtype, stream);
      for (int r = 1; r < g_.n; ++r)
        GPB_CUDA_CHECK(cudaMemcpyAsync(g_.bufs[r], data, static_cast<std::size_t>(elems) * 2,
                                       cudaMemcpyDeviceToDevice, stream));
    });
  }
  // Rank 0 sums every rank's buffer into its own and hands chunk r to rank r.
  void reduce_scatter(void* data, std::int64_t chunk, ActDtype dtype,
                      cudaStream_t stream) override {
    exchange(data, stream, [&] {
      if (rank_ != 0) return;
      for (int r = 1; r < g_.n; ++r) residual_add(data, g_.bufs[r], chunk * g_.n, dtype, stream);
      for (int r = 1; r < g_.n; ++r)
        GPB_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(g_.bufs[r]) + r * chunk * 2,
                                       static_cast<char*>(data) + r * chunk * 2,
                                       static_cast<std::size_t>(chunk) * 2,
                                       cudaMemcpyDeviceToDevice, stream));
    });
  }
  // Every rank copies its chunk into the same chunk of every other rank.
  void all_gather(void* data, std::int64_t chunk, ActDtype, cudaStream_t stream) override {
    exchange(data, stream, [&] {
      for (int r = 0; r < g_.n; ++r)
        if (r != rank_)
          GPB_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(g_.bufs[r]) + rank_ * chunk * 2,
                                         static_cast<char*>(data) + rank_ * chunk * 2,
                                         static_cast<std::size_t>(chunk) * 2,
                                         cudaMemcpyDeviceToDevice, stream));
    });
  }

 private:
  // Every rank's stream drained and its buffer published, then `move` (the copies and sums, on
  // this rank's stream), drained again before any rank goes on.
  template <class F>
  void exchange(void* data, cudaStream_t stream, F&& move) {
    GPB_CUDA_CHECK(cudaStreamSynchronize(stream));
    g_.bufs[static_cast<std::size_t>(rank_)] = data;
    g_.barrier();
    move();
    GPB_CUDA_CHECK(cudaStreamSynchronize(stream));
    g_.barrier();
  }

  LocalGroup& g_;
  int rank_;
};

// A prefill of 40 tokens per sequence then one decode step: the logits after each (rank 0's,
// all equal) and the chunks the prefill ran in.
struct Outputs {
  std::vector<float> prefill, decode;
  int prefill_chunks = 0;
};
Outputs run_steps(Transformer& t, cudaStream_t s, int batch = 2) {
  const int n = 40;
  Outputs o;
  const std::int32_t* ids = t.tokens(batch, n, 11, s);
  t.prefill(ids, batch, n, s);
  o.prefill = logits_of(t, batch);
  o.prefill_chunks = t.last_chunks();
  const std::int32_t* next = t.tokens(batch, 1, 12, s);
  t.decode(next, batch, n, s);
  o.decode = logits_of(t, batch);
  return o;
}

// Logits within 3% of the largest |logit| (bf16 storage; the ranks sum in another order).
int mismatches(const std::vector<float>& want, const std::vector<float>& got) {
  float scale = 0;
  for (float v : want) scale = std::max(scale, std::fabs(v));
  int wrong = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    wrong += !(std::fabs(got[i] - want[i]) <= 0.03f * scale) || !std::isfinite(got[i]);
  return scale > 0 ? wrong : -1;
}

// t ranks as threads on one GPU, rank r's engine built with options_of(r) and summed through
// the host (LocalCollectives), each running run_steps at `batch`: every rank's outputs, or the
// error it stopped on.
struct RankRuns {
  std::vector<Outputs> got;
  std::vector<std::string> errors;
};
RankRuns ranks_on_one_gpu(const ModelConfig& m, int t,
                          const std::function<EngineOptions(int)>& options_of, int batch) {
  LocalGroup group(t);
  RankRuns runs{std::vector<Outputs>(static_cast<std::size_t>(t)),
                std::vector<std::string>(static_cast<std::size_t>(t))};
  std::vector<std::thread> threads;
  for (int r = 0; r < t; ++r)
    threads.emplace_back([&, r] {
      try {
        DeviceGuard g(kGpu);
        Transformer part(m, options_of(r), kGpu);
        LocalCollectives c(group, r);
        part.set_collectives(&c);
        Stream s(kGpu);
        runs.got[static_cast<std::size_t>(r)] = run_steps(part, s.get(), batch);
      } catch (const std::exception& e) {
        runs.errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& th : threads) th.join();
  return runs;
}

}  // namespace

TEST(TpEngine, ShardsAreSlicesOfTheFullWeights) {
  DeviceGuard guard(kGpu);
  for (const ModelConfig& m : {tiny_qwen(), tiny_opt()}) {
    Transformer full(m, options(1, 0), kGpu);
    const std::int64_t H = m.hidden_size, Q = m.q_dim(), KV = m.kv_dim(), I = m.intermediate_size,
                       up = m.gated_mlp ? 2 * I : I;
    for (int t : {2, 4}) {
      for (int r = 0; r < t; ++r) {
        Transformer part(m, options(t, r), kGpu);
        const ShardShape& sh = part.shard();
        ASSERT_EQ(sh.heads, m.num_heads / t);
        // The host-side plan of the allocations is exact.
        int cc = 0;
        GPB_CUDA_CHECK(cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, kGpu));
        const EngineMemory plan = engine_memory(m, options(t, r), gemm_workspace_bytes(cc));
        EXPECT_EQ(part.memory().weights, plan.weights) << m.name << " t=" << t;
        EXPECT_EQ(part.memory().kv_cache, plan.kv_cache) << m.name << " t=" << t;
        EXPECT_EQ(part.memory().activations, plan.activations) << m.name << " t=" << t;
        EXPECT_EQ(part.memory().workspace, plan.workspace) << m.name << " t=" << t;
        for (int l = 0; l < 2; ++l) {
          auto param = [&](const Transformer& e, const char* name, std::size_t elems) {
            return download(e.parameter(name, l), elems);
          };
          auto matrix = [&](const Transformer& e, const char* name, std::int64_t rows,
                            std::int64_t cols) { return download_matrix(e, name, l, rows, cols); };
          const std::string where = m.name + " t=" + std::to_string(t) + " rank " +
                                    std::to_string(r) + " layer " + std::to_string(l);
          EXPECT_EQ(matrix(part, "qkv_w", sh.q_dim + 2 * sh.kv_dim, H),
                    rows_of(matrix(full, "qkv_w", Q + 2 * KV, H), H, sh.qkv_rows))
              << where;
          EXPECT_EQ(matrix(part, "out_w", H, sh.q_dim),
                    cols_of(matrix(full, "out_w", H, Q), H, Q, sh.out_cols))
              << where;
          const std::int64_t up_local = m.gated_mlp ? 2 * sh.intermediate : sh.intermediate;
          EXPECT_EQ(matrix(part, "up_w", up_local, H),
                    rows_of(matrix(full, "up_w", up, H), H, sh.gate_up_rows))
              << where;
          EXPECT_EQ(matrix(part, "down_w", H, sh.intermediate),
                    cols_of(matrix(full, "down_w", H, I), H, I, sh.down_cols))
              << where;
          if (m.qkv_bias)
            EXPECT_EQ(param(part, "qkv_b", sh.q_dim + 2 * sh.kv_dim),
                      rows_of(param(full, "qkv_b", Q + 2 * KV), 1, sh.qkv_rows))
                << where;
          if (m.mlp_bias) {
            EXPECT_EQ(param(part, "up_b", up_local),
                      rows_of(param(full, "up_b", up), 1, sh.gate_up_rows))
                << where;
            // Row-parallel biases are whole on every rank (added once, after the sum).
            EXPECT_EQ(param(part, "down_b", H), param(full, "down_b", H)) << where;
          }
          EXPECT_EQ(param(part, "in_norm_w", H), param(full, "in_norm_w", H)) << where;
        }
      }
    }
  }
}

TEST(TpEngine, MissingCollectivesAndBadRanksAreRefused) {
  DeviceGuard guard(kGpu);
  EXPECT_THROW(Transformer(tiny_qwen(), options(3, 0), kGpu), InputError);  // 8 heads
  EXPECT_THROW(Transformer(tiny_qwen(), options(2, 2), kGpu), InputError);
  Transformer t(tiny_qwen(), options(2, 0), kGpu);
  Stream s(kGpu);
  const std::int32_t* ids = t.tokens(1, 4, 1, s.get());
  EXPECT_THROW(t.prefill(ids, 1, 4, s.get()), InputError);
  // Sequence parallelism splits rows: 1 x 3 tokens do not split over 2 ranks.
  Transformer sp(tiny_qwen(), options(2, 0, true), kGpu);
  LocalGroup alone(1);  // never reached: the step is refused before any collective
  LocalCollectives c(alone, 0);
  sp.set_collectives(&c);
  const std::int32_t* three = sp.tokens(1, 3, 1, s.get());
  EXPECT_THROW(sp.prefill(three, 1, 3, s.get()), InputError);
}

// Counts the collectives a rank's steps call (and sums nothing).
struct CountingCollectives : TpCollectives {
  int calls = 0;
  void all_reduce(void*, std::int64_t, ActDtype, cudaStream_t) override { ++calls; }
  void reduce_scatter(void*, std::int64_t, ActDtype, cudaStream_t) override { ++calls; }
  void all_gather(void*, std::int64_t, ActDtype, cudaStream_t) override { ++calls; }
};

// A prefill calls prefill's collectives, a decode step decode's, eager or captured; one set
// serves both.
TEST(TpEngine, EachPhaseCallsItsOwnCollectives) {
  DeviceGuard guard(kGpu);
  Transformer t(tiny_qwen(), options(2, 0), kGpu);
  Stream s(kGpu);
  CountingCollectives prefill, decode;
  t.set_collectives(&prefill, &decode);
  EXPECT_EQ(t.collectives(Phase::Prefill), &prefill);
  EXPECT_EQ(t.collectives(Phase::Decode), &decode);
  const std::int32_t* ids = t.tokens(1, 8, 1, s.get());
  t.prefill(ids, 1, 8, s.get());
  const int per_step = 2 * t.layers();  // attention out and MLP down
  EXPECT_EQ(prefill.calls, per_step);
  EXPECT_EQ(decode.calls, 0);
  const std::int32_t* next = t.tokens(1, 1, 2, s.get());
  t.decode(next, 1, 8, s.get());
  EXPECT_EQ(decode.calls, per_step);
  CudaGraph graph;
  graph.capture(s.get(), [&](cudaStream_t s2) { t.decode(next, 1, 9, s2); });
  EXPECT_EQ(decode.calls, 2 * per_step);
  EXPECT_EQ(prefill.calls, per_step);
  t.set_collectives(&prefill);
  EXPECT_EQ(t.collectives(Phase::Decode), &prefill);
  t.decode(next, 1, 9, s.get());
  EXPECT_EQ(prefill.calls, 2 * per_step);
  GPB_CUDA_CHECK(cudaStreamSynchronize(s.get()));
}

// t ranks in threads on one GPU, summed through the host: the same math as NCCL's all-reduce.
TEST(TpEngine, RanksOnOneGpuEqualTp1) {
  DeviceGuard guard(kGpu);
  for (const ModelConfig& m : {tiny_qwen(), tiny_opt()}) {
    Outputs want;
    {
      Transformer one(m, options(1, 0), kGpu);
      Stream s(kGpu);
      want = run_steps(one, s.get());
    }
    for (const auto& degree : {std::pair<int, bool>{2, false}, {4, false}, {2, true}, {4, true}}) {
      const int t = degree.first;
      const bool sp = degree.second;
      const RankRuns runs = ranks_on_one_gpu(m, t, [&](int r) { return options(t, r, sp); }, 2);
      const auto& got = runs.got;
      const auto& errors = runs.errors;
      for (int r = 0; r < t; ++r) {
        const auto& g = got[static_cast<std::size_t>(r)];
        const std::string what =
            m.name + " t=" + std::to_string(t) + (sp ? " sp" : "") + " rank " + std::to_string(r);
        ASSERT_EQ(errors[static_cast<std::size_t>(r)], "") << what;
        EXPECT_EQ(mismatches(want.prefill, g.prefill), 0) << what << ": prefill logits vs TP=1";
        EXPECT_EQ(mismatches(want.decode, g.decode), 0) << what << ": decode logits vs TP=1";
      }
    }
  }
}

// Prefill in overlap chunks (each chunk's all-reduces on the engine's second stream) equals
// TP=1: by whole sequences at batch 2, by prompt slices (later slices attending to earlier
// ones' keys in the cache) at batch 1.
struct OverlapCase {
  int t, chunks, batch, expected_chunks;
};
constexpr OverlapCase kOverlapCases[] = {{2, 2, 2, 2}, {2, 2, 1, 2}, {4, 4, 1, 4}, {2, 8, 1, 8},
                                         // 40 tokens do not split in 3 at batch 1: whole
                                         {2, 3, 1, 1}};

TEST(TpEngine, OverlapChunksOnOneGpuEqualTp1) {
  DeviceGuard guard(kGpu);
  for (const ModelConfig& m : {tiny_qwen(), tiny_opt()}) {
    std::map<int, Outputs> want;  // by batch
    {
      Transformer one(m, options(1, 0), kGpu);
      Stream s(kGpu);
      for (int batch : {1, 2}) want[batch] = run_steps(one, s.get(), batch);
    }
    for (const OverlapCase& c : kOverlapCases) {
      const RankRuns runs = ranks_on_one_gpu(
          m, c.t, [&](int r) { return options(c.t, r, false, c.chunks); }, c.batch);
      const auto& got = runs.got;
      const auto& errors = runs.errors;
      for (int r = 0; r < c.t; ++r) {
        const auto& g = got[static_cast<std::size_t>(r)];
        const std::string what = m.name + " t=" + std::to_string(c.t) + " chunks " +
                                 std::to_string(c.chunks) + " batch " + std::to_string(c.batch) +
                                 " rank " + std::to_string(r);
        ASSERT_EQ(errors[static_cast<std::size_t>(r)], "") << what;
        EXPECT_EQ(g.prefill_chunks, c.expected_chunks) << what;
        EXPECT_EQ(mismatches(want[c.batch].prefill, g.prefill), 0) << what << ": prefill vs TP=1";
        EXPECT_EQ(mismatches(want[c.batch].decode, g.decode), 0) << what << ": decode vs TP=1";
      }
    }
  }
}

// Across GPUs over NCCL, as `gpubench tp` runs it: every degree that the visible GPUs allow.
TEST(TpEngine, NcclAcrossGpusEqualsTp1) {
  int n = 0;
  GPB_CUDA_CHECK(cudaGetDeviceCount(&n));
  if (n < 2) GTEST_SKIP() << "needs 2 or more GPUs";
  const ModelConfig m = tiny_qwen();
  Outputs want, want1;  // batch 2, batch 1
  {
    DeviceGuard guard(kGpu);
    Transformer one(m, options(1, 0), kGpu);
    Stream s(kGpu);
    want = run_steps(one, s.get());
    want1 = run_steps(one, s.get(), 1);
  }
  for (const auto& degree : {std::pair<int, bool>{2, false}, {4, false}, {2, true}, {4, true}}) {
    const int t = degree.first;
    const bool sp = degree.second;
    if (t > n) continue;
    std::vector<int> devices(static_cast<std::size_t>(t));
    std::iota(devices.begin(), devices.end(), 0);
    std::vector<Outputs> got(static_cast<std::size_t>(t)), overlapped = got, copied = got;
    std::vector<std::int64_t> copied_count(static_cast<std::size_t>(t)), shot_count = copied_count;
    std::vector<Outputs> shot(static_cast<std::size_t>(t));
    parallel::CopyEngineGroup copies(devices, std::size_t{1} << 20);
    parallel::OneShotGroup shots(devices, parallel::OneShotCollectives::kMaxBytes);
    ncclUniqueId id{};
    RankGroup group(devices);
    group.run([&](Rank& self) {
      if (self.rank == 0) GPB_NCCL_CHECK(ncclGetUniqueId(&id));
      group.broadcast(self.rank, &id, sizeof(id));
      NcclComm comm(id, t, self.rank);
      Transformer part(m, options(t, self.rank, sp), self.device);
      parallel::NcclCollectives c(comm.get());
      part.set_collectives(&c);
      got[static_cast<std::size_t>(self.rank)] = run_steps(part, self.stream->get());
      if (!sp) {  // and the prefill in t overlap chunks, every chunk's all-reduce overlapped
        Transformer chunked(m, options(t, self.rank, false, t), self.device);
        chunked.set_collectives(&c);
        overlapped[static_cast<std::size_t>(self.rank)] =
            run_steps(chunked, self.stream->get(), 1);
      }
      // Through the copy engines (every message, however small; NCCL only for the decode
      // graph's capture), overlapped as above without sequence parallelism.
      parallel::CopyEngineCollectives ce(copies, self.rank, c, /*min_bytes=*/0);
      Transformer part_ce(m, options(t, self.rank, sp, sp ? 1 : t), self.device);
      part_ce.set_collectives(&ce);
      copied[static_cast<std::size_t>(self.rank)] = run_steps(part_ce, self.stream->get(), 1);
      copied_count[static_cast<std::size_t>(self.rank)] = ce.copied();
      // The all-reduces through the one-shot kernel (the decode graph's too).
      if (!sp) {
        parallel::OneShotCollectives os(shots, self.rank, c);
        Transformer part_os(m, options(t, self.rank), self.device);
        part_os.set_collectives(&os);
        shot[static_cast<std::size_t>(self.rank)] = run_steps(part_os, self.stream->get(), 1);
        shot_count[static_cast<std::size_t>(self.rank)] = os.one_shot();
      }
    });
    for (int r = 0; r < t && !sp && shots.peers_ok(); ++r) {
      const Outputs& g = shot[static_cast<std::size_t>(r)];
      const std::string what = "t=" + std::to_string(t) + " one-shot, rank " + std::to_string(r);
      EXPECT_GT(shot_count[static_cast<std::size_t>(r)], 0) << what;
      EXPECT_FALSE(shots.timed_out(r)) << what;
      EXPECT_EQ(mismatches(want1.prefill, g.prefill), 0) << what << ": prefill logits vs TP=1";
      EXPECT_EQ(mismatches(want1.decode, g.decode), 0) << what << ": decode logits vs TP=1";
    }
    for (int r = 0; r < t && copies.peers_ok(); ++r) {
      const Outputs& g = copied[static_cast<std::size_t>(r)];
      const std::string what = "t=" + std::to_string(t) + (sp ? " sp" : "") +
                               " copy engines, rank " + std::to_string(r);
      EXPECT_GT(copied_count[static_cast<std::size_t>(r)], 0) << what;
      EXPECT_EQ(mismatches(want1.prefill, g.prefill), 0) << what << ": prefill logits vs TP=1";
      EXPECT_EQ(mismatches(want1.decode, g.decode), 0) << what << ": decode logits vs TP=1";
    }
    for (int r = 0; r < t && !sp; ++r) {
      const Outputs& g = overlapped[static_cast<std::size_t>(r)];
      EXPECT_EQ(g.prefill_chunks, t) << "t=" << t << " rank " << r;
      EXPECT_EQ(mismatches(want1.prefill, g.prefill), 0)
          << "t=" << t << " overlapped, rank " << r << ": prefill logits vs TP=1";
      EXPECT_EQ(mismatches(want1.decode, g.decode), 0)
          << "t=" << t << " overlapped, rank " << r << ": decode logits vs TP=1";
    }
    for (int r = 0; r < t; ++r) {
      EXPECT_EQ(mismatches(want.prefill, got[static_cast<std::size_t>(r)].prefill), 0)
          << "t=" << t << (sp ? " sp" : "") << " rank " << r << ": prefill logits vs TP=1";
      EXPECT_EQ(mismatches(want.decode, got[static_cast<std::size_t>(r)].decode), 0)
          << "t=" << t << (sp ? " sp" : "") << " rank " << r << ": decode logits vs TP=1";
    }
  }
}

// The one-shot all-reduce alone on 2 (and 4) GPUs: every rank's result equals the host's fp32
// sum in rank order rounded once to bf16, bit for bit, for a message of 16-byte packs and one of
// any length, eagerly (each call on new data) and as a CUDA graph of several calls replayed
// (each replay a new call count, summing what the last left).
TEST(TpEngine, OneShotAllReduceSumsExactly) {
  int n = 0;
  GPB_CUDA_CHECK(cudaGetDeviceCount(&n));
  if (n < 2) GTEST_SKIP() << "needs 2 or more GPUs";
  for (int t : {2, 4}) {
    if (t > n) continue;
    std::vector<int> devices(static_cast<std::size_t>(t));
    std::iota(devices.begin(), devices.end(), 0);
    parallel::OneShotGroup shots(devices, std::size_t{256} << 10);
    if (!shots.peers_ok()) GTEST_SKIP() << "no peer access between the GPUs";
    constexpr int kCalls = 3, kReplays = 3;
    // Packs of 8 and any length, in 1, 2, 8 and 16 blocks (a slot holds 131072; a block takes
    // 512 units of 8): calls of different block counts in turn, so the blocks' call counts must
    // stay in step.
    const std::vector<std::int64_t> sizes = {4096, 8001, 32768, 100003};
    // host[r][b]: rank r's buffer b as the host expects it.
    auto value = [](int r, int b, std::int64_t i, int call) {
      const std::uint64_t h = (static_cast<std::uint64_t>(r) * 1000003u + b * 7919u +
                               static_cast<std::uint64_t>(i) * 104729u + call * 15485863u) %
                              2001u;
      return static_cast<float>(static_cast<int>(h) - 1000) / 256.0f;
    };
    std::vector<std::vector<std::vector<__nv_bfloat16>>> host(
        static_cast<std::size_t>(t), std::vector<std::vector<__nv_bfloat16>>(sizes.size()));
    auto sum_all = [&](std::size_t b) {  // what one all-reduce makes of host[.][b]
      const std::size_t len = host[0][b].size();
      std::vector<__nv_bfloat16> out(len);
      for (std::size_t i = 0; i < len; ++i) {
        float acc = 0;
        for (int r = 0; r < t; ++r) acc += __bfloat162float(host[static_cast<std::size_t>(r)][b][i]);
        out[i] = __float2bfloat16(acc);
      }
      for (int r = 0; r < t; ++r) host[static_cast<std::size_t>(r)][b] = out;
    };
    std::vector<std::vector<std::vector<__nv_bfloat16>>> got = host;
    std::vector<std::string> errors(static_cast<std::size_t>(t));
    std::vector<bool> late(static_cast<std::size_t>(t), false);
    RankGroup group(devices);
    // The host's expectations first (the same on every rank after each call).
    std::vector<std::vector<std::vector<__nv_bfloat16>>> eager_want(kCalls);
    for (int call = 0; call < kCalls; ++call)
      for (std::size_t b = 0; b < sizes.size(); ++b) {
        for (int r = 0; r < t; ++r) {
          auto& v = host[static_cast<std::size_t>(r)][b];
          v.resize(static_cast<std::size_t>(sizes[b]));
          for (std::int64_t i = 0; i < sizes[b]; ++i)
            v[static_cast<std::size_t>(i)] = __float2bfloat16(value(r, static_cast<int>(b), i, call));
        }
        sum_all(b);
        eager_want[static_cast<std::size_t>(call)].push_back(host[0][b]);
      }
    // The graph: every buffer once more from call kCalls's data, then summed kReplays times.
    for (std::size_t b = 0; b < sizes.size(); ++b)
      for (int r = 0; r < t; ++r)
        for (std::int64_t i = 0; i < sizes[b]; ++i)
          host[static_cast<std::size_t>(r)][b][static_cast<std::size_t>(i)] =
              __float2bfloat16(value(r, static_cast<int>(b), i, kCalls));
    for (int k = 0; k < kReplays; ++k)
      for (std::size_t b = 0; b < sizes.size(); ++b) sum_all(b);
    std::vector<std::vector<std::vector<std::vector<__nv_bfloat16>>>> eager_got(
        static_cast<std::size_t>(t));

    group.run([&](Rank& self) {
      const auto R = static_cast<std::size_t>(self.rank);
      cudaStream_t st = self.stream->get();
      std::vector<DeviceBuffer> bufs;
      for (std::int64_t len : sizes) bufs.emplace_back(self.device, static_cast<std::size_t>(len) * 2);
      auto upload = [&](int call) {
        for (std::size_t b = 0; b < sizes.size(); ++b) {
          std::vector<__nv_bfloat16> v(static_cast<std::size_t>(sizes[b]));
          for (std::int64_t i = 0; i < sizes[b]; ++i)
            v[static_cast<std::size_t>(i)] =
                __float2bfloat16(value(self.rank, static_cast<int>(b), i, call));
          GPB_CUDA_CHECK(cudaMemcpyAsync(bufs[b].get(), v.data(), v.size() * 2,
                                         cudaMemcpyHostToDevice, st));
        }
      };
      auto download_all = [&] {
        std::vector<std::vector<__nv_bfloat16>> out;
        for (std::size_t b = 0; b < sizes.size(); ++b) {
          std::vector<__nv_bfloat16> v(static_cast<std::size_t>(sizes[b]));
          GPB_CUDA_CHECK(cudaMemcpyAsync(v.data(), bufs[b].get(), v.size() * 2,
                                         cudaMemcpyDeviceToHost, st));
          GPB_CUDA_CHECK(cudaStreamSynchronize(st));
          out.push_back(std::move(v));
        }
        return out;
      };
      const OneShotPeers& peers = shots.peers(self.rank);
      for (int call = 0; call < kCalls; ++call) {
        upload(call);
        for (std::size_t b = 0; b < sizes.size(); ++b)
          one_shot_all_reduce(bufs[b].get(), sizes[b], peers, ActDtype::BF16, st);
        eager_got[R].push_back(download_all());
      }
      upload(kCalls);
      GPB_CUDA_CHECK(cudaStreamSynchronize(st));
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      GPB_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
      for (std::size_t b = 0; b < sizes.size(); ++b)
        one_shot_all_reduce(bufs[b].get(), sizes[b], peers, ActDtype::BF16, st);
      GPB_CUDA_CHECK(cudaStreamEndCapture(st, &graph));
      GPB_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      for (int k = 0; k < kReplays; ++k) GPB_CUDA_CHECK(cudaGraphLaunch(exec, st));
      got[R] = download_all();
      GPB_CUDA_CHECK(cudaGraphExecDestroy(exec));
      GPB_CUDA_CHECK(cudaGraphDestroy(graph));
      late[R] = shots.timed_out(self.rank);
    });
    auto same = [](const std::vector<__nv_bfloat16>& a, const std::vector<__nv_bfloat16>& b) {
      if (a.size() != b.size()) return false;
      return std::memcmp(a.data(), b.data(), a.size() * 2) == 0;
    };
    for (int r = 0; r < t; ++r) {
      const auto R = static_cast<std::size_t>(r);
      const std::string what = "t=" + std::to_string(t) + " rank " + std::to_string(r);
      EXPECT_FALSE(late[R]) << what << ": a wait for a peer timed out";
      ASSERT_EQ(eager_got[R].size(), static_cast<std::size_t>(kCalls)) << what;
      for (int call = 0; call < kCalls; ++call)
        for (std::size_t b = 0; b < sizes.size(); ++b)
          EXPECT_TRUE(same(eager_got[R][static_cast<std::size_t>(call)][b],
                           eager_want[static_cast<std::size_t>(call)][b]))
              << what << " eager call " << call << ", " << sizes[b] << " elements";
      for (std::size_t b = 0; b < sizes.size(); ++b)
        EXPECT_TRUE(same(got[R][b], host[R][b]))
            << what << " graph, " << kReplays << " replays, " << sizes[b] << " elements";
    }
  }
}
