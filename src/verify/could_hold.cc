#include "verify/could_hold.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "partition/amd.h"
#include "partition/mig.h"

namespace tessera::verify {

namespace part = partition;

World World::Make(const quota::PolicySpec& policy, const std::vector<quota::NodeSpec>& nodes) {
  World w;
  w.policy = policy;
  for (const quota::GroupSpec& g : policy.groups) w.group_names.push_back(g.name);
  for (const quota::GroupSpec& g : policy.groups) {
    w.parent.push_back(g.parent.empty() ? -1 : w.GroupIndex(g.parent));
  }
  for (const quota::NodeSpec& n : nodes) {
    NodeInfo ni{n.name, n.pool, n.cpu_milli, n.memory_mib, {}};
    const part::GpuModel* m = part::Catalog::BuiltIn().Find(n.gpu_model);
    ni.model = m != nullptr ? m->name : n.gpu_model;
    const bool amd_split =
        m != nullptr && m->is_amd() && !n.amd_mode.empty() && n.amd_mode != "SPX+NPS1";
    for (int d = 0; d < n.gpu_count; ++d) {
      DeviceInfo di;
      di.node = static_cast<int>(w.nodes.size());
      di.index = d;
      di.model = m;
      di.memory = m != nullptr ? m->memory_mib : n.gpu_memory_mib;
      di.registered_split = !n.mig_layout.empty() || amd_split;
      di.name = n.name + "/" + std::to_string(d);
      ni.devices.push_back(static_cast<int>(w.devices.size()));
      w.devices.push_back(di);
    }
    w.nodes.push_back(std::move(ni));
  }
  return w;
}

int World::GroupIndex(const std::string& name) const {
  for (size_t g = 0; g < group_names.size(); ++g) {
    if (group_names[g] == name) return static_cast<int>(g);
  }
  return -1;
}

bool World::PoolAllows(const std::string& pool, AllocationForm f) const {
  for (const quota::PoolSpec& p : policy.pools) {
    if (p.name != pool) continue;
    return p.forms.empty() || std::find(p.forms.begin(), p.forms.end(), f) != p.forms.end();
  }
  return policy.pools.empty();
}

Want World::Resolve(const quota::JobSpec& spec) const {
  Want w;
  w.id = spec.id;
  w.identity = spec.identity;
  w.walltime = spec.walltime_s;
  const quota::QueueSpec* q = nullptr;
  for (const quota::QueueSpec& x : policy.queues) {
    if (x.name == spec.queue) q = &x;
  }
  if (q == nullptr) return w;
  const quota::ProfileSpec* p = nullptr;
  for (const quota::ProfileSpec& x : policy.profiles) {
    if (x.name == q->profile) p = &x;
  }
  if (p == nullptr) return w;
  w.group = GroupIndex(spec.group.empty() && !q->groups.empty() ? q->groups.front() : spec.group);
  w.priority = q->priority;
  w.preemptible = q->preemptible;
  w.external = q->external;
  w.idle_timeout = q->idle_timeout_s;
  w.idle_stop = q->idle_action == quota::QueueSpec::IdleAction::kStop;
  w.max_runtime = q->external ? 0 : q->max_runtime_s;
  w.min_runtime = q->min_runtime_s;
  w.preemption_delay = q->preemption_delay_s;
  auto forms = quota::FormsFor(policy, *p, spec.cls.value_or(q->default_class), spec.form);
  if (!forms.ok()) return w;
  w.forms = *forms;
  w.pools = p->pools;
  w.models = q->models;  // models and families, as the queue names them (quota::ModelCovers)
  w.count = spec.gpu_count.value_or(p->gpu_count);
  w.milli = spec.gpu_milli.value_or(p->gpu_milli);
  w.gpu_mem = spec.gpu_memory_mib.value_or(p->gpu_memory_mib);
  w.cpu = spec.cpu_milli.value_or(p->cpu_milli);
  w.mem = spec.memory_mib.value_or(p->memory_mib);
  w.valid = w.group >= 0;
  return w;
}

Snapshot Snapshot::Take(const World& w, const quota::QuotaEngine& e,
                        const std::vector<bool>& down) {
  Snapshot s;
  s.down = down;
  std::map<std::pair<std::string, int>, int> dev_of;
  for (size_t d = 0; d < w.devices.size(); ++d) {
    const DeviceInfo& di = w.devices[d];
    dev_of[{w.nodes[di.node].name, di.index}] = static_cast<int>(d);
    quota::DeviceView v = e.device(w.nodes[di.node].name, di.index);
    s.devices.push_back({v.mig, v.amd_pair, v.slots, v.draining, {}, false});
  }
  std::map<std::string, int> node_of;
  for (size_t n = 0; n < w.nodes.size(); ++n) {
    node_of[w.nodes[n].name] = static_cast<int>(n);
    s.cpu_free.push_back(w.nodes[n].cpu);
    s.mem_free.push_back(w.nodes[n].mem);
  }
  s.usage.assign(w.group_names.size(), {});
  s.staying.assign(w.group_names.size(), 0);
  s.guaranteed.assign(w.group_names.size(), 0);
  s.model_usage.assign(w.group_names.size(), {});
  s.model_staying.assign(w.group_names.size(), {});
  s.pool_usage.assign(w.group_names.size(), {});
  s.pool_staying.assign(w.group_names.size(), {});
  s.jobs.resize(e.job_count());
  for (int h = 0; h < e.job_count(); ++h) {
    JobNow& j = s.jobs[h];
    j.state = e.job_state(h);
    if (j.state == quota::JobState::kPending) j.at_admission = e.job(h).wait_step == "Admission";
    if (j.state != quota::JobState::kRunning && j.state != quota::JobState::kTerminating) continue;
    e.HeldOf(h, &j.grants, &j.form, &j.borrowed);
    const quota::JobView view = e.job(h);
    j.group = w.GroupIndex(view.group);
    j.start = view.start_time;
    j.idle_since = view.idle_since;
    j.swapped_out = view.swapped_out;
    std::map<std::string, MilliGpu> by_model, by_pool;
    for (const quota::GrantView& g : j.grants) {
      j.charge += Resources{g.compute, g.memory, g.cpu, g.host_memory};
      auto n = node_of.find(g.node);
      if (n != node_of.end()) {
        s.cpu_free[n->second] -= g.cpu;
        s.mem_free[n->second] -= g.host_memory;
        by_model[w.nodes[n->second].model] += g.compute;
        by_pool[w.nodes[n->second].pool] += g.compute;
      }
      auto d = dev_of.find({g.node, g.device});
      if (d == dev_of.end() || !j.form) continue;
      s.devices[d->second].holders.push_back({h, *j.form, g.slot, g.compute, g.memory});
    }
    for (int g = j.group; g >= 0; g = w.parent[g]) {
      s.usage[g] += j.charge;
      if (j.state == quota::JobState::kRunning) s.staying[g] += j.charge.gpu_milli;
      if (j.state == quota::JobState::kRunning && !j.borrowed)
        s.guaranteed[g] += j.charge.gpu_milli;
      for (const auto& [model, c] : by_model) {
        s.model_usage[g][model] += c;
        if (j.state == quota::JobState::kRunning) s.model_staying[g][model] += c;
      }
      for (const auto& [pool, c] : by_pool) {
        s.pool_usage[g][pool] += c;
        if (j.state == quota::JobState::kRunning) s.pool_staying[g][pool] += c;
      }
    }
  }
  return s;
}

namespace {

bool InPools(const Want& want, const std::string& pool) {
  return want.pools.empty() ||
         std::find(want.pools.begin(), want.pools.end(), pool) != want.pools.end();
}

// A node of a pool and GPU model the job accepts.
bool Serves(const Want& want, const NodeInfo& node) {
  return InPools(want, node.pool) &&
         (want.models.empty() ||
          std::any_of(want.models.begin(), want.models.end(),
                      [&](const std::string& m) { return quota::ModelCovers(m, node.model); }));
}

// Holders left once `gone` jobs have left.
std::vector<Holding> Staying(const DeviceNow& d, const std::vector<bool>& gone) {
  std::vector<Holding> out;
  for (const Holding& h : d.holders) {
    if (h.job < 0 || static_cast<size_t>(h.job) >= gone.size() || !gone[h.job]) out.push_back(h);
  }
  return out;
}

bool Split(const DeviceInfo& info, const DeviceNow& d) {
  if (info.model != nullptr && info.model->is_amd())
    return !d.amd_pair.empty() && d.amd_pair != "SPX+NPS1";
  return d.mig;
}

}  // namespace

// Free as a whole device: nothing on it, no layout change under way, and not split unless the
// engine split it (then it may return it). A card its operator registered split is the
// engine's once the engine has changed its mode, where it may return it alone (not in a
// node-wide memory mode: its reclaim does not count such a card for a whole job).
bool WholeFree(const World& w, const Snapshot& s, int d, const std::vector<bool>& gone) {
  const DeviceNow& dn = s.devices[d];
  if (dn.draining || dn.as_registered || !dn.held.empty() || !Staying(dn, gone).empty())
    return false;
  if (!Split(w.devices[d], dn)) return true;
  const DeviceInfo& info = w.devices[d];
  const bool node_wide = info.model != nullptr && info.model->is_amd() &&
                         dn.amd_pair.find("NPS1") == std::string::npos;
  if (info.registered_split && (!dn.owned || node_wide)) return false;
  if (node_wide) {
    // A memory mode is the node's: every device of the node must be free too.
    for (int od : w.nodes[info.node].devices) {
      if (od == d) continue;
      if (!Staying(s.devices[od], gone).empty() || s.devices[od].draining ||
          !s.devices[od].held.empty() || w.devices[od].registered_split)
        return false;
    }
  }
  return true;
}

namespace {

// Whether node n has `cpu` and `mem` free once the jobs in `gone` have left it (their grants
// there, on its cards or CPU-only): reclaim takes borrowers for a job's host CPU and memory too.
bool HostHolds(const World& w, const Snapshot& s, const std::vector<bool>& gone, size_t n,
               MilliCpu cpu, MiB mem) {
  MilliCpu c = s.cpu_free[n];
  MiB m = s.mem_free[n];
  for (size_t k = 0; (c < cpu || m < mem) && k < gone.size() && k < s.jobs.size(); ++k) {
    if (!gone[k]) continue;
    for (const quota::GrantView& g : s.jobs[k].grants) {
      if (g.node == w.nodes[n].name) c += g.cpu, m += g.host_memory;
    }
  }
  return c >= cpu && m >= mem;
}

bool HoldWhole(const World& w, const Snapshot& s, const Want& want, const std::vector<bool>& gone,
               std::string* where) {
  for (size_t n = 0; n < w.nodes.size(); ++n) {
    const NodeInfo& node = w.nodes[n];
    if (s.down[n] || !Serves(want, node) || !w.PoolAllows(node.pool, AllocationForm::kWhole))
      continue;
    int free = 0;
    for (int d : node.devices)
      free += WholeFree(w, s, d, gone) && w.devices[d].memory >= want.gpu_mem;
    if (free < want.count) continue;
    if (!HostHolds(w, s, gone, n, want.cpu * want.count, want.mem * want.count)) continue;
    if (where != nullptr) *where = "whole on " + node.name;
    return true;
  }
  return false;
}

bool HoldShare(const World& w, const Snapshot& s, const Want& want, const std::vector<bool>& gone,
               std::string* where, int only_device) {
  if (want.count != 1) return false;
  for (size_t n = 0; n < w.nodes.size(); ++n) {
    const NodeInfo& node = w.nodes[n];
    if (s.down[n] || !Serves(want, node) || !w.PoolAllows(node.pool, AllocationForm::kShare))
      continue;
    if (!HostHolds(w, s, gone, n, want.cpu, want.mem)) continue;
    for (int d : node.devices) {
      const DeviceNow& dn = s.devices[d];
      if (only_device >= 0 && d != only_device) continue;
      std::vector<Holding> stay = Staying(dn, gone);
      if (dn.draining) continue;
      if (Split(w.devices[d], dn) && !WholeFree(w, s, d, gone)) continue;
      MilliGpu compute = want.milli;
      MiB memory = want.gpu_mem > 0 ? want.gpu_mem : w.devices[d].memory;
      bool ok = true;
      for (const Holding& h : stay) {
        ok = ok && h.form == AllocationForm::kShare;
        compute += h.compute;
        memory += h.memory;
      }
      if (!ok || compute > kWholeGpu || memory > w.devices[d].memory) continue;
      if (where != nullptr) *where = "share on " + w.devices[d].name;
      return true;
    }
  }
  return false;
}

bool HoldPartition(const World& w, const Snapshot& s, const Want& want,
                   const std::vector<bool>& gone, std::string* where) {
  if (want.count != 1) return false;
  for (size_t n = 0; n < w.nodes.size(); ++n) {
    const NodeInfo& node = w.nodes[n];
    if (s.down[n] || !Serves(want, node) || !w.PoolAllows(node.pool, AllocationForm::kPartition)) {
      continue;
    }
    if (!HostHolds(w, s, gone, n, want.cpu, want.mem)) continue;
    for (int d : node.devices) {
      const DeviceInfo& info = w.devices[d];
      const DeviceNow& dn = s.devices[d];
      if (info.model == nullptr || dn.draining || !dn.held.empty()) continue;
      std::vector<Holding> stay = Staying(dn, gone);
      std::vector<std::string> held;
      bool whole_or_share = false;
      for (const Holding& h : stay) {
        if (h.slot.empty()) whole_or_share = true;
        held.push_back(h.slot);
      }
      if (whole_or_share) continue;
      auto free_slot = [&](const quota::SlotView& sl) {
        return std::find(held.begin(), held.end(), sl.name) == held.end();
      };
      if (info.model->is_amd()) {
        for (const quota::SlotView& sl : dn.slots) {
          if (!free_slot(sl)) continue;
          auto pair = part::ParsePair(*info.model, dn.amd_pair);
          if (!pair.ok()) continue;
          auto shape = part::Partition(*info.model, *pair);
          if (!shape.ok()) continue;
          if (shape->memory_per_partition_mib >= want.gpu_mem &&
              kWholeGpu / shape->partitions >= want.milli) {
            if (where != nullptr) *where = "partition " + sl.name + " on " + info.name;
            return true;
          }
        }
        continue;
      }
      const part::MigProfile* p = SmallestCovering(*info.model, want.milli, want.gpu_mem);
      if (p == nullptr) continue;
      if (dn.mig) {
        part::Layout layout;
        for (const quota::SlotView& sl : dn.slots) {
          if (sl.profile == p->name && free_slot(sl)) {
            if (where != nullptr) *where = "partition " + sl.name + " on " + info.name;
            return true;
          }
          layout.instances.push_back({sl.profile, sl.start});
        }
        if (!w.policy.repartition) continue;
        auto starts = part::LegalStarts(*info.model, layout, p->name);
        if (starts.ok() && !starts->empty()) {
          if (where != nullptr) *where = "new " + p->name + " on " + info.name;
          return true;
        }
      } else if (w.policy.repartition && stay.empty()) {
        if (where != nullptr) *where = "MIG on " + info.name;
        return true;
      }
    }
  }
  return false;
}

}  // namespace

const part::MigProfile* SmallestCovering(const part::GpuModel& m, MilliGpu milli, MiB mem) {
  if (!m.is_mig() || m.mig.compute_slices == 0) return nullptr;
  const part::MigProfile* best = nullptr;
  for (const part::MigProfile& p : m.mig.profiles) {
    if (p.media_extension || p.memory_mib < mem) continue;
    if (static_cast<int64_t>(p.compute_slices) * kWholeGpu / m.mig.compute_slices < milli) continue;
    if (best == nullptr ||
        std::tie(p.memory_slices, p.compute_slices, p.memory_mib) <
            std::tie(best->memory_slices, best->compute_slices, best->memory_mib)) {
      best = &p;
    }
  }
  return best;
}

bool Returnable(const World& w, const Snapshot& s, int device) {
  std::vector<bool> none;
  return Split(w.devices[device], s.devices[device]) && WholeFree(w, s, device, none);
}

bool CouldHold(const World& w, const Snapshot& s, const Want& want, const std::vector<bool>& gone,
               std::string* where, int held_on) {
  if (!want.valid || want.external || want.count < 1) return false;
  if (held_on >= 0) return HoldShare(w, s, want, gone, where, held_on);
  for (AllocationForm f : want.forms) {
    bool ok = f == AllocationForm::kWhole   ? HoldWhole(w, s, want, gone, where)
              : f == AllocationForm::kShare ? HoldShare(w, s, want, gone, where, -1)
                                            : HoldPartition(w, s, want, gone, where);
    if (ok) return true;
  }
  return false;
}

}  // namespace tessera::verify
