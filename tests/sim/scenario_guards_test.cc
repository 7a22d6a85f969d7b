// Runtime guards in scenarios (issue 37): the queue keys max_runtime, min_runtime and
// preemption_delay (durations, model/duration.h's grammar), and a run with a known answer for
// each (examples/scenarios/runtime-guards.yaml); idle_timeout (idle-timeout.yaml) and fair
// share inside a group (fair-share-users.yaml).
#include <gtest/gtest.h>

#include <filesystem>
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

namespace tessera::sim {
namespace {

// idle_timeout (issue 37), examples/scenarios/idle-timeout.yaml: an idle share of a swapping
// queue is swapped out, not killed; an idle whole card is requeued; idle_action stop ends it.
TEST(ScenarioIdle, IdleHoldingsAreGivenBackAtTheirTime) {
  auto s = LoadScenario(std::string(TESSERA_SOURCE_DIR) + "/examples/scenarios/idle-timeout.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<quota::Event> events;
  auto r = RunScenario(*s, {.events = &events});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->run.invariant_violations.empty()) << r->run.invariant_violations.front();
  std::map<std::string, std::map<quota::EventKind, std::vector<int64_t>>> at;
  for (const quota::Event& e : events) at[e.job][e.kind].push_back(e.time);
  using K = quota::EventKind;
  // The notebook: swapped out at 5 + 10 min, never stopped, requeued nor preempted; it ends at
  // its own hour... after the run's 30 min, so it still runs.
  EXPECT_EQ(at["nb-0-0"][K::kSwappedOut], (std::vector<int64_t>{900}));
  EXPECT_TRUE(at["nb-0-0"][K::kPreempted].empty());
  EXPECT_TRUE(at["nb-0-0"][K::kStopped].empty());
  EXPECT_TRUE(at["nb-0-0"][K::kRequeued].empty());
  // The idle card: requeued at 2 + 10 min, to the back of its queue: the waiting job takes the
  // card in the cycle of that second (720 s is a cycle's time).
  EXPECT_EQ(at["idler-1-0"][K::kPreempted], (std::vector<int64_t>{720}));
  EXPECT_EQ(at["idler-1-0"][K::kRequeued], (std::vector<int64_t>{720}));
  EXPECT_EQ(at["waiter-2-0"][K::kPlaced], (std::vector<int64_t>{720}));
  // idle_action stop: stopped at 1 + 5 min, not requeued.
  EXPECT_EQ(at["stopper-3-0"][K::kStopped], (std::vector<int64_t>{360}));
  EXPECT_TRUE(at["stopper-3-0"][K::kRequeued].empty());
  EXPECT_EQ(r->run.swapped_out, 1);
  EXPECT_EQ(r->run.idle_requeued, 1);
  EXPECT_EQ(r->run.idle_stopped, 1);
  EXPECT_EQ(r->run.stopped, 0);
  for (const quota::Event& e : events) {
    if (e.job == "idler-1-0" && e.kind == K::kPreempted) {
      EXPECT_EQ(e.detail.rfind("idle_timeout: idle 600s since t=120s", 0), 0u) << e.detail;
    }
  }
}

// A workload entry may declare a walltime shorter than it runs: its jobs are stopped then (a
// declared walltime is a limit); a walltime that is neither a boolean nor a duration is named.
TEST(ScenarioWalltime, AJobRunningPastTheWalltimeItDeclaredIsStoppedThen) {
  const std::string head =
      "nodes: [{name: n, gpu: {model: A100-80GB, count: 1}}]\n"
      "groups: [{name: g}]\nprofiles: [{name: p}]\n"
      "queues: [{name: q, profile: p, groups: [g]}]\n";
  auto s = ParseScenario(head + "workload: [{queue: q, identity: u, duration: 1h, walltime: 10m}]");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<quota::Event> events;
  auto r = RunScenario(*s, {.events = &events});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->run.promises.empty()) << r->run.promises.front().ToString();
  int stopped = 0;
  for (const quota::Event& e : events) {
    EXPECT_NE(e.kind, quota::EventKind::kCompleted) << e.job << " ran its hour";
    if (e.kind != quota::EventKind::kStopped) continue;
    ++stopped;
    EXPECT_EQ(e.time, 600);
    EXPECT_EQ(e.detail.rfind("walltime 600s (declared at submission) reached", 0), 0u) << e.detail;
  }
  EXPECT_EQ(stopped, 1);
  auto bad = ParseScenario(head + "workload: [{queue: q, duration: 1h, walltime: soon}]");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("workload[0].walltime: expected true, false or a"),
            std::string::npos)
      << bad.status().message();
}

