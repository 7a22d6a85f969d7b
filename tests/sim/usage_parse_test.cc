// The telemetry readers of `tessera whatif --usage`: CSV and Prometheus range-query JSON.
#include <gtest/gtest.h>

#include <string>

#include "sim/usage_history.h"

namespace tessera::sim::usage {
namespace {

Status Csv(const std::string& text, History* h) { return ParseUsageCsv(text, "f.csv", h); }

TEST(UsageParse, DecimalsAreExact) {
  int64_t v = 0;
  ASSERT_TRUE(ParseDecimal("12.5", 10, &v));
  EXPECT_EQ(v, 125);
  ASSERT_TRUE(ParseDecimal("0.8734", 1000, &v));
  EXPECT_EQ(v, 873);
  ASSERT_TRUE(ParseDecimal("2.5e1", 1, &v));
  EXPECT_EQ(v, 25);
  ASSERT_TRUE(ParseDecimal("1700000000.25", 1000, &v));
  EXPECT_EQ(v, 1'700'000'000'250);
  EXPECT_FALSE(ParseDecimal("-1", 1, &v));
  EXPECT_FALSE(ParseDecimal("abc", 1, &v));
  EXPECT_FALSE(ParseDecimal("1e400", 1, &v));
  EXPECT_FALSE(ParseDecimal("", 1, &v));
}

TEST(UsageParse, CsvReadsEveryColumnInAnyOrder) {
  History h;
  const std::string text =
      "timestamp,workload,gpu_memory_bytes,gpu_util_pct,requested_gpus,team\n"
      "1700000000,ns/a,1073741824,50,2,ml\n"
      "2023-11-14T22:14:20Z,ns/a,1073741825,12.5,2,ml\n"
      "1700000000,\"b,with comma\",0,,,\n";
  Status s = Csv(text, &h);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(h.workloads.size(), 2u);
  const Series& a = h.workloads[0];
  EXPECT_EQ(a.name, "ns/a");
  EXPECT_EQ(a.team, "ml");
  EXPECT_EQ(a.gpus, 2);
  ASSERT_EQ(a.samples.size(), 2u);
  EXPECT_EQ(a.samples[0].t_ms, 1'700'000'000'000);
  EXPECT_EQ(a.samples[0].mem_mib, 1024);
  EXPECT_EQ(a.samples[0].util_pm, 500);
  EXPECT_EQ(a.samples[1].t_ms, 1'700'000'060'000);  // the same instant + 60 s, as a date
  EXPECT_EQ(a.samples[1].mem_mib, 1025);            // bytes rounded up to MiB
  EXPECT_EQ(a.samples[1].util_pm, 125);
  EXPECT_EQ(h.workloads[1].name, "b,with comma");
  EXPECT_EQ(h.workloads[1].samples[0].util_pm, -1);  // empty: not sampled
  EXPECT_EQ(h.stats.rows, 3);
}

TEST(UsageParse, CsvBadRowsAreNamedByLineAndField) {
  const std::string head = "workload,timestamp,gpu_util_pct,gpu_memory_bytes\n";
  struct Case {
    std::string body, want;
  } cases[] = {
      {"a,1700000000,50,100\na,1700000060,150,100\n", "line 3: gpu_util_pct: '150'"},
      {"a,1700000000,50,100\na,yesterday,5,100\n", "line 3: timestamp: 'yesterday'"},
      {"a,1700000000,50,-4\n", "line 2: gpu_memory_bytes: '-4'"},
      {"a,1700000000,50\n", "line 2: 3 fields, the header has 4"},
      {",1700000000,50,1\n", "line 2: workload: empty"},
      {"\"a,1700000000,50,1\n", "line 2: a quoted field is not closed"},
  };
  for (const Case& c : cases) {
    History h;
    Status s = Csv(head + c.body, &h);
    ASSERT_FALSE(s.ok()) << c.body;
    EXPECT_NE(s.message().find(c.want), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("f.csv"), std::string::npos);
  }
  History h;
  Status s = Csv("workload,timestamp,gpu_util_pct\na,1,2\n", &h);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no gpu_memory_bytes column"), std::string::npos);
  s = Csv("workload,timestamp,gpu_util_pct,gpu_memory_bytes,colour\n", &h);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("unknown column 'colour'"), std::string::npos);
}

TEST(UsageParse, TruncatedCsvIsAnError) {
  History h;
  Status s = Csv("workload,timestamp,gpu_util_pct,gpu_memory_bytes\na,1700000000,50,10", &h);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("line 2"), std::string::npos);
  EXPECT_NE(s.message().find("truncated"), std::string::npos);
  EXPECT_FALSE(Csv("", &h).ok());
}

