// ClusterState: what the placement core knows of a cluster at one instant.
//
// Nodes with CPU and host memory, each with up to kMaxDevices devices of one GPU model, each
// device with its free compute (milli-GPU) and free memory (MiB). Compact and flat, so that a
// decision over tens of thousands of nodes stays in cache. All capacity is integer.
//
// Thread-safety: none; one scheduler owns one state.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/cluster.h"

namespace tessera::sched {

inline constexpr int kMaxDevices = 16;
inline constexpr int kMaxModels = 64;  // GPU models are a bitmask in requests
using ModelMask = uint64_t;            // bit i = model id i; 0 = any model

struct NodeState {
  MilliCpu cpu_total = 0;
  MilliCpu cpu_free = 0;
  MiB memory_total = 0;
  MiB memory_free = 0;
  int model = -1;  // GPU model id, -1 for a CPU-only node
  int device_count = 0;
  std::array<MilliGpu, kMaxDevices> gpu_free{};
  std::array<MiB, kMaxDevices> gpu_memory_free{};
  std::array<MiB, kMaxDevices> gpu_memory_total{};
  // Number of jobs holding each device (0 = untouched), used by GPU-clustering style policies.
  std::array<int16_t, kMaxDevices> gpu_holders{};

  MilliGpu gpu_free_total() const {
    MilliGpu s = 0;
    for (int i = 0; i < device_count; ++i) s += gpu_free[i];
    return s;
  }
  int fully_free_devices() const {
    int n = 0;
    for (int i = 0; i < device_count; ++i) n += gpu_free[i] == kWholeGpu ? 1 : 0;
    return n;
  }
};

// The job's needs as the placement core sees them.
struct PlacementRequest {
  MilliCpu cpu_milli = 0;
  MiB memory_mib = 0;
  int gpu_count = 0;       // 0: CPU-only
  MilliGpu gpu_milli = 0;  // per device; 1000 when gpu_count > 1
  MiB gpu_memory_mib = 0;  // per device; 0 = not constrained
  ModelMask models = 0;    // allowed GPU models; 0 = any
  int tag = 0;             // opaque to the core: the caller's job index

  bool fractional() const { return gpu_count == 1 && gpu_milli < kWholeGpu; }
  MilliGpu total_gpu_milli() const { return gpu_count * gpu_milli; }
};

// Where a job was placed: one node, and for GPU jobs the devices and the amount on each.
struct Placement {
  int node = -1;
  int device_count = 0;
  std::array<int8_t, kMaxDevices> devices{};
  MilliGpu gpu_milli = 0;  // per device
  MiB gpu_memory_mib = 0;  // per device
  MilliCpu cpu_milli = 0;
  MiB memory_mib = 0;
};

class ClusterState {
 public:
  // Builds the state from domain nodes; every node starts empty. Fails on a node with more
  // than kMaxDevices devices, mixed GPU models on one node, or more than kMaxModels models.
  static Result<ClusterState> FromNodes(const std::vector<Node>& nodes);
  // Appends one node, empty (a node joining a running cluster); refused, changing nothing, for
  // the reasons FromNodes refuses. Returns its index.
  Result<int> AddNode(const Node& n);

  int node_count() const { return static_cast<int>(nodes_.size()); }
  const NodeState& node(int i) const { return nodes_[i]; }
  const std::string& node_name(int i) const { return names_[i]; }
  const std::vector<std::string>& model_names() const { return model_names_; }
  // Model id for a name, or -1.
  int model_id(const std::string& name) const;

  MilliGpu gpu_capacity() const { return gpu_capacity_; }
  MilliGpu gpu_allocated() const { return gpu_allocated_; }

  // REQUIRES: the placement fits (the pipeline's filter said yes). Applies it exactly.
  void Reserve(const Placement& p);
  // Gives back exactly what Reserve took. REQUIRES: p was reserved and not yet released.
  void Release(const Placement& p);

  // Checks the invariants: nothing negative, nothing above its total. Returns the first
  // violation found, naming node and field.
  Status CheckInvariants() const;

 private:
  std::vector<NodeState> nodes_;
  std::vector<std::string> names_;
  std::vector<std::string> model_names_;
  MilliGpu gpu_capacity_ = 0;
  MilliGpu gpu_allocated_ = 0;
};

}  // namespace tessera::sched
