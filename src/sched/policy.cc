#include "sched/policy.h"

#include <algorithm>
#include <limits>
#include <map>

namespace tessera::sched {

bool DeviceFits(const NodeState& n, int d, const PlacementRequest& r) {
  return n.gpu_free[d] >= r.gpu_milli && n.gpu_memory_free[d] >= r.gpu_memory_mib;
}

int DevicesThatFit(const NodeState& n, const PlacementRequest& r) {
  int c = 0;
  for (int d = 0; d < n.device_count; ++d) c += DeviceFits(n, d, r) ? 1 : 0;
  return c;
}

bool NodeFits(const NodeState& n, const PlacementRequest& r) {
  if (n.cpu_free < r.cpu_milli || n.memory_free < r.memory_mib) return false;
  if (r.gpu_count == 0) return true;
  if (n.model < 0) return false;
  if (r.models != 0 && (r.models & (ModelMask{1} << n.model)) == 0) return false;
  return DevicesThatFit(n, r) >= r.gpu_count;
}

void FillPlacement(const NodeState& n, int node, const PlacementRequest& r, int d, Placement* p) {
  p->node = node;
  p->cpu_milli = r.cpu_milli;
  p->memory_mib = r.memory_mib;
  p->gpu_milli = r.gpu_milli;
  p->gpu_memory_mib = r.gpu_memory_mib;
  p->device_count = 0;
  if (r.gpu_count == 0) return;
  if (d >= 0) {
    p->devices[0] = static_cast<int8_t>(d);
    p->device_count = 1;
    return;
  }
  for (int i = 0; i < n.device_count && p->device_count < r.gpu_count; ++i) {
    if (DeviceFits(n, i, r)) p->devices[p->device_count++] = static_cast<int8_t>(i);
  }
}

bool ScanPolicy::Select(const ClusterState& state, const PlacementRequest& r,
                        const SelectContext& ctx, Placement* out) {
  if (!normalize()) {
    int best_node = -1, best_dev = -1;
    int64_t best = std::numeric_limits<int64_t>::min();
    for (int node : *ctx.order) {
      const NodeState& n = state.node(node);
      if (!NodeFits(n, r)) continue;
      int dev = -1;
      int64_t s = Score(n, node, r, ctx, &dev);
      if (best_node < 0 || s > best) {
        best = s;
        best_node = node;
        best_dev = dev;
      }
    }
    if (best_node < 0) return false;
    FillPlacement(state.node(best_node), best_node, r, best_dev, out);
    return true;
  }
  // Normalised: collect, rescale with integer division, then pick the first maximum.
  struct Cand {
    int node;
    int dev;
    int64_t score;
  };
  std::vector<Cand> cands;
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (int node : *ctx.order) {
    const NodeState& n = state.node(node);
    if (!NodeFits(n, r)) continue;
    int dev = -1;
    int64_t s = Score(n, node, r, ctx, &dev);
    cands.push_back({node, dev, s});
    lo = std::min(lo, s);
    hi = std::max(hi, s);
  }
  if (cands.empty()) return false;
  const Cand* best = nullptr;
  int64_t best_norm = -1;
  for (const Cand& c : cands) {
    int64_t norm = hi == lo ? 0 : (c.score - lo) * 100 / (hi - lo);
    if (best == nullptr || norm > best_norm) {
      best = &c;
      best_norm = norm;
    }
  }
  FillPlacement(state.node(best->node), best->node, r, best->dev, out);
  return true;
}

TaskType TypeOf(const PlacementRequest& r) {
  return TaskType{r.cpu_milli, r.gpu_milli, r.gpu_count, r.models};
}

std::vector<WeightedType> TypicalMix(const std::vector<PlacementRequest>& requests,
                                     double coverage) {
  // Count per type, keeping first-seen order for equal counts so the result is deterministic.
  std::vector<std::pair<TaskType, int64_t>> counts;
  std::map<std::tuple<MilliCpu, MilliGpu, int, ModelMask>, size_t> index;
  for (const PlacementRequest& r : requests) {
    TaskType t = TypeOf(r);
    auto key = std::make_tuple(t.cpu_milli, t.gpu_milli, t.gpu_count, t.models);
    auto it = index.find(key);
    if (it == index.end()) {
      index.emplace(key, counts.size());
      counts.emplace_back(t, 1);
    } else {
      ++counts[it->second].second;
    }
  }
  std::stable_sort(counts.begin(), counts.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  const auto total = static_cast<double>(requests.size());
  std::vector<WeightedType> mix;
  int64_t kept = 0;
  for (const auto& [t, c] : counts) {
    if (static_cast<double>(kept) >= coverage * total) break;
    mix.push_back({t, static_cast<double>(c), c});
    kept += c;
  }
  for (WeightedType& w : mix) w.weight /= static_cast<double>(kept);
  return mix;
}

}  // namespace tessera::sched
