// The share plan (the cutting-stock LP of the fractional sizes) and how the default policy
// follows it.
#include "sched/policies/share_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "sched/policies/policies.h"
#include "sched/scheduler.h"
#include "test_cluster.h"

namespace tessera::sched {
namespace {

using testing::Job;
using testing::MakeNode;

// Every pattern fits a device, and the patterns' uses hold every job exactly once.
void ExpectFeasible(const SharePlan& plan,
                    const std::vector<std::pair<MilliGpu, int64_t>>& counts) {
  ASSERT_FALSE(plan.empty());
  std::vector<double> held(plan.sizes().size(), 0.0);
  double devices = 0;
  for (size_t p = 0; p < plan.patterns().size(); ++p) {
    MilliGpu used = 0;
    for (size_t i = 0; i < plan.sizes().size(); ++i) {
      used += plan.patterns()[p][i] * plan.sizes()[i];
      held[i] += plan.patterns()[p][i] * plan.uses()[p];
    }
    EXPECT_LE(used, kWholeGpu) << "pattern " << p;
    EXPECT_GT(plan.uses()[p], 0);
    devices += plan.uses()[p];
  }
  EXPECT_NEAR(devices, plan.devices(), 1e-6);
  for (const auto& [size, count] : counts) {
    const int i = plan.IndexOf(size);
    ASSERT_GE(i, 0) << size;
    EXPECT_NEAR(held[static_cast<size_t>(i)], static_cast<double>(count), 1e-6) << "size " << size;
  }
}

TEST(SharePlanTest, PairsTheSizesThatCompleteADevice) {
  const std::vector<std::pair<MilliGpu, int64_t>> counts = {{810, 10}, {160, 10}};
  const SharePlan plan = SharePlan::Solve(counts);
  ExpectFeasible(plan, counts);
  ASSERT_EQ(plan.patterns().size(), 1u);
  EXPECT_EQ(plan.patterns()[0], (std::vector<int>{1, 1}));  // sizes ascending: 160, 810
  EXPECT_NEAR(plan.devices(), 10, 1e-6);
}

// Optima worked out by hand: each needs a pattern a greedy fill would not choose.
TEST(SharePlanTest, FindsTheFewestDevices) {
  // 500 + 300 + 200 three times (best fit in arrival order 500, 500, 500, 300, ... pairs the
  // 500s' holes with 300 + 200 too, but 300 + 300 + 200 + 200 would waste).
  std::vector<std::pair<MilliGpu, int64_t>> counts = {{500, 3}, {300, 3}, {200, 3}};
  SharePlan plan = SharePlan::Solve(counts);
  ExpectFeasible(plan, counts);
  EXPECT_NEAR(plan.devices(), 3, 1e-6);
  // 700 + 300 four times and 200 x 5 once: pairing a 700 with a 200 would cost a device.
  counts = {{700, 4}, {300, 4}, {200, 5}};
  plan = SharePlan::Solve(counts);
  ExpectFeasible(plan, counts);
  EXPECT_NEAR(plan.devices(), 5, 1e-6);
  EXPECT_FALSE(plan.FitOf(std::vector<MilliGpu>{200, 700}).planned);
  // No pattern wastes when the sizes can fill devices exactly, whatever the counts.
  counts = {{250, 37}, {500, 11}, {750, 5}};
  plan = SharePlan::Solve(counts);
  ExpectFeasible(plan, counts);
  EXPECT_NEAR(plan.devices(), (250.0 * 37 + 500.0 * 11 + 750.0 * 5) / 1000.0, 1e-6);
}

// The LP is a lower bound on any packing and no worse than first-fit decreasing.
TEST(SharePlanTest, BetweenTheVolumeBoundAndFirstFitDecreasing) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<std::pair<MilliGpu, int64_t>> counts;
    const int sizes = 2 + static_cast<int>(rng() % 12);
    for (int i = 0; i < sizes; ++i) {
      counts.emplace_back(10 * static_cast<MilliGpu>(1 + rng() % 99),
                          1 + static_cast<int64_t>(rng() % 40));
    }
    const SharePlan plan = SharePlan::Solve(counts);
    std::vector<MilliGpu> jobs;
    MilliGpu volume = 0;
    for (const SharePlan::Fit f = plan.FitOf({}); const auto& [s, c] : counts) {
      EXPECT_TRUE(f.planned);
      for (int64_t k = 0; k < c; ++k) jobs.push_back(s);
    }
    std::sort(jobs.rbegin(), jobs.rend());
    std::vector<MilliGpu> free;  // first-fit decreasing
    for (MilliGpu s : jobs) {
      volume += s;
      auto it = std::find_if(free.begin(), free.end(), [s](MilliGpu f) { return f >= s; });
      if (it == free.end()) {
        free.push_back(kWholeGpu - s);
      } else {
        *it -= s;
      }
    }
    EXPECT_GE(plan.devices() + 1e-6, static_cast<double>(volume) / kWholeGpu) << "trial " << trial;
    EXPECT_LE(plan.devices(), static_cast<double>(free.size()) + 1e-6) << "trial " << trial;
  }
}

