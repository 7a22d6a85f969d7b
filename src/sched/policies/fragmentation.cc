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
// per model, not visited per node.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "sched/policies/fragmentation_rows.h"
#include "sched/policies/max_tree.h"
#include "sched/policies/policies.h"
#include "sched/policies/share_plan.h"

namespace tessera::sched {
namespace {

using frag::DeviceShares;
using frag::MixEntry;
using frag::ModelView;
using frag::RowKey;
using frag::RowMemo;
using frag::Summary;
using frag::ViewEntry;

using TypeKey = std::tuple<MilliCpu, MilliGpu, int, ModelMask>;
TypeKey KeyOf(const TaskType& t) { return {t.cpu_milli, t.gpu_milli, t.gpu_count, t.models}; }

// Whether a GPU of `model` (-1: none) satisfies a job's model constraint (0: any model).
bool ModelAllows(int model, ModelMask models) {
  return model >= 0 && (models == 0 || (models & (ModelMask{1} << model)) != 0);
}
bool ModelOk(const NodeState& n, ModelMask models) { return ModelAllows(n.model, models); }

class FragmentationPolicy final : public Policy {
 public:
  FragmentationPolicy(std::string name, FragmentationOptions opt, std::vector<WeightedType> mix)
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

  std::string_view name() const override { return name_; }

