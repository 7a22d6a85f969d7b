// Share plan: how the fractional GPU requests of a workload pack into whole devices.
//
// From the sizes seen and how often each came, a cutting-stock linear program (fewest devices
// holding every request, solved by column generation: a knapsack per priced column) gives a
// handful of patterns, device fillings such as {810, 160} or {470, 470}. A device whose jobs
// are part of some pattern is kept on a pattern: it takes next only sizes that still complete
// one. A size that would leave every pattern goes to an empty device instead, where the policy
// has one. Online bin packing that follows the optimum's patterns this way strands about as
// much as an offline packing that knows every job in advance (bench/POLICY_LOG.md).
//
// Only the most frequent kMaxPlannedSizes sizes are planned; the others are free to go anywhere.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "model/resources.h"

namespace tessera::sched {

inline constexpr int kMaxPlannedSizes = 63;  // a device's next sizes are a 64-bit mask
static_assert(kMaxPlannedSizes <= 64);

class SharePlan {
 public:
  // Plans from (size in milli-GPU, count) pairs; sizes outside 1..999 are ignored, a size
  // listed twice counts once with the counts summed.
  static SharePlan Solve(const std::vector<std::pair<MilliGpu, int64_t>>& counts);

  bool empty() const { return patterns_.empty(); }
  // Planned sizes, ascending.
  const std::vector<MilliGpu>& sizes() const { return sizes_; }
  // Index of `size` among sizes(), or -1 when it is not planned.
  int IndexOf(MilliGpu size) const;
  // The patterns in use in the optimum: per pattern, the count of each planned size.
  const std::vector<std::vector<int>>& patterns() const { return patterns_; }
  // Devices per pattern in the optimum (fractional) and the optimum's total.
  const std::vector<double>& uses() const { return uses_; }
  double devices() const { return devices_; }

  // Where a device holding `jobs` (sizes, any order) stands against the plan.
  struct Fit {
    bool planned = false;  // the jobs are part of at least one pattern
    uint64_t next = 0;     // bit i: sizes()[i] may join and stay within a pattern
  };
  Fit FitOf(std::span<const MilliGpu> jobs) const;

  friend bool operator==(const SharePlan& a, const SharePlan& b) {
    return a.sizes_ == b.sizes_ && a.patterns_ == b.patterns_;
  }

 private:
  std::vector<MilliGpu> sizes_;
  std::vector<std::vector<int>> patterns_;
  std::vector<double> uses_;
  double devices_ = 0;
};

}  // namespace tessera::sched
