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

TEST(DeviceHealthXids, TheCatalogueFaultsAreCriticalApplicationErrorsAreNot) {
  for (unsigned long long x : {48, 62, 64, 74, 79, 92, 94, 95, 119, 120, 140})
    EXPECT_TRUE(IsCriticalXid(x)) << x;
  for (unsigned long long x : {13, 31, 43, 45, 0, 1000}) EXPECT_FALSE(IsCriticalXid(x)) << x;
}

TEST(DeviceHealthOpen, NoLibraryIsAFailedPrecondition) {
  auto h = NvmlHealth::Open("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tessera::agent
