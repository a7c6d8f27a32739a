// Decode attention (one query token per sequence over a KV cache) against the reference kernel on
// seeded random data: contexts from 1 to 5000 keys, grouped-query heads (groups of 1, 3, 4 and
// 16, which take the padded and the multi-block head paths), batch 1 and 3, head_dim 64 and 128,
// bf16 and fp16, strided q and caches as in the engine's fused qkv buffer, several split counts,
// the merge kernel on the default stream and as a programmatic dependent launch on a created
// stream, and a run captured in a CUDA graph. The step's new key and value written and rotated
// inside the kernel are checked bit for bit against the separate cache-write kernel. A last test
// prints the K/V read bandwidth of the decode shapes of a 7B model (no bound asserted: it is for
// the record).
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "gpubench/kernels/attention.cuh"
#include "attention_test_values.hpp"
#include "gpubench/kernels/gemm_check.cuh"
#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "graph_timing.hpp"
#include "gpubench/kernels/transformer.cuh"

using namespace gpubench;

namespace {

constexpr int kGpu = 0;

using gpubench::testing::host_value;

std::vector<std::uint16_t> to_host(const void* p, std::size_t n) {
  std::vector<std::uint16_t> h(n);
  GPB_CUDA_CHECK(cudaDeviceSynchronize());
  GPB_CUDA_CHECK(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
  return h;
}

// |got - want| <= 2^-7 |want| + 2e-3: both sides are rounded to the storage type once.
bool close(float got, float want) {
  return std::fabs(got - want) <= 0x1.0p-7f * std::fabs(want) + 2e-3f;
}

int sm_count() {
  int sms = 0;
  GPB_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, kGpu));
  return sms;
}

struct Case {
  AttnDtype dtype;
  int batch, heads, kv_heads, head_dim, keys;
  int q_pad = 0, kv_pad = 0;  // extra elements per row of q and of the caches (strided layouts)
};

// q [batch, q_stride] and caches [batch, max_context, kv_stride] filled from a seed; out
// [batch, heads*d]. q_stride and kv_stride exceed the heads' width by the case's padding.
struct Buffers {
  AttentionArgs args;
  DeviceBuffer q, k, v, out;
  std::size_t out_elems = 0;
  Buffers(const Case& c, std::uint64_t seed) {
    args.dtype = c.dtype;
    args.batch = c.batch;
    args.q_tokens = 1;
    args.heads = c.heads;
    args.kv_heads = c.kv_heads;
    args.head_dim = c.head_dim;
    args.q_pos0 = c.keys - 1;
    args.max_context = c.keys + 5;  // rows past the last key must not be read
    args.q_stride = static_cast<std::int64_t>(c.heads) * c.head_dim + c.q_pad;
    args.kv_stride = static_cast<std::int64_t>(c.kv_heads) * c.head_dim + c.kv_pad;
    const std::size_t q_elems = static_cast<std::size_t>(c.batch) * args.q_stride;
    const std::size_t kv_elems =
        static_cast<std::size_t>(c.batch) * args.max_context * args.kv_stride;
    out_elems = static_cast<std::size_t>(c.batch) * c.heads * c.head_dim;
    q = DeviceBuffer(kGpu, q_elems * 2);
    k = DeviceBuffer(kGpu, kv_elems * 2);
    v = DeviceBuffer(kGpu, kv_elems * 2);
    out = DeviceBuffer(kGpu, out_elems * 2);
    const GemmElement e = c.dtype == AttnDtype::BF16 ? GemmElement::BF16 : GemmElement::F16;
    fill_gemm_operand(q.get(), e, q_elems, seed, nullptr);
    fill_gemm_operand(k.get(), e, kv_elems, seed + 1, nullptr);
    fill_gemm_operand(v.get(), e, kv_elems, seed + 2, nullptr);
    args.q = q.get();
    args.k = k.get();
    args.v = v.get();
    args.out = out.get();
  }
};

// Runs decode_attention with `splits` chunks and counts outputs off the reference `want`. On
// the legacy default stream, or on a created stream (where sm_90+ launches the merge kernel as a
// programmatic dependent of the split kernel).
int wrong_outputs(Buffers& bufs, int splits, const std::vector<std::uint16_t>& want,
                  bool own_stream = false) {
  DeviceBuffer ws(kGpu, std::max<std::size_t>(decode_workspace_bytes(bufs.args, splits), 16));
  GPB_CUDA_CHECK(cudaMemset(bufs.out.get(), 0xFF, bufs.out_elems * 2));  // NaN
  GPB_CUDA_CHECK(cudaMemset(ws.get(), 0xFF, ws.bytes()));  // NaN: every chunk must write its part
  Stream stream(kGpu);
  decode_attention(bufs.args, splits, ws.get(), own_stream ? stream.get() : nullptr);
  stream.synchronize();
  const auto got = to_host(bufs.out.get(), bufs.out_elems);
  int wrong = 0;
  for (std::size_t i = 0; i < bufs.out_elems; ++i)
    wrong += !close(host_value(got, i, bufs.args.dtype), host_value(want, i, bufs.args.dtype));
  return wrong;
}

}  // namespace

