// SilenceWatch: how long an agent has been silent, judged on a monotonic clock (the wall clock
// steps: NTP, a VM resumed, an administrator; a step forward longer than the heartbeat timeout
// would make every live node look silent), and whether the leader itself stopped watching.
//
// A pass that comes more than the stall bound after the previous one means the leader was not
// watching (stopped, starved of CPU, waiting on its store): the nodes' silence meanwhile may be
// its own deafness, so a fresh window starts, and no node is silent for longer than it.
// Not thread-safe: the engine calls it under its mutex.
#pragma once

#include <cstdint>
#include <functional>

namespace tessera::api {

class SilenceWatch {
 public:
  using Clock = std::function<int64_t()>;  // milliseconds
  SilenceWatch();                          // std::chrono::steady_clock
  // For tests: another clock; the watch starts over (no pass yet, no window).
  void SetClock(Clock monotonic);
  int64_t Now() const { return clock_(); }
  // A pass of the watch at monotonic time `now`: the time since the previous pass when that is
  // more than `stall_ms` (the leader stalled; a new window starts at `now`), else 0.
  int64_t Pass(int64_t now, int64_t stall_ms);
  // How long, at monotonic time `now`, a node last heard at `heard` has been silent: counted
  // from the current window's start at the earliest.
  int64_t SilentFor(int64_t heard, int64_t now) const;

 private:
  Clock clock_;
  int64_t last_pass_ = -1;   // the monotonic time of the last pass (-1: none yet)
  int64_t window_from_ = 0;  // no node is judged silent from before this (a stall's end)
};

}  // namespace tessera::api
