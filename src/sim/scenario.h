// Scenarios: a cluster, a queue and quota policy and a workload, run through the quota engine
// on a virtual clock (`tessera sim scenario FILE.yaml`).
//
// A scenario file (YAML) declares:
//   name, until (e.g. 24h), cycle (scheduling interval, default 10s), grace (default 0s),
//   fair_share_half_life, repartition (bool), repartition_horizon,
//   nodes:     [{name, count, pool, cpu, memory, gpu: {model, count, memory}, mig: [profiles],
//                amd_mode}]
//   pools:     [{name, forms: [whole|partition|share]}]
//   groups:    [{name, parent, reservation: {gpu, gpu_memory, cpu, memory}, limit: {...},
//                weight}]
//   profiles:  [{name, gpus, gpu_fraction, gpu_memory, cpu, memory, forms, pools}]
//   (policy/policy_yaml.h) queues:    [{name, profile, groups, priority, preemptible, class,
//                max_runtime, min_runtime, preemption_delay}]  -- runtime guards (durations;
//                QueueSpec): stopped at max_runtime (at that second, between cycles); no victim
//                before min_runtime; preempts nothing before waiting preemption_delay
//   class_forms: {training: [whole], inference: [partition], ...}   (overrides the default)
//   workload:  [{queue, identity, group, count, at, interval, duration, class, form, gpus,
//                gpu_fraction, gpu_memory, cpu, memory, walltime, idle_after}]  -- duration and
//                gpu_memory may be lists, used in turn; walltime (default true) declares the
//                duration for backfill, false none, a duration that one (a job that runs longer
//                is stopped then); idle_after: held but idle from that long after each start
//   groups may list users: {IDENTITY: {weight, limit}} (fair share inside the group, reported
//   per member); queues may give back idle holdings (idle_timeout, idle_action)
//   compare_with: {name, class_forms: {...}}  -- run again with this table and compare
//   outages:   [{node, at, for}]  -- the node is lost at `at` (what it held goes back to pending)
//                and returns `for` later
// Every run is watched by the promise checker (verify/checker.h); what it finds is counted
// among the invariant violations, and listed in RunReport::promises.
// Durations: "30s", "5m", "2h", "1d" or seconds. Quantities: "8GiB", "0.25", "500m".
// Errors name the field ("workload[2].duration: ...").
//
// Thread-safety: value types and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sched/quota/engine.h"
#include "sched/quota/policy_model.h"
#include "verify/checker.h"

