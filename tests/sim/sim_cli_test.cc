// Runs the real `tessera sim openb` on the traces shipped in bench/traces.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/shell.h"

namespace {

const std::string kTessera = TESSERA_BINARY_DIR "/src/cli/tessera";
const std::string kTraces = TESSERA_SOURCE_DIR "/bench/traces/alibaba-openb/";

using CmdResult = tessera::testing::ShellResult;

CmdResult Sh(const std::string& cmd) { return tessera::testing::RunShell(cmd); }

TEST(SimCliTest, OpenbJsonAndPlot) {
  const std::string plot = ::testing::TempDir() + "/curves.svg";
  CmdResult r =
      Sh(kTessera + " sim openb --nodes " + kTraces + "openb_node_list_gpu_node.csv --pods " +
         kTraces + "openb_pod_list_default.csv --policy fgd,tessera --seeds 42-43 --json --plot " +
         plot + " 2>/dev/null");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 2u);
  for (const auto& run : j) {
    EXPECT_EQ(run["trace"], "openb_pod_list_default");
    EXPECT_EQ(run["seeds"], nlohmann::json::array({42, 43}));
    for (const char* pct : {"90", "95", "100", "110", "120", "130"}) {
      const auto& st = run["unallocated_gpu_pct"][pct];
      EXPECT_GE(st["mean"].template get<double>(), 0.0);
      EXPECT_LE(st["mean"].template get<double>(), 100.0);
      EXPECT_TRUE(st.contains("median") && st.contains("sd"));
    }
  }
  std::ifstream svg(plot);
  std::string text((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("<polyline"), std::string::npos);
  EXPECT_NE(text.find("tessera"), std::string::npos);
}

TEST(SimCliTest, TruncatedTraceIsRefusedWithFileLineColumn) {
  const std::string bad = ::testing::TempDir() + "/truncated.csv";
  {
    std::ofstream out(bad);
    out << "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,1,500\np1,1000,10";
  }
  CmdResult r = Sh(kTessera + " sim openb --nodes " + kTraces +
                   "openb_node_list_gpu_node.csv --pods " + bad + " --policy fgd --seeds 1 2>&1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("truncated.csv:3: expected 5 columns, found 3"), std::string::npos) << r.out;
  r = Sh(kTessera + " sim openb --nodes " + kTraces + "openb_node_list_gpu_node.csv --pods " + bad +
         " --policy nosuch 2>&1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("unknown policy 'nosuch'"), std::string::npos) << r.out;
}

// An output it cannot write is said before the replay, not after minutes of it; a negative
// thread count is refused as it is parsed.
TEST(SimCliTest, AnOutputItCannotWriteIsRefusedBeforeTheReplay) {
  for (const char* flag : {"--csv", "--plot"}) {
    CmdResult r =
        Sh(kTessera + " sim openb --nodes " + kTraces + "openb_node_list_gpu_node.csv --pods " +
           kTraces + "openb_pod_list_default.csv --policy tessera --seeds 42 " + flag +
           " /nonexistent-dir/out 2>&1");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("cannot write '/nonexistent-dir/out'"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("unallocated"), std::string::npos) << "it replayed first:\n" << r.out;
  }
  // A file that is there already is written in place, whatever its directory (/dev/stdout).
  CmdResult out =
      Sh(kTessera + " sim openb --nodes " + kTraces + "openb_node_list_gpu_node.csv --pods " +
         kTraces + "openb_pod_list_default.csv --policy tessera --seeds 42 --csv /dev/stdout 2>&1");
  EXPECT_EQ(out.code, 0) << out.out;
  CmdResult r =
      Sh(kTessera + " sim openb --nodes " + kTraces + "openb_node_list_gpu_node.csv --pods " +
         kTraces + "openb_pod_list_default.csv --threads -3 2>&1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--threads"), std::string::npos) << r.out;
}

TEST(BenchCliTest, PlacementJson) {
  CmdResult r = Sh(kTessera + " bench placement --nodes 200 --jobs 2000 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["jobs"], 2000);
  EXPECT_GT(j["placements_per_second"].get<double>(), 0);
  EXPECT_GE(j["latency_us"]["p99"].get<double>(), j["latency_us"]["p50"].get<double>());
  EXPECT_GT(j["peak_rss_mib"].get<double>(), 0);
}

}  // namespace
