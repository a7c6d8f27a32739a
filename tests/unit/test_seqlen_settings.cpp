// `gpubench seqlen` settings: defaults per mode, list and range parsing, the model's positions
// (learned tables cut, RoPE past its context only when forced or by default), bad input.
#include <gtest/gtest.h>

#include <string>

#include "../../src/modules/seqlen/seqlen.hpp"
#include "gpubench/core/errors.hpp"
#include "input_error.hpp"

using namespace gpubench;
using namespace gpubench::seqlen;

namespace {

std::string error_of(const Options& o, bool quick = false) {
  return gpubench::testing::input_error_of([&] { (void)resolve_settings(o, quick); });
}

bool has(const std::string& text, const std::string& part) {
  return gpubench::testing::contains(text, part);
}

}  // namespace

TEST(SeqlenSettings, DefaultsPerMode) {
  const Settings full = resolve_settings(Options{}, false);
  EXPECT_EQ(full.model.name, "llama-2-7b");
  EXPECT_EQ(full.layers, 32);
  EXPECT_EQ(full.seq_lens, (std::vector<std::int64_t>{128, 256, 512, 1024, 2048, 4096, 8192}));
  EXPECT_EQ(full.batch_sizes, (std::vector<std::int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(full.output_lens, (std::vector<std::int64_t>{50, 100, 200}));
  ASSERT_EQ(full.notes.size(), 1u);  // 8192 + 200 passes llama-2-7b's 4096 positions
  EXPECT_TRUE(has(full.notes[0], "4096"));
  const Settings quick = resolve_settings(Options{}, true);
  EXPECT_EQ(quick.seq_lens, (std::vector<std::int64_t>{512, 2048}));
  EXPECT_EQ(quick.batch_sizes, (std::vector<std::int64_t>{1}));
  EXPECT_TRUE(quick.notes.empty());
  EXPECT_EQ(full.to_json()["dtype"], "bf16");
}

TEST(SeqlenSettings, ParsesListsAndRanges) {
  EXPECT_EQ(parse_counts("128:1024:x2", "--seq-lens", 1 << 20),
            (std::vector<std::int64_t>{128, 256, 512, 1024}));
  EXPECT_EQ(parse_counts("100:300:100", "--seq-lens", 1 << 20),
            (std::vector<std::int64_t>{100, 200, 300}));
  EXPECT_EQ(parse_counts("8,2,8", "--batch-sizes", 64), (std::vector<std::int64_t>{2, 8}));
  for (const char* bad : {"", "0", "-1", "2:1:1", "1:8:x1", "1:2", "a", "1:100000:1", "65"})
    EXPECT_THROW(parse_counts(bad, "--batch-sizes", 64), InputError) << bad;
}

TEST(SeqlenSettings, PositionsOfTheModel) {
  Options o;
  o.seq_lens = "2048,8192";
  EXPECT_TRUE(has(error_of(o), "--force-length"));  // llama-2-7b: 4096 positions
  o.force_length = true;
  EXPECT_EQ(error_of(o), "");
  Options opt;
  opt.model = "opt-125m";  // learned table of 2048 rows: the default sweep is cut
  const Settings s = resolve_settings(opt, false);
  EXPECT_EQ(s.seq_lens.back(), 1024);
  ASSERT_EQ(s.notes.size(), 1u);
  EXPECT_TRUE(has(s.notes[0], "learned"));
  opt.seq_lens = "4096";
  opt.force_length = true;  // cannot force past a learned table
  EXPECT_TRUE(has(error_of(opt), "learned position table"));
  Options llama3;
  llama3.model = "llama-3-8b";  // 8192 positions: 8192 + 200 still passes, noted
  EXPECT_EQ(resolve_settings(llama3, false).notes.size(), 1u);
}

TEST(SeqlenSettings, BadInputNamesTheOption) {
  Options o;
  o.model = "no-such-model";
  EXPECT_TRUE(has(error_of(o), "no-such-model"));
  o = Options{};
  o.dtype = "fp8";
  EXPECT_TRUE(has(error_of(o), "--dtype"));
  o = Options{};
  o.layers = 33;
  EXPECT_TRUE(has(error_of(o), "--layers"));
  o = Options{};
  o.batch_sizes = "0";
  EXPECT_TRUE(has(error_of(o), "--batch-sizes"));
  o = Options{};
  o.model_config = "/no/such/config.json";
  EXPECT_TRUE(has(error_of(o), "no such file"));
  o = Options{};
  o.layers = 2;
  EXPECT_EQ(resolve_settings(o, true).layers, 2);
}
