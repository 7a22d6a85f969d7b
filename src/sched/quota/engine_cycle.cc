// The quota engine: the cycle (order, admission in turn, unsplits) and its steps.
#include <cmath>

#include "sched/quota/engine_impl.h"

namespace tessera::quota::internal {

// ------------------------------------------------------------------------------------------
// The cycle

CycleStats Engine::RunCycle(int64_t now, const std::function<void()>& between) {
  now_ = std::max(now_, now);
  stats_ = {};
  memo_.clear();
  heads_ = 0;
  preempt_searches_ = 0;
  repartitions_ = 0;
  partition_demand_.clear();
  whole_demand_.clear();
  EndGraces();
  StopOverRuntime(now_);
  GiveBackIdle(now_);
  StopOverHoldLimit();
  UpdateFairShare();
  returnable_dirty_ = true;  // the idle cards the engine split, found again when first needed
  std::vector<int> order = Order();
  std::vector<int> still = AdmitInOrder(order, between);
  RepartitionForDemand();
  UnsplitForDemand();
  for (int h : still) {
    if (jobs_[h].state == JobState::kPending) pending_.push_back(h);
  }
  StepCheck("cycle");
  return stats_;
}

void Engine::EndGraces() {
  // 0. Preemptions whose grace ended; then layouts waiting for their device to be idle.
  if (!options_.await_stop && !terminating_.empty()) {
    const std::vector<int> terminating(terminating_.begin(), terminating_.end());  // handle order
    for (int v : terminating) {
      if (jobs_[v].state == JobState::kTerminating && jobs_[v].grace_end <= now_)
        FinishTermination(v);
    }
  }
  if (active_plans_ > 0) ApplyReadyPlans();
  // Backfill reservations are recomputed every cycle; nominations stay until used.
  for (auto it = reserved_devs_.begin(); it != reserved_devs_.end();) {
    Dev& d = devs_[*it];
    if (d.reserved_by >= 0 && !d.nominated) d.reserved_by = -1;
    it = d.reserved_by < 0 ? reserved_devs_.erase(it) : std::next(it);
  }
}

namespace {

// Decays a group's or member's usage history (`decayed`, resource-seconds per resource: GPU,
// GPU memory, CPU, memory) by `decay`, adds `usage` held for `dt` seconds, and returns the
// dominant share: the largest of the four over its capacity (`cap`) times the half-life.
double DecayUsage(const Resources& usage, double decay, double dt, const double cap[4],
                  double half_life, double decayed[4]) {
  const double u[4] = {static_cast<double>(usage.gpu_milli),
                       static_cast<double>(usage.gpu_memory_mib),
                       static_cast<double>(usage.cpu_milli), static_cast<double>(usage.memory_mib)};
  double share = 0;
  for (int r = 0; r < 4; ++r) {
    decayed[r] = decayed[r] * decay + u[r] * dt;
    share = std::max(share, decayed[r] / (cap[r] * half_life));
  }
  return share;
}

}  // namespace

void Engine::UpdateFairShare() {
  // Fair share: decay past usage, add the usage since the last cycle.
  double dt = last_cycle_ < 0 ? 0.0 : static_cast<double>(now_ - last_cycle_);
  const double half_life = static_cast<double>(policy_.fair_share_half_life_s);
  double decay = std::pow(0.5, dt / half_life);
  double cap[4] = {static_cast<double>(std::max<MilliGpu>(gpu_capacity(), 1)),
                   static_cast<double>(std::max<MiB>(gpu_memory_capacity_, 1)),
                   static_cast<double>(std::max<MilliCpu>(cpu_capacity_, 1)),
                   static_cast<double>(std::max<MiB>(host_memory_capacity_, 1))};
  for (GroupRt& g : groups_) {
    const double share = DecayUsage(g.usage, decay, dt, cap, half_life, g.decayed);
    const bool weighted = options_.engine_break != EngineOptions::Break::kFairShareIgnoresWeights;
    g.fair_share = weighted ? share / (static_cast<double>(g.spec.weight_milli) / 1000.0) : share;
    const Resources& res = g.spec.reservation;
    g.below = g.usage.gpu_milli < res.gpu_milli || g.usage.gpu_memory_mib < res.gpu_memory_mib ||
              g.usage.cpu_milli < res.cpu_milli || g.usage.memory_mib < res.memory_mib;
  }
  // The same inside groups that list their users: each member's decayed usage over its weight,
  // against the whole cluster's capacity (so members of one group compare in the same units).
  for (MemberRt& m : members_) {
    const double share = DecayUsage(m.usage, decay, dt, cap, half_life, m.decayed);
    m.fair_share = share / (static_cast<double>(m.weight_milli) / 1000.0);
  }
  last_cycle_ = now_;
}

std::vector<QuotaEngine::FairShareHistory> Engine::FairShare(int64_t* as_of) const {
  std::vector<FairShareHistory> out;
  for (const GroupRt& g : groups_) {
    FairShareHistory h;
    h.group = g.spec.name;
    std::copy(std::begin(g.decayed), std::end(g.decayed), std::begin(h.decayed));
    out.push_back(h);
  }
  if (as_of != nullptr) *as_of = last_cycle_;
  return out;
}

void Engine::RestoreFairShare(const std::vector<FairShareHistory>& history, int64_t as_of,
                              int64_t now) {
  // Decayed over the time since it was saved (no usage added for it: nothing was recorded).
  const double dt = static_cast<double>(std::max<int64_t>(0, now - as_of));
  const double decay = std::pow(0.5, dt / static_cast<double>(policy_.fair_share_half_life_s));
  for (const FairShareHistory& h : history) {
    for (GroupRt& g : groups_) {
      if (g.spec.name != h.group) continue;
      for (int r = 0; r < 4; ++r) g.decayed[r] = std::max(0.0, h.decayed[r]) * decay;
    }
  }
}

std::vector<int> Engine::Order() {
  // 1. Order.
  std::vector<int> order;
  order.reserve(pending_.size());
  for (int h : pending_) {
    if (jobs_[h].state == JobState::kPending) order.push_back(h);
  }
  pending_.clear();  // jobs requeued during the cycle land here; the waiting rejoin at the end
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  stats_.pending_at_start = static_cast<int>(order.size());
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const Job& x = jobs_[a];
    const Job& y = jobs_[b];
    // A job others were preempted for goes first: that price is paid. (Higher-priority
    // borrowers preempted by a reclaim once came straight back onto the node's host memory the
    // claimant needed, and were reclaimed again, every 30 s.) Not one kept a card only, for a
    // layout change on an idle card: first, an inference job waiting for a node-wide mode change
    // took free slices on another node, and the CPU there a higher-priority head was to keep.
    const bool kx = (x.nominated && x.paid) || x.awaiting > 0;
    const bool ky = (y.nominated && y.paid) || y.awaiting > 0;
    if (kx != ky) return kx;
    if (x.priority != y.priority) return x.priority > y.priority;
    bool bx = groups_[x.group].below, by = groups_[y.group].below;
    if (bx != by) return bx;
    double fx = groups_[x.group].fair_share, fy = groups_[y.group].fair_share;
    if (fx != fy) return fx < fy;
    // Inside a group that lists its users: the member further below its weighted share first.
    if (x.group == y.group && x.member >= 0 && y.member >= 0 && x.member != y.member) {
      const double mx = members_[x.member].fair_share, my = members_[y.member].fair_share;
      if (mx != my) return mx < my;
    }
    if (x.submit != y.submit) return x.submit < y.submit;
    return x.seq < y.seq;
  });
  return order;
}

