// `tessera whatif --usage FILE`: a fleet's telemetry (usage_history.h) replayed over time
// through the quota engine's cycle (sched/quota/engine.h), under three plans:
//
//   whole  every workload holds its requested GPUs as whole cards while it exists;
//   forms  the class-to-form policy: a workload of several GPUs is training (whole cards), one
//          busy at least busy_duty of its time is inference (the smallest hardware partition
//          covering it, else whole), the rest interactive (a share); caps at the observed peak
//          memory plus headroom, compute weights at the mean utilization;
//   swap   as forms, with the interactive shares active less than swap_duty of their time on a
//          swapping queue (the busier ones stay plain shares): caps may sum past a card's
//          memory (overcommit), idle shares' memory leaves the card. The swap model's rules
//          (swap_model.h: ahead-of-need swap-out of shares idle for idle_ms while the card has less
//          free than its largest cap, least recently active evicted first when a wake needs room,
//          one transfer at a time on each card's host link, host RAM then disk) are replayed
//          against the observed active spans, so a wake waits for its bytes to come back (and
//          for room, when active shares fill the card). Overcommits are tried in turn; the plan
//          is the one with the fewest cards whose wake p99 stays within wake_p99_limit_ms.
//
// Arrivals and departures are each workload's first and last samples; the engine's cycle runs
// at each of them (and every cycle_s while something waits). "Cards needed" is the most devices
// holding anything at once. The lower bound, whatever the scheduler: at each step, the memory of
// the workloads active then, in cards (rounded up), at the busiest step. Beside it, the duty
// cycles summed (the mean number of workloads active: the bound if each active workload held a
// card of its own) and the utilization summed at the busiest step (compute that shares past it
// get time-sliced, so slower).
//
// Integers for capacity throughout: MiB, milli-GPU, ms (us inside the swap replay).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "sim/usage_history.h"

namespace tessera::sim::usage {

struct WhatIfOptions {
  std::string card = "H100-80GB";  // a model of the partition catalog
  int gpus_per_node = 8;
  int64_t host_mbps = 50'000;          // each card's host link (MB/s = bytes/us)
  int64_t disk_mbps = 5'000;           // past the host RAM budget
  int64_t host_ram_mib = 1024 * 1024;  // swapped-out bytes a card's share of host RAM holds
  int headroom_pct = 10;               // caps: observed peak + this much, rounded up to GiB
  int32_t active_util_pm = 10;         // a sample is active at this utilization or more (1%)
  int32_t busy_duty_pm = 900;          // single-GPU workloads active this much are inference
  int32_t swap_duty_pm = 600;          // the swap plan swaps interactive shares active less
  int64_t idle_ms = 30'000;            // the agent's --swap-idle
  // The agent's --swap-slice: 0, a wake that finds active shares filling the card waits for one
  // to go idle; else active shares that have run this long make room (they wait to come back).
  int64_t slice_ms = 0;
  int64_t wake_p99_limit_ms = 10'000;  // the swap plan keeps its wake p99 within this
  std::vector<int> overcommits = {150, 200, 300, 400, 600, 800};  // percent, tried in turn
  int64_t step_ms = 0, max_gap_ms = 0;                            // 0: inferred (Normalize)
  int64_t cycle_s = 60;  // cycles while something waits for placement
};

Status ValidateWhatIfOptions(const WhatIfOptions& o);

struct TeamHours {
  int64_t workloads = 0;
  int64_t held_gpu_milli_ms = 0;  // what the plan holds for the team
  int64_t used_gpu_milli_ms = 0;  // what the telemetry says it used (utilization x time)
};

struct Point {
  int64_t t_ms = 0;  // since the history's start
  int64_t value = 0;
};

struct PlanResult {
  std::string name;  // whole, forms, swap
  int overcommit_pct = 0;
  int cards = 0;  // devices holding anything, at peak
  int64_t whole = 0, partitions = 0, shares = 0, swapping = 0, rejected = 0;
  int64_t start_wait_p99_ms = 0;  // waits of the engine to place a workload on arrival
  // Swap replay (zero for plans without swapping): wakes that found the memory swapped out.
  int64_t activations = 0, wakes = 0, waits_for_room = 0, swap_outs = 0, swapped_mib = 0;
  int64_t wake_p50_ms = 0, wake_p99_ms = 0, wake_max_ms = 0;  // over the wakes from swap
  int64_t activation_p99_ms = 0;                              // over every activation
  int64_t preemptions = 0, return_p99_ms = 0;  // slicing: active shares swapped out, their waits
  int64_t peak_host_mib = 0;                   // on one card's host
  int64_t disk_swap_outs = 0;
  std::map<std::string, TeamHours> teams;
  std::vector<Point> cards_over_time;  // on every change
};

struct WorkloadRow {
  std::string name, team, cls;  // cls: training, inference, interactive
  int gpus = 1;
  WorkloadStats stats;
  int64_t cap_mib = 0;
  int64_t compute_milli = 0;
};

struct WhatIfUsage {
  WhatIfOptions options;
  int64_t card_memory_mib = 0;
  History history;  // normalized; samples dropped after analysis
  std::vector<WorkloadRow> workloads;
  PlanResult whole, forms, swap;
  std::vector<PlanResult> swap_tried;  // every overcommit tried
  bool swap_within_limit = false;      // else: no overcommit kept the wake p99 within the limit,
                                       // and `swap` is the one with the shortest
  // The lower bound and what stands beside it.
  int lb_cards = 0;                 // = lb_memory_cards
  int lb_memory_cards = 0;          // max over steps of ceil(active memory / card memory)
  int lb_util_gpus = 0;             // max over steps of ceil(active utilization): no bound
  int64_t duty_sum_milli = 0;       // duty cycles x GPUs, summed: mean GPUs kept busy (milli)
  int64_t used_gpu_milli_ms = 0;    // the whole fleet's utilization x time
  std::vector<Point> lb_over_time;  // the memory bound per step (max per plot bin)
  double seconds = 0;               // wall time of the replay (reporting only)
};

// Normalizes `history` (taking it) and replays it.
Result<WhatIfUsage> RunWhatIfUsage(History history, const WhatIfOptions& o);

// The value at `per_mille` of the sorted values (0 when empty).
int64_t Percentile(std::vector<int64_t> v, int per_mille);

// Reports (usage_report.cc). `max_rows`: workloads listed in the text (0: all).
std::string UsageText(const WhatIfUsage& r, size_t max_rows = 25);
std::string UsageJson(const WhatIfUsage& r);  // one JSON object
std::string UsageHtml(const WhatIfUsage& r);  // a page with inline SVG plots

// The swap replay of one card (usage_swap.cc): occupants with caps, present from arrival to
// departure, active over their spans.
struct SwapOccupant {
  int64_t cap_mib = 0;
  int64_t arrive_ms = 0, depart_ms = 0;
  std::vector<Span> active;
  // Out: time its memory was on the card.
  int64_t resident_ms = 0;
};
struct SwapCardResult {
  std::vector<int64_t> wakes_us;        // each wake from swap: activation to memory back
  std::vector<int64_t> activations_us;  // every activation (0 when resident)
  std::vector<int64_t> returns_us;      // slicing: a preempted share's wait to come back
  int64_t preemptions = 0;
  int64_t waits_for_room = 0, swap_outs = 0, swapped_mib = 0, peak_host_mib = 0, disk_swap_outs = 0;
};
SwapCardResult ReplaySwapCard(std::vector<SwapOccupant>* occupants, int64_t card_memory_mib,
                              const WhatIfOptions& o);

}  // namespace tessera::sim::usage