TEST(SharePlanTest, SaysWhichSizesKeepADeviceOnAPattern) {
  const SharePlan plan = SharePlan::Solve({{810, 10}, {160, 10}, {470, 10}});
  const auto bit = [&](MilliGpu s) { return uint64_t{1} << plan.IndexOf(s); };
  const SharePlan::Fit alone = plan.FitOf(std::vector<MilliGpu>{810});
  EXPECT_TRUE(alone.planned);
  EXPECT_NE(alone.next & bit(160), 0u);
  EXPECT_EQ(alone.next & bit(470), 0u);
  const SharePlan::Fit half = plan.FitOf(std::vector<MilliGpu>{470});
  EXPECT_NE(half.next & bit(470), 0u);
  EXPECT_FALSE(plan.FitOf(std::vector<MilliGpu>{470, 810}).planned);
  EXPECT_FALSE(plan.FitOf(std::vector<MilliGpu>{333}).planned);  // a size never seen
  EXPECT_EQ(plan.IndexOf(333), -1);
}

TEST(SharePlanTest, PlansOnlyTheMostFrequentSizesAndIgnoresWholeDevices) {
  std::vector<std::pair<MilliGpu, int64_t>> counts;
  for (int i = 1; i <= 99; ++i) counts.emplace_back(10 * i, i);  // 990 the most frequent
  counts.emplace_back(1000, 500);
  counts.emplace_back(0, 500);
  const SharePlan plan = SharePlan::Solve(counts);
  ASSERT_EQ(plan.sizes().size(), static_cast<size_t>(kMaxPlannedSizes));
  EXPECT_EQ(plan.sizes().front(), 10 * (99 - kMaxPlannedSizes + 1));
  EXPECT_EQ(plan.sizes().back(), 990);
  EXPECT_EQ(plan.IndexOf(1000), -1);
  EXPECT_TRUE(SharePlan::Solve({}).empty());
}

// A workload of 700s, 300s and 200s whose optimum pairs each 700 with a 300.
std::vector<WeightedType> SevenHundredsMix() {
  return {{TaskType{1000, 700, 1, 0}, 6.0 / 17, 6},
          {TaskType{1000, 300, 1, 0}, 6.0 / 17, 6},
          {TaskType{1000, 200, 1, 0}, 5.0 / 17, 5}};
}

// A 700 share on device 0 of node 0, as a restart adopts it.
Placement SevenHundredOnDeviceZero() {
  Placement p;
  p.node = 0;
  p.device_count = 1;
  p.devices[0] = 0;
  p.gpu_milli = 700;
  p.cpu_milli = 1000;
  p.memory_mib = 1024;
  return p;
}