TEST(DecodeAttention, MatchesReference) {
  DeviceGuard guard(kGpu);
  const int sms = sm_count();
  int cases = 0;
  for (AttnDtype dt : {AttnDtype::BF16, AttnDtype::F16})
    for (int d : {64, 128})
      for (int batch : {1, 3})
        for (const auto& [heads, kv_heads] : {std::pair{8, 2}, std::pair{32, 8}})
          for (int keys : {1, 7, 64, 1000, 5000}) {
            const Case c{dt, batch, heads, kv_heads, d, keys};
            Buffers bufs(c, 1000 + keys + d + batch);
            attention_reference(bufs.args, nullptr);
            const auto want = to_host(bufs.out.get(), bufs.out_elems);
            const int automatic = decode_attention_splits(bufs.args, sms);
            for (int splits : {automatic, 1, 7, 64}) {
              EXPECT_EQ(wrong_outputs(bufs, splits, want, splits == automatic || splits == 64), 0)
                  << (dt == AttnDtype::BF16 ? "bf16" : "fp16") << " d " << d << " batch " << batch
                  << " heads " << heads << "/" << kv_heads << " keys " << keys << " splits "
                  << splits;
              ++cases;
            }
          }
  EXPECT_EQ(cases, 2 * 2 * 2 * 2 * 5 * 4);
}

// Groups that do not fill a block's heads (3 of 4), plain multi-head (1), groups larger than a
// block (16: two blocks per KV head), and strided rows as in the engine's fused qkv buffer.
TEST(DecodeAttention, GroupShapesAndStrides) {
  DeviceGuard guard(kGpu);
  const int sms = sm_count();
  for (AttnDtype dt : {AttnDtype::BF16, AttnDtype::F16})
    for (const Case& c :
         {Case{dt, 2, 6, 2, 128, 777}, Case{dt, 1, 4, 4, 64, 300}, Case{dt, 2, 16, 1, 128, 2049},
          Case{dt, 1, 12, 4, 64, 513, 2 * 4 * 64, 8}, Case{dt, 3, 8, 8, 128, 95, 16, 64},
          Case{dt, 1, 40, 8, 128, 4100, 2 * 8 * 128, 0}}) {
      Buffers bufs(c, 5000 + c.heads + c.keys);
      attention_reference(bufs.args, nullptr);
      const auto want = to_host(bufs.out.get(), bufs.out_elems);
      for (int splits : {decode_attention_splits(bufs.args, sms), 1, 5, 1024})
        EXPECT_EQ(wrong_outputs(bufs, splits, want, splits != 5), 0)
            << "heads " << c.heads << "/" << c.kv_heads << " d " << c.head_dim << " keys " << c.keys
            << " pads " << c.q_pad << "/" << c.kv_pad << " splits " << splits;
    }
}

// With merge_launches_next the split kernel lets the merge kernel launch
// part-way through long chunks (more than 8 steps: 512 keys a chunk at 8192, 1250 at 20000) and
// at its start for short ones: only the launch moves, so the outputs are the bits of a plain run.
TEST(DecodeAttention, DelayedNextLaunchGivesTheSameBits) {
  DeviceGuard guard(kGpu);
  const int sms = sm_count();
  int cases = 0;
  for (AttnDtype dt : {AttnDtype::BF16, AttnDtype::F16})
    for (const Case& c : {Case{dt, 1, 32, 32, 128, 8192}, Case{dt, 1, 32, 32, 128, 20000},
                          Case{dt, 1, 32, 32, 64, 8192}, Case{dt, 2, 32, 8, 128, 9000},
                          Case{dt, 1, 32, 32, 128, 2048}}) {
      Buffers bufs(c, 8000 + c.keys + c.head_dim);
      attention_reference(bufs.args, nullptr);
      const auto want = to_host(bufs.out.get(), bufs.out_elems);
      for (int splits : {decode_attention_splits(bufs.args, sms), 3}) {
        bufs.args.merge_launches_next = false;
        EXPECT_EQ(wrong_outputs(bufs, splits, want, true), 0);
        const auto plain = to_host(bufs.out.get(), bufs.out_elems);
        bufs.args.merge_launches_next = true;
        EXPECT_EQ(wrong_outputs(bufs, splits, want, true), 0);
        EXPECT_EQ(to_host(bufs.out.get(), bufs.out_elems), plain)
            << "d " << c.head_dim << " heads " << c.heads << "/" << c.kv_heads << " keys " << c.keys
            << " splits " << splits;
        ++cases;
      }
    }
  EXPECT_EQ(cases, 2 * 5 * 2);
}

