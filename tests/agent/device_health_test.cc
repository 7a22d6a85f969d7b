// Device health through NVML (src/agent/device_health.h), against the stand-in NVML of this
// directory (fake_nvml.cc: NVML's event and ECC calls, driven by the file FAKE_NVML_HEALTH
// names): there is no GPU here, so the driver is the one thing stood in for.
#include "agent/device_health.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>

#include "test_util.h"

namespace tessera::agent {
namespace {

class DeviceHealthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = dir_.path() + "/health";
    std::ofstream(file_).close();
    setenv("FAKE_NVML_HEALTH", file_.c_str(), 1);
    unsetenv("FAKE_NVML_NO_ECC");
  }
  void TearDown() override {
    unsetenv("FAKE_NVML_HEALTH");
    unsetenv("FAKE_NVML_NO_ECC");
  }
  void Append(const std::string& line) { std::ofstream(file_, std::ios::app) << line << "\n"; }
  testing::TempDir dir_;
  std::string file_;
};

TEST_F(DeviceHealthTest, ADoubleBitEccErrorMakesThatDeviceUnhealthy) {
  auto h = NvmlHealth::Open(FAKE_NVML_PATH);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_TRUE((*h)->events());
  auto before = (*h)->Check();
  ASSERT_EQ(before.size(), 2u);
  EXPECT_TRUE(before[0].healthy);
  EXPECT_TRUE(before[1].healthy);
  Append("ecc 1 2");
  std::vector<std::string> log;
  auto after = (*h)->Check(0, &log);
  EXPECT_TRUE(after[0].healthy);
  ASSERT_FALSE(after[1].healthy);
  EXPECT_EQ(after[1].reason, "double-bit ECC errors: 2 since the driver loaded");
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("device 1: 2 double-bit ECC error(s)"), std::string::npos) << log[0];
}

TEST_F(DeviceHealthTest, CriticalXidsMakeADeviceUnhealthyApplicationXidsDoNot) {
  auto h = NvmlHealth::Open(FAKE_NVML_PATH);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  Append("xid 0 13");  // a program's graphics engine exception: the device is fine
  std::vector<std::string> log;
  auto r = (*h)->Check(0, &log);
  EXPECT_TRUE(r[0].healthy);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("XID 13 (an application's error"), std::string::npos) << log[0];
  Append("xid 0 79");
  Append("xid 0 48");  // later events keep the first reason
  r = (*h)->Check(0, &log);
  ASSERT_FALSE(r[0].healthy);
  EXPECT_EQ(r[0].reason, "XID 79: GPU has fallen off the bus");
  EXPECT_TRUE(r[1].healthy);
  EXPECT_EQ(log.size(), 3u);
  // Sticky: nothing new, still unhealthy.
  EXPECT_FALSE((*h)->Check()[0].healthy);
}

TEST_F(DeviceHealthTest, WaitsForTheNextEventAtMostTheTimeGiven) {
  auto h = NvmlHealth::Open(FAKE_NVML_PATH);
  ASSERT_TRUE(h.ok());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE((*h)->Check(100)[0].healthy);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(90));
}

TEST_F(DeviceHealthTest, CardsWithoutEccAreReadForXidsOnly) {
  setenv("FAKE_NVML_NO_ECC", "1", 1);
  auto h = NvmlHealth::Open(FAKE_NVML_PATH);
  ASSERT_TRUE(h.ok());
  Append("ecc 0 5");
  EXPECT_TRUE((*h)->Check()[0].healthy) << "no ECC counters: nothing to read";
  Append("xid 0 95");
  auto r = (*h)->Check();
  EXPECT_FALSE(r[0].healthy);
  EXPECT_EQ(r[0].reason, "XID 95: uncontained ECC error");
}

// An operator's word (the control plane's health_reset): the device starts over from what it
// reports now; only a new fault makes it unhealthy again.
TEST_F(DeviceHealthTest, AResetStartsOverFromWhatTheDeviceSaysNow) {
  auto h = NvmlHealth::Open(FAKE_NVML_PATH);
  ASSERT_TRUE(h.ok());
  Append("ecc 1 2");
  Append("xid 0 79");
  auto r = (*h)->Check();
  ASSERT_FALSE(r[0].healthy);
  ASSERT_FALSE(r[1].healthy);
  EXPECT_FALSE((*h)->Reset(2)) << "no device 2";
  EXPECT_TRUE((*h)->Reset(0));
  EXPECT_TRUE((*h)->Reset(1));
  r = (*h)->Check();
  EXPECT_TRUE(r[0].healthy) << r[0].reason;
  EXPECT_TRUE(r[1].healthy) << "the 2 errors were cleared: " << r[1].reason;
  Append("ecc 1 3");
  Append("xid 0 48");
  r = (*h)->Check();
  EXPECT_FALSE(r[0].healthy);
  EXPECT_EQ(r[0].reason, "XID 48: double-bit ECC error");
  EXPECT_FALSE(r[1].healthy);
  EXPECT_EQ(r[1].reason, "double-bit ECC errors: 3 since the driver loaded");
}