// One node, two devices, a workload of 700s, 300s and 200s whose optimum pairs each 700 with a
// 300. With a 700 on device 0, a 200 fits there too, and the fragmentation gradient prefers it
// (it fills the 300-hole a 700 cannot use); the plan sends it to the empty device instead,
// keeping the hole for a 300. `placed` is how the 700 got there: placed, or adopted after a
// restart (the policy must learn of adopted jobs too).
int DeviceOfTheTwoHundred(bool share_plan, bool adopted) {
  auto state = ClusterState::FromNodes({MakeNode("n", 2, 64000, 262144)});
  const std::vector<WeightedType> mix = SevenHundredsMix();
  FragmentationOptions opt{.quantum_milli = 10, .share_plan = share_plan};
  Scheduler s(std::move(*state), NewFragmentationPolicy("t", opt, mix), 1);
  if (adopted) {
    EXPECT_TRUE(s.Adopt(SevenHundredOnDeviceZero()).ok());
  } else {
    const auto r = s.Place(Job(1000, 1, 700));
    EXPECT_TRUE(r.placed());
    if (r.placement.devices[0] != 0) return -1;  // the setup assumes device 0
  }
  const auto r = s.Place(Job(1000, 1, 200));
  return r.placed() ? r.placement.devices[0] : -2;
}

TEST(SharePlanPolicyTest, AShareThatWouldLeaveEveryPatternTakesAnEmptyDevice) {
  EXPECT_EQ(DeviceOfTheTwoHundred(false, false), 0);  // the gradient alone
  EXPECT_EQ(DeviceOfTheTwoHundred(true, false), 1);
  EXPECT_EQ(DeviceOfTheTwoHundred(true, true), 1);
}

// Where GPU memory rules out the device the index chose, the best device that fits is taken,
// tiers included: here the empty device with the memory, not the pattern the share would break.
TEST(SharePlanPolicyTest, AShareRuledOutByGpuMemoryStillKeepsThePattern) {
  Node node = MakeNode("n", 0, 64000, 262144);
  node.devices = {Device{0, "G2", 81920}, Device{1, "G2", 16384}, Device{2, "G2", 81920}};
  auto state = ClusterState::FromNodes({node});
  ASSERT_TRUE(state.ok());
  const std::vector<WeightedType> mix = SevenHundredsMix();
  FragmentationOptions opt{.quantum_milli = 10, .share_plan = true};
  Scheduler s(std::move(*state), NewFragmentationPolicy("t", opt, mix), 1);
  ASSERT_TRUE(s.Adopt(SevenHundredOnDeviceZero()).ok());
  PlacementRequest r = Job(1000, 1, 200);
  r.gpu_memory_mib = 32768;  // not on device 1
  const auto res = s.Place(r);
  ASSERT_TRUE(res.placed());
  EXPECT_EQ(res.placement.devices[0], 2);
}

// Adopt refuses, changing nothing, a placement it could not have made: a device listed twice
// (each check alone would pass, and the device would be reserved twice), more devices than the
// node has, negative amounts, more than a whole device.
TEST(SchedulerAdoptTest, RefusesMalformedPlacementsAndChangesNothing) {
  auto state = ClusterState::FromNodes({MakeNode("n", 2, 64000, 262144)});
  ASSERT_TRUE(state.ok());
  Scheduler s(std::move(*state), NewFragmentationPolicy("t", FragmentationOptions{}, {}), 1);
  Placement twice = SevenHundredOnDeviceZero();
  twice.device_count = 2;
  twice.devices[1] = 0;
  twice.gpu_milli = 600;
  Status st = s.Adopt(twice);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("listed twice"), std::string::npos) << st.message();
  Placement many = SevenHundredOnDeviceZero();
  many.device_count = 3;
  many.devices = {0, 1, 2};
  EXPECT_NE(s.Adopt(many).message().find("device count 3"), std::string::npos);
  Placement negative = SevenHundredOnDeviceZero();
  negative.cpu_milli = -1;
  EXPECT_NE(s.Adopt(negative).message().find("negative"), std::string::npos);
  Placement over = SevenHundredOnDeviceZero();
  over.gpu_milli = 1001;
  EXPECT_NE(s.Adopt(over).message().find("past a whole device"), std::string::npos);
  // Nothing was reserved: both devices take a whole job each.
  const auto a = s.Place(Job(1000, 1, 1000));
  const auto b = s.Place(Job(1000, 1, 1000));
  EXPECT_TRUE(a.placed() && b.placed());
}

