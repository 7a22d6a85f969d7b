// Two small parts of the engine's bookkeeping, apart from it: the latency histograms /metrics
// serves (metrics.cc), and how often a submission may run the scheduling cycle itself
// (submit.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

namespace tessera::api {

// A latency histogram for /metrics (metrics.cc): counts per fixed bucket (0.1 ms to 10 s, then
// +Inf; not cumulative here), their number and their sum, in integer microseconds.
struct LatencyHistogram {
  std::vector<int64_t> counts;  // empty until the first observation
  int64_t count = 0;
  int64_t sum_us = 0;
  void Observe(int64_t us);
};

// How often a submission may run the scheduling cycle itself (schedule_on_submit). A cycle is
// cheap while few jobs wait, and then runs for every submission. Behind a backlog each one walks
// thousands of waiting jobs, and 200 submissions/s kept the engine locked (heartbeats and every
// other request waiting behind cycles). So after a cycle that took kLong or more and left
// kBacklog or more jobs waiting, none runs on submission before its end plus kIdle times its
// length: such cycles hold the engine at most a tenth of the time. What arrives meanwhile is
// scheduled by the first submission after that (it cycles for all queued before it) or by the
// periodic pass. Microseconds of a steady clock.
class CycleBudget {
 public:
  static constexpr int64_t kLong = 2000;
  static constexpr int64_t kBacklog = 1000;
  static constexpr int64_t kIdle = 9;
  void Ran(int64_t end_us, int64_t took_us, int64_t left_waiting) {
    not_before_us_ = took_us >= kLong && left_waiting >= kBacklog ? end_us + kIdle * took_us : 0;
  }
  bool Allows(int64_t now_us) const { return now_us >= not_before_us_; }
  static int64_t NowUs() {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

 private:
  int64_t not_before_us_ = 0;
};

}  // namespace tessera::api
