#include "sched/cluster_state.h"

namespace tessera::sched {

Result<ClusterState> ClusterState::FromNodes(const std::vector<Node>& nodes) {
  ClusterState s;
  s.nodes_.reserve(nodes.size());
  s.names_.reserve(nodes.size());
  for (const Node& n : nodes) {
    auto added = s.AddNode(n);
    if (!added.ok()) return added.status();
  }
  return s;
}

Result<int> ClusterState::AddNode(const Node& n) {
  if (n.devices.size() > static_cast<size_t>(kMaxDevices)) {
    return Status::InvalidArgument("node '" + n.name + "' has " + std::to_string(n.devices.size()) +
                                   " devices; at most " + std::to_string(kMaxDevices) +
                                   " are supported");
  }
  if (n.cpu_milli < 0 || n.memory_mib < 0) {
    return Status::InvalidArgument("node '" + n.name + "' has negative capacity");
  }
  NodeState ns;
  ns.cpu_total = ns.cpu_free = n.cpu_milli;
  ns.memory_total = ns.memory_free = n.memory_mib;
  ns.device_count = static_cast<int>(n.devices.size());
  for (int i = 0; i < ns.device_count; ++i) {
    const Device& d = n.devices[i];
    if (d.model != n.devices.front().model) {
      return Status::InvalidArgument("node '" + n.name + "' mixes GPU models '" +
                                     n.devices.front().model + "' and '" + d.model + "'");
    }
    ns.gpu_free[i] = kWholeGpu;
    ns.gpu_memory_total[i] = ns.gpu_memory_free[i] = d.memory_mib;
  }
  if (ns.device_count > 0) {
    int id = model_id(n.devices.front().model);
    if (id < 0) {
      if (model_names_.size() >= static_cast<size_t>(kMaxModels)) {
        return Status::InvalidArgument("more than " + std::to_string(kMaxModels) + " GPU models");
      }
      id = static_cast<int>(model_names_.size());
      model_names_.push_back(n.devices.front().model);
    }
    ns.model = id;
  }
  gpu_capacity_ += ns.device_count * kWholeGpu;
  nodes_.push_back(ns);
  names_.push_back(n.name);
  return static_cast<int>(nodes_.size()) - 1;
}

int ClusterState::model_id(const std::string& name) const {
  for (size_t i = 0; i < model_names_.size(); ++i) {
    if (model_names_[i] == name) return static_cast<int>(i);
  }
  return -1;
}

void ClusterState::Reserve(const Placement& p) {
  NodeState& n = nodes_[p.node];
  n.cpu_free -= p.cpu_milli;
  n.memory_free -= p.memory_mib;
  for (int k = 0; k < p.device_count; ++k) {
    int d = p.devices[k];
    n.gpu_free[d] -= p.gpu_milli;
    n.gpu_memory_free[d] -= p.gpu_memory_mib;
    ++n.gpu_holders[d];
  }
  gpu_allocated_ += p.gpu_milli * p.device_count;
}

void ClusterState::Release(const Placement& p) {
  NodeState& n = nodes_[p.node];
  n.cpu_free += p.cpu_milli;
  n.memory_free += p.memory_mib;
  for (int k = 0; k < p.device_count; ++k) {
    int d = p.devices[k];
    n.gpu_free[d] += p.gpu_milli;
    n.gpu_memory_free[d] += p.gpu_memory_mib;
    --n.gpu_holders[d];
  }
  gpu_allocated_ -= p.gpu_milli * p.device_count;
}

Status ClusterState::CheckInvariants() const {
  MilliGpu allocated = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const NodeState& n = nodes_[i];
    auto bad = [&](const std::string& what) {
      return Status::Internal("node '" + names_[i] + "': " + what);
    };
    if (n.cpu_free < 0 || n.cpu_free > n.cpu_total) return bad("cpu_free out of range");
    if (n.memory_free < 0 || n.memory_free > n.memory_total) return bad("memory_free out of range");
    for (int d = 0; d < n.device_count; ++d) {
      if (n.gpu_free[d] < 0 || n.gpu_free[d] > kWholeGpu) {
        return bad("device " + std::to_string(d) + " gpu_free out of range");
      }
      if (n.gpu_memory_free[d] < 0 || n.gpu_memory_free[d] > n.gpu_memory_total[d]) {
        return bad("device " + std::to_string(d) + " gpu_memory_free out of range");
      }
      if (n.gpu_holders[d] < 0) return bad("device " + std::to_string(d) + " negative holders");
      allocated += kWholeGpu - n.gpu_free[d];
    }
  }
  if (allocated != gpu_allocated_) {
    return Status::Internal("allocated GPU total " + std::to_string(gpu_allocated_) +
                            " differs from the devices' sum " + std::to_string(allocated));
  }
  return Status::Ok();
}

}  // namespace tessera::sched
