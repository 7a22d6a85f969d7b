// The quota engine: placement in each form (admission against quotas: engine_admission.cc).
#include "sched/quota/compute_mode.h"
#include "sched/quota/engine_impl.h"

namespace tessera::quota::internal {

// ------------------------------------------------------------------------------------------
// Placement

// A job inside its group's reservation comes before a blocked head that would borrow, of no
// higher priority: the head's kept devices do not hold it back (a group once sat below its
// reservation for 1,700 s beside a card kept for another group's borrowing gang). Of higher
// priority too, where the job's reclaim would take the head straight back (preemptible, its
// group at its reservation without it): kept from the card, an inference job drained it once
// the head was placed there, and the head's own group's later job kept the card beside it
// (seed 8037518). So does a job ahead of the head in this cycle's order, tried again after it
// (heads_again).
bool Engine::Outranks(const Job& j, const Job& head) const {
  if (j.rank >= 0 && j.rank < head.rank) return true;
  if (j.group == head.group) return false;
  if (head.priority > j.priority &&
      (!head.preemptible || !MayPreempt(j) ||
       groups_[head.group].usage.gpu_milli < groups_[head.group].spec.reservation.gpu_milli))
    return false;
  const Resources mine{j.gpu_count * j.gpu_milli, 0, 0, 0};
  const Resources theirs{head.gpu_count * head.gpu_milli, 0, 0, 0};
  return WithinReservation(groups_[j.group].usage, mine, groups_[j.group].spec.reservation) &&
         !WithinReservation(groups_[head.group].usage, theirs,
                            groups_[head.group].spec.reservation);
}

// A pick on a card kept for a head of higher priority, which the job may use only as one inside
// its group's reservation (Outranks, by what it asked), whose charge borrows after all: an
// inference job charged half an A30 for its 2g.12gb took the other partition of a card kept for
// a priority-2 head (seed 1062762).
bool Engine::BorrowsKeptCard(const Job& j, const Candidate& c) const {
  if (options_.engine_break == EngineOptions::Break::kBackfillIgnoresHead) return false;
  for (const Grant& g : c.grants) {
    if (g.dev < 0) continue;  // a CPU-only job's grant: no card
    const Dev& d = devs_[g.dev];
    if (d.reserved_by < 0 || d.nominated || &jobs_[d.reserved_by] == &j) continue;
    const Job& head = jobs_[d.reserved_by];
    if (head.priority <= j.priority || (j.rank >= 0 && j.rank < head.rank)) continue;
    if (j.known_run() > 0 && now_ + j.known_run() <= d.reserved_until) continue;
    return true;
  }
  return false;
}

bool Engine::FindWhole(Job& j, int self, Candidate* c, bool* blocked) {
  if (j.gpu_count > max_devs_per_node_) return FindGang(j, self, c, blocked);
  if (PolicyPick(j, self, AllocationForm::kWhole, c)) return true;
  size_t n = nodes_.size();
  for (size_t step = 0; step < n; ++step) {
    size_t ni = (cursor_node_ + step) % n;
    const NodeRt& node = nodes_[ni];
    if (!ServesNode(j, node) || !PoolAllows(node.pool, AllocationForm::kWhole)) continue;
    if (static_cast<int>(node.devs.size()) < j.gpu_count) continue;
    if (!NodeHas(node, j.cpu * j.gpu_count, j.mem * j.gpu_count)) continue;
    std::vector<Grant> picked;
    bool backfill = false;
    for (int d : node.devs) {
      const Dev& dev = devs_[d];
      const bool held =
          dev.whole >= 0 && options_.engine_break != EngineOptions::Break::kDoubleBookWhole;
      if (dev.split || held || !dev.shares.empty() || dev.memory < j.gpu_mem) continue;
      bool bf = false;
      if (!Usable(dev, j, self, &bf, blocked)) continue;
      backfill = backfill || bf;
      picked.push_back({static_cast<int>(ni), d, -1, dev.memory, kWholeGpu, j.cpu, j.mem});
      if (static_cast<int>(picked.size()) == j.gpu_count) break;
    }
    if (static_cast<int>(picked.size()) == j.gpu_count) {
      if (TakesHostFromHead(j, self, picked)) {  // another node may have room
        *blocked = true;
        continue;
      }
      c->grants = std::move(picked);
      c->backfill = backfill;
      cursor_node_ = ni;
      return true;
    }
  }
  return false;
}

bool Engine::FindGang(Job& j, int self, Candidate* c, bool* blocked) {
  // Devices across several nodes, all or nothing: fullest-free nodes first, so the gang
  // spans as few nodes as it can.
  std::vector<std::pair<int, std::vector<Grant>>> options;
  for (size_t ni = 0; ni < nodes_.size(); ++ni) {
    const NodeRt& node = nodes_[ni];
    if (!ServesNode(j, node) || !PoolAllows(node.pool, AllocationForm::kWhole)) continue;
    std::vector<Grant> free;
    MilliCpu cpu = 0;
    MiB mem = 0;
    for (int d : node.devs) {
      const Dev& dev = devs_[d];
      if (dev.split || dev.whole >= 0 || !dev.shares.empty() || dev.memory < j.gpu_mem) continue;
      if (!Usable(dev, j, self, nullptr, blocked)) continue;
      if (!NodeHas(node, cpu + j.cpu, mem + j.mem)) break;
      cpu += j.cpu;
      mem += j.mem;
      free.push_back({static_cast<int>(ni), d, -1, dev.memory, kWholeGpu, j.cpu, j.mem});
    }
    if (!free.empty()) options.emplace_back(static_cast<int>(free.size()), std::move(free));
  }
  std::stable_sort(options.begin(), options.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<Grant> picked;
  for (auto& [count, grants] : options) {
    // The host check is per node: a node whose part would take a head's host is passed over.
    const size_t need = static_cast<size_t>(j.gpu_count) - picked.size();
    grants.resize(std::min(need, grants.size()));
    if (TakesHostFromHead(j, self, grants)) {
      *blocked = true;
      continue;
    }
    picked.insert(picked.end(), grants.begin(), grants.end());
    (void)count;
    if (static_cast<int>(picked.size()) == j.gpu_count) break;
  }
  if (static_cast<int>(picked.size()) < j.gpu_count) return false;
  c->grants = std::move(picked);
  return true;
}

bool Engine::SwapRoom(int di, MiB want, MiB freed) const {
  const Dev& d = devs_[di];
  const NodeRt& n = nodes_[d.node];
  MiB over = 0;
  for (int x : n.devs) {
    const Dev& e = devs_[x];
    if (e.share_mem > e.memory) over += e.share_mem - e.memory;
  }
  const MiB before = d.share_mem > d.memory ? d.share_mem - d.memory : 0;
  const MiB used = d.share_mem - freed + want;
  const MiB after = used > d.memory ? used - d.memory : 0;
  return over + n.held_swap_mib - before + after <= n.spec.swap_mib;
}

bool Engine::FindShare(Job& j, int self, Candidate* c, bool* blocked) {
  MiB cap = j.gpu_mem;
  auto fits = [&](int di, bool* bf) {
    const Dev& d = devs_[di];
    if (!Serves(j, d) || !PoolAllows(d.pool, AllocationForm::kShare)) return false;
    if (d.split || d.whole >= 0 || ShareGrade(d, j.sm_percent) < j.min_isolation) return false;
    if (!ComputeModeFits(d, j.sm_percent)) return false;
    MiB want = cap > 0 ? cap : d.memory * j.gpu_milli / kWholeGpu;
    if (!d.ShareKindFits(j.swap_oc) || d.share_mem + want > d.share_capacity(j.swap_oc) ||
        d.share_weight + j.gpu_milli > d.weight_capacity(j.swap_oc) ||
        (j.swap_oc > 0 && !SwapRoom(di, want))) {
      return false;
    }
    if (!NodeHas(nodes_[d.node], j.cpu, j.mem)) return false;
    if (!Usable(d, j, self, bf, blocked)) return false;
    if (TakesHostFromHead(j, self, {{d.node, di, -1, want, j.gpu_milli, j.cpu, j.mem}})) {
      *blocked = true;
      return false;
    }
    return true;
  };
  auto take = [&](int di, bool bf) {
    const Dev& d = devs_[di];
    MiB want = cap > 0 ? cap : d.memory * j.gpu_milli / kWholeGpu;
    c->grants = {{d.node, di, -1, want, j.gpu_milli, j.cpu, j.mem, j.sm_percent}};
    c->backfill = bf;
  };
  if (j.held_dev >= 0) {
    // Held swapped out: back on its own device only, its memory off its node's held swap.
    MiB& held = nodes_[devs_[j.held_dev].node].held_swap_mib;
    held -= j.held_mem;
    bool bf = false;
    const bool ok = fits(j.held_dev, &bf);
    held += j.held_mem;
    if (ok) take(j.held_dev, bf);
    return ok;
  }
  // Best fit among devices that already carry shares: the least free memory that holds it.
  int probed = 0;
  auto best_fit = [&] {
    for (auto it = shared_by_free_.lower_bound({cap, -1});
         it != shared_by_free_.end() && probed < kShareProbe; ++it, ++probed) {
      bool bf = false;
      if (fits(it->second, &bf)) {
        take(it->second, bf);
        return true;
      }
    }
    return false;
  };
  // A swapping share goes first where shares of its overcommit already are, past the memory if
  // need be: overcommit exists to use fewer cards. The placement policy, which fits caps in the
  // physical memory, would open another card instead (and chooses only the card to open).
  if (j.swap_oc > 0 && best_fit()) return true;
  if (PolicyPick(j, self, AllocationForm::kShare, c)) return true;
  if (j.swap_oc == 0 && best_fit()) return true;
  // Then an empty device, next fit.
  size_t n = devs_.size();
  for (size_t step = 0; step < n; ++step) {
    size_t di = (cursor_dev_share_ + step) % n;
    const Dev& d = devs_[di];
    if (!d.shares.empty() || !d.idle()) continue;
    bool bf = false;
    if (fits(static_cast<int>(di), &bf)) {
      take(static_cast<int>(di), bf);
      cursor_dev_share_ = di;
      return true;
    }
  }
  // A device with shares beyond the probe window (rare: many near-equal free sizes).
  if (probed >= kShareProbe) {
    for (auto it = shared_by_free_.lower_bound({cap, -1}); it != shared_by_free_.end(); ++it) {
      bool bf = false;
      if (fits(it->second, &bf)) {
        take(it->second, bf);
        return true;
      }
    }
  }
  return false;
}

bool Engine::FindCpuOnly(Job& j, int self, Candidate* c, bool* blocked) {
  for (size_t ni = 0; ni < nodes_.size(); ++ni) {
    const NodeRt& node = nodes_[ni];
    if (!InPools(j, node.pool) || !NodeHas(node, j.cpu, j.mem)) continue;
    std::vector<Grant> grants = {{static_cast<int>(ni), -1, -1, 0, 0, j.cpu, j.mem}};
    if (TakesHostFromHead(j, self, grants)) {
      *blocked = true;
      continue;
    }
    c->grants = std::move(grants);
    return true;
  }
  return false;
}

void Engine::Reindex(int di) {
  Dev& d = devs_[di];
  if (d.share_key >= 0) shared_by_free_.erase({d.share_key, di});
  d.share_key = -1;
  if (!d.shares.empty() && d.share_weight < d.weight_capacity(d.swap_oc) &&
      d.share_mem < d.share_capacity(d.swap_oc)) {
    d.share_key = d.share_capacity(d.swap_oc) - d.share_mem;
    shared_by_free_.insert({d.share_key, di});
  }
  bool free_slot = false;
  int used_slices = 0, instances = 0;
  MilliGpu used_compute = 0;
  for (const Slot& sl : d.slots) {
    if (!sl.alive) continue;
    free_slot = free_slot || sl.holder < 0;
    used_slices += sl.slices;
    used_compute += sl.compute;
    ++instances;
  }
  d.no_start = 0;
  if (free_slot) {
    free_slot_devs_.insert(di);
  } else {
    free_slot_devs_.erase(di);
  }
  if (d.mig && used_slices < d.model->mig.memory_slices &&
      instances < d.model->mig.max_gpu_instances &&
      used_compute + kWholeGpu / d.model->mig.compute_slices <= kWholeGpu) {
    mig_open_devs_.insert(di);
  } else {
    mig_open_devs_.erase(di);
  }
}

void Engine::ApplyCandidateLayout(const Job& j, const Candidate& c) {
  if (c.enable_mig_dev >= 0) {
    Dev& d = devs_[c.enable_mig_dev];
    d.mig = d.split = true;
    d.engine_split = true;
    Emit(EventKind::kRepartitioned, nullptr,
         DevName(c.enable_mig_dev) + ": MIG enabled on an idle device for " + j.id +
             " (nothing lost)");
  }
  if (c.amd_dev >= 0) {
    Dev& d = devs_[c.amd_dev];
    std::string before = d.amd_pair;
    d.amd_pair = c.amd_switch;
    RebuildAmdSlots(d);
    d.engine_split = d.split;
    Emit(EventKind::kRepartitioned, nullptr,
         DevName(c.amd_dev) + ": compute mode " + before + " -> " + d.amd_pair +
             " on an idle device for " + j.id + " (nothing lost)");
  }
  for (const auto& [di, inst] : c.create) {
    Dev& d = devs_[di];
    const part::MigProfile* p = d.model->mig.FindProfile(inst.profile);
    d.slots.push_back({inst.ToString(), p->name, inst.start, p->memory_mib,
                       p->compute_slices * kWholeGpu / d.model->mig.compute_slices, -1, true,
                       p->memory_slices});
    if (c.enable_mig_dev < 0) {
      Emit(EventKind::kRepartitioned, nullptr,
           DevName(di) + ": created " + inst.ToString() + " on free slices for " + j.id);
    }
    Reindex(di);
  }
  if (c.amd_dev >= 0) Reindex(c.amd_dev);
  if (c.enable_mig_dev >= 0) MirrorSyncSplit(c.enable_mig_dev);
  if (c.amd_dev >= 0) MirrorSyncSplit(c.amd_dev);
  for (const auto& [di, inst] : c.create) MirrorSyncSplit(di);
}

void Engine::TakeGrants(int self, AllocationForm f, const std::vector<Grant>& grants) {
  Job& j = jobs_[self];
  for (const Grant& g : grants) {
    NodeRt& n = nodes_[g.node];
    n.cpu_free -= g.cpu;
    n.mem_free -= g.host_memory;
    if (g.dev < 0) continue;
    Dev& d = devs_[g.dev];
    if (g.slot >= 0) {
      d.slots[g.slot].holder = self;
    } else if (f == AllocationForm::kWhole) {
      d.whole = self;
    } else {
      if (d.shares.empty()) d.swap_oc = jobs_[self].swap_oc;
      d.shares.push_back(self);
      d.share_mem += g.memory;
      d.share_weight += g.compute;
      d.sm_sum += g.sm_percent;
    }
    Reindex(g.dev);
    if (d.reserved_by == self) {
      d.reserved_by = -1;
      d.nominated = false;
    }
  }
  // Whatever else was kept for this job is free again.
  j.paid = false;
  if (j.nominated) {
    for (Dev& d : devs_) {
      if (d.reserved_by == self) d.reserved_by = -1, d.nominated = false;
    }
    j.nominated = false;
  }
}

std::string Engine::PlacedDetail(const Job& j, AllocationForm f, bool backfill) const {
  std::string where;
  for (const Grant& gr : j.grants) {
    if (!where.empty()) where += ", ";
    where += gr.dev < 0 ? nodes_[gr.node].name : DevName(gr.dev);
    if (gr.slot >= 0) where += ":" + devs_[gr.dev].slots[gr.slot].name;
  }
  return std::string(AllocationFormName(f)) + " on " + where +
         (f == AllocationForm::kShare
              ? " (cap " + FormatMiB(j.grants[0].memory) + ", compute weight " +
                    FormatMilli(j.grants[0].compute) + ")"
              : "") +
         (backfill ? " [backfill]" : "");
}

void Engine::Commit(int self, AllocationForm f, Candidate& c, bool guaranteed) {
  Job& j = jobs_[self];
  ApplyCandidateLayout(j, c);
  TakeGrants(self, f, c.grants);
  j.grants = c.grants;
  if (c.mirrored) {
    mirror_held_[self].push_back(*c.mirrored);
  } else {
    MirrorAdopt(self, j.grants);
  }
  j.form = f;
  j.charge = ChargeOf(j, j.grants);
  j.borrowed = !guaranteed;
  ChargeGroups(j, +1);
  ChargeJobCells(j, +1);  // per GPU model and pool
  AddMemberUsage(j, +1);
  j.awaiting = 0;
  Admitted(self, guaranteed);
  Emit(EventKind::kPlaced, &j, PlacedDetail(j, f, c.backfill));
  if (c.backfill) ++stats_.backfilled;
  ResumedFromHold(self);
}

void Engine::Release(int self) {
  Job& j = jobs_[self];
  returnable_dirty_ = true;  // a card it held may now be idle and split
  terminating_.erase(self);
  ForgetRuntime(self);
  MirrorRelease(self);
  for (const Grant& g : j.grants) {
    NodeRt& n = nodes_[g.node];
    n.cpu_free += g.cpu;
    n.mem_free += g.host_memory;
    if (g.dev < 0) continue;
    Dev& d = devs_[g.dev];
    if (g.slot >= 0) {
      if (g.slot < static_cast<int>(d.slots.size()) && d.slots[g.slot].holder == self) {
        d.slots[g.slot].holder = -1;
      }
    } else if (d.whole == self) {
      d.whole = -1;
    } else {
      auto it = std::find(d.shares.begin(), d.shares.end(), self);
      if (it != d.shares.end()) {
        d.shares.erase(it);
        d.share_mem -= g.memory;
        d.share_weight -= g.compute;
        d.sm_sum -= g.sm_percent;
        if (d.shares.empty()) d.swap_oc = 0;
      }
    }
    Reindex(g.dev);
  }
  ChargeGroups(j, -1);
  ChargeJobCells(j, -1);
  for (int g = j.group; g >= 0; g = groups_[g].parent)
    groups_[g].past_limit = groups_[g].past_limit && !WithinLimits(g);
  AddMemberUsage(j, -1);
  if (j.external && !j.ext_pool.empty()) ext_used_[j.ext_pool] -= j.charge.gpu_milli;
  j.grants.clear();
  j.charge = {};
  memo_.clear();  // room appeared: earlier failures may now fit
}

bool Engine::FindInForm(Job& j, int self, AllocationForm f, Candidate* c, bool* blocked) {
  if (j.gpu_count == 0) return FindCpuOnly(j, self, c, blocked);
  if (j.held_dev >= 0 && f != AllocationForm::kShare) return false;  // back where it was held
  if (f == AllocationForm::kWhole) return FindWhole(j, self, c, blocked);
  if (f == AllocationForm::kPartition) return FindPartition(j, self, c, blocked);
  return FindShare(j, self, c, blocked);
}

void Engine::NoRoomReason(const Job& j, bool blocked, std::string* step,
                          std::string* reason) const {
  std::string forms;
  for (AllocationForm f : j.forms)
    forms += (forms.empty() ? "" : "/") + std::string(AllocationFormName(f));
  std::string shape = j.gpu_count == 0
                          ? "cpu " + FormatMilli(j.cpu)
                          : std::to_string(j.gpu_count) + " x " + forms + " (gpu " +
                                FormatMilli(j.gpu_milli) + ", " + FormatMiB(j.gpu_mem) + ")";
  if (blocked) {
    *step = "Backfill";
    *reason = "room exists only on devices kept for a waiting job; " + shape +
              (j.known_run() > 0
                   ? " would not finish before it starts"
                   : " declares no walltime (nor has its queue a max_runtime), so it could delay "
                     "that job");
  } else {
    *step = "Placement";
    *reason = "no room for " + shape + " in pools " + PoolNames(j) +
              (j.gpu_count > max_devs_per_node_ ? " (gang across nodes, all or nothing)" : "");
    if (j.min_isolation > 0 &&
        std::find(j.forms.begin(), j.forms.end(), AllocationForm::kShare) != j.forms.end()) {
      static const char* kGrades[] = {"none", "preload", "mps", "driver", "hardware"};
      *reason += "; its queue wants isolation '" + std::string(kGrades[j.min_isolation]) +
                 "' or better: shares only on devices that give it";
    }
    if (j.sm_percent > 0) {
      *reason += "; compute: sm-sharing " + std::to_string(j.sm_percent) +
                 "%: shares only on devices that offer MPS, beside no time-slicing shares, "
                 "their sm-sharing percentages summing to at most 100";
    }
    // A request no node present could hold even empty says so, with the largest there is: it
    // waits for a larger node to join, not for others to finish.
    const int per_node = j.gpu_count > max_devs_per_node_ ? 1 : std::max(j.gpu_count, 1);
    MilliCpu most_cpu = -1;  // -1: no node takes work
    MiB most_mem = 0;
    for (const NodeRt& n : nodes_) {
      if (n.down || !ServesNode(j, n)) continue;
      most_cpu = std::max(most_cpu, n.cpu_total);
      most_mem = std::max(most_mem, n.mem_total);
    }
    if (most_cpu < 0) {  // not "larger than any node present ... has 0"
      *reason = "no node in pools " + PoolNames(j) +
                " takes new work (none has joined, or each is lost, cordoned or draining)";
    } else if (j.cpu * per_node > most_cpu) {
      *reason = "larger than any node present: needs cpu " + FormatMilli(j.cpu * per_node) +
                " on one node, the largest in pools " + PoolNames(j) + " has " +
                FormatMilli(most_cpu) + " (waits for a larger node to join)";
    } else if (j.mem * per_node > most_mem) {
      *reason = "larger than any node present: needs memory " + FormatMiB(j.mem * per_node) +
                " on one node, the largest in pools " + PoolNames(j) + " has " +
                FormatMiB(most_mem) + " (waits for a larger node to join)";
    } else {
      // Cards may be free where the host CPU or memory is not (a new user saw "no room" beside
      // empty cards, the node's CPU held by shares): said when no node has them free.
      const NodeRt* most = nullptr;
      for (const NodeRt& n : nodes_) {
        if (n.down || !ServesNode(j, n)) continue;
        if (n.cpu_free >= j.cpu * per_node && n.mem_free >= j.mem * per_node) return;
        if (most == nullptr ||
            std::make_pair(n.cpu_free, n.mem_free) > std::make_pair(most->cpu_free, most->mem_free))
          most = &n;
      }
      if (most != nullptr)
        *reason += "; no node in pools " + PoolNames(j) +
                   " has its host CPU and memory free (cpu " + FormatMilli(j.cpu * per_node) +
                   ", " + FormatMiB(j.mem * per_node) + "; the most free: cpu " +
                   FormatMilli(most->cpu_free) + ", " + FormatMiB(most->mem_free) + " on " +
                   most->name + ")";
    }
  }
}

// A job that may not use the cards kept for a head on its node (it ends after the head's start
// and does not come before it) leaves the node the head's CPU and host memory at that start,
// counting what running jobs free by then: a second inference instance on a gang's node once
// took the host memory the gang needed and put it back by 1,020 s. A card nominated for a
// reclaim's claimant is kept strictly, and so is the claimant's CPU and host memory at the end
// of the victims' grace, from every other job: a borrower once took the CPU a reclaim was
// freeing for a share inside its group's reservation, so that each reclaim's victim made room
// only for the next borrower, and the share waited for good.
bool Engine::TakesHostFromHead(const Job& j, int self, const std::vector<Grant>& grants) const {
  for (const Grant& g : grants) {
    const NodeRt& node = nodes_[g.node];
    for (int d : node.devs) {
      const Dev& dev = devs_[d];
      if (dev.reserved_by < 0 || dev.reserved_by == self) continue;
      const Job& head = jobs_[dev.reserved_by];
      int kept = head.gpu_count;  // a head is kept one node's cards
      if (dev.nominated) {
        kept = 0;  // a claimant, what was nominated for it here
        for (int k : node.devs) kept += devs_[k].reserved_by == dev.reserved_by ? 1 : 0;
      } else {
        if (options_.engine_break == EngineOptions::Break::kBackfillIgnoresHead) continue;
        if (Outranks(j, head)) continue;
        if (j.known_run() > 0 && now_ + j.known_run() <= dev.reserved_until) continue;
      }
      MilliCpu cpu = node.cpu_free;
      MiB mem = node.mem_free;
      for (const Grant& mine : grants) {
        if (mine.node == g.node) cpu -= mine.cpu, mem -= mine.host_memory;
      }
      for (int v : Holders(g.node)) {
        if (ExpectedEnd(jobs_[v]) > dev.reserved_until) continue;
        for (const Grant& x : jobs_[v].grants) {
          if (x.node == g.node) cpu += x.cpu, mem += x.host_memory;
        }
      }
      if (cpu < head.cpu * kept || mem < head.mem * kept) return true;
    }
  }
  return false;
}

bool Engine::TryPlaceIn(int self, std::string* step, std::string* reason, bool* backfilled,
                        bool guaranteed_only) {
  Job& j = jobs_[self];
  // Admission on the nominal request first: a job past its limit needs no search.
  Resources nominal{j.gpu_count * j.gpu_milli, j.gpu_count * j.gpu_mem,
                    j.cpu * std::max(j.gpu_count, 1), j.mem * std::max(j.gpu_count, 1)};
  if (std::find(j.forms.begin(), j.forms.end(), AllocationForm::kWhole) != j.forms.end() &&
      j.forms.size() == 1) {
    nominal.gpu_milli = j.gpu_count * kWholeGpu;
  }
  bool guaranteed = false;
  Status adm = Admission(j, nominal, &guaranteed);
  if (!adm.ok()) {
    *step = "Admission";
    *reason = adm.message();
    return false;
  }
  auto key = std::make_tuple(j.profile, j.pools, j.gpu_count, j.gpu_milli, j.gpu_mem, j.cpu, j.mem,
                             j.models,
                             // The queue's share kind: overcommit, min_isolation, compute_percent.
                             (int64_t{j.swap_oc} * 10 + j.min_isolation) * 1000 + j.sm_percent);
  int64_t end = j.known_run() > 0 ? now_ + j.known_run() : kNever;
  bool use_memo = !j.nominated && !j.external && j.held_dev < 0;
  if (use_memo) {
    auto it = memo_.find(key);
    if (it != memo_.end() && end >= it->second.fail_end) {
      *step = it->second.step;
      *reason = it->second.reason;
      return false;
    }
  }
  if (j.external) {
    // Another scheduler places it: admitted here against the same limits, charged its request,
    // within the capacity its scheduler has for us when that is known.
    if (!j.ext_pools.empty() && !ChoosePool(j, nominal.gpu_milli, reason)) {
      *step = "Placement";
      return false;
    }
    if (j.ext_pools.empty() && ext_down_.count(j.ext_pool)) {
      *step = "Placement";
      *reason = j.ext_pool + " is not answering";
      return false;
    }
    auto cap = ext_cap_.find(j.ext_pool);
    if (cap != ext_cap_.end() && nominal.gpu_milli > 0 &&
        ext_used_[j.ext_pool] + nominal.gpu_milli > cap->second) {
      *step = "Placement";
      *reason = j.ext_pool + " has " + FormatMilli(cap->second) + " GPU for this cluster, " +
                FormatMilli(ext_used_[j.ext_pool]) + " held";
      return false;
    }
    *backfilled = false;
    CommitExternal(self, nominal, guaranteed);
    return true;
  }
  bool blocked = false;
  std::string limit_reason;
  bool not_guaranteed = false;  // a guaranteed_only search found room, but borrowing
  for (AllocationForm f : j.forms) {
    Candidate c;
    // Every search passes over a place that would take a head's host (TakesHostFromHead) and
    // goes on to the next: refusing its one pick here once left a free card on another node
    // untried (seeds 1579558, 5062119).
    if (!FindInForm(j, self, f, &c, &blocked)) continue;
    Resources charge = ChargeOf(j, c.grants);
    Status a = Admission(j, charge, &guaranteed);
    const bool by_totals = guaranteed;  // else Admission judged the borrowing already
    if (a.ok()) a = CellAdmission(j, c.grants, &guaranteed);
    if (a.ok() && by_totals && !guaranteed) a = BorrowRoom(j, charge);  // borrows per model/pool
    if (!a.ok()) {
      limit_reason = a.message();
      DropPick(c);
      continue;
    }
    if (guaranteed_only && !guaranteed) {
      not_guaranteed = true;
      DropPick(c);
      continue;
    }
    if (!guaranteed && BorrowsKeptCard(j, c)) {
      blocked = true;
      DropPick(c);
      continue;
    }
    *backfilled = c.backfill;
    Commit(self, f, c, guaranteed);
    return true;
  }
  if (!limit_reason.empty()) {
    *step = "Admission";
    *reason = limit_reason + " (as placed)";
    return false;
  }
  NoRoomReason(j, blocked, step, reason);
  if (j.held_dev >= 0) {
    *step = "SwappedOut";
    *reason = HeldReason(j) + " (" + *reason + ")";
  }
  // A guaranteed_only search that found no room at all is a failure like any other (room only
  // shrinks until a release clears the memo); one that found room only borrowing is not, nor
  // one that passed over cards a claim will reclaim (AvoidForClaim).
  if (use_memo && !not_guaranteed && !avoiding_) {
    auto it = memo_.find(key);
    if (it == memo_.end() || end < it->second.fail_end) memo_[key] = {*step, *reason, end};
  }
  return false;
}

}  // namespace tessera::quota::internal
