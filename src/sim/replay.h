// Replays an openb trace through the placement core under the FGD paper's protocol:
// pods sorted by name then shuffled with the seed; the list tuned to `tune` x the cluster's GPU
// capacity (random pods of the original appended, or random pods removed); no departures; one
// pod at a time; a pod that fits nowhere is dropped. After each pod, arrived = GPU requested so
// far (dropped pods included) and allocated = GPU actually held; the curve is read at arrived =
// 0..130% of capacity.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/cluster.h"
#include "sim/openb.h"

namespace tessera::sim {

inline constexpr int kMaxArrivedPct = 130;

struct ReplayOptions {
  std::string policy = "tessera";
  uint64_t seed = 42;
  int64_t tune_milli = 1300;      // 1.3 x capacity, in thousandths
  bool check_invariants = false;  // check the state after every pod (slow; for tests)
};

struct ReplayCurve {
  // unallocated_pct[p] = unallocated GPU % of capacity when arrived first reaches p% (p in
  // 0..130). A percentage for reporting, derived from exact milli-GPU counts.
  std::vector<double> unallocated_pct;
  int64_t pods = 0;
  int64_t dropped = 0;
  int64_t never_schedulable = 0;
  MilliGpu capacity = 0;
};

Result<ReplayCurve> ReplayOpenb(const std::vector<Node>& nodes, const std::vector<TracePod>& pods,
                                const ReplayOptions& options);

struct Stat {
  double mean = 0, median = 0, sd = 0;  // sd: sample standard deviation over seeds
};
Stat Summarize(std::vector<double> values);

struct SeedSweep {
  std::string policy;
  std::vector<uint64_t> seeds;
  std::vector<ReplayCurve> curves;  // one per seed, in seed order
  // Stats over seeds at each arrived percentage 0..130.
  std::vector<Stat> unallocated;
  double seconds = 0;
};

// Runs one replay per seed on up to `threads` threads. `progress` (may be empty) is called
// after each finished seed with (done, total), from the worker that finished it.
Result<SeedSweep> SweepSeeds(const std::vector<Node>& nodes, const std::vector<TracePod>& pods,
                             const std::string& policy, const std::vector<uint64_t>& seeds,
                             int64_t tune_milli, int threads,
                             const std::function<void(int, int)>& progress);

// The trace replayed on its own clock: pods arrive at their creation_time and hold what they get
// until start + (deletion_time - creation_time); a pod that does not fit waits in a queue
// (first come, first served, smaller pods may pass a waiting one when they fit) instead of
// being dropped. Pods that could never fit (bigger than any node) are rejected and counted.
struct TimedReport {
  std::string policy;
  int64_t pods = 0;
  int64_t started = 0;
  int64_t never_schedulable = 0;
  int64_t queued = 0;  // pods that had to wait at all
  double wait_mean_s = 0, wait_p50_s = 0, wait_p99_s = 0, wait_max_s = 0;
  double gpu_allocated_mean_pct = 0;  // time-weighted over the replay
  double gpu_allocated_peak_pct = 0;
  int64_t makespan_s = 0;
};
// `compress` > 1 divides every arrival time by it (durations unchanged): the same pods, N times
// the load.
Result<TimedReport> ReplayOpenbTimed(const std::vector<Node>& nodes,
                                     const std::vector<TracePod>& pods, const std::string& policy,
                                     uint64_t seed, int64_t compress = 1);

// "42-51" or "42,45,50" or "42".
Result<std::vector<uint64_t>> ParseSeeds(const std::string& text);

}  // namespace tessera::sim
