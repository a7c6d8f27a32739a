// The INI reader: sections, comments, strictness, and argument lists for CLI11.
#include <gtest/gtest.h>

#include "gpubench/core/config.hpp"
#include "gpubench/core/errors.hpp"

using namespace gpubench;

TEST(Ini, SectionsKeysAndComments) {
  const auto ini = parse_ini(
      "; comment\n# another\n[common]\nquick = true\n\n[bandwidth]\nhbm-size = 1G   ; trailing\n"
      "sweep-sizes = 1M,16M\nname = \"quoted value\"\n",
      "t.ini");
  ASSERT_EQ(ini.sections.size(), 2u);
  const IniSection* bw = ini.find("bandwidth");
  ASSERT_NE(bw, nullptr);
  ASSERT_EQ(bw->entries.size(), 3u);
  EXPECT_EQ(bw->entries[0].value, "1G");
  EXPECT_EQ(bw->entries[1].value, "1M,16M");
  EXPECT_EQ(bw->entries[2].value, "quoted value");
  EXPECT_EQ(bw->entries[0].line, 7);
  EXPECT_EQ(ini.find("nope"), nullptr);
}

TEST(Ini, StrictErrorsNameTheLine) {
  try {
    parse_ini("[a]\nx = 1\nno equals here\n", "f.ini");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("f.ini:3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_ini("x = 1\n", "f.ini"), InputError);          // outside a section
  EXPECT_THROW(parse_ini("[a]\nx=1\nx=2\n", "f.ini"), InputError);  // duplicate key
  EXPECT_THROW(parse_ini("[a]\n[a]\n", "f.ini"), InputError);       // duplicate section
  EXPECT_THROW(parse_ini("[a\n", "f.ini"), InputError);             // malformed header
  EXPECT_THROW(parse_ini("[]\n", "f.ini"), InputError);             // empty name
  EXPECT_THROW(parse_ini("[a]\n= 3\n", "f.ini"), InputError);       // empty key
}

TEST(Ini, HashInsideValueStays) {
  const auto ini = parse_ini("[a]\nk = a#b\n", "f.ini");
  EXPECT_EQ(ini.find("a")->entries[0].value, "a#b");
}

TEST(Ini, MissingFile) {
  EXPECT_THROW(load_ini("/nonexistent/x.ini"), InputError);
}

TEST(Ini, SectionArgs) {
  const auto ini = parse_ini("[common]\nquick = true\nno-files = false\ngpus = 0,1\n", "f.ini");
  const auto args = section_args(ini, "common", {"quick", "no-files"});
  EXPECT_EQ(args, (std::vector<std::string>{"--quick", "--gpus=0,1"}));
  EXPECT_TRUE(section_args(ini, "absent").empty());
  const auto bad = parse_ini("[common]\nquick = maybe\n", "f.ini");
  EXPECT_THROW(section_args(bad, "common", {"quick"}), InputError);
}