std::vector<int> Engine::AdmitInOrder(const std::vector<int>& order,
                                      const std::function<void()>& between) {
  // 2-4. Admit and place in order; preempt and reserve for what does not fit.
  std::vector<int> still;
  // Claims in flight and capacity leaving, as of now (each reclaim below adds to them).
  claimed_gpu_.assign(groups_.size(), 0);
  leaving_gpu_.assign(groups_.size(), 0);
  claimed_cells_.clear();
  leaving_cells_.clear();
  for (int t : terminating_) AddLeaving(jobs_[t], +1);
  // A preemption whose victims left at once may free more than its claimant takes: the heads
  // passed over earlier in the cycle, still keeping cards, try again first (a gang preempted for
  // a 1-card job freed three cards, and the priority-2 job passed over before it waited 120 s
  // while inference jobs of priority 1 took the other two). Not a borrower a reclaim could take
  // back: placed out of turn, two were, and the next job, inside its group's reservation,
  // reclaimed one at once.
  const auto heads_again = [&] {
    std::vector<int> heads;
    for (int d : reserved_devs_) {
      const int k = devs_[d].reserved_by;
      if (k >= 0 && !devs_[d].nominated && jobs_[k].state == JobState::kPending &&
          jobs_[k].awaiting == 0 && !WouldBeReclaimed(jobs_[k], order) &&
          std::find(heads.begin(), heads.end(), k) == heads.end())
        heads.push_back(k);
    }
    std::sort(heads.begin(), heads.end(), [&](int a, int b) {
      return std::make_tuple(-jobs_[a].rank, StandingOf(jobs_[a])) >
             std::make_tuple(-jobs_[b].rank, StandingOf(jobs_[b]));
    });
    for (int k : heads) {
      if (between) between();
      std::string ks, kr;
      bool kb = false;
      if (!TryPlace(k, &ks, &kr, &kb)) continue;
      ++stats_.admitted;
      --heads_;
      for (int d : reserved_devs_) {
        if (devs_[d].reserved_by == k) devs_[d].reserved_by = -1;
      }
    }
  };
  for (size_t i = 0; i < order.size(); ++i) jobs_[order[i]].rank = static_cast<int>(i);
  for (int h : order) {
    const Job& c = jobs_[h];
    if (c.state == JobState::kPending && c.awaiting > 0) {
      AddToChain(claimed_gpu_, c.group, c.gpu_count * c.gpu_milli);
      AddClaim(c, c.gpu_count * c.gpu_milli);  // per GPU model and pool
    }
  }
  // Per group, its running preemptible jobs' priorities and GPU, those on a card (found when
  // first needed, once a cycle, from preemptible_running_: walking every card's occupants
  // instead took a fifth of a served control plane's CPU at 10,000 nodes).
  std::vector<std::vector<std::pair<int, MilliGpu>>> preemptible;
  const auto reclaim_follows = [&](const Job& j) {
    if (!WouldBorrow(j)) return false;
    if (preemptible.empty()) {
      preemptible.resize(groups_.size());
      for (int v : preemptible_running_) {
        const Job& r = jobs_[v];
        const bool on_card = std::any_of(r.grants.begin(), r.grants.end(),
                                         [](const Grant& g) { return g.dev >= 0; });
        if (on_card) preemptible[r.group].push_back({r.priority, r.charge.gpu_milli});
      }
    }
    // Not one its own group's jobs of lower priority make room for inside the reservation: it
    // preempts them (the pass put a priority-2 gang behind another group's job of priority 0,
    // which took the host CPU the gang needed; seed 2174035).
    Resources held = groups_[j.group].usage;
    for (const auto& [priority, gpu] : preemptible[j.group])
      held.gpu_milli -= priority < j.priority ? gpu : 0;
    if (WithinReservation(held, Resources{j.gpu_count * j.gpu_milli, 0, 0, 0},
                          groups_[j.group].spec.reservation))
      return false;
    return j.preemptible || !preemptible[j.group].empty();
  };
  bool guaranteed_first = false;
  // The group whose jobs the pass skipped (those of the borrower it ran before): they go once
  // more before the next borrower of another group a reclaim could answer. Skipped and left to
  // their turn, a priority-0 job of a gang's group reclaimed a card after an inference job of
  // another group was backfilled beside the gang, and the gang, which the reclaim made sooner,
  // started 780 s late (seed 5041433).
  int skipped = -1;
  for (size_t i = 0; i < order.size(); ++i) {
    const int h = order[i];
    if (between) between();  // every decision so far is final
    Job& j = jobs_[h];
    if (j.state != JobState::kPending) continue;
    std::string step, reason;
    bool backfilled = false;
    const bool again = guaranteed_first && skipped >= 0 && j.group != skipped;
    if ((!guaranteed_first || again) && reclaim_follows(j)) {
      // Before the first borrower a reclaim could answer, the jobs after it inside their groups'
      // reservations take the free capacity they fit: placed first, the borrower was reclaimed
      // by them in the same cycle (0 s of work lost), a card went MIG on for it and off again for
      // the claimant, and a reserved group's short jobs one after another changed the card's
      // mode 21 times in an hour. Also one no reclaim can take back, beside a preemptible job of
      // its group: the group, then above its reservation, lost its gang, placed just before it,
      // to a reclaim in the same cycle (seed 2059432). Not one whose group has nothing a reclaim
      // could take: the pass then put a priority-1 inference job behind jobs of priority 0
      // (seed 3007296).
      const int only = again ? skipped : -1;
      skipped = again ? -1 : j.group;
      guaranteed_first = true;
      // Not past a job of its own group that comes before it and would borrow: that one may be
      // a head to keep cards for (an inference job of a group went ahead of its own blocked
      // gang, took the card the gang was to keep, and put the gang's start off by 750 s).
      std::vector<char> passed(groups_.size(), 0);
      for (size_t k = i + 1; k < order.size(); ++k) {
        const int x = order[k];
        // Nor ahead of a borrower of higher priority, as with kept cards (Outranks): an inference
        // job of priority 0 took the card a priority-1 job was to get back whole.
        if (jobs_[x].state != JobState::kPending || jobs_[x].group == j.group) continue;
        if (only >= 0 && jobs_[x].group != only) continue;
        if (passed[jobs_[x].group]) continue;
        if (!InsideReservation(jobs_[x])) {
          passed[jobs_[x].group] = 1;
          continue;
        }
        if (between) between();
        std::string xs, xr;
        bool xb = false;
        // Only where it stays inside the reservation: a partition may be charged more than it
        // asked (a whole card's share for a 4g.24gb instance of an A30), and a job that ends
        // up borrowing has no claim to go first (it took the card a priority-1 job was to get).
        // An idle split card back to whole in its turn, as below: left split, a borrower after
        // this pass unsplit the card, was placed and reclaimed for this job in one cycle, and a
        // lower-priority job of the borrower's group took its place.
        if (TryPlace(x, &xs, &xr, &xb, /*guaranteed_only=*/true) ||
            ((xs == "Placement" || xs == "Backfill") && UnsplitInTurn(x) &&
             TryPlace(x, &xs, &xr, &xb, /*guaranteed_only=*/true)))
          ++stats_.admitted;
        else if (xs == "Placement" || xs == "Backfill") {
          ReclaimFirst(x);
          AvoidForClaim(x, h);
        }
        // Nor past a job of its own group that found no room here and keeps cards in its turn
        // (a 1-card job went ahead of its group's gang, of higher priority and inside the
        // reservation too, onto a card the gang would have kept, and put it off by 780 s).
        const Job& xj = jobs_[x];
        if (xj.state == JobState::kPending && xs == "Placement" && !xj.forms.empty() &&
            xj.forms.front() == AllocationForm::kWhole && xj.gpu_count <= max_devs_per_node_)
          passed[xj.group] = 1;
      }
      if (between) between();
    }
    if (h == avoid_for_) avoid_devs_.clear(), avoid_group_ = avoid_for_ = -1;
    avoiding_ = !avoid_devs_.empty() && j.group == avoid_group_;
    bool placed = TryPlace(h, &step, &reason, &backfilled);
    if (avoiding_ && !placed) {
      avoiding_ = false;
      placed = TryPlace(h, &step, &reason, &backfilled);
    }
    avoiding_ = false;
    if (placed) {
      ++stats_.admitted;
      continue;
    }
    // Also a job waiting out its claim's grace: an idle split card beside it is sooner (a later
    // job of its own group unsplit the card and took it, and the claimant waited 20 s more).
    if ((step == "Placement" || step == "Backfill") && UnsplitInTurn(h) &&
        TryPlace(h, &step, &reason, &backfilled)) {
      ++stats_.admitted;
      continue;
    }
    j.wait_step = step;
    j.wait_reason = reason;
    if (j.awaiting > 0) {
      j.wait_step = "Reclaim";
      j.wait_reason = "waiting for " + std::to_string(j.awaiting) +
                      " preempted job(s) to leave (grace " + std::to_string(policy_.grace_seconds) +
                      "s)";
      still.push_back(h);
      continue;
    }
    if (j.nominated) {
      // What was kept for it is gone or insufficient, or it may not take it now (a limit): let
      // others use it. (A job held at its group's limit once kept a reclaimed card for good.)
      for (Dev& d : devs_) {
        if (d.reserved_by == h) d.reserved_by = -1, d.nominated = false;
      }
      j.nominated = j.paid = false;
    }
    if (step == "Placement" || step == "Backfill") {
      Resources nominal{j.gpu_count * j.gpu_milli, 0, 0, 0};
      // Within the reservation counting the group's claims already in flight: 22 jobs against a
      // reservation of 16 reclaim 16, not 22.
      Resources held = groups_[j.group].usage;
      if (options_.engine_break != EngineOptions::Break::kReclaimIgnoresInFlight)
        held.gpu_milli += claimed_gpu_[j.group];
      bool within_reservation = WithinReservation(held, nominal, groups_[j.group].spec.reservation);
      bool tried = false, claimed = false;
      const bool may_preempt = MayPreempt(j);
      if (preempt_searches_ < policy_.max_preemption_searches_per_cycle && may_preempt) {
        if (within_reservation && options_.engine_break != EngineOptions::Break::kNoReclaim) {
          tried = TryReclaim(h);  // per GPU model where its group has quotas per model
          // A claim counts until its job is placed, also when its victims left at once (no
          // grace) and it is not placed yet: two jobs once reclaimed a card each for one slot.
          claimed = tried;
          if (claimed) AddToChain(claimed_gpu_, j.group, nominal.gpu_milli);
          if (claimed) AddClaim(j, nominal.gpu_milli);
        }
        if (!tried) tried = TryPreempt(h, /*reclaim=*/false);
      }
      if (tried) {
        if (PlaceAfterClaim(h, claimed, /*guaranteed_only=*/false)) {
          KeepHeadsAfterClaim(h);  // first: a victim of higher standing keeps its cards
          heads_again();
          continue;
        }
        KeepHeadsAfterClaim(h);
        j.wait_step = "Reclaim";
        j.wait_reason = (within_reservation ? "reclaiming capacity from borrowers"
                                            : "preempting lower-priority jobs of the group") +
                        std::string("; back by ") + T(now_ + policy_.grace_seconds);
      } else {
        if (std::find(j.forms.begin(), j.forms.end(), AllocationForm::kPartition) !=
            j.forms.end()) {
          partition_demand_.push_back(h);
        }
        if (step == "Placement" && j.gpu_count > 0 &&
            std::any_of(j.forms.begin(), j.forms.end(),
                        [](AllocationForm f) { return f != AllocationForm::kPartition; })) {
          whole_demand_.push_back(h);
        }
        if (heads_ < 4 && step == "Placement" && j.forms.front() == AllocationForm::kWhole) {
          ReserveForHead(h);
        }
        if (!may_preempt) {
          j.wait_reason += "; may preempt from " + T(j.waiting_since + j.preempt_delay) +
                           " (preemption_delay " + std::to_string(j.preempt_delay) + "s)";
        }
      }
    } else if (step == "Admission" && !MayPreempt(j)) {
      // At a limit, with jobs of its group it may preempt once it has waited (not for the
      // borrowing rule, which no preemption answers).
      const bool may_clear =
          j.held_dev < 0 && j.preempt_delay > 0 &&
          j.wait_reason.find(" limit") != std::string::npos &&
          j.wait_reason.rfind("queue ", 0) != 0 &&
          std::any_of(preemptible_running_.begin(), preemptible_running_.end(), [&](int v) {
            return jobs_[v].group == j.group && Victim(j, v, /*reclaim=*/false);
          });
      if (may_clear) {
        j.wait_reason += "; may preempt from " + T(j.waiting_since + j.preempt_delay) +
                         " (preemption_delay " + std::to_string(j.preempt_delay) + "s)";
      }
    } else if (step == "Admission" &&
               preempt_searches_ < policy_.max_preemption_searches_per_cycle &&
               TryPreemptForLimit(h)) {
      // Gone at once (no grace): placed now, before a later job takes what they left.
      if (j.awaiting == 0 && TryPlace(h, &step, &reason, &backfilled)) {
        ++stats_.admitted;
        continue;
      }
      j.wait_step = "Reclaim";
      j.wait_reason =
          "preempting lower-priority jobs of the group to make room under its limit; "
          "back by " +
          T(now_ + policy_.grace_seconds);
    }
    still.push_back(h);
  }
  for (int h : order) jobs_[h].rank = -1;
  for (int h : pending_) jobs_[h].rank = -1;  // victims requeued at once (KeepHeadsAfterClaim)
  avoid_devs_.clear();
  avoid_group_ = avoid_for_ = -1;
  return still;
}