TEST(UsageParse, GapsResetsAndDuplicatesAreCounted) {
  History h;
  std::string text = "workload,timestamp,gpu_util_pct,gpu_memory_bytes\n";
  // Minutes 0..4, then nothing until 15 (a gap), then 15..16; minute 2 again (a duplicate,
  // out of order: a reset); memory to zero at 3 between two that hold some (a restart).
  for (int m : {0, 1, 2, 3, 4, 15, 16, 2}) {
    text += "w," + std::to_string(1'700'000'000 + 60 * m) + ",50," +
            std::to_string(m == 3 ? 0 : 1 << 30) + "\n";
  }
  ASSERT_TRUE(Csv(text, &h).ok());
  ASSERT_TRUE(Normalize(&h).ok());
  EXPECT_EQ(h.step_ms, 60'000);
  EXPECT_EQ(h.max_gap_ms, 180'000);
  EXPECT_EQ(h.gaps, 1);
  EXPECT_EQ(h.gap_ms, (15 - 4) * 60'000 - 180'000);
  EXPECT_EQ(h.resets, 1);
  EXPECT_EQ(h.duplicates, 1);
  EXPECT_EQ(h.restarts, 1);
  EXPECT_EQ(h.samples, 7);
  // The gap counts as idle past its bound: 5 + 3 (the bound) + 2 active minutes of 17.
  WorkloadStats st = Analyze(h.workloads[0], h.step_ms, h.max_gap_ms, 10);
  EXPECT_EQ(st.present_ms, 17 * 60'000);
  EXPECT_EQ(st.active_ms, (4 + 3 + 2) * 60'000);
  EXPECT_EQ(st.idle_spans, 1);
  EXPECT_EQ(st.idle_longest_ms, 8 * 60'000);
  EXPECT_EQ(st.peak_mem_mib, 1024);
}

const char* kProm = R"({"status":"success","data":{"resultType":"matrix","result":[
 {"metric":{"__name__":"DCGM_FI_DEV_GPU_UTIL","namespace":"ml","pod":"nb-0","container":"jupyter",
   "gpu":"0","Hostname":"node1"},"values":[[1700000000,"40"],[1700000060,"0"],[1700000120,"NaN"]]},
 {"metric":{"__name__":"DCGM_FI_DEV_FB_USED","namespace":"ml","pod":"nb-0","container":"jupyter",
   "gpu":"0","Hostname":"node1"},"values":[[1700000000,"2048"],[1700000060,"2048"]]},
 {"metric":{"__name__":"DCGM_FI_PROF_GR_ENGINE_ACTIVE","namespace":"dcgm","pod":"exporter-x",
   "exported_namespace":"prod","exported_pod":"llm","exported_container":"server","team":"serving",
   "gpu":"1","Hostname":"node1"},"values":[[1700000000.5,"0.875"]]},
 {"metric":{"__name__":"DCGM_FI_DEV_POWER_USAGE","pod":"nb-0"},"values":[[1700000000,"300"]]}
]}})";

TEST(UsagePrometheus, SeriesAreJoinedByWorkloadAndTime) {
  History h;
  Status s = ParsePrometheus(kProm, "q.json", &h);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(h.workloads.size(), 2u);
  const Series& nb = h.workloads[0];
  EXPECT_EQ(nb.name, "ml/nb-0/jupyter");
  EXPECT_EQ(nb.team, "ml");
  EXPECT_EQ(nb.gpus, 1);
  ASSERT_EQ(nb.samples.size(), 2u);  // NaN: no sample
  EXPECT_EQ(nb.samples[0].util_pm, 400);
  EXPECT_EQ(nb.samples[0].mem_mib, 2048);
  EXPECT_EQ(nb.samples[1].util_pm, 0);
  const Series& llm = h.workloads[1];
  EXPECT_EQ(llm.name, "prod/llm/server");  // the exported_ labels win
  EXPECT_EQ(llm.team, "serving");
  EXPECT_EQ(llm.samples[0].t_ms, 1'700'000'000'500);
  EXPECT_EQ(llm.samples[0].util_pm, 875);
  EXPECT_EQ(h.stats.skipped_series, 1);
  EXPECT_EQ(h.stats.series, 3);
}

TEST(UsagePrometheus, BadValuesAndTruncationAreErrors) {
  History h;
  std::string doc = kProm;
  Status s = ParsePrometheus(doc.substr(0, doc.size() / 2), "q.json", &h);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();
  std::string bad = doc;
  bad.replace(bad.find("\"2048\""), 6, "\"lots\"");
  s = ParsePrometheus(bad, "q.json", &h);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("series 2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("value 1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'lots'"), std::string::npos) << s.message();
  s = ParsePrometheus(R"({"status":"error","error":"bad"})", "q.json", &h);
  EXPECT_FALSE(s.ok());
  s = ParsePrometheus(R"({"status":"success","data":{"resultType":"vector","result":[]}})", "q",
                      &h);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("matrix"), std::string::npos);
  // A number past a double is refused, not thrown (found by the usage fuzz target).
  s = ParsePrometheus("77E777777700146EI}\n", "q.json", &h);
  EXPECT_FALSE(s.ok());
  s = ParsePrometheus(R"({"status":"success","data":{"resultType":"matrix","result":[{"metric":)"
                      R"({"__name__":"DCGM_FI_DEV_FB_USED","pod":"p"},"values":[[1e999,"1"]]}]}})",
                      "q.json", &h);
  EXPECT_FALSE(s.ok());
  // ParseUsage tells the formats apart.
  History both;
  ASSERT_TRUE(ParseUsage(std::string("  ") + kProm, "q.json", &both).ok());
  ASSERT_TRUE(
      ParseUsage("workload,timestamp,gpu_util_pct,gpu_memory_bytes\nx,1,2,3\n", "f", &both).ok());
  EXPECT_EQ(both.workloads.size(), 3u);
}

}  // namespace
}  // namespace tessera::sim::usage
