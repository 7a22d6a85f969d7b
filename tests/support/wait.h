// Waiting for something to happen, instead of sleeping and hoping it did.
//
// WaitFor(condition, timeout): polls `condition` until it holds or the deadline passes; returns
// whether it held. For what the test cannot be told about: a real process's state, a file, a
// server's answer. It returns as soon as the condition holds, so a generous timeout costs nothing
// when the code works; assert on its result (ASSERT_TRUE(WaitFor(...)) << what was seen).
//
// Latch: threads of the test's own process tell each other something happened (CountDown), and
// the waiter waits with a deadline (WaitFor) or without one (Wait). Use it when the code under
// test runs a callback or a hook the test controls: no polling at all.
//
// A sleep is left only where the test is about time passing (a timeout must expire, a process
// must stay idle); say so in a comment beside it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace tessera::testing {

template <typename Condition>
bool WaitFor(Condition condition, std::chrono::milliseconds timeout,
             std::chrono::milliseconds poll = std::chrono::milliseconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(poll);
  }
}

// Counts down from `count`; open (its waiters released) at zero. Unlike std::latch, a wait can
// have a deadline, and counting down past zero is harmless.
class Latch {
 public:
  explicit Latch(int count = 1) : count_(count) {}
  Latch(const Latch&) = delete;
  Latch& operator=(const Latch&) = delete;

  void CountDown(int n = 1) {
    std::lock_guard<std::mutex> l(mu_);
    count_ = count_ > n ? count_ - n : 0;
    if (count_ == 0) cv_.notify_all();
  }
  bool IsOpen() const {
    std::lock_guard<std::mutex> l(mu_);
    return count_ == 0;
  }
  void Wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return count_ == 0; });
  }
  // Whether it opened within `timeout`.
  bool WaitFor(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, timeout, [this] { return count_ == 0; });
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int count_;
};

}  // namespace tessera::testing