// Captured in a CUDA graph (no allocation, no synchronization inside) and replayed twice.
TEST(DecodeAttention, CapturedInGraph) {
  DeviceGuard guard(kGpu);
  const Case c{AttnDtype::BF16, 2, 32, 8, 128, 3000};
  Buffers bufs(c, 99);
  attention_reference(bufs.args, nullptr);
  const auto want = to_host(bufs.out.get(), bufs.out_elems);
  const int splits = decode_attention_splits(bufs.args, sm_count());
  ASSERT_GT(splits, 1);  // the merge kernel is part of the graph
  DeviceBuffer ws(kGpu, decode_workspace_bytes(bufs.args, splits));
  GPB_CUDA_CHECK(cudaMemset(bufs.out.get(), 0xFF, bufs.out_elems * 2));
  Stream stream(kGpu);
  CudaGraph graph;
  graph.capture(stream.get(),
                [&](cudaStream_t s) { decode_attention(bufs.args, splits, ws.get(), s); });
  graph.launch(stream.get());
  graph.launch(stream.get());
  stream.synchronize();
  const auto got = to_host(bufs.out.get(), bufs.out_elems);
  int wrong = 0;
  for (std::size_t i = 0; i < bufs.out_elems; ++i)
    wrong += !close(host_value(got, i, c.dtype), host_value(want, i, c.dtype));
  EXPECT_EQ(wrong, 0);
}

// The step's new key and value given to decode_attention (k_new, v_new, with RoPE or without) do
// bit for bit what the engine's separate kernels do: qkv_to_cache (q rotated in place, k rotated
// and v copied into the caches), then decode_attention on the caches. Outputs and whole caches
// are compared; the fused qkv rows are random, so the new rows differ from what the caches held.
// Split counts include 64 at 100 keys, where the new key's chunk is not the last one. Both again
// with cache_ready: the outputs stay the same bits.
TEST(DecodeAttention, AppendMatchesCacheWriteKernel) {
  DeviceGuard guard(kGpu);
  const int sms = sm_count();
  int cases = 0;
  for (AttnDtype dt : {AttnDtype::BF16, AttnDtype::F16})
    for (int d : {64, 128})
      for (const auto& [heads, kv_heads] : {std::pair{32, 32}, std::pair{8, 2}, std::pair{64, 8}})
        for (int keys : {1, 100, 3000})
          for (bool rope : {true, false}) {
            const int batch = 2;
            const int width = (heads + 2 * kv_heads) * d;  // the fused qkv row
            const Case c{dt, batch, heads, kv_heads, d, keys, width - heads * d, 0};
            const std::uint64_t seed = 700 + keys + d + heads;
            const float theta = 10000.0f;
            std::vector<std::int32_t> host_pos(batch, keys - 1);
            DeviceBuffer pos(kGpu, batch * sizeof(std::int32_t));
            GPB_CUDA_CHECK(
                cudaMemcpy(pos.get(), host_pos.data(), pos.bytes(), cudaMemcpyHostToDevice));
            const ActDtype act = dt == AttnDtype::BF16 ? ActDtype::BF16 : ActDtype::F16;
            const int automatic = decode_attention_splits(Buffers(c, seed).args, sms);
            // The step's new key and value given to decode_attention: the k and v heads of the
            // fused qkv row (b's q), rotated with RoPE or not.
            const std::size_t k_off = static_cast<std::size_t>(heads) * d * 2;
            const std::size_t v_off = static_cast<std::size_t>(heads + kv_heads) * d * 2;
            auto give_new_row = [&](Buffers& b) {
              auto* qkv = b.q.as<unsigned char>();
              b.args.k_new = qkv + k_off;
              b.args.v_new = qkv + v_off;
              b.args.rope = rope;
              b.args.rope_theta = theta;
            };
            for (int splits : {1, automatic, 64}) {
              // Fresh inputs each time: the separate kernels rotate q in place.
              Buffers w(c, seed), g(c, seed);
              qkv_to_cache(w.q.get(), batch, 1, heads, kv_heads, d, width, pos.as<std::int32_t>(),
                           rope, theta, w.k.get(), w.v.get(), w.args.max_context, 0, act, nullptr);
              DeviceBuffer ws(kGpu, decode_workspace_bytes(w.args, splits));
              decode_attention(w.args, splits, ws.get(), nullptr);
              give_new_row(g);
              // The created stream does not wait for the default stream's fills and kernels.
              GPB_CUDA_CHECK(cudaDeviceSynchronize());
              Stream stream(kGpu);
              decode_attention(g.args, splits, ws.get(), stream.get());
              stream.synchronize();
              const std::size_t kv_elems = w.k.bytes() / 2;
              EXPECT_EQ(to_host(g.out.get(), g.out_elems), to_host(w.out.get(), w.out_elems))
                  << "outputs, d " << d << " heads " << heads << "/" << kv_heads << " keys " << keys
                  << " rope " << rope << " splits " << splits;
              EXPECT_EQ(to_host(g.k.get(), kv_elems), to_host(w.k.get(), kv_elems))
                  << "k cache, d " << d << " keys " << keys << " rope " << rope;
              EXPECT_EQ(to_host(g.v.get(), kv_elems), to_host(w.v.get(), kv_elems))
                  << "v cache, d " << d << " keys " << keys;
              // cache_ready (a captured engine step): blocks whose chunk ends before the new row
              // load their first steps before waiting for the kernel before them. The same bits
              // with the new row given, and with the cache-write kernel just before it on the
              // stream, launched as its programmatic dependent.
              for (bool append : {true, false}) {
                Buffers e(c, seed);
                GPB_CUDA_CHECK(cudaDeviceSynchronize());
                Stream s2(kGpu);
                if (append) {
                  give_new_row(e);
                } else {
                  qkv_to_cache(e.q.get(), batch, 1, heads, kv_heads, d, width,
                               pos.as<std::int32_t>(), rope, theta, e.k.get(), e.v.get(),
                               e.args.max_context, 0, act, s2.get());
                }
                e.args.cache_ready = true;
                decode_attention(e.args, splits, ws.get(), s2.get());
                s2.synchronize();
                EXPECT_EQ(to_host(e.out.get(), e.out_elems), to_host(w.out.get(), w.out_elems))
                    << "cache_ready, append " << append << ", d " << d << " heads " << heads << "/"
                    << kv_heads << " keys " << keys << " rope " << rope << " splits " << splits;
              }
              ++cases;
            }
          }
  EXPECT_EQ(cases, 2 * 2 * 3 * 3 * 2 * 3);
}