// The pass found no room for x inside its group's reservation, and no reclaim: h's group, a
// lender at its reservation, has nothing to give until h borrows. The cards x would reclaim then
// that are free now go to h's group's jobs last, until x's turn: placed first on them, a borrower
// was reclaimed at once for x while a later job of its group kept the card it took beside them
// (seeds 1094184, 1529044, 9019786).
void Engine::AvoidForClaim(int x, int h) {
  const Job& c = jobs_[x];
  const Job& j = jobs_[h];
  if (!avoid_devs_.empty() || c.state != JobState::kPending || c.awaiting > 0 || c.nominated ||
      c.external || c.gpu_count == 0 || c.gpu_count > max_devs_per_node_ || c.group == j.group ||
      preempt_searches_ >= policy_.max_preemption_searches_per_cycle || !MayPreempt(c) ||
      options_.engine_break != EngineOptions::Break::kNone)
    return;
  const bool whole = j.forms.size() == 1 && j.forms.front() == AllocationForm::kWhole;
  const Resources as_if{j.gpu_count * (whole ? kWholeGpu : j.gpu_milli), 0, 0, 0};
  AddUsage(j.group, as_if, +1);
  PreemptOption best;
  SearchPreemption(c, x, /*reclaim=*/true, &best);
  AddUsage(j.group, as_if, -1);
  const bool lender = std::any_of(best.victims.begin(), best.victims.end(),
                                  [&](int v) { return jobs_[v].group == j.group; });
  if (!lender) return;
  for (int d : best.devs) {
    if (devs_[d].idle()) avoid_devs_.push_back(d);
  }
  if (!avoid_devs_.empty()) avoid_group_ = j.group, avoid_for_ = x;
}

