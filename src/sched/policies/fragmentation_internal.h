// Private to the fragmentation policy (fragmentation.cc: its hooks, the mix and the share plan;
// fragmentation_index.cc: decisions, scores and rows): the FragmentationPolicy class. The method
// is described in fragmentation.cc. A method declared inline here is defined in the one file that
// calls it, so that it is inlined as when the class was defined in one file.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "sched/policies/fragmentation_rows.h"
#include "sched/policies/max_tree.h"
#include "sched/policies/policies.h"
#include "sched/policies/share_plan.h"

namespace tessera::sched::frag {

using TypeKey = std::tuple<MilliCpu, MilliGpu, int, ModelMask>;
inline TypeKey KeyOf(const TaskType& t) {
  return {t.cpu_milli, t.gpu_milli, t.gpu_count, t.models};
}

// Whether a GPU of `model` (-1: none) satisfies a job's model constraint (0: any model).
inline bool ModelAllows(int model, ModelMask models) {
  return model >= 0 && (models == 0 || (models & (ModelMask{1} << model)) != 0);
}
inline bool ModelOk(const NodeState& n, ModelMask models) { return ModelAllows(n.model, models); }

class FragmentationPolicy final : public Policy {
 public:
  FragmentationPolicy(std::string name, FragmentationOptions opt, std::vector<WeightedType> mix);

  std::string_view name() const override { return name_; }

  void Attach(const ClusterState& state, const SelectContext& ctx) override;

  void Reserved(const Placement& p, const PlacementRequest& /*r*/) override;

  void Released(const Placement& p) override;

  void Observe(const PlacementRequest& r) override;

  bool Select(const ClusterState& state, const PlacementRequest& r, const SelectContext& /*ctx*/,
              Placement* out) override;

  // The model slot whose best node wins in `trees` (type q's, per model slot, or a GPU-memory
  // view of them) among the models a job allows (0: any): the highest score, less (for an
  // unconstrained job of `gpu` milli-GPU) the charge for taking from a model whose free share is
  // below the cluster's; ties to the lowest rank. -1 when nothing fits.
  inline int BestSlot(const std::vector<MaxTree>& trees, ModelMask models, MilliGpu gpu) const;

  // Whether n has `count` devices each with `gpu` milli-GPU and `memory` MiB of GPU memory free
  // (what NodeFits asks of the devices).
  static inline bool MemoryFits(const NodeState& n, MilliGpu gpu, int count, MiB memory);

  // Whether a view's leaf for every node equals what it stands for (its type's score where the
  // node has the memory, else kNoFit): for tests, against a recount from the state.
  bool MemoryViewsMatch(const ClusterState& state) const;

  // In the score's units (quanta of milli-GPU): weight x the constrained share of the GPU
  // demand seen x gpu x (cluster free share - the model's free share).
  inline double ModelCharge(int slot, MilliGpu gpu) const;

  // Keeps the free GPU per model slot (model + 1; slot 0: CPU-only nodes) in step with node.
  inline void TrackNode(const ClusterState& state, int node, bool add);

  void NodeChanged(const ClusterState& state, int node) override;

  // A node joining (it takes the last rank): one more leaf in every type's tree of its model and
  // one row computed (a rebuild would compute every node's rows).
  bool NodeAdded(const ClusterState& state, int node) override;

  // Appends node (next in rank order) to its model slot's leaves; returns the slot.
  inline size_t Enlist(const ClusterState& state, int node);

 private:
  static inline const frag::NodeShares kNoShares{};

  inline void SetMix(const std::vector<WeightedType>& mix);

  // The mix as nodes of `model` (-1: no GPU model) see it, made on first use after a mix change.
  inline const ModelView& ViewOf(int model);

  void Refresh(const ClusterState& state);

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
  static inline bool IsShare(const Placement& p);

  // Plans the shares from every fractional size seen; true when the plan changed (each
  // device's standing against it is then refreshed when its node is next read: EnsureFits).
  inline bool Replan();

  // Brings the standing of node's devices against the plan up to the plan in use.
  inline void EnsureFits(int node);