// The engine sizes its workspace with decode_workspace_bytes(max_batch, heads, d, 64 splits):
// the automatic split count never exceeds 64, fills the SMs for long contexts and stays at one
// chunk for short ones.
TEST(DecodeAttention, SplitChoice) {
  for (int sms : {1, 78, 132, 144, 1000})
    for (int batch : {1, 2, 8})
      for (const auto& [heads, kv_heads] :
           {std::pair{32, 32}, std::pair{32, 8}, std::pair{64, 8}, std::pair{32, 1}})
        for (int keys : {1, 50, 512, 8192, 32768, 1 << 20}) {
          AttentionArgs a;
          a.batch = batch;
          a.heads = heads;
          a.kv_heads = kv_heads;
          a.q_pos0 = keys - 1;
          const int splits = decode_attention_splits(a, sms);
          EXPECT_GE(splits, 1);
          EXPECT_LE(splits, 64);
          if (keys <= 64) EXPECT_EQ(splits, 1);
        }
  AttentionArgs a;
  a.heads = 32;
  a.kv_heads = 32;
  a.q_pos0 = 8191;
  EXPECT_GE(decode_attention_splits(a, 132), 8);  // 32 blocks alone would leave SMs idle
  a.kv_heads = 8;
  EXPECT_GE(decode_attention_splits(a, 132), 32);
  // 32 KV heads: 16 chunks a head fill the 132 SMs' 528 places from 1024 keys (16 x 64) on.
  a.kv_heads = 32;
  EXPECT_TRUE(decode_attention_fills_wave(a, 132));
  a.q_pos0 = 1023;
  EXPECT_TRUE(decode_attention_fills_wave(a, 132));
  EXPECT_EQ(decode_attention_splits(a, 132), 16);
  a.q_pos0 = 511;
  EXPECT_FALSE(decode_attention_fills_wave(a, 132));
  EXPECT_LT(decode_attention_splits(a, 132), 16);
}

