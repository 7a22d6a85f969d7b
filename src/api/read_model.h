// The read side's contract with the engine. The views people, dashboards and Prometheus poll
// (api/views.h) never change memory: they are handed a ReadModel, const references into the
// engine's memory valid only while the engine holds its lock for them, through the LedgerReads
// the engine implements. ReadDurable returns only once every change the reader may have seen is
// durable, so a view never shows a decision whose commit then fails.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "api/config.h"
#include "api/decision_counters.h"
#include "api/job_table.h"
#include "api/node_admin_table.h"
#include "api/records.h"
#include "common/status.h"
#include "sched/quota/engine.h"
#include "store/store.h"

namespace tessera::api {

// Memory as a reader sees it: valid only inside the callback it was handed to.
struct ReadModel {
  const EngineConfig& config;
  const quota::QuotaEngine& quota;
  const JobTable& jobs;
  const std::map<std::string, NodeInfo>& nodes;  // by name
  const NodeAdminTable& admin;
  // Decisions counted once their batches were written (settled before every reading), the
  // cycle's latency and the requests'.
  const DecisionCounters& counters;
  const Status& broken;    // not ok: a reload after a failed commit failed too
  int64_t commits_queued;  // batches queued and not yet written
};

class LedgerReads {
 public:
  virtual ~LedgerReads() = default;
  // Calls `read` under the engine's lock and returns once everything it may have seen is
  // durable. A reading that may have seen a batch whose write then failed is made again from
  // the reloaded memory; if that fails too, the failure is the answer.
  virtual Status ReadDurable(const std::function<Status(const ReadModel&)>& read) = 0;
  // Calls `read` under the engine's lock (what it sees may still be written).
  virtual void Read(const std::function<void(const ReadModel&)>& read) = 0;
  // Calls `read` only if the engine's lock is free now; false (and no call) while it is busy.
  virtual bool TryRead(const std::function<void(const ReadModel&)>& read) = 0;
  // Bumped by every change to memory: a rendering of the same version shows the same.
  virtual int64_t MemoryVersion() const = 0;
  // The durable store, for what is no longer (or never was) in memory: ended jobs, events,
  // samples. Its reads only: a reader cannot write.
  virtual store::StoreReader& DurableStore() = 0;
  virtual int64_t NowMs() const = 0;  // milliseconds since the epoch
};

// A job as people see it: its record, state, wait, forecast, guards and what it holds.
Json JobJson(const Job& j, const quota::QuotaEngine& quota,
             const std::map<std::string, NodeInfo>& nodes);
// A job's view for `who`: another identity's environment values and secret arguments hidden
// (admins see all).
Json Redacted(const Identity& who, Json job);
// Whether `who` may see `j`: admins all; users and viewers their groups' jobs.
bool CanSee(const Identity& who, const Job& j);
// A job no longer in memory, read from the store, as `who` may see it (NotFound otherwise).
Result<Job> StoredJob(store::StoreReader& store, const Identity& who, const std::string& id);
Result<Json> StoredJobJson(LedgerReads& ledger, const Identity& who, const std::string& id);
// Where a job's captured output is kept under the data directory.
std::string JobOutputPath(const std::string& data_dir, const std::string& job);

}  // namespace tessera::api
