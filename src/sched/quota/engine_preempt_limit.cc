// The quota engine: priority preemption for a job held at a limit. A new user's priority-50 job
// waited for good at its group's limit with a card free ("Admission: group research at its gpu
// limit"): priority preemption was tried only for a job that found no room, never for one held
// at a limit its own group's lower-priority work filled.
#include <algorithm>

#include "sched/quota/engine_impl.h"

namespace tessera::quota::internal {

namespace {

// The components of `r` in Within's order: gpu, gpu memory, cpu, memory.
int64_t Part(const Resources& r, int k) {
  return k == 0 ? r.gpu_milli : k == 1 ? r.gpu_memory_mib : k == 2 ? r.cpu_milli : r.memory_mib;
}

}  // namespace

// Its group's running jobs that may go for it (Victim: preemptible, of lower priority, past
// min_runtime), least lost work first, each only if it frees part of a component still over a
// limit, until it fits every limit that holds it (its group's and each ancestor's, its
// member's), counting what is already leaving; then any the rest make do without are kept. Where
// the free capacity does not hold it, the cheapest of them to clear for it go first (counted
// against the limits too); where none would, nothing goes (a gang at its limit with no three
// cards free once preempted a partition of its group every cycle, to no end). Nothing is
// preempted unless they make it fit; they are stopped with the policy's grace, as for a job that
// found no room.
bool Engine::TryPreemptForLimit(int self) {
  Job& j = jobs_[self];
  if (j.external) return false;
  const bool share = j.forms.size() == 1 && j.forms.front() == AllocationForm::kShare;
  const int64_t n = std::max(j.gpu_count, 1);
  const Resources charge{j.gpu_count * (share ? j.gpu_milli : kWholeGpu), j.gpu_count * j.gpu_mem,
                         n * j.cpu, n * j.mem};
  // Each limit that may hold it: the groups of its chain, and its member (the last entry).
  struct Level {
    Resources usage, limit;
    int group;  // -1: the member's
  };
  std::vector<Level> levels;
  for (int g = j.group; g >= 0; g = groups_[g].parent)
    levels.push_back({groups_[g].usage, groups_[g].spec.limit, g});
  if (j.member >= 0) levels.push_back({members_[j.member].usage, members_[j.member].limit, -1});
  // Whether `v` counts at level `l`: a job of a group counts in that group and each ancestor.
  const auto counts = [&](const Job& v, const Level& l) {
    if (l.group < 0) return v.member >= 0 && v.member == j.member;
    for (int g = v.group; g >= 0; g = groups_[g].parent) {
      if (g == l.group) return true;
    }
    return false;
  };
  // As Within: a component the job does not ask for holds it at no limit.
  const auto over = [&](const Level& l, const Resources& freed, int k) {
    return Part(charge, k) > 0 &&
           Part(l.usage, k) - Part(freed, k) + Part(charge, k) > Part(l.limit, k);
  };
  const auto fits = [&](const std::vector<Resources>& freed) {
    for (size_t i = 0; i < levels.size(); ++i) {
      for (int k = 0; k < 4; ++k) {
        if (over(levels[i], freed[i], k)) return false;
      }
    }
    return true;
  };
  std::vector<Resources> freed(levels.size());
  const auto leave = [&](const Job& v, std::vector<Resources>* f, int sign) {
    for (size_t i = 0; i < levels.size(); ++i) {
      if (!counts(v, levels[i])) continue;
      if (sign > 0) {
        (*f)[i] += v.charge;
      } else {
        (*f)[i] -= v.charge;
      }
    }
  };
  for (int t : terminating_) leave(jobs_[t], &freed, +1);  // leaving already
  if (fits(freed)) return false;  // what is leaving makes room: nothing more goes
  std::vector<std::pair<int64_t, int>> options;
  for (int v : preemptible_running_) {
    if (v != self && jobs_[v].group == j.group && Victim(j, v, /*reclaim=*/false))
      options.push_back({LostWork(jobs_[v]), v});
  }
  if (options.empty()) return false;
  // Where it goes: the free capacity now, or else the cheapest of those jobs to clear for it
  // (priority preemption's victims, Victim), who leave the limits too. With another group on the
  // last card, a job waited at Admission for as long as its group's low jobs ran, though one of
  // them going made both room and its group's limit (a new user). One search of the cycle's.
  bool room = false;
  for (AllocationForm f : j.forms) {
    Candidate c;
    bool blocked = false;
    if (!FindInForm(j, self, f, &c, &blocked)) continue;
    DropPick(c);
    room = true;
    break;
  }
  PreemptOption place;
  if (room || j.gpu_count == 0 || j.gpu_count > max_devs_per_node_) {
    ++preempt_searches_;
    if (!room) return false;  // none to clear a place for it (as TryPreempt)
  } else {
    SearchPreemption(j, self, /*reclaim=*/false, &place);
    if (place.victims.empty()) return false;
    for (int v : place.victims) leave(jobs_[v], &freed, +1);
    std::erase_if(options, [&](const auto& o) {
      return std::find(place.victims.begin(), place.victims.end(), o.second) != place.victims.end();
    });
  }
  std::sort(options.begin(), options.end());
  std::vector<int> victims;
  for (const auto& [lost, v] : options) {
    if (fits(freed)) break;
    // Only one that frees part of a component still over a limit where it counts (a CPU-only
    // job freed nothing of a GPU limit, and went first, losing least).
    bool useful = false;
    for (size_t i = 0; i < levels.size() && !useful; ++i) {
      if (!counts(jobs_[v], levels[i])) continue;
      for (int k = 0; k < 4 && !useful; ++k)
        useful = over(levels[i], freed[i], k) && Part(jobs_[v].charge, k) > 0;
    }
    if (!useful) continue;
    leave(jobs_[v], &freed, +1);
    victims.push_back(v);
  }
  if (!fits(freed)) return false;
  // Kept: each the others make do without, most lost work first (those cleared for room stay).
  for (size_t i = victims.size(); i-- > 0;) {
    std::vector<Resources> without = freed;
    leave(jobs_[victims[i]], &without, -1);
    if (!fits(without)) continue;
    freed = std::move(without);
    victims.erase(victims.begin() + static_cast<std::ptrdiff_t>(i));
  }
  // Cleared for it: its devices kept for it through the grace, as for a job that found no room.
  for (int d : place.devs) Nominate(d, self, now_ + policy_.grace_seconds);
  if (!place.devs.empty())
    for (int d = 0; d < kDims; ++d) j.claim_cell[d] = CellOf(d, place.devs.front());
  victims.insert(victims.end(), place.victims.begin(), place.victims.end());
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
