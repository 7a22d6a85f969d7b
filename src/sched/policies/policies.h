// Factories of the built-in placement policies (the registry lives in registry.cc).
#pragma once

#include <memory>

#include "sched/policy.h"

namespace tessera::sched {

std::unique_ptr<Policy> NewRandomPolicy();
std::unique_ptr<Policy> NewDotProdPolicy();
std::unique_ptr<Policy> NewClusteringPolicy();
std::unique_ptr<Policy> NewPackingPolicy();
std::unique_ptr<Policy> NewBestFitPolicy();

// Fragmentation-gradient policies (fragmentation.cc). bench/POLICY_LOG.md records what each
// option buys on the openb traces.
struct FragmentationOptions {
  // FGD's published scoring: floor(100 * sigmoid(-delta / 1000)), so deltas within a few
  // hundredths of a GPU tie and go to the first node in the tie-break order.
  bool truncated_score = false;
  // Otherwise the delta is rounded down to this many milli-GPU before comparing (0: exact).
  // Near-ties then go to the first node in the fixed order, which packs like first-fit.
  int64_t quantum_milli = 10;
  // Learn the workload mix from the requests seen so far (a live engine) instead of taking
  // it up front.
  bool online_mix = false;
  // Balance terms: free GPU a node can no longer feed with CPU (or host memory), at the
  // workload's CPU-per-GPU (memory-per-GPU) ratio, counts as fragment with this weight.
  double cpu_balance_weight = 0;
  double memory_balance_weight = 0;
  // Model balance: an unconstrained GPU job pays weight x (the constrained share of the GPU
  // demand seen) x its milli-GPU x (the cluster's free share - its model's free share), so it
  // leaves room on the models that constrained jobs need. 0: off.
  double model_balance_weight = 0;
  // Share plan (share_plan.h): fractional jobs keep each device on a pattern of the packing
  // planned from the sizes seen; a job that would take a device off every pattern goes to an
  // empty device instead, where one fits.
  bool share_plan = false;
  // GPU-memory views (fragmentation_internal.h): a request that asks for GPU memory finds its
  // best node among those with room for that memory in one query. The same decisions as without
  // (off: nodes without the memory are skipped one by one); off only to compare the two.
  bool gpu_memory_views = true;
};
std::unique_ptr<Policy> NewFragmentationPolicy(std::string name, FragmentationOptions options,
                                               std::vector<WeightedType> mix);

}  // namespace tessera::sched