// A reset of the GPU (or a reload of the driver) clears its volatile ECC counters: the agent
// takes a counter that went down for a clean reset, and the device is healthy again.
TEST_F(DeviceHealthTest, ACleanResetReturnsTheDevice) {
  auto h = NvmlHealth::Open(FAKE_NVML_PATH);
  ASSERT_TRUE(h.ok());
  Append("ecc 1 2");
  ASSERT_FALSE((*h)->Check()[1].healthy);
  Append("ecc 1 0");
  std::vector<std::string> log;
  auto r = (*h)->Check(0, &log);
  EXPECT_TRUE(r[1].healthy) << r[1].reason;
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("device 1: ECC counters cleared (a reset): healthy again"),
            std::string::npos)
      << log[0];
}

// Pages or rows waiting to be retired or remapped (they need a reset), a remapping that failed,
// and clocks held back by thermal or power violations for at least half of the time since the
// last check: each makes the device unhealthy with its reason.
TEST_F(DeviceHealthTest, PendingRetirementsFailedRemapsAndViolationsMakeADeviceUnhealthy) {
  auto h = NvmlHealth::Open(FAKE_NVML_PATH);
  ASSERT_TRUE(h.ok());
  Append("thermal 0 5000");  // cumulative since boot: the first read is only a starting point
  Append("power 1 5000");
  auto r = (*h)->Check();
  EXPECT_TRUE(r[0].healthy) << r[0].reason;
  EXPECT_TRUE(r[1].healthy) << r[1].reason;
  Append("power 1 6000");  // a microsecond held back since: far under half the time
  EXPECT_TRUE((*h)->Check()[1].healthy);
  Append("thermal 0 900000000000000");  // held back all the time since the last check
  r = (*h)->Check();
  ASSERT_FALSE(r[0].healthy);
  EXPECT_EQ(r[0].reason.rfind("thermal violation: clocks held back 100% of the last ", 0), 0u)
      << r[0].reason;
  EXPECT_TRUE(r[1].healthy);
  Append("power 1 900000000000000");
  r = (*h)->Check();
  ASSERT_FALSE(r[1].healthy);
  EXPECT_EQ(r[1].reason.rfind("power violation: clocks held back 100% of the last ", 0), 0u)
      << r[1].reason;

  auto g = NvmlHealth::Open(FAKE_NVML_PATH);
  ASSERT_TRUE(g.ok());
  Append("retired 0 1");
  r = (*g)->Check();
  ASSERT_FALSE(r[0].healthy);
  EXPECT_EQ(r[0].reason, "retired pages pending: the device needs a reset");
  Append("remap_pending 1 1");
  r = (*g)->Check();
  ASSERT_FALSE(r[1].healthy);
  EXPECT_EQ(r[1].reason, "row remapping pending: the device needs a reset");
  ASSERT_TRUE((*g)->Reset(1));
  EXPECT_TRUE((*g)->Check()[1].healthy) << "the pending remap was acknowledged";
  Append("remap_pending 1 0");
  Append("remap_failed 1 1");
  r = (*g)->Check();
  ASSERT_FALSE(r[1].healthy);
  EXPECT_EQ(r[1].reason, "row remapping failed");
}

TEST(DeviceHealthXids, TheCatalogueFaultsAreCriticalApplicationErrorsAreNot) {
  for (unsigned long long x : {48, 62, 64, 74, 79, 92, 94, 95, 119, 120, 140})
    EXPECT_TRUE(IsCriticalXid(x)) << x;
  for (unsigned long long x : {13, 31, 43, 45, 0, 1000}) EXPECT_FALSE(IsCriticalXid(x)) << x;
}

// XID 154 (drivers r550 and later) says the GPU's recovery action changed: it needs a GPU reset
// or a node reboot before it is trusted again. 63 (a row remap or page retirement recorded), 68
// (a video decoder exception) and 109 (a context switch timeout) are not faults of the device.
TEST(DeviceHealthXids, ARecoveryActionChangeIsCritical) {
  EXPECT_TRUE(IsCriticalXid(154));
  EXPECT_EQ(XidName(154), "GPU recovery action changed: it needs a reset or a reboot");
  for (unsigned long long x : {63, 68, 109}) EXPECT_FALSE(IsCriticalXid(x)) << x;
}

TEST(DeviceHealthOpen, NoLibraryIsAFailedPrecondition) {
  auto h = NvmlHealth::Open("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tessera::agent