// The guaranteed-first pass's job that found no room inside its group's reservation reclaims
// there, before the borrower ahead of it is placed (as it would in its turn, with the same
// victims but that borrower): placed first, a borrower of priority 2 was reclaimed in the same
// cycle for a gang inside its group's reservation, and an inference job of another group took
// the card it could have had, for 540 s. Under an EngineOptions::Break, as before it.
void Engine::ReclaimFirst(int x) {
  Job& j = jobs_[x];
  if (preempt_searches_ >= policy_.max_preemption_searches_per_cycle || !MayPreempt(j) ||
      j.nominated || options_.engine_break != EngineOptions::Break::kNone)
    return;
  const int64_t n = j.gpu_count * j.gpu_milli;
  Resources held = groups_[j.group].usage;
  held.gpu_milli += claimed_gpu_[j.group];
  if (!WithinReservation(held, Resources{n, 0, 0, 0}, groups_[j.group].spec.reservation) ||
      !TryReclaim(x))
    return;
  AddToChain(claimed_gpu_, j.group, n);
  AddClaim(j, n);
  PlaceAfterClaim(x, /*claimed=*/true, /*guaranteed_only=*/true);
  KeepHeadsAfterClaim(x);
}

// After a claim for h (its victims chosen; `claimed`: a reclaim, counted in claimed_gpu_ and the
// claim cells), h placed at once where its victims left at once (no grace). Its own claim is not
// counted while it is placed, or the job that fills its group's reservation was admitted as
// borrowing; not placed, the claim counts on (two jobs once reclaimed a card each for one slot).
bool Engine::PlaceAfterClaim(int h, bool claimed, bool guaranteed_only) {
  Job& j = jobs_[h];
  if (j.awaiting != 0) return false;
  const int64_t n = j.gpu_count * j.gpu_milli;
  std::string step, reason;
  bool backfilled = false;
  if (claimed) AddToChain(claimed_gpu_, j.group, -n);
  if (TryPlace(h, &step, &reason, &backfilled, guaranteed_only) ||
      (UnsplitInTurn(h) && TryPlace(h, &step, &reason, &backfilled, guaranteed_only))) {
    if (claimed) AddClaim(j, -n);  // now in its usage
    ++stats_.admitted;
    return true;
  }
  if (claimed) AddToChain(claimed_gpu_, j.group, n);
  return false;
}

