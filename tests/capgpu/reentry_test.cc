// A driver beneath the cap library that calls its own public entry points from inside others,
// through their exported symbols (so, under LD_PRELOAD, through the library's wrappers): the
// stand-in driver with FAKECUDA_REENTER=1 (fake_cuda.cc). Its asynchronous copies call the
// synchronous ones, which is what the swap itself uses: the watcher must never wait on its own
// gate. A nested call is the outer call's: not charged, credited, counted or gated a second time.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <map>
#include <string>

#include "capgpu/region.h"
#include "support/wait.h"
#include "swap_probe_process.h"

namespace tessera::capgpu {
namespace {

constexpr uint64_t kMiB = 1ULL << 20;

class ReentryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/capgpu-reentry-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    region_path_ = dir_ + "/region";
  }
  void TearDown() override {
    unlink(region_path_.c_str());
    rmdir(dir_.c_str());
  }
  // A region with a cap of 256 MiB, swapping on or off.
  void Create(bool swap) {
    LimitList l;
    l.count = 1;
    l.bytes[0] = 256 * kMiB;
    ASSERT_EQ(CreateRegionFile(region_path_.c_str(), l, 0600, false), 0);
    ASSERT_EQ(region_.Open(region_path_.c_str()), 0);
    if (!swap) return;
    RegionLock lock(region_);
    ASSERT_TRUE(ConfigureSwap(region_.data(), kNoLimit, ""));
  }
  std::map<std::string, std::string> Env() const {
    return {{"LD_PRELOAD", CAPGPU_LIBRARY},
            {"LD_LIBRARY_PATH", CAPGPU_FAKE_DRIVER_DIR},
            {"TESSERA_CAPGPU_REGION", region_path_},
            {"FAKECUDA_REENTER", "1"}};
  }
  // Asks for `target` and waits 5 s at most (a deadlocked watcher never settles).
  bool Settle(SwapTarget target, SwapSummary* s) {
    EXPECT_TRUE(RequestSwap(region_, target));
    return WaitSwapSettled(region_, 5000, s);
  }
  uint64_t Charged() {
    RegionLock lock(region_);
    return region_.data().used[0];
  }
  uint64_t DeviceUsed(Probe& p) {
    const std::string line = p.Ask("devused");
    return strtoull(line.c_str() + strlen("devused "), nullptr, 10);
  }

  std::string dir_, region_path_;
  Region region_;
};

// Issue 38's case: the swap's own copies are asynchronous, and this driver's asynchronous copies
// call the synchronous entry point, which is gated. Swap-out, a prefetch and a demand swap-in
// (brought back by the application's own asynchronous copy) all complete, byte for byte.
TEST_F(ReentryTest, SwapOutAndInCompleteWhenAsyncCopiesCallTheSynchronousEntryPoint) {
  Create(/*swap=*/true);
  Probe p(CAPGPU_SWAP_PROBE, Env());
  ASSERT_EQ(p.Ask("alloc a 16MiB"), "alloc a 0");
  ASSERT_EQ(p.Ask("vmm v 4MiB keep"), "vmm v 0");
  EXPECT_EQ(p.Ask("afill a 7"), "afill a 0");
  EXPECT_EQ(p.Ask("afill v 8"), "afill v 0");
  SwapSummary s;
  ASSERT_TRUE(Settle(SwapTarget::kHold, &s)) << "the swap-out never finished (watcher deadlocked)";
  EXPECT_EQ(s.swapped, 1u);
  EXPECT_EQ(s.host_bytes, 20 * kMiB);
  EXPECT_EQ(DeviceUsed(p), 0u);
  ASSERT_TRUE(Settle(SwapTarget::kResident, &s)) << "the prefetch never finished";
  EXPECT_EQ(s.resident, 1u);
  EXPECT_EQ(p.Ask("acheck a 7"), "acheck a ok");
  EXPECT_EQ(p.Ask("check v 8"), "check v ok");
  // Out again; the application's asynchronous copy brings the share back on its own thread.
  ASSERT_TRUE(Settle(SwapTarget::kOut, &s));
  EXPECT_EQ(s.swapped, 1u);
  EXPECT_EQ(p.Ask("acheck a 7", 5000), "acheck a ok") << "the demand swap-in never finished";
  EXPECT_EQ(DeviceUsed(p), 20 * kMiB);
  EXPECT_EQ(Charged(), 20 * kMiB) << "copies charge nothing, nested or not";
}

