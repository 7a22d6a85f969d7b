// Quota per pool (issue 37): a group's reservation and limit per pool beside its totals, as
// quotas per GPU model are (quota_models_test.cc): a pool limit stops admission naming the pool,
// reclaim restores a per-pool reservation exactly, a lender keeps its per-pool reservation, and
// the config errors name the field. Whole A100 cards in pools "train" and "any" (BasePolicy).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "quota_world.h"
#include "sched/quota/engine.h"
#include "sched/quota/policy_model.h"

namespace tessera::quota {
namespace {

using namespace quota_world;  // NOLINT

// What group `g` holds in `pool`, in milli-GPU (GroupView::pools; 0 when none is listed).
int64_t HeldIn(const QuotaEngine& e, const std::string& g, const std::string& pool) {
  for (const GroupView& v : e.groups()) {
    if (v.name != g) continue;
    for (const ModelQuotaView& p : v.pools) {
      if (p.model == pool) return p.usage;
    }
  }
  return 0;
}

int64_t HeldGpu(const QuotaEngine& e, const std::string& g) {
  for (const GroupView& v : e.groups()) {
    if (v.name == g) return v.usage.gpu_milli;
  }
  return -1;
}

// 4 cards in pool "any" (listed first, so that nothing but the quota sends work to "train") and
// 4 in "train"; the queue "train" draws from every pool.
std::vector<NodeSpec> TwoPools() { return {Node("y0", "any", 4), Node("t0", "train", 4)}; }

TEST(QuotaPools, UsagePerPoolIsShownWithoutAnyPoolQuota) {
  World w(BasePolicy(), TwoPools());
  for (int i = 0; i < 6; ++i) w.Submit(Job("j" + std::to_string(i), "train", "a"), 0);
  w.e->RunCycle(0);
  EXPECT_EQ(HeldIn(*w.e, "a", "any") + HeldIn(*w.e, "a", "train"), 6000);
  w.Done();
}

// A pool limit: the rest goes to the other pools, and what finds no room there says the limit;
// a job that may use that pool only waits in Admission, its reason naming the pool.
TEST(QuotaPools, APoolLimitStopsAdmissionNamingThePool) {
  PolicySpec p = BasePolicy();
  p.groups[0].pools = {{"any", 0, 2000}};
  ProfileSpec pr = p.profiles[0];
  pr.name = "gpu1-any";
  pr.pools = {"any"};
  p.profiles.push_back(pr);
  QueueSpec q = p.queues[0];
  q.name = "a-any";
  q.profile = "gpu1-any";
  p.queues.push_back(q);
  World w(p, TwoPools());
  for (int i = 0; i < 7; ++i) w.Submit(Job("j" + std::to_string(i), "train", "a"), 0);
  w.Submit(Job("k", "a-any", "a"), 0);
  w.e->RunCycle(0);
  EXPECT_EQ(HeldIn(*w.e, "a", "any"), 2000);
  EXPECT_EQ(HeldIn(*w.e, "a", "train"), 4000);
  ASSERT_EQ(w.State("j6"), JobState::kPending);
  EXPECT_NE(w.View("j6").wait_reason.find("group a at its pool any limit"), std::string::npos)
      << w.View("j6").wait_reason;
  ASSERT_EQ(w.State("k"), JobState::kPending);
  EXPECT_EQ(w.View("k").wait_step, "Admission");
  EXPECT_NE(w.View("k").wait_reason.find("group a at its pool any limit: holds 2 GPU, job needs 1, "
                                         "limit 2"),
            std::string::npos)
      << w.View("k").wait_reason;
  w.Done();
}

// b holds all 8 cards; a reserves 6 GPUs, 4 of them in "train": reclaim gives it back exactly
// 4 in train and 2 more (in "any", listed first), and b keeps 2.
TEST(QuotaPools, ReclaimReturnsAPerPoolReservationExactly) {
  PolicySpec p = BasePolicy();
  p.groups[0].reservation = Gpu(6000);
  p.groups[0].pools = {{"train", 4000, kUnlimited}};
  World w(p, TwoPools());
  for (int i = 0; i < 8; ++i) w.Submit(Job("b" + std::to_string(i), "train-lo", "b"), 0);
  w.e->RunCycle(0);
  ASSERT_EQ(HeldGpu(*w.e, "b"), 8000);
  for (int i = 0; i < 8; ++i) w.Submit(Job("a" + std::to_string(i), "train", "a"), 10);
  for (int t = 10; t <= 20; ++t) w.e->RunCycle(t);
  EXPECT_EQ(HeldIn(*w.e, "a", "train"), 4000);
  EXPECT_EQ(HeldIn(*w.e, "a", "any"), 2000);
  EXPECT_EQ(HeldGpu(*w.e, "b"), 2000);
  EXPECT_EQ(w.Count(EventKind::kPreempted), 6);
  int guaranteed = 0;
  for (const Event& e : w.e->events()) {
    if (e.kind == EventKind::kAdmitted && e.group == "a" &&
        e.detail.find("guaranteed") != std::string::npos)
      ++guaranteed;
  }
  EXPECT_EQ(guaranteed, 6);
  w.Done();
}

// A lender keeps its per-pool reservation: b reserves 2 GPUs, in "train", and holds all 8 cards
// (6 above its total reservation); c, below its reservation and drawing on "train" only,
// reclaims only the 2 b holds there past its per-pool reservation.
TEST(QuotaPools, ReclaimLeavesALenderItsPerPoolReservation) {
  PolicySpec p = BasePolicy();
  p.groups[1].reservation = Gpu(2000);
  p.groups[1].pools = {{"train", 2000, kUnlimited}};
  p.groups.push_back({"c", "", Gpu(4000), UnlimitedResources(), 1000, "", false});
  p.queues[1].groups = {"a", "b", "c"};  // train-lo, preemptible
  ProfileSpec pr = p.profiles[0];
  pr.name = "gpu1-train";
  pr.pools = {"train"};
  p.profiles.push_back(pr);
  QueueSpec q = p.queues[0];
  q.name = "c-train";
  q.profile = "gpu1-train";
  q.groups = {"c"};
  p.queues.push_back(q);
  World w(p, TwoPools());
  for (int i = 0; i < 8; ++i) w.Submit(Job("b" + std::to_string(i), "train-lo", "b"), 0);
  w.e->RunCycle(0);
  ASSERT_EQ(HeldIn(*w.e, "b", "train"), 4000);
  for (int i = 0; i < 4; ++i) w.Submit(Job("c" + std::to_string(i), "c-train", "c"), 10);
  for (int t = 10; t <= 15; ++t) w.e->RunCycle(t);
  EXPECT_EQ(HeldIn(*w.e, "b", "train"), 2000);
  EXPECT_EQ(HeldIn(*w.e, "c", "train"), 2000);
  EXPECT_EQ(HeldIn(*w.e, "b", "any"), 4000);
  w.Done();
}

TEST(QuotaPools, ConfigErrorsNameTheField) {
  PolicySpec p = BasePolicy();
  p.groups[0].reservation = Gpu(4000);
  p.groups[0].pools = {{"east", 1000, kUnlimited}};
  Status s = Validate(p);
  EXPECT_NE(s.message().find("groups[a].pools: 'east' is not a pool"), std::string::npos)
      << s.message();
  p.groups[0].pools = {{"train", 5000, kUnlimited}};
  s = Validate(p);
  EXPECT_NE(s.message().find("groups[a].reservation.pools sum to 5 GPU, more than "
                             "reservation.gpu 4"),
            std::string::npos)
      << s.message();
  p.groups[0].pools = {{"train", 3000, 2000}};
  s = Validate(p);
  EXPECT_NE(s.message().find("groups[a].reservation.pools[train] exceeds its limit"),
            std::string::npos)
      << s.message();
  p.groups[0].pools = {{"train", 1000, kUnlimited}, {"train", 1000, kUnlimited}};
  s = Validate(p);
  EXPECT_NE(s.message().find("groups[a].pools[train] is named twice"), std::string::npos)
      << s.message();
  p.groups[0].pools = {{"train", -1000, kUnlimited}};
  s = Validate(p);
  EXPECT_NE(s.message().find("groups[a].pools[train].reservation is negative"), std::string::npos)
      << s.message();
  p.groups[0].pools = {{"train", 0, -1000}};
  s = Validate(p);
  EXPECT_NE(s.message().find("groups[a].pools[train].limit is negative"), std::string::npos)
      << s.message();
  p.groups[0].limit = Gpu(3000);
  p.groups[0].reservation = Gpu(0);
  p.groups[0].pools = {{"train", 0, 4000}};
  s = Validate(p);
  EXPECT_NE(s.message().find("groups[a].limit.pools[train] exceeds the group's GPU limit"),
            std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace tessera::quota
