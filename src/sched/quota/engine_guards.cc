// The quota engine's runtime guards (QueueSpec): max_runtime stops a running job; idle_timeout
// gives back an idle holding (swapped out, requeued or stopped); min_runtime and
// preemption_delay are read where victims and preemptors are chosen (PastMinRuntime, MayPreempt
// in engine_impl.h). Fair share inside a group (GroupSpec::members) keeps its members here too.
// See engine_impl.h.
#include "sched/quota/engine_impl.h"

namespace tessera::quota::internal {

void Engine::WatchRuntime(int self) {
  const Job& j = jobs_[self];
  if (j.max_runtime > 0 && j.start >= 0) runtime_stops_.insert({j.start + j.max_runtime, self});
}

void Engine::ForgetRuntime(int self) {
  Job& j = jobs_[self];
  if (j.max_runtime > 0 && j.start >= 0) runtime_stops_.erase({j.start + j.max_runtime, self});
  if (j.idle_since >= 0 && j.idle_timeout > 0)
    idle_checks_.erase({j.idle_since + j.idle_timeout, self});
  j.idle_since = -1;
  j.idle_swapped = false;
}

void Engine::SetStartTime(int self, int64_t start) {
  Job& j = jobs_[self];
  if (j.state != JobState::kRunning || start < 0 || start > j.start) return;
  const int64_t idle_since = j.idle_since;
  const bool swapped = j.idle_swapped;
  ForgetRuntime(self);
  j.start = start;
  WatchRuntime(self);
  if (idle_since >= 0) {
    SetIdle(self, idle_since);
    j.idle_swapped = swapped;
  }
}

void Engine::GuardStop(int h, const std::string& why) {
  Job& j = jobs_[h];
  if (options_.await_stop) {
    // Its processes stop first: terminating, then done (not requeued) once Stopped().
    ForgetRuntime(h);
    AddLeaving(j, +1);
    j.state = JobState::kTerminating;
    terminating_.insert(h);
    j.grace_end = now_;
    j.claimant = -1;
    j.stop_final = true;
  } else {
    EndHeld(h);
    j.state = JobState::kDone;
  }
  j.wait_step.clear();
  j.wait_reason.clear();
  Emit(EventKind::kStopped, &j, why);
}

int Engine::StopOverRuntime(int64_t now) {
  now_ = std::max(now_, now);
  int stopped = 0;
  while (!runtime_stops_.empty() && runtime_stops_.begin()->first <= now_) {
    const int h = runtime_stops_.begin()->second;
    runtime_stops_.erase(runtime_stops_.begin());
    Job& j = jobs_[h];
    if (j.state != JobState::kRunning) continue;
    GuardStop(h, "max_runtime " + std::to_string(j.max_runtime) + "s of queue " +
                     policy_.queues[j.queue].name + " reached (running since " + T(j.start) + ")");
    ++stopped;
  }
  if (stopped > 0) StepCheck("runtime guard");
  return stopped;
}

void Engine::SetIdle(int self, int64_t idle_since) {
  Job& j = jobs_[self];
  if (j.state != JobState::kRunning) return;
  if (idle_since < 0) {  // active again: a swapped-out share is back on its next use
    if (j.idle_since >= 0 && j.idle_timeout > 0)
      idle_checks_.erase({j.idle_since + j.idle_timeout, self});
    j.idle_since = -1;
    j.idle_swapped = false;
    return;
  }
  if (j.idle_since >= 0) return;  // idle already: the first report's time counts
  j.idle_since = idle_since;
  if (j.idle_timeout > 0) idle_checks_.insert({idle_since + j.idle_timeout, self});
}

int Engine::GiveBackIdle(int64_t now) {
  now_ = std::max(now_, now);
  int acted = 0;
  while (!idle_checks_.empty() && idle_checks_.begin()->first <= now_) {
    const int h = idle_checks_.begin()->second;
    idle_checks_.erase(idle_checks_.begin());
    Job& j = jobs_[h];
    if (j.state != JobState::kRunning || j.idle_since < 0 || j.idle_swapped) continue;
    const std::string why = "idle_timeout: idle " + std::to_string(now_ - j.idle_since) +
                            "s since " + T(j.idle_since) + " (queue " +
                            policy_.queues[j.queue].name + "'s idle_timeout " +
                            std::to_string(j.idle_timeout) + "s)";
    if (IdleSwaps(j)) {
      // Its memory leaves the device (the agent's swap path); it keeps its share and runs on.
      j.idle_swapped = true;
      Emit(EventKind::kSwappedOut, &j, why + ": swapped out, not stopped; resumes on its next use");
    } else if (j.idle_stop) {
      GuardStop(h, why + ": stopped");
    } else {
      // Its processes stop as a preemption's; then pending, behind the jobs waiting now (it
      // gave the holding back: the next in line gets it).
      j.idle_requeue = true;
      Preempt(h, -1, why + ": requeued");
    }
    ++acted;
  }
  if (acted > 0) StepCheck("idle guard");
  return acted;
}

// ------------------------------------------------------------------------------------------
// Fair share inside a group.

int Engine::MemberOf(int group, const std::string& identity) {
  const GroupSpec& g = groups_[group].spec;
  if (g.members.empty()) return -1;
  auto [it, added] =
      member_index_.try_emplace({group, identity}, static_cast<int>(members_.size()));
  if (!added) return it->second;
  MemberRt m;
  m.group = group;
  m.identity = identity;
  for (const MemberSpec& s : g.members) {
    if (s.identity != identity) continue;
    m.weight_milli = s.weight_milli;
    m.limit = s.limit;
  }
  members_.push_back(m);
  return it->second;
}

void Engine::AddMemberUsage(const Job& j, int sign) {
  if (j.member < 0) return;
  if (sign > 0) {
    members_[j.member].usage += j.charge;
  } else {
    members_[j.member].usage -= j.charge;
  }
}

std::vector<MemberView> Engine::members() const {
  std::vector<MemberView> out;
  for (const MemberRt& m : members_) {
    MemberView v;
    v.group = groups_[m.group].spec.name;
    v.identity = m.identity;
    v.weight_milli = m.weight_milli;
    v.usage = m.usage;
    v.limit = m.limit;
    v.fair_share = m.fair_share;
    out.push_back(v);
  }
  return out;
}

}  // namespace tessera::quota::internal