TEST(ScenarioIdle, NewKeysNameTheirField) {
  const std::string head =
      "nodes: [{name: n, gpu: {model: A100-80GB, count: 1}}]\n"
      "groups: [{name: g}]\nprofiles: [{name: p}]\n";
  auto bad = ParseScenario(head +
                           "queues: [{name: q, profile: p, groups: [g], idle_timeout: soon}]\n"
                           "workload: [{queue: q, duration: 1h}]");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("queues[q].idle_timeout"), std::string::npos)
      << bad.status().message();
  bad = ParseScenario(head +
                      "queues: [{name: q, profile: p, groups: [g], idle_timeout: 1m,"
                      " idle_action: kill}]\nworkload: [{queue: q, duration: 1h}]");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("queues[q].idle_action"), std::string::npos)
      << bad.status().message();
  bad = ParseScenario(head +
                      "queues: [{name: q, profile: p, groups: [g], idle_action: stop}]\n"
                      "workload: [{queue: q, duration: 1h}]");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("queues[q].idle_action: needs idle_timeout"),
            std::string::npos)
      << bad.status().message();
  bad = ParseScenario(head +
                      "queues: [{name: q, profile: p, groups: [g]}]\n"
                      "workload: [{queue: q, duration: 1h, idle_after: later}]");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("workload[0].idle_after"), std::string::npos)
      << bad.status().message();
  bad = ParseScenario(
      "nodes: [{name: n, gpu: {model: A100-80GB, count: 1}}]\n"
      "groups: [{name: g, users: {alice: {weight: 0}}}]\nprofiles: [{name: p}]\n"
      "queues: [{name: q, profile: p, groups: [g]}]\nworkload: [{queue: q, duration: 1h}]");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("groups[g].users[alice].weight"), std::string::npos)
      << bad.status().message();
  bad = ParseScenario(
      "nodes: [{name: n, gpu: {model: A100-80GB, count: 1}}]\n"
      "groups: [{name: g, users: {alice: {weigth: 2}}}]\nprofiles: [{name: p}]\n"
      "queues: [{name: q, profile: p, groups: [g]}]\nworkload: [{queue: q, duration: 1h}]");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("groups[g].users[alice]"), std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("weigth"), std::string::npos) << bad.status().message();
  bad = ParseScenario(
      "nodes: [{name: n, gpu: {model: A100-80GB, count: 1}}]\n"
      "groups: [{name: g, users: {alice: {limit: {gpu: lots}}}}]\nprofiles: [{name: p}]\n"
      "queues: [{name: q, profile: p, groups: [g]}]\nworkload: [{queue: q, duration: 1h}]");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("groups[g].users[alice].limit"), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace tessera::sim

namespace tessera::sim {
namespace {

// Fair share inside a group (issue 37), examples/scenarios/fair-share-users.yaml: alice (weight
// 2) and bob (weight 1) of one group, both always waiting for its 16 cards, hold within 10% of
// their weights (of what the two hold together) over every hour after the first; carol stays
// within her limit of 2 cards.
TEST(ScenarioFairShare, TwoUsersHoldTheirWeightsEveryHourAfterTheFirst) {
  auto s =
      LoadScenario(std::string(TESSERA_SOURCE_DIR) + "/examples/scenarios/fair-share-users.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto r = RunScenario(*s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->run.invariant_violations.empty()) << r->run.invariant_violations.front();
  std::map<std::string, const MemberReport*> by;
  for (const MemberReport& m : r->run.members) by[m.identity] = &m;
  ASSERT_TRUE(by.count("alice") && by.count("bob") && by.count("carol"));
  const std::vector<double> alice = HourlyMean(r->run, by["alice"]->gpu_held);
  const std::vector<double> bob = HourlyMean(r->run, by["bob"]->gpu_held);
  const std::vector<double> carol = HourlyMean(r->run, by["carol"]->gpu_held);
  ASSERT_GE(alice.size(), 6u);
  for (size_t h = 1; h < 6; ++h) {
    const double both = alice[h] + bob[h];
    ASSERT_GT(both, 0) << "hour " << h;
    const double a = alice[h] / both, b = bob[h] / both;
    EXPECT_NEAR(a, 2.0 / 3.0, 0.1 * 2.0 / 3.0)
        << "hour " << h << ": alice " << alice[h] / 1000 << " GPU, bob " << bob[h] / 1000 << " GPU";
    EXPECT_NEAR(b, 1.0 / 3.0, 0.1 * 1.0 / 3.0)
        << "hour " << h << ": alice " << alice[h] / 1000 << " GPU, bob " << bob[h] / 1000 << " GPU";
    // The group's cards are all in use (contended), and carol's limit holds.
    EXPECT_GT(both + carol[h], 15.5 * 1000) << "hour " << h;
  }
  for (MilliGpu held : by["carol"]->gpu_held) ASSERT_LE(held, 2000);
  EXPECT_NE(ReportText(*r).find("users inside groups"), std::string::npos);
}

}  // namespace
}  // namespace tessera::sim

namespace tessera::sim {
namespace {

// The new keys (users, idle_timeout, idle_action, idle_after) are optional: every shipped
// scenario still loads, the ones written before them included.
TEST(ScenarioExamples, EveryExampleScenarioStillLoads) {
  int loaded = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(TESSERA_SOURCE_DIR) +
                                                               "/examples/scenarios")) {
    if (entry.path().extension() != ".yaml") continue;
    auto s = LoadScenario(entry.path().string());
    EXPECT_TRUE(s.ok()) << entry.path() << ": " << s.status().ToString();
    ++loaded;
  }
  EXPECT_GE(loaded, 6);
}

}  // namespace
}  // namespace tessera::sim

