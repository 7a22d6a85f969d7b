// The cutting-stock LP behind SharePlan, by column generation.
//
//   minimise sum_p x_p  subject to  sum_p a_ip x_p = d_i (each size i),  x >= 0,
//
// a_ip the count of size i in pattern p (a device filling: sum_i size_i a_ip <= 1000). The
// revised simplex starts from the one-job patterns (basis = identity, x = d). Each round prices
// the duals y = 1 B^-1 and asks an unbounded knapsack (capacity 1000 milli-GPU, value y_i per
// job of size i) for the pattern of largest value; above 1 it enters the basis, else the basis
// is optimal. Sizes are at most kMaxPlannedSizes, so B^-1 is at most 63 x 63 and a round is a
// (1000 / the sizes' gcd) x sizes table: a plan costs a millisecond or two (at 20 sizes of gcd
// 1), made only when the learned mix moves.
#include "sched/policies/share_plan.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <numeric>

namespace tessera::sched {
namespace {

constexpr double kEps = 1e-9;

// The pattern of largest total value y under the device's capacity. The table counts capacity
// in units of `unit`, which divides the capacity and every size (their gcd: 10 on the openb
// traces): a capacity between two multiples holds what the lower one holds, so the table at the
// multiples alone gives the same values and the same choices, `unit` times faster.
std::vector<int> BestPattern(const std::vector<MilliGpu>& sizes, const std::vector<double>& y,
                             MilliGpu unit, double* value) {
  const size_t cap = static_cast<size_t>(kWholeGpu / unit);
  std::vector<double> best(cap + 1, 0.0);
  std::vector<int> choice(cap + 1, -1);  // -1: capacity c left unused from c - 1
  for (size_t c = 1; c <= cap; ++c) {
    best[c] = best[c - 1];
    for (size_t i = 0; i < sizes.size(); ++i) {
      const size_t s = static_cast<size_t>(sizes[i] / unit);
      if (s <= c && best[c - s] + y[i] > best[c] + kEps) {
        best[c] = best[c - s] + y[i];
        choice[c] = static_cast<int>(i);
      }
    }
  }
  std::vector<int> a(sizes.size(), 0);
  for (size_t c = cap; c > 0;) {
    if (choice[c] < 0) {
      --c;
    } else {
      ++a[static_cast<size_t>(choice[c])];
      c -= static_cast<size_t>(sizes[static_cast<size_t>(choice[c])] / unit);
    }
  }
  *value = best[cap];
  return a;
}

}  // namespace

SharePlan SharePlan::Solve(const std::vector<std::pair<MilliGpu, int64_t>>& counts) {
  std::map<MilliGpu, int64_t> by_size;
  for (const auto& [size, count] : counts) {
    if (size > 0 && size < kWholeGpu && count > 0) by_size[size] += count;
  }
  // The most frequent sizes, at most kMaxPlannedSizes of them (ties to the smaller size).
  std::vector<std::pair<MilliGpu, int64_t>> ranked(by_size.begin(), by_size.end());
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (ranked.size() > static_cast<size_t>(kMaxPlannedSizes)) ranked.resize(kMaxPlannedSizes);
  std::sort(ranked.begin(), ranked.end());

  SharePlan plan;
  const size_t k = ranked.size();
  if (k == 0) return plan;
  std::vector<double> d(k);
  MilliGpu unit = kWholeGpu;
  for (size_t i = 0; i < k; ++i) {
    plan.sizes_.push_back(ranked[i].first);
    d[i] = static_cast<double>(ranked[i].second);
    unit = std::gcd(unit, ranked[i].first);
  }

  // Basis: column j of B is basis[j]; binv = B^-1 (row-major), x = B^-1 d.
  std::vector<std::vector<int>> basis(k, std::vector<int>(k, 0));
  std::vector<double> binv(k * k, 0.0);
  for (size_t i = 0; i < k; ++i) {
    basis[i][i] = 1;
    binv[i * k + i] = 1;
  }
  std::vector<double> x = d, y(k), u(k);
  // Tolerances relative to the counts (a mix given as weights counts in units of 1e-9).
  const double eps = kEps * std::max(1.0, *std::max_element(d.begin(), d.end()));
  // Cutting-stock LPs are degenerate: stop after a bounded number of rounds, or of pivots in a
  // row that move nothing, with the (feasible) basis reached. A plan is made inside a
  // placement decision, so its cost must stay bounded.
  const int max_rounds = 20 * static_cast<int>(k) + 50;
  int stalled = 0;
  for (int round = 0; round < max_rounds; ++round) {
    // Duals: y = c_B B^-1 with every cost 1, i.e. the column sums of B^-1.
    std::fill(y.begin(), y.end(), 0.0);
    for (size_t r = 0; r < k; ++r) {
      for (size_t c = 0; c < k; ++c) y[c] += binv[r * k + c];
    }
    double value = 0;
    std::vector<int> a = BestPattern(plan.sizes_, y, unit, &value);
    if (value <= 1 + 1e-7) break;  // no pattern has a negative reduced cost: optimal
    if (std::find(basis.begin(), basis.end(), a) != basis.end()) break;  // rounding, not progress
    // u = B^-1 a; the leaving row by the ratio test (ties to the largest pivot).
    for (size_t r = 0; r < k; ++r) {
      double s = 0;
      for (size_t c = 0; c < k; ++c) s += binv[r * k + c] * a[c];
      u[r] = s;
    }
    int leave = -1;
    double best_ratio = 0;
    for (size_t r = 0; r < k; ++r) {
      if (u[r] <= kEps) continue;
      const double ratio = std::max(0.0, x[r]) / u[r];
      if (leave < 0 || ratio < best_ratio - eps ||
          (ratio <= best_ratio + eps && u[r] > u[static_cast<size_t>(leave)])) {
        leave = static_cast<int>(r);
        best_ratio = ratio;
      }
    }
    if (leave < 0) break;  // cannot happen with positive costs; stop rather than loop
    const size_t l = static_cast<size_t>(leave);
    const double theta = best_ratio;
    stalled = theta <= eps ? stalled + 1 : 0;
    if (stalled > 2 * static_cast<int>(k)) break;
    for (size_t r = 0; r < k; ++r) x[r] -= theta * u[r];
    x[l] = theta;
    const double pivot = u[l];
    for (size_t c = 0; c < k; ++c) binv[l * k + c] /= pivot;
    for (size_t r = 0; r < k; ++r) {
      if (r == l || u[r] == 0) continue;
      const double f = u[r];
      for (size_t c = 0; c < k; ++c) binv[r * k + c] -= f * binv[l * k + c];
    }
    basis[l] = std::move(a);
  }

  // The patterns in use, merged when the same pattern is basic twice (degenerate pivots).
  std::map<std::vector<int>, double> used;
  for (size_t j = 0; j < k; ++j) {
    if (x[j] > eps) used[basis[j]] += x[j];
  }
  for (auto& [pattern, uses] : used) {
    plan.patterns_.push_back(pattern);
    plan.uses_.push_back(uses);
    plan.devices_ += uses;
  }
  return plan;
}

int SharePlan::IndexOf(MilliGpu size) const {
  const auto it = std::lower_bound(sizes_.begin(), sizes_.end(), size);
  return it != sizes_.end() && *it == size ? static_cast<int>(it - sizes_.begin()) : -1;
}

SharePlan::Fit SharePlan::FitOf(std::span<const MilliGpu> jobs) const {
  Fit fit;
  std::vector<int> have(sizes_.size(), 0);
  for (MilliGpu s : jobs) {
    const int i = IndexOf(s);
    if (i < 0) return fit;  // an unplanned size: the device is outside every pattern
    ++have[static_cast<size_t>(i)];
  }
  for (const std::vector<int>& p : patterns_) {
    bool within = true;
    for (size_t i = 0; i < have.size() && within; ++i) within = have[i] <= p[i];
    if (!within) continue;
    fit.planned = true;
    for (size_t i = 0; i < have.size(); ++i) {
      if (p[i] > have[i]) fit.next |= uint64_t{1} << i;
    }
  }
  return fit;
}

}  // namespace tessera::sched
