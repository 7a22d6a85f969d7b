// The p-th percentile (0-100, nearest rank) of a benchmark's samples; 0 when there are none.
#pragma once

#include <algorithm>
#include <vector>

namespace tessera::bench {

inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size())))];
}

}  // namespace tessera::bench
