// Swapping end to end: capgpu_swap_probe processes under LD_PRELOAD of the cap library, against
// the stand-in driver (fake_cuda.cc), whose virtual-memory API is real host memory: a device
// pointer is a host address, a swapped-out range is unmapped (touching it would be a segfault),
// and the stand-in's device bytes in use show what a swap gave back.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "capgpu/region.h"
#include "support/wait.h"
#include "swap_probe_process.h"

extern char** environ;

namespace tessera::capgpu {
namespace {

constexpr uint64_t kMiB = 1ULL << 20;

class SwapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/capgpu-swap-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    region_path_ = dir_ + "/region";
    swap_dir_ = dir_ + "/swap";
    ASSERT_EQ(mkdir(swap_dir_.c_str(), 0700), 0);
  }
  void TearDown() override {
    unlink(region_path_.c_str());
    unlink((dir_ + "/device").c_str());
    rmdir(swap_dir_.c_str());
    rmdir(dir_.c_str());
  }
  // A region with a cap of `limit`, swapping on.
  void Create(uint64_t limit, uint64_t swap_ram = kNoLimit, bool disk = false) {
    LimitList l;
    l.count = 1;
    l.bytes[0] = limit;
    ASSERT_EQ(CreateRegionFile(region_path_.c_str(), l, 0600, false), 0);
    ASSERT_EQ(region_.Open(region_path_.c_str()), 0);
    RegionLock lock(region_);
    ASSERT_TRUE(ConfigureSwap(region_.data(), swap_ram, disk ? swap_dir_.c_str() : ""));
  }
  std::map<std::string, std::string> Env() const {
    return {{"LD_PRELOAD", CAPGPU_LIBRARY},
            {"LD_LIBRARY_PATH", CAPGPU_FAKE_DRIVER_DIR},
            {"TESSERA_CAPGPU_REGION", region_path_}};
  }
  SwapSummary Settle(SwapTarget target, int64_t timeout_ms = 10000) {
    EXPECT_TRUE(RequestSwap(region_, target));
    SwapSummary s;
    EXPECT_TRUE(WaitSwapSettled(region_, timeout_ms, &s));
    return s;
  }
  uint64_t DeviceUsed(Probe& p) {
    std::string line = p.Ask("devused");
    return strtoull(line.c_str() + strlen("devused "), nullptr, 10);
  }
  uint32_t ReadU32(const uint32_t& field) {
    RegionLock lock(region_);
    return field;
  }

  std::string dir_, region_path_, swap_dir_;
  Region region_;
};

TEST_F(SwapTest, EveryAllocationKindSurvivesSwapByteForByteAtTheSameAddress) {
  Create(256 * kMiB);
  Probe p(CAPGPU_SWAP_PROBE, Env());
  EXPECT_EQ(p.Ask("alloc a 5MiB"), "alloc a 0");
  EXPECT_EQ(p.Ask("pitch b 1000 300"), "pitch b 0 1024");
  EXPECT_EQ(p.Ask("vmm c 4MiB keep"), "vmm c 0");
  EXPECT_EQ(p.Ask("vmm d 6MiB release"), "vmm d 0");
  std::map<std::string, std::string> addr;
  for (std::string n : {"a", "b", "c", "d"}) {
    EXPECT_EQ(p.Ask("fill " + n + " " + std::to_string(n[0])), "fill " + n + " 0");
    addr[n] = p.Ask("addr " + n);
  }
  const uint64_t resident = DeviceUsed(p);
  EXPECT_EQ(resident, (6 + 2 + 4 + 6) * kMiB);  // a and b rounded to the 2 MiB granularity

  SwapSummary out = Settle(SwapTarget::kHold);
  EXPECT_EQ(out.swapped, 1u);
  EXPECT_EQ(out.resident_bytes, 0u);
  EXPECT_EQ(out.host_bytes, resident);
  EXPECT_EQ(DeviceUsed(p), 0u) << "the device memory must be given back while swapped";

  SwapSummary in = Settle(SwapTarget::kResident);
  EXPECT_EQ(in.resident, 1u);
  EXPECT_EQ(in.host_bytes, 0u);
  EXPECT_EQ(DeviceUsed(p), resident);
  for (std::string n : {"a", "b", "c", "d"}) {
    EXPECT_EQ(p.Ask("check " + n + " " + std::to_string(n[0])), "check " + n + " ok");
    EXPECT_EQ(p.Ask("addr " + n), addr[n]);
  }
  // The kernel sees the swapped-in bytes, and a second round trip keeps its result.
  EXPECT_EQ(p.Ask("kernel a"), "kernel a 0");
  Settle(SwapTarget::kHold);
  Settle(SwapTarget::kResident);
  EXPECT_EQ(p.Ask("check a " + std::to_string('a' + 1)), "check a ok");
  // Frees after a swap release everything, the handle the framework kept included.
  for (std::string n : {"a", "b", "c", "d"}) EXPECT_EQ(p.Ask("free " + n), "free " + n + " 0");
  EXPECT_EQ(DeviceUsed(p), 0u);
  RegionLock lock(region_);
  EXPECT_EQ(region_.data().used[0], 0u) << "every charge credited back";
}

