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

// Fragmentation-gradient policies (fragmentation.cc).
struct FragmentationOptions {
  // FGD's published scoring: floor(100 * sigmoid(-delta / 1000)), so deltas within a few
  // hundredths of a GPU tie. Off: the exact delta decides.
  bool truncated_score = false;
  // Learn the workload mix from the requests seen so far (a live engine) instead of taking
  // it up front.
  bool online_mix = false;
  // Tessera's refinements (see bench/POLICY_LOG.md for what each buys).
  bool tessera_terms = false;
};
std::unique_ptr<Policy> NewFragmentationPolicy(std::string name, FragmentationOptions options,
                                               std::vector<WeightedType> mix);

}  // namespace tessera::sched
