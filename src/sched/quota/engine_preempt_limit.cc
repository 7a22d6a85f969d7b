// The quota engine: priority preemption for a job held at a limit. A new user's priority-50 job
// waited for good at its group's limit with a card free ("Admission: group research at its gpu
// limit"): priority preemption was tried only for a job that found no room, never for one held
// at a limit its own group's lower-priority work filled.
#include <algorithm>

#include "sched/quota/engine_impl.h"

namespace tessera::quota::internal {

// Its group's running jobs that may go for it (Victim: preemptible, of lower priority, past
// min_runtime), least lost work first, until it fits every limit that holds it (its group's and
// each ancestor's, its member's), counting what is already leaving. Only for a job the free
// capacity holds now, and nothing is preempted unless they make it fit; they are stopped with
// the policy's grace, as for a job that found no room.
bool Engine::TryPreemptForLimit(int self) {
  Job& j = jobs_[self];
  if (j.external) return false;
  ++preempt_searches_;
  const bool share = j.forms.size() == 1 && j.forms.front() == AllocationForm::kShare;
  const int64_t n = std::max(j.gpu_count, 1);
  const Resources charge{j.gpu_count * (share ? j.gpu_milli : kWholeGpu), j.gpu_count * j.gpu_mem,
                         n * j.cpu, n * j.mem};
  // What leaves each group of its chain and its member: jobs already terminating, then victims.
  std::vector<int> chain;
  for (int g = j.group; g >= 0; g = groups_[g].parent) chain.push_back(g);
  std::vector<Resources> freed(chain.size());
  Resources member_freed;
  const auto leave = [&](const Job& v) {
    for (size_t k = 0; k < chain.size(); ++k) {
      for (int g = v.group; g >= 0; g = groups_[g].parent) {
        if (g == chain[k]) freed[k] += v.charge;
      }
    }
    if (j.member >= 0 && v.member == j.member) member_freed += v.charge;
  };
  const auto fits = [&] {
    const char* which = nullptr;
    for (size_t k = 0; k < chain.size(); ++k) {
      Resources usage = groups_[chain[k]].usage;
      usage -= freed[k];
      if (!Within(usage, charge, groups_[chain[k]].spec.limit, &which)) return false;
    }
    if (j.member < 0) return true;
    Resources usage = members_[j.member].usage;
    usage -= member_freed;
    return Within(usage, charge, members_[j.member].limit, &which);
  };
  for (int t : terminating_) leave(jobs_[t]);
  if (fits()) return false;  // what is leaving makes room: nothing more goes
  // Only where the free capacity holds it: a gang at its limit with no three cards free once
  // preempted a partition of its group every cycle, to no end.
  bool room = false;
  for (AllocationForm f : j.forms) {
    Candidate c;
    bool blocked = false;
    if (!FindInForm(j, self, f, &c, &blocked)) continue;
    DropPick(c);
    room = true;
    break;
  }
  if (!room) return false;
  std::vector<std::pair<int64_t, int>> options;
  for (int v : preemptible_running_) {
    if (v != self && jobs_[v].group == j.group && Victim(j, v, /*reclaim=*/false))
      options.push_back({LostWork(jobs_[v]), v});
  }
  std::sort(options.begin(), options.end());
  std::vector<int> victims;
  for (const auto& [lost, v] : options) {
    leave(jobs_[v]);
    victims.push_back(v);
    if (fits()) break;
  }
  if (victims.empty() || !fits()) return false;
  const std::string why = "priority preemption: for " + j.id + " (priority " +
                          std::to_string(j.priority) + ") held at a limit of group " +
                          groups_[j.group].spec.name;
  j.awaiting = static_cast<int>(victims.size());
  // Stopped, not held swapped out: a held share resumes only on its own card and preempts
  // nothing while it waits, so one held inside its group's reservation once waited there behind
  // borrowers a reclaim would have moved.
  for (int v : victims) Preempt(v, self, why, /*may_hold=*/false);
  return true;
}

}  // namespace tessera::quota::internal
