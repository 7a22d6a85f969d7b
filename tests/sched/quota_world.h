// The quota tests' small world (quota_test.cc, quota_policy_test.cc): a base policy, nodes, jobs
// and an engine that checks its invariants after every step.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sched/quota/engine.h"
#include "sched/quota/policy_model.h"

namespace tessera::quota::quota_world {

constexpr MiB kGiB = 1024;
using F = AllocationForm;
using C = WorkloadClass;

inline Resources Gpu(int64_t milli) { return Resources{milli, 0, 0, 0}; }

// A small world: pools per form, two groups, queues per class.
inline PolicySpec BasePolicy() {
  PolicySpec p;
  p.pools = {{"train", {F::kWhole}},
             {"infer", {F::kPartition}},
             {"inter", {F::kShare}},
             {"any", {F::kWhole, F::kPartition, F::kShare}}};
  p.groups = {{"a", "", Gpu(0), UnlimitedResources(), 1000, "", false},
              {"b", "", Gpu(0), UnlimitedResources(), 1000, "", false}};
  p.profiles = {
      {"gpu1", 1, kWholeGpu, 0, 1000, 1024, {}, {}},
      {"part8", 1, 100, 8 * kGiB, 1000, 1024, {}, {}},
      {"share16", 1, 200, 16 * kGiB, 500, 1024, {}, {}},
  };
  p.queues = {
      {"train", "gpu1", {"a", "b"}, 0, false, C::kTraining},
      {"train-lo", "gpu1", {"a", "b"}, 0, true, C::kTraining},
      {"train-hi", "gpu1", {"a", "b"}, 10, false, C::kTraining},
      {"infer", "part8", {"a", "b"}, 0, true, C::kInference},
      {"inter", "share16", {"a", "b"}, 0, true, C::kInteractive},
  };
  return p;
}

inline NodeSpec Node(const std::string& name, const std::string& pool, int gpus,
                     const std::string& model = "A100-80GB") {
  NodeSpec n;
  n.name = name;
  n.pool = pool;
  n.cpu_milli = 64000;
  n.memory_mib = 512 * kGiB;
  n.gpu_model = model;
  n.gpu_count = gpus;
  return n;
}

inline JobSpec Job(const std::string& id, const std::string& queue, const std::string& group,
                   int count = 1, int64_t walltime = 0) {
  JobSpec j;
  j.id = id;
  j.identity = "user-" + id;
  j.queue = queue;
  j.group = group;
  if (count != 1) j.gpu_count = count;
  j.walltime_s = walltime;
  return j;
}

struct World {
  std::unique_ptr<QuotaEngine> e;
  std::map<std::string, int> h;

  World(const PolicySpec& p, const std::vector<NodeSpec>& nodes) {
    auto r = QuotaEngine::Create(p, nodes, {.check_invariants_each_step = true});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    e = std::move(r).value();
  }
  void Submit(const JobSpec& j, int64_t t) {
    auto r = e->Submit(j, t);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    h[j.id] = *r;
  }
  JobState State(const std::string& id) const { return e->job_state(h.at(id)); }
  JobView View(const std::string& id) const { return e->job(h.at(id)); }
  void Done() const {
    EXPECT_TRUE(e->CheckInvariants().ok()) << e->CheckInvariants().ToString();
    EXPECT_TRUE(e->violations().empty()) << e->violations().front();
  }
  int Count(EventKind k) const {
    int n = 0;
    for (const Event& ev : e->events()) n += ev.kind == k ? 1 : 0;
    return n;
  }
};
}  // namespace tessera::quota::quota_world