namespace tessera::sim {
namespace {

// Preemption by swapping (issue 36), examples/scenarios/preempt-by-swapping.yaml: two guest
// notebooks reclaimed for the owners are held swapped out, not stopped; one resumes with the
// work it had left when capacity returns, the other is stopped by its queue's swap_hold_limit.
TEST(ScenarioSwapHold, PreemptionBySwappingLosesNoWorkAndTheHoldLimitStopsIt) {
  auto s = LoadScenario(std::string(TESSERA_SOURCE_DIR) +
                        "/examples/scenarios/preempt-by-swapping.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->policy.queues[0].swap_hold_limit_s, 1200);
  EXPECT_EQ(s->nodes[0].swap_mib, 128 * 1024);
  std::vector<quota::Event> events;
  auto r = RunScenario(*s, {.events = &events});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->run.invariant_violations.empty()) << r->run.invariant_violations.front();
  EXPECT_TRUE(r->run.promises.empty()) << r->run.promises.front().ToString();
  using K = quota::EventKind;
  std::vector<std::string> held;
  std::map<std::string, std::map<K, std::vector<int64_t>>> at;
  for (const quota::Event& e : events) {
    at[e.job][e.kind].push_back(e.time);
    if (e.kind == K::kSwappedOut) {
      held.push_back(e.job);
      EXPECT_EQ(e.time, 600);
      EXPECT_EQ(e.detail.rfind("reclaim: group owners is below its reservation", 0), 0u)
          << e.detail;
      EXPECT_NE(e.detail.find("lost 0 GPU-s"), std::string::npos) << e.detail;
    }
  }
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(at["owner-1-0"][K::kPlaced], (std::vector<int64_t>{600}));
  EXPECT_EQ(at["owner2-2-0"][K::kPlaced], (std::vector<int64_t>{600}));
  // One resumes at 20 min and runs the 50 min it had left; the other is stopped at 30 min.
  const bool first = !at[held[0]][K::kSwappedIn].empty();
  const std::string resumed = first ? held[0] : held[1], stopped = first ? held[1] : held[0];
  EXPECT_EQ(at[resumed][K::kSwappedIn], (std::vector<int64_t>{1200}));
  EXPECT_EQ(at[resumed][K::kCompleted], (std::vector<int64_t>{4200}));
  EXPECT_EQ(at[stopped][K::kStopped], (std::vector<int64_t>{1800}));
  EXPECT_TRUE(at[stopped][K::kSwappedIn].empty());
  EXPECT_EQ(r->run.held_swapped, 2);
  EXPECT_EQ(r->run.swapped_in, 1);
  EXPECT_EQ(r->run.hold_stopped, 1);
  EXPECT_EQ(r->run.preemptions, 0);
  EXPECT_EQ(r->run.lost_gpu_s, 0);
  const std::string text = ReportText(*r);
  EXPECT_NE(text.find("preempted by swapping: 2 held swapped out, 1 resumed, 1 stopped by "
                      "swap_hold_limit"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("work lost to preemption: 0 GPU-s"), std::string::npos) << text;
}

// The same fleet without swapping: the two reclaimed notebooks are stopped, and their 10 min
// of work each is lost.
TEST(ScenarioSwapHold, WithoutSwappingTheSameReclaimLosesTheirWork) {
  auto s = LoadScenario(std::string(TESSERA_SOURCE_DIR) +
                        "/examples/scenarios/preempt-by-swapping.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  s->policy.queues[0].swap_overcommit_percent = 0;  // caps fit the memory: four notebooks
  for (WorkloadEntry& w : s->workload) {
    if (w.count == 8) w.count = 4;
  }
  auto r = RunScenario(*s, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->run.held_swapped, 0);
  EXPECT_EQ(r->run.preemptions, 2);
  EXPECT_EQ(r->run.lost_gpu_s, 2 * 600 * 250 / 1000);
}

TEST(ScenarioSwapHold, SwapHoldLimitAndNodeSwapNameTheirField) {
  const std::string head =
      "groups: [{name: g}]\nprofiles: [{name: p}]\nworkload: [{queue: q, duration: 1h}]\n";
  auto bad = ParseScenario(head +
                           "nodes: [{name: n, gpu: {model: A100-80GB, count: 1}}]\n"
                           "queues: [{name: q, profile: p, groups: [g], swap_hold_limit: soon}]");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("queues[q].swap_hold_limit"), std::string::npos)
      << bad.status().message();
  bad = ParseScenario(head +
                      "nodes: [{name: n, swap: lots, gpu: {model: A100-80GB, count: 1}}]\n"
                      "queues: [{name: q, profile: p, groups: [g]}]");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("nodes[n].swap"), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace tessera::sim
