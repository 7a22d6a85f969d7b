// LedgerPort: what an executor of external backends may ask of the engine, and nothing more.
// Its commands run without the engine's lock; what they report becomes job changes under Lock(),
// made through the same state machine (Transition, End) and the same commit pipeline (Commit) as
// every other change, so nothing an executor records is acted on or shown before it is durable.
//
// The engine lends one to its BackendExecutor (api/backend_executor.h); a test can lend a fake.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "api/job_table.h"
#include "api/records.h"
#include "common/status.h"
#include "model/job_state.h"
#include "sched/quota/engine.h"

namespace tessera::api {

class LedgerPort {
 public:
  virtual ~LedgerPort() = default;

  // The engine's lock; every call below is made with it held.
  virtual std::unique_lock<std::mutex> Lock() = 0;
  virtual JobTable& Jobs() = 0;
  virtual quota::QuotaEngine& Quota() = 0;
  // A job's state change, refused (false) when the job state table does not hold it.
  [[nodiscard]] virtual bool Transition(Job& j, JobState to, JobCause cause) = 0;
  // A job's end: its grants released, counted among the ended so it leaves memory.
  [[nodiscard]] virtual bool End(Job& j, JobState state, JobCause cause,
                                 const std::string& reason) = 0;
  // The quota engine's events since `mark` as job changes and events in `b`.
  virtual void Translate(size_t mark, Batch& b) = 0;
  virtual void WantCycle() = 0;  // the cycle runs again soon: capacity or a job changed
  // Queues `b` and waits for it to be written (the lock is released meanwhile).
  virtual Status Commit(Batch& b, std::unique_lock<std::mutex>& lock) = 0;
  virtual int64_t NowMs() const = 0;
};

}  // namespace tessera::api