void Engine::RepartitionForDemand() {
  // 5. Repartition for partition demand that still waits.
  if (policy_.repartition) {
    repartition_failed_.clear();
    repartition_attempts_ = 0;
    bool changed = false;  // by an earlier job's repartition in this loop
    for (int h : partition_demand_) {
      if (repartitions_ >= policy_.max_repartitions_per_cycle) break;
      // Each search walks every device; a shape that found nothing will not find it again
      // this cycle, and the searches per cycle are bounded.
      if (repartition_attempts_ >= 4 * policy_.max_repartitions_per_cycle) break;
      Job& j = jobs_[h];
      if (j.state != JobState::kPending || j.awaiting > 0) continue;
      auto rkey = std::make_tuple(j.priority, j.pools, j.gpu_milli, j.gpu_mem);
      if (repartition_failed_.count(rkey)) continue;
      ++repartition_attempts_;
      // A partition an earlier change opened first: two jobs on a CPX+NPS4 node changed both
      // cards, and the second job took the first card's other DPX partition (seed 1594778).
      // Not while a head keeps cards: a change nominates its card for its job, the head keeping
      // it loses it, and a borrower of priority 0 then took the card's other partition for
      // 1,200 s in front of the priority-2 head (seed 2193866).
      std::string step, reason;
      bool bf = false;
      if (changed && heads_ == 0 && TryPlace(h, &step, &reason, &bf)) {
        ++stats_.admitted;
        continue;
      }
      if (!TryRepartition(h)) {
        repartition_failed_.insert(rkey);
        continue;
      }
      changed = true;
      ApplyReadyPlans();
      if (jobs_[h].awaiting == 0 && TryPlace(h, &step, &reason, &bf)) ++stats_.admitted;
    }
  }
}

