// Quota per GPU model (issue 37): a group's reservation and limit per model beside its totals,
// a queue's ordered models (spill to the next when the first is full), reclaim per model, and
// the config errors naming the field. Known answers in whole GPUs on small mixed fleets.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "quota_world.h"
#include "sched/quota/engine.h"
#include "sched/quota/policy_model.h"

namespace tessera::quota {
namespace {

using namespace quota_world;  // NOLINT

constexpr const char* kH100 = "H100-80GB";
constexpr const char* kA100 = "A100-80GB";

// What group `g` holds on `model`, in milli-GPU (0 when it holds none there).
int64_t HeldOn(const QuotaEngine& e, const std::string& g, const std::string& model) {
  for (const GroupView& v : e.groups()) {
    if (v.name != g) continue;
    for (const ModelQuotaView& m : v.models) {
      if (m.model == model) return m.usage;
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

// Group a reserves 12 GPUs, 4 of them H100 ("4 H100 and 8 of anything"); b reserves nothing.
PolicySpec MixedPolicy(std::vector<std::string> a_models) {
  PolicySpec p = BasePolicy();
  p.groups[0].reservation = Gpu(12000);
  p.groups[0].models = {{kH100, 4000, kUnlimited}};
  QueueSpec q = p.queues[0];  // train: whole GPUs, not preemptible
  q.name = "a-mixed";
  q.groups = {"a"};
  q.models = std::move(a_models);
  p.queues.push_back(q);
  return p;
}

std::vector<NodeSpec> MixedFleet() {
  // 8 H100 and 8 A100, the A100 nodes listed first (the queue's order decides, not the list's).
  return {Node("a0", "train", 4, kA100), Node("a1", "train", 4, kA100),
          Node("h0", "train", 4, kH100), Node("h1", "train", 4, kH100)};
}

TEST(QuotaModels, AQueueOfTwoModelsSpillsToTheSecondWhenTheFirstIsFull) {
  PolicySpec p = MixedPolicy({kH100, kA100});
  p.groups[0].models.clear();
  World w(p, MixedFleet());
  for (int i = 0; i < 10; ++i) w.Submit(Job("j" + std::to_string(i), "a-mixed", "a"), 0);
  w.e->RunCycle(0);
  // The 8 H100 first, then the next model.
  EXPECT_EQ(HeldOn(*w.e, "a", kH100), 8000);
  EXPECT_EQ(HeldOn(*w.e, "a", kA100), 2000);
  EXPECT_NE(w.View("j0").grants[0].node.find("h"), std::string::npos);
  EXPECT_NE(w.View("j9").grants[0].node.find("a"), std::string::npos);
  w.Done();
}

TEST(QuotaModels, AQueueOfOneModelWaitsWhenItIsFullWithOthersFree) {
  PolicySpec p = MixedPolicy({kH100});
  p.groups[0].models.clear();
  World w(p, MixedFleet());
  for (int i = 0; i < 9; ++i) w.Submit(Job("j" + std::to_string(i), "a-mixed", "a"), 0);
  w.e->RunCycle(0);
  EXPECT_EQ(HeldOn(*w.e, "a", kH100), 8000);
  EXPECT_EQ(HeldOn(*w.e, "a", kA100), 0);
  EXPECT_EQ(w.State("j8"), JobState::kPending);
  w.Done();
}

// Everything is borrowed by b; a reclaims exactly its promise: 4 H100 (its per-model
// reservation) and 8 more (the rest of its reservation), in its queue's order (A100 first).
TEST(QuotaModels, AGroupReserving4H100And8OfAnythingGetsExactlyThatBackByReclaim) {
  PolicySpec p = MixedPolicy({kA100, kH100});
  World w(p, MixedFleet());
  for (int i = 0; i < 16; ++i) w.Submit(Job("b" + std::to_string(i), "train-lo", "b"), 0);
  w.e->RunCycle(0);
  ASSERT_EQ(HeldGpu(*w.e, "b"), 16000);
  for (int i = 0; i < 16; ++i) w.Submit(Job("a" + std::to_string(i), "a-mixed", "a"), 10);
  for (int t = 10; t <= 20; ++t) w.e->RunCycle(t);
  EXPECT_EQ(HeldOn(*w.e, "a", kH100), 4000);
  EXPECT_EQ(HeldOn(*w.e, "a", kA100), 8000);
  EXPECT_EQ(HeldGpu(*w.e, "a"), 12000);
  EXPECT_EQ(HeldGpu(*w.e, "b"), 4000);  // the 4 H100 a did not reserve
  int admitted_guaranteed = 0;
  for (const Event& e : w.e->events()) {
    if (e.kind == EventKind::kAdmitted && e.group == "a" &&
        e.detail.find("guaranteed") != std::string::npos)
      ++admitted_guaranteed;
  }
  EXPECT_EQ(admitted_guaranteed, 12);
  EXPECT_EQ(w.Count(EventKind::kPreempted), 12);
  w.Done();
}

TEST(QuotaModels, AQueueOfAnyModelReclaimsTheReservedModelFirst) {
  PolicySpec p = MixedPolicy({});
  World w(p, MixedFleet());
  for (int i = 0; i < 16; ++i) w.Submit(Job("b" + std::to_string(i), "train-lo", "b"), 0);
  w.e->RunCycle(0);
  for (int i = 0; i < 16; ++i) w.Submit(Job("a" + std::to_string(i), "a-mixed", "a"), 10);
  for (int t = 10; t <= 20; ++t) w.e->RunCycle(t);
  EXPECT_GE(HeldOn(*w.e, "a", kH100), 4000);
  EXPECT_EQ(HeldGpu(*w.e, "a"), 12000);
  w.Done();
}

// Past its per-model reservations a group holds only its reservation's rest (8) guaranteed:
// 12 A100 are 8 guaranteed and 4 borrowed, as the promise of 4 H100 stays open.
TEST(QuotaModels, HoldingPastTheRestOfTheReservationOnAnotherModelBorrows) {
  PolicySpec p = MixedPolicy({kA100});
  World w(p, {Node("a0", "train", 8, kA100), Node("a1", "train", 8, kA100),
              Node("h0", "train", 4, kH100)});
  for (int i = 0; i < 12; ++i) w.Submit(Job("a" + std::to_string(i), "a-mixed", "a"), 0);
  w.e->RunCycle(0);
  int borrowed = 0;
  for (int i = 0; i < 12; ++i) borrowed += w.View("a" + std::to_string(i)).borrowed ? 1 : 0;
  EXPECT_EQ(borrowed, 4);
  w.Done();
}

TEST(QuotaModels, APerModelLimitSendsTheRestToTheNextModel) {
  PolicySpec p = MixedPolicy({kH100, kA100});
  p.groups[0].models = {{kH100, 0, 3000}};
  World w(p, MixedFleet());
  for (int i = 0; i < 5; ++i) w.Submit(Job("j" + std::to_string(i), "a-mixed", "a"), 0);
  w.e->RunCycle(0);
  EXPECT_EQ(HeldOn(*w.e, "a", kH100), 3000);
  EXPECT_EQ(HeldOn(*w.e, "a", kA100), 2000);
  // H100 only: at its limit, it waits in Admission, saying which limit.
  PolicySpec only = MixedPolicy({kH100});
  only.groups[0].models = {{kH100, 0, 1000}};
  World w2(only, MixedFleet());
  w2.Submit(Job("x", "a-mixed", "a"), 0);
  w2.Submit(Job("y", "a-mixed", "a"), 0);
  w2.e->RunCycle(0);
  ASSERT_EQ(w2.State("y"), JobState::kPending);
  EXPECT_EQ(w2.View("y").wait_step, "Admission");
  EXPECT_NE(w2.View("y").wait_reason.find("H100-80GB limit"), std::string::npos)
      << w2.View("y").wait_reason;
  w.Done();
  w2.Done();
}

// A lender keeps its per-model reservation: b reserves 2 H100 and holds them with everything
// else; c, below its reservation, reclaims only what b borrows.
TEST(QuotaModels, ReclaimLeavesALenderItsPerModelReservation) {
  PolicySpec p = BasePolicy();
  p.groups[1].reservation = Gpu(2000);
  p.groups[1].models = {{kH100, 2000, kUnlimited}};
  p.groups.push_back({"c", "", Gpu(4000), UnlimitedResources(), 1000, "", false});
  p.queues[1].groups = {"a", "b", "c"};  // train-lo, preemptible
  QueueSpec q = p.queues[0];
  q.name = "c-h100";
  q.groups = {"c"};
  q.models = {kH100};
  p.queues.push_back(q);
  World w(p, {Node("h0", "train", 4, kH100)});
  for (int i = 0; i < 4; ++i) w.Submit(Job("b" + std::to_string(i), "train-lo", "b"), 0);
  w.e->RunCycle(0);
  ASSERT_EQ(HeldOn(*w.e, "b", kH100), 4000);
  for (int i = 0; i < 4; ++i) w.Submit(Job("c" + std::to_string(i), "c-h100", "c"), 10);
  for (int t = 10; t <= 15; ++t) w.e->RunCycle(t);
  EXPECT_EQ(HeldOn(*w.e, "b", kH100), 2000);
  EXPECT_EQ(HeldOn(*w.e, "c", kH100), 2000);
  w.Done();
}

TEST(QuotaModels, ConfigErrorsNameTheField) {
  PolicySpec p = MixedPolicy({kH100});
  p.groups[0].models = {{kH100, 13000, kUnlimited}};
  Status s = Validate(p);
  EXPECT_NE(s.message().find("groups[a].reservation.models sum to 13 GPU"), std::string::npos)
      << s.message();
  p.groups[0].models = {{kH100, 4000, 2000}};
  s = Validate(p);
  EXPECT_NE(s.message().find("groups[a].reservation.models[H100-80GB] exceeds its limit"),
            std::string::npos)
      << s.message();
  p.groups[0].models = {{kH100, 1000, kUnlimited}, {kH100, 1000, kUnlimited}};
  s = Validate(p);
  EXPECT_NE(s.message().find("groups[a].models[H100-80GB] is named twice"), std::string::npos)
      << s.message();
  p.groups[0].models = {{kH100, -1000, kUnlimited}};
  s = Validate(p);
  EXPECT_NE(s.message().find("groups[a].models[H100-80GB].reservation is negative"),
            std::string::npos)
      << s.message();
  p.groups[0].models = {{kH100, 0, -1000}};
  s = Validate(p);
  EXPECT_NE(s.message().find("groups[a].models[H100-80GB].limit is negative"), std::string::npos)
      << s.message();
  p = MixedPolicy({kH100, kH100});
  s = Validate(p);
  EXPECT_NE(s.message().find("queues[a-mixed].models: 'H100-80GB' is listed twice"),
            std::string::npos)
      << s.message();
}

// Families (issue 37): a reservation on "H100" is kept by any H100 model. b holds all 16 cards
// (4 H100-80GB, 4 H100-NVL-94GB, 8 A100); a reserves 8 GPUs, 6 of them H100 of either kind, and
// asks A100 first: it gets back exactly 6 H100s and 2 A100s, and b keeps the other 8.
TEST(QuotaModels, AFamilyReservationIsReclaimedBackExactly) {
  PolicySpec p = MixedPolicy({kA100, "H100"});
  p.groups[0].reservation = Gpu(8000);
  p.groups[0].models = {{"H100", 6000, kUnlimited}};
  World w(p, {Node("a0", "train", 4, kA100), Node("a1", "train", 4, kA100),
              Node("h0", "train", 4, kH100), Node("n0", "train", 4, "H100-NVL-94GB")});
  for (int i = 0; i < 16; ++i) w.Submit(Job("b" + std::to_string(i), "train-lo", "b"), 0);
  w.e->RunCycle(0);
  ASSERT_EQ(HeldGpu(*w.e, "b"), 16000);
  for (int i = 0; i < 12; ++i) w.Submit(Job("a" + std::to_string(i), "a-mixed", "a"), 10);
  for (int t = 10; t <= 20; ++t) w.e->RunCycle(t);
  EXPECT_EQ(HeldOn(*w.e, "a", "H100"), 6000);  // the family's quota, as named
  EXPECT_EQ(HeldOn(*w.e, "a", kH100) + HeldOn(*w.e, "a", "H100-NVL-94GB"), 6000);
  EXPECT_EQ(HeldOn(*w.e, "a", kA100), 2000);
  EXPECT_EQ(HeldGpu(*w.e, "a"), 8000);
  EXPECT_EQ(HeldGpu(*w.e, "b"), 8000);
  EXPECT_EQ(w.Count(EventKind::kPreempted), 8);
  w.Done();
}

// A queue entry naming a family takes any of its models at that place in the order; a family
// limit counts its models together and names the family when it stops a job.
TEST(QuotaModels, AQueueFamilyEntrySpillsInOrderAndAFamilyLimitNamesTheFamily) {
  PolicySpec p = MixedPolicy({"H100", kA100});
  p.groups[0].reservation = Gpu(0);
  p.groups[0].models = {{"H100", 0, 5000}};
  World w(p, {Node("a0", "train", 4, kA100), Node("h0", "train", 4, kH100),
              Node("n0", "train", 4, "H100-NVL-94GB")});
  for (int i = 0; i < 7; ++i) w.Submit(Job("j" + std::to_string(i), "a-mixed", "a"), 0);
  w.e->RunCycle(0);
  EXPECT_EQ(HeldOn(*w.e, "a", "H100"), 5000);
  EXPECT_EQ(HeldOn(*w.e, "a", kA100), 2000);
  PolicySpec only = MixedPolicy({"H100"});
  only.groups[0].reservation = Gpu(0);
  only.groups[0].models = {{"H100", 0, 5000}};
  World w2(only, {Node("h0", "train", 4, kH100), Node("n0", "train", 4, "H100-NVL-94GB")});
  for (int i = 0; i < 6; ++i) w2.Submit(Job("j" + std::to_string(i), "a-mixed", "a"), 0);
  w2.e->RunCycle(0);
  ASSERT_EQ(w2.State("j5"), JobState::kPending);
  EXPECT_EQ(w2.View("j5").wait_step, "Admission");
  EXPECT_NE(w2.View("j5").wait_reason.find("at its H100 limit"), std::string::npos)
      << w2.View("j5").wait_reason;
  w.Done();
  w2.Done();
}

TEST(QuotaModels, UnknownModelsAndOverlappingFamilyReservationsNameTheField) {
  PolicySpec p = MixedPolicy({kH100});
  p.groups[0].models = {{"X900", 1000, kUnlimited}};
  Status s = Validate(p);
  EXPECT_NE(s.message().find("groups[a].models: 'X900' is neither a GPU model nor a family"),
            std::string::npos)
      << s.message();
  p = MixedPolicy({kH100, "Z1"});
  s = Validate(p);
  EXPECT_NE(s.message().find("queues[a-mixed].models: 'Z1' is neither a GPU model nor a family"),
            std::string::npos)
      << s.message();
  p = MixedPolicy({kH100});
  p.groups[0].models = {{"H100", 2000, kUnlimited}, {kH100, 2000, kUnlimited}};
  s = Validate(p);
  EXPECT_NE(s.message().find("groups[a].reservation.models[H100-80GB] is inside the family "
                             "reserved by reservation.models[H100]"),
            std::string::npos)
      << s.message();
  p.groups[0].models = {{"H100", 0, 6000}, {kH100, 2000, kUnlimited}};  // a family's limit: fine
  EXPECT_TRUE(Validate(p).ok()) << Validate(p).message();
}

// A model of a family that first appears with a node added later (a node's own gpu.model, not in
// the catalog) joins the family for the jobs already waiting on it.
TEST(QuotaModels, AFamilyTakesAModelFirstSeenOnANodeAddedLater) {
  PolicySpec p = MixedPolicy({"H100"});
  p.groups[0].reservation = Gpu(0);
  p.groups[0].models.clear();
  World w(p, {Node("a0", "train", 2, kA100), Node("h0", "train", 1, kH100)});
  w.Submit(Job("first", "a-mixed", "a"), 0);  // takes the one H100
  w.Submit(Job("j", "a-mixed", "a"), 0);
  w.e->RunCycle(0);
  ASSERT_EQ(w.State("first"), JobState::kRunning);
  ASSERT_EQ(w.State("j"), JobState::kPending);
  NodeSpec late = Node("x0", "train", 2, "H100-SXM5-custom");
  late.gpu_memory_mib = 80 * kGiB;
  ASSERT_TRUE(w.e->AddNode(late, 10).ok());
  w.e->RunCycle(10);
  EXPECT_EQ(w.State("j"), JobState::kRunning);
  EXPECT_EQ(HeldOn(*w.e, "a", "H100-SXM5-custom"), 1000);
  w.Done();
}

// A queue of models no node in its pools has: refused naming them and what the pools have (a
// new user's queue of A100-80GB on H100s read "no device in pools [train] can hold 1 x (gpu 1,
// 0MiB) in any allowed form", and nothing of models).
TEST(QuotaModels, AQueueOfModelsThePoolsLackIsRefusedNamingThem) {
  PolicySpec p = MixedPolicy({kA100});
  p.groups[0].reservation = Gpu(0);
  p.groups[0].models.clear();
  World w(p, {Node("h0", "train", 4, kH100)});
  auto r = w.e->Submit(Job("j", "a-mixed", "a"), 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("of model A100-80GB (its queue's models; the devices "
                                      "there are H100-80GB)"),
            std::string::npos)
      << r.status().message();
  w.Done();
}

}  // namespace
}  // namespace tessera::quota
