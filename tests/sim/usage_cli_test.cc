// Runs the real `tessera whatif --usage` (no server) on a small telemetry file: text, JSON and the
// HTML report, and a bad row refused with its line and field.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "support/shell.h"

namespace {

const std::string kTessera = TESSERA_BINARY_DIR "/src/cli/tessera";

using CmdResult = tessera::testing::ShellResult;

CmdResult Sh(const std::string& cmd) { return tessera::testing::RunShell(cmd); }

// Two notebooks of 30 GiB that take turns every half hour, for 6 hours.
std::string WriteCsv() {
  const std::string path = ::testing::TempDir() + "/fleet.csv";
  std::ofstream f(path);
  f << "workload,timestamp,gpu_util_pct,gpu_memory_bytes,team\n";
  for (int m = 0; m < 360; ++m) {
    const bool first = (m / 30) % 2 == 0;
    f << "nb-a," << 1'700'000'000 + 60 * m << "," << (first ? 70 : 0) << "," << (30LL << 30)
      << ",research\n";
    f << "nb-b," << 1'700'000'000 + 60 * m << "," << (first ? 0 : 70) << "," << (30LL << 30)
      << ",vision\n";
  }
  return path;
}

TEST(UsageCliTest, JsonTextAndHtml) {
  const std::string csv = WriteCsv(), html = ::testing::TempDir() + "/report.html";
  CmdResult r =
      Sh(kTessera + " whatif --usage " + csv + " --json --html " + html + " --host-gbps 25 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["card"], "H100-80GB");
  EXPECT_EQ(j["options"]["host_mbps"], 25000);
  EXPECT_EQ(j["history"]["workloads"], 2);
  EXPECT_EQ(j["history"]["samples"], 720);
  EXPECT_EQ(j["lower_bound"]["cards"], 1);  // one of 30 GiB active at a time
  ASSERT_EQ(j["plans"].size(), 3u);
  EXPECT_EQ(j["plans"][0]["cards"], 2);  // whole cards
  EXPECT_LE(j["plans"][2]["cards"].get<int>(), 1);
  EXPECT_GT(j["plans"][2]["wakes_from_swap"].get<int>(), 0);
  EXPECT_TRUE(j["plans"][2]["teams"].contains("vision"));
  std::ifstream f(html);
  const std::string page((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("<svg"), std::string::npos);
  r = Sh(kTessera + " whatif --usage " + csv + " 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("lower bound"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nb-a"), std::string::npos);
}

TEST(UsageCliTest, BadRowIsRefusedWithItsLine) {
  const std::string bad = ::testing::TempDir() + "/bad.csv";
  {
    std::ofstream f(bad);
    f << "workload,timestamp,gpu_util_pct,gpu_memory_bytes\na,1700000000,50,1\na,1700000060,"
         "lots,1\n";
  }
  CmdResult r = Sh(kTessera + " whatif --usage " + bad + " 2>&1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("line 3: gpu_util_pct: 'lots'"), std::string::npos) << r.out;
  r = Sh(kTessera + " whatif --usage " + bad + " --host-gbps fast 2>&1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--host-gbps"), std::string::npos) << r.out;
}

}  // namespace
