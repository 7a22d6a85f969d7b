// Two small parts of the engine's bookkeeping, apart from it: the latency histograms /metrics
// serves (metrics.cc), and how often a submission may run the scheduling cycle itself
// (submit.cc).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

namespace tessera::api {

// A latency histogram for /metrics (metrics.cc): counts per fixed bucket (0.1 ms to 10 s, then
// +Inf; not cumulative here), their number and their sum, in integer microseconds.
struct LatencyHistogram {
  // Bucket bounds, in microseconds (0.1 ms to 10 s); +Inf follows.
  static constexpr std::array<int64_t, 16> kBoundsUs = {
      100,   250,    500,    1000,   2500,    5000,    10000,   25000,
      50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000};
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

// When the scheduling cycle runs: the periodic pass runs it once something changed that may let
// a job in or move one (Want), and at least every cycle period; a submission runs it itself
// (schedule_on_submit) unless a cycle started since it was queued, or its CycleBudget says the
// cycles behind a backlog hold the engine too long. Under the engine's mutex.
class CyclePacer {
 public:
  void Want() { wanted_ = true; }
  bool Due(int64_t now_ms, int64_t period_ms) const {
    return wanted_ || now_ms - last_ms_ >= period_ms;
  }
  int64_t Submitted() { return ++submissions_; }  // the submission's number
  // Whether submission number `mine` runs a cycle itself now (steady microseconds).
  bool SubmissionRuns(int64_t mine, int64_t now_us) const {
    return cycled_ < mine && budget_.Allows(now_us);
  }
  void Starting() { cycled_ = submissions_; }  // a cycle starts: it sees every one queued
  // A cycle ended at `now_ms` (steady `end_us`), took `took_us` and left `left_waiting` jobs.
  void Ran(int64_t now_ms, int64_t end_us, int64_t took_us, int64_t left_waiting) {
    budget_.Ran(end_us, took_us, left_waiting);
    last_ms_ = now_ms;
    wanted_ = false;
  }

 private:
  CycleBudget budget_;
  bool wanted_ = true;
  int64_t last_ms_ = 0;      // when the last cycle ended (the engine's clock)
  int64_t submissions_ = 0;  // submissions queued so far
  int64_t cycled_ = 0;       // how many of them the last cycle started after
};

}  // namespace tessera::api
