// Fragmentation-gradient placement (FGD, Weng et al., USENIX ATC'23) and Tessera's default.
//
// Fragment of node n for a task type m (milli-GPU): all of n's free GPU when m cannot run on n
// at all (CPU-only type, wrong model, too little CPU, too few devices with room), else the free
// GPU on devices too small for m. F_n(M) = sum_m p_m F_n(m) over the workload mix M. A job goes
// where the growth of F (the "gradient") is smallest.
//
// Tessera adds what a placement does to the node's ability to feed its remaining GPUs: free GPU
// beyond what the node's free CPU (host memory) can support at the workload's CPU-per-GPU
// (memory-per-GPU) ratio is stranded too. FGD sees CPU only as a cliff per task type; CPU-only
// jobs, whose gradient is zero on most nodes, then drain CPU that later GPU jobs need.
//
// Speed: a decision must not rescan the cluster. For every task type seen so far we keep, per
// node, the best score of placing that type there, in a max segment tree over the seeded
// tie-break order: a decision is one O(log nodes) query; a placement recomputes one node's row
// (each type x each distinct device choice x each mix entry that can run on the node's model,
// O(1) apiece from a per-node summary), and a change of the mix or the share plan (looked at
// when 1, 2, 4, 8, ... requests have been seen) rebuilds every row: at once on a small cluster,
// else a bounded slice of nodes per decision, lowest ranks first (RebuildSome), so that no one
// decision pays for the whole cluster.
//
// Exact: F is kept as an integer, sum_m w_m F_n(m) with w_m the mix's request counts, so that a
// gradient does not depend on the order its terms are added in. Mix entries that can never run
// on a node's model (CPU-only types, other models) add w_m x free GPU to F; they are summed once
#include <algorithm>
#include <cmath>
#include <memory>

#include "sched/policies/fragmentation_internal.h"