// 6. A device split for partition demand goes back to whole once idle, when whole or share
// demand waits that it could serve (MIG turned off, an AMD card back to SPX+NPS1): a card split
// for one short inference job once stayed split, and a 2-card job waited on an idle node for
// good. Only devices the engine split itself (a registered layout is the operator's), idle,
// with no layout change under way and kept for nobody; at most max_repartitions_per_cycle.
void Engine::UnsplitForDemand() {
  if (options_.engine_break == EngineOptions::Break::kNoUnsplit) return;
  if (options_.engine_break == EngineOptions::Break::kThrash) {
    for (size_t di = 0; di < devs_.size(); ++di) {
      const Dev& d = devs_[di];
      if (d.split && d.engine_split && d.idle() && !d.plan.active && d.reserved_by < 0)
        Unsplit(static_cast<int>(di), "nobody");
    }
  }
  if (whole_demand_.empty()) return;
  // The idle cards the engine split, found once: each waiting job looks at those only (walking
  // every device for every waiting job took 84% of a 10,000-node cycle).
  std::vector<int> split_idle;
  for (size_t di = 0; di < devs_.size(); ++di) {
    const Dev& d = devs_[di];
    if (d.split && d.engine_split && d.idle() && !d.plan.active)
      split_idle.push_back(static_cast<int>(di));
  }
  if (split_idle.empty()) return;
  int changed = 0;
  for (int h : whole_demand_) {
    Job& j = jobs_[h];
    if (j.state != JobState::kPending || j.awaiting > 0) continue;
    bool any = false;
    for (size_t k = 0; k < split_idle.size() && changed < policy_.max_repartitions_per_cycle; ++k) {
      const int di = split_idle[k];
      const Dev& d = devs_[di];
      if (!d.split || !d.engine_split || !d.idle() || d.plan.active ||
          (d.reserved_by >= 0 && d.reserved_by != h))
        continue;
      if (!Serves(j, d) || nodes_[d.node].down || d.closed || d.memory < j.gpu_mem) continue;
      bool serves = false;
      for (AllocationForm f : j.forms)
        serves = serves || (f != AllocationForm::kPartition && PoolAllows(d.pool, f));
      if (!serves) continue;
      std::vector<int> scope = UnsplitScope(di, h);
      if (scope.empty()) continue;
      for (int od : scope) {
        if (devs_[od].split || devs_[od].amd_pair != "SPX+NPS1") Unsplit(od, j.id);
      }
      ++changed;
      any = true;
      if (j.gpu_count <= 1) break;  // a gang may need several
    }
    if (!any) continue;
    memo_.clear();
    std::string step, reason;
    bool bf = false;
    if (TryPlace(h, &step, &reason, &bf)) ++stats_.admitted;
  }
}

