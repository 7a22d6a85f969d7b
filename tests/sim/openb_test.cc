#include "sim/openb.h"

#include <gtest/gtest.h>

#include "sim/replay.h"
#include "sim/report.h"

namespace tessera::sim {
namespace {

const char* kNodes =
    "sn,cpu_milli,memory_mib,gpu,model\n"
    "n0,32000,131072,2,T4\n"
    "n1,64000,262144,4,G2\n"
    "n2,16000,65536,0,\n";

const char* kPodHeader =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n";

TEST(OpenbReaderTest, ReadsNodesAndPods) {
  auto nodes = ParseOpenbNodes(kNodes, "nodes.csv");
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 3u);
  EXPECT_EQ((*nodes)[1].devices.size(), 4u);
  EXPECT_EQ((*nodes)[1].gpu_model(), "G2");
  EXPECT_TRUE((*nodes)[2].devices.empty());
  auto pods = ParseOpenbPods(std::string(kPodHeader) +
                                 "p0,4000,8192,1,500,T4|G2,LS,Running,0,10,0\n"
                                 "p1,8000,16384,2,1000,,BE,Running,1,10,1\n"
                                 "p2,2000,4096,0,0,,BE,Running,1,10,1\n",
                             "pods.csv");
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  ASSERT_EQ(pods->size(), 3u);
  EXPECT_EQ((*pods)[0].gpu_spec, (std::vector<std::string>{"T4", "G2"}));
  EXPECT_EQ((*pods)[1].num_gpu, 2);
  // The five-column multigpu layout is accepted too.
  EXPECT_TRUE(
      ParseOpenbPods("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,1024,1,300\n", "m.csv")
          .ok());
}

struct BadCase {
  std::string text;
  std::string want;  // substring of the message
};

TEST(OpenbReaderTest, MalformedRowsNameFileLineAndColumn) {
  const std::string h = kPodHeader;
  const BadCase cases[] = {
      {h + "p0,4000,8192,1,500,,LS,Running,0,10,0\np1,4000,8192,1\n",
       "pods.csv:3: expected 11 columns, found 4 (truncated row?)"},
      {h + "p0,4x00,8192,1,500,,LS,Running,0,10,0\n", "pods.csv:2: column 2 (cpu_milli): '4x00'"},
      {h + "p0,4000,8192,1,1500,,LS,Running,0,10,0\n",
       "pods.csv:2: column 5 (gpu_milli): gpu_milli above 1000"},
      {h + "p0,4000,8192,2,500,,LS,Running,0,10,0\n",
       "column 5 (gpu_milli): multi-GPU pods must take whole GPUs"},
      {h + "p0,4000,8192,1,500,T4||G2,LS,Running,0,10,0\n", "column 6 (gpu_spec): empty model"},
      {h + "p0,-1,8192,1,500,,LS,Running,0,10,0\n", "column 2 (cpu_milli)"},
      {"name,cpu,memory_mib,num_gpu,gpu_milli\n",
       "pods.csv:1: column 2 of the header should be 'cpu_milli'"},
      {h, "pods.csv: no pod rows"},
      {"", "pods.csv: empty file"},
  };
  for (const BadCase& c : cases) {
    auto pods = ParseOpenbPods(c.text, "pods.csv");
    ASSERT_FALSE(pods.ok()) << c.want;
    EXPECT_NE(pods.status().message().find(c.want), std::string::npos)
        << "got: " << pods.status().message() << "\nwant: " << c.want;
  }
  auto nodes = ParseOpenbNodes("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,2,\n", "n.csv");
  ASSERT_FALSE(nodes.ok());
  EXPECT_NE(nodes.status().message().find("n.csv:2: column 5 (model)"), std::string::npos);
  EXPECT_EQ(ReadOpenbNodes("/nonexistent/nodes.csv").status().code(), StatusCode::kNotFound);
}

std::vector<TracePod> SmallTrace() {
  std::vector<TracePod> pods;
  for (int i = 0; i < 60; ++i) {
    TracePod p;
    p.name = "p" + std::to_string(100 + i);
    p.cpu_milli = 1000 + (i % 4) * 500;
    p.memory_mib = 2048;
    p.num_gpu = i % 10 == 0 ? 2 : (i % 5 == 0 ? 0 : 1);
    p.gpu_milli = p.num_gpu == 0 ? 0 : (p.num_gpu == 2 || i % 3 == 0 ? 1000 : 250 + (i % 3) * 100);
    pods.push_back(p);
  }
  return pods;
}

TEST(ReplayTest, FollowsTheProtocolAndKeepsInvariants) {
  auto nodes = ParseOpenbNodes(kNodes, "nodes.csv");
  ASSERT_TRUE(nodes.ok());
  for (const std::string policy : {"random", "bestfit", "fgd", "tessera"}) {
    ReplayOptions o;
    o.policy = policy;
    o.seed = 3;
    o.check_invariants = true;
    auto c = ReplayOpenb(*nodes, SmallTrace(), o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->capacity, 6000);
    ASSERT_EQ(c->unallocated_pct.size(), 131u);
    EXPECT_DOUBLE_EQ(c->unallocated_pct[0], 100.0);
    // Nothing leaves, so unallocated never grows, and it never drops below the ideal line.
    for (int p = 1; p <= 130; ++p) {
      EXPECT_LE(c->unallocated_pct[p], c->unallocated_pct[p - 1] + 1e-9) << policy << " " << p;
      EXPECT_GE(c->unallocated_pct[p], std::max(0.0, 100.0 - p) - 1e-9) << policy << " " << p;
    }
    EXPECT_GT(c->dropped, 0) << "tuned to 130% of capacity, something must be dropped";
  }
}

TEST(ReplayTest, SameSeedSameCurveOtherSeedOtherOrder) {
  auto nodes = ParseOpenbNodes(kNodes, "nodes.csv");
  ReplayOptions o;
  o.policy = "bestfit";
  o.seed = 1;
  auto a = ReplayOpenb(*nodes, SmallTrace(), o);
  auto b = ReplayOpenb(*nodes, SmallTrace(), o);
  EXPECT_EQ(a->unallocated_pct, b->unallocated_pct);
  bool differs = false;
  for (uint64_t seed = 2; seed < 12 && !differs; ++seed) {
    o.seed = seed;
    differs = ReplayOpenb(*nodes, SmallTrace(), o)->unallocated_pct != a->unallocated_pct;
  }
  EXPECT_TRUE(differs);
}

TEST(ReplayTest, UnknownPolicyIsAnError) {
  auto nodes = ParseOpenbNodes(kNodes, "nodes.csv");
  ReplayOptions o;
  o.policy = "nope";
  EXPECT_FALSE(ReplayOpenb(*nodes, SmallTrace(), o).ok());
}

TEST(SweepTest, SeedsStatsAndReports) {
  auto seeds = ParseSeeds("42-45");
  ASSERT_TRUE(seeds.ok());
  EXPECT_EQ(*seeds, (std::vector<uint64_t>{42, 43, 44, 45}));
  EXPECT_EQ(*ParseSeeds("1,5,7-8"), (std::vector<uint64_t>{1, 5, 7, 8}));
  EXPECT_FALSE(ParseSeeds("5-1").ok());
  EXPECT_FALSE(ParseSeeds("a").ok());
  EXPECT_FALSE(ParseSeeds("1,,2").ok());

  Stat s = Summarize({1.0, 2.0, 3.0, 10.0});
  EXPECT_DOUBLE_EQ(s.mean, 4.0);
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_NEAR(s.sd, 4.0825, 1e-4);

  auto nodes = ParseOpenbNodes(kNodes, "nodes.csv");
  int calls = 0;
  auto sweep = SweepSeeds(*nodes, SmallTrace(), "fgd", *seeds, 1300, 2, [&](int, int) { ++calls; });
  ASSERT_TRUE(sweep.ok());
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(sweep->curves.size(), 4u);
  std::string table = FormatTable("small", {*sweep});
  EXPECT_NE(table.find("fgd"), std::string::npos);
  std::string csv = FormatCsv("small", {*sweep});
  EXPECT_NE(csv.find("small,fgd,100,"), std::string::npos);
  std::string svg = RenderSvg("curves", {*sweep});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find("fgd ("), std::string::npos);
}

}  // namespace
}  // namespace tessera::sim

