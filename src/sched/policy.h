// Placement policies: small plugins, looked up by name, that choose among feasible nodes.
//
// The pipeline (scheduler.h) runs the named steps: filter (ResourceFit, GpuModel, GpuFit)
// -> score (the policy) -> reserve. A policy sees only the cluster state and the request; it
// never reaches a store, an API or a backend.
//
// Two ways to write a policy:
//  - ScanPolicy: give each feasible node a score; the highest wins and ties go to the first
//    node in the seeded tie-break order. Simple, O(nodes) per decision.
//  - Policy::Select directly, for policies that keep their own index (fgd, tessera).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sched/cluster_state.h"

namespace tessera::sched {

// Fits the request on the node at all (CPU, memory, model, devices)? Shared by every policy.
bool NodeFits(const NodeState& n, const PlacementRequest& r);
// The number of devices on `n` that could hold one share of the request.
int DevicesThatFit(const NodeState& n, const PlacementRequest& r);
bool DeviceFits(const NodeState& n, int d, const PlacementRequest& r);
// Fills p with the first `gpu_count` devices that fit (whole-device jobs) or with device `d`
// (fractional jobs, d >= 0). REQUIRES: NodeFits.
void FillPlacement(const NodeState& n, int node, const PlacementRequest& r, int d, Placement* p);

// What every policy may read besides the state: the seeded tie-break order and a seeded RNG.
struct SelectContext {
  const std::vector<int>* order = nullptr;    // node ids in tie-break order
  const std::vector<int>* rank_of = nullptr;  // rank_of[node] = position in `order`
  std::mt19937_64* rng = nullptr;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  // Called once, before the first decision.
  virtual void Attach(const ClusterState& state, const SelectContext& ctx) {
    (void)state;
    (void)ctx;
  }
  // Sees every arriving request before it is placed, whether it will fit or not. This is all a
  // live engine may learn from.
  virtual void Observe(const PlacementRequest& r) { (void)r; }
  // Chooses a feasible node and devices. Returns false only when no node fits.
  virtual bool Select(const ClusterState& state, const PlacementRequest& r,
                      const SelectContext& ctx, Placement* out) = 0;
  // The pipeline reserved `p` for `r` (called before NodeChanged).
  virtual void Reserved(const Placement& p, const PlacementRequest& r) {
    (void)p;
    (void)r;
  }
  // The pipeline gave `p` back (called before NodeChanged).
  virtual void Released(const Placement& p) { (void)p; }
  // The state of `node` changed (a reserve or a release).
  virtual void NodeChanged(const ClusterState& state, int node) {
    (void)state;
    (void)node;
  }
  // `node` joined the state (appended, empty; ctx's order and ranks already include it). Returns
  // false when the policy cannot take it in place: the caller then builds a new scheduler.
  virtual bool NodeAdded(const ClusterState& state, int node) {
    (void)state;
    (void)node;
    return false;
  }
};

// A policy that scores each feasible node independently.
class ScanPolicy : public Policy {
 public:
  bool NodeAdded(const ClusterState&, int) override { return true; }  // nothing kept per node
  bool Select(const ClusterState& state, const PlacementRequest& r, const SelectContext& ctx,
              Placement* out) override;

 protected:
  // Score of placing r on node n (higher is better) and the device to use for a fractional
  // request (-1 for whole-device and CPU-only requests). REQUIRES: NodeFits(n, r).
  virtual int64_t Score(const NodeState& n, int node, const PlacementRequest& r,
                        const SelectContext& ctx, int* device) = 0;
  // When true, scores are min-max normalised to 0..100 over the feasible nodes with integer
  // division before the winner is chosen (the Kubernetes NormalizeScore step).
  virtual bool normalize() const { return false; }
};

// One task type of the workload and its share of the mix (a weight, not a capacity).
struct TaskType {
  MilliCpu cpu_milli = 0;
  MilliGpu gpu_milli = 0;
  int gpu_count = 0;
  ModelMask models = 0;
  friend bool operator==(const TaskType&, const TaskType&) = default;
};
struct WeightedType {
  TaskType type;
  double weight = 0;  // sums to 1 over a mix
  int64_t count = 0;  // the requests behind the weight, when counted (TypicalMix): exact sums
};
TaskType TypeOf(const PlacementRequest& r);

// The "typical" mix of a list of requests: group by type, most popular first, keep types until
// they cover `coverage` of the requests, renormalise. (FGD's target workload.)
std::vector<WeightedType> TypicalMix(const std::vector<PlacementRequest>& requests,
                                     double coverage = 0.95);

struct PolicyConfig {
  // For fgd and tessera-oracle: the target workload, known up front.
  std::vector<WeightedType> target_mix;
};

// Names: random, dotprod, clustering, packing, bestfit, fgd, tessera (the default),
// tessera-oracle. Unknown names fail with the list of known ones.
Result<std::unique_ptr<Policy>> MakePolicy(std::string_view name, const PolicyConfig& config);
const std::vector<std::string>& PolicyNames();
inline constexpr std::string_view kDefaultPolicy = "tessera";

}  // namespace tessera::sched