// What an unsplit of `di` changes: the device, or for an AMD card in a memory mode other than
// NPS1 (a memory mode is the node's) every device of the node, all idle and none kept, planned
// or split by the operator; empty when that cannot be now. (One card of an NPS4 node once went
// to SPX+NPS1 alone, leaving the node in two memory modes.)
// In the job's own turn, before anyone after it: idle cards the engine split go back to whole
// for a whole-card or share job that they then let in (on one node, with its CPU and memory).
// Left to the end of the cycle, a lower-priority partition job took the split card again first:
// a reclaim freed a card for a training job, and the borrower it preempted came straight back,
// every cycle.
bool Engine::UnsplitInTurn(int h) {
  const Job& j = jobs_[h];
  if (options_.engine_break == EngineOptions::Break::kNoUnsplit || j.gpu_count < 1 || j.external)
    return false;
  if (returnable_dirty_) {
    // The nodes with an idle card the engine split, once per cycle and after a release: the
    // turn-by-turn unsplit looks at those nodes only, not at every node for every waiting job.
    returnable_nodes_.clear();
    for (const Dev& d : devs_) {
      if (MayUnsplitAlone(d) && d.idle() && !d.plan.active &&
          (returnable_nodes_.empty() || returnable_nodes_.back() != d.node)) {
        returnable_nodes_.push_back(d.node);
      }
    }
    returnable_dirty_ = false;
  }
  if (returnable_nodes_.empty()) return false;
  const bool whole =
      std::find(j.forms.begin(), j.forms.end(), AllocationForm::kWhole) != j.forms.end();
  const bool share =
      std::find(j.forms.begin(), j.forms.end(), AllocationForm::kShare) != j.forms.end();
  if (!whole && !(share && j.gpu_count == 1)) return false;
  for (int ni : returnable_nodes_) {
    const NodeRt& node = nodes_[ni];
    if (node.down || !ServesNode(j, node) ||
        !NodeHas(node, j.cpu * j.gpu_count, j.mem * j.gpu_count))
      continue;
    int free = 0;
    std::vector<int> back;
    for (int di : node.devs) {
      const Dev& d = devs_[di];
      if (d.closed || d.memory < j.gpu_mem || (d.reserved_by >= 0 && d.reserved_by != h)) continue;
      if (!d.split && d.idle() && !d.plan.active) {
        ++free;
      } else if (MayUnsplitAlone(d) && d.idle() && !d.plan.active) {
        back.push_back(di);
      }
    }
    const bool pool_ok = whole ? PoolAllows(node.pool, AllocationForm::kWhole)
                               : PoolAllows(node.pool, AllocationForm::kShare);
    const int need = whole ? j.gpu_count - free : 1;
    if (!pool_ok || need <= 0 || need > static_cast<int>(back.size())) continue;
    for (int k = 0; k < need; ++k) Unsplit(back[static_cast<size_t>(k)], j.id);
    memo_.clear();
    return true;
  }
  return false;
}

