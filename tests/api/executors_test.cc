// BackendExecutors against a fake pass: one backend's pass that hangs holds up its own thread
// only; failures are reported once per change; Stop joins every thread.
#include "api/executors.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

namespace tessera::api {
namespace {

// A latch the hanging pass waits on, released by the test.
class Gate {
 public:
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    entered_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return open_; });
  }
  void WaitEntered() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return entered_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false, open_ = false;
};

TEST(BackendExecutorsTest, AHangingBackendHoldsUpOnlyItsOwnThread) {
  Gate gate;
  std::atomic<int> fast{0};
  std::mutex fast_mu;
  std::condition_variable fast_cv;
  BackendExecutors ex(
      {"slurm", "pbs"},
      [&](const std::string& b) {
        if (b == "slurm") {
          gate.Wait();
        } else {
          ++fast;
          fast_cv.notify_all();
        }
        return Status::Ok();
      },
      1, nullptr);
  ex.Start();
  gate.WaitEntered();  // slurm's thread is inside its pass, and stays there
  {
    std::unique_lock<std::mutex> lock(fast_mu);
    fast_cv.wait(lock, [&] { return fast.load() >= 20; });  // pbs goes on passing meanwhile
  }
  EXPECT_EQ(ex.Passes("slurm"), 0);
  EXPECT_GE(ex.Passes("pbs"), 19);
  gate.Open();
  ex.Stop();
  EXPECT_EQ(ex.Passes("slurm"), 1);
  EXPECT_EQ(ex.Passes("unknown"), 0);
}

TEST(BackendExecutorsTest, FailuresAreReportedOncePerChange) {
  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;
  std::vector<std::string> reports;
  // Passes 1-3 fail with one error, 4 with another, then all succeed.
  BackendExecutors ex(
      {"slurm"},
      [&](const std::string&) {
        std::lock_guard<std::mutex> lock(mu);
        ++calls;
        cv.notify_all();
        if (calls <= 3) return Status::Internal("squeue: timed out");
        if (calls == 4) return Status::Internal("squeue: refused");
        return Status::Ok();
      },
      1,
      [&](const std::string& b, const Status& st) {
        std::lock_guard<std::mutex> lock(mu);
        reports.push_back(b + ": " + (st.ok() ? "ok" : st.message()));
      });
  ex.Start();
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return calls >= 10; });
  }
  ex.Stop();
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_EQ(reports[0], "slurm: squeue: timed out");
  EXPECT_EQ(reports[1], "slurm: squeue: refused");
  EXPECT_EQ(reports[2], "slurm: ok");
}

TEST(BackendExecutorsTest, StopWakesThreadsWaitingOutALongPeriod) {
  std::atomic<int> passes{0};
  BackendExecutors ex(
      {"kubernetes"},
      [&](const std::string&) {
        ++passes;
        return Status::Ok();
      },
      3'600'000, nullptr);
  ex.Start();
  while (ex.Passes("kubernetes") < 1) std::this_thread::yield();
  ex.Stop();  // returns without waiting out the hour
  EXPECT_EQ(passes.load(), 1);
}

}  // namespace
}  // namespace tessera::api
