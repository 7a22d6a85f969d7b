// The quota engine: preemption and backfill reservations (repartitioning: engine_repartition.cc).
#include <bit>
#include <limits>

#include "sched/quota/compute_mode.h"
#include "sched/quota/engine_impl.h"

namespace tessera::quota::internal {

namespace {

// Whether `head` (which may preempt now) would preempt `claimant` as soon as it is placed: its
// own group's, of lower priority, preemptible from its start.
bool PreemptsOnArrival(const Job& head, const Job& claimant) {
  return claimant.group == head.group && claimant.priority < head.priority &&
         claimant.preemptible && claimant.min_runtime <= 0 && claimant.external == head.external;
}

}  // namespace

// ------------------------------------------------------------------------------------------
// Preemption

bool Engine::Victim(const Job& claimant, int v, bool reclaim) const {
  const Job& x = jobs_[v];
  const bool preemptible =
      x.preemptible || options_.engine_break == EngineOptions::Break::kPreemptNonPreemptible;
  if (x.state != JobState::kRunning || !preemptible || x.external != claimant.external)
    return false;
  if (!PastMinRuntime(x)) return false;
  if (x.external && (x.ext_pool.empty() || x.ext_pool != claimant.ext_pool)) return false;
  if (reclaim) {
    if (x.group == claimant.group) return false;
    const GroupRt& g = groups_[x.group];
    // A borrower: its group holds more GPU than it reserved, counting what is already leaving,
    // and keeps its reservation once this job goes too.
    const int64_t leaving =
        static_cast<size_t>(x.group) < leaving_gpu_.size() ? leaving_gpu_[x.group] : 0;
    if (options_.engine_break == EngineOptions::Break::kReclaimAnyBorrower) return true;
    if (g.usage.gpu_milli - leaving - x.charge.gpu_milli < g.spec.reservation.gpu_milli)
      return false;
    // ... and its reservations per GPU model and per pool (engine_models.cc).
    if (!g.dims[kModelDim].on && !g.dims[kPoolDim].on) return true;
    CellTaken taken;
    AddTaken(x, &taken);
    return KeepsReservations(x.group, taken);
  }
  return x.group == claimant.group && x.priority < claimant.priority;
}

// Only while a job of another group waits inside its group's reservation, for which a reclaim
// would take it back: a head passed over in its turn, a borrower, was not tried again when a
// preemption freed cards, and a share of lower priority took one of them, once with no
// reservation anywhere (seed 3006899) and once with the only group below its reservation waiting
// for more than it reserves (seed 6010473).
// `order`: the cycle's (pending_ holds only the victims requeued in it).
bool Engine::WouldBeReclaimed(const Job& j, const std::vector<int>& order) const {
  if (!j.preemptible || !WouldBorrow(j)) return false;
  const auto claims = [&](int x) {
    const Job& c = jobs_[x];
    return c.state == JobState::kPending && c.group != j.group && InsideReservation(c);
  };
  return std::any_of(order.begin(), order.end(), claims) ||
         std::any_of(pending_.begin(), pending_.end(), claims);
}

void Engine::PreemptOption::Consider(int64_t c, Standing s, std::vector<int> v,
                                     std::vector<int> d) {
  // At equal cost and standing, fewer victims (a free card in the set costs nothing).
  if (v.empty() || c > cost ||
      (c == cost && (victims.empty() || s > top || (s == top && v.size() >= victims.size()))))
    return;
  cost = c;
  top = s;
  victims = std::move(v);
  devs = std::move(d);
  ++taken;
}

int64_t Engine::LostWork(const Job& v) const {
  if (v.state != JobState::kRunning || v.start < 0) return 0;
  // Never below 0: a served start is its report rounded up to the second (SetRunStart).
  return std::max<int64_t>(now_ - v.start, 0) * std::max<int64_t>(v.charge.gpu_milli, 1);
}

// When a job holding something is expected to leave it: at the end of its grace, or at its start
// plus the earlier of its walltime and its queue's max_runtime (where it is stopped) and the time
// it was held swapped out (not run time: its stop moves by it); never, without either.
int64_t Engine::ExpectedEnd(const Job& v) const {
  if (v.state == JobState::kTerminating) return v.grace_end;
  if (v.known_run() <= 0) return kNever;
  return std::max(now_, v.start + v.known_run() + v.paused);
}

// The least work lost; between equal losses, the set whose victim furthest ahead stands furthest
// back: two borrowers placed in one cycle, 0 s of work each, and a reclaim took the earlier
// submitted one, which then waited while the later one ran (a head delayed by a job behind it).
void Engine::Offer(PreemptOption* best, int64_t cost, std::vector<int> victims,
                   std::vector<int> devs) const {
  const Standing top = TopStanding(victims);
  best->Consider(cost, top, std::move(victims), std::move(devs));
}

Engine::Standing Engine::TopStanding(const std::vector<int>& victims) const {
  Standing top{std::numeric_limits<int>::min(), 0, 0};
  for (int v : victims) top = std::max(top, StandingOf(jobs_[v]));
  return top;
}

bool Engine::WouldBorrow(const Job& j) const {
  return !j.external && j.gpu_count > 0 &&
         !WithinReservation(groups_[j.group].usage, Resources{j.gpu_count * j.gpu_milli, 0, 0, 0},
                            groups_[j.group].spec.reservation);
}

void Engine::SetState(int handle, JobState s) {
  if (s == JobState::kRunning && jobs_[handle].preemptible) {
    preemptible_running_.insert(handle);
  } else {
    preemptible_running_.erase(handle);
  }
  jobs_[handle].state = s;
}

void Engine::Occupants(const Dev& d, std::vector<int>* out) const {
  if (d.whole >= 0) out->push_back(d.whole);
  for (int s : d.shares) out->push_back(s);
  for (const Slot& s : d.slots) {
    if (s.holder >= 0) out->push_back(s.holder);
  }
}

std::vector<int> Engine::Holders(int ni) const {
  std::vector<int> on;
  for (int d : nodes_[ni].devs) Occupants(devs_[d], &on);
  std::sort(on.begin(), on.end());
  on.erase(std::unique(on.begin(), on.end()), on.end());
  return on;
}

int64_t Engine::ExternalGpu(const Job& j) const {
  const bool whole_only = j.forms.size() == 1 && j.forms.front() == AllocationForm::kWhole;
  return j.gpu_count * (whole_only ? kWholeGpu : j.gpu_milli);
}

// An external pool at its capacity: the running jobs of the pool that may go (borrowers, for a
// reclaim; lower priorities of the group, else), least lost work first, until enough is freed.
// Nothing is preempted unless the victims free all that is missing.
bool Engine::TryPreemptExternal(int self, bool reclaim) {
  Job& j = jobs_[self];
  auto cap = ext_cap_.find(j.ext_pool);
  if (cap == ext_cap_.end() || ExternalGpu(j) <= 0) return false;  // no GPU asked: nothing to free
  int64_t need = ext_used_[j.ext_pool] + ExternalGpu(j) - cap->second;
  for (int t : terminating_) {
    if (jobs_[t].ext_pool == j.ext_pool) need -= jobs_[t].charge.gpu_milli;  // already leaving
  }
  if (need <= 0) return false;
  ++preempt_searches_;
  std::vector<std::pair<int64_t, int>> options;
  for (int v = 0; v < static_cast<int>(jobs_.size()); ++v) {
    if (v != self && jobs_[v].charge.gpu_milli > 0 && Victim(j, v, reclaim))
      options.push_back({LostWork(jobs_[v]), v});
  }
  std::sort(options.begin(), options.end());
  std::vector<int> victims;
  int64_t freed = 0;
  for (const auto& [lost, v] : options) {
    if (freed >= need) break;
    victims.push_back(v);
    freed += jobs_[v].charge.gpu_milli;
  }
  if (freed < need) return false;
  std::string why = std::string(reclaim ? "reclaim: group " + groups_[j.group].spec.name +
                                              " is below its reservation; "
                                        : "priority preemption: ") +
                    "for " + j.id + " (priority " + std::to_string(j.priority) + ") in " +
                    j.ext_pool;
  j.awaiting = static_cast<int>(victims.size());
  for (int v : victims) Preempt(v, self, why);
  return true;
}

bool Engine::TryPreempt(int self, bool reclaim) {
  Job& j = jobs_[self];
  if (j.external) return TryPreemptExternal(self, reclaim);
  if (j.gpu_count == 0 || j.gpu_count > max_devs_per_node_) return false;
  PreemptOption best;
  SearchPreemption(j, self, reclaim, &best);
  if (best.victims.empty()) return false;
  std::string why = std::string(reclaim ? "reclaim: group " : "priority preemption: ") +
                    (reclaim ? groups_[j.group].spec.name + " is below its reservation; " : "") +
                    "for " + j.id + " (priority " + std::to_string(j.priority) + ")";
  for (int d : best.devs) Nominate(d, self, now_ + policy_.grace_seconds);
  for (int d = 0; d < kDims; ++d)
    j.claim_cell[d] = best.devs.empty() ? -1 : CellOf(d, best.devs.front());
  j.awaiting = static_cast<int>(best.victims.size());
  // A share is held swapped out only where a share takes its place: a whole card or a new
  // partition layout needs the device to itself (a layout cannot change under a paused
  // process), and a share held there waited for a device that would not take it back.
  const bool hold = best.form == AllocationForm::kShare ||
                    options_.engine_break == EngineOptions::Break::kHoldForAnyClaimant;
  for (int v : best.victims) Preempt(v, self, why, hold);
  return true;
}

// The cheapest victims for `j` in any of its forms (one search of the cycle's budget).
void Engine::SearchPreemption(const Job& j, int self, bool reclaim, PreemptOption* best) {
  ++preempt_searches_;
  for (AllocationForm f : j.forms) {
    const int taken = best->taken;
    if (f == AllocationForm::kWhole) {
      PreemptForWhole(j, self, reclaim, best);
    } else if (f == AllocationForm::kShare) {
      PreemptForShare(j, self, reclaim, best);
    } else {
      PreemptForPartition(j, self, reclaim, best);
    }
    if (best->taken != taken) best->form = f;
  }
}

// Whole devices on one node: the cheapest devices to clear, when everything on them may go.
void Engine::PreemptForWhole(const Job& j, int self, bool reclaim, PreemptOption* best) {
  for (const NodeRt& node : nodes_) {
    if (!ServesNode(j, node) || !PoolAllows(node.pool, AllocationForm::kWhole)) continue;
    if (static_cast<int>(node.devs.size()) < j.gpu_count) continue;
    // Per device: the cost of clearing it, or skip when something there must stay.
    std::vector<std::pair<int64_t, int>> costs;
    std::vector<int> free;  // of those, the cards nothing holds
    for (int d : node.devs) {
      const Dev& dev = devs_[d];
      if ((dev.split && !MayUnsplitAlone(dev)) || dev.plan.active || dev.memory < j.gpu_mem)
        continue;
      if (KeptFromMe(dev, j, self)) continue;
      std::vector<int> occ;
      Occupants(dev, &occ);
      int64_t cost = 0;
      bool ok = true;
      for (int v : occ) {
        if (!Victim(j, v, reclaim)) ok = false;
        cost += LostWork(jobs_[v]);
      }
      if (ok) costs.push_back({cost, d});
      if (ok && occ.empty()) free.push_back(d);
    }
    if (static_cast<int>(costs.size()) < j.gpu_count) continue;
    // Cheapest first, a free card before an occupied one of equal cost (a 2-card reclaim took
    // two borrowers that had just started, 0 GPU-s each, beside a free card: a new user).
    const auto occupied = [&](int d) {
      return std::find(free.begin(), free.end(), d) == free.end();
    };
    std::sort(costs.begin(), costs.end(), [&](const auto& x, const auto& y) {
      if (x.first != y.first) return x.first < y.first;
      const bool ox = occupied(x.second), oy = occupied(y.second);
      return ox != oy ? !ox : x.second < y.second;
    });
    int64_t total = 0;
    std::vector<int> victims, devs;
    // Cheapest first, skipping a device whose occupants would take their group below its
    // reservation together with those already chosen (a gang once found no option because the
    // two cheapest cards were one lender's).
    bool skipped = false;
    for (size_t k = 0; k < costs.size() && static_cast<int>(devs.size()) < j.gpu_count; ++k) {
      std::vector<int> occ, with = victims;
      Occupants(devs_[costs[k].second], &occ);
      for (int v : occ) {
        if (std::find(with.begin(), with.end(), v) == with.end()) with.push_back(v);
      }
      if (reclaim && !LendersKeepReservations(with)) {
        skipped = true;
        continue;
      }
      total += costs[k].first;
      devs.push_back(costs[k].second);
      for (int v : occ) {
        if (std::find(victims.begin(), victims.end(), v) == victims.end()) victims.push_back(v);
      }
    }
    if (static_cast<int>(devs.size()) < j.gpu_count) {
      // A cheap card taken first can rule out the rest: a lender's 1-card borrower chosen
      // first left no room under its reservation for its 2-card gang, whose two cards were the
      // only way, and a group sat below its reservation until the gang ended. Every choice of
      // cards then, on a node with few enough.
      if (skipped && costs.size() <= 16) PreemptForWholeEveryWay(j, node, costs, best);
      continue;
    }
    if (!HostVictims(j, static_cast<int>(&node - nodes_.data()), reclaim, &victims, &total))
      continue;
    Offer(best, total, victims, devs);
  }
}

// Each set of gpu_count cards out of `costs` (at most 16) whose occupants, taken together, keep
// every lender's reservation and leave the node the job's CPU and host memory; the one losing
// least work.
void Engine::PreemptForWholeEveryWay(const Job& j, const NodeRt& node,
                                     const std::vector<std::pair<int64_t, int>>& costs,
                                     PreemptOption* best) {
  const int n = static_cast<int>(costs.size());
  for (uint32_t mask = 0; mask < (1u << n); ++mask) {
    if (std::popcount(mask) != j.gpu_count) continue;
    std::vector<int> victims, devs;
    for (int k = 0; k < n; ++k) {
      if (!((mask >> k) & 1u)) continue;
      devs.push_back(costs[k].second);
      std::vector<int> occ;
      Occupants(devs_[costs[k].second], &occ);
      for (int v : occ) {
        if (std::find(victims.begin(), victims.end(), v) == victims.end()) victims.push_back(v);
      }
    }
    if (!LendersKeepReservations(victims)) continue;
    int64_t lost = 0;
    for (int v : victims) lost += LostWork(jobs_[v]);
    if (!HostVictims(j, static_cast<int>(&node - nodes_.data()), true, &victims, &lost)) continue;
    Offer(best, lost, victims, devs);
  }
}

// A share: the device's whole holder, or its cheapest shares until the share fits.
void Engine::PreemptForShare(const Job& j, int self, bool reclaim, PreemptOption* best) {
  for (size_t di = 0; di < devs_.size(); ++di) {
    const Dev& d = devs_[di];
    if (!Serves(j, d) || !PoolAllows(d.pool, AllocationForm::kShare) || d.plan.active ||
        ShareGrade(d, j.sm_percent) < j.min_isolation || (j.sm_percent > 0 && !d.mps))
      continue;
    if (KeptFromMe(d, j, self)) continue;
    MiB want = j.gpu_mem > 0 ? j.gpu_mem : d.memory * j.gpu_milli / kWholeGpu;
    if (want > d.memory) continue;
    if (d.split) {
      // A card the engine split: everything on it goes, and it returns to whole for the share
      // (a group below its reservation once waited behind a borrower's partition for good).
      if (MayUnsplitAlone(d)) ConsiderClearing(j, static_cast<int>(di), reclaim, best);
      continue;
    }
    if (d.whole >= 0) {
      std::vector<int> victims = {d.whole};
      int64_t cost = LostWork(jobs_[d.whole]);
      if (Victim(j, d.whole, reclaim) && HostVictims(j, d.node, reclaim, &victims, &cost))
        Offer(best, cost, victims, {static_cast<int>(di)});
      continue;
    }
    if (!d.ShareKindFits(j.swap_oc)) continue;  // shares of another overcommit stay apart
    // ... and of another compute mode (ComputeModeFits).
    if (!d.shares.empty() && (d.sm_sum > 0) != (j.sm_percent > 0)) continue;
    MiB free_mem = d.share_capacity(j.swap_oc) - d.share_mem;
    MilliGpu free_w = d.weight_capacity(j.swap_oc) - d.share_weight;
    int free_pct = 100 - d.sm_sum;
    std::vector<std::pair<int64_t, int>> vs;
    for (int s : d.shares) {
      if (Victim(j, s, reclaim)) vs.push_back({LostWork(jobs_[s]), s});
    }
    std::sort(vs.begin(), vs.end());
    int64_t cost = 0;
    std::vector<int> victims;
    // Past the card's memory only within the node's swap budget, as placement (SwapRoom): room
    // at the overcommit alone was found with no victim on a node without one, and a share within
    // its group's reservation waited behind a borrower's until they ended.
    MiB freed = 0;
    auto room = [&] {
      return free_mem >= want && free_w >= j.gpu_milli && free_pct >= j.sm_percent &&
             (j.swap_oc == 0 || SwapRoom(static_cast<int>(di), want, freed) ||
              options_.engine_break == EngineOptions::Break::kReclaimIgnoresSwapBudget);
    };
    for (auto& [c, v] : vs) {
      if (room()) break;
      cost += c;
      victims.push_back(v);
      freed += jobs_[v].grants[0].memory;
      free_mem += jobs_[v].grants[0].memory;
      free_w += jobs_[v].grants[0].compute;
      free_pct += jobs_[v].grants[0].sm_percent;
    }
    if (room() && (!reclaim || LendersKeepReservations(victims)) &&
        HostVictims(j, d.node, reclaim, &victims, &cost)) {
      Offer(best, cost, victims, {static_cast<int>(di)});
    }
  }
}

// Whether the partition `j` would get on `d` passes its group's limits, charged as placed (its
// compute share of the card: an A30's 4g.24gb instance is the whole card, whatever fraction the
// job asked; an MI300X's DPX partition half of it). Preempted or drained for a job its limit then
// refused, a card went back to the job it was taken from and was taken again, every 10-20 s (an
// MI300X too, between SPX and DPX: seed 4094405). True for a card that cannot be split.
bool Engine::InstanceAdmitted(const Job& j, const Dev& d) const {
  Resources charge{0, 0, j.cpu, j.mem};
  if (d.mig_capable()) {
    const int pi = BestMigProfile(d.model, j.gpu_milli, j.gpu_mem);
    if (pi < 0) return false;
    const part::MigProfile& p = d.model->mig.profiles[pi];
    charge.gpu_milli = p.compute_slices * kWholeGpu / d.model->mig.compute_slices;
    charge.gpu_memory_mib = p.memory_mib;
  } else if (d.amd_capable()) {
    // One of its partitions as split now, or as the change a drain would make splits it.
    if (d.split && !d.slots.empty()) {
      charge.gpu_milli = d.slots.front().compute;
      charge.gpu_memory_mib = d.slots.front().memory;
    } else {
      const std::optional<part::AmdPartitioning> shape =
          AmdShapeFor(d, j, /*keep_memory_mode=*/false);
      if (!shape) return false;
      charge.gpu_milli = kWholeGpu / std::max(shape->partitions, 1);
      charge.gpu_memory_mib = shape->memory_per_partition_mib;
    }
  } else {
    return true;
  }
  bool guaranteed = false;
  return Admission(j, charge, &guaranteed).ok();
}

// A partition: a slot of the right size held by a victim.
void Engine::PreemptForPartition(const Job& j, int self, bool reclaim, PreemptOption* best) {
  for (size_t di = 0; di < devs_.size(); ++di) {
    const Dev& d = devs_[di];
    if (!Serves(j, d) || !PoolAllows(d.pool, AllocationForm::kPartition) || d.plan.active) continue;
    if (KeptFromMe(d, j, self) || !InstanceAdmitted(j, d)) continue;
    int pi = d.mig_capable() ? BestMigProfile(d.model, j.gpu_milli, j.gpu_mem) : -1;
    if (!d.split) {
      // Reclaim only (priority preemption splits a card through a drain, which weighs the work
      // lost): a card held whole or shared, which the cycle may split once it is empty;
      // everything on it goes (a group below its reservation once waited behind a borrower's
      // whole-card gang for a MIG instance, the drain judging it not worth the work lost).
      if (!reclaim) continue;
      const bool splittable = policy_.repartition && ((d.mig_capable() && pi >= 0) ||
                                                      (d.amd_capable() && AmdShapeFor(d, j, true)));
      if (splittable) ConsiderClearing(j, static_cast<int>(di), reclaim, best);
      continue;
    }
    for (const Slot& s : d.slots) {
      if (s.holder < 0 || !Victim(j, s.holder, reclaim)) continue;
      bool right = d.mig_capable() ? (pi >= 0 && s.profile == d.model->mig.profiles[pi].name)
                                   : (s.memory >= j.gpu_mem && s.compute >= j.gpu_milli);
      std::vector<int> victims = {s.holder};
      int64_t cost = LostWork(jobs_[s.holder]);
      if (right && HostVictims(j, d.node, reclaim, &victims, &cost))
        Offer(best, cost, victims, {static_cast<int>(di)});
    }
  }
}

void Engine::Nominate(int d, int self, int64_t until) {
  devs_[d].reserved_by = self;
  reserved_devs_.insert(d);
  devs_[d].nominated = true;
  devs_[d].reserved_until = until;
  jobs_[self].nominated = true;
}

void Engine::AddToChain(std::vector<int64_t>& per_group, int g, int64_t v) {
  if (per_group.size() != groups_.size()) per_group.assign(groups_.size(), 0);
  for (; g >= 0; g = groups_[g].parent) per_group[g] += v;
}

void Engine::Preempt(int v, int claimant, const std::string& why, bool may_hold) {
  if (claimant >= 0) jobs_[claimant].paid = true;
  if (may_hold && HoldSwappedOut(v, claimant, why)) return;  // a swapping share: held
  Job& x = jobs_[v];
  AddLeaving(x, +1);
  int64_t lost = LostWork(x);
  ForgetRuntime(v);
  SetState(v, JobState::kTerminating);
  terminating_.insert(v);
  x.grace_end = now_ + policy_.grace_seconds;
  x.claimant = claimant;
  ++stats_.preempted;
  Emit(EventKind::kPreempted, &x,
       why + "; lost " + std::to_string(lost / 1000) + " GPU-s; grace until " + T(x.grace_end));
  if (claimant >= 0) events_.back().for_job = jobs_[claimant].id;
  // Its end is now known: a head kept on its node may start sooner than it was told.
  for (const Grant& g : x.grants) RefreshHeadsOn(g.node);
  if (policy_.grace_seconds == 0 && !options_.await_stop) FinishTermination(v);
}

// When a device is free by the declared ends of what is on it (kNever: one declares none).
int64_t Engine::DevFreeAt(const Dev& dev) const {
  int64_t t = now_;
  if (dev.whole >= 0) t = std::max(t, ExpectedEnd(jobs_[dev.whole]));
  for (int s : dev.shares) t = std::max(t, ExpectedEnd(jobs_[s]));
  for (const Slot& s : dev.slots) {
    if (s.holder >= 0) t = std::max(t, ExpectedEnd(jobs_[s.holder]));
  }
  return t;
}

// The heads keeping devices on node `ni` recompute when they start, after a job there got an
// end (a preemption): a gang kept two cards "until never" because a job on its node declared no
// end; a reclaim then gave that job a grace of 30 s, but jobs of 120 s were still backfilled onto
// the kept cards as if the gang's start were unknown, and put it off by 90 s.
void Engine::RefreshHeadsOn(int ni) {
  const NodeRt& node = nodes_[ni];
  for (int d : node.devs) {
    const int h = devs_[d].reserved_by;
    if (h < 0 || devs_[d].nominated) continue;
    int64_t t = HostFreeAt(node, jobs_[h]);
    for (int k : node.devs) {
      if (devs_[k].reserved_by == h && !devs_[k].nominated) t = std::max(t, DevFreeAt(devs_[k]));
    }
    for (int k : node.devs) {
      if (devs_[k].reserved_by == h && !devs_[k].nominated)
        devs_[k].reserved_until = std::min(devs_[k].reserved_until, t);
    }
  }
}

void Engine::FinishTermination(int v) {
  Job& x = jobs_[v];
  int claimant = x.claimant;
  AddLeaving(x, -1);
  Release(v);
  if (x.stop_final) {  // stopped by a runtime guard: its processes are gone, and so is it
    SetState(v, JobState::kDone);
    x.claimant = -1;
    x.start = -1;
    Emit(EventKind::kCompleted, &x, "stopped by its runtime guard; its processes ended");
    return;
  }
  SetState(v, JobState::kPending);
  x.waiting_since = now_;
  if (x.idle_requeue) {  // given back for idleness: behind the jobs waiting now
    x.submit = now_;
    x.seq = seq_++;
    x.idle_requeue = false;
  }
  x.claimant = -1;
  x.start = -1;
  ++x.preemptions;
  x.wait_step = "Preempted";
  x.wait_reason = "requeued after preemption";
  pending_.push_back(v);
  Emit(EventKind::kRequeued, &x, "back to pending after preemption");
  if (claimant >= 0 && jobs_[claimant].awaiting > 0) --jobs_[claimant].awaiting;
}

// ------------------------------------------------------------------------------------------
// Backfill: the first blocked job keeps the devices that free up soonest.

void Engine::ReserveForHead(int self) {
  Job& j = jobs_[self];
  if (j.gpu_count == 0 || j.gpu_count > max_devs_per_node_) return;
  if (std::find(j.forms.begin(), j.forms.end(), AllocationForm::kWhole) == j.forms.end()) return;
  int best_node = -1;
  int64_t best_time = kNever + 1;
  bool best_claims = false;
  std::vector<int> best_devs;
  for (size_t ni = 0; ni < nodes_.size(); ++ni) {
    const NodeRt& node = nodes_[ni];
    if (!ServesNode(j, node) || !PoolAllows(node.pool, AllocationForm::kWhole)) continue;
    if (static_cast<int>(node.devs.size()) < j.gpu_count) continue;
    // Only a node that could hold it once empty: a gang no node had the host memory for once
    // kept every card of the cluster for itself, and nothing ran.
    if (node.down || node.cpu_total < j.cpu * j.gpu_count || node.mem_total < j.mem * j.gpu_count)
      continue;
    std::vector<std::tuple<int64_t, bool, int>> ready;  // free at, a claim's, device
    for (int d : node.devs) {
      const Dev& dev = devs_[d];
      // A card the engine split counts too, free once its partitions end (it goes back to
      // whole for the head then): skipped, a gang waiting on three cards, two of them split, kept
      // nothing, and a later inference job took the third card for 840 s past the head's start.
      // A card nominated for a claimant the head would preempt at once (its own group's, of
      // lower priority) is the head's too, free when the claim's victims have left: not
      // counted, a gang kept the cards of a later end, a job of 120 s was backfilled onto the
      // card free beside the claim, and the gang started 30 s late.
      const bool claim_of_mine = dev.nominated && dev.reserved_by >= 0 && MayPreempt(j) &&
                                 PreemptsOnArrival(j, jobs_[dev.reserved_by]);
      if ((dev.split && !MayUnsplitAlone(dev)) || dev.plan.active || dev.closed ||
          (dev.reserved_by >= 0 && !claim_of_mine) || dev.memory < j.gpu_mem)
        continue;
      ready.push_back({DevFreeAt(dev), claim_of_mine, d});
    }
    if (static_cast<int>(ready.size()) < j.gpu_count) continue;
    std::sort(ready.begin(), ready.end());
    int64_t t = std::max(std::get<0>(ready[j.gpu_count - 1]), HostFreeAt(node, j));
    // At the same time, cards that no claimant has to give up first: kept on a claim's cards,
    // a gang left the node free by then, and a job of its group was placed there; the gang
    // preempted it a grace later (seed 3077269).
    bool claims = false;
    for (int k = 0; k < j.gpu_count; ++k) claims = claims || std::get<1>(ready[k]);
    if (t < best_time || (t == best_time && best_claims && !claims)) {
      best_time = t;
      best_claims = claims;
      best_node = static_cast<int>(ni);
      best_devs.clear();
      for (int k = 0; k < j.gpu_count; ++k) best_devs.push_back(std::get<2>(ready[k]));
    }
  }
  if (best_node < 0) return;
  for (int d : best_devs) {
    if (devs_[d].nominated) continue;  // its claimant's still (above)
    devs_[d].reserved_by = self;
    reserved_devs_.insert(d);
    devs_[d].nominated = false;
    devs_[d].reserved_until = best_time;
  }
  ++heads_;
  memo_.clear();  // the kept devices change what later shapes find
  j.wait_reason +=
      "; keeps " + std::to_string(j.gpu_count) + " device(s) on " + nodes_[best_node].name +
      (best_time >= kNever ? " (start unknown: running jobs declare no walltime, so jobs "
                             "that declare one may use them meanwhile)"
                           : " expected free at " + T(best_time));
}

// After a claim for `claimant` (its victims chosen):
// - The heads kept before a claim was nominated that would preempt its claimant keep their cards
//   again, counting the claimed card as theirs (ReserveForHead): a gang kept a card free now and
//   one free in 720 s, a reclaim for its own group's priority-1 job then freed a third in 20 s,
//   and a job of 60 s was backfilled onto the free card; the gang preempted the claimant on its
//   arrival and started 40 s late.
// - Victims requeued at once (no grace) of no lower priority than the claimant come before
//   every job still to be considered this cycle: those asking for whole cards keep cards as a
//   blocked head does. Requeued for the next cycle and kept nothing, a borrower placed and
//   reclaimed in one cycle for a share saw a lower-priority job of its own group take the card
//   beside the share, and waited 60 s more. (A victim of lower priority keeps nothing: a gang
//   preempted for a priority-1 job kept the cards the next priority-1 job then could not use.)
void Engine::KeepHeadsAfterClaim(int claimant) {
  std::vector<int> heads;
  // Only a claim kept for a while is a card to count; a claimant placed at once may end before
  // the victims it replaced, so every head keeps its cards again (seed 5041433).
  const bool placed = jobs_[claimant].state == JobState::kRunning;
  if (jobs_[claimant].nominated || placed) {
    for (int d : reserved_devs_) {
      const Dev& dev = devs_[d];
      const int h = dev.reserved_by;
      if (h < 0 || h == claimant || dev.nominated) continue;
      if (!placed && (!MayPreempt(jobs_[h]) || !PreemptsOnArrival(jobs_[h], jobs_[claimant])))
        continue;
      if (std::find(heads.begin(), heads.end(), h) == heads.end()) heads.push_back(h);
    }
  }
  for (int h : heads) {
    for (int d : reserved_devs_) {
      if (devs_[d].reserved_by == h && !devs_[d].nominated) devs_[d].reserved_by = -1;
    }
    Job& head = jobs_[h];
    const size_t keeps = head.wait_reason.find("; keeps ");
    if (keeps != std::string::npos) head.wait_reason.resize(keeps);
    --heads_;
  }
  for (int v : pending_) {
    Job& x = jobs_[v];
    if (x.state != JobState::kPending || x.waiting_since != now_ ||
        x.priority < jobs_[claimant].priority || x.forms.empty() ||
        x.forms.front() != AllocationForm::kWhole)
      continue;
    // Ahead of every job still to come, and in its own place if it had one in this cycle's
    // order: given the claimant's, a gang placed in its turn and reclaimed at once stood behind
    // a priority-0 head that came between the two, which took the card beside the claimant
    // (seed 8085138).
    x.rank = x.rank >= 0 ? std::min(x.rank, jobs_[claimant].rank) : jobs_[claimant].rank;
    bool kept = false;
    for (int d : reserved_devs_) kept = kept || devs_[d].reserved_by == v;
    if (!kept && std::find(heads.begin(), heads.end(), v) == heads.end()) heads.push_back(v);
  }
  // In the cycle's order, so that the first keeps the cards free soonest.
  std::stable_sort(heads.begin(), heads.end(), [&](int a, int b) {
    return std::make_tuple(jobs_[a].rank, StandingOf(jobs_[b])) <
           std::make_tuple(jobs_[b].rank, StandingOf(jobs_[a]));
  });
  for (int h : heads) {
    if (heads_ < 4) ReserveForHead(h);
  }
}

// When the node will have the job's CPU and host memory, by the running jobs' declared ends
// (kNever when a job without one is in the way): a gang was once kept a node whose cards were
// free but whose CPU was not for 1,260 s, and a later job took a card of the node it started on.
int64_t Engine::HostFreeAt(const NodeRt& node, const Job& j) const {
  MilliCpu cpu = node.cpu_free;
  MiB mem = node.mem_free;
  const MilliCpu need_cpu = j.cpu * j.gpu_count;
  const MiB need_mem = j.mem * j.gpu_count;
  if (cpu >= need_cpu && mem >= need_mem) return now_;
  const int ni = static_cast<int>(&node - nodes_.data());
  std::vector<std::pair<int64_t, int>> ends;
  for (int v : Holders(ni)) ends.push_back({ExpectedEnd(jobs_[v]), v});
  std::sort(ends.begin(), ends.end());
  for (const auto& [end, v] : ends) {
    if (end >= kNever) return kNever;
    for (const Grant& g : jobs_[v].grants) {
      if (g.node == ni) cpu += g.cpu, mem += g.host_memory;
    }
    if (cpu >= need_cpu && mem >= need_mem) return end;
  }
  return kNever;
}

}  // namespace tessera::quota::internal
