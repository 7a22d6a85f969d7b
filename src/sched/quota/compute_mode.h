// Compute modes of shares on the quota engine's devices (issue 38; QueueSpec::compute_percent).
// Internal to src/sched/quota, beside engine_impl.h. Thread-safety: pure functions.
#pragma once

#include <algorithm>

#include "sched/quota/engine_impl.h"

namespace tessera::quota::internal {

// Whether a share of compute mode `percent` (0: time-slicing) may join device `d`: one mode per
// device (d.sm_sum > 0 exactly when its shares are sm-sharing, each at least 1%); an sm-sharing
// one only where MPS runs, the percentages summing to at most 100 with it. Exact integers.
inline bool ComputeModeFits(const Dev& d, int percent) {
  if (percent == 0) return d.sm_sum == 0;
  return d.mps && (d.shares.empty() || d.sm_sum > 0) && d.sm_sum + percent <= 100;
}

// The isolation grade (model/isolation.h rank) a share of mode `percent` gets on `d`: an
// sm-sharing one runs under MPS (2, or the device's grade if higher) where the device offers it.
inline int ShareGrade(const Dev& d, int percent) {
  return percent > 0 && d.mps ? std::max(d.isolation, 2) : d.isolation;
}

}  // namespace tessera::quota::internal