TEST(DecodeAttention, RejectsBadArguments) {
  AttentionArgs a;
  a.heads = 8;
  a.kv_heads = 3;  // not a divisor
  a.max_context = 16;
  EXPECT_THROW(decode_attention(a, 1, nullptr, nullptr), InputError);
  a.kv_heads = 2;
  a.head_dim = 96;
  EXPECT_THROW(decode_attention(a, 1, nullptr, nullptr), InputError);
  a.head_dim = 128;
  EXPECT_THROW(decode_attention(a, 0, nullptr, nullptr), InputError);
  // The new key without its value, and a group of 16 query heads per KV head, are refused.
  DeviceBuffer row(kGpu, 4096);
  a.k_new = row.get();
  EXPECT_THROW(decode_attention(a, 1, nullptr, nullptr), InputError);
  a.v_new = row.get();
  a.heads = 32;
  a.kv_heads = 2;
  EXPECT_FALSE(decode_append_supported(a));
  EXPECT_THROW(decode_attention(a, 1, nullptr, nullptr), InputError);
  a.kv_heads = 4;
  EXPECT_TRUE(decode_append_supported(a));
}

// K/V read bandwidth of decode steps shaped like a 7B model (32 query heads, head_dim 128) with
// 32 or 8 KV heads, for the record. Caches are rotated over more than 3x L2 so that every step
// reads HBM.
TEST(DecodeAttention, ReportBandwidth) {
  DeviceGuard guard(kGpu);
  const int sms = sm_count();
  int l2 = 0, mem_khz = 0, bus_bits = 0;
  GPB_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, kGpu));
  GPB_CUDA_CHECK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, kGpu));
  GPB_CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, kGpu));
  const double peak = 2.0 * mem_khz * 1e3 * bus_bits / 8;  // bytes/s (0 if not reported)
  struct Shape {
    int batch, kv_heads, keys;
  };
  const Shape shapes[] = {{1, 32, 512},  {1, 32, 2048}, {1, 32, 8192}, {1, 32, 32768},
                          {1, 8, 512},   {1, 8, 8192},  {1, 8, 32768}, {8, 32, 512},
                          {8, 32, 2048}, {8, 32, 8192}, {8, 8, 8192}};
  Stream stream(kGpu);
  for (const Shape& s : shapes) {
    AttentionArgs a;
    a.dtype = AttnDtype::BF16;
    a.batch = s.batch;
    a.heads = 32;
    a.kv_heads = s.kv_heads;
    a.head_dim = 128;
    a.q_pos0 = s.keys - 1;
    a.max_context = s.keys;
    const std::size_t cache_bytes =
        static_cast<std::size_t>(s.batch) * s.keys * s.kv_heads * a.head_dim * 2;
    const int copies = static_cast<int>(
        std::max<std::size_t>(1, (3 * static_cast<std::size_t>(l2)) / (2 * cache_bytes) + 1));
    DeviceBuffer k(kGpu, cache_bytes * copies), v(kGpu, cache_bytes * copies);
    GPB_CUDA_CHECK(cudaMemset(k.get(), 0x3c, cache_bytes * copies));
    GPB_CUDA_CHECK(cudaMemset(v.get(), 0x3c, cache_bytes * copies));
    DeviceBuffer q(kGpu, static_cast<std::size_t>(s.batch) * a.heads * a.head_dim * 2);
    DeviceBuffer out(kGpu, q.bytes());
    GPB_CUDA_CHECK(cudaMemset(q.get(), 0x3c, q.bytes()));
    a.q = q.get();
    a.out = out.get();
    const int splits = decode_attention_splits(a, sms);
    DeviceBuffer ws(kGpu, std::max<std::size_t>(decode_workspace_bytes(a, splits), 16));
    auto run = [&](int i) {
      a.k = k.as<unsigned char>() + (i % copies) * cache_bytes;
      a.v = v.as<unsigned char>() + (i % copies) * cache_bytes;
      decode_attention(a, splits, ws.get(), stream.get());
    };
    for (int i = 0; i < 3; ++i) run(i);
    const double seconds = gpubench::testing::graph_replay_seconds(kGpu, stream.get(), 30, run);
    const double bw = 2.0 * cache_bytes / seconds;
    std::printf(
        "decode attention bf16 d128 batch %d heads 32/%d keys %6d splits %2d (chunks of %d keys,"
        " graph replay): %8.2f us/call, K+V %6.1f MB at %7.1f GB/s",
        s.batch, s.kv_heads, s.keys, splits, (s.keys + splits - 1) / splits, seconds * 1e6,
        2.0 * cache_bytes / 1e6, bw / 1e9);
    if (peak > 0) std::printf(" = %.0f%% of %.0f GB/s peak", 100 * bw / peak, peak / 1e9);
    std::printf("\n");
    EXPECT_GT(bw, 0);
  }
}
