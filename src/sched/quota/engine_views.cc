// The quota engine: invariants (CheckInvariants) and the views of jobs, devices and events.
#include "common/enum_names.h"
#include "sched/quota/engine_impl.h"

namespace tessera::quota::internal {

// ------------------------------------------------------------------------------------------
// Invariants and views

// What the jobs' grants add up to, to compare with the engine's running totals.
struct Engine::InvariantTally {
  std::vector<MilliCpu> cpu;
  std::vector<MiB> mem;
  std::vector<Resources> usage;
  std::vector<MiB> share_mem;
  std::vector<MilliGpu> share_w;
  // Per quota dimension (GPU model, pool), per group, per cell: what its grants add up to.
  std::array<std::vector<std::array<int64_t, 64>>, kDims> cell_usage;
  std::vector<int> sm_sum;            // sm-sharing percentages per device
  std::vector<int> ts_shares;         // time-slicing shares per device
  std::vector<MilliGpu> preemptible;  // per group, with descendants (GroupRt's)
};

Status Engine::CheckJobHoldings(InvariantTally* t) const {
  for (size_t h = 0; h < jobs_.size(); ++h) {
    const Job& j = jobs_[h];
    if ((j.state == JobState::kRunning && j.preemptible) !=
        preemptible_running_.contains(static_cast<int>(h)))
      return Status::Internal("job " + j.id + " is " + JobStateName(j.state) +
                              " but the index of preemptible running jobs says otherwise");
    bool holds = j.state == JobState::kRunning || j.state == JobState::kTerminating;
    if (!holds) {
      if (!j.grants.empty())
        return Status::Internal("job " + j.id + " holds grants while " + JobStateName(j.state));
      continue;
    }
    if (!j.admitted_logged)
      return Status::Internal("job " + j.id + " runs without an admission event");
    if (j.identity.empty()) return Status::Internal("job " + j.id + " has no identity");
    for (int g = j.group; g >= 0; g = groups_[g].parent) t->usage[g] += j.charge;
    for (int g = j.group; g >= 0 && j.preemptible; g = groups_[g].parent)
      t->preemptible[g] += j.charge.gpu_milli;
    for (int g = j.group; g >= 0; g = groups_[g].parent) {
      for (const Grant& gr : j.grants) {
        for (int d = 0; d < kDims && gr.dev >= 0; ++d)
          t->cell_usage[d][g][CellOf(d, gr.dev)] += gr.compute;
      }
    }
    for (const Grant& gr : j.grants) {
      t->cpu[gr.node] += gr.cpu;
      t->mem[gr.node] += gr.host_memory;
      if (gr.dev < 0) continue;
      const Dev& d = devs_[gr.dev];
      if (gr.slot >= 0) {
        if (gr.slot >= static_cast<int>(d.slots.size()) ||
            d.slots[gr.slot].holder != static_cast<int>(h)) {
          return Status::Internal("job " + j.id + " holds a partition of " + DevName(gr.dev) +
                                  " that does not record it");
        }
        if (gr.memory > d.slots[gr.slot].memory) {
          return Status::Internal("job " + j.id + " holds more memory than its partition");
        }
      } else if (j.form == AllocationForm::kWhole) {
        if (d.whole != static_cast<int>(h)) {
          return Status::Internal("job " + j.id + " holds " + DevName(gr.dev) + " not recorded");
        }
      } else {
        t->share_mem[gr.dev] += gr.memory;
        t->share_w[gr.dev] += gr.compute;
        t->sm_sum[gr.dev] += gr.sm_percent;
        t->ts_shares[gr.dev] += gr.sm_percent == 0 ? 1 : 0;
      }
    }
  }
  return Status::Ok();
}

Status Engine::CheckNodeTotals(const InvariantTally& t) const {
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const NodeRt& node = nodes_[n];
    if (t.cpu[n] > node.cpu_total || t.mem[n] > node.mem_total) {
      return Status::Internal("node " + node.name + " over CPU or memory capacity");
    }
    if (node.cpu_free != node.cpu_total - t.cpu[n] || node.mem_free != node.mem_total - t.mem[n]) {
      return Status::Internal("node " + node.name + " free CPU/memory out of step with jobs");
    }
  }
  return Status::Ok();
}