namespace tessera::sim {

struct WorkloadEntry {
  quota::JobSpec base;  // queue, identity, group, class, form, request overrides
  int count = 1;
  int64_t at_s = 0;
  int64_t interval_s = 0;
  std::vector<int64_t> durations_s;  // used in turn
  std::vector<MiB> gpu_memory_mib;   // used in turn; empty = the profile's
  bool declare_walltime = true;
  int64_t walltime_s = -1;  // declared when it is not each job's duration (-1: the duration)
  // Held but idle from this long after each start until it ends (-1: always active): what its
  // agent would report, fed to QuotaEngine::SetIdle at that second (queues' idle_timeout).
  int64_t idle_after_s = -1;
};

// A node lost for a while.
struct Outage {
  std::string node;
  int64_t at_s = 0;
  int64_t for_s = 0;
};

struct Scenario {
  std::string name;
  quota::PolicySpec policy;
  std::vector<quota::NodeSpec> nodes;
  std::vector<WorkloadEntry> workload;
  int64_t until_s = 3600;
  int64_t cycle_s = 10;
  std::optional<quota::ClassForms> compare_forms;
  std::string compare_name = "before";
  std::vector<Outage> outages;
};

Result<Scenario> ParseScenario(std::string_view yaml_text);
// `yaml_text` with its class-to-form table changed by `forms` ("CLASS=FORM[,FORM...]", e.g.
// "interactive=share"), named "what-if", and the previous entries of those classes as its
// compare_with run ("as-configured"): `tessera sim scenario` on the result runs that comparison.
Result<std::string> WithClassForms(const std::string& yaml_text,
                                   const std::vector<std::string>& forms);
// `tessera whatif`: `observed` as the server's /v1/whatif/scenario answers ({scenario, observed,
// jobs, since_ms, until_ms}) run with `forms` applied. `report`: {classes: {NAME: {jobs,
// observed_cards, as_configured_cards, what_if_cards, returned, observed_wait_p99_s,
// as_configured_wait_p99_s, what_if_wait_p99_s}}, returned, jobs, forms, report: ReportJson};
// `text`: ReportText; `scenario`: the YAML run.
struct WhatIfResult {
  std::string scenario;
  nlohmann::json report;
  std::string text;
};
Result<WhatIfResult> WhatIf(const nlohmann::json& observed, const std::vector<std::string>& forms);
// WhatIf's `report` alone: what GET /v1/whatif answers (api::EngineConfig::whatif.replay).
Result<nlohmann::json> WhatIfReport(const nlohmann::json& observed,
                                    const std::vector<std::string>& forms);
Result<Scenario> LoadScenario(const std::string& path);

struct GroupReport {
  std::string name;
  MilliGpu reservation_gpu = 0;
  MilliGpu limit_gpu = 0;
  MilliGpu max_gpu_held = 0;
  double mean_gpu_held = 0;        // milli-GPU, time-averaged over the cycles
  std::vector<MilliGpu> gpu_held;  // one sample per cycle
  int64_t jobs = 0, started = 0, never_started = 0;
  int64_t wait_p50_s = 0, wait_p99_s = 0, wait_max_s = 0;
  // Times a group below its reservation, with demand inside it, took to get it back, measured
  // from the first cycle that saw it short to the first cycle that saw it whole (or no longer
  // asking).
  std::vector<int64_t> reclaim_times_s;
  int64_t reclaim_max_s = 0;
  bool limit_exceeded = false;
  // Per GPU model it has a quota on or held something of (GroupSpec::models): the most it held
  // at a cycle and what it held at the last one, in milli-GPU.
  std::map<std::string, MilliGpu> max_model_held;
  std::map<std::string, MilliGpu> model_held;
};

struct ClassReport {
  std::string name;
  int64_t jobs = 0;
  int max_devices = 0;  // devices holding at least one job of the class, at peak
  double mean_devices = 0;
  int64_t wait_p50_s = 0, wait_p99_s = 0, wait_max_s = 0;
};

// One identity of a group that lists its users (fair share inside the group).
struct MemberReport {
  std::string group, identity;
  int64_t weight_milli = 1000;
  std::vector<MilliGpu> gpu_held;  // one sample per cycle
};

struct RunReport {
  std::string name;
  int64_t cycles = 0;
  int64_t jobs = 0;
  int64_t rejected = 0;
  int64_t preemptions = 0;
  int64_t stopped = 0;        // by a runtime guard (a queue's max_runtime)
  int64_t swapped_out = 0;    // idle shares swapped out by their queue's idle_timeout
  int64_t idle_requeued = 0;  // idle holdings requeued by their queue's idle_timeout
  int64_t idle_stopped = 0;   // ... and stopped (idle_action stop)
  // Preemption by swapping: shares held swapped out instead of stopped, resumed, and stopped
  // after their queue's swap_hold_limit; GPU-seconds of work lost by preemptions (the sum of
  // their "lost N GPU-s").
  int64_t held_swapped = 0, swapped_in = 0, hold_stopped = 0;
  int64_t lost_gpu_s = 0;
  int64_t repartitions = 0;
  int64_t backfilled = 0;
  double gpu_compute_utilization = 0;  // time-averaged allocated / capacity, 0..1
  double gpu_memory_utilization = 0;
  std::vector<GroupReport> groups;
  std::vector<ClassReport> classes;
  std::vector<MemberReport> members;                                // groups that list users only
  std::vector<std::pair<std::string, int64_t>> preemption_reasons;  // reason -> count
  std::vector<std::pair<std::string, int64_t>> repartition_reasons;
  std::vector<quota::Event> notable_events;       // first preemptions and repartitions, in order
  std::vector<std::string> invariant_violations;  // the engine's own checks and the promises
  std::vector<verify::Violation> promises;        // the promise checker's findings
  verify::Seen seen;                              // what the run contained
  std::vector<int64_t> sample_times;
  int devices = 0;
  double seconds = 0;  // wall time of the run
};

struct ScenarioReport {
  std::string scenario;
  RunReport run;
  std::optional<RunReport> baseline;  // compare_with
};

struct RunOptions {
  bool check_invariants_each_step = true;
  std::vector<quota::Event>* events = nullptr;  // receives every event of the run when set
  quota::EngineOptions::Break engine_break = quota::EngineOptions::Break::kNone;  // checker tests
  int max_reconfigurations_per_hour = 20;  // stability.reconfigure's bound
};

Result<RunReport> RunOnce(const Scenario& s, const std::string& name, RunOptions o = {});
Result<ScenarioReport> RunScenario(const Scenario& s, RunOptions o = {});

// Per hour of the run (samples at [h*3600, (h+1)*3600)), the mean of `held` (one sample per
// cycle, as GroupReport::gpu_held and MemberReport::gpu_held), in milli-GPU.
std::vector<double> HourlyMean(const RunReport& r, const std::vector<MilliGpu>& held);

std::string ReportJson(const ScenarioReport& r);  // one JSON object
std::string ReportText(const ScenarioReport& r);  // for people
std::string ReportSvg(const RunReport& r);        // GPU held per group over time

}  // namespace tessera::sim
