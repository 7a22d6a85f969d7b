#include "sim/scenario_bench.h"

#include <time.h>

#include <chrono>
#include <random>
#include <vector>

#include "sched/quota/engine.h"

namespace tessera::sim {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
double ThreadCpu() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// One cycle of `e` at `now`; *seconds and *cpu_seconds: its wall time and its thread's CPU time.
quota::CycleStats TimedCycle(quota::QuotaEngine& e, int64_t now, double* seconds,
                             double* cpu_seconds) {
  auto t = Clock::now();
  const double c = ThreadCpu();
  quota::CycleStats s = e.RunCycle(now);
  *cpu_seconds = ThreadCpu() - c;
  *seconds = Since(t);
  return s;
}

}  // namespace

CycleBenchInput MakeCycleBenchInput(const CycleBenchOptions& o) {
  CycleBenchInput in;
  using F = AllocationForm;
  using C = quota::WorkloadClass;
  quota::PolicySpec& p = in.policy;
  p.grace_seconds = 30;
  p.pools = {
      {"training", {F::kWhole}}, {"inference", {F::kPartition}}, {"interactive", {F::kShare}}};
  const int kGroups = 8;
  int gpus = o.nodes * 8;
  static const char* kModels[] = {"H100-80GB", "H200-141GB", "A100-80GB", "A100-40GB"};
  const bool four = o.models == 4;
  for (int g = 0; g < kGroups; ++g) {
    quota::GroupSpec gs;
    gs.name = "team" + std::to_string(g);
    gs.reservation.gpu_milli = static_cast<MilliGpu>(gpus) * kWholeGpu / (kGroups * 2);
    gs.limit = quota::UnlimitedResources();
    gs.limit.gpu_milli = static_cast<MilliGpu>(gpus) * kWholeGpu / 3;
    gs.weight_milli = 1000 + 250 * g;
    for (int m = 0; four && m < 4; ++m) {
      gs.models.push_back(
          {kModels[m], gs.reservation.gpu_milli / 8, static_cast<MilliGpu>(gpus) * kWholeGpu / 8});
    }
    p.groups.push_back(gs);
  }
  std::vector<std::string>& all_groups = in.groups;
  for (const auto& g : p.groups) all_groups.push_back(g.name);
  p.profiles = {
      {"whole", 1, kWholeGpu, 0, 8000, 64 * 1024, {}, {"training"}},
      {"part", 1, 140, 9 * 1024, 2000, 16 * 1024, {}, {"inference"}},
      {"share", 1, 200, 12 * 1024, 2000, 16 * 1024, {}, {"interactive"}},
  };
  p.queues = {
      {"train-hi", "whole", all_groups, 10, false, C::kTraining},
      {"train", "whole", all_groups, 5, true, C::kTraining},
      {"serve", "part", all_groups, 20, false, C::kInference},
      {"notebooks", "share", all_groups, 8, true, C::kInteractive},
      {"ci", "share", all_groups, 3, true, C::kCi},
  };
  if (four) {
    p.queues[0].models = {kModels[0], kModels[1]};
    p.queues[1].models = {kModels[0], kModels[1], kModels[2], kModels[3]};
    p.queues[2].models = {kModels[2], kModels[0], kModels[3]};
  }
  std::vector<quota::NodeSpec>& nodes = in.nodes;
  for (int i = 0; i < o.nodes; ++i) {
    quota::NodeSpec n;
    n.name = "n" + std::to_string(i);
    int bucket = i % 10;
    n.pool = bucket < 5 ? "training" : bucket < 7 ? "inference" : "interactive";
    n.cpu_milli = 192000;
    n.memory_mib = 2048 * 1024;
    n.gpu_model = four ? kModels[(i / 10) % 4] : "H100-80GB";
    n.gpu_count = 8;
    nodes.push_back(n);
  }
  in.rng.seed(o.seed);
  for (int i = 0; i < o.jobs; ++i) in.jobs.push_back(in.NextJob());
  return in;
}

quota::JobSpec CycleBenchInput::NextJob() {
  const int kGroups = static_cast<int>(groups.size());
  quota::JobSpec j;
  j.id = "j" + std::to_string(next_id++);
  j.identity = "user" + std::to_string(rng() % 500);
  j.group = groups[rng() % kGroups];
  uint64_t kind = rng() % 100;
  static const int kCounts[] = {1, 1, 1, 2, 4, 8};
  if (kind < 35) {
    j.queue = kind < 5 ? "train-hi" : "train";
    j.gpu_count = kCounts[rng() % 6];
  } else if (kind < 60) {
    j.queue = "serve";
    j.gpu_memory_mib = (kind % 2 == 0) ? 9 * 1024 : 18 * 1024;  // 1g.10gb or 1g.20gb/2g.20gb
  } else {
    j.queue = kind < 85 ? "notebooks" : "ci";
    j.gpu_memory_mib = static_cast<MiB>(8 + rng() % 9) * 1024;
  }
  j.walltime_s = static_cast<int64_t>(600 + rng() % 7200);
  return j;
}

CycleBenchResult RunCycleBench(const CycleBenchOptions& o) {
  auto t0 = Clock::now();
  CycleBenchInput in = MakeCycleBenchInput(o);
  const quota::PolicySpec& p = in.policy;
  const std::vector<quota::NodeSpec>& nodes = in.nodes;
  const int gpus = o.nodes * 8;
  auto created = quota::QuotaEngine::Create(p, nodes, {.check_invariants_each_step = false});
  CycleBenchResult r;
  r.nodes = o.nodes;
  r.gpus = gpus;
  if (!created.ok()) {
    r.invariants = created.status().ToString();
    return r;
  }
  quota::QuotaEngine& e = **created;
  auto submit = [&](int64_t now) { (void)e.Submit(in.NextJob(), now); };
  for (const quota::JobSpec& j : in.jobs) (void)e.Submit(j, 0);
  r.setup_seconds = Since(t0);

  quota::CycleStats s1 = TimedCycle(e, 0, &r.cycle_seconds, &r.cycle_cpu_seconds);
  r.pending = s1.pending_at_start;
  r.admitted = s1.admitted;
  r.preempted = s1.preempted;
  r.repartitioned = s1.repartitioned;
  r.admitted_per_second = r.cycle_seconds > 0 ? s1.admitted / r.cycle_seconds : 0;

  // Steady state: 5% of the running jobs finish, as many arrive, one more cycle.
  int finished = 0;
  int target = s1.admitted / 20;
  for (int h = 0; h < e.job_count() && finished < target; h += 7) {
    if (e.job_state(h) == quota::JobState::kRunning) {
      e.Complete(h, 60);
      ++finished;
    }
  }
  for (int i = 0; i < finished; ++i) submit(60);
  quota::CycleStats s2 = TimedCycle(e, 60, &r.second_cycle_seconds, &r.second_cycle_cpu_seconds);
  r.second_pending = s2.pending_at_start;
  r.second_admitted = s2.admitted;
  Status inv = e.CheckInvariants();
  r.invariants = inv.ok() ? "ok" : inv.message();
  return r;
}

}  // namespace tessera::sim
