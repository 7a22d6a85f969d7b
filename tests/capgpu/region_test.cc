// The region file in one process: creation, authority of its limits, locking.
#include "capgpu/region.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace tessera::capgpu {
namespace {

constexpr uint64_t kGiB = 1ULL << 30;

class RegionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/capgpu-region-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/region";
  }
  void TearDown() override {
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_, path_;
};

LimitList Limit(uint64_t bytes) {
  LimitList l;
  l.count = 1;
  l.bytes[0] = bytes;
  return l;
}

TEST_F(RegionTest, CreateThenOpenSeesTheLimit) {
  ASSERT_EQ(CreateRegionFile(path_.c_str(), Limit(4 * kGiB), 0600, false), 0);
  Region r;
  ASSERT_EQ(r.Open(path_.c_str()), 0);
  RegionLock lock(r);
  ASSERT_TRUE(lock.held());
  EXPECT_EQ(LimitFor(r.data(), 0), 4 * kGiB);
}

TEST_F(RegionTest, ExistingRegionIsNotReplacedUnlessAsked) {
  ASSERT_EQ(CreateRegionFile(path_.c_str(), Limit(4 * kGiB), 0600, false), 0);
  EXPECT_EQ(CreateRegionFile(path_.c_str(), Limit(100 * kGiB), 0600, false), EEXIST);
  Region r;
  ASSERT_EQ(r.Open(path_.c_str()), 0);
  {
    RegionLock lock(r);
    EXPECT_EQ(LimitFor(r.data(), 0), 4 * kGiB);
  }
  ASSERT_EQ(CreateRegionFile(path_.c_str(), Limit(2 * kGiB), 0600, true), 0);
  Region r2;
  ASSERT_EQ(r2.Open(path_.c_str()), 0);
  RegionLock lock(r2);
  EXPECT_EQ(LimitFor(r2.data(), 0), 2 * kGiB);
}

TEST_F(RegionTest, OpenRejectsMissingAndForeignFiles) {
  Region r;
  EXPECT_EQ(r.Open(path_.c_str()), ENOENT);
  FILE* f = fopen(path_.c_str(), "w");
  std::string junk(sizeof(RegionFile), 'x');
  fwrite(junk.data(), 1, junk.size(), f);
  fclose(f);
  EXPECT_EQ(r.Open(path_.c_str()), EINVAL);
}

TEST_F(RegionTest, TwoMappingsShareCharges) {
  ASSERT_EQ(CreateRegionFile(path_.c_str(), Limit(4 * kGiB), 0600, false), 0);
  Region a, b;
  ASSERT_EQ(a.Open(path_.c_str()), 0);
  ASSERT_EQ(b.Open(path_.c_str()), 0);
  int slot;
  {
    RegionLock lock(a);
    slot = ClaimSlot(a.data(), SelfProcess());
    ASSERT_EQ(TryCharge(a.data(), slot, 0, 3 * kGiB), ChargeResult::kCharged);
  }
  RegionLock lock(b);
  EXPECT_EQ(b.data().used[0], 3 * kGiB);
  EXPECT_EQ(TryCharge(b.data(), slot, 0, 2 * kGiB), ChargeResult::kOverCap);
}

// A process stopped while it holds the lock (SIGSTOP, a debugger) does not stop the agent:
// LockFor gives up; and once that process is killed, the robust lock is taken again.
TEST_F(RegionTest, LockForGivesUpOnAStoppedHolder) {
  ASSERT_EQ(CreateRegionFile(path_.c_str(), Limit(4 * kGiB), 0600, false), 0);
  pid_t holder = fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    Region r;
    if (r.Open(path_.c_str()) != 0 || !r.Lock()) _exit(1);
    raise(SIGSTOP);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(holder, &status, WUNTRACED), holder);
  ASSERT_TRUE(WIFSTOPPED(status));
  Region r;
  ASSERT_EQ(r.Open(path_.c_str()), 0);
  const auto t0 = std::chrono::steady_clock::now();
  {
    RegionLock lock(r, 100);
    EXPECT_FALSE(lock.held());
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  kill(holder, SIGKILL);
  ASSERT_EQ(waitpid(holder, &status, 0), holder);
  RegionLock lock(r, 1000);
  EXPECT_TRUE(lock.held()) << "its owner died: the robust lock is recovered";
}

TEST(Processes, SelfIsAliveAndAnotherStartTimeIsNot) {
  ProcessId self = SelfProcess();
  EXPECT_GT(self.start_time, 0u);
  EXPECT_TRUE(ProcessIsAlive(self, nullptr));
  EXPECT_FALSE(ProcessIsAlive({self.pid, self.start_time + 1}, nullptr));
  EXPECT_FALSE(ProcessIsAlive({0, 0}, nullptr));
}

}  // namespace
}  // namespace tessera::capgpu
