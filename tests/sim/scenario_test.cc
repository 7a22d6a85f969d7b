// Scenario tests: the YAML format, and whole simulated runs through the quota engine with
// invariants checked after every step.
#include "sim/scenario.h"

#include <gtest/gtest.h>

#include <string>

#include "policy/policy_yaml.h"

namespace tessera::sim {
namespace {

std::string Example(const std::string& name) {
  return std::string(TESSERA_SOURCE_DIR) + "/examples/scenarios/" + name;
}

const GroupReport& Group(const RunReport& r, const std::string& name) {
  for (const GroupReport& g : r.groups) {
    if (g.name == name) return g;
  }
  ADD_FAILURE() << "no group " << name;
  return r.groups.front();
}

const ClassReport& Class(const RunReport& r, const std::string& name) {
  for (const ClassReport& c : r.classes) {
    if (c.name == name) return c;
  }
  ADD_FAILURE() << "no class " << name;
  return r.classes.front();
}

// The grammar of durations is model/duration.h's, tested with every duration field in
// tests/model/duration_grammar_test.cc.
TEST(ScenarioParse, ErrorsNameTheField) {
  struct Case {
    std::string yaml, want;
  };
  const std::string ok_head =
      "nodes: [{name: n, gpu: {model: A100-80GB, count: 1}}]\n"
      "groups: [{name: g}]\nprofiles: [{name: p}]\n"
      "queues: [{name: q, profile: p, groups: [g], class: training}]\n";
  std::vector<Case> cases = {
      {ok_head + "workload: [{queue: q, duration: forever}]",
       "workload[0].duration: 'forever' is not a duration"},
      {ok_head + "workload: [{queue: q, duration: 1h, colour: red}]",
       "workload[0]: unknown key 'colour'"},
      {ok_head + "workload: [{queue: q, duration: 1h, class: gaming}]",
       "workload[0].class: unknown workload class 'gaming'"},
      {"nodes: [{name: n, memory: lots}]\nworkload: []", "nodes[n].memory:"},
      {"nodes: [{name: n}]\ngroups: [{name: g, reservation: {gpu: 2}, limit: {gpu: 1}}]\n"
       "workload: []",
       "groups[g].reservation.gpu exceeds its limit"},
      {"nodes: [{name: n}]\nworkload: [\n", "YAML:"},
      // Once run with "1 rejected" in the summary and the reason only in --events.
      {ok_head + "workload: [{queue: qq, duration: 1h}]", "workload[0].queue: no queue 'qq'"},
      {ok_head + "workload: [{queue: q, group: h, duration: 1h}]",
       "workload[0].group: no group 'h'"},
      {ok_head + "workload: [{queue: [q], duration: 1h}]", "workload[0].queue: expected a string"},
      // Once read as the first value, the second dropped; and a placement run as next-fit.
      {ok_head + "cycle: 10s\ncycle: 1s\nworkload: []",
       "cycle: given twice (again at line 6, column 1)"},
      {ok_head + "placement: tesera\nworkload: []", "placement: unknown policy 'tesera'"},
  };
  for (const Case& c : cases) {
    auto s = ParseScenario(c.yaml);
    ASSERT_FALSE(s.ok()) << c.yaml;
    EXPECT_NE(s.status().message().find(c.want), std::string::npos) << s.status().message();
  }
  auto s = ParseScenario(ok_head +
                         "workload: [{queue: q, count: 3, interval: 1m, duration: [1h, 2h],"
                         " gpu_memory: [8GiB, 16GiB]}]\nuntil: 3h");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->until_s, 10800);
  EXPECT_EQ(s->workload[0].durations_s, (std::vector<int64_t>{3600, 7200}));
  EXPECT_EQ(s->workload[0].gpu_memory_mib, (std::vector<MiB>{8192, 16384}));
}

// Found by fuzz/policy_fuzz: a class_forms key that is not a string (here null, from an anchor
// swallowing it) threw YAML::TypedBadConversion out of GetClassForms, a Result-returning function.
TEST(ScenarioParse, ClassFormsKeyThatIsNotAStringIsAnError) {
  for (const char* text : {"{&anchor: [whole]}", "{[training]: [whole]}"}) {
    auto cf = policy::GetClassForms(YAML::Load(text), "class_forms", quota::ClassForms::Default());
    ASSERT_FALSE(cf.ok()) << text;
    EXPECT_NE(cf.status().message().find("class_forms"), std::string::npos)
        << cf.status().message();
  }
  auto cf = policy::GetClassForms(YAML::Load("{training: [partition]}"), "class_forms",
                                  quota::ClassForms::Default());
  ASSERT_TRUE(cf.ok()) << cf.status().ToString();
}

// Found by fuzz/scenario (an out-of-memory: `count: 1403121483905207778` expanded node by node):
// counts are bounded and the error names the field.
TEST(ScenarioParse, HugeCountsAreRefusedNamingTheField) {
  const std::string head = "until: 1h\nnodes:\n";
  const std::string work =
      "workload:\n  - {queue: q, duration: 1h, count: 1}\nqueues: [{name: q, profile: p, groups: "
      "[g]}]\ngroups: [{name: g}]\n"
      "profiles: [{name: p, gpus: 1}]\n";
  struct Case {
    std::string nodes, field;
  };
  for (const Case& c : std::vector<Case>{
           {"  - {name: a, count: 1403121483905207778, gpu: {model: H100-80GB, count: 8}}\n",
            "nodes[a].count"},
           {"  - {name: a, count: -1}\n", "nodes[a].count"},
           {"  - {name: a, count: 100000}\n  - {name: b, count: 100000}\n  - {name: c, count: 1}\n",
            "nodes[c].count"},
           {"  - {name: a, gpu: {model: H100-80GB, count: 4294967297}}\n", "nodes[a].gpu.count"}}) {
    auto s = sim::ParseScenario(head + c.nodes + work);
    ASSERT_FALSE(s.ok()) << c.nodes;
    EXPECT_NE(s.status().message().find(c.field), std::string::npos) << s.status().message();
  }
  auto jobs =
      sim::ParseScenario(head + "  - {name: a, gpu: {model: H100-80GB, count: 8}}\n" +
                         "workload:\n  - {queue: q, duration: 1h, count: 99999999999}\nqueues: "
                         "[{name: q, profile: p, groups: [g]}]\ngroups: [{name: g}]\n"
                         "profiles: [{name: p, gpus: 1}]\n");
  ASSERT_FALSE(jobs.ok());
  EXPECT_NE(jobs.status().message().find("workload[0].count"), std::string::npos)
      << jobs.status().message();
  auto big = sim::ParseScenario(
      head + "  - {name: a, count: 100000, gpu: {model: H100-80GB, count: 8}}\n" + work);
  EXPECT_TRUE(big.ok()) << big.status().ToString();
}

TEST(ScenarioRun, ReservationRegainedWithinOneCyclePlusGrace) {
  auto s = LoadScenario(Example("reclaim.yaml"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto r = RunScenario(*s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const GroupReport& research = Group(r->run, "research");
  ASSERT_FALSE(research.reclaim_times_s.empty());
  // Measured from the first cycle that saw the group short: one cycle plus the grace.
  EXPECT_LE(research.reclaim_max_s, s->cycle_s + s->policy.grace_seconds);
  EXPECT_EQ(research.max_gpu_held, 16000);
  EXPECT_EQ(r->run.preemptions, 16);
  ASSERT_EQ(r->run.preemption_reasons.size(), 1u);
  EXPECT_EQ(r->run.preemption_reasons[0].first.rfind("reclaim", 0), 0u);
  EXPECT_TRUE(r->run.invariant_violations.empty()) << r->run.invariant_violations.front();
  for (const GroupReport& g : r->run.groups) EXPECT_FALSE(g.limit_exceeded) << g.name;
}

// A job's wait is all the time it spent pending: a preempted job waits again after its requeue
// (a new user's report said "waits 0/0/0" for a group whose jobs were preempted and waited).
TEST(ScenarioRun, AWaitCountsTheTimeAfterARequeueToo) {
  auto s = ParseScenario(R"(
name: requeued-wait
until: 1h
cycle: 10s
grace: 0s
nodes:
  - {name: n, count: 1, pool: p, cpu: 64, memory: 512GiB, gpu: {model: H100-80GB, count: 1}}
pools:
  - {name: p, forms: [whole]}
groups:
  - {name: a}
profiles:
  - {name: one, gpus: 1, gpu_fraction: 1, cpu: 1, memory: 1GiB, forms: [whole]}
queues:
  - {name: low, profile: one, groups: [a], priority: 0, preemptible: true, class: training}
  - {name: high, profile: one, groups: [a], priority: 9, class: training}
workload:
  - {queue: low, identity: l, at: 0s, duration: 20m}
  - {queue: high, identity: h, at: 5m, duration: 10m}
)");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto r = RunScenario(*s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->run.preemptions, 1);
  // low: placed at 0, preempted at 5m, back at 15m: waited 10 min; high waited none.
  EXPECT_EQ(Group(r->run, "a").wait_max_s, 600);
}

// Issue 37: a group reserving 4 H100 and 8 of anything on a mixed fleet, everything borrowed,
// gets exactly that back by reclaim (examples/scenarios/model-quotas.yaml): 4 H100 first, then
// 8 A100 in its queue's order; 12 preemptions; past its reservation it takes nothing.
TEST(ScenarioRun, AGroupReserving4H100And8OfAnythingGetsExactlyThatBack) {
  auto s = LoadScenario(Example("model-quotas.yaml"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto r = RunScenario(*s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const GroupReport& research = Group(r->run, "research");
  EXPECT_EQ(research.max_gpu_held, 12000);
  EXPECT_EQ(research.max_model_held.at("H100-80GB"), 4000);
  EXPECT_EQ(research.max_model_held.at("A100-80GB"), 8000);
  ASSERT_FALSE(research.reclaim_times_s.empty());
  EXPECT_LE(research.reclaim_max_s, s->cycle_s + s->policy.grace_seconds);
  EXPECT_EQ(r->run.preemptions, 12);
  EXPECT_TRUE(r->run.invariant_violations.empty()) << r->run.invariant_violations.front();
}

// The same with a family: 6 H100 of either kind (H100-80GB, H100-NVL-94GB) and 6 of anything.
TEST(ScenarioRun, AGroupReserving6OfTheH100FamilyAnd6OfAnythingGetsExactlyThatBack) {
  auto s = LoadScenario(Example("family-quotas.yaml"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto r = RunScenario(*s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const GroupReport& research = Group(r->run, "research");
  EXPECT_EQ(research.max_gpu_held, 12000);
  EXPECT_EQ(research.max_model_held.at("H100"), 6000);  // the family's quota, as named
  EXPECT_EQ(research.max_model_held.at("A100-80GB"), 6000);
  EXPECT_EQ(r->run.preemptions, 12);
  EXPECT_TRUE(r->run.invariant_violations.empty()) << r->run.invariant_violations.front();
}

// Issue 37: the keys of quota per GPU model in the one policy grammar (scenario and server
// config): each mistake names its field; a config without them means what it did.
TEST(ScenarioParse, QuotaPerModelKeysNameTheirField) {
  const std::string head =
      "nodes: [{name: n, gpu: {model: H100-80GB, count: 8}}]\nprofiles: [{name: p}]\n";
  const std::string queue = "queues: [{name: q, profile: p, groups: [g], class: training}]\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {head + "groups: [{name: g, reservation: {gpu: 2, models: {H100-80GB: lots}}}]\n" + queue,
       "groups[g].reservation.models[H100-80GB]:"},
      {head + "groups: [{name: g, reservation: {gpu: 2, models: [H100-80GB]}}]\n" + queue,
       "groups[g].reservation.models: expected a map of GPU model to GPUs"},
      {head + "groups: [{name: g, reservation: {gpu: 2, models: {\"\": 1}}}]\n" + queue,
       "groups[g].reservation.models: a GPU model name is empty"},
      {head + "groups: [{name: g, reservation: {gpu: 2, models: {H100-80GB: 3}}}]\n" + queue,
       "groups[g].reservation.models sum to 3 GPU, more than reservation.gpu 2"},
      {head +
           "groups: [{name: g, reservation: {models: {H100-80GB: 3}}, limit: {models: "
           "{H100-80GB: 2}}}]\n" +
           queue,
       "groups[g].reservation.models[H100-80GB] exceeds its limit"},
      {head + "groups: [{name: g, limit: {gpu: 2, models: {H100-80GB: 3}}}]\n" + queue,
       "groups[g].limit.models[H100-80GB] exceeds the group's GPU limit"},
      {head + "groups: [{name: g, limit: {gpus: 2}}]\n" + queue,
       "groups[g].limit: unknown key 'gpus'"},
      {head + "groups: [{name: g}]\n" +
           "queues: [{name: q, profile: p, groups: [g], models: [H100-80GB, H100-80GB]}]\n",
       "queues[q].models: 'H100-80GB' is listed twice"},
  };
  for (const auto& [yaml, want] : cases) {
    auto s = ParseScenario(yaml + "workload: []");
    ASSERT_FALSE(s.ok()) << yaml;
    EXPECT_NE(s.status().message().find(want), std::string::npos) << s.status().message();
  }
  auto s = ParseScenario(head +
                         "groups: [{name: g, reservation: {models: {H100-80GB: 4}}, "
                         "limit: {gpu: 8, models: {H100: 6}}}]\n" +
                         "queues: [{name: q, profile: p, groups: [g], models: [H100-80GB]}]\n"
                         "workload: []");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->policy.groups[0].reservation.gpu_milli, 4000);  // the models' sum
  ASSERT_EQ(s->policy.groups[0].models.size(), 2u);
  EXPECT_EQ(s->policy.groups[0].models[0].reservation, 4000);
  EXPECT_EQ(s->policy.groups[0].models[1].limit, 6000);
  EXPECT_EQ(s->policy.queues[0].models, std::vector<std::string>{"H100-80GB"});
}

// Issue 37: quota per pool and model families in the same grammar: each mistake names its field
// and the name; a config with them reads as meant.
TEST(ScenarioParse, QuotaPerPoolAndFamilyKeysNameTheirField) {
  const std::string head =
      "pools: [{name: east, forms: [whole]}, {name: west, forms: [whole]}]\n"
      "nodes: [{name: n, pool: east, gpu: {model: H100-80GB, count: 8}}]\nprofiles: [{name: p}]\n";
  const std::string queue = "queues: [{name: q, profile: p, groups: [g], class: training}]\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {head + "groups: [{name: g, reservation: {gpu: 2, pools: {east: lots}}}]\n" + queue,
       "groups[g].reservation.pools[east]:"},
      {head + "groups: [{name: g, reservation: {gpu: 2, pools: [east]}}]\n" + queue,
       "groups[g].reservation.pools: expected a map of pool to GPUs"},
      {head + "groups: [{name: g, reservation: {gpu: 2, pools: {\"\": 1}}}]\n" + queue,
       "groups[g].reservation.pools: a pool name is empty"},
      {head + "groups: [{name: g, reservation: {gpu: 2, pools: {north: 1}}}]\n" + queue,
       "groups[g].pools: 'north' is not a pool"},
      {head + "groups: [{name: g, reservation: {gpu: 2, pools: {east: 3}}}]\n" + queue,
       "groups[g].reservation.pools sum to 3 GPU, more than reservation.gpu 2"},
      {head + "groups: [{name: g, reservation: {pools: {east: 3}}, limit: {pools: {east: 2}}}]\n" +
           queue,
       "groups[g].reservation.pools[east] exceeds its limit"},
      {head + "groups: [{name: g, limit: {gpu: 2, pools: {west: 3}}}]\n" + queue,
       "groups[g].limit.pools[west] exceeds the group's GPU limit"},
      {head + "groups: [{name: g, reservation: {gpu: 2, models: {X900: 1}}}]\n" + queue,
       "groups[g].models: 'X900' is neither a GPU model nor a family"},
      {head + "groups: [{name: g, reservation: {gpu: 4, models: {H100: 2, H100-80GB: 2}}}]\n" +
           queue,
       "groups[g].reservation.models[H100-80GB] is inside the family reserved by "
       "reservation.models[H100]"},
      {head + "groups: [{name: g}]\n" +
           "queues: [{name: q, profile: p, groups: [g], models: [H100, Z1]}]\n",
       "queues[q].models: 'Z1' is neither a GPU model nor a family"},
  };
  for (const auto& [yaml, want] : cases) {
    auto s = ParseScenario(yaml + "workload: []");
    ASSERT_FALSE(s.ok()) << yaml;
    EXPECT_NE(s.status().message().find(want), std::string::npos) << s.status().message();
  }
  auto s = ParseScenario(head +
                         "groups: [{name: g, reservation: {pools: {east: 3, west: 1}, models: "
                         "{H100: 2}}, limit: {gpu: 8, pools: {east: 6}}}]\n" +
                         "queues: [{name: q, profile: p, groups: [g], models: [H100, A100]}]\n"
                         "workload: []");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->policy.groups[0].reservation.gpu_milli, 4000);  // the larger sum, the pools'
  ASSERT_EQ(s->policy.groups[0].pools.size(), 2u);
  EXPECT_EQ(s->policy.groups[0].pools[0].reservation, 3000);
  EXPECT_EQ(s->policy.groups[0].pools[0].limit, 6000);
  EXPECT_EQ(s->policy.groups[0].pools[1].limit, quota::kUnlimited);
  EXPECT_EQ(s->policy.groups[0].models[0].model, "H100");
}

TEST(ScenarioRun, UtilizationMath) {
  auto s = LoadScenario(Example("utilization-math.yaml"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto r = RunScenario(*s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->baseline.has_value());
  const ClassReport& now = Class(r->run, "interactive");
  const ClassReport& before = Class(*r->baseline, "interactive");
  EXPECT_EQ(before.max_devices, 50);                    // one card per session
  EXPECT_LE(now.max_devices, 10);                       // about five sessions per card
  EXPECT_GE(before.max_devices - now.max_devices, 40);  // returned to the pool
  EXPECT_LE(now.wait_max_s, before.wait_max_s);         // nobody waits longer
  EXPECT_EQ(Class(r->run, "training").max_devices, 30);
  EXPECT_EQ(Class(r->run, "inference").max_devices, 20);
  EXPECT_TRUE(r->run.invariant_violations.empty());
  EXPECT_TRUE(r->baseline->invariant_violations.empty());
  std::string json = ReportJson(*r);
  EXPECT_NE(json.find("\"devices_returned\": 40"), std::string::npos);
}

TEST(ScenarioRun, Mixed24hOn1000GpusHasNoViolations) {
  auto s = LoadScenario(Example("mixed-24h.yaml"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto r = RunScenario(*s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->run.devices, 1000);
  EXPECT_GE(r->run.jobs, 10000);
  EXPECT_EQ(s->until_s, 24 * 3600);
  EXPECT_TRUE(r->run.invariant_violations.empty()) << r->run.invariant_violations.front();
  for (const GroupReport& g : r->run.groups) EXPECT_FALSE(g.limit_exceeded) << g.name;
  // Every class got work done.
  for (const char* c : {"training", "inference", "interactive", "ci", "batch"}) {
    EXPECT_GT(Class(r->run, c).max_devices, 0) << c;
  }
  EXPECT_GT(r->run.repartitions, 0);
}

}  // namespace
}  // namespace tessera::sim