namespace tessera::sim {
namespace {

TEST(TimedReplayTest, QueuesInsteadOfDroppingAndFollowsTheTraceClock) {
  auto nodes = ParseOpenbNodes("sn,cpu_milli,memory_mib,gpu,model\nn0,8000,65536,1,T4\n", "n.csv");
  ASSERT_TRUE(nodes.ok());
  auto pods =
      ParseOpenbPods(std::string(kPodHeader) +
                         "a,1000,1024,1,1000,,LS,Running,100,400,100\n"   // holds the GPU 100..400
                         "b,1000,1024,1,600,,LS,Running,150,250,150\n"    // waits until 400
                         "c,1000,1024,0,0,,LS,Running,160,170,160\n"      // CPU only: runs at once
                         "d,1000,1024,2,1000,,LS,Running,170,180,170\n",  // 2 GPUs: never fits
                     "p.csv");
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  auto r = ReplayOpenbTimed(*nodes, *pods, "tessera", 1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->pods, 4);
  EXPECT_EQ(r->started, 3);
  EXPECT_EQ(r->never_schedulable, 1);
  EXPECT_DOUBLE_EQ(r->wait_max_s, 250.0);  // b arrived at 150, started at 400
  EXPECT_EQ(r->makespan_s, 400 + 100 - 100);
  EXPECT_DOUBLE_EQ(r->gpu_allocated_peak_pct, 100.0);
  // Compressing arrivals 10x: b arrives at 15, a at 10 (held until 310); b waits 295.
  auto c = ReplayOpenbTimed(*nodes, *pods, "tessera", 1, 10);
  ASSERT_TRUE(c.ok());
  EXPECT_DOUBLE_EQ(c->wait_max_s, 295.0);
  // A trace without times is refused.
  auto no_times =
      ParseOpenbPods("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,1024,1,300\n", "m.csv");
  auto bad = ReplayOpenbTimed(*nodes, *no_times, "tessera", 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("needs a trace with times"), std::string::npos);
}

}  // namespace
}  // namespace tessera::sim