Status Engine::CheckDevices(const InvariantTally& t) const {
  for (size_t di = 0; di < devs_.size(); ++di) {
    const Dev& d = devs_[di];
    if (d.whole >= 0 && (!d.shares.empty() || d.split)) {
      return Status::Internal(DevName(static_cast<int>(di)) +
                              " is whole-held and also shared or split");
    }
    if (d.split && !d.shares.empty()) {
      return Status::Internal(DevName(static_cast<int>(di)) +
                              " is split and carries device shares");
    }
    if (t.share_mem[di] != d.share_mem || t.share_mem[di] > d.share_capacity(d.swap_oc)) {
      return Status::Internal(DevName(static_cast<int>(di)) + ": share caps " +
                              FormatMiB(t.share_mem[di]) + " exceed or disagree with memory " +
                              FormatMiB(d.memory));
    }
    if (t.share_w[di] != d.share_weight || t.share_w[di] > d.weight_capacity(d.swap_oc)) {
      return Status::Internal(DevName(static_cast<int>(di)) + ": share weights over one device");
    }
    if (t.sm_sum[di] != d.sm_sum || t.sm_sum[di] > 100 ||
        (t.sm_sum[di] > 0 && t.ts_shares[di] > 0)) {
      return Status::Internal(DevName(static_cast<int>(di)) + ": sm-sharing percentages " +
                              std::to_string(t.sm_sum[di]) + " over 100, disagreeing, or beside " +
                              std::to_string(t.ts_shares[di]) + " time-slicing shares");
    }
    if (d.mig) {
      part::Layout layout;
      for (const Slot& s : d.slots) {
        if (!s.alive) continue;
        part::Instance in{s.profile, s.start};
        Status c = part::CheckCreate(*d.model, layout, in);
        if (!c.ok())
          return Status::Internal(DevName(static_cast<int>(di)) +
                                  ": illegal layout: " + c.message());
        layout.instances.push_back(in);
      }
    }
    MiB slot_mem = 0;
    for (const Slot& s : d.slots) slot_mem += s.alive ? s.memory : 0;
    if (slot_mem > d.memory) {
      return Status::Internal(DevName(static_cast<int>(di)) + ": partitions exceed device memory");
    }
  }
  return Status::Ok();
}

bool Engine::WithinLimits(int g) const {
  const GroupRt& gr = groups_[g];
  const char* which = nullptr;
  if (!Within(Resources{}, gr.usage, gr.spec.limit, &which)) return false;
  for (const DimQuota& dq : gr.dims) {
    for (const CellQuota& q : dq.quotas) {
      if (dq.Held(q.cells) > q.limit) return false;
    }
  }
  return true;
}

Status Engine::CheckGroupUsage(const InvariantTally& t) const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    const GroupRt& gr = groups_[g];
    if (!(t.usage[g] == gr.usage) || t.preemptible[g] != gr.preemptible) {
      return Status::Internal("group " + gr.spec.name + " usage out of step with its jobs");
    }
    const char* which = nullptr;
    if (!gr.past_limit && !Within(Resources{}, gr.usage, gr.spec.limit, &which)) {
      return Status::Internal("group " + gr.spec.name + " over its " + which + " limit: holds " +
                              gr.usage.ToString());
    }
    for (int d = 0; d < kDims; ++d) {
      const DimQuota& dq = gr.dims[d];
      for (int c = 0; c < CellCount(d); ++c) {
        if (t.cell_usage[d][g][c] != dq.usage[c]) {
          return Status::Internal(
              "group " + gr.spec.name + " usage of " +
              QuotaName(d, d == kModelDim ? model_names_[c] : policy_.pools[c].name) +
              " out of step with its jobs");
        }
      }
      for (const CellQuota& q : dq.quotas) {
        if (!gr.past_limit && dq.Held(q.cells) > q.limit) {
          return Status::Internal("group " + gr.spec.name + " over its " + QuotaName(d, q.name) +
                                  " limit: holds " + FormatMilli(dq.Held(q.cells)) + " GPU");
        }
      }
    }
  }
  return Status::Ok();
}

