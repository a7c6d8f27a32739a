// Host-only tests of the health snapshot's JSON: what to_json writes, from_json reads back.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpubench/core/health.hpp"

using namespace gpubench;

namespace {

// A snapshot with every counter read, on two GPUs, one with two NVLinks.
HealthSnapshot filled() {
  HealthSnapshot s;
  s.taken_at = "2026-11-22T07:31:16Z";
  s.driver = "580.159.04";
  GpuHealth g;
  g.gpu = 0;
  g.bus_id = "0000:1b:00.0";
  g.ecc_enabled = true;
  g.ecc_corrected_volatile = 3;
  g.ecc_uncorrected_volatile = 0;
  g.ecc_corrected_total = 12345678901234ULL;  // beyond 32 bits: kept exact
  g.ecc_uncorrected_total = 1;
  g.retired_pages_sbe = 2;
  g.retired_pages_dbe = 0;
  g.retirement_pending = false;
  g.remapped_rows_corrected = 4;
  g.remapped_rows_uncorrected = 1;
  g.remap_pending = true;
  g.remap_failed = false;
  g.pcie_replays = 7;
  g.pcie_gen = 5;
  g.pcie_gen_max = 5;
  g.pcie_width = 16;
  g.pcie_width_max = 16;
  g.temperature_C = 41;
  g.slowdown_temperature_C = 87;
  g.clocks_event_reasons = 0x1;
  g.persistence_mode = true;
  g.mig_enabled = false;
  g.other_processes = std::vector<unsigned>{1234, 5678};
  LinkHealth up;
  up.link = 0;
  up.active = true;
  up.remote_bus_id = "0000:c1:00.0";
  up.crc_flit = 1;
  up.crc_data = 2;
  up.replay = 3;
  up.recovery = 4;
  LinkHealth down;
  down.link = 1;
  down.active = false;
  g.links = {up, down};
  s.gpus.push_back(g);
  GpuHealth other = g;
  other.gpu = 1;
  other.bus_id = "0000:2a:00.0";
  other.other_processes = std::vector<unsigned>{};  // read: none running
  other.links.clear();
  s.gpus.push_back(other);
  return s;
}

// Every field of two link lists, compared one by one (gtest prints which differs).
void expect_same_links(const std::vector<LinkHealth>& a, const std::vector<LinkHealth>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE("link " + std::to_string(i));
    EXPECT_EQ(a[i].link, b[i].link);
    EXPECT_EQ(a[i].active, b[i].active);
    EXPECT_EQ(a[i].remote_bus_id, b[i].remote_bus_id);
    EXPECT_EQ(a[i].crc_flit, b[i].crc_flit);
    EXPECT_EQ(a[i].crc_data, b[i].crc_data);
    EXPECT_EQ(a[i].replay, b[i].replay);
    EXPECT_EQ(a[i].recovery, b[i].recovery);
  }
}

void expect_same(const HealthSnapshot& a, const HealthSnapshot& b) {
  EXPECT_EQ(a.taken_at, b.taken_at);
  EXPECT_EQ(a.driver, b.driver);
  EXPECT_EQ(a.unavailable, b.unavailable);
  ASSERT_EQ(a.gpus.size(), b.gpus.size());
  for (std::size_t i = 0; i < a.gpus.size(); ++i) {
    const GpuHealth& x = a.gpus[i];
    const GpuHealth& y = b.gpus[i];
    SCOPED_TRACE("GPU " + std::to_string(x.gpu));
    EXPECT_EQ(x.gpu, y.gpu);
    EXPECT_EQ(x.bus_id, y.bus_id);
    EXPECT_EQ(x.ecc_enabled, y.ecc_enabled);
    EXPECT_EQ(x.ecc_corrected_volatile, y.ecc_corrected_volatile);
    EXPECT_EQ(x.ecc_uncorrected_volatile, y.ecc_uncorrected_volatile);
    EXPECT_EQ(x.ecc_corrected_total, y.ecc_corrected_total);
    EXPECT_EQ(x.ecc_uncorrected_total, y.ecc_uncorrected_total);
    EXPECT_EQ(x.retired_pages_sbe, y.retired_pages_sbe);
    EXPECT_EQ(x.retired_pages_dbe, y.retired_pages_dbe);
    EXPECT_EQ(x.retirement_pending, y.retirement_pending);
    EXPECT_EQ(x.remapped_rows_corrected, y.remapped_rows_corrected);
    EXPECT_EQ(x.remapped_rows_uncorrected, y.remapped_rows_uncorrected);
    EXPECT_EQ(x.remap_pending, y.remap_pending);
    EXPECT_EQ(x.remap_failed, y.remap_failed);
    EXPECT_EQ(x.pcie_replays, y.pcie_replays);
    EXPECT_EQ(x.pcie_gen, y.pcie_gen);
    EXPECT_EQ(x.pcie_gen_max, y.pcie_gen_max);
    EXPECT_EQ(x.pcie_width, y.pcie_width);
    EXPECT_EQ(x.pcie_width_max, y.pcie_width_max);
    EXPECT_EQ(x.temperature_C, y.temperature_C);
    EXPECT_EQ(x.slowdown_temperature_C, y.slowdown_temperature_C);
    EXPECT_EQ(x.clocks_event_reasons, y.clocks_event_reasons);
    EXPECT_EQ(x.persistence_mode, y.persistence_mode);
    EXPECT_EQ(x.mig_enabled, y.mig_enabled);
    EXPECT_EQ(x.other_processes, y.other_processes);
    expect_same_links(x.links, y.links);
  }
}

}  // namespace