// Threads inside asynchronous copies (each of which calls the synchronous one) wait at the gate
// while the share is held out and proceed after, with their bytes intact.
TEST_F(ReentryTest, ThreadsInNestedCopiesWaitAtTheGateThenProceed) {
  Create(/*swap=*/true);
  Probe p(CAPGPU_SWAP_PROBE, Env());
  ASSERT_EQ(p.Ask("alloc a 8MiB"), "alloc a 0");
  ASSERT_EQ(p.Ask("fill a 9"), "fill a 0");
  ASSERT_EQ(p.Ask("threads 3 a 9 async"), "threads 3");
  SwapSummary s;
  ASSERT_TRUE(Settle(SwapTarget::kHold, &s)) << "the swap-out never finished";
  EXPECT_EQ(s.swapped, 1u);
  const std::string before = p.SettledLoops();
  usleep(200 * 1000);
  EXPECT_EQ(p.Ask("loops"), before) << "no copy may pass while the share is held out";
  ASSERT_TRUE(Settle(SwapTarget::kResident, &s));
  // Resident again, the threads go on: waited for (a loaded machine took longer than 100 ms).
  EXPECT_TRUE(tessera::testing::WaitFor([&] { return p.Ask("loops") != before; },
                                        std::chrono::milliseconds(10000)))
      << "the threads never passed the gate again";
  const std::string stop = p.Ask("stop");
  EXPECT_NE(stop.find("errors=0"), std::string::npos) << stop;
}

// An allocation inside an allocation (this driver's stream-ordered allocator calls cuMemAlloc_v2)
// is charged once, at the size asked for, and its free inside a free (cuMemFreeAsync calls
// cuMemFree_v2) credits it once; with swapping on, the nested cuMemAlloc_v2 must not become a
// range of the library's either.
class NestedAllocation : public ReentryTest, public ::testing::WithParamInterface<bool> {};

TEST_P(NestedAllocation, IsChargedAndCreditedOnce) {
  Create(/*swap=*/GetParam());
  Probe p(CAPGPU_SWAP_PROBE, Env());
  ASSERT_EQ(p.Ask("async b 3MiB"), "async b 0");
  EXPECT_EQ(Charged(), 3 * kMiB);
  EXPECT_EQ(DeviceUsed(p), 3 * kMiB);
  ASSERT_EQ(p.Ask("alloc a 2MiB"), "alloc a 0");
  EXPECT_EQ(Charged(), 5 * kMiB);
  EXPECT_EQ(p.Ask("freeasync b"), "freeasync b 0");
  EXPECT_EQ(Charged(), 2 * kMiB);
  EXPECT_EQ(p.Ask("free a"), "free a 0");
  EXPECT_EQ(Charged(), 0u);
  EXPECT_EQ(DeviceUsed(p), 0u);
}

INSTANTIATE_TEST_SUITE_P(SwapOnAndOff, NestedAllocation, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? "Swapping" : "NotSwapping";
                         });

// A launch inside a launch (cuLaunchKernel_ptsz calls cuLaunchKernel) runs the kernel once and is
// counted once in the region (the agent's activity signal).
TEST_F(ReentryTest, ALaunchInsideALaunchRunsAndCountsOnce) {
  Create(/*swap=*/true);
  Probe p(CAPGPU_SWAP_PROBE, Env());
  ASSERT_EQ(p.Ask("alloc a 2MiB"), "alloc a 0");
  ASSERT_EQ(p.Ask("fill a 1"), "fill a 0");
  EXPECT_EQ(p.Ask("launch_ptsz a"), "launch_ptsz a 0");
  EXPECT_EQ(p.Ask("check a 2"), "check a ok");
  EXPECT_EQ(__atomic_load_n(&region_.data().launches, __ATOMIC_RELAXED), 1u);
}

}  // namespace
}  // namespace tessera::capgpu
