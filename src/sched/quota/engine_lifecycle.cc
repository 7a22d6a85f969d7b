// The quota engine as a control plane drives it: nodes that join, leave and return; jobs that are
// cancelled, lost with their node, or whose preempted processes have stopped; held allocations
// re-entered after a restart; device views for agents and people.
#include "sched/quota/engine_impl.h"

namespace tessera::quota::internal {

// Admitted and charged (Commit, CommitExternal): running from now, its runtime stop watched.
void Engine::Admitted(int self, bool guaranteed) {
  Job& j = jobs_[self];
  SetState(self, JobState::kRunning);
  j.start = now_;
  j.paused = 0;
  j.resumed = false;
  WatchRuntime(self);
  j.wait_step.clear();
  j.wait_reason.clear();
  const GroupRt& g = groups_[j.group];
  Emit(EventKind::kAdmitted, &j,
       std::string(guaranteed ? "guaranteed: within reservation" : "borrowed: above reservation") +
           " (" + j.charge.ToString() + "; group holds " + g.usage.ToString() + ")");
  j.admitted_logged = true;
}

namespace {

// The engine's handle of device `index` of node `n` (a NodeByName result), or -1 where either is
// out of range.
int DevOf(const std::vector<NodeRt>& nodes, int n, int index) {
  if (n < 0 || index < 0 || index >= static_cast<int>(nodes[n].devs.size())) return -1;
  return nodes[n].devs[index];
}

}  // namespace

Result<int> Engine::AddNode(const NodeSpec& ns, int64_t now) {
  now_ = std::max(now_, now);
  const std::string field = "node '" + ns.name + "'";
  const int old = NodeByName(ns.name);
  if (old >= 0) {
    NodeRt& n = nodes_[old];
    const NodeSpec& was = n.spec;
    const bool same = was.pool == ns.pool && was.cpu_milli == ns.cpu_milli &&
                      was.memory_mib == ns.memory_mib && was.gpu_model == ns.gpu_model &&
                      was.gpu_count == ns.gpu_count && was.gpu_memory_mib == ns.gpu_memory_mib;
    if (same) {
      n.down = false;
      memo_.clear();
      return old;
    }
    for (const Job& j : jobs_) {
      for (const Grant& g : j.grants) {
        if (g.node == old) {
          return Status::FailedPrecondition(field + " changed its inventory while job " + j.id +
                                            " holds part of it");
        }
      }
    }
  }
  // A changed inventory retires the old node (its indices stay, it takes no work) and adds the
  // new one; its capacity leaves the totals. Refused, nothing changes.
  const bool was_down = old >= 0 && nodes_[old].down;
  const MiB gpu_memory_was = gpu_memory_capacity_;
  const MilliGpu gpu_was = gpu_capacity_;
  const MilliCpu cpu_was = cpu_capacity_;
  const MiB host_memory_was = host_memory_capacity_;
  if (old >= 0) {
    NodeRt& n = nodes_[old];
    n.down = true;
    for (int d : n.devs) gpu_memory_capacity_ -= devs_[d].memory;
    gpu_capacity_ -= static_cast<MilliGpu>(n.devs.size()) * kWholeGpu;
    cpu_capacity_ -= n.cpu_total;
    host_memory_capacity_ -= n.mem_total;
  }
  Status s = AddNodeRt(ns, field);
  if (!s.ok()) {
    if (old >= 0) {
      node_index_[ns.name] = old;
      nodes_[old].down = was_down;
      gpu_memory_capacity_ = gpu_memory_was;
      gpu_capacity_ = gpu_was;
      cpu_capacity_ = cpu_was;
      host_memory_capacity_ = host_memory_was;
    }
    return s;
  }
  feasible_cache_.clear();
  memo_.clear();
  return NodeByName(ns.name);
}

void Engine::SetNodeDown(const std::string& name, bool down) {
  const int n = NodeByName(name);
  if (n < 0) return;
  nodes_[n].down = down;
  memo_.clear();
}

template <typename T>
void Engine::SetDev(const std::string& name, int index, T Dev::*field, T value) {
  const int d = DevOf(nodes_, NodeByName(name), index);
  if (d < 0) return;
  devs_[d].*field = value;
  memo_.clear();
}

void Engine::SetDeviceClosed(const std::string& name, int index, bool closed) {
  SetDev(name, index, &Dev::closed, closed);
}

void Engine::SetDeviceIsolation(const std::string& name, int index, int rank) {
  SetDev(name, index, &Dev::isolation, rank);
}

void Engine::SetDeviceMps(const std::string& name, int index, bool mps) {
  SetDev(name, index, &Dev::mps, mps);
}

void Engine::SetExternalCapacity(const std::string& pool, int64_t gpu_milli) {
  if (gpu_milli < 0) {
    ext_cap_.erase(pool);
  } else {
    ext_cap_[pool] = gpu_milli;
  }
}

void Engine::EndHeld(int self) {
  Job& j = jobs_[self];
  const int claimant = j.claimant;
  Release(self);
  if (claimant >= 0 && jobs_[claimant].awaiting > 0) --jobs_[claimant].awaiting;
  j.claimant = -1;
  j.start = -1;
  if (active_plans_ > 0) ApplyReadyPlans();
}

void Engine::Cancel(int handle, int64_t now, const std::string& why) {
  now_ = std::max(now_, now);
  Job& j = jobs_[handle];
  if (j.state == JobState::kDone || j.state == JobState::kRejected) return;
  if (j.state != JobState::kPending) EndHeld(handle);
  DropHold(handle);
  if (j.nominated) {
    for (Dev& d : devs_) {
      if (d.reserved_by == handle) d.reserved_by = -1, d.nominated = false;
    }
    j.nominated = j.paid = false;
  }
  SetState(handle, JobState::kDone);
  j.wait_step.clear();
  j.wait_reason.clear();
  Emit(EventKind::kCompleted, &j, why);
  StepCheck("cancel");
}

void Engine::Requeue(int handle, int64_t now, const std::string& why) {
  now_ = std::max(now_, now);
  Job& j = jobs_[handle];
  if (j.state != JobState::kRunning && j.state != JobState::kTerminating) return;
  EndHeld(handle);
  SetState(handle, JobState::kPending);
  j.stop_final = false;
  j.idle_requeue = false;
  j.waiting_since = now_;
  j.wait_step = "Requeued";
  j.wait_reason = why;
  pending_.push_back(handle);
  Emit(EventKind::kRequeued, &j, why);
  StepCheck("requeue");
}

void Engine::Evict(int handle, int64_t now, const std::string& why) {
  now_ = std::max(now_, now);
  if (handle < 0 || handle >= static_cast<int>(jobs_.size())) return;
  Job& j = jobs_[handle];
  if (j.state == JobState::kPending && j.held_dev >= 0) {
    // Held swapped out on a card that will not take it back (a drain): a plain pending job
    // again. Left held, it waited there until its hold limit stopped it, other cards free.
    const std::string where = DevName(j.held_dev);
    DropHold(handle);
    j.wait_step = "Requeued";
    j.wait_reason = why + "; it was held swapped out on " + where +
                    ": it runs again from its start where there is room";
    Emit(EventKind::kRequeued, &j, j.wait_reason);
    StepCheck("evict");
    return;
  }
  if (j.state != JobState::kRunning || j.external) return;
  Preempt(handle, -1, why);
  StepCheck("evict");
}

void Engine::Stopped(int handle, int64_t now) {
  now_ = std::max(now_, now);
  if (jobs_[handle].state != JobState::kTerminating) return;
  FinishTermination(handle);  // layouts waiting for it apply at the next cycle, as with a grace end
  StepCheck("stop");
}

void Engine::CommitExternal(int self, const Resources& charge, bool guaranteed) {
  Job& j = jobs_[self];
  j.grants.clear();
  j.form = j.forms.empty() ? AllocationForm::kWhole : j.forms.front();
  j.charge = charge;
  j.borrowed = !guaranteed;
  ChargeGroups(j, +1);
  AddMemberUsage(j, +1);
  if (!j.ext_pool.empty()) ext_used_[j.ext_pool] += j.charge.gpu_milli;
  Admitted(self, guaranteed);
  Emit(EventKind::kPlaced, &j,
       std::string(AllocationFormName(j.form)) + " by queue " + policy_.queues[j.queue].name +
           "'s external scheduler");
}

namespace {

// A slot's name: a MIG instance ("1g.10gb@3", part::Instance::Parse) or an AMD partition
// ("CPX#2": the partition's compute mode and index).
bool ParseSlot(const std::string& name, std::string* profile, int* start, bool* amd) {
  std::string text = name;
  *amd = text.find('@') == std::string::npos;
  if (*amd) {  // "CPX#2" has the shape of "1g.10gb@3"
    const size_t hash = text.rfind('#');
    if (hash == std::string::npos) return false;
    text[hash] = '@';
  }
  auto in = part::Instance::Parse(text);
  if (!in.ok()) return false;
  *profile = in->profile;
  *start = in->start;
  return true;
}

}  // namespace

Status Engine::RestoreSlot(const GrantView& g, const std::string& where, Grant* gr, Candidate* c,
                           std::map<int, part::Layout>* layouts) const {
  const Dev& d = devs_[gr->dev];
  std::string profile;
  int start = 0;
  bool amd = false;
  if (!ParseSlot(g.slot, &profile, &start, &amd)) {
    return Status::InvalidArgument(where + ": '" + g.slot + "' is not a partition name");
  }
  for (size_t s = 0; s < d.slots.size(); ++s) {
    if (d.slots[s].alive && d.slots[s].name == g.slot) gr->slot = static_cast<int>(s);
  }
  if (gr->slot >= 0 && d.slots[gr->slot].holder >= 0) {
    return Status::FailedPrecondition(where + ": " + g.slot + " is held by another job");
  }
  if (gr->slot >= 0) return Status::Ok();
  if (amd || !d.mig_capable()) {
    return Status::FailedPrecondition(where + ": no partition " + g.slot + " in its layout");
  }
  if (!d.shares.empty()) return Status::FailedPrecondition(where + " carries shares");
  auto [lit, first] = layouts->try_emplace(gr->dev);
  part::Layout& layout = lit->second;
  if (first) {
    for (const Slot& s : d.slots) {
      if (s.alive) layout.instances.push_back({s.profile, s.start});
    }
  }
  part::Instance in{profile, start};
  Status ok = part::CheckCreate(*d.model, layout, in);
  if (!ok.ok()) return Status::FailedPrecondition(where + ": " + ok.message());
  layout.instances.push_back(in);
  if (!d.mig) c->enable_mig_dev = gr->dev;
  c->create.push_back({gr->dev, in});
  // The slot index it will have once created.
  gr->slot = static_cast<int>(d.slots.size()) +
             static_cast<int>(std::count_if(c->create.begin(), c->create.end() - 1,
                                            [&](const auto& x) { return x.first == gr->dev; }));
  return Status::Ok();
}

Status Engine::RestoreGrant(const Job& j, const GrantView& g, AllocationForm form, Candidate* c,
                            std::map<int, MiB>* share_add,
                            std::map<int, part::Layout>* layouts) const {
  const std::string where = "job " + j.id + ": " + g.node + "/gpu" + std::to_string(g.device);
  const int ni = NodeByName(g.node);
  if (ni < 0) return Status::NotFound("job " + j.id + ": node '" + g.node + "' is not known");
  const NodeRt& n = nodes_[ni];
  Grant gr{ni, -1, -1, g.memory, g.compute, g.cpu, g.host_memory, g.sm_percent};
  if (g.device >= 0) {
    if (g.device >= static_cast<int>(n.devs.size()))
      return Status::NotFound(where + " does not exist");
    gr.dev = n.devs[g.device];
    const Dev& d = devs_[gr.dev];
    if (d.whole >= 0) return Status::FailedPrecondition(where + " is held whole by another job");
    if (!g.slot.empty()) {
      if (Status st = RestoreSlot(g, where, &gr, c, layouts); !st.ok()) return st;
    } else if (form == AllocationForm::kWhole) {
      if (!d.shares.empty() || (d.split && !d.idle())) {
        return Status::FailedPrecondition(where + " is not free for a whole device");
      }
    } else {
      if (d.split) return Status::FailedPrecondition(where + " is split into partitions");
      (*share_add)[gr.dev] += g.memory;
      const int oc = j.swap_oc;
      if (!d.ShareKindFits(oc) || d.share_mem + (*share_add)[gr.dev] > d.share_capacity(oc)) {
        return Status::FailedPrecondition(where + ": share caps would exceed its memory");
      }
    }
  }
  c->grants.push_back(gr);
  return Status::Ok();
}

Status Engine::Restore(int handle, AllocationForm form, const std::vector<GrantView>& grants,
                       bool borrowed, bool terminating, int64_t now) {
  now_ = std::max(now_, now);
  Job& j = jobs_[handle];
  if (j.state != JobState::kPending)
    return Status::FailedPrecondition("job " + j.id + " is not pending");
  Candidate c;
  std::map<int, MiB> share_add;  // device -> share memory added by this restore
  std::map<int, part::Layout> layouts;
  for (const GrantView& g : grants) {
    if (Status st = RestoreGrant(j, g, form, &c, &share_add, &layouts); !st.ok()) return st;
  }
  std::map<int, std::pair<MilliCpu, MiB>> host;
  for (const Grant& g : c.grants) {
    host[g.node].first += g.cpu;
    host[g.node].second += g.host_memory;
  }
  for (const auto& [ni, need] : host) {
    if (nodes_[ni].cpu_free < need.first || nodes_[ni].mem_free < need.second) {
      return Status::FailedPrecondition("job " + j.id + ": node " + nodes_[ni].name +
                                        " lacks the CPU or memory it held");
    }
  }
  if (j.external) {
    Resources nominal{j.gpu_count * j.gpu_milli, j.gpu_count * j.gpu_mem,
                      j.cpu * std::max(j.gpu_count, 1), j.mem * std::max(j.gpu_count, 1)};
    CommitExternal(handle, nominal, !borrowed);
  } else {
    for (const Grant& g : c.grants) {
      if (g.dev >= 0 && form == AllocationForm::kWhole && g.slot < 0 && devs_[g.dev].split) {
        devs_[g.dev].mig = devs_[g.dev].split = false;  // an idle MIG device held whole
        devs_[g.dev].slots.clear();
        MirrorSyncSplit(g.dev);
      }
    }
    Commit(handle, form, c, !borrowed);
  }
  // A limit lowered since it was admitted (a config edited across a restart): what it holds is
  // kept, and its groups past a limit take nothing new until they are back within it (the
  // control plane refused to start: "group research over its gpu limit").
  for (int g = j.group; g >= 0; g = groups_[g].parent)
    groups_[g].past_limit = groups_[g].past_limit || !WithinLimits(g);
  if (terminating) {
    ForgetRuntime(handle);
    SetState(handle, JobState::kTerminating);
    terminating_.insert(handle);
    j.grace_end = now_ + policy_.grace_seconds;
    j.claimant = -1;
  }
  StepCheck("restore");
  return Status::Ok();
}

DeviceView Engine::device(const std::string& node, int index) const {
  DeviceView v;
  v.node = node;
  v.index = index;
  const int di = DevOf(nodes_, NodeByName(node), index);
  if (di < 0) return v;
  const Dev& d = devs_[di];
  v.mig = d.mig;
  v.amd_pair = d.amd_pair;
  for (const Slot& s : d.slots) {
    if (!s.alive) continue;
    v.slots.push_back({s.name, s.profile, s.start, s.holder >= 0 ? jobs_[s.holder].id : ""});
  }
  v.draining = d.plan.active;
  v.plan = d.plan.why;
  if (d.plan.active && d.plan.for_job >= 0) v.plan_for = jobs_[d.plan.for_job].id;
  return v;
}

std::vector<QuotaEngine::Drain> Engine::Drains() const {
  std::vector<Drain> out;
  for (const Dev& d : devs_) {
    if (!d.plan.active) continue;
    Drain x;
    x.node = nodes_[d.node].name;
    x.device = d.index;
    x.job = d.plan.for_job >= 0 ? jobs_[d.plan.for_job].id : "";
    for (const auto& in : d.plan.evict) x.evict.push_back(in.ToString());
    for (const auto& in : d.plan.add) x.add.push_back(in.ToString());
    x.enable_mig = d.plan.enable_mig;
    x.amd_pair = d.plan.amd_pair;
    x.node_wide = d.plan.node_wide;
    x.why = d.plan.why;
    out.push_back(std::move(x));
  }
  return out;
}

Status Engine::RestoreDrain(const Drain& x, int64_t now) {
  now_ = std::max(now_, now);
  const int ni = NodeByName(x.node);
  if (ni < 0 || x.device < 0 || x.device >= static_cast<int>(nodes_[ni].devs.size())) {
    return Status::NotFound("drain of " + x.node + "/gpu" + std::to_string(x.device) +
                            ": no such device");
  }
  const int di = nodes_[ni].devs[x.device];
  Dev& d = devs_[di];
  Plan p;
  p.active = true;
  for (const auto* names : {&x.evict, &x.add}) {
    for (const std::string& s : *names) {
      std::string profile;
      int start = 0;
      bool amd = false;
      if (!ParseSlot(s, &profile, &start, &amd) || amd) {
        return Status::InvalidArgument("drain of " + DevName(di) + ": '" + s +
                                       "' is not a MIG instance");
      }
      (names == &x.evict ? p.evict : p.add).push_back({profile, start});
    }
  }
  p.enable_mig = x.enable_mig;
  p.amd_pair = x.amd_pair;
  p.node_wide = x.node_wide;
  p.why = x.why;
  for (size_t h = 0; h < jobs_.size(); ++h) {
    if (jobs_[h].id == x.job && jobs_[h].state == JobState::kPending)
      p.for_job = static_cast<int>(h);
  }
  d.plan = p;
  ++active_plans_;
  if (p.for_job >= 0 && (!p.node_wide || !p.amd_pair.empty())) {
    Nominate(di, p.for_job, now_ + policy_.grace_seconds);
    // Whether others were preempted for it is not recorded: it goes first (Order), as a drain's
    // job most often paid for it.
    jobs_[p.for_job].paid = true;
  }
  memo_.clear();
  return Status::Ok();
}

}  // namespace tessera::quota::internal
