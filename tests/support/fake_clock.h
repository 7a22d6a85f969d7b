// A clock a test sets by hand: milliseconds since the epoch, read and moved from any thread.
// Hand AsClock() to whatever takes a clock (api::Engine::Open's api::Clock); the engine then sees
// exactly the time the test says, and time passes only when the test advances it.
//
//   FakeClock now(1'000'000);
//   auto e = Engine::Open(config, std::move(store), dir, now.AsClock());
//   now += 11'000;  // past a 10 s heartbeat timeout, without waiting for it
//
// It reads as an int64_t (`const int64_t t0 = now;`), so code written against a bare `int64_t
// now_` keeps compiling. It must outlive every clock AsClock() handed out.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>

namespace tessera::testing {

class FakeClock {
 public:
  explicit FakeClock(int64_t start_ms = 1'000'000) : now_ms_(start_ms) {}
  FakeClock(const FakeClock&) = delete;
  FakeClock& operator=(const FakeClock&) = delete;

  int64_t NowMs() const { return now_ms_.load(); }
  void SetMs(int64_t ms) { now_ms_.store(ms); }
  // Moves time forward (or back, for a test of a clock that steps back) by `ms`; the new time.
  int64_t AdvanceMs(int64_t ms) { return now_ms_.fetch_add(ms) + ms; }
  int64_t Advance(std::chrono::milliseconds d) { return AdvanceMs(d.count()); }

  // A clock reading this one (api::Clock is std::function<int64_t()>).
  std::function<int64_t()> AsClock() const {
    return [this] { return NowMs(); };
  }
  operator std::function<int64_t()>() const { return AsClock(); }

  // As a plain int64_t: `now_ = t0 + 10'000; now_ += 1000; f(now_)`.
  operator int64_t() const { return NowMs(); }
  FakeClock& operator=(int64_t ms) {
    SetMs(ms);
    return *this;
  }
  FakeClock& operator+=(int64_t ms) {
    AdvanceMs(ms);
    return *this;
  }
  FakeClock& operator-=(int64_t ms) {
    AdvanceMs(-ms);
    return *this;
  }

 private:
  std::atomic<int64_t> now_ms_;
};

}  // namespace tessera::testing