TEST_F(SwapTest, DriverCallsDuringASwapWaitThenProceed) {
  Create(64 * kMiB);
  Probe p(CAPGPU_SWAP_PROBE, Env());
  EXPECT_EQ(p.Ask("alloc a 16MiB"), "alloc a 0");
  EXPECT_EQ(p.Ask("fill a 9"), "fill a 0");
  EXPECT_EQ(p.Ask("threads 4 a 9"), "threads 4");
  SwapSummary out = Settle(SwapTarget::kHold);
  EXPECT_EQ(out.swapped, 1u);
  // Held out: the four threads sit at the gate (once the checks already past it are counted).
  const std::string before = p.SettledLoops();
  usleep(300 * 1000);  // time passing is the point: nothing may get through meanwhile
  EXPECT_EQ(p.Ask("loops"), before) << "no driver call may pass while swapped out";
  {
    SwapSummary s;
    WaitSwapSettled(region_, 0, &s);
    EXPECT_GE(s.gate_waits, 1u);
  }
  Settle(SwapTarget::kResident);
  // Resident again, the threads go on: waited for (a loaded machine took longer than 100 ms).
  EXPECT_TRUE(tessera::testing::WaitFor([&] { return p.Ask("loops") != before; },
                                        std::chrono::milliseconds(10000)))
      << "the threads never passed the gate again";
  const std::string stop = p.Ask("stop");
  EXPECT_NE(stop.find("errors=0"), std::string::npos) << stop;
}

// Threads allocating and freeing while swap-outs start: a thread already inside the driver that
// wants the library's tables is waited for without the watcher holding them, so every swap-out
// completes at once (it used to wait its 10 s drain timeout and give up as "busy").
TEST_F(SwapTest, SwapOutsCompleteWhileThreadsAllocateAndFree) {
  Create(64 * kMiB);
  Probe p(CAPGPU_SWAP_PROBE, Env());
  EXPECT_EQ(p.Ask("alloc a 16MiB"), "alloc a 0");
  EXPECT_EQ(p.Ask("fill a 3"), "fill a 0");
  EXPECT_EQ(p.Ask("churn 4"), "churn 4");
  for (int round = 0; round < 5; ++round) {
    usleep(20 * 1000);
    SwapSummary out = Settle(SwapTarget::kHold, 3000);
    EXPECT_EQ(out.unswappable, 0u) << "round " << round;
    EXPECT_EQ(out.swapped, 1u) << "round " << round;
    SwapSummary in = Settle(SwapTarget::kResident, 3000);
    EXPECT_EQ(in.resident, 1u) << "round " << round;
  }
  const std::string stop = p.Ask("stop");
  EXPECT_NE(stop.find("errors=0"), std::string::npos) << stop;
  EXPECT_EQ(p.Ask("check a 3"), "check a ok");
}

TEST_F(SwapTest, ADriverCallBringsASwappedShareBack) {
  Create(64 * kMiB);
  Probe p(CAPGPU_SWAP_PROBE, Env());
  EXPECT_EQ(p.Ask("alloc a 3MiB"), "alloc a 0");
  EXPECT_EQ(p.Ask("fill a 5"), "fill a 0");
  EXPECT_EQ(Settle(SwapTarget::kOut).swapped, 1u);
  EXPECT_EQ(DeviceUsed(p), 0u);
  EXPECT_EQ(p.Ask("check a 5"), "check a ok");  // waits for the swap-in, never sees an error
  EXPECT_EQ(DeviceUsed(p), 4 * kMiB);
  RegionLock lock(region_);
  EXPECT_EQ(region_.data().swap_target, static_cast<uint32_t>(SwapTarget::kResident));
  EXPECT_EQ(region_.data().demand_wakes, 1u);
}

