// Compute modes for shares (issue 38): a share of an sm-sharing queue (QueueSpec::compute_percent)
// goes only on a device that offers MPS (SetDeviceMps), where the sm-sharing percentages of its
// shares sum to at most 100 with it; a device holds shares of one compute mode at a time.
#include <gtest/gtest.h>

#include "quota_world.h"

namespace tessera::quota {
namespace {

using namespace quota_world;

// BasePolicy with an sm-sharing queue "sm" (shares of 16 GiB, 0.2 GPU, `percent` each).
PolicySpec SmPolicy(int percent, int min_isolation = 0) {
  PolicySpec p = BasePolicy();
  QueueSpec q = p.queues.back();  // "inter": share16
  q.name = "sm";
  q.compute_percent = percent;
  q.min_isolation = min_isolation;
  p.queues.push_back(q);
  return p;
}

std::string Id(const char* prefix, int i) { return prefix + std::to_string(i); }

TEST(QuotaComputeMode, SmSharingPercentagesOfADeviceSumToAtMost100) {
  World w(SmPolicy(40), {Node("n0", "inter", 2)});
  w.e->SetDeviceMps("n0", 0, true);
  w.e->SetDeviceMps("n0", 1, true);
  for (int i = 0; i < 3; ++i) w.Submit(Job(Id("s", i), "sm", "a"), 0);
  w.e->RunCycle(0);
  int on[2] = {0, 0};
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(w.State(Id("s", i)), JobState::kRunning) << i;
    const JobView v = w.View(Id("s", i));
    ASSERT_EQ(v.grants.size(), 1u);
    EXPECT_EQ(v.grants[0].sm_percent, 40) << "the grant records its percentage";
    ++on[v.grants[0].device];
  }
  // Memory (3 x 16 of 80 GiB) and compute weight (3 x 0.2) would allow all three on one card;
  // 40 + 40 + 40 = 120 does not.
  EXPECT_EQ(std::max(on[0], on[1]), 2);
  EXPECT_EQ(std::min(on[0], on[1]), 1);
  w.Done();
}

TEST(QuotaComputeMode, TheThirdOf40PercentWaitsWithTheReason) {
  World w(SmPolicy(40), {Node("n0", "inter", 1)});
  w.e->SetDeviceMps("n0", 0, true);
  for (int i = 0; i < 3; ++i) w.Submit(Job(Id("s", i), "sm", "a"), 0);
  w.e->RunCycle(0);
  EXPECT_EQ(w.State("s0"), JobState::kRunning);
  EXPECT_EQ(w.State("s1"), JobState::kRunning);
  ASSERT_EQ(w.State("s2"), JobState::kPending) << "80% taken: 40% more would make 120%";
  EXPECT_EQ(w.View("s2").wait_step, "Placement");
  EXPECT_NE(w.View("s2").wait_reason.find("compute: sm-sharing 40%"), std::string::npos)
      << w.View("s2").wait_reason;
  w.e->Complete(w.h["s0"], 1);
  w.e->RunCycle(2);
  EXPECT_EQ(w.State("s2"), JobState::kRunning) << "40% freed: 80% with it";
  w.Done();
}

TEST(QuotaComputeMode, ExactlyOneHundredFits) {
  World w(SmPolicy(25), {Node("n0", "inter", 1)});
  w.e->SetDeviceMps("n0", 0, true);
  for (int i = 0; i < 5; ++i) w.Submit(Job(Id("s", i), "sm", "a"), 0);
  w.e->RunCycle(0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(w.State(Id("s", i)), JobState::kRunning) << i;
  EXPECT_EQ(w.State("s4"), JobState::kPending) << "4 x 25 = 100; a fifth would be 125";
  w.Done();
}

TEST(QuotaComputeMode, SmSharingOnlyWhereTheDeviceOffersMps) {
  World w(SmPolicy(10), {Node("n0", "inter", 2)});
  w.e->SetDeviceMps("n0", 1, true);
  for (int i = 0; i < 3; ++i) w.Submit(Job(Id("s", i), "sm", "a"), 0);
  w.e->RunCycle(0);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(w.State(Id("s", i)), JobState::kRunning) << i;
    EXPECT_EQ(w.View(Id("s", i)).grants[0].device, 1) << "device 0 has no MPS";
  }
  w.e->SetDeviceMps("n0", 1, false);
  w.Submit(Job("s3", "sm", "a"), 1);
  w.e->RunCycle(1);
  EXPECT_EQ(w.State("s3"), JobState::kPending);
  EXPECT_NE(w.View("s3").wait_reason.find("only on devices that offer MPS"), std::string::npos)
      << w.View("s3").wait_reason;
  w.Done();
}

// One compute mode per device: time-slicing processes outside MPS would take SM time the
// sm-sharing shares' percentages promise them.
TEST(QuotaComputeMode, ADeviceHoldsSharesOfOneModeAtATime) {
  World w(SmPolicy(50), {Node("n0", "inter", 2)});
  w.e->SetDeviceMps("n0", 0, true);
  w.e->SetDeviceMps("n0", 1, true);
  w.Submit(Job("t0", "inter", "a"), 0);
  w.e->RunCycle(0);
  ASSERT_EQ(w.State("t0"), JobState::kRunning);
  const int ts_dev = w.View("t0").grants[0].device;
  EXPECT_EQ(w.View("t0").grants[0].sm_percent, 0) << "time-slicing";
  w.Submit(Job("s0", "sm", "a"), 1);
  w.Submit(Job("s1", "sm", "a"), 1);
  w.Submit(Job("s2", "sm", "a"), 1);
  w.Submit(Job("t1", "inter", "a"), 1);
  w.e->RunCycle(1);
  for (const char* id : {"s0", "s1"}) {
    ASSERT_EQ(w.State(id), JobState::kRunning) << id;
    EXPECT_NE(w.View(id).grants[0].device, ts_dev) << id << ": not beside a time-slicing share";
  }
  EXPECT_EQ(w.State("s2"), JobState::kPending) << "the sm-sharing card is full (100%)";
  ASSERT_EQ(w.State("t1"), JobState::kRunning)
      << w.View("t1").wait_step << ": " << w.View("t1").wait_reason;
  EXPECT_EQ(w.View("t1").grants[0].device, ts_dev) << "not beside sm-sharing shares";
  w.Done();
}

// The grade an sm-sharing share gets is mps where the device offers it: a queue that requires
// `isolation: mps` is served there by its sm-sharing shares, and not by time-slicing ones.
TEST(QuotaComputeMode, AnSmSharingShareMeetsIsolationMps) {
  PolicySpec p = SmPolicy(30, /*min_isolation=*/2);
  for (QueueSpec& q : p.queues) {
    if (q.name == "inter") q.min_isolation = 2;
  }
  World w(p, {Node("n0", "inter", 1)});
  w.e->SetDeviceIsolation("n0", 0, 1);  // preload for time-slicing shares
  w.e->SetDeviceMps("n0", 0, true);
  w.Submit(Job("s0", "sm", "a"), 0);
  w.Submit(Job("t0", "inter", "a"), 0);
  w.e->RunCycle(0);
  EXPECT_EQ(w.State("s0"), JobState::kRunning);
  EXPECT_EQ(w.State("t0"), JobState::kPending) << "a time-slicing share there gets preload";
  w.Done();
}

}  // namespace
}  // namespace tessera::quota
