// Housekeeping: the periodic chores that keep the store's history, run by the ticker after each
// Tick's own work, with store writes outside the engine's lock:
//   - a utilization sample every utilization_sample_ms (GET /v1/history), complete 5-minute
//     buckets rolled into averages, and samples older than their keep pruned;
//   - retention (hourly): ended jobs and events older than `retention`, failed authentications
//     older than their own retention;
//   - the fair-share history saved every minute and on a clean stop, and restored on load, so
//     that a restart does not forget who used what.
//
// It reads memory only as the views do, through LedgerReads (api/read_model.h), and writes only
// the store's history, settings and retention, through the store it is lent: never a job or an
// event (those go through the commit pipeline).
//
// Thread-safety: Tick from the ticker only; SaveFairShare from it or the engine's destructor;
// RestoreFairShare under the engine's lock (a load).
#pragma once

#include <atomic>
#include <cstdint>

#include "api/config.h"
#include "api/read_model.h"
#include "common/status.h"
#include "sched/quota/engine.h"

namespace tessera::api {

class Housekeeping {
 public:
  Housekeeping(LedgerReads& reads, store::Store& history, const EngineConfig& config);

  // Whichever chores are due.
  Status Tick();
  // The fair-share history into the store (setting kFairShareKey), when kFairShareSaveMs passed
  // since the last save, or at once with `now`; as {"as_of": s, "groups": {name: [gpu,
  // gpu_memory, cpu, memory]}}.
  Status SaveFairShare(bool now);
  // The stored fair-share history into `qe` (an unreadable one is ignored: it starts afresh).
  Status RestoreFairShare(quota::QuotaEngine& qe, int64_t now_s);

  static constexpr const char* kFairShareKey = "scheduler.fair_share";
  static constexpr int64_t kFairShareSaveMs = 60'000;
  static constexpr int64_t kPruneEveryMs = 3600 * 1000;

 private:
  // Takes a sample when due, rolls complete 5-minute buckets into averages and prunes.
  Status HistoryTick();
  // Deletes from the store what the retention settings let go (hourly).
  Status RetentionTick();

  LedgerReads& reads_;
  store::Store& history_;  // samples, settings and retention
  const EngineConfig& config_;
  // When each chore was last done.
  struct Done {
    int64_t fair_share_saved_ms = 0;  // under the engine's lock (in a Read)
    std::atomic<int64_t> pruned_ms{0};
    int64_t sampled_ms = 0;    // the utilization history's last sample (in a Read)
    int64_t rolled_up_ms = 0;  // 5-minute buckets before this are rolled up
  } done_;
};

}  // namespace tessera::api
