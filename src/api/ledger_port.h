// LedgerPort: what an executor of external backends may ask of the engine, and nothing more.
// Its commands run without the engine's lock; what they report becomes job changes under Lock(),
// made through the same state machine (Transition, End) and the same commit pipeline (Commit) as
// every other change, so nothing an executor records is acted on or shown before it is durable.
//
// The jobs and the quota engine are read only through a port. An executor changes a job's state
// and record by name (Transition, End, SetReason, SetExitCode), and its own bookkeeping of a job
// through ExternalOf (AgentPort::AgentSideOf): never the job's placement, grants or commit marks.
// It changes the quota engine by name too (Stopped, Requeue, Evict, ...), and each such call
// records in the caller's batch what the quota engine decided of it, so no change of an
// executor's can skip its batch. Only the CycleDriver, which owns the quota cycle, is lent a
// CyclePort with the job table and the quota engine themselves.
//
// The engine lends one to its BackendExecutor (api/backend_executor.h), a CyclePort to its
// CycleDriver (api/cycle_driver.h), and an AgentPort, the same widened with what the agents'
// replies need, to its AgentExecutor (api/agent_executor.h); a test can lend a fake, which
// implements the virtual calls only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "api/job_table.h"
#include "api/order_watches.h"
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
  // The jobs, to read: the calls below change them.
  const JobTable& Jobs() { return JobsToChange(); }
  // What an external backend's executor keeps of `j` (its job id there, polls, backoff), to
  // change; `j` is one of Jobs().
  Job::External& ExternalOf(const Job& j) { return JobsToChange().Own(j).ext; }
  // `j`'s reason (shown, and stored with its next record), and its update time when given.
  void SetReason(const Job& j, std::string reason, std::optional<int64_t> update_ms = {});
  // An ended job's exit code, as its backend or agent said.
  void SetExitCode(const Job& j, std::optional<int> code);
  // An ended job that was never reported running (it ended within its agent's first heartbeat
  // period, or between two polls of its backend) started `run_ms` before now, as its agent or
  // scheduler measured it; no earlier than it was submitted. A start already known is kept.
  void SetRanFor(const Job& j, int64_t run_ms);
  // The quota engine, to read: the calls below change it.
  const quota::QuotaEngine& Quota() { return QuotaToChange(); }
  // `j`'s processes are gone (its preemption done, its suspension confirmed): its grants
  // released, the job pending again.
  void Stopped(const Job& j, Batch& b);
  // `j` pending again at once, for `why` (its node lost, its backend silent, its pod unplaced).
  void Requeue(const Job& j, const std::string& why, Batch& b);
  // `j` preempted for `why` (its device unhealthy): stopped as any preemption is, then pending.
  void Evict(const Job& j, const std::string& why, Batch& b);
  // `j` idle since `since_s` (its queue's idle_timeout counts from there), or active (-1).
  void SetIdle(const Job& j, int64_t since_s);
  // An external backend answers or not (a queue over several sends its work elsewhere meanwhile),
  // and the GPU capacity it offers.
  void SetExternalAnswering(const std::string& backend, bool answering);
  void SetExternalCapacity(const std::string& backend, int64_t gpu_milli);
  // A job's state change, refused (false) when the job state table does not hold it.
  [[nodiscard]] virtual bool Transition(const Job& j, JobState to, JobCause cause) = 0;
  // A job's end: its grants released, counted among the ended so it leaves memory.
  [[nodiscard]] virtual bool End(const Job& j, JobState state, JobCause cause,
                                 const std::string& reason) = 0;
  // The quota engine's events since `mark` as job changes and events in `b`.
  virtual void Translate(size_t mark, Batch& b) = 0;
  virtual void WantCycle() = 0;  // the cycle runs again soon: capacity or a job changed
  // Queues `b` and waits for it to be written (the lock is released meanwhile).
  virtual Status Commit(Batch& b, std::unique_lock<std::mutex>& lock) = 0;
  // Queues `b` for the writer without waiting; its sequence number (0 when it was empty).
  virtual int64_t Queue(Batch& b) = 0;
  virtual int64_t LastQueued() = 0;  // the last batch queued
  // The last batch written: an executor enacts a job's decisions once the batch that carried its
  // record (Job::last_seq) is at most this, never one that may still roll back.
  virtual int64_t Durable() = 0;
  virtual int64_t NowMs() const = 0;
  // Not Ok when memory could not be rebuilt from the store after a failed write: nothing is
  // served, and nothing more is queued.
  virtual Status Broken() = 0;

 protected:
  // The job table and the quota engine themselves: for the calls above, a CyclePort's and an
  // AgentPort's.
  virtual JobTable& JobsToChange() = 0;
  virtual quota::QuotaEngine& QuotaToChange() = 0;

 private:
  // Records in `b` what the quota engine decided since `mark` and asks for a cycle.
  void Decided(size_t mark, Batch& b);
};

