// Isolation grades (issue 38): how strongly a grant is kept apart from other work on its device,
// weakest first. "none": a share with no cap at all; "preload": a share capped by the cap library
// alone (src/capgpu); "mps": MPS with a per-client memory limit and active-thread percentage;
// "driver": a memory limit the driver enforces; "hardware": a partition of its own (MIG, AMD) or
// a whole device. A queue may require a minimum; a grant records the grade it got.
//
// Thread-safety: constants and pure functions.
#pragma once

#include <string>
#include <string_view>

namespace tessera {

inline constexpr const char* kIsolationGrades[] = {"none", "preload", "mps", "driver", "hardware"};
inline constexpr int kIsolationHardware = 4;

// The grade's rank (none 0 ... hardware 4); -1 for a name that is none of them.
inline int IsolationRank(std::string_view grade) {
  for (int i = 0; i <= kIsolationHardware; ++i) {
    if (grade == kIsolationGrades[i]) return i;
  }
  return -1;
}

// The grade's name; "" for a rank out of range.
inline std::string IsolationName(int rank) {
  return rank >= 0 && rank <= kIsolationHardware ? kIsolationGrades[rank] : "";
}

}  // namespace tessera