Status Engine::CheckInvariants() const {
  InvariantTally t;
  t.cpu.assign(nodes_.size(), 0);
  t.mem.assign(nodes_.size(), 0);
  t.usage.resize(groups_.size());
  t.preemptible.assign(groups_.size(), 0);
  for (auto& u : t.cell_usage) u.assign(groups_.size(), {});
  t.share_mem.assign(devs_.size(), 0);
  t.share_w.assign(devs_.size(), 0);
  t.sm_sum.assign(devs_.size(), 0);
  t.ts_shares.assign(devs_.size(), 0);
  // One call per part, not per job or device: this runs after every step of a simulation.
  if (Status s = CheckJobHoldings(&t); !s.ok()) return s;
  if (Status s = CheckNodeTotals(t); !s.ok()) return s;
  if (Status s = CheckDevices(t); !s.ok()) return s;
  return CheckGroupUsage(t);
}

void Engine::StepCheck(const char* where) {
  if (!options_.check_invariants_each_step) return;
  Status s = CheckInvariants();
  if (!s.ok()) violations_.push_back(T(now_) + " after " + where + ": " + s.message());
}

JobView Engine::job(int handle) const {
  const Job& j = jobs_[handle];
  JobView v;
  v.id = j.id;
  v.identity = j.identity;
  v.group = groups_[j.group].spec.name;
  v.queue = policy_.queues[j.queue].name;
  v.cls = j.cls;
  v.state = j.state;
  if (j.state == JobState::kRunning || j.state == JobState::kTerminating) v.form = j.form;
  v.borrowed = j.borrowed;
  v.charge = j.charge;
  HeldOf(handle, &v.grants, nullptr, nullptr);
  v.submit_time = j.submit;
  v.start_time = j.start;
  v.preemptions = j.preemptions;
  if (j.state == JobState::kRunning && j.stop_key >= 0) v.stop_at = j.stop_key;
  if (j.state == JobState::kRunning) {
    v.idle_since = j.idle_since;
    v.swapped_out = j.idle_swapped;
    if (j.idle_since >= 0 && j.idle_timeout > 0 && !j.idle_swapped) {
      v.idle_action_at = j.idle_since + j.idle_timeout;
      v.idle_action = IdleSwaps(j) ? "swap" : j.idle_stop ? "stop" : "requeue";
    }
  }
  if (j.held_dev >= 0) {
    v.held_swapped_since = j.held_since;
    v.held_start = j.held_start;
    v.held_paused = j.held_paused;
    v.held_on = DevName(j.held_dev);
    if (j.hold_limit > 0) v.hold_stop_at = j.held_since + j.hold_limit;
  }
  v.wait_step = j.wait_step;
  v.wait_reason = j.wait_reason;
  v.ext_pool = j.ext_pool;
  v.dispatch = j.dispatch;
  return v;
}

void Engine::HeldOf(int handle, std::vector<GrantView>* grants, std::optional<AllocationForm>* form,
                    bool* borrowed) const {
  const Job& j = jobs_[handle];
  grants->clear();
  grants->reserve(j.grants.size());  // one allocation where a whole 8-card job would take four
  for (const Grant& g : j.grants) {
    GrantView gv;
    gv.node = nodes_[g.node].name;
    gv.device = g.dev < 0 ? -1 : devs_[g.dev].index;
    if (g.slot >= 0) gv.slot = devs_[g.dev].slots[g.slot].name;
    gv.compute = g.compute;
    gv.memory = g.memory;
    gv.cpu = g.cpu;
    gv.host_memory = g.host_memory;
    gv.sm_percent = g.sm_percent;
    grants->push_back(std::move(gv));
  }
  const bool held = j.state == JobState::kRunning || j.state == JobState::kTerminating;
  if (form != nullptr) *form = held ? std::optional<AllocationForm>(j.form) : std::nullopt;
  if (borrowed != nullptr) *borrowed = j.borrowed;
}

void Engine::ClearEvents() {
  events_.clear();
  if (events_.capacity() > 65536) events_.shrink_to_fit();  // after a large cycle
}

