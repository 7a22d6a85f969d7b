// POST /v1/whatif/usage's replay (sim/usage_api.h): an uploaded history answers what
// `tessera whatif --usage FILE` answers, its parameters and bad rows are refused by name.
#include "sim/usage_api.h"

#include <gtest/gtest.h>

#include <string>

namespace tessera::sim::usage {
namespace {

constexpr int64_t kGiB = 1024LL * 1024 * 1024;
constexpr int64_t kT0 = 1'700'000'000;  // epoch seconds

// Ten notebooks of 16 GiB over 6 hours of one-minute samples, each busy 6 minutes an hour in
// turn (idle 90%, never two at once): 10 whole cards, 3 under forms (caps of 18 GiB, four to a
// card), 1 with swapping, and a lower bound of 1 (usage_whatif_test.cc's known answer).
std::string TenNotebooks() {
  std::string csv = "workload,timestamp,gpu_util_pct,gpu_memory_bytes,team,requested_gpus\n";
  for (int k = 0; k < 10; ++k) {
    for (int m = 0; m < 6 * 60; ++m) {
      csv += "nb" + std::to_string(k) + "," + std::to_string(kT0 + 60 * m) + "," +
             ((m % 60) / 6 == k ? "80" : "0") + "," + std::to_string(16 * kGiB) + ",research,1\n";
    }
  }
  return csv;
}

int Cards(const nlohmann::json& r, const std::string& plan) {
  for (const auto& p : r["plans"])
    if (p["plan"] == plan) return p["cards"].get<int>();
  return -1;
}

TEST(UsageApi, AnUploadedHistoryAnswersCardsPerPlanBesideTheLowerBound) {
  auto r = WhatIfUsageReport(TenNotebooks(), {{"name", "fleet.csv"}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)["history"]["workloads"], 10);
  EXPECT_EQ((*r)["card"], "H100-80GB");
  EXPECT_EQ(Cards(*r, "whole"), 10);
  EXPECT_EQ(Cards(*r, "forms"), 3);
  EXPECT_EQ(Cards(*r, "swap"), 1);
  EXPECT_EQ((*r)["lower_bound"]["cards"], 1);
  EXPECT_EQ((*r)["workloads"][0]["duty_per_mille"], 100);
  // Parameters as the CLI's flags: a larger headroom makes caps of 20 GiB (still four a card).
  r = WhatIfUsageReport(TenNotebooks(), {{"card", "A100-80GB"}, {"headroom", "20"}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)["card"], "A100-80GB");
  EXPECT_EQ((*r)["workloads"][0]["cap_mib"], 20 * 1024);
}

TEST(UsageApi, ABadRowIsNamedByItsLineInTheUploadedFile) {
  const std::string csv =
      "workload,timestamp,gpu_util_pct,gpu_memory_bytes\n"
      "a,1700000000,50,1073741824\n"
      "a,1700000060,lots,1073741824\n";
  auto r = WhatIfUsageReport(csv, {{"name", "fleet.csv"}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("fleet.csv: line 3: gpu_util_pct"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("gpu_util_pct"), std::string::npos) << r.status().message();
  // Without a name: "upload".
  r = WhatIfUsageReport(csv, {});
  EXPECT_NE(r.status().message().find("upload: line 3"), std::string::npos) << r.status().message();
}

TEST(UsageApi, EmptyBodiesAndBadParametersAreRefusedByName) {
  auto r = WhatIfUsageReport(" \n", {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("empty"), std::string::npos) << r.status().message();
  const std::string csv = "workload,timestamp,gpu_util_pct,gpu_memory_bytes\na,1700000000,50,1\n";
  for (const auto& [key, value, said] :
       {std::tuple<std::string, std::string, std::string>{"card", "Z9000", "card: "},
        {"host_gbps", "fast", "host_gbps: 'fast'"},
        {"host_gbps", "0", "host_gbps: '0'"},
        {"headroom", "10.5", "headroom: '10.5'"},
        {"headroom", "-1", "headroom: '-1'"},
        {"cards", "3", "unknown parameter 'cards'"}}) {
    r = WhatIfUsageReport(csv, {{key, value}});
    ASSERT_FALSE(r.ok()) << key << "=" << value;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(said), std::string::npos)
        << key << "=" << value << ": " << r.status().message();
  }
}

}  // namespace
}  // namespace tessera::sim::usage
