// Closed devices (QuotaEngine::SetDeviceClosed): a device its operator cordoned or its agent
// reports unhealthy takes no new work, whatever the form, and is freed by no preemption; what it
// holds stays; reopened, it takes work again.
#include <gtest/gtest.h>

#include "quota_world.h"

namespace tessera::quota {
namespace {

using namespace quota_world;

TEST(QuotaClosedDevice, TakesNoNewWholeWorkUntilReopened) {
  World w(BasePolicy(), {Node("n0", "train", 2)});
  w.e->SetDeviceClosed("n0", 0, true);
  w.Submit(Job("j1", "train", "a"), 0);
  w.Submit(Job("j2", "train", "a"), 0);
  w.e->RunCycle(0);
  ASSERT_EQ(w.State("j1"), JobState::kRunning);
  ASSERT_EQ(w.View("j1").grants.size(), 1u);
  EXPECT_EQ(w.View("j1").grants[0].device, 1) << "device 0 is closed";
  EXPECT_EQ(w.State("j2"), JobState::kPending) << "the closed device 0 takes no new work";
  w.e->SetDeviceClosed("n0", 0, false);
  w.e->RunCycle(1);
  ASSERT_EQ(w.State("j2"), JobState::kRunning) << "reopened, it takes work again";
  EXPECT_EQ(w.View("j2").grants[0].device, 0);
  w.Done();
}

TEST(QuotaClosedDevice, KeepsWhatItHoldsAndTakesNoShares) {
  World w(BasePolicy(), {Node("n0", "inter", 1)});
  w.Submit(Job("s1", "inter", "a"), 0);
  w.e->RunCycle(0);
  ASSERT_EQ(w.State("s1"), JobState::kRunning);
  w.e->SetDeviceClosed("n0", 0, true);
  w.Submit(Job("s2", "inter", "a"), 1);
  w.e->RunCycle(1);
  EXPECT_EQ(w.State("s1"), JobState::kRunning) << "closing ends nothing by itself";
  EXPECT_EQ(w.State("s2"), JobState::kPending) << "no new share on a closed device";
  w.e->SetDeviceClosed("n0", 7, true);  // no such device: ignored
  w.e->SetDeviceClosed("nx", 0, true);  // no such node: ignored
  w.e->SetDeviceClosed("n0", -1, true);
  EXPECT_TRUE(w.e->device("n0", 7).slots.empty()) << "no such device: an empty view";
  EXPECT_TRUE(w.e->device("n0", -1).slots.empty());
  w.Done();
}

TEST(QuotaClosedDevice, NoPreemptionFreesAClosedDevice) {
  World w(BasePolicy(), {Node("n0", "train", 1)});
  w.Submit(Job("lo", "train-lo", "a"), 0);
  w.e->RunCycle(0);
  ASSERT_EQ(w.State("lo"), JobState::kRunning);
  w.e->SetDeviceClosed("n0", 0, true);
  w.Submit(Job("hi", "train-hi", "a"), 1);
  w.e->RunCycle(1);
  w.e->RunCycle(2);
  EXPECT_EQ(w.State("lo"), JobState::kRunning) << "not preempted for a device nobody may use";
  EXPECT_EQ(w.State("hi"), JobState::kPending);
  w.Done();
}

// Isolation grades (issue 38): a queue's min_isolation keeps its shares to devices whose grade
// (SetDeviceIsolation) is at least that; the waiting reason says why.
TEST(QuotaIsolation, SharesGoOnlyWhereTheDeviceGivesTheQueuesMinimum) {
  PolicySpec p = BasePolicy();
  for (QueueSpec& q : p.queues) {
    if (q.name == "inter") q.min_isolation = 3;  // driver
  }
  World w(p, {Node("n0", "inter", 2)});
  w.e->SetDeviceIsolation("n0", 0, 1);  // preload
  w.e->SetDeviceIsolation("n0", 1, 3);  // driver
  for (int i = 0; i < 6; ++i) w.Submit(Job("s" + std::to_string(i), "inter", "a"), 0);
  w.e->RunCycle(0);
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(w.State("s" + std::to_string(i)), JobState::kRunning) << i;
    EXPECT_EQ(w.View("s" + std::to_string(i)).grants[0].device, 1) << i;
  }
  EXPECT_EQ(w.State("s5"), JobState::kPending) << "device 0 is only preload";
  EXPECT_NE(w.View("s5").wait_reason.find("its queue wants isolation 'driver' or better"),
            std::string::npos)
      << w.View("s5").wait_reason;
  w.e->SetDeviceIsolation("n0", 0, 4);  // hardware (say, it was reported again)
  w.e->RunCycle(1);
  EXPECT_EQ(w.State("s5"), JobState::kRunning);
  w.Done();
}

}  // namespace
}  // namespace tessera::quota
