// The fragmentation index: a decision (the best node of a type's trees), a node's score for a
// type (its summary against the mix, the growth of its fragment, share tiers), its row and a new
// type's entries on every node. The method is described in fragmentation.cc.
#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>

#include "sched/policies/fragmentation_internal.h"

namespace tessera::sched::frag {

bool FragmentationPolicy::Select(const ClusterState& state, const PlacementRequest& r,
                                 const SelectContext& /*ctx*/, Placement* out) {
  if (dirty_) {
    Refresh(state);
  } else {
    RebuildSome(state);
  }
  const int q = QueryType(state, r);
  const int view = MemoryViewOf(state, q, r);
  std::vector<MaxTree>& trees = view >= 0 ? mem_views_[static_cast<size_t>(view)].trees : trees_[q];
  const ModelMask models = TypeOf(r).models;
  const bool charged =
      opt_.model_balance_weight != 0 && models == 0 && r.gpu_count > 0 && seen_constrained_gpu_ > 0;
  popped_.clear();
  bool found = false;
  while (true) {
    const int slot = BestSlot(trees, models, charged ? r.total_gpu_milli() : 0);
    if (slot < 0) break;
    MaxTree& tree = trees[static_cast<size_t>(slot)];
    const int local = tree.LeftmostMax();
    const int node = slot_nodes_[static_cast<size_t>(slot)][static_cast<size_t>(local)];
    const NodeState& n = state.node(node);
    if (NodeFits(n, r)) {
      int dev = r.fractional() ? devices_[q][node] : -1;
      if (dev >= 0 && !DeviceFits(n, dev, r)) {
        // The index chose by compute; GPU memory rules this device out. Take the best of
        // the devices that fit instead (NodeFits guarantees one).
        dev = BestFittingDevice(n, node, r, qtypes_[static_cast<size_t>(q)]);
      }
      FillPlacement(n, node, r, dev, out);
      found = true;
      break;
    }
    // Fits the type but not this request (host or GPU memory): look further.
    popped_.push_back({slot, local, tree.Get(local)});
    tree.Set(local, kNoFit);
  }
  for (const Popped& p : popped_) trees[static_cast<size_t>(p.slot)].Set(p.local, p.value);
  return found;
}

int FragmentationPolicy::BestSlot(const std::vector<MaxTree>& trees, ModelMask models,
                                  MilliGpu gpu) const {
  int best = -1, best_rank = 0;
  double best_v = kNoFit;
  for (size_t m = 0; m < trees.size(); ++m) {
    if (models != 0 && !ModelAllows(static_cast<int>(m) - 1, models)) continue;
    const int local = trees[m].LeftmostMax();
    if (local < 0) continue;
    double v = trees[m].Get(local);
    const int rank = (*rank_of_)[slot_nodes_[m][static_cast<size_t>(local)]];
    if (gpu > 0) v -= ModelCharge(static_cast<int>(m), gpu);
    if (best < 0 || v > best_v || (v == best_v && rank < best_rank)) {
      best = static_cast<int>(m);
      best_v = v;
      best_rank = rank;
    }
  }
  return best;
}

double FragmentationPolicy::ModelCharge(int slot, MilliGpu gpu) const {
  const double cap = static_cast<double>(model_cap_[static_cast<size_t>(slot)]);
  if (cap <= 0 || total_cap_ <= 0) return 0;
  const double mine = static_cast<double>(model_free_[static_cast<size_t>(slot)]) / cap;
  const double all = static_cast<double>(total_free_) / static_cast<double>(total_cap_);
  const double share = seen_gpu_ > 0 ? seen_constrained_gpu_ / seen_gpu_ : 0;
  const double charge = opt_.model_balance_weight * share * static_cast<double>(gpu) * (all - mine);
  return opt_.quantum_milli > 0 ? charge / static_cast<double>(opt_.quantum_milli) : charge;
}

const ModelView& FragmentationPolicy::ViewOf(int model) {
  const size_t slot = static_cast<size_t>(model + 1);
  if (views_.size() <= slot) views_.resize(slot + 1);
  if (!views_[slot]) {
    ModelView v;
    std::map<std::tuple<MilliCpu, MilliGpu, int>, size_t> shape;
    for (const MixEntry& e : mix_) {
      const TaskType& t = e.t;
      const bool may_run = t.gpu_count > 0 && ModelAllows(model, t.models);
      if (!may_run) {
        v.never_w += e.w;
        continue;
      }
      auto [it, fresh] = shape.try_emplace({t.cpu_milli, t.gpu_milli, t.gpu_count}, v.runs.size());
      if (fresh) v.runs.push_back({t.cpu_milli, t.gpu_milli, t.gpu_count, 0});
      v.runs[it->second].w += e.w;
    }
    views_[slot] = std::move(v);
  }
  return *views_[slot];
}

void FragmentationPolicy::EnsureFits(int node) {
  uint32_t& gen = fits_gen_[static_cast<size_t>(node)];
  if (gen == plan_gen_) return;
  gen = plan_gen_;
  for (DeviceShares& ds : shares_[static_cast<size_t>(node)]) {
    if (!ds.jobs.empty()) ds.fit = plan_.FitOf(ds.jobs);
  }
}

void FragmentationPolicy::Summarize(const NodeState& n, const ModelView& view, Summary* s) const {
  const size_t m = view.runs.size();
  s->fit_count.resize(m);
  s->small_sum.resize(m);
  s->free_total = n.gpu_free_total();
  s->f = view.never_w * s->free_total;
  for (size_t k = 0; k < m; ++k) {
    const ViewEntry& e = view.runs[k];
    int16_t cnt = 0;
    MilliGpu small = 0;
    for (int d = 0; d < n.device_count; ++d) {
      if (n.gpu_free[d] >= e.gpu_milli) {
        ++cnt;
      } else {
        small += n.gpu_free[d];
      }
    }
    s->fit_count[k] = cnt;
    s->small_sum[k] = small;
    const bool runs = n.cpu_free >= e.cpu_milli && cnt >= e.gpu_count;
    s->f += e.w * (runs ? small : s->free_total);
  }
}

double FragmentationPolicy::Unfed(double have, MilliGpu gpu, double per_gpu) {
  return std::max(0.0, static_cast<double>(gpu) - have / per_gpu);
}

double FragmentationPolicy::Delta(const NodeState& n, const ModelView& view, const Summary& s,
                                  const TaskType& q, MiB memory, int device) const {
  const MilliCpu cpu_after = n.cpu_free - q.cpu_milli;
  const MilliGpu free_after = s.free_total - q.gpu_milli * q.gpu_count;
  const MilliGpu r = device >= 0 ? n.gpu_free[device] : 0;
  const MilliGpu r_after = r - q.gpu_milli;
  int64_t f_after = view.never_w * free_after;
  for (size_t k = 0; k < view.runs.size(); ++k) {
    const ViewEntry& e = view.runs[k];
    int cnt = s.fit_count[k];
    MilliGpu small = s.small_sum[k];
    if (device >= 0) {
      cnt += (r_after >= e.gpu_milli ? 1 : 0) - (r >= e.gpu_milli ? 1 : 0);
      small += (r_after < e.gpu_milli ? r_after : 0) - (r < e.gpu_milli ? r : 0);
    } else if (q.gpu_count > 0) {
      cnt -= q.gpu_count;  // fully free devices become empty
    }
    const bool runs = cpu_after >= e.cpu_milli && cnt >= e.gpu_count;
    f_after += e.w * (runs ? small : free_after);
  }
  double delta = mix_w_ > 0 ? static_cast<double>(f_after - s.f) / static_cast<double>(mix_w_) : 0;
  if (opt_.cpu_balance_weight != 0 && cpu_per_gpu_ > 0) {
    delta += opt_.cpu_balance_weight *
             (Unfed(static_cast<double>(cpu_after), free_after, cpu_per_gpu_) -
              Unfed(static_cast<double>(n.cpu_free), s.free_total, cpu_per_gpu_));
  }
  if (opt_.memory_balance_weight != 0 && memory_per_gpu_ > 0) {
    delta += opt_.memory_balance_weight *
             (Unfed(static_cast<double>(n.memory_free - memory), free_after, memory_per_gpu_) -
              Unfed(static_cast<double>(n.memory_free), s.free_total, memory_per_gpu_));
  }
  return delta;
}

double FragmentationPolicy::ScoreOf(double delta) const {
  if (opt_.truncated_score) {
    // FGD: int64(100 * sigmoid(-delta / 1000)).
    return std::floor(100.0 / (1.0 + std::exp(delta / 1000.0)));
  }
  if (opt_.quantum_milli > 0) return -std::floor(delta / static_cast<double>(opt_.quantum_milli));
  return -delta;
}

double FragmentationPolicy::Entry(const NodeState& n, int node, const ModelView& view,
                                  const Summary& s, const TaskType& q, MiB memory,
                                  int8_t* device) const {
  *device = -1;
  if (n.cpu_free < q.cpu_milli) return kNoFit;
  if (q.gpu_count == 0) return ScoreOf(Delta(n, view, s, q, memory, -1));
  if (!ModelOk(n, q.models)) return kNoFit;
  if (q.gpu_count > 1 || q.gpu_milli >= kWholeGpu) {
    if (n.fully_free_devices() < q.gpu_count) return kNoFit;
    return ScoreOf(Delta(n, view, s, q, memory, -1));
  }
  double best = kNoFit;
  const bool planned = opt_.share_plan && !plan_.empty();
  const auto& shares = planned ? shares_[static_cast<size_t>(node)] : kNoShares;
  for (int d = 0; d < n.device_count; ++d) {
    if (n.gpu_free[d] < q.gpu_milli) continue;
    bool same_seen = false;  // devices with equal free give equal states: the first one wins
    for (int e = 0; e < d && !same_seen; ++e) {
      same_seen = n.gpu_free[e] == n.gpu_free[d] && (!planned || shares[e].jobs == shares[d].jobs);
    }
    if (same_seen) continue;
    const double v = ShareScore(n, node, view, s, q, memory, d);
    if (v > best) {
      best = v;
      *device = static_cast<int8_t>(d);
    }
  }
  return best;
}

int FragmentationPolicy::BestFittingDevice(const NodeState& n, int node, const PlacementRequest& r,
                                           const TaskType& q) {
  const ModelView& view = ViewOf(n.model);
  Summarize(n, view, &summary_);
  EnsureFits(node);
  int best = -1;
  double best_v = kNoFit;
  for (int d = 0; d < n.device_count; ++d) {
    if (!DeviceFits(n, d, r)) continue;
    const double v = ShareScore(n, node, view, summary_, q, r.memory_mib, d);
    if (best < 0 || v > best_v) {
      best = d;
      best_v = v;
    }
  }
  return best;
}

double FragmentationPolicy::ShareScore(const NodeState& n, int node, const ModelView& view,
                                       const Summary& s, const TaskType& q, MiB memory,
                                       int d) const {
  const double v = ScoreOf(Delta(n, view, s, q, memory, d));
  if (!opt_.share_plan || plan_.empty()) return v;
  const DeviceShares& ds = shares_[static_cast<size_t>(node)][static_cast<size_t>(d)];
  return v - kTier * Tier(n, ds, d, plan_.IndexOf(q.gpu_milli));
}

int FragmentationPolicy::Tier(const NodeState& n, const DeviceShares& ds, int d, int size) {
  if (n.gpu_free[d] == kWholeGpu && ds.jobs.empty()) return 1;
  if (size < 0 || !ds.fit.planned) return 0;
  return (ds.fit.next >> size & 1) != 0 ? 0 : 2;
}

bool FragmentationPolicy::RecomputeNode(const ClusterState& state, int node, bool memo) {
  const NodeState& n = state.node(node);
  const int local = local_of_[static_cast<size_t>(node)];
  // The leaves are in as many trees as types, each likely out of cache: fetch them all while
  // the row is computed, then write them.
  for (size_t q = 0; q < qtypes_.size(); ++q) TreeOf(static_cast<int>(q), n).Prefetch(local);
  int known = -1;
  if (memo) {
    if (memo_.width() != qtypes_.size()) memo_.Clear(qtypes_.size());
    RowKey(n, opt_.share_plan ? &shares_[static_cast<size_t>(node)] : nullptr, &key_);
    known = memo_.Find(key_);
  }
  row_.resize(qtypes_.size());
  row_devices_.resize(qtypes_.size());
  if (known >= 0) {
    std::copy_n(memo_.values(known).begin(), qtypes_.size(), row_.begin());
    std::copy_n(memo_.devices(known).begin(), qtypes_.size(), row_devices_.begin());
  } else {
    const ModelView& view = ViewOf(n.model);
    Summarize(n, view, &summary_);
    EnsureFits(node);
    for (size_t q = 0; q < qtypes_.size(); ++q) {
      row_[q] = Entry(n, node, view, summary_, qtypes_[q], qmemory_[q], &row_devices_[q]);
    }
    if (memo) memo_.Add(key_, row_, row_devices_);
  }
  for (size_t q = 0; q < qtypes_.size(); ++q) {
    devices_[q][node] = row_devices_[q];
    TreeOf(static_cast<int>(q), n).Set(local, row_[q]);
  }
  SyncViews(n, node);
  return known >= 0;
}

bool FragmentationPolicy::MemoryFits(const NodeState& n, MilliGpu gpu, int count, MiB memory) {
  int fit = 0;
  for (int d = 0; d < n.device_count && fit < count; ++d)
    fit += n.gpu_free[d] >= gpu && n.gpu_memory_free[d] >= memory ? 1 : 0;
  return fit >= count;
}

MaxTree& FragmentationPolicy::ViewTreeOf(int v, size_t slot) {
  auto& trees = mem_views_[static_cast<size_t>(v)].trees;
  while (trees.size() <= slot) {
    trees.emplace_back();
    trees.back().Init(static_cast<int>(slot_nodes_[trees.size() - 1].size()));
  }
  return trees[slot];
}

void FragmentationPolicy::SyncViews(const NodeState& n, int node) {
  if (mem_views_.empty()) return;
  const size_t slot = static_cast<size_t>(n.model + 1);
  const int local = local_of_[static_cast<size_t>(node)];
  for (size_t q = 0; q < type_mem_views_.size(); ++q) {
    if (type_mem_views_[q].empty()) continue;
    const double score = TreeOf(static_cast<int>(q), n).Get(local);
    const TaskType& t = qtypes_[q];
    // MemoryFits(n, t, m) for every view's m at once: the count-th largest free memory among
    // the devices with t's compute free is at least m.
    MiB cap = -1;
    if (score != kNoFit) {
      std::array<MiB, kMaxDevices> memory{};
      int k = 0;
      for (int d = 0; d < n.device_count; ++d) {
        if (n.gpu_free[d] >= t.gpu_milli) memory[static_cast<size_t>(k++)] = n.gpu_memory_free[d];
      }
      if (k >= t.gpu_count && t.gpu_count > 0) {
        std::nth_element(memory.begin(), memory.begin() + (t.gpu_count - 1), memory.begin() + k,
                         std::greater<MiB>());
        cap = memory[static_cast<size_t>(t.gpu_count - 1)];
      }
    }
    for (int v : type_mem_views_[q]) {
      const bool fits = cap >= mem_views_[static_cast<size_t>(v)].gpu_memory;
      ViewTreeOf(v, slot).Set(local, fits ? score : kNoFit);
    }
  }
}

int FragmentationPolicy::MemoryViewOf(const ClusterState& state, int q, const PlacementRequest& r) {
  if (!opt_.gpu_memory_views || r.gpu_count == 0 || r.gpu_memory_mib <= 0) return -1;
  const auto it = view_id_.find({q, r.gpu_memory_mib});
  if (it != view_id_.end()) return it->second;
  if (mem_views_.size() >= kMaxMemoryViews) return -1;
  const int v = static_cast<int>(mem_views_.size());
  view_id_[{q, r.gpu_memory_mib}] = v;
  mem_views_.push_back({q, r.gpu_memory_mib, {}});
  if (type_mem_views_.size() <= static_cast<size_t>(q))
    type_mem_views_.resize(static_cast<size_t>(q) + 1);
  type_mem_views_[static_cast<size_t>(q)].push_back(v);
  const TaskType& t = qtypes_[static_cast<size_t>(q)];
  const auto& trees = trees_[static_cast<size_t>(q)];
  for (size_t slot = 0; slot < trees.size(); ++slot) {
    MaxTree& tree = ViewTreeOf(v, slot);
    for (size_t local = 0; local < slot_nodes_[slot].size(); ++local) {
      const double score = trees[slot].Get(static_cast<int>(local));
      if (score == kNoFit) continue;
      const NodeState& n = state.node(slot_nodes_[slot][local]);
      if (MemoryFits(n, t.gpu_milli, t.gpu_count, r.gpu_memory_mib))
        tree.Set(static_cast<int>(local), score);
    }
  }
  return v;
}

bool FragmentationPolicy::MemoryViewsMatch(const ClusterState& state) const {
  for (const MemoryView& view : mem_views_) {
    const TaskType& t = qtypes_[static_cast<size_t>(view.q)];
    const auto& trees = trees_[static_cast<size_t>(view.q)];
    for (size_t slot = 0; slot < slot_nodes_.size(); ++slot) {
      for (size_t local = 0; local < slot_nodes_[slot].size(); ++local) {
        const int i = static_cast<int>(local);
        const double score = slot < trees.size() ? trees[slot].Get(i) : kNoFit;
        const NodeState& n = state.node(slot_nodes_[slot][local]);
        const double want =
            score != kNoFit && MemoryFits(n, t.gpu_milli, t.gpu_count, view.gpu_memory) ? score
                                                                                        : kNoFit;
        const double got = slot < view.trees.size() ? view.trees[slot].Get(i) : kNoFit;
        if (got != want) return false;
      }
    }
  }
  return true;
}

MaxTree& FragmentationPolicy::TreeOf(int q, const NodeState& n) {
  auto& trees = trees_[static_cast<size_t>(q)];
  const size_t slot = static_cast<size_t>(n.model + 1);
  while (trees.size() <= slot) {
    trees.emplace_back();
    trees.back().Init(static_cast<int>(slot_nodes_[trees.size() - 1].size()));
  }
  return trees[slot];
}

int FragmentationPolicy::QueryType(const ClusterState& state, const PlacementRequest& r) {
  TaskType t = TypeOf(r);
  t.models = 0;
  auto [it, inserted] = qid_.try_emplace(KeyOf(t), static_cast<int>(qtypes_.size()));
  if (!inserted) return it->second;
  qtypes_.push_back(t);
  qmemory_.push_back(r.memory_mib);
  trees_.emplace_back();
  devices_.emplace_back(static_cast<size_t>(node_count_), int8_t{-1});
  // Nodes in one state score alike: each state's entry is computed once.
  type_memo_.Clear(1);
  for (int node = 0; node < node_count_; ++node) {
    const NodeState& n = state.node(node);
    double v = kNoFit;
    int8_t dev = -1;
    if (frag::Hopeless(n, t)) {
      TreeOf(it->second, n).Set(local_of_[static_cast<size_t>(node)], v);
      continue;
    }
    RowKey(n, opt_.share_plan ? &shares_[static_cast<size_t>(node)] : nullptr, &key_);
    const int known = type_memo_.Find(key_);
    if (known >= 0) {
      v = type_memo_.values(known)[0];
      dev = type_memo_.devices(known)[0];
    } else {
      const ModelView& view = ViewOf(n.model);
      Summarize(n, view, &summary_);
      EnsureFits(node);
      v = Entry(n, node, view, summary_, t, r.memory_mib, &dev);
      type_memo_.Add(key_, {&v, 1}, {&dev, 1});
    }
    TreeOf(it->second, n).Set(local_of_[static_cast<size_t>(node)], v);
    devices_.back()[node] = dev;
  }
  type_memo_.Clear(0);
  return it->second;
}

}  // namespace tessera::sched::frag
