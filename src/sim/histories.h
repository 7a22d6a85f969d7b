// Generated histories: random clusters, policies and workloads, run through the quota engine
// with the promise checker watching (verify/checker.h), a failing one shrunk to a small scenario
// file that reproduces it (`tessera sim histories`).
//
// A history is a Scenario (scenario.h) drawn from a seed: NVIDIA models with MIG and AMD models
// with compute and memory modes (some registered split), models outside the catalog, one or two
// pools, groups with reservations, limits, weights and parents, queues of four classes with
// priorities and preemptible work, gangs, walltimes, bursts, shares preempted by swapping (held
// swapped out within their nodes' swap budgets, resumed later), queues' runtime guards, and nodes
// lost and returned. The
// same seed gives the same history on every machine (SplitMix64, no std:: distributions).
//
// Thread-safety: pure functions over value types.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "sim/scenario.h"
#include "verify/checker.h"

namespace tessera::sim {

struct HistoryOptions {
  int max_nodes = 3;
  int max_gpus_per_node = 4;
  int max_entries = 7;     // workload entries
  int max_count = 4;       // jobs per entry
  int64_t span_s = 1800;   // arrivals within this; the run goes on 40 minutes past it
  int head_percent = 15;   // histories with a blocked head and short work behind it (backfill)
  int swap_percent = 50;   // histories whose notebook shares are held swapped out when preempted
  int guard_percent = 30;  // histories whose queues have max_runtime, min_runtime, preemption_delay
};

Scenario GenerateHistory(uint64_t seed, const HistoryOptions& o = {});

// A scenario file ParseScenario reads back as the same scenario.
std::string ScenarioYaml(const Scenario& s);

struct HistoryResult {
  std::vector<verify::Violation>
      violations;  // the checker's, and the engine's own as "engine.invariant"
  verify::Seen seen;
  int64_t jobs = 0;
};
Result<HistoryResult> RunHistory(const Scenario& s, const RunOptions& o = {});

// Jobs a scenario submits (entries' counts summed).
int64_t JobCount(const Scenario& s);

// The smallest scenario found (fewest jobs, then outages and nodes) whose run still breaks
// `property`: entries split into single jobs, then jobs, outages and nodes dropped one at a time
// while the violation stays.
Scenario Shrink(const Scenario& s, const std::string& property, const RunOptions& o = {});

// The share of histories that contained each kind of event.
struct Coverage {
  int64_t histories = 0;
  int64_t unsplit = 0, amd_mode_change = 0, gang = 0, node_loss = 0, reclaim_in_flight = 0,
          backfill = 0, swap_hold = 0;
  void Add(const verify::Seen& s);
  // "coverage over N histories:\n  unsplit  12.3%\n ..."; each line marked when under `min_pct`.
  std::string Table(int min_pct = 5) const;
  bool AllAtLeast(int pct) const;
};

struct SweepFailure {
  uint64_t seed = 0;
  verify::Violation first;
};

struct SweepResult {
  int64_t histories = 0;
  int64_t failing = 0;
  std::vector<SweepFailure> failures;  // the first few
  // Each broken property's first few histories (up to keep_failures each), with that property's
  // first violation in each: a rare property is named by seed even past the first few failures.
  std::map<std::string, std::vector<SweepFailure>> first_by_property;
  Coverage coverage;
  std::vector<std::pair<std::string, int64_t>> by_property;  // failing histories per property
  double seconds = 0;
};

// Runs `count` histories from seed `first` on (stopping early past `max_seconds` when > 0).
SweepResult Sweep(uint64_t first, int64_t count, const RunOptions& o = {},
                  const HistoryOptions& h = {}, double max_seconds = 0, size_t keep_failures = 20);

}  // namespace tessera::sim