namespace tessera::sched {
namespace frag {

FragmentationPolicy::FragmentationPolicy(std::string name, FragmentationOptions opt,
                                         std::vector<WeightedType> mix)
    : name_(std::move(name)), opt_(opt) {
  SetMix(mix);
  if (opt_.share_plan && !opt_.online_mix) {
    std::vector<std::pair<MilliGpu, int64_t>> sizes;
    for (const MixEntry& e : mix_) {
      if (e.t.gpu_count == 1) sizes.emplace_back(e.t.gpu_milli, e.w);
    }
    plan_ = SharePlan::Solve(sizes);
  }
}

void FragmentationPolicy::Attach(const ClusterState& state, const SelectContext& ctx) {
  rank_of_ = ctx.rank_of;
  order_ = ctx.order;
  rebuild_next_ = kNoRebuild;
  node_count_ = state.node_count();
  slot_nodes_.clear();
  local_of_.assign(static_cast<size_t>(node_count_), 0);
  for (int node : *ctx.order) Enlist(state, node);
  model_cap_.clear();
  model_free_.clear();
  total_cap_ = total_free_ = 0;
  node_free_.assign(static_cast<size_t>(node_count_), 0);
  for (int node = 0; node < node_count_; ++node) TrackNode(state, node, true);
  shares_.assign(static_cast<size_t>(node_count_), {});
  fits_gen_.assign(static_cast<size_t>(node_count_), plan_gen_);
}

void FragmentationPolicy::Reserved(const Placement& p, const PlacementRequest& /*r*/) {
  if (!opt_.share_plan || !IsShare(p)) return;
  DeviceShares& ds = shares_[static_cast<size_t>(p.node)][static_cast<size_t>(p.devices[0])];
  ds.jobs.insert(std::upper_bound(ds.jobs.begin(), ds.jobs.end(), p.gpu_milli), p.gpu_milli);
  ds.fit = plan_.FitOf(ds.jobs);
}

void FragmentationPolicy::Released(const Placement& p) {
  if (!opt_.share_plan || !IsShare(p)) return;
  DeviceShares& ds = shares_[static_cast<size_t>(p.node)][static_cast<size_t>(p.devices[0])];
  const auto it = std::lower_bound(ds.jobs.begin(), ds.jobs.end(), p.gpu_milli);
  if (it != ds.jobs.end() && *it == p.gpu_milli) ds.jobs.erase(it);
  ds.fit = plan_.FitOf(ds.jobs);
}

void FragmentationPolicy::Observe(const PlacementRequest& r) {
  if (r.gpu_count > 0) {
    seen_memory_ += static_cast<double>(r.memory_mib);
    seen_gpu_ += static_cast<double>(r.total_gpu_milli());
    if (TypeOf(r).models != 0) seen_constrained_gpu_ += static_cast<double>(r.total_gpu_milli());
  }
  if (opt_.online_mix) {
    auto [it, inserted] = seen_index_.try_emplace(KeyOf(TypeOf(r)), seen_.size());
    if (inserted) {
      seen_.emplace_back(TypeOf(r), 1);
    } else {
      ++seen_[it->second].second;
    }
  }
  ++seen_total_;
  // What is learned from the stream is refreshed at 1, 2, 4, 8, ... requests: often while
  // little is known, rarely once it has settled, so rebuilds cost O(log requests) in all.
  if (seen_total_ >= next_refresh_ && (opt_.online_mix || opt_.memory_balance_weight != 0)) {
    next_refresh_ = seen_total_ * 2;
    dirty_ = true;
  }
}

void FragmentationPolicy::TrackNode(const ClusterState& state, int node, bool add) {
  const NodeState& n = state.node(node);
  const size_t slot = static_cast<size_t>(n.model + 1);
  if (model_cap_.size() <= slot) {
    model_cap_.resize(slot + 1, 0);
    model_free_.resize(slot + 1, 0);
  }
  if (node_free_.size() <= static_cast<size_t>(node))
    node_free_.resize(static_cast<size_t>(node) + 1, 0);
  const MilliGpu free = n.gpu_free_total();
  if (add) {
    model_cap_[slot] += static_cast<MilliGpu>(n.device_count) * kWholeGpu;
    total_cap_ += static_cast<MilliGpu>(n.device_count) * kWholeGpu;
  } else {
    model_free_[slot] -= node_free_[static_cast<size_t>(node)];
    total_free_ -= node_free_[static_cast<size_t>(node)];
  }
  model_free_[slot] += free;
  total_free_ += free;
  node_free_[static_cast<size_t>(node)] = free;
}

void FragmentationPolicy::NodeChanged(const ClusterState& state, int node) {
  TrackNode(state, node, false);
  if (dirty_) {  // every row is rebuilt before the next decision; the views follow the state now
    SyncViews(state.node(node), node);
    return;
  }
  RecomputeNode(state, node);
}

bool FragmentationPolicy::NodeAdded(const ClusterState& state, int node) {
  node_count_ = state.node_count();
  TrackNode(state, node, true);
  shares_.resize(static_cast<size_t>(node_count_));
  fits_gen_.resize(static_cast<size_t>(node_count_), plan_gen_);
  local_of_.resize(static_cast<size_t>(node_count_), 0);
  const size_t slot = Enlist(state, node);
  for (size_t q = 0; q < trees_.size(); ++q) {
    if (trees_[q].size() > slot) trees_[q][slot].Grow(static_cast<int>(slot_nodes_[slot].size()));
    devices_[q].resize(static_cast<size_t>(node_count_), int8_t{-1});
  }
  for (MemoryView& v : mem_views_) {
    if (v.trees.size() > slot) v.trees[slot].Grow(static_cast<int>(slot_nodes_[slot].size()));
  }
  if (!dirty_) RecomputeNode(state, node);
  return true;
}

size_t FragmentationPolicy::Enlist(const ClusterState& state, int node) {
  const size_t slot = static_cast<size_t>(state.node(node).model + 1);
  if (slot_nodes_.size() <= slot) slot_nodes_.resize(slot + 1);
  local_of_[static_cast<size_t>(node)] = static_cast<int>(slot_nodes_[slot].size());
  slot_nodes_[slot].push_back(node);
  return slot;
}

void FragmentationPolicy::SetMix(const std::vector<WeightedType>& mix) {
  mix_.clear();
  views_.clear();
  mix_w_ = 0;
  double cpu = 0, gpu = 0;
  for (const WeightedType& w : mix) {
    const int64_t weight = w.count > 0 ? w.count : std::llround(w.weight * 1e9);
    if (weight <= 0) continue;
    mix_.push_back({w.type, weight});
    mix_w_ += weight;
    if (w.type.gpu_count > 0) {
      cpu += w.weight * static_cast<double>(w.type.cpu_milli);
      gpu += w.weight * static_cast<double>(w.type.gpu_milli * w.type.gpu_count);
    }
  }
  cpu_per_gpu_ = gpu > 0 ? cpu / gpu : 0;
}

void FragmentationPolicy::Refresh(const ClusterState& state) {
  dirty_ = false;
  const double memory_per_gpu = seen_gpu_ > 0 ? seen_memory_ / seen_gpu_ : 0;
  bool changed = std::abs(memory_per_gpu - memory_per_gpu_) > kSettled * memory_per_gpu_;
  memory_per_gpu_ = memory_per_gpu;
  if (opt_.online_mix) {
    // The typical mix of what has been seen: the most popular types covering 95% of the
    // requests, renormalised (FGD's definition, on the prefix a live engine knows).
    std::vector<std::pair<TaskType, int64_t>> counts = seen_;
    std::stable_sort(counts.begin(), counts.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    std::vector<WeightedType> mix;
    int64_t kept = 0;
    for (const auto& [t, c] : counts) {
      if (static_cast<double>(kept) >= 0.95 * static_cast<double>(seen_total_)) break;
      mix.push_back({t, static_cast<double>(c), c});
      kept += c;
    }
    for (WeightedType& w : mix) w.weight /= static_cast<double>(kept);
    // Rebuilding every row costs O(nodes x types x mix); once the learned mix has settled
    // (moved by less than kSettled in L1 distance) the rows in place are kept.
    if (MixDistance(mix) >= kSettled) {
      SetMix(mix);
      changed = true;
    }
  }
  if (opt_.share_plan && opt_.online_mix && Replan()) changed = true;
  if (!changed) return;
  // Every row is stale. A small cluster rebuilds them now; a large one a slice per decision
  // from the next on, in rank order (ties go to low ranks, so the nodes decisions land on
  // first are fresh first). Until then a stale row holds its score under the old mix and
  // plan: still a placement that fits, on a scale (milli-GPU quanta) the fresh rows share.
  rebuild_next_ = 0;
  memo_.Clear(qtypes_.size());
  if (int64_t{node_count_} * RowWidth() <= kRebuildEntries) RebuildSome(state, kNoBudget);
}

bool FragmentationPolicy::IsShare(const Placement& p) {
  return p.device_count == 1 && p.gpu_milli > 0 && p.gpu_milli < kWholeGpu;
}

bool FragmentationPolicy::Replan() {
  std::vector<std::pair<MilliGpu, int64_t>> sizes;
  for (const auto& [t, c] : seen_) {
    if (t.gpu_count == 1) sizes.emplace_back(t.gpu_milli, c);
  }
  SharePlan plan = SharePlan::Solve(sizes);
  if (plan == plan_) return false;
  plan_ = std::move(plan);
  ++plan_gen_;
  return true;
}

double FragmentationPolicy::MixDistance(const std::vector<WeightedType>& other) const {
  auto p_of = [this](const MixEntry& e) {
    return static_cast<double>(e.w) / static_cast<double>(mix_w_);
  };
  double d = 0;
  for (const WeightedType& w : other) {
    double p = 0;
    for (const MixEntry& e : mix_) {
      if (e.t == w.type) p = p_of(e);
    }
    d += std::abs(w.weight - p);
  }
  for (const MixEntry& e : mix_) {
    bool found = false;
    for (const WeightedType& w : other) found = found || w.type == e.t;
    if (!found) d += p_of(e);
  }
  return d;
}

}  // namespace frag

std::unique_ptr<Policy> NewFragmentationPolicy(std::string name, FragmentationOptions options,
                                               std::vector<WeightedType> mix) {
  return std::make_unique<frag::FragmentationPolicy>(std::move(name), options, std::move(mix));
}

}  // namespace tessera::sched