  void Attach(const ClusterState& state, const SelectContext& ctx) override {
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

  void Reserved(const Placement& p, const PlacementRequest& /*r*/) override {
    if (!opt_.share_plan || !IsShare(p)) return;
    DeviceShares& ds = shares_[static_cast<size_t>(p.node)][static_cast<size_t>(p.devices[0])];
    ds.jobs.insert(std::upper_bound(ds.jobs.begin(), ds.jobs.end(), p.gpu_milli), p.gpu_milli);
    ds.fit = plan_.FitOf(ds.jobs);
  }

  void Released(const Placement& p) override {
    if (!opt_.share_plan || !IsShare(p)) return;
    DeviceShares& ds = shares_[static_cast<size_t>(p.node)][static_cast<size_t>(p.devices[0])];
    const auto it = std::lower_bound(ds.jobs.begin(), ds.jobs.end(), p.gpu_milli);
    if (it != ds.jobs.end() && *it == p.gpu_milli) ds.jobs.erase(it);
    ds.fit = plan_.FitOf(ds.jobs);
  }

  void Observe(const PlacementRequest& r) override {
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

  bool Select(const ClusterState& state, const PlacementRequest& r, const SelectContext& /*ctx*/,
              Placement* out) override {
    if (dirty_) {
      Refresh(state);
    } else {
      RebuildSome(state);
    }
    const int q = QueryType(state, r);
    const ModelMask models = TypeOf(r).models;
    const bool charged = opt_.model_balance_weight != 0 && models == 0 && r.gpu_count > 0 &&
                         seen_constrained_gpu_ > 0;
    popped_.clear();
    bool found = false;
    while (true) {
      const int slot = BestSlot(q, models, charged ? r.total_gpu_milli() : 0);
      if (slot < 0) break;
      MaxTree& tree = trees_[q][static_cast<size_t>(slot)];
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
    for (const Popped& p : popped_) trees_[q][static_cast<size_t>(p.slot)].Set(p.local, p.value);
    return found;
  }

  // The model slot whose best node wins for type q among the models a job allows (0: any):
  // the highest score, less (for an unconstrained job of `gpu` milli-GPU) the charge for taking
  // from a model whose free share is below the cluster's; ties to the lowest rank. -1 when
  // nothing fits.
  int BestSlot(int q, ModelMask models, MilliGpu gpu) const {
    int best = -1, best_rank = 0;
    double best_v = kNoFit;
    const auto& trees = trees_[q];
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

  // In the score's units (quanta of milli-GPU): weight x the constrained share of the GPU
  // demand seen x gpu x (cluster free share - the model's free share).
  double ModelCharge(int slot, MilliGpu gpu) const {
    const double cap = static_cast<double>(model_cap_[static_cast<size_t>(slot)]);
    if (cap <= 0 || total_cap_ <= 0) return 0;
    const double mine = static_cast<double>(model_free_[static_cast<size_t>(slot)]) / cap;
    const double all = static_cast<double>(total_free_) / static_cast<double>(total_cap_);
    const double share = seen_gpu_ > 0 ? seen_constrained_gpu_ / seen_gpu_ : 0;
    const double charge =
        opt_.model_balance_weight * share * static_cast<double>(gpu) * (all - mine);
    return opt_.quantum_milli > 0 ? charge / static_cast<double>(opt_.quantum_milli) : charge;
  }

  // Keeps the free GPU per model slot (model + 1; slot 0: CPU-only nodes) in step with node.
  void TrackNode(const ClusterState& state, int node, bool add) {
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

  void NodeChanged(const ClusterState& state, int node) override {
    TrackNode(state, node, false);
    if (dirty_) return;  // every row is rebuilt before the next decision
    RecomputeNode(state, node);
  }

  // A node joining (it takes the last rank): one more leaf in every type's tree of its model and
  // one row computed (a rebuild would compute every node's rows).
  bool NodeAdded(const ClusterState& state, int node) override {
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
    if (!dirty_) RecomputeNode(state, node);
    return true;
  }

  // Appends node (next in rank order) to its model slot's leaves; returns the slot.
  size_t Enlist(const ClusterState& state, int node) {
    const size_t slot = static_cast<size_t>(state.node(node).model + 1);
    if (slot_nodes_.size() <= slot) slot_nodes_.resize(slot + 1);
    local_of_[static_cast<size_t>(node)] = static_cast<int>(slot_nodes_[slot].size());
    slot_nodes_[slot].push_back(node);
    return slot;
  }

 private:
  static inline const frag::NodeShares kNoShares{};

  void SetMix(const std::vector<WeightedType>& mix) {
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

  // The mix as nodes of `model` (-1: no GPU model) see it, made on first use after a mix change.
  const ModelView& ViewOf(int model) {
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
        auto [it, fresh] =
            shape.try_emplace({t.cpu_milli, t.gpu_milli, t.gpu_count}, v.runs.size());
        if (fresh) v.runs.push_back({t.cpu_milli, t.gpu_milli, t.gpu_count, 0});
        v.runs[it->second].w += e.w;
      }
      views_[slot] = std::move(v);
    }
    return *views_[slot];
  }

  void Refresh(const ClusterState& state) {
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

  // A decision spends at most about kRebuildEntries entries (node x type, the node's summary
  // counted as two) on stale rows: about 0.6 ms with 91 types on the development machine (~60 ns
  // an entry), against 60-80 ms for a whole 10,000-node cluster at once. A row copied from the
  // memo (a node in a state already seen) costs a quarter of one computed.
  static constexpr int64_t kRebuildEntries = 8192;
  static constexpr int64_t kNoBudget = std::numeric_limits<int64_t>::max();
  int64_t RowWidth() const { return static_cast<int64_t>(qtypes_.size()) + 2; }

  // Recomputes the next stale rows in rank order within `budget`. A row recomputed meanwhile
  // for a placement is merely redone.
  void RebuildSome(const ClusterState& state, int64_t budget = kRebuildEntries) {
    const int end = static_cast<int>(order_->size());
    for (; rebuild_next_ < end && budget > 0; ++rebuild_next_) {
      const bool copied = RecomputeNode(state, (*order_)[static_cast<size_t>(rebuild_next_)], true);
      budget -= copied ? RowWidth() / 4 + 1 : RowWidth();
      if (rebuild_next_ + 1 == end) memo_.Clear(0);
    }
  }

  // A share placement: part of one device.
  static bool IsShare(const Placement& p) {
    return p.device_count == 1 && p.gpu_milli > 0 && p.gpu_milli < kWholeGpu;
  }

  // Plans the shares from every fractional size seen; true when the plan changed (each
  // device's standing against it is then refreshed when its node is next read: EnsureFits).
  bool Replan() {
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

  // Brings the standing of node's devices against the plan up to the plan in use.
  void EnsureFits(int node) {
    uint32_t& gen = fits_gen_[static_cast<size_t>(node)];
    if (gen == plan_gen_) return;
    gen = plan_gen_;
    for (DeviceShares& ds : shares_[static_cast<size_t>(node)]) {
      if (!ds.jobs.empty()) ds.fit = plan_.FitOf(ds.jobs);
    }
  }

  // L1 distance between the mix in use and `other`.
  double MixDistance(const std::vector<WeightedType>& other) const {
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
  static constexpr double kSettled = 0.05;

  void Summarize(const NodeState& n, const ModelView& view, Summary* s) const {
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

  // Free GPU (milli) the node cannot feed with `have` of a resource at `per_gpu` per milli-GPU.
  static double Unfed(double have, MilliGpu gpu, double per_gpu) {
    return std::max(0.0, static_cast<double>(gpu) - have / per_gpu);
  }

  // Growth of the node's fragment when `q` (with host memory `memory`) lands on n taking
  // `device` (a fractional job) or whole devices (device < 0).
  double Delta(const NodeState& n, const ModelView& view, const Summary& s, const TaskType& q,
               MiB memory, int device) const {
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
    double delta =
        mix_w_ > 0 ? static_cast<double>(f_after - s.f) / static_cast<double>(mix_w_) : 0;
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

  // Higher is better.
  double ScoreOf(double delta) const {
    if (opt_.truncated_score) {
      // FGD: int64(100 * sigmoid(-delta / 1000)).
      return std::floor(100.0 / (1.0 + std::exp(delta / 1000.0)));
    }
    if (opt_.quantum_milli > 0) return -std::floor(delta / static_cast<double>(opt_.quantum_milli));
    return -delta;
  }

  // Best score of type q on node n and the device it uses (-1: whole devices / CPU only).
  double Entry(const NodeState& n, int node, const ModelView& view, const Summary& s,
               const TaskType& q, MiB memory, int8_t* device) const {
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
        same_seen =
            n.gpu_free[e] == n.gpu_free[d] && (!planned || shares[e].jobs == shares[d].jobs);
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

  // The device of n that fits r (GPU memory included) with the best score, tiers included.
  int BestFittingDevice(const NodeState& n, int node, const PlacementRequest& r,
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

  // Score of share type q on device d of n: the gradient's, below every better tier.
  double ShareScore(const NodeState& n, int node, const ModelView& view, const Summary& s,
                    const TaskType& q, MiB memory, int d) const {
    const double v = ScoreOf(Delta(n, view, s, q, memory, d));
    if (!opt_.share_plan || plan_.empty()) return v;
    const DeviceShares& ds = shares_[static_cast<size_t>(node)][static_cast<size_t>(d)];
    return v - kTier * Tier(n, ds, d, plan_.IndexOf(q.gpu_milli));
  }

  // Under a share plan: 0 for a device the job keeps on a pattern (or one outside every pattern
  // already, or a size the plan leaves free), 1 for an empty device, 2 for a device the job
  // would take off its pattern. A lower tier always wins.
  static int Tier(const NodeState& n, const DeviceShares& ds, int d, int size) {
    if (n.gpu_free[d] == kWholeGpu && ds.jobs.empty()) return 1;
    if (size < 0 || !ds.fit.planned) return 0;
    return (ds.fit.next >> size & 1) != 0 ? 0 : 2;
  }
  static constexpr double kTier = 1e12;  // far above any quantized delta

  // With `memo` (a rebuild), a row already computed for a node in the same state is copied;
  // returns whether it was.
  bool RecomputeNode(const ClusterState& state, int node, bool memo = false) {
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
    return known >= 0;
  }

  // Type q's tree for n's model (one per model slot, made on first use, each over that model's
  // nodes in rank order: a model's tree is as small as its share of the cluster).
  MaxTree& TreeOf(int q, const NodeState& n) {
    auto& trees = trees_[static_cast<size_t>(q)];
    const size_t slot = static_cast<size_t>(n.model + 1);
    while (trees.size() <= slot) {
      trees.emplace_back();
      trees.back().Init(static_cast<int>(slot_nodes_[trees.size() - 1].size()));
    }
    return trees[slot];
  }

  // The index of r's type less its model constraint, creating (and filling) its trees on first
  // sight. A job pinned to models scores every node as the unconstrained type does (the score
  // does not depend on the constraint) and is offered only those models' trees (BestSlot); so
  // constraints add no rows to compute. A type's host memory for the balance term is that of
  // the first request seen of it.
  int QueryType(const ClusterState& state, const PlacementRequest& r) {
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

  std::string name_;
  FragmentationOptions opt_;
  std::vector<MixEntry> mix_;
  int64_t mix_w_ = 0;                            // the mix's total weight
  std::vector<std::optional<ModelView>> views_;  // per model slot (model + 1)
  double cpu_per_gpu_ = 0;                       // milli-CPU per milli-GPU of the mix's GPU types
  double memory_per_gpu_ = 0;                    // MiB per milli-GPU of the GPU requests seen
  const std::vector<int>* rank_of_ = nullptr;
  const std::vector<int>* order_ = nullptr;  // nodes in rank order
  static constexpr int kNoRebuild = std::numeric_limits<int>::max();
  int rebuild_next_ = kNoRebuild;  // rows of order_ from here on are stale
  int node_count_ = 0;
  std::vector<std::vector<int>> slot_nodes_;  // per model slot, its nodes in rank order
  std::vector<int> local_of_;                 // node -> its index in its slot's list

  std::vector<TaskType> qtypes_;
  std::vector<MiB> qmemory_;
  std::map<TypeKey, int> qid_;
  std::vector<std::vector<MaxTree>> trees_;  // per type, per model slot
  std::vector<std::vector<int8_t>> devices_;
  Summary summary_;
  std::vector<double> row_;          // RecomputeNode's scores, one per type
  std::vector<int8_t> row_devices_;  // and devices
  RowMemo memo_;                     // rows by node state during a rebuild
  RowMemo type_memo_;                // a new type's entries by node state
  std::vector<int64_t> key_;         // RowKey's
  struct Popped {
    int slot, local;
    double value;
  };
  std::vector<Popped> popped_;
  // Free and total GPU per model slot and in all, and each node's free as last seen.
  std::vector<MilliGpu> model_cap_, model_free_, node_free_;
  MilliGpu total_cap_ = 0, total_free_ = 0;
  double seen_constrained_gpu_ = 0;
  SharePlan plan_;
  uint32_t plan_gen_ = 0;                 // bumped when the plan changes
  std::vector<uint32_t> fits_gen_;        // per node, the plan its devices' fits were made against
  std::vector<frag::NodeShares> shares_;  // per node, per device

  // What is learned from the stream.
  std::vector<std::pair<TaskType, int64_t>> seen_;
  std::map<TypeKey, size_t> seen_index_;
  int64_t seen_total_ = 0;
  int64_t next_refresh_ = 1;
  double seen_memory_ = 0, seen_gpu_ = 0;
  bool dirty_ = false;
};

}  // namespace

std::unique_ptr<Policy> NewFragmentationPolicy(std::string name, FragmentationOptions options,
                                               std::vector<WeightedType> mix) {
  return std::make_unique<FragmentationPolicy>(std::move(name), options, std::move(mix));
}

}  // namespace tessera::sched