std::vector<GroupView> Engine::groups() const {
  std::vector<GroupView> out;
  for (const GroupRt& g : groups_) {
    GroupView v{g.spec.name, g.usage, g.spec.reservation, g.spec.limit, g.fair_share, {}};
    // Each quota (a model or family) as named, then each model held on without its own quota.
    const DimQuota& md = g.dims[kModelDim];
    for (const CellQuota& q : md.quotas) {
      const std::string name = q.family ? q.name : model_names_[__builtin_ctzll(q.cells)];
      v.models.push_back({name, md.Held(q.cells), q.res, q.limit});
    }
    for (size_t m = 0; m < model_names_.size(); ++m) {
      const bool named = std::any_of(md.quotas.begin(), md.quotas.end(), [&](const CellQuota& q) {
        return !q.family && q.cells == uint64_t{1} << m;
      });
      if (md.usage[m] != 0 && !named)
        v.models.push_back({model_names_[m], md.usage[m], 0, kUnlimited});
    }
    const DimQuota& pd = g.dims[kPoolDim];
    for (size_t p = 0; p < policy_.pools.size(); ++p) {
      auto q = std::find_if(pd.quotas.begin(), pd.quotas.end(),
                            [&](const CellQuota& x) { return x.cells == uint64_t{1} << p; });
      if (pd.usage[p] == 0 && q == pd.quotas.end()) continue;
      v.pools.push_back({policy_.pools[p].name, pd.usage[p], q == pd.quotas.end() ? 0 : q->res,
                         q == pd.quotas.end() ? kUnlimited : q->limit});
    }
    out.push_back(std::move(v));
  }
  return out;
}

Resources Engine::allocated() const {
  Resources r;
  for (const Dev& d : devs_) {
    if (d.whole >= 0) {
      r.gpu_milli += kWholeGpu;
      r.gpu_memory_mib += d.memory;
    }
    // Overcommitted shares (swapping) hold at most the device itself.
    r.gpu_milli += std::min<MilliGpu>(d.share_weight, kWholeGpu);
    r.gpu_memory_mib += std::min<MiB>(d.share_mem, d.memory);
    for (const Slot& s : d.slots) {
      if (s.holder >= 0) r.gpu_milli += s.compute, r.gpu_memory_mib += s.memory;
    }
  }
  for (const NodeRt& n : nodes_) {
    r.cpu_milli += n.cpu_total - n.cpu_free;
    r.memory_mib += n.mem_total - n.mem_free;
  }
  return r;
}

std::vector<int> Engine::devices_used_by_class() const {
  std::vector<int> out(kClassCount, 0);
  for (const Dev& d : devs_) {
    bool seen[kClassCount] = {false, false, false, false, false};
    if (d.whole >= 0) seen[static_cast<int>(jobs_[d.whole].cls)] = true;
    for (int s : d.shares) seen[static_cast<int>(jobs_[s].cls)] = true;
    for (const Slot& s : d.slots) {
      if (s.holder >= 0) seen[static_cast<int>(jobs_[s.holder].cls)] = true;
    }
    for (int c = 0; c < kClassCount; ++c) out[c] += seen[c] ? 1 : 0;
  }
  return out;
}

std::string Engine::device_layout(int node, int device) const {
  const Dev& d = devs_[nodes_[node].devs[device]];
  if (d.amd_capable()) return d.amd_pair;
  if (!d.mig) return "";
  std::vector<const Slot*> s;
  for (const Slot& x : d.slots) {
    if (x.alive) s.push_back(&x);
  }
  std::sort(s.begin(), s.end(), [](const Slot* a, const Slot* b) { return a->start < b->start; });
  std::string out;
  for (const Slot* x : s) out += (out.empty() ? "" : ", ") + x->name;
  return out.empty() ? "(MIG, no instances)" : out;
}

}  // namespace tessera::quota::internal

namespace tessera::quota {
using internal::Engine;

Result<std::unique_ptr<QuotaEngine>> QuotaEngine::Create(const PolicySpec& policy,
                                                         const std::vector<NodeSpec>& nodes,
                                                         EngineOptions options) {
  auto e = std::make_unique<Engine>();
  Status s = e->Init(policy, nodes, options);
  if (!s.ok()) return s;
  return std::unique_ptr<QuotaEngine>(std::move(e));
}

namespace {
constexpr auto kJobStateNames =
    NamesUpTo<JobState::kRejected>("pending", "running", "terminating", "done", "rejected");
constexpr auto kEventKindNames = NamesUpTo<EventKind::kSwappedIn>(
    "submitted", "rejected", "admitted", "placed", "preempted", "requeued", "repartitioned",
    "completed", "stopped", "swapped_out", "swapped_in");
}  // namespace

const char* JobStateName(JobState s) { return kJobStateNames.Of(s, "unknown"); }

const char* EventKindName(EventKind k) { return kEventKindNames.Of(k, "unknown"); }

}  // namespace tessera::quota
