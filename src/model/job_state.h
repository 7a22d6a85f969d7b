// A served job's state and the one table of how it may change: the control plane's cycle, its
// executors (node agents and batch backends) and its store all speak of a job's state through
// this file. The names are the wire format (the API's "state", the store's `jobs.state` column,
// `tessera jobs`), so they never change once released.
//
//   submitted ─► pending ─placed─► placed ─started─► starting ─running─► running
//                                   placed ──────────running──────────────► running
//   placed, starting, running ─preempted─► preempting ─requeued─► pending (once its processes
//                                                                 are gone)
//   placed, starting, running ─requeued─► pending (its node lost under requeue_on_loss; its pod
//                                                  unschedulable past placement_timeout)
//
//   Every state that holds capacity (placed, starting, running, preempting) ends as
//     succeeded | failed | cancelled   exited: its processes or its backend job ended
//     cancelled                        cancelled: by a person (placed: before it started), or
//                                      its backend job deleted on request
//     lost                             lost: its node was lost, or its backend forgot the job
//     failed                           refused: see below
//   pending ends only as cancelled (a person, or its deleted backend job) or failed (refused).
//   refused: the control plane cannot run it (its batch script cannot be rendered; after a
//   restart the policy no longer schedules it), from any state that has not ended.
//   succeeded, failed, cancelled and lost are terminal: nothing leaves them.
//
// JobTransitions() (job_state.cc) is that picture row by row; tests/model/job_state_test.cc holds
// an explicit copy, so a change to it is deliberate. A change the table does not hold is refused by
// CheckJobTransition, naming both states and the cause.
//
// Thread-safety: pure functions over constant tables.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/status.h"

namespace tessera {

enum class JobState : uint8_t {
  kPending,     // waiting for the cycle; carries the step and reason that hold it
  kPlaced,      // admitted, holding its grants; not yet handed to its agent or backend
  kStarting,    // its agent was ordered to start it, or its backend has it
  kRunning,     // its agent or backend reports it running
  kPreempting,  // preempted: holds its grants until its processes are gone, then pending
  kSucceeded,   // terminal: exit code 0
  kFailed,      // terminal: a non-zero exit, a signal, or refused by the control plane
  kCancelled,   // terminal: cancelled by a person
  kLost,        // terminal: its node or its backend lost it
};

inline constexpr std::array<JobState, 9> kJobStates = {
    JobState::kPending, JobState::kPlaced,     JobState::kStarting,
    JobState::kRunning, JobState::kPreempting, JobState::kSucceeded,
    JobState::kFailed,  JobState::kCancelled,  JobState::kLost};

// A submitted job's first state.
inline constexpr JobState kInitialJobState = JobState::kPending;

// "pending", "placed", "starting", "running", "preempting", "succeeded", "failed", "cancelled",
// "lost".
const char* JobStateName(JobState s);
// The name back; InvalidArgument naming the text for any other ("" included).
Result<JobState> ParseJobState(std::string_view name);

// succeeded, failed, cancelled, lost: a job in one of these never changes again.
bool IsTerminal(JobState s);
// placed, starting, running, preempting: the job holds its grants (capacity) in the cycle.
bool HoldsCapacity(JobState s);

// What causes a change of state.
enum class JobCause : uint8_t {
  kPlaced,     // the cycle admitted and placed it
  kStarted,    // handed over: a start order to its agent, a submission to its backend (or its
               // adoption after a restart), a suspended Kubernetes Job resumed
  kRunning,    // its agent or backend reports it running
  kPreempted,  // the cycle preempted it (reclaim, priority, repartitioning)
  kRequeued,   // pending again, its submit time kept: stopped after a preemption, its node lost
               // under requeue_on_loss, its pod unschedulable past placement_timeout
  kExited,     // its processes or its backend job ended (cancelled: after a cancel request)
  kCancelled,  // cancelled by a person before it started, or its backend job deleted on request
  kLost,       // its node was lost (no requeue), or its backend no longer knows the job
  kRefused,    // the control plane cannot run it: no batch script, or no longer schedulable
};

// "placed", "started", "running", "preempted", "requeued", "exited", "cancelled", "lost",
// "refused".
const char* JobCauseName(JobCause c);

struct JobTransition {
  JobState from;
  JobState to;
  JobCause cause;
};

// The table: every change of state the control plane makes, with what causes it.
std::span<const JobTransition> JobTransitions();

// Whether some cause moves a job from `from` to `to`.
bool JobTransitionAllowed(JobState from, JobState to);
// OK when the table holds (from, to, cause); FailedPrecondition naming both states and the
// cause otherwise ("job state 'succeeded' cannot become 'running' (running): not in the job
// state table").
Status CheckJobTransition(JobState from, JobState to, JobCause cause);

}  // namespace tessera