  // L1 distance between the mix in use and `other`.
  inline double MixDistance(const std::vector<WeightedType>& other) const;
  static constexpr double kSettled = 0.05;

  inline void Summarize(const NodeState& n, const ModelView& view, Summary* s) const;

  // Free GPU (milli) the node cannot feed with `have` of a resource at `per_gpu` per milli-GPU.
  static inline double Unfed(double have, MilliGpu gpu, double per_gpu);

  // Growth of the node's fragment when `q` (with host memory `memory`) lands on n taking
  // `device` (a fractional job) or whole devices (device < 0).
  inline double Delta(const NodeState& n, const ModelView& view, const Summary& s,
                      const TaskType& q, MiB memory, int device) const;

  // Higher is better.
  inline double ScoreOf(double delta) const;

  // Best score of type q on node n and the device it uses (-1: whole devices / CPU only).
  inline double Entry(const NodeState& n, int node, const ModelView& view, const Summary& s,
                      const TaskType& q, MiB memory, int8_t* device) const;

  // The device of n that fits r (GPU memory included) with the best score, tiers included.
  inline int BestFittingDevice(const NodeState& n, int node, const PlacementRequest& r,
                               const TaskType& q);

  // Score of share type q on device d of n: the gradient's, below every better tier.
  inline double ShareScore(const NodeState& n, int node, const ModelView& view, const Summary& s,
                           const TaskType& q, MiB memory, int d) const;

  // Under a share plan: 0 for a device the job keeps on a pattern (or one outside every pattern
  // already, or a size the plan leaves free), 1 for an empty device, 2 for a device the job
  // would take off its pattern. A lower tier always wins.
  static inline int Tier(const NodeState& n, const DeviceShares& ds, int d, int size);
  static constexpr double kTier = 1e12;  // far above any quantized delta

  // With `memo` (a rebuild), a row already computed for a node in the same state is copied;
  // returns whether it was.
  bool RecomputeNode(const ClusterState& state, int node, bool memo = false);

  // Type q's tree for n's model (one per model slot, made on first use, each over that model's
  // nodes in rank order: a model's tree is as small as its share of the cluster).
  inline MaxTree& TreeOf(int q, const NodeState& n);

  // The GPU-memory view of type q for r's GPU memory (created and filled on first sight, at most
  // kMaxMemoryViews of them), or -1 when r asks for none (or views are off or all taken).
  inline int MemoryViewOf(const ClusterState& state, int q, const PlacementRequest& r);
  // View v's tree for model slot `slot`, made on first use.
  inline MaxTree& ViewTreeOf(int v, size_t slot);
  // After node's row was set: its leaf in every view of every type.
  void SyncViews(const NodeState& n, int node);

  // The index of r's type less its model constraint, creating (and filling) its trees on first
  // sight. A job pinned to models scores every node as the unconstrained type does (the score
  // does not depend on the constraint) and is offered only those models' trees (BestSlot); so
  // constraints add no rows to compute. A type's host memory for the balance term is that of
  // the first request seen of it.
  inline int QueryType(const ClusterState& state, const PlacementRequest& r);

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
  // GPU-memory views. A type's score does not depend on the GPU memory a request asks for, so a
  // share asking for more memory than the devices with its compute free have (A100-40GB cards
  // holding two 16 GiB shares, 600 milli-GPU free) found the type's best nodes unfit and popped
  // them one by one, again for every request: 22% of `tessera bench cycle --models 4`. A view
  // is a type q and a GPU memory m: per model slot, a tree over the same nodes holding q's score
  // where the node has MemoryFits(q's compute and count, m), else kNoFit. Its best node is the
  // first node of q's trees that the pops would have reached: the same decision in one query.
  struct MemoryView {
    int q = 0;
    MiB gpu_memory = 0;
    std::vector<MaxTree> trees;  // per model slot, as trees_[q]
  };
  static constexpr size_t kMaxMemoryViews = 64;
  std::vector<MemoryView> mem_views_;
  std::map<std::pair<int, MiB>, int> view_id_;
  std::vector<std::vector<int>> type_mem_views_;  // per type, its views
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

}  // namespace tessera::sched::frag
