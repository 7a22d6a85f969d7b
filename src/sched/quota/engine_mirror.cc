// The quota engine's mirror in the placement core: whole-device and share grants are chosen by a
// placement-core policy (default `tessera`), so the product places as `tessera sim openb`
// measures. See engine_impl.h.
#include "sched/policy.h"
#include "sched/quota/compute_mode.h"
#include "sched/quota/engine_impl.h"

namespace tessera::quota::internal {
namespace {

// The mirror's "model" of a device: its pool and GPU model, so that a request's model mask
// restricts it to the pools it may draw from.
std::string MirrorModel(const std::string& pool, const Dev& d) {
  return pool + "|" + (d.model ? d.model->name : "gpu" + std::to_string(d.memory));
}

}  // namespace

void Engine::RebuildMirror() {
  mirror_.reset();
  mirror_held_.clear();
  mirror_blocks_.clear();
  pool_models_.assign(policy_.pools.size(), 0);
  mirror_dirty_ = false;
  if (policy_.placement == "nextfit" || nodes_.empty()) return;
  std::vector<Node> nodes;
  for (const NodeRt& n : nodes_) {
    Node m;
    m.name = n.name;
    m.cpu_milli = n.cpu_total;
    m.memory_mib = n.mem_total;
    for (int d : n.devs) {
      m.devices.push_back(Device{devs_[d].index, MirrorModel(policy_.pools[n.pool].name, devs_[d]),
                                 devs_[d].memory});
    }
    nodes.push_back(std::move(m));
  }
  auto state = sched::ClusterState::FromNodes(nodes);
  auto policy = sched::MakePolicy(policy_.placement, {});
  if (!state.ok() || !policy.ok()) return;  // more than the core's limits: the cycle's own search
  for (size_t p = 0; p < policy_.pools.size(); ++p) {
    for (size_t m = 0; m < state->model_names().size(); ++m) {
      const std::string& name = state->model_names()[m];
      if (name.rfind(policy_.pools[p].name + "|", 0) == 0)
        pool_models_[p] |= sched::ModelMask{1} << m;
    }
  }
  mirror_ = std::make_unique<sched::Scheduler>(std::move(*state), std::move(*policy), 42);
  MirrorModelMasks();
  for (size_t di = 0; di < devs_.size(); ++di) MirrorSyncSplit(static_cast<int>(di));
  for (size_t h = 0; h < jobs_.size(); ++h) {
    if (!jobs_[h].grants.empty()) MirrorAdopt(static_cast<int>(h), jobs_[h].grants);
  }
}

void Engine::MirrorAddNode(int node) {
  // Taken in place: a fleet registering one agent at a time costs O(nodes), not O(nodes^2)
  // rebuilds. The mirror's node i is the engine's node i (both append).
  if (!mirror_ || mirror_dirty_ || node != mirror_->state().node_count()) {
    mirror_dirty_ = true;  // rebuilt at the next placement
    return;
  }
  const NodeRt& n = nodes_[node];
  Node m;
  m.name = n.name;
  m.cpu_milli = n.cpu_total;
  m.memory_mib = n.mem_total;
  for (int d : n.devs)
    m.devices.push_back(
        Device{devs_[d].index, MirrorModel(policy_.pools[n.pool].name, devs_[d]), devs_[d].memory});
  if (!mirror_->AddNode(m).ok()) {
    mirror_dirty_ = true;
    return;
  }
  // A model new to the mirror joins its pool's mask.
  const auto& names = mirror_->state().model_names();
  for (size_t p = 0; p < policy_.pools.size(); ++p) {
    for (size_t k = 0; k < names.size(); ++k) {
      if (names[k].rfind(policy_.pools[p].name + "|", 0) == 0)
        pool_models_[p] |= sched::ModelMask{1} << k;
    }
  }
  MirrorModelMasks(node);
  for (int d : n.devs) MirrorSyncSplit(d);
}

// Each engine GPU model's models in the mirror (one per pool it is in): from every node, or
// (a node joined) from that one.
void Engine::MirrorModelMasks(int only_node) {
  if (only_node < 0 || model_mirror_.size() != model_names_.size())
    model_mirror_.assign(model_names_.size(), 0);
  if (!mirror_) return;
  std::map<std::string, int> ids;
  const auto& names = mirror_->state().model_names();
  for (size_t k = 0; k < names.size(); ++k) ids[names[k]] = static_cast<int>(k);
  for (size_t ni = 0; ni < nodes_.size(); ++ni) {
    if (only_node >= 0 && static_cast<int>(ni) != only_node) continue;
    const NodeRt& n = nodes_[ni];
    for (int d : n.devs) {
      auto it = ids.find(MirrorModel(policy_.pools[n.pool].name, devs_[d]));
      if (it != ids.end()) model_mirror_[devs_[d].model_id] |= sched::ModelMask{1} << it->second;
    }
  }
}

void Engine::MirrorAdopt(int self, const std::vector<Grant>& grants) {
  if (!mirror_ || mirror_dirty_) return;
  std::map<int, sched::Placement> by_node;
  bool overcommit = false;  // swapping shares, whose caps may pass the device's memory
  for (const Grant& g : grants) {
    if (g.slot >= 0) continue;  // partitions live on blocked devices
    overcommit = overcommit || (g.dev >= 0 && devs_[g.dev].whole < 0 && devs_[g.dev].swap_oc > 0);
    sched::Placement& p = by_node[g.node];
    p.node = g.node;
    p.cpu_milli += g.cpu;
    p.memory_mib += g.host_memory;
    if (g.dev < 0) continue;
    p.devices[p.device_count++] = static_cast<int8_t>(devs_[g.dev].index);
    p.gpu_milli = g.compute;
    p.gpu_memory_mib = g.memory;
  }
  for (auto& [n, p] : by_node) {
    if (!mirror_->Adopt(p).ok()) {
      if (!overcommit || p.device_count == 0) continue;
      // Swapping shares past a device's memory (overcommit): the mirror, which knows only the
      // physical memory, holds what is left of the device, so that it sees the device full.
      const sched::NodeState& ns = mirror_->state().node(p.node);
      for (int k = 0; k < p.device_count; ++k) {
        p.gpu_milli = std::min(p.gpu_milli, ns.gpu_free[p.devices[k]]);
        p.gpu_memory_mib = std::min(p.gpu_memory_mib, ns.gpu_memory_free[p.devices[k]]);
      }
      if (!mirror_->Adopt(p).ok()) continue;
    }
    mirror_held_[self].push_back(p);
  }
}

void Engine::MirrorRelease(int self) {
  auto it = mirror_held_.find(self);
  if (it == mirror_held_.end()) return;
  if (mirror_ && !mirror_dirty_) {
    for (const sched::Placement& p : it->second) mirror_->Release(p);
  }
  mirror_held_.erase(it);
}

void Engine::MirrorSyncSplit(int di) {
  if (!mirror_ || mirror_dirty_) return;
  const Dev& d = devs_[di];
  auto it = mirror_blocks_.find(di);
  if (d.split && it == mirror_blocks_.end()) {
    sched::Placement p;
    p.node = d.node;
    p.device_count = 1;
    p.devices[0] = static_cast<int8_t>(d.index);
    p.gpu_milli = kWholeGpu;
    p.gpu_memory_mib = d.memory;
    if (mirror_->Adopt(p).ok()) mirror_blocks_[di] = p;
  } else if (!d.split && it != mirror_blocks_.end()) {
    mirror_->Release(it->second);
    mirror_blocks_.erase(it);
  }
}

bool Engine::PolicyPick(Job& j, int self, AllocationForm f, Candidate* c) {
  if (mirror_dirty_) RebuildMirror();
  if (!mirror_) return false;
  sched::PlacementRequest r;
  r.gpu_count = j.gpu_count;
  r.gpu_milli = f == AllocationForm::kWhole ? kWholeGpu : j.gpu_milli;
  r.gpu_memory_mib = j.gpu_mem;
  r.cpu_milli = j.cpu * j.gpu_count;
  r.memory_mib = j.mem * j.gpu_count;
  for (size_t p = 0; p < policy_.pools.size(); ++p) {
    if (InPools(j, static_cast<int>(p)) && PoolAllows(static_cast<int>(p), f))
      r.models |= pool_models_[p];
  }
  if (j.models != ~uint64_t{0}) {  // some GPU models only (QueueSpec::models, engine_models.cc)
    sched::ModelMask allowed = 0;
    for (size_t m = 0; m < model_mirror_.size(); ++m) {
      if ((j.models >> m) & 1u) allowed |= model_mirror_[m];
    }
    r.models &= allowed;
  }
  if (r.models == 0) return false;
  sched::PlacementResult res = mirror_->Place(r);
  if (!res.placed()) return false;
  // Checked against the engine's own state (down nodes, drains, devices kept for a waiting job).
  const sched::Placement& p = res.placement;
  const NodeRt& node = nodes_[p.node];
  std::vector<Grant> grants;
  bool ok = NodeHas(node, r.cpu_milli, r.memory_mib) && p.device_count == j.gpu_count;
  for (int k = 0; ok && k < p.device_count; ++k) {
    const int di = node.devs[p.devices[k]];
    const Dev& d = devs_[di];
    bool bf = false, blocked = false;
    ok = !d.split && d.whole < 0 && Usable(d, j, self, &bf, &blocked) && !bf && Serves(j, d);
    if (f == AllocationForm::kWhole) {
      ok = ok && d.shares.empty() && d.memory >= j.gpu_mem;
      grants.push_back({p.node, di, -1, d.memory, kWholeGpu, j.cpu, j.mem});
    } else {
      const MiB want = j.gpu_mem > 0 ? j.gpu_mem : d.memory * j.gpu_milli / kWholeGpu;
      ok = ok && ShareGrade(d, j.sm_percent) >= j.min_isolation && d.ShareKindFits(j.swap_oc) &&
           ComputeModeFits(d, j.sm_percent) && d.share_mem + want <= d.share_capacity(j.swap_oc) &&
           d.share_weight + j.gpu_milli <= d.weight_capacity(j.swap_oc) &&
           (j.swap_oc == 0 || SwapRoom(di, want));
      grants.push_back({p.node, di, -1, want, j.gpu_milli, j.cpu, j.mem, j.sm_percent});
    }
  }
  // Nor the host a head kept here needs: the engine's own search looks further (the policy's
  // pick took a claim's host, refused, and a claimant of priority 2 lost the card its reclaim
  // had just made whole beside it to a job of its group behind it; seed 1579558).
  if (!ok || TakesHostFromHead(j, self, grants)) {
    mirror_->Release(p);
    return false;
  }
  c->grants = std::move(grants);
  c->backfill = false;
  c->mirrored = p;
  return true;
}

void Engine::DropPick(Candidate& c) {
  if (c.mirrored && mirror_ && !mirror_dirty_) mirror_->Release(*c.mirrored);
  c.mirrored.reset();
}

}  // namespace tessera::quota::internal
