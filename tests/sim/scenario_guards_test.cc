// Runtime guards in scenarios (issue 37): the queue keys max_runtime, min_runtime and
// preemption_delay (durations, model/duration.h's grammar), and a run with a known answer for
// each (examples/scenarios/runtime-guards.yaml).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "sim/scenario.h"

namespace tessera::sim {
namespace {

const std::string kHead =
    "nodes: [{name: n, gpu: {model: A100-80GB, count: 1}}]\n"
    "groups: [{name: g}]\nprofiles: [{name: p}]\n"
    "workload: [{queue: q, duration: 1h}]\n";

TEST(ScenarioGuards, QueueGuardsAreDurations) {
  auto s = ParseScenario(kHead +
                         "queues: [{name: q, profile: p, groups: [g], class: training,"
                         " max_runtime: 1h30m, min_runtime: 5m, preemption_delay: 90}]");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->policy.queues.size(), 1u);
  EXPECT_EQ(s->policy.queues[0].max_runtime_s, 5400);
  EXPECT_EQ(s->policy.queues[0].min_runtime_s, 300);
  EXPECT_EQ(s->policy.queues[0].preemption_delay_s, 90);
  for (const char* key : {"max_runtime", "min_runtime", "preemption_delay"}) {
    auto bad =
        ParseScenario(kHead + "queues: [{name: q, profile: p, groups: [g], " + key + ": soon}]");
    ASSERT_FALSE(bad.ok()) << key;
    EXPECT_NE(bad.status().message().find(std::string("queues[q].") + key), std::string::npos)
        << bad.status().message();
  }
}

TEST(ScenarioGuards, EachGuardFiresAtItsTime) {
  auto s =
      LoadScenario(std::string(TESSERA_SOURCE_DIR) + "/examples/scenarios/runtime-guards.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<quota::Event> events;
  auto r = RunScenario(*s, {.events = &events});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->run.invariant_violations.empty()) << r->run.invariant_violations.front();
  // job -> the times of its events of each kind
  std::map<std::string, std::map<quota::EventKind, std::vector<int64_t>>> at;
  for (const quota::Event& e : events) at[e.job][e.kind].push_back(e.time);
  using K = quota::EventKind;
  // max_runtime 95s: stopped at 95 exactly, the next placed at the cycle of 100, stopped at 195.
  EXPECT_EQ(at["capped-0-0"][K::kStopped], (std::vector<int64_t>{95}));
  EXPECT_EQ(at["capped-0-1"][K::kPlaced], (std::vector<int64_t>{100}));
  EXPECT_EQ(at["capped-0-1"][K::kStopped], (std::vector<int64_t>{195}));
  EXPECT_TRUE(at["capped-0-0"][K::kCompleted].empty());
  EXPECT_EQ(r->run.stopped, 2);
  // min_runtime 5m: preempted at 300, not at 30, for the job submitted at 30.
  EXPECT_EQ(at["minlo-1-0"][K::kPreempted], (std::vector<int64_t>{300}));
  EXPECT_EQ(at["minhi-2-0"][K::kPlaced], (std::vector<int64_t>{300}));
  // preemption_delay 1m: the job submitted at 30 preempts at 90.
  EXPECT_EQ(at["delaylo-3-0"][K::kPreempted], (std::vector<int64_t>{90}));
  EXPECT_EQ(at["delayhi-4-0"][K::kPlaced], (std::vector<int64_t>{90}));
  EXPECT_EQ(r->run.preemptions, 2);
  EXPECT_NE(ReportText(*r).find("stopped by a runtime guard (max_runtime): 2"), std::string::npos);
}

}  // namespace
}  // namespace tessera::sim
