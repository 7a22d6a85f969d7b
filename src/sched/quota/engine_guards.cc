// The quota engine's runtime guards (QueueSpec): max_runtime, or a job's declared walltime, stops
// a running job; idle_timeout gives back an idle holding (swapped out, requeued or stopped);
// min_runtime and preemption_delay are read where victims and preemptors are chosen
// (PastMinRuntime, MayPreempt in engine_impl.h). Fair share inside a group (GroupSpec::members)
// keeps its members here too. See engine_impl.h.
#include "sched/quota/engine_impl.h"

namespace tessera::quota::internal {
namespace {

// The first handle in a (time, handle) queue whose time has come by `now`, taken off the queue;
// -1 when none has.
int PopDue(std::set<std::pair<int64_t, int>>& due, int64_t now) {
  if (due.empty() || due.begin()->first > now) return -1;
  const int h = due.begin()->second;
  due.erase(due.begin());
  return h;
}

// When the first entry of a (time, handle) queue comes due; -1 when the queue is empty.
int64_t NextDue(const std::set<std::pair<int64_t, int>>& due) {
  return due.empty() ? -1 : due.begin()->first;
}

}  // namespace

int64_t Engine::NextRuntimeStop() const { return NextDue(runtime_stops_); }

int64_t Engine::NextIdleGiveBack() const { return NextDue(idle_checks_); }

void Engine::WatchRuntime(int self) {
  Job& j = jobs_[self];
  if (j.stop_key >= 0) runtime_stops_.erase({j.stop_key, self});
  j.stop_key = -1;
  if (j.run_limit <= 0 || j.start < 0) return;
  j.stop_key = j.start + j.run_limit + j.paused;
  runtime_stops_.insert({j.stop_key, self});
}

void Engine::ForgetRuntime(int self) {
  Job& j = jobs_[self];
  if (j.stop_key >= 0) runtime_stops_.erase({j.stop_key, self});
  j.stop_key = -1;
  if (j.idle_since >= 0 && j.idle_timeout > 0)
    idle_checks_.erase({j.idle_since + j.idle_timeout, self});
  idle_overdue_.erase(self);
  j.idle_since = -1;
  j.idle_swapped = false;
}

void Engine::SetRunStart(int self, int64_t start) {
  Job& j = jobs_[self];
  if (j.state != JobState::kRunning || start <= j.start || j.resumed) return;
  MoveStart(self, start);
}

void Engine::SetStartTime(int self, int64_t start) {
  Job& j = jobs_[self];
  if (j.state != JobState::kRunning || start < 0 || start > j.start) return;
  MoveStart(self, start);
}

void Engine::MoveStart(int self, int64_t start) {
  Job& j = jobs_[self];
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

bool Engine::PastMinRuntime(const Job& v) const {
  return v.min_runtime <= 0 || (v.start >= 0 && now_ - v.start >= v.min_runtime) ||
         options_.engine_break == EngineOptions::Break::kIgnoreMinRuntime;
}

bool Engine::MayPreempt(const Job& j) const {
  if (j.held_dev >= 0) return false;  // held swapped out: it waits for its own device
  return j.preempt_delay <= 0 || now_ - j.waiting_since >= j.preempt_delay ||
         options_.engine_break == EngineOptions::Break::kIgnorePreemptionDelay;
}

void Engine::GuardStop(int h, const std::string& why) {
  Job& j = jobs_[h];
  if (options_.await_stop) {
    // Its processes stop first: terminating, then done (not requeued) once Stopped().
    ForgetRuntime(h);
    AddLeaving(j, +1);
    SetState(h, JobState::kTerminating);
    terminating_.insert(h);
    j.grace_end = now_;
    j.claimant = -1;
    j.stop_final = true;
  } else {
    EndHeld(h);
    SetState(h, JobState::kDone);
  }
  j.wait_step.clear();
  j.wait_reason.clear();
  Emit(EventKind::kStopped, &j, why);
}

int Engine::StopOverRuntime(int64_t now) {
  now_ = std::max(now_, now);
  int stopped = 0;
  for (int h = PopDue(runtime_stops_, now_); h >= 0; h = PopDue(runtime_stops_, now_)) {
    Job& j = jobs_[h];
    if (j.state != JobState::kRunning) continue;
    const std::string since =
        " reached (running since " + T(j.start) +
        (j.paused > 0 ? ", held swapped out " + std::to_string(j.paused) + "s of it" : "") + ")";
    const std::string limit = std::to_string(j.run_limit) + "s";
    GuardStop(h, j.run_limit == j.max_runtime
                     ? "max_runtime " + limit + " of queue " + policy_.queues[j.queue].name + since
                     : "walltime " + limit + " (declared at submission)" + since);
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
    idle_overdue_.erase(self);
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
  std::vector<int> due(idle_overdue_.begin(), idle_overdue_.end());
  idle_overdue_.clear();
  for (int h = PopDue(idle_checks_, now_); h >= 0; h = PopDue(idle_checks_, now_)) due.push_back(h);
  // A requeue gives the holding to the jobs waiting: with none, the job was stopped and placed
  // back on its card every idle_timeout, losing its work each time (a new user's: 29 GPU-s every
  // 30 s, for good). It waits past its timeout until another job waits.
  // Jobs that could take it: not held swapped out (they wait for their own card), not held at a
  // limit, not another scheduler's.
  const bool others_wait =
      !due.empty() && std::any_of(pending_.begin(), pending_.end(), [&](int p) {
        const Job& x = jobs_[p];
        return x.state == JobState::kPending && x.held_dev < 0 && !x.external &&
               x.wait_step != "Admission";
      });  // looked for only when some job is due
  for (int h : due) {
    Job& j = jobs_[h];
    if (j.state != JobState::kRunning || j.idle_since < 0 || j.idle_swapped ||
        now_ - j.idle_since < j.idle_timeout)
      continue;
    if (!IdleSwaps(j) && !j.idle_stop && !others_wait) {
      idle_overdue_.insert(h);
      continue;
    }
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

// ------------------------------------------------------------------------------------------
// Preemption by swapping (issue 36): a share of a swapping queue (QueueSpec
// swap_overcommit_percent > 0) preempted by reclaim or priority is held swapped out instead of
// stopped. Its processes stay (paused at the cap library's gate, their memory in host RAM or on
// disk: the agent's swap path); it gives its share and its charge back at once, so the claimant
// needs no grace; it waits, pending, for its own device, where it resumes when capacity returns
// (kSwappedIn), with no work lost. Its memory counts against its node's swap budget until then.
// Held longer than its queue's swap_hold_limit it is stopped (kStopped). HoldsSwappedOut is the
// one place that chooses between stopping and holding; which victims are chosen is
// engine_preempt.cc's.
bool Engine::HoldsSwappedOut(const Job& v) const {
  if (v.state != JobState::kRunning || v.form != AllocationForm::kShare || v.swap_oc <= 0 ||
      v.external || v.grants.size() != 1 || v.grants[0].dev < 0 || v.stop_final) {
    return false;
  }
  const Grant& g = v.grants[0];
  const Dev& d = devs_[g.dev];
  // A device drained for a new layout, or closed, will not take the share back.
  if (d.plan.active || d.closed) return false;
  const NodeRt& n = nodes_[d.node];
  if (n.down) return false;
  // The node's swap budget: the caps past each device's memory as they are now (the claimant
  // takes the victim's place, at most as much), what it holds swapped out already, and the
  // victim's memory.
  MiB over = 0;
  for (int x : n.devs) {
    const Dev& e = devs_[x];
    if (e.share_mem > e.memory) over += e.share_mem - e.memory;
  }
  return over + n.held_swap_mib + g.memory <= n.spec.swap_mib;
}

bool Engine::HoldSwappedOut(int v, int claimant, const std::string& why) {
  if (claimant < 0 || !HoldsSwappedOut(jobs_[v])) return false;
  Job& x = jobs_[v];
  const int dev = x.grants[0].dev;
  const MiB mem = x.grants[0].memory;
  const int64_t start = x.start;
  Release(v);  // its share and its charge go back now: the claimant waits for no grace
  x.held_dev = dev;
  x.held_since = now_;
  x.held_start = start;
  x.held_paused = x.paused;
  x.held_mem = mem;
  nodes_[devs_[dev].node].held_swap_mib += mem;
  ++devs_[dev].held;
  SetState(v, JobState::kPending);
  x.waiting_since = now_;
  x.start = -1;
  ++x.preemptions;
  ++stats_.preempted;
  x.wait_step = "SwappedOut";
  x.wait_reason = HeldReason(x);
  pending_.push_back(v);
  Emit(EventKind::kSwappedOut, &x,
       why + "; held swapped out on " + DevName(dev) + " (" + FormatMiB(mem) +
           " to host RAM or disk), not stopped; lost 0 GPU-s");
  events_.back().for_job = jobs_[claimant].id;
  if (jobs_[claimant].awaiting > 0) --jobs_[claimant].awaiting;
  return true;
}

Status Engine::RestoreHold(int h, const std::string& node, int device, MiB memory,
                           int64_t held_since, int64_t start, int64_t paused) {
  Job& x = jobs_[h];
  if (x.state != JobState::kPending || x.held_dev >= 0 || x.swap_oc <= 0 || x.external ||
      std::find(x.forms.begin(), x.forms.end(), AllocationForm::kShare) == x.forms.end())
    return Status::FailedPrecondition("job " + x.id + " is not a share of a swapping queue");
  const auto n = node_index_.find(node);
  if (n == node_index_.end() || device < 0 ||
      device >= static_cast<int>(nodes_[n->second].devs.size()))
    return Status::FailedPrecondition("job " + x.id + ": no card " + node + "/gpu" +
                                      std::to_string(device) + " to hold it on");
  const int dev = nodes_[n->second].devs[device];
  if (devs_[dev].split)  // its mode changed meanwhile: the share cannot come back there
    return Status::FailedPrecondition("job " + x.id + ": " + DevName(dev) + " is split now");
  x.held_dev = dev;
  x.held_since = held_since;
  x.held_start = start;
  x.held_paused = paused;
  x.held_mem = memory;
  nodes_[n->second].held_swap_mib += memory;
  ++devs_[dev].held;
  x.wait_step = "SwappedOut";
  x.wait_reason = HeldReason(x);
  return Status::Ok();
}

std::string Engine::DevName(int d) const {
  return nodes_[devs_[d].node].name + "/gpu" + std::to_string(devs_[d].index);
}

std::string Engine::HeldReason(const Job& j) const {
  return "held swapped out since " + T(j.held_since) + " on " + DevName(j.held_dev) +
         "; resumes there when capacity returns" +
         (j.hold_limit > 0
              ? "; stopped at " + T(j.held_since + j.hold_limit) +
                    " by its queue's swap_hold_limit " + std::to_string(j.hold_limit) + "s"
              : "");
}

void Engine::DropHold(int self) {
  Job& j = jobs_[self];
  if (j.held_dev < 0) return;
  nodes_[devs_[j.held_dev].node].held_swap_mib -= j.held_mem;
  --devs_[j.held_dev].held;
  j.held_dev = -1;
  j.held_since = -1;
  j.held_start = -1;
  j.held_paused = 0;
  j.held_mem = 0;
}

void Engine::ResumedFromHold(int self) {
  Job& j = jobs_[self];
  if (j.held_dev < 0) return;
  const int64_t since = j.held_since, start = j.held_start;
  const std::string where = DevName(j.held_dev);
  j.paused = j.held_paused + (now_ - since);  // not run time: its runtime stop moves by it
  DropHold(self);
  SetStartTime(self, start);  // it ran from then on: no work was lost
  j.resumed = true;
  Emit(EventKind::kSwappedIn, &j,
       "resumed on " + where + " after being held swapped out since " + T(since) + " (" +
           std::to_string(now_ - since) + "s); lost 0 GPU-s");
}

int Engine::StopOverHoldLimit() {
  int stopped = 0;
  for (int h : pending_) {
    Job& j = jobs_[h];
    if (j.state != JobState::kPending || j.held_dev < 0 || j.hold_limit <= 0 ||
        now_ - j.held_since < j.hold_limit) {
      continue;
    }
    const std::string why = "swap_hold_limit " + std::to_string(j.hold_limit) + "s of queue " +
                            policy_.queues[j.queue].name + " reached (held swapped out on " +
                            DevName(j.held_dev) + " since " + T(j.held_since) + "): stopped";
    DropHold(h);
    SetState(h, JobState::kDone);
    j.wait_step.clear();
    j.wait_reason.clear();
    Emit(EventKind::kStopped, &j, why);
    ++stopped;
  }
  if (stopped > 0) StepCheck("hold limit");
  return stopped;
}

}  // namespace tessera::quota::internal
