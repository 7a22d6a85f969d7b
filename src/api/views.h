// Views: the read side of the control plane. Jobs, queues, groups, nodes, the summary, events
// and health (views.cc); the utilization history and usage (history.cc); the observed workload
// as a what-if scenario (whatif.cc); GET /metrics (metrics.cc). It changes nothing: memory is
// read through LedgerReads (api/read_model.h), as const references under the engine's lock,
// and what is no longer in memory from the store.
//
// The views dashboards poll (jobs, groups, nodes, summary) are served from a snapshot: each
// rendering is kept with the memory version it shows and served again, without the engine's
// lock, while nothing changed; while the lock is busy (a scheduling cycle deciding), the last
// rendering is served at once with "stale_ms" (its age) instead of waiting. Views and /metrics
// render through ReadDurable: they never show a decision whose commit then fails.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "api/config.h"
#include "api/read_model.h"
#include "api/view_cache.h"
#include "common/status.h"
#include "store/store.h"

namespace tessera::api {

class Views {
 public:
  // `ledger` outlives the views; `data_dir` holds job output files.
  Views(LedgerReads& ledger, const EngineConfig& config, std::string data_dir)
      : ledger_(ledger), config_(config), data_dir_(std::move(data_dir)) {}

  Result<Json> ListJobs(const Identity& who, const std::string& state_filter, int limit);
  Result<Json> GetJob(const Identity& who, const std::string& id);
  // A range of a job's captured output: at most `length` (capped at kOutputRangeMax) bytes from
  // `offset`, read from its file, never the whole file at once.
  struct OutputRange {
    std::string bytes;
    int64_t offset = 0;
    int64_t total = 0;  // the output's size now
  };
  static constexpr int64_t kOutputRangeMax = int64_t{4} << 20;
  Result<OutputRange> JobOutput(const Identity& who, const std::string& id, int64_t offset = 0,
                                int64_t length = kOutputRangeMax);
  Result<Json> Queues(const Identity& who);
  Result<Json> Groups(const Identity& who);
  Result<Json> Nodes(const Identity& who);
  Result<Json> Summary(const Identity& who);
  Result<Json> Events(const Identity& who, int64_t after, int limit, const store::EventFilter& f);
  Result<int64_t> LastEventSeq() { return ledger_.DurableStore().LastSeq(); }
  // For GET /v1/health (no token): the role ("leader": a standby answers health itself, see
  // StandbyServer), whether the store takes commits, and the commit pipeline's depth.
  Json Health();

  // The cluster's utilization over time (history.cc), from the store: samples in [since, until)
  // (defaults: the last hour, now), averaged per `step` (default and minimum: the sample interval
  // while the range lies within utilization_fine_keep, else 5 minutes), with a breakdown `by`
  // group, queue or pool ("": none). A restart loses nothing.
  struct HistoryQuery {
    int64_t since_ms = 0, until_ms = 0, step_ms = 0;
    std::string by;
  };
  Result<Json> Utilization(const Identity& who, const HistoryQuery& q);
  // GPU, GPU-memory and CPU time held (and of it, held idle) in [since, until), by group,
  // identity, queue or form (form rows split by slice: the partition profile, the share's
  // memory, the number of whole cards), computed exactly (integer milli-GPU-ms, MiB-ms) from the
  // event log: from each job.placed to the event that ends the hold; idle from job.idle's
  // since_ms to job.active or the end. Users see their groups' jobs; admins all.
  struct UsageQuery {
    int64_t since_ms = 0, until_ms = 0;
    std::string by = "group";
  };
  Result<Json> Usage(const Identity& who, const UsageQuery& q);

  // The jobs submitted in [since, until) as a scenario (whatif.cc): {"scenario": YAML text (the
  // server's policy, its nodes, one workload entry per job that ran: arrival, held time, needs),
  // "observed": {class: {jobs, max_devices, wait_p50_s, wait_p99_s, wait_max_s}}, "jobs"}.
  // Admins only.
  Result<Json> WhatIfScenario(const Identity& who, int64_t since_ms, int64_t until_ms);
  // That scenario replayed by the simulator with `forms` ("CLASS=FORM[,FORM]" each) applied:
  // sim::WhatIf's report (cards per class observed, as configured and what-if; waits).
  Result<Json> WhatIf(const Identity& who, int64_t since_ms, int64_t until_ms,
                      const std::vector<std::string>& forms);

  // GET /metrics: the Prometheus text exposition (format 0.0.4) of capacity, allocation, jobs,
  // counters since start, latency histograms, heartbeat ages and telemetry (docs/metrics.md).
  // Admins, or anyone when the config says `metrics_public: true`.
  Result<std::string> Metrics(const Identity& who);

 private:
  // The kept rendering of `key` for the current memory version, or `render`'s, kept when it
  // succeeds (see above); `render` answers only with what is durable. The renderings REQUIRE that
  // `who` is not an agent: their public views refuse them.
  Result<Json> ViewOf(const std::string& key, const std::function<Result<Json>()>& render);
  // `render` under the engine's lock, answered once all it may have seen is durable.
  Result<Json> RenderDurable(const std::function<Json(const ReadModel&)>& render);
  Result<Json> ListJobsNow(const Identity& who, const std::string& state_filter, int limit);

  LedgerReads& ledger_;
  const EngineConfig& config_;
  const std::string data_dir_;
  ViewCache cache_;
};

// A utilization sample of memory now (history.cc; the engine's Tick stores one every
// utilization_sample): integer gauges of capacity, allocation, idle holding, workers and pending
// jobs, in all and by group, queue and pool.
std::string UtilizationSample(const ReadModel& m);
// The mean of the samples' integer gauges (history.cc): a 5-minute row, or a query's step.
Json AverageSamples(const std::vector<Json>& samples);
inline constexpr int64_t kCoarseSampleMs = 300'000;  // the rolled-up samples: 5 minutes

}  // namespace tessera::api
