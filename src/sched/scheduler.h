// Scheduler: the placement pipeline over one ClusterState.
//
//   filter  (ResourceFit: CPU and host memory; GpuModel: the request's models; GpuFit: devices
//            with room for the per-device share) -> score (the policy) -> reserve.
//
// A placement failure is a result, not an error: kUnschedulableNow (it would fit an emptier
// cluster) is distinct from kNeverSchedulable (no node could hold it even empty), and both
// name the step that said no. Deterministic: same state, seed and requests, same decisions.
//
// Thread-safety: none.
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "sched/cluster_state.h"
#include "sched/policy.h"

namespace tessera::sched {

enum class Outcome { kPlaced, kUnschedulableNow, kNeverSchedulable };
const char* OutcomeName(Outcome o);

struct PlacementResult {
  Outcome outcome = Outcome::kPlaced;
  Placement placement;  // valid when placed
  std::string step;     // the step that said no: "ResourceFit", "GpuModel", "GpuFit"
  std::string reason;   // for people
  bool placed() const { return outcome == Outcome::kPlaced; }
};

class Scheduler {
 public:
  // `seed` fixes the tie-break order of nodes and the policy's random choices.
  Scheduler(ClusterState state, std::unique_ptr<Policy> policy, uint64_t seed);

  // Runs the pipeline and, on success, reserves the placement in the state.
  PlacementResult Place(const PlacementRequest& r);
  // Gives back a placement returned by Place. REQUIRES: not released before.
  void Release(const Placement& p);
  // Reserves a placement decided earlier (recovery after a restart). Refuses, changing
  // nothing, one that does not fit the current state: that would be a double allocation.
  Status Adopt(const Placement& p);
  // A node joining: appended to the state, last in the tie-break order, and taken into the
  // policy's indexes in place (O(the node), not O(the cluster)). FailedPrecondition when the
  // policy cannot (build a new scheduler then); the node's own errors as FromNodes gives them.
  Status AddNode(const Node& n);

  const ClusterState& state() const { return state_; }
  const Policy& policy() const { return *policy_; }

 private:
  PlacementResult Diagnose(const PlacementRequest& r) const;

  ClusterState state_;
  std::unique_ptr<Policy> policy_;
  std::mt19937_64 rng_;
  std::vector<int> order_;
  std::vector<int> rank_of_;
  SelectContext ctx_;
};

}  // namespace tessera::sched
