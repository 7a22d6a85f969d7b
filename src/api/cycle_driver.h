// CycleDriver: the scheduling cycle and what its decisions become. It runs the quota engine's
// cycle (sched/quota, the same one `tessera sim` drives) when its CyclePacer says so, and turns
// the quota engine's events (admitted, placed, preempted, stopped by a guard, swapped out and in,
// requeued, repartitioned) into job changes and events in a batch, through the job state table;
// it counts the decisions for /metrics with the batch that will carry them, and keeps each
// waiting job's place in the order and the step and reason that hold it.
//
// It reaches the engine only through a CyclePort (api/ledger_port.h): the lock, the jobs, the
// quota engine, the job state machine and the commit pipeline's queue. Nothing it changes is
// acted on before its batch is durable: the caller commits it.
//
// Thread-safety: every method under the engine's lock (the ticker's Tick, RunCycle, or a
// submission the pacer lets run a cycle).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "api/config.h"
#include "api/cycle_budget.h"
#include "api/decision_counters.h"
#include "api/ledger_port.h"
#include "api/records.h"

namespace tessera::api {

class CycleDriver {
 public:
  // `counters`: /metrics' decision counts. `delete_external`: a job the cycle moved to another
  // of its queue's backends leaves the one that kept it suspended (its object deleted there).
  CycleDriver(std::unique_ptr<CyclePort> ledger, const EngineConfig& config,
              DecisionCounters& counters, std::function<void(const Job&)> delete_external);

  // Runs one cycle; its decisions as job changes and events in `b`. A large cycle's decisions
  // are queued for the writer in chunks while it goes on (after whatever `b` held before), so
  // that writing them overlaps deciding the rest; nobody acts on them before the caller's
  // commit, which waits for all of them.
  void RunLocked(Batch& b);
  // The quota engine's events since `from` as job changes and events in `b` (a cycle's, or an
  // eviction's, requeue's or stop's made outside one); the events are then cleared.
  void TranslateLocked(size_t from, Batch& b);
  // A job just preempted (`placed`: before any start order went out): marks its parts that
  // never started as done, and the job as preempted_unstarted where nothing of it runs.
  void NoteUnstartedPartsLocked(Job& j, bool placed);
  // When the cycle runs: wanted, due, or run by a submission.
  CyclePacer& pacer() { return pacer_; }

 private:
  // A quota kSwappedOut or kSwappedIn, or the kStopped of a job held swapped out.
  void SwapEventLocked(Job& j, const quota::Event& e, Batch& b);
  void RefreshWaitReasonsLocked();
  // A placed job's grants, form and node (or external backend) from the quota engine.
  void FillGrantsLocked(Job& j);
  // Counts a placement, preemption or repartition with the batch that will carry it (the next
  // one queued); `j`: the event's job, if any.
  void CountEventLocked(const quota::Event& e, const Job* j);

  std::unique_ptr<CyclePort> ledger_;
  const EngineConfig& config_;
  DecisionCounters& counters_;
  std::function<void(const Job&)> delete_external_;
  CyclePacer pacer_;
};

}  // namespace tessera::api