TEST_F(SwapTest, DiskTierTakesWhatTheHostRamBudgetCannot) {
  Create(64 * kMiB, /*swap_ram=*/4 * kMiB, /*disk=*/true);
  Probe p(CAPGPU_SWAP_PROBE, Env());
  EXPECT_EQ(p.Ask("alloc a 4MiB"), "alloc a 0");
  EXPECT_EQ(p.Ask("alloc b 20MiB"), "alloc b 0");
  EXPECT_EQ(p.Ask("fill a 1"), "fill a 0");
  EXPECT_EQ(p.Ask("fill b 2"), "fill b 0");
  SwapSummary out = Settle(SwapTarget::kHold);
  EXPECT_EQ(out.host_bytes, 4 * kMiB);
  EXPECT_EQ(out.disk_bytes, 20 * kMiB);
  // The swap file is unlinked from the start: nothing in the directory, one deleted file held.
  DIR* d = opendir(swap_dir_.c_str());
  ASSERT_NE(d, nullptr);
  int entries = 0;
  while (dirent* e = readdir(d)) entries += e->d_name[0] != '.';
  closedir(d);
  EXPECT_EQ(entries, 0);
  Settle(SwapTarget::kResident);
  EXPECT_EQ(p.Ask("check a 1"), "check a ok");
  EXPECT_EQ(p.Ask("check b 2"), "check b ok");
}

TEST_F(SwapTest, TwoProcessesOfOneShareSwapTogether) {
  Create(64 * kMiB);
  Probe p1(CAPGPU_SWAP_PROBE, Env()), p2(CAPGPU_SWAP_PROBE, Env());
  EXPECT_EQ(p1.Ask("alloc a 6MiB"), "alloc a 0");
  EXPECT_EQ(p2.Ask("vmm a 8MiB keep"), "vmm a 0");
  EXPECT_EQ(p1.Ask("fill a 11"), "fill a 0");
  EXPECT_EQ(p2.Ask("fill a 22"), "fill a 0");
  SwapSummary out = Settle(SwapTarget::kOut);
  EXPECT_EQ(out.processes, 2u);
  EXPECT_EQ(out.swapped, 2u);
  EXPECT_EQ(out.host_bytes, 14 * kMiB);
  // One process's call wakes the share: the other comes back too (its watcher prefetches).
  EXPECT_EQ(p1.Ask("check a 11"), "check a ok");
  SwapSummary s;
  EXPECT_TRUE(WaitSwapSettled(region_, 10000, &s));
  EXPECT_EQ(s.resident, 2u);
  EXPECT_EQ(p2.Ask("check a 22"), "check a ok");
}

TEST_F(SwapTest, SigkillDuringASwapLeavesNoLockSlotOrHostMemoryBehind) {
  Create(256 * kMiB);
  auto env = Env();
  env["FAKECUDA_COPY_US"] = "50000";  // 8 MiB chunks: a 64 MiB swap takes ~400 ms
  Probe p(CAPGPU_SWAP_PROBE, env);
  EXPECT_EQ(p.Ask("alloc a 64MiB"), "alloc a 0");
  ASSERT_TRUE(RequestSwap(region_, SwapTarget::kHold));
  // Wait for the copy to be under way, then kill.
  std::string state_at_kill;
  for (int i = 0; i < 2000 && state_at_kill.empty(); ++i) {
    {
      RegionLock lock(region_);
      if (region_.data().host_used > 0)
        state_at_kill = SwapStateName(region_.data().slots[0].swap_state);
    }
    usleep(1000);
  }
  ASSERT_EQ(state_at_kill, "swapping-out");
  kill(p.pid(), SIGKILL);
  waitpid(p.pid(), nullptr, 0);
  p.Killed();
  SwapSummary s;
  EXPECT_TRUE(WaitSwapSettled(region_, 1000, &s));  // takes the lock: never left held
  EXPECT_EQ(s.processes, 0u);
  RegionLock lock(region_);
  ASSERT_TRUE(lock.held());
  EXPECT_EQ(region_.data().host_used, 0u);
  EXPECT_EQ(region_.data().used[0], 0u);
  EXPECT_EQ(region_.data().slots_in_use, 0u);
}

TEST_F(SwapTest, StreamOrderedPoolsMakeAProcessUnswappableWithTheReason) {
  Create(64 * kMiB);
  Probe p(CAPGPU_SWAP_PROBE, Env());
  EXPECT_EQ(p.Ask("alloc a 2MiB"), "alloc a 0");
  EXPECT_EQ(p.Ask("async b 1MiB"), "async b 0");
  SwapSummary s = Settle(SwapTarget::kOut);
  EXPECT_EQ(s.unswappable, 1u);
  EXPECT_EQ(s.first_reason, static_cast<uint32_t>(Unswappable::kStreamOrderedPool));
  EXPECT_EQ(p.Ask("fill a 3"), "fill a 0");  // still usable: nothing moved
  EXPECT_EQ(p.Ask("check a 3"), "check a ok");
}

