// A max segment tree over tie-break ranks, the index behind the fragmentation policies
// (fragmentation.cc): one leaf per node, the leftmost maximum wins.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

namespace tessera::sched {

inline constexpr double kNoFit = -std::numeric_limits<double>::infinity();

// Max segment tree over tie-break ranks; the leftmost maximum wins.
class MaxTree {
 public:
  void Init(int n) {
    size_ = 1;
    while (size_ < n) size_ <<= 1;
    t_.assign(2 * static_cast<size_t>(size_), kNoFit);
  }
  // Stops climbing where a parent's maximum is unchanged (its ancestors then are too): most
  // updates change a leaf that is not its subtree's maximum.
  void Set(int i, double v) {
    size_t p = static_cast<size_t>(i + size_);
    if (t_[p] == v) return;
    t_[p] = v;
    for (p >>= 1; p > 0; p >>= 1) {
      const double m = std::max(t_[2 * p], t_[2 * p + 1]);
      if (t_[p] == m) return;
      t_[p] = m;
    }
  }
  double Get(int i) const { return t_[static_cast<size_t>(i + size_)]; }
  // Asks the cache for the leaf and its nearest ancestors, which Set(i, ...) reads.
  void Prefetch(int i) const {
    for (size_t p = static_cast<size_t>(i + size_), k = 0; p > 0 && k < 4; p >>= 1, ++k)
      __builtin_prefetch(&t_[p]);
  }
  // Room for n leaves, the leaves kept (doubling: amortized O(1) per node added).
  void Grow(int n) {
    if (n <= size_) return;
    MaxTree bigger;
    bigger.Init(std::max(n, 2 * size_));
    for (int i = 0; i < size_; ++i) bigger.t_[static_cast<size_t>(i + bigger.size_)] = Get(i);
    for (size_t p = static_cast<size_t>(bigger.size_) - 1; p > 0; --p) {
      bigger.t_[p] = std::max(bigger.t_[2 * p], bigger.t_[2 * p + 1]);
    }
    *this = std::move(bigger);
  }
  // Rank of the leftmost maximum, or -1 when every leaf is kNoFit.
  int LeftmostMax() const {
    if (t_[1] == kNoFit) return -1;
    size_t p = 1;
    while (p < static_cast<size_t>(size_)) p = t_[2 * p] >= t_[2 * p + 1] ? 2 * p : 2 * p + 1;
    return static_cast<int>(p) - size_;
  }

 private:
  int size_ = 1;
  std::vector<double> t_;
};

}  // namespace tessera::sched