bool Engine::MayUnsplitAlone(const Dev& d) const {
  return d.split && d.engine_split &&
         (!d.amd_capable() || d.amd_pair.find("+NPS1") != std::string::npos);
}

std::vector<int> Engine::UnsplitScope(int di, int for_job) const {
  const Dev& d = devs_[di];
  if (!d.amd_capable() || d.amd_pair.find("+NPS1") != std::string::npos) return {di};
  std::vector<int> scope;
  for (int od : nodes_[d.node].devs) {
    const Dev& o = devs_[od];
    if (!o.idle() || o.plan.active || (o.reserved_by >= 0 && o.reserved_by != for_job) ||
        (o.split && !o.engine_split)) {
      return {};
    }
    scope.push_back(od);
  }
  return scope;
}

void Engine::Unsplit(int di, const std::string& for_job) {
  Dev& d = devs_[di];
  std::string what;
  if (d.amd_capable()) {
    what = "compute mode " + d.amd_pair + " -> SPX+NPS1";
    d.amd_pair = "SPX+NPS1";
    RebuildAmdSlots(d);
  } else {
    what = "MIG off";
    d.mig = d.split = false;
    d.slots.clear();
  }
  d.engine_split = false;
  d.no_start = 0;
  MirrorSyncSplit(di);
  Reindex(di);
  ++repartitions_;
  Emit(EventKind::kRepartitioned, nullptr,
       DevName(di) + ": " + what + " on an idle device for " + for_job +
           ", waiting for a whole device or a share (nothing lost)");
}

}  // namespace tessera::quota::internal
