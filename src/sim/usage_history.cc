// Normalize and Analyze (usage_history.h).
#include "sim/usage_history.h"

#include <algorithm>
#include <map>

namespace tessera::sim::usage {
namespace {
constexpr int64_t kMaxSpanMs = 10LL * 366 * 86'400'000;
constexpr int64_t kMaxSteps = 20'000'000;
}  // namespace

Status Normalize(History* h, int64_t step_ms, int64_t max_gap_ms) {
  if (h->workloads.empty()) return Status::InvalidArgument("no samples");
  h->gaps = h->gap_ms = h->resets = h->duplicates = h->restarts = h->samples = 0;
  std::map<int64_t, int64_t> deltas;  // interval -> how often
  for (Series& w : h->workloads) {
    if (w.team.empty()) w.team = "-";
    auto& ss = w.samples;
    for (size_t i = 1; i < ss.size(); ++i) h->resets += ss[i].t_ms < ss[i - 1].t_ms;
    std::stable_sort(ss.begin(), ss.end(),
                     [](const Sample& a, const Sample& b) { return a.t_ms < b.t_ms; });
    // Samples at one time: merged, the later one's fields first.
    size_t out = 0;
    for (size_t i = 0; i < ss.size(); ++i) {
      if (out > 0 && ss[out - 1].t_ms == ss[i].t_ms) {
        Sample& k = ss[out - 1];
        if ((k.util_pm >= 0 && ss[i].util_pm >= 0) || (k.mem_mib >= 0 && ss[i].mem_mib >= 0))
          ++h->duplicates;
        if (ss[i].util_pm >= 0) k.util_pm = ss[i].util_pm;
        if (ss[i].mem_mib >= 0) k.mem_mib = ss[i].mem_mib;
      } else {
        ss[out++] = ss[i];
      }
    }
    ss.resize(out);
    h->samples += static_cast<int64_t>(out);
    for (size_t i = 1; i < ss.size(); ++i) {
      ++deltas[ss[i].t_ms - ss[i - 1].t_ms];
      if (ss[i].mem_mib == 0 && ss[i - 1].mem_mib > 0 && i + 1 < ss.size() && ss[i + 1].mem_mib > 0)
        ++h->restarts;
    }
  }
  if (step_ms <= 0) {
    step_ms = 60'000;  // a lone sample per workload: the DCGM exporter's usual minute
    int64_t best = 0;
    for (const auto& [d, n] : deltas) {
      if (n > best) {
        best = n;
        step_ms = d;
      }
    }
  }
  if (step_ms > kMaxSpanMs) return Status::InvalidArgument("the step is longer than 10 years");
  h->step_ms = step_ms;
  h->max_gap_ms = max_gap_ms > 0 ? max_gap_ms : 3 * step_ms;
  if (h->max_gap_ms < h->step_ms) h->max_gap_ms = h->step_ms;
  bool first = true;
  for (const Series& w : h->workloads) {
    if (w.samples.empty()) continue;
    const int64_t a = w.samples.front().t_ms, b = w.samples.back().t_ms + h->step_ms;
    h->start_ms = first ? a : std::min(h->start_ms, a);
    h->end_ms = first ? b : std::max(h->end_ms, b);
    first = false;
  }
  if (first) return Status::InvalidArgument("no samples");
  // Bounds that keep every product exact in 64 bits and the lower bounds' grid in memory.
  if (h->end_ms - h->start_ms > kMaxSpanMs) {
    return Status::InvalidArgument(
        "the samples span more than 10 years: are the timestamps "
        "in seconds?");
  }
  if ((h->end_ms - h->start_ms) / h->step_ms > kMaxSteps) {
    return Status::InvalidArgument("more than 20,000,000 sampling steps (" +
                                   std::to_string(h->step_ms) + " ms each): give a longer --step");
  }
  for (const Series& w : h->workloads) {
    for (size_t i = 1; i < w.samples.size(); ++i) {
      const int64_t d = w.samples[i].t_ms - w.samples[i - 1].t_ms;
      if (d > h->max_gap_ms) {
        ++h->gaps;
        h->gap_ms += d - h->max_gap_ms;
      }
    }
  }
  return Status::Ok();
}

WorkloadStats Analyze(const Series& s, int64_t step_ms, int64_t max_gap_ms,
                      int32_t active_util_pm) {
  WorkloadStats r;
  if (s.samples.empty()) return r;
  const auto& ss = s.samples;
  r.present_ms = ss.back().t_ms + step_ms - ss.front().t_ms;
  int64_t util_ms = 0;  // per-mille x ms
  for (size_t i = 0; i < ss.size(); ++i) {
    const int64_t next = i + 1 < ss.size() ? ss[i + 1].t_ms : ss[i].t_ms + step_ms;
    const int64_t to = ss[i].t_ms + std::min(next - ss[i].t_ms, max_gap_ms);
    const Sample& x = ss[i];
    r.peak_mem_mib = std::max(r.peak_mem_mib, x.mem_mib);
    if (x.util_pm > 0) util_ms += int64_t{x.util_pm} * (to - x.t_ms);
    const bool active = x.util_pm >= 0 ? x.util_pm >= active_util_pm : x.mem_mib > 0;
    if (!active) continue;
    r.active_ms += to - x.t_ms;
    if (!r.active.empty() && r.active.back().to_ms == x.t_ms) {
      r.active.back().to_ms = to;
    } else {
      r.active.push_back({x.t_ms, to});
    }
  }
  r.used_gpu_milli_ms = util_ms * s.gpus;
  if (r.present_ms > 0) {
    r.duty_pm = static_cast<int32_t>((r.active_ms * 1000 + r.present_ms - 1) / r.present_ms);
    r.mean_util_pm = static_cast<int32_t>((util_ms + r.present_ms - 1) / r.present_ms);
  }
  std::vector<int64_t> idle;
  int64_t from = ss.front().t_ms;
  for (const Span& a : r.active) {
    if (a.from_ms > from) idle.push_back(a.from_ms - from);
    from = a.to_ms;
  }
  const int64_t end = ss.back().t_ms + step_ms;
  if (end > from) idle.push_back(end - from);
  r.idle_spans = static_cast<int64_t>(idle.size());
  if (!idle.empty()) {
    std::sort(idle.begin(), idle.end());
    r.idle_longest_ms = idle.back();
    r.idle_median_ms = idle[idle.size() / 2];
  }
  return r;
}

}  // namespace tessera::sim::usage
