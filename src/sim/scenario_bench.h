// The scheduling-cycle benchmark: one quota-engine cycle over a large synthetic backlog.
//
// Builds `nodes` nodes of 8 x H100-80GB split into pools (50% training: whole; 20% inference:
// partition; 30% interactive: share), eight groups with reservations and limits, and `jobs`
// pending jobs drawn with a fixed seed from a mix of classes (whole 1/2/4/8 cards, MIG
// partitions, capped shares) and priorities; then times RunCycle on the full backlog, and a
// second cycle after 5% of the running jobs finish and as many new jobs arrive.
//
// With models = 4 the fleet is four GPU models (H100-80GB, H200-141GB, A100-80GB, A100-40GB, a
// quarter of each pool each), every group also reserves an eighth of its reservation on each
// model and may hold at most half of each model's cards, and the queues list the models they
// accept in order (training: all four; serving: A100-80GB, H100-80GB, A100-40GB; notebooks and
// CI: any): quotas per GPU model (docs/scheduling.md).
//
// Thread-safety: none; single-threaded by design (the cycle is).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "sched/quota/engine.h"

namespace tessera::sim {

struct CycleBenchOptions {
  int nodes = 10000;
  int jobs = 100000;
  uint64_t seed = 42;
  int models = 1;  // GPU models in the fleet: 1 (H100-80GB) or 4 (with quotas per model)
};

struct CycleBenchResult {
  int nodes = 0, gpus = 0, pending = 0;
  int admitted = 0, preempted = 0, repartitioned = 0;
  double cycle_seconds = 0;  // first cycle, full backlog
  // The same on this thread's CPU clock: on a shared machine the wall clock also counts the time
  // others' processes held the cores.
  double cycle_cpu_seconds = 0, second_cycle_cpu_seconds = 0;
  double admitted_per_second = 0;
  int second_pending = 0, second_admitted = 0;
  double second_cycle_seconds = 0;
  double setup_seconds = 0;
  std::string invariants;  // "ok" or the violation, checked after the timed cycles (untimed)
};

// The benchmark's input, for the served engine's benchmark to run the same one.
struct CycleBenchInput {
  quota::PolicySpec policy;
  std::vector<quota::NodeSpec> nodes;
  std::vector<quota::JobSpec> jobs;  // `jobs` first; more with NextJob
  std::vector<std::string> groups;
  std::mt19937_64 rng;
  int next_id = 0;
  quota::JobSpec NextJob();
};
CycleBenchInput MakeCycleBenchInput(const CycleBenchOptions& o);

CycleBenchResult RunCycleBench(const CycleBenchOptions& o);

}  // namespace tessera::sim
