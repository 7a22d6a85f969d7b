// The quota engine: repartitioning with drain (a new MIG layout or AMD mode for waiting
// partition demand) and the host checks that drains and preemptions share.
#include <limits>

#include "sched/quota/engine_impl.h"

namespace tessera::quota::internal {

namespace {

// What job `v` holds of node `node`'s CPU and memory.
std::pair<MilliCpu, MiB> HostOn(const Job& v, int node) {
  std::pair<MilliCpu, MiB> h{0, 0};
  for (const Grant& g : v.grants) {
    if (g.node == node) h.first += g.cpu, h.second += g.host_memory;
  }
  return h;
}

}  // namespace

// ------------------------------------------------------------------------------------------
// Repartitioning

// The job's CPU and host memory fit on the drained device's node once the victims have left: a
// drain once emptied a card for a job the node had no host memory for; the job never started,
// the card went back to the share it had drained, and the two took turns every cycle.
bool Engine::NodeHoldsAfter(const Job& j, const DrainOption& o) const {
  return HostFitsAfter(j, devs_[o.dev].node, o.victims);
}

// The same for a one-device preemption: a reclaim for a share once preempted a training job from
// a node without the CPU for the share; the job came back the next cycle, and again, every cycle.
// Everything on device `di` goes, when all of it may go for `j`, the node then has `j`'s CPU and
// host memory, and (reclaim) the lenders keep their reservations: one option for the search.
void Engine::ConsiderClearing(const Job& j, int di, bool reclaim, PreemptOption* best) const {
  std::vector<int> occ;
  Occupants(devs_[di], &occ);
  if (occ.empty()) return;
  int64_t cost = 0;
  for (int v : occ) {
    if (!Victim(j, v, reclaim)) return;
    cost += LostWork(jobs_[v]);
  }
  if (HostFitsAfter(j, devs_[di].node, occ) && (!reclaim || LendersKeepReservations(occ))) {
    Offer(best, cost, occ, {di});
  }
}

// Victims of one reclaim taken together leave each of their groups at or above its reservation:
// each was checked alone, and a 2-card gang once took both cards of a group reserved one.
bool Engine::LendersKeepReservations(const std::vector<int>& victims) const {
  std::map<int, int64_t> taken;
  std::map<int, CellTaken> taken_cells;  // group -> per GPU model and pool
  for (int v : victims) {
    taken[jobs_[v].group] += jobs_[v].charge.gpu_milli;
    AddTaken(jobs_[v], &taken_cells[jobs_[v].group]);
  }
  for (const auto& [g, t] : taken) {
    const int64_t leaving = static_cast<size_t>(g) < leaving_gpu_.size() ? leaving_gpu_[g] : 0;
    if (groups_[g].usage.gpu_milli - leaving - t < groups_[g].spec.reservation.gpu_milli)
      return false;
    if (!KeepsReservations(g, taken_cells[g])) return false;
  }
  return true;
}

bool Engine::HostFitsAfter(const Job& j, int node, const std::vector<int>& victims) const {
  MilliCpu cpu = nodes_[node].cpu_free;
  MiB mem = nodes_[node].mem_free;
  for (int v : victims) {
    const auto [c, m] = HostOn(jobs_[v], node);
    cpu += c, mem += m;
  }
  return cpu >= j.cpu && mem >= j.mem;
}

// A new user: borrowers' shares held all of a node's CPU while three of its cards stood idle, and
// a job inside its group's reservation waited for as long as they ran: victims were sought on
// the cards the job would take, never for the host CPU and memory it needs beside them. Now the
// node's other jobs that may go (on its other cards, or CPU-only) are added, least lost work
// first, each lender keeping its reservation, until the node holds the job (j.cpu and j.mem per
// card it takes).
bool Engine::HostVictims(const Job& j, int node, bool reclaim, std::vector<int>* victims,
                         int64_t* cost) const {
  const int cards = std::max(j.gpu_count, 1);
  MilliCpu cpu = nodes_[node].cpu_free;
  MiB mem = nodes_[node].mem_free;
  auto host = [&](int v) { return HostOn(jobs_[v], node); };
  for (int v : *victims) cpu += host(v).first, mem += host(v).second;
  auto fits = [&] { return cpu >= j.cpu * cards && mem >= j.mem * cards; };
  if (fits()) return true;
  // Least lost work first; between equal losses, the one furthest back in the order (as the
  // victims on the cards: PreemptOption::Consider). Only jobs holding what is short.
  const bool cpu_short = cpu < j.cpu * cards, mem_short = mem < j.mem * cards;
  std::vector<std::tuple<int64_t, Standing, int>> more;  // (lost work, standing, handle)
  for (int v : preemptible_running_) {
    if (std::find(victims->begin(), victims->end(), v) != victims->end() || !Victim(j, v, reclaim))
      continue;
    const auto [c, m] = host(v);
    if ((cpu_short && c > 0) || (mem_short && m > 0))
      more.push_back({LostWork(jobs_[v]), StandingOf(jobs_[v]), v});
  }
  std::sort(more.begin(), more.end());
  const size_t chosen = victims->size();
  for (const auto& [lost, standing, v] : more) {
    victims->push_back(v);
    if (reclaim && !LendersKeepReservations(*victims)) {
      victims->pop_back();
      continue;
    }
    cpu += host(v).first, mem += host(v).second;
    *cost += lost;
    if (!fits()) continue;
    // The added ones the rest make unneeded stay (a cheap job added first, then one that alone
    // would have done): the latest first.
    for (size_t k = victims->size(); k-- > chosen;) {
      const int x = (*victims)[k];
      const auto [c, m] = host(x);
      if (cpu - c < j.cpu * cards || mem - m < j.mem * cards) continue;
      cpu -= c, mem -= m;
      *cost -= LostWork(jobs_[x]);
      victims->erase(victims->begin() + static_cast<std::ptrdiff_t>(k));
    }
    return true;
  }
  return false;
}

bool Engine::TryRepartition(int self) {
  Job& j = jobs_[self];
  if (j.gpu_count != 1) return false;
  DrainOption best;
  // Drained for it: preemptible work of lower priority, or of borrowers when the job is within
  // its group's reservation. Peers are never drained for peers (layouts would ping-pong).
  bool within_reservation = WithinReservation(
      groups_[j.group].usage, Resources{j.gpu_milli, 0, 0, 0}, groups_[j.group].spec.reservation);
  for (size_t di = 0; di < devs_.size(); ++di) {
    const Dev& d = devs_[di];
    if (!Serves(j, d) || !PoolAllows(d.pool, AllocationForm::kPartition)) continue;
    // Not a card kept for a head, unless the job may use it (it comes first, or ends before the
    // head's start): an inference job once split a card kept for a 2-card gang and held it
    // 1,100 s past the gang's start.
    if (d.plan.active) continue;
    // (The thrash break drains as before, kept cards or not: its cards then went back and forth.)
    const bool thrash = options_.engine_break == EngineOptions::Break::kThrash;
    if (thrash ? d.reserved_by >= 0 && d.reserved_by != self && d.nominated
               : !Usable(d, j, self, nullptr, nullptr))
      continue;
    // Nor a card on a head's node whose CPU or host memory the job would take from the head.
    if (!thrash &&
        TakesHostFromHead(j, self, {Grant{d.node, static_cast<int>(di), -1, 0, 0, j.cpu, j.mem}}))
      continue;
    // Nor a card where the instance it would get charges past its group's limit.
    if (!thrash && !InstanceAdmitted(j, d)) continue;
    DrainOption cand;
    cand.cost = best.cost;
    cand.top = best.top;
    if (d.mig_capable()) {
      MigDrainOption(j, static_cast<int>(di), within_reservation, &cand);
    } else if (d.amd_capable()) {
      AmdDrainOption(j, static_cast<int>(di), within_reservation, &cand);
    }
    if (cand.dev >= 0 && NodeHoldsAfter(j, cand)) best = std::move(cand);
  }
  if (best.dev < 0) return false;
  // Demand served, in the same unit as lost work (milli-GPU seconds): what the job asks, over
  // the time it has waited plus the planning horizon.
  int64_t demand =
      std::max<int64_t>(j.gpu_milli, 1) * (now_ - j.submit + policy_.repartition_horizon_s);
  if (best.cost > demand) {
    j.wait_step = "Repartition";
    j.wait_reason += "; cheapest repartition (" + DevName(best.dev) + ") loses " +
                     std::to_string(best.cost / 1000) + " GPU-s, more than the demand served (" +
                     std::to_string(demand / 1000) + " GPU-s)";
    return false;
  }
  Dev& d = devs_[best.dev];
  best.plan.active = true;
  best.plan.for_job = self;
  std::string layout_before = device_layout(d.node, d.index);
  best.plan.why = "for " + j.id + " (gpu " + FormatMilli(j.gpu_milli) + ", " +
                  FormatMiB(j.gpu_mem) + "); lost work " + std::to_string(best.cost / 1000) +
                  " GPU-s vs demand " + std::to_string(demand / 1000) + " GPU-s; was " +
                  (layout_before.empty() ? "unsplit" : layout_before);
  if (best.plan.node_wide) {
    for (int od : nodes_[d.node].devs) {
      if (od != best.dev) {
        devs_[od].plan.active = true;  // held still: part of the node-wide change
        devs_[od].plan.for_job = self;
        devs_[od].plan.node_wide = true;
      }
    }
  }
  d.plan = best.plan;
  active_plans_ += best.plan.node_wide ? static_cast<int>(nodes_[d.node].devs.size()) : 1;
  Nominate(best.dev, self, now_ + policy_.grace_seconds);
  j.awaiting = static_cast<int>(best.victims.size());
  j.wait_step = "Repartition";
  j.wait_reason = "draining " + DevName(best.dev) + " for a new layout (" +
                  std::to_string(best.victims.size()) + " job(s) preempted)";
  for (int v : best.victims) {
    Preempt(v, self, "drain " + DevName(best.dev) + " for repartition " + best.plan.why);
  }
  ++repartitions_;
  return true;
}

int64_t Engine::DrainCost(const Job& j, bool within_reservation,
                          const std::vector<int>& occupants) const {
  int64_t cost = 0;
  std::vector<int> others;
  for (int v : occupants) {
    if (!DrainVictim(j, within_reservation, v)) return kNever;  // something there must stay
    cost += LostWork(jobs_[v]) + 1;
    if (jobs_[v].group != j.group) others.push_back(v);
  }
  // Taken together too: two shares of one group, each alone above its reservation, once left it
  // below.
  return LendersKeepReservations(others) ? cost : kNever;
}

bool Engine::DrainVictim(const Job& j, bool within_reservation, int v) const {
  const Job& x = jobs_[v];
  if (x.state != JobState::kRunning || !x.preemptible || x.external) return false;
  if (!PastMinRuntime(x) || !MayPreempt(j)) return false;
  if (x.group != j.group) {
    // Another group's work goes only while that group keeps its reservation: a drain once took
    // a share inside its group's reservation for a borrower's inference job.
    const GroupRt& g = groups_[x.group];
    const int64_t leaving =
        static_cast<size_t>(x.group) < leaving_gpu_.size() ? leaving_gpu_[x.group] : 0;
    if (g.usage.gpu_milli - leaving - x.charge.gpu_milli < g.spec.reservation.gpu_milli)
      return false;
    CellTaken taken;
    AddTaken(x, &taken);
    if (!KeepsReservations(x.group, taken)) return false;
  }
  return x.priority < j.priority || (within_reservation && Victim(j, v, /*reclaim=*/true));
}

// A MIG device: the cheapest eviction that makes room for the job's profile, or (unsplit) MIG
// turned on once everything on it has gone.
void Engine::MigDrainOption(const Job& j, int di, bool within_reservation, DrainOption* out) {
  const Dev& d = devs_[di];
  int pi = BestMigProfile(d.model, j.gpu_milli, j.gpu_mem);
  if (pi < 0) return;
  const std::string& want = d.model->mig.profiles[pi].name;
  if (d.mig) {
    // A layout that already has the profile serves this demand once it frees up.
    bool has = false;
    for (const Slot& s : d.slots) {
      has = has || (s.alive && s.profile == want);
    }
    if (has) return;
    std::vector<part::CostedInstance> current;
    for (const Slot& s : d.slots) {
      if (!s.alive) continue;
      int64_t cost = 0;
      if (s.holder >= 0)
        cost = DrainVictim(j, within_reservation, s.holder) ? LostWork(jobs_[s.holder]) + 1
                                                            : kForbidden;
      current.push_back({{s.profile, s.start}, cost});
    }
    auto ev = part::CheapestEviction(*d.model, current, want);
    if (!ev.ok() || ev->cost >= kForbidden || ev->evict.empty()) return;
    if (ev->cost >= out->cost) return;
    std::vector<int> victims;
    for (const part::Instance& in : ev->evict) {
      for (const Slot& s : d.slots) {
        if (s.profile == in.profile && s.start == in.start && s.holder >= 0) {
          victims.push_back(s.holder);
        }
      }
    }
    Plan plan;
    plan.evict = ev->evict;
    plan.add = {ev->placed};
    OfferDrain(di, ev->cost, std::move(victims), std::move(plan), out);
  } else {
    // Unsplit: everything on it must go (only preemptible work may be drained).
    std::vector<int> occ;
    Occupants(d, &occ);
    if (occ.empty()) return;  // idle: placement's pass 2 handles it
    const int64_t cost = DrainCost(j, within_reservation, occ);
    Plan plan;
    plan.enable_mig = true;
    plan.add = {part::Instance{want, d.model->mig.profiles[pi].starts.front()}};
    OfferDrain(di, cost, std::move(occ), std::move(plan), out);
  }
}

// An AMD device: the compute (and, node-wide, memory) mode whose partitions hold the job.
void Engine::AmdDrainOption(const Job& j, int di, bool within_reservation, DrainOption* out) {
  const Dev& d = devs_[di];
  // Partitions that cover the job's memory and compute: a plan on memory alone once split an
  // MI300X into CPX (0.125 each) for a 0.3 job, which then could not use it; the card went back
  // to whole for the job it had drained, and the two took turns every cycle.
  auto pick = AmdShapeFor(d, j, /*keep_memory_mode=*/false);
  if (!pick || pick->pair.ToString() == d.amd_pair) return;
  auto cur = part::ParsePair(*d.model, d.amd_pair);
  bool node_wide = pick->pair.memory != cur->memory;
  std::vector<int> occ;
  const std::vector<int> scope =
      node_wide ? nodes_[d.node].devs : std::vector<int>{static_cast<int>(di)};
  for (int od : scope) {
    if (devs_[od].plan.active) return;
    Occupants(devs_[od], &occ);
  }
  const int64_t cost = DrainCost(j, within_reservation, occ);
  Plan plan;
  plan.amd_pair = pick->pair.ToString();
  plan.node_wide = node_wide;
  OfferDrain(di, cost, std::move(occ), std::move(plan), out);
}

void Engine::OfferDrain(int di, int64_t cost, std::vector<int> victims, Plan plan,
                        DrainOption* best) const {
  const Standing top = TopStanding(victims);
  if (cost >= kNever || cost > best->cost || (cost == best->cost && top >= best->top)) return;
  *best = DrainOption{di, cost, std::move(victims), std::move(plan), top};
}

bool Engine::PlanReady(const Dev& d) const {
  if (!d.plan.active || (d.plan.node_wide && d.plan.amd_pair.empty())) return false;
  if (d.plan.node_wide) {
    for (int od : nodes_[d.node].devs) {
      if (!devs_[od].idle()) return false;
    }
  } else if (d.plan.enable_mig || !d.plan.amd_pair.empty()) {
    if (!d.idle()) return false;
  } else {
    for (const part::Instance& in : d.plan.evict) {
      for (const Slot& s : d.slots) {
        if (s.alive && s.profile == in.profile && s.start == in.start && s.holder >= 0) {
          return false;
        }
      }
    }
  }
  return true;
}

bool Engine::ApplyAmdPlan(int di) {
  Dev& d = devs_[di];
  auto pair = part::ParsePair(*d.model, d.plan.amd_pair);
  if (!d.plan.node_wide) {
    d.amd_pair = pair->ToString();
    RebuildAmdSlots(d);
    d.engine_split = d.split;  // split here: UnsplitForDemand may return it to SPX+NPS1
    return true;
  }
  std::vector<part::AmdDevice> hive;
  for (int od : nodes_[d.node].devs) {
    hive.push_back({DevName(od), *part::ParsePair(*d.model, devs_[od].amd_pair), false});
  }
  auto change = part::CheckMemoryModeChange(*d.model, hive, pair->memory);
  if (!change.ok()) {
    d.plan = {};
    return false;
  }
  const std::vector<int>& nd = nodes_[d.node].devs;
  for (size_t k = 0; k < nd.size(); ++k) {
    Dev& o = devs_[nd[k]];
    o.amd_pair = nd[k] == di ? pair->ToString() : change->resulting[k].ToString();
    if (nd[k] != di) o.plan = {};
    RebuildAmdSlots(o);
    o.engine_split = o.split;
  }
  return true;
}

void Engine::ApplyMigPlan(Dev& d) {
  if (d.plan.enable_mig) {
    d.mig = d.split = true;
    d.engine_split = true;
    d.slots.clear();
  }
  for (const part::Instance& in : d.plan.evict) {
    for (Slot& s : d.slots) {
      if (s.alive && s.profile == in.profile && s.start == in.start) s.alive = false;
    }
  }
  if (d.idle()) {  // no grant points into the slots: drop the tombstones
    d.slots.erase(
        std::remove_if(d.slots.begin(), d.slots.end(), [](const Slot& s) { return !s.alive; }),
        d.slots.end());
  }
  for (const part::Instance& in : d.plan.add) {
    const part::MigProfile* p = d.model->mig.FindProfile(in.profile);
    d.slots.push_back({in.ToString(), p->name, in.start, p->memory_mib,
                       p->compute_slices * kWholeGpu / d.model->mig.compute_slices, -1, true,
                       p->memory_slices});
  }
}

bool Engine::ApplyPlan(int di) {
  Dev& d = devs_[di];
  if (!PlanReady(d)) return false;
  std::string before = device_layout(d.node, d.index);
  if (!d.plan.amd_pair.empty()) {
    if (!ApplyAmdPlan(di)) return false;
  } else {
    ApplyMigPlan(d);
  }
  for (int od : nodes_[d.node].devs) {
    Reindex(od);
    MirrorSyncSplit(od);
  }
  Emit(EventKind::kRepartitioned, nullptr,
       DevName(di) + ": " + (before.empty() ? "unsplit" : before) + " -> " +
           device_layout(d.node, d.index) + (d.plan.node_wide ? " (node-wide memory mode)" : "") +
           " " + d.plan.why);
  ++stats_.repartitioned;
  int for_job = d.plan.for_job;
  d.plan = {};
  if (for_job >= 0 && jobs_[for_job].state == JobState::kPending) {
    Nominate(di, for_job, now_);
  }
  memo_.clear();
  return true;
}

void Engine::ApplyReadyPlans() {
  active_plans_ = 0;
  for (size_t d = 0; d < devs_.size(); ++d) {
    if (devs_[d].plan.active) ApplyPlan(static_cast<int>(d));
    if (devs_[d].plan.active) ++active_plans_;
  }
}

}  // namespace tessera::quota::internal
