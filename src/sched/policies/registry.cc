#include <string>

#include "sched/policies/policies.h"

namespace tessera::sched {

const std::vector<std::string>& PolicyNames() {
  static const std::vector<std::string> kNames = {
      "random", "dotprod", "clustering", "packing", "bestfit", "fgd", "tessera", "tessera-oracle"};
  return kNames;
}

Result<std::unique_ptr<Policy>> MakePolicy(std::string_view name, const PolicyConfig& config) {
  if (name == "random") return NewRandomPolicy();
  if (name == "dotprod") return NewDotProdPolicy();
  if (name == "clustering") return NewClusteringPolicy();
  if (name == "packing") return NewPackingPolicy();
  if (name == "bestfit") return NewBestFitPolicy();
  if (name == "fgd" || name == "tessera-oracle") {
    if (config.target_mix.empty()) {
      return Status::InvalidArgument("policy '" + std::string(name) +
                                     "' needs the target workload mix up front");
    }
  }
  if (name == "fgd") {
    return NewFragmentationPolicy("fgd", {.truncated_score = true, .quantum_milli = 0},
                                  config.target_mix);
  }
  // Tessera's default: the fragmentation gradient over the mix learned online, plus the CPU,
  // memory and model balance terms, with near-ties packed first-fit (bench/POLICY_LOG.md).
  const FragmentationOptions tessera{.truncated_score = false,
                                     .quantum_milli = 10,
                                     .online_mix = true,
                                     .cpu_balance_weight = 1.0,
                                     .memory_balance_weight = 1.0,
                                     .model_balance_weight = 8.0,
                                     .share_plan = true};
  if (name == "tessera") return NewFragmentationPolicy("tessera", tessera, {});
  if (name == "tessera-oracle") {
    FragmentationOptions oracle = tessera;
    oracle.online_mix = false;
    return NewFragmentationPolicy("tessera-oracle", oracle, config.target_mix);
  }
  std::string known;
  for (const std::string& n : PolicyNames()) known += (known.empty() ? "" : ", ") + n;
  return Status::InvalidArgument("unknown policy '" + std::string(name) + "' (known: " + known +
                                 ")");
}

}  // namespace tessera::sched
