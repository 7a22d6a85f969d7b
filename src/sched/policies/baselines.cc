// The five baseline policies of the FGD paper's evaluation (PROTOCOL.md, section 5), written
// from their published descriptions. Scores are integers 0..100 as in the Kubernetes
// framework, so ties (and their seeded tie-break) behave as in the published runs.
#include <algorithm>
#include <array>
#include <vector>

#include "sched/policies/policies.h"

namespace tessera::sched {
namespace {

constexpr int64_t kMaxScore = 100;
constexpr double kMaxSpecCpu = 128000.0;  // milli-cores of the largest node, for scaling
constexpr double kMaxSpecGpu = 8000.0;    // milli-GPU of the largest node, for scaling

// The device with the least free compute that still fits a fractional request (first on
// ties), or -1 for whole-device and CPU-only requests.
int TightestDevice(const NodeState& n, const PlacementRequest& r) {
  if (!r.fractional()) return -1;
  int best = -1;
  for (int d = 0; d < n.device_count; ++d) {
    if (DeviceFits(n, d, r) && (best < 0 || n.gpu_free[d] < n.gpu_free[best])) best = d;
  }
  return best;
}

class RandomPolicy final : public Policy {
 public:
  std::string_view name() const override { return "random"; }
  bool NodeAdded(const ClusterState&, int) override { return true; }  // nothing kept per node
  bool Select(const ClusterState& state, const PlacementRequest& r, const SelectContext& ctx,
              Placement* out) override {
    feasible_.clear();
    for (int node = 0; node < state.node_count(); ++node) {
      if (NodeFits(state.node(node), r)) feasible_.push_back(node);
    }
    if (feasible_.empty()) return false;
    int node = feasible_[std::uniform_int_distribution<size_t>(0, feasible_.size() - 1)(*ctx.rng)];
    const NodeState& n = state.node(node);
    int dev = -1;
    if (r.fractional()) {
      devices_.clear();
      for (int d = 0; d < n.device_count; ++d) {
        if (DeviceFits(n, d, r)) devices_.push_back(d);
      }
      dev = devices_[std::uniform_int_distribution<size_t>(0, devices_.size() - 1)(*ctx.rng)];
    }
    FillPlacement(n, node, r, dev, out);
    return true;
  }

 private:
  std::vector<int> feasible_;
  std::vector<int> devices_;
};

// A policy whose node score is a function of the node and the request alone (nothing kept
// between calls); fractional requests go to the tightest device that fits.
using NodeScore = int64_t (*)(const NodeState& n, const PlacementRequest& r);
class StatelessScanPolicy final : public ScanPolicy {
 public:
  StatelessScanPolicy(std::string_view name, NodeScore score, bool normalize)
      : name_(name), score_(score), normalize_(normalize) {}
  std::string_view name() const override { return name_; }

 protected:
  bool normalize() const override { return normalize_; }
  int64_t Score(const NodeState& n, int, const PlacementRequest& r, const SelectContext&,
                int* device) override {
    *device = TightestDevice(n, r);
    return score_(n, r);
  }

 private:
  std::string_view name_;
  NodeScore score_;
  bool normalize_;
};

// Tetris-style alignment: the node whose free vector has the smallest dot product with the
// request wins.
int64_t DotProdScore(const NodeState& n, const PlacementRequest& r) {
  double dot = (static_cast<double>(n.cpu_free) / kMaxSpecCpu) *
                   (static_cast<double>(r.cpu_milli) / kMaxSpecCpu) +
               (static_cast<double>(n.gpu_free_total()) / kMaxSpecGpu) *
                   (static_cast<double>(r.total_gpu_milli()) / kMaxSpecGpu);
  return static_cast<int64_t>(static_cast<double>(kMaxScore) * (1.0 - dot / 2.0));
}

// GPU clustering: keep jobs of one kind (a share, or k whole devices) on the same nodes.
// Bands: 75-100 a node holding only this kind, 50-75 a mix including it, 25-50 a node with no
// GPU jobs, 0-25 otherwise; within a band, fuller nodes score higher. CPU-only jobs score 0.
class ClusteringPolicy final : public ScanPolicy {
 public:
  std::string_view name() const override { return "clustering"; }
  void Attach(const ClusterState& state, const SelectContext&) override {
    kinds_.assign(state.node_count(), Kinds{});
  }
  bool NodeAdded(const ClusterState& state, int) override {
    kinds_.resize(static_cast<size_t>(state.node_count()), Kinds{});
    return true;
  }
  void Reserved(const Placement& p, const PlacementRequest& r) override {
    int k = KindOf(r);
    if (k >= 0) ++kinds_[p.node][k];
  }
  void NodeChanged(const ClusterState& state, int node) override {
    // A node whose devices are all untouched again holds no GPU job of any kind.
    const NodeState& n = state.node(node);
    for (int d = 0; d < n.device_count; ++d) {
      if (n.gpu_holders[d] != 0) return;
    }
    kinds_[node] = Kinds{};
  }