// CyclePort: the CycleDriver's, which owns the quota cycle (it runs it, and clears the events it
// has turned into job changes) and turns its decisions into the jobs' changes.
class CyclePort : public virtual LedgerPort {
 public:
  quota::QuotaEngine& Cycle() { return QuotaToChange(); }
  JobTable& CycleJobs() { return JobsToChange(); }
};

// AgentPort: what the node agents' executor may ask of the engine besides: what may take new
// work, the commit pipeline's sequence (an agent acts on durable decisions
// only, and its replies wait for what they acknowledge), and the audit trail. Like LedgerPort's,
// every call is made with Lock() held unless it says otherwise.
class AgentPort : public virtual LedgerPort {
 public:
  using Json = nlohmann::json;
  // A node's inventory into the quota engine (or the same again: a down node back up), down when
  // `down`; the error names what it cannot hold.
  Status AddNode(const quota::NodeSpec& spec, bool down);
  // Nothing new goes to `node` (lost), or it takes work again.
  void SetNodeDown(const std::string& node, bool down);
  // Its devices' isolation ranks and MPS, as registered.
  void ApplyIsolation(const NodeInfo& n);
  // What the agents' executor keeps of `j` (its start orders, what its agents report), to
  // change; `j` is one of Jobs().
  Job::AgentSide& AgentSideOf(const Job& j) { return JobsToChange().Own(j).agent; }
  // Tells the quota engine what may take new work on `n` (its loss and its devices' health, as
  // the executor holds them, and the administrators' cordons and drains, as the engine does).
  virtual void SetSchedulable(const NodeInfo& n) = 0;
  // Queues `b` for the writer without waiting; its sequence number (0 when it was empty).
  virtual int64_t Queue(Batch& b) = 0;
  virtual int64_t LastQueued() = 0;                       // the last batch queued
  virtual int64_t LastNews(const std::string& node) = 0;  // the last that gives `node` orders
  // Without the lock: answers `done` with a queued reply once the batch it rests on (its
  // sequence; 0: now) is durable, or with the write's error, or at once with the call's own.
  virtual void AnswerWhenDurable(Result<std::pair<Json, int64_t>> queued,
                                 std::function<void(Result<Json>)> done) = 0;
  // Without the lock: waits for what is queued; after a failed write, memory is rebuilt first.
  virtual Status Sync() = 0;
  // Memory rebuilt from the store after `cause` (a write that failed); returns the error to give.
  virtual Status Reload(const Status& cause) = 0;
  // Without the lock: a node's inventory (its registration's body), durable once this returns.
  virtual Status SaveNode(const std::string& node, const std::string& inventory) = 0;
  // An audit event, queued (not waited for); refusals are rate-limited.
  virtual void Audit(const std::string& actor, const std::string& kind, const std::string& subject,
                     const std::string& reason, Json data) = 0;
  // The store's fencing epoch when this engine opened: in every reply to an agent.
  virtual int64_t Epoch() = 0;
  virtual OrderWatches& Watches() = 0;  // the agents' long polls (its own lock; any thread)
};

}  // namespace tessera::api