TEST(HealthJson, FilledSnapshotRoundTrips) {
  const HealthSnapshot s = filled();
  const nlohmann::ordered_json j = s.to_json();
  const HealthSnapshot back = HealthSnapshot::from_json(j);
  expect_same(s, back);
  EXPECT_EQ(back.to_json(), j);
  // Through text too, as a report file carries it.
  expect_same(s, HealthSnapshot::from_json(nlohmann::ordered_json::parse(j.dump())));
}

TEST(HealthJson, FieldsAreNamedAsInTheStruct) {
  const nlohmann::ordered_json j = filled().to_json();
  EXPECT_EQ(j.at("taken_at"), "2026-11-22T07:31:16Z");
  EXPECT_EQ(j.at("driver"), "580.159.04");
  EXPECT_EQ(j.at("unavailable"), "");
  const auto& g = j.at("gpus").at(0);
  EXPECT_EQ(g.at("gpu"), 0);
  EXPECT_EQ(g.at("bus_id"), "0000:1b:00.0");
  EXPECT_EQ(g.at("ecc_corrected_total").get<std::uint64_t>(), 12345678901234ULL);
  EXPECT_EQ(g.at("remap_pending"), true);
  EXPECT_EQ(g.at("slowdown_temperature_C"), 87);
  EXPECT_EQ(g.at("other_processes"), nlohmann::ordered_json({1234, 5678}));
  ASSERT_TRUE(g.at("links").is_array());
  const auto& link = g.at("links").at(0);
  EXPECT_EQ(link.at("link"), 0);
  EXPECT_EQ(link.at("active"), true);
  EXPECT_EQ(link.at("remote_bus_id"), "0000:c1:00.0");
  EXPECT_EQ(link.at("crc_flit"), 1);
  EXPECT_EQ(link.at("recovery"), 4);
  EXPECT_EQ(j.at("gpus").at(1).at("other_processes"), nlohmann::ordered_json::array());
}

TEST(HealthJson, EmptyCountersAreNullAndStayEmpty) {
  HealthSnapshot s;
  s.taken_at = "2026-11-22T07:31:16Z";
  s.unavailable = "NVML has no device for GPU 1";
  GpuHealth g;  // nothing read: every counter empty
  g.gpu = 1;
  g.bus_id = "0000:2a:00.0";
  LinkHealth l;  // a link whose state and counters NVML did not give
  l.link = 3;
  g.links.push_back(l);
  s.gpus.push_back(g);

  const nlohmann::ordered_json j = s.to_json();
  EXPECT_TRUE(j.at("driver").is_null());
  const auto& gj = j.at("gpus").at(0);
  for (const char* key :
       {"ecc_enabled", "ecc_corrected_volatile", "ecc_uncorrected_total", "retired_pages_sbe",
        "retirement_pending", "remapped_rows_uncorrected", "remap_failed", "pcie_replays",
        "pcie_gen", "temperature_C", "slowdown_temperature_C", "clocks_event_reasons",
        "persistence_mode", "mig_enabled", "other_processes"}) {
    ASSERT_TRUE(gj.contains(key)) << key;
    EXPECT_TRUE(gj.at(key).is_null()) << key << " must be null, never 0";
  }
  for (const char* key : {"active", "remote_bus_id", "crc_flit", "crc_data", "replay", "recovery"})
    EXPECT_TRUE(gj.at("links").at(0).at(key).is_null()) << key;

  const HealthSnapshot back = HealthSnapshot::from_json(j);
  expect_same(s, back);
  EXPECT_FALSE(back.gpus.at(0).other_processes.has_value());
  EXPECT_EQ(back.to_json(), j);
}

TEST(HealthJson, MissingKeysReadAsEmpty) {
  const auto j = nlohmann::ordered_json::parse(
      R"({"taken_at": "2026-11-22T07:31:16Z", "gpus": [{"gpu": 2, "pcie_gen": 4,
          "links": [{"link": 5, "crc_data": 9}]}]})");
  const HealthSnapshot s = HealthSnapshot::from_json(j);
  EXPECT_EQ(s.taken_at, "2026-11-22T07:31:16Z");
  EXPECT_FALSE(s.driver.has_value());
  EXPECT_EQ(s.unavailable, "");
  ASSERT_EQ(s.gpus.size(), 1u);
  const GpuHealth& g = s.gpus[0];
  EXPECT_EQ(g.gpu, 2);
  EXPECT_EQ(g.bus_id, "");
  EXPECT_EQ(g.pcie_gen, 4);
  EXPECT_FALSE(g.ecc_enabled.has_value());
  EXPECT_FALSE(g.other_processes.has_value());
  ASSERT_EQ(g.links.size(), 1u);
  EXPECT_EQ(g.links[0].link, 5u);
  EXPECT_EQ(g.links[0].crc_data, 9u);
  EXPECT_FALSE(g.links[0].active.has_value());
  EXPECT_TRUE(HealthSnapshot::from_json(nlohmann::ordered_json::object()).gpus.empty());
}

TEST(HealthJson, FindByCudaIndex) {
  const HealthSnapshot s = filled();
  ASSERT_NE(s.find(0), nullptr);
  EXPECT_EQ(s.find(0)->bus_id, "0000:1b:00.0");
  ASSERT_NE(s.find(1), nullptr);
  EXPECT_EQ(s.find(1)->bus_id, "0000:2a:00.0");
  EXPECT_EQ(s.find(2), nullptr);
  EXPECT_EQ(s.find(-1), nullptr);
  EXPECT_EQ(HealthSnapshot{}.find(0), nullptr);
}
