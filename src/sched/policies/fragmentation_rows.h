// Parts of the fragmentation index (fragmentation.cc): the mix as a node sees it, a node's
// summary against it, the share jobs on a device, and RowMemo, rows by node state.
//
// A node's row (its score and device for every type) depends only on its state (model, free
// CPU and memory, free GPU per device, the share jobs on each device: RowKey) under one mix and
// plan, and most nodes of a large cluster share a handful of states (untouched, full, ...). So
// while every row is rebuilt, or a new type's entries are made, each state's row is computed
// once and copied to the other nodes in it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "model/resources.h"
#include "sched/cluster_state.h"
#include "sched/policies/share_plan.h"
#include "sched/policy.h"

namespace tessera::sched::frag {

struct MixEntry {
  TaskType t;
  int64_t w = 0;  // weight: requests counted (or the given weight in units of 1e-9)
};
// The mix as a node of one model sees it: the entries that may run there (GPU types the model
// satisfies), those of one shape (CPU, GPU per device, devices) merged into one, their weights
// summed, whatever models they name; and the total weight of those that never can.
struct ViewEntry {
  MilliCpu cpu_milli = 0;
  MilliGpu gpu_milli = 0;
  int gpu_count = 0;
  int64_t w = 0;
};
struct ModelView {
  std::vector<ViewEntry> runs;
  int64_t never_w = 0;
};
// The share jobs on one device (sizes, ascending) and where they stand against the plan.
struct DeviceShares {
  std::vector<MilliGpu> jobs;
  SharePlan::Fit fit;
};
using NodeShares = std::array<DeviceShares, kMaxDevices>;

// A node against the mix: per entry of its model's view, how many devices have room and how
// much free GPU sits on devices too small for it.
struct Summary {
  MilliGpu free_total = 0;
  int64_t f = 0;  // W x F_n(M), W the mix's total weight
  std::vector<int16_t> fit_count;
  std::vector<MilliGpu> small_sum;
};

// Whether type q can never score on n (the policy's Entry is then kNoFit whatever the mix): too
// little CPU, no GPU of a model q allows, too few free devices or none with room for its share.
inline bool Hopeless(const NodeState& n, const TaskType& q) {
  if (n.cpu_free < q.cpu_milli) return true;
  if (q.gpu_count == 0) return false;
  if (n.model < 0 || (q.models != 0 && (q.models & (ModelMask{1} << n.model)) == 0)) return true;
  if (q.gpu_count > 1 || q.gpu_milli >= kWholeGpu) return n.fully_free_devices() < q.gpu_count;
  for (int d = 0; d < n.device_count; ++d) {
    if (n.gpu_free[d] >= q.gpu_milli) return false;
  }
  return true;
}

// What a node's row depends on (the policy's Entry reads no more): model, free CPU and memory,
// free GPU per device and, under a share plan (shares not null), the share jobs on each device.
inline void RowKey(const NodeState& n, const NodeShares* shares, std::vector<int64_t>* key) {
  key->assign({n.model, n.device_count, n.cpu_free, n.memory_free});
  key->insert(key->end(), n.gpu_free.begin(), n.gpu_free.begin() + n.device_count);
  if (shares == nullptr) return;
  for (int d = 0; d < n.device_count; ++d) {
    const std::vector<MilliGpu>& jobs = (*shares)[static_cast<size_t>(d)].jobs;
    key->push_back(static_cast<int64_t>(jobs.size()));
    key->insert(key->end(), jobs.begin(), jobs.end());
  }
}

// Rows (width() entries of score and device) by RowKey, at most kMaxRows of them.
class RowMemo {
 public:
  // Forgets every row; rows from now on have `width` entries.
  void Clear(size_t width) {
    width_ = width;
    index_.clear();
    values_.clear();
    devices_.clear();
  }
  size_t width() const { return width_; }

  // The row stored for `key`, or -1.
  int Find(const std::vector<int64_t>& key) const {
    const auto it = index_.find(key);
    return it == index_.end() ? -1 : it->second;
  }
  // Stores a row of width() entries (ignored once kMaxRows are kept).
  void Add(const std::vector<int64_t>& key, std::span<const double> values,
           std::span<const int8_t> devices) {
    if (index_.size() >= kMaxRows || values.size() != width_ || devices.size() != width_) return;
    index_.emplace(key, static_cast<int>(index_.size()));
    values_.insert(values_.end(), values.begin(), values.end());
    devices_.insert(devices_.end(), devices.begin(), devices.end());
  }
  std::span<const double> values(int row) const { return {values_.data() + Offset(row), width_}; }
  std::span<const int8_t> devices(int row) const { return {devices_.data() + Offset(row), width_}; }

 private:
  static constexpr size_t kMaxRows = 4096;
  struct KeyHash {
    size_t operator()(const std::vector<int64_t>& key) const {
      uint64_t h = 0xcbf29ce484222325ull;
      for (int64_t v : key) h = (h ^ static_cast<uint64_t>(v)) * 0x100000001b3ull;
      return static_cast<size_t>(h ^ (h >> 29));
    }
  };
  size_t Offset(int row) const { return static_cast<size_t>(row) * width_; }

  size_t width_ = 0;
  std::unordered_map<std::vector<int64_t>, int, KeyHash> index_;
  std::vector<double> values_;
  std::vector<int8_t> devices_;
};

}  // namespace tessera::sched::frag
