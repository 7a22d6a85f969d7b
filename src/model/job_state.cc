#include "model/job_state.h"

#include <string>

#include "common/enum_names.h"

namespace tessera {
namespace {

using S = JobState;
using C = JobCause;

// The table of job_state.h, row by row: derived from what the control plane does (api/: the
// cycle's decisions in engine.cc, submissions and cancels in submit.cc, agents in
// agent_gateway.cc, batch backends in backend_executor.cc; a restart's reload in engine.cc).
constexpr JobTransition kTable[] = {
    // The cycle.
    {S::kPending, S::kPlaced, C::kPlaced},
    {S::kPlaced, S::kPreempting, C::kPreempted},
    {S::kStarting, S::kPreempting, C::kPreempted},
    {S::kRunning, S::kPreempting, C::kPreempted},
    // Pending again, its submit time kept.
    {S::kPreempting, S::kPending, C::kRequeued},
    {S::kPlaced, S::kPending, C::kRequeued},
    {S::kStarting, S::kPending, C::kRequeued},
    {S::kRunning, S::kPending, C::kRequeued},
    // Its agent or backend: handed over, running.
    {S::kPlaced, S::kStarting, C::kStarted},
    {S::kPlaced, S::kRunning, C::kRunning},
    {S::kStarting, S::kRunning, C::kRunning},
    // Ends of a job that holds capacity.
    {S::kPlaced, S::kSucceeded, C::kExited},
    {S::kPlaced, S::kFailed, C::kExited},
    {S::kPlaced, S::kCancelled, C::kExited},
    {S::kStarting, S::kSucceeded, C::kExited},
    {S::kStarting, S::kFailed, C::kExited},
    {S::kStarting, S::kCancelled, C::kExited},
    {S::kRunning, S::kSucceeded, C::kExited},
    {S::kRunning, S::kFailed, C::kExited},
    {S::kRunning, S::kCancelled, C::kExited},
    {S::kPreempting, S::kSucceeded, C::kExited},
    {S::kPreempting, S::kFailed, C::kExited},
    {S::kPreempting, S::kCancelled, C::kExited},
    {S::kPending, S::kCancelled, C::kCancelled},
    {S::kPlaced, S::kCancelled, C::kCancelled},
    {S::kStarting, S::kCancelled, C::kCancelled},
    {S::kRunning, S::kCancelled, C::kCancelled},
    {S::kPreempting, S::kCancelled, C::kCancelled},
    {S::kPlaced, S::kLost, C::kLost},
    {S::kStarting, S::kLost, C::kLost},
    {S::kRunning, S::kLost, C::kLost},
    {S::kPreempting, S::kLost, C::kLost},
    // The control plane cannot run it.
    {S::kPending, S::kFailed, C::kRefused},
    {S::kPlaced, S::kFailed, C::kRefused},
    {S::kStarting, S::kFailed, C::kRefused},
    {S::kRunning, S::kFailed, C::kRefused},
    {S::kPreempting, S::kFailed, C::kRefused},
};

constexpr auto kJobStateNames =
    NamesUpTo<JobState::kLost>("pending", "placed", "starting", "running", "preempting",
                               "succeeded", "failed", "cancelled", "lost");
constexpr auto kCauseNames =
    NamesUpTo<JobCause::kRefused>("placed", "started", "running", "preempted", "requeued", "exited",
                                  "cancelled", "lost", "refused");

}  // namespace

const char* JobStateName(JobState s) { return kJobStateNames.Of(s, "?"); }

Result<JobState> ParseJobState(std::string_view name) {
  if (auto s = kJobStateNames.Find(name)) return *s;
  return Status::InvalidArgument("unknown job state '" + std::string(name) + "' (" +
                                 kJobStateNames.List() + ")");
}

bool IsTerminal(JobState s) {
  return s == JobState::kSucceeded || s == JobState::kFailed || s == JobState::kCancelled ||
         s == JobState::kLost;
}

bool HoldsCapacity(JobState s) {
  return s == JobState::kPlaced || s == JobState::kStarting || s == JobState::kRunning ||
         s == JobState::kPreempting;
}

const char* JobCauseName(JobCause c) { return kCauseNames.Of(c, "?"); }

std::span<const JobTransition> JobTransitions() { return kTable; }

bool JobTransitionAllowed(JobState from, JobState to) {
  for (const JobTransition& t : kTable) {
    if (t.from == from && t.to == to) return true;
  }
  return false;
}

Status CheckJobTransition(JobState from, JobState to, JobCause cause) {
  for (const JobTransition& t : kTable) {
    if (t.from == from && t.to == to && t.cause == cause) return Status::Ok();
  }
  return Status::FailedPrecondition(std::string("job state '") + JobStateName(from) +
                                    "' cannot become '" + JobStateName(to) + "' (" +
                                    JobCauseName(cause) + "): not in the job state table");
}

}  // namespace tessera
