// Private to the checker (checker.cc: events and safety; checker_liveness.cc: liveness,
// backfill, stability and fairness): what both judge a pending job by.
#pragma once

#include "verify/checker.h"

namespace tessera::verify::internal {

// The most: whole cards in full, a share its compute, a partition (whose size depends on the
// device) a whole card.
inline MilliGpu Nominal(const Want& w) {
  if (w.forms.size() == 1 && w.forms[0] == AllocationForm::kShare) return w.milli;
  return static_cast<MilliGpu>(w.count) * kWholeGpu;
}
}  // namespace tessera::verify::internal