TEST_F(SwapTest, AWakingShareWithNoRoomWaitsUntilTheDeviceHasIt) {
  Create(64 * kMiB);
  auto env = Env();
  env["FAKECUDA_DEVICE_FILE"] = dir_ + "/device";  // both processes on one 12 MiB card
  env["FAKECUDA_TOTAL_BYTES"] = std::to_string(12 * kMiB);
  Probe sleeper(CAPGPU_SWAP_PROBE, env);
  EXPECT_EQ(sleeper.Ask("alloc a 8MiB"), "alloc a 0");
  EXPECT_EQ(sleeper.Ask("fill a 4"), "fill a 0");
  EXPECT_EQ(Settle(SwapTarget::kOut).swapped, 1u);
  // Another workload (uncapped, outside the share) takes the card.
  auto other_env = env;
  other_env["TESSERA_CAPGPU_REGION"] = "";
  Probe other(CAPGPU_SWAP_PROBE, other_env);
  EXPECT_EQ(other.Ask("alloc x 8MiB"), "alloc x 0");
  sleeper.Send("check a 4");
  EXPECT_EQ(sleeper.Line(500), "") << "no room: the call must wait, not fail";
  {
    RegionLock lock(region_);
    EXPECT_STREQ(SwapStateName(region_.data().slots[0].swap_state), "resuming");
    EXPECT_GE(region_.data().slots[0].gate_waits, 1u);
  }
  EXPECT_EQ(other.Ask("free x"), "free x 0");
  EXPECT_EQ(sleeper.Line(), "check a ok");
}

// A framework's own cuMemCreate on a full card (within its cap) waits for room too, as
// cuMemAlloc does, instead of failing at once.
TEST_F(SwapTest, AFrameworksCuMemCreateWaitsForRoomLikeAnAllocation) {
  Create(64 * kMiB);
  auto env = Env();
  env["FAKECUDA_DEVICE_FILE"] = dir_ + "/device";  // both processes on one 12 MiB card
  env["FAKECUDA_TOTAL_BYTES"] = std::to_string(12 * kMiB);
  auto other_env = env;
  other_env["TESSERA_CAPGPU_REGION"] = "";
  Probe other(CAPGPU_SWAP_PROBE, other_env);
  EXPECT_EQ(other.Ask("alloc x 8MiB"), "alloc x 0");
  Probe p(CAPGPU_SWAP_PROBE, env);
  p.Send("vmm v 8MiB keep");
  EXPECT_EQ(p.Line(500), "") << "no room: the call must wait, not fail";
  {
    RegionLock lock(region_);
    EXPECT_GE(region_.data().slots[0].room_wanted, 8 * kMiB);
  }
  EXPECT_EQ(other.Ask("free x"), "free x 0");
  EXPECT_EQ(p.Line(), "vmm v 0");
  {
    RegionLock lock(region_);
    EXPECT_EQ(region_.data().slots[0].room_wanted, 0u);
  }
  EXPECT_EQ(p.Ask("fill v 6"), "fill v 0");
  EXPECT_EQ(p.Ask("check v 6"), "check v ok");
}

// NCCL frees its buffers by retaining the handle from the address: after a swap the driver's
// handle is a new one, so the process must get the library's value, and freeing through it must
// give the memory back (device, cap and resident bytes). A cuMemAlloc range has no handle to give.
TEST_F(SwapTest, AHandleRetainedFromAnAddressIsTheProcesssOwnAcrossSwaps) {
  Create(64 * kMiB);
  auto env = Env();
  env["FAKECUDA_DEVICE_FILE"] = dir_ + "/device";
  Probe p(CAPGPU_SWAP_PROBE, env);
  EXPECT_EQ(p.Ask("vmm v 8MiB keep"), "vmm v 0");
  EXPECT_EQ(p.Ask("fill v 5"), "fill v 0");
  EXPECT_EQ(p.Ask("alloc a 2MiB"), "alloc a 0");
  EXPECT_EQ(Settle(SwapTarget::kHold).swapped, 1u);
  EXPECT_EQ(Settle(SwapTarget::kResident).resident, 1u);
  EXPECT_EQ(p.Ask("check v 5"), "check v ok");
  EXPECT_EQ(p.Ask("retain a"), "retain a 1") << "CUDA_ERROR_INVALID_VALUE";
  const uint64_t before = DeviceUsed(p);
  const std::string freed = p.Ask("ncclfree v");
  EXPECT_EQ(freed.rfind("ncclfree v 0 0xc0de", 0), 0u) << freed << ": the library's handle value";
  EXPECT_EQ(before - DeviceUsed(p), 8 * kMiB) << "the physical memory went back to the device";
  RegionLock lock(region_);
  EXPECT_EQ(region_.data().slots[0].resident_bytes, 2 * kMiB) << "only `a` is left";
  EXPECT_EQ(region_.data().used[0], 2 * kMiB) << "the cap's charge went with it";
}

}  // namespace
}  // namespace tessera::capgpu