// A released share reopens its place in the pattern.
TEST(SharePlanPolicyTest, AReleasedShareReopensItsSlot) {
  auto state = ClusterState::FromNodes({MakeNode("n", 2, 64000, 262144)});
  const std::vector<WeightedType> mix = {{TaskType{1000, 700, 1, 0}, 0.5, 6},
                                         {TaskType{1000, 300, 1, 0}, 0.5, 6}};
  FragmentationOptions opt{.quantum_milli = 10, .share_plan = true};
  Scheduler s(std::move(*state), NewFragmentationPolicy("t", opt, mix), 1);
  const auto big = s.Place(Job(1000, 1, 700));
  ASSERT_TRUE(big.placed());
  const auto first = s.Place(Job(1000, 1, 300));
  ASSERT_TRUE(first.placed());
  EXPECT_EQ(first.placement.devices[0], big.placement.devices[0]);
  s.Release(first.placement);
  const auto again = s.Place(Job(1000, 1, 300));
  ASSERT_TRUE(again.placed());
  EXPECT_EQ(again.placement.devices[0], big.placement.devices[0]);
  // The other device is still empty: the 300s never took it.
  EXPECT_EQ(s.state().node(0).gpu_free[1 - big.placement.devices[0]], kWholeGpu);
}

// Whatever the tiers say, a job that fits some node is placed: under a random stream of shares,
// whole and multi-device jobs, CPU-only jobs and model constraints, with releases and
// re-adoptions, the default policy places exactly the jobs that fit.
TEST(SharePlanPolicyTest, EveryJobThatFitsSomewhereIsPlaced) {
  std::vector<Node> nodes;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 12; ++i) {
    nodes.push_back(MakeNode("n" + std::to_string(i), 2 + static_cast<int>(rng() % 7),
                             16000 + static_cast<MilliCpu>(rng() % 48) * 1000, 262144,
                             i % 3 ? "G2" : "T4"));
  }
  auto state = ClusterState::FromNodes(nodes);
  ASSERT_TRUE(state.ok());
  auto policy = MakePolicy("tessera", {});
  ASSERT_TRUE(policy.ok());
  Scheduler s(std::move(*state), std::move(*policy), 9);
  const MilliGpu shares[] = {810, 470, 320, 650, 230, 160, 110, 50, 550, 370};
  std::vector<Placement> held;
  int placed = 0, refused = 0;
  for (int i = 0; i < 3000; ++i) {
    PlacementRequest r;
    const int kind = static_cast<int>(rng() % 10);
    if (kind < 6) {
      r = Job(1000 + static_cast<MilliCpu>(rng() % 8) * 1000, 1, shares[rng() % 10]);
    } else if (kind < 8) {
      r = Job(4000, 1 + static_cast<int>(rng() % 2) * 3, 1000);
    } else {
      r = Job(2000 + static_cast<MilliCpu>(rng() % 4) * 1000, 0, 0);
    }
    if (r.gpu_count > 0 && rng() % 5 == 0) r.models = ModelMask{1} << s.state().model_id("T4");
    bool fits = false;
    for (int n = 0; n < s.state().node_count() && !fits; ++n) fits = NodeFits(s.state().node(n), r);
    const auto res = s.Place(r);
    ASSERT_EQ(res.placed(), fits) << "request " << i;
    if (res.placed()) {
      ++placed;
      held.push_back(res.placement);
    } else {
      ++refused;
    }
    if (!held.empty() && rng() % 3 == 0) {  // a release, and now and then the same job adopted back
      const size_t k = rng() % held.size();
      const Placement p = held[k];
      s.Release(p);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
      if (rng() % 4 == 0) {
        ASSERT_TRUE(s.Adopt(p).ok());
        held.push_back(p);
      }
    }
    ASSERT_TRUE(s.state().CheckInvariants().ok());
  }
  EXPECT_GT(placed, 500);
  EXPECT_GT(refused, 100);  // the cluster was full at times
}

}  // namespace
}  // namespace tessera::sched