 protected:
  int64_t Score(const NodeState& n, int node, const PlacementRequest& r, const SelectContext&,
                int* device) override {
    *device = TightestDevice(n, r);
    int kind = KindOf(r);
    if (kind < 0) return 0;
    const Kinds& k = kinds_[node];
    int distinct = 0;
    for (int c : k) distinct += c > 0 ? 1 : 0;
    int64_t fill = kMaxScore / 4 * (8000 - n.gpu_free_total()) / 8000;
    if (k[kind] > 0) return fill + (distinct == 1 ? kMaxScore * 3 / 4 : kMaxScore / 2);
    return fill + (distinct == 0 ? kMaxScore / 4 : 0);
  }

 private:
  using Kinds = std::array<int32_t, kMaxDevices + 1>;  // [0] shares, [k] k whole devices
  static int KindOf(const PlacementRequest& r) {
    if (r.gpu_count == 0) return -1;
    return r.fractional() ? 0 : std::min(r.gpu_count, kMaxDevices);
  }
  std::vector<Kinds> kinds_;
};

// GPU packing: first partially used devices (tightest), then used nodes' free devices, then
// idle nodes. CPU-only jobs score 0.
int64_t PackingScore(const NodeState& n, const PlacementRequest& r) {
  if (r.gpu_count == 0) return 0;
  const int free_devices = n.fully_free_devices();
  if (free_devices == n.device_count) {
    return std::max<int64_t>(kMaxScore / 3 - free_devices, free_devices);
  }
  // Devices in order of least free first, as many as the request needs.
  std::array<int, kMaxDevices> idx{};
  for (int d = 0; d < n.device_count; ++d) idx[d] = d;
  std::stable_sort(idx.begin(), idx.begin() + n.device_count,
                   [&](int a, int b) { return n.gpu_free[a] < n.gpu_free[b]; });
  int need = r.gpu_count, fresh = 0;
  int64_t free_pct_used = 0;
  for (int i = 0; i < n.device_count && need > 0; ++i) {
    int d = idx[i];
    if (!DeviceFits(n, d, r)) continue;
    --need;
    if (n.gpu_free[d] == kWholeGpu) ++fresh;
    free_pct_used += n.gpu_free[d] * 100 / kWholeGpu;
  }
  if (fresh > 0) return std::max<int64_t>(kMaxScore / 2 - fresh, kMaxScore / 3);
  return std::max<int64_t>(kMaxScore - free_pct_used / 10, kMaxScore / 2);
}

// Best fit: least CPU and GPU left over after placement, min-max normalised over nodes.
int64_t BestFitScore(const NodeState& n, const PlacementRequest& r) {
  double left = 0.5 * static_cast<double>(n.cpu_free - r.cpu_milli) / kMaxSpecCpu +
                0.5 * static_cast<double>(n.gpu_free_total() - r.total_gpu_milli()) / kMaxSpecGpu;
  return static_cast<int64_t>((1.0 - left) * static_cast<double>(kMaxScore));
}

}  // namespace

std::unique_ptr<Policy> NewRandomPolicy() { return std::make_unique<RandomPolicy>(); }
std::unique_ptr<Policy> NewDotProdPolicy() {
  return std::make_unique<StatelessScanPolicy>("dotprod", DotProdScore, /*normalize=*/false);
}
std::unique_ptr<Policy> NewClusteringPolicy() { return std::make_unique<ClusteringPolicy>(); }
std::unique_ptr<Policy> NewPackingPolicy() {
  return std::make_unique<StatelessScanPolicy>("packing", PackingScore, /*normalize=*/false);
}
std::unique_ptr<Policy> NewBestFitPolicy() {
  return std::make_unique<StatelessScanPolicy>("bestfit", BestFitScore, /*normalize=*/true);
}

}  // namespace tessera::sched
