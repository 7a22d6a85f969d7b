// The fragmentation policies' GPU-memory views (fragmentation_internal.h): a request asking for
// GPU memory finds its best node among those with the memory free in one query. Against the same
// policy without them (the type's trees, unfit nodes popped one by one), a random run of
// placements and releases on a fleet of small and large cards gives the same decision every
// time, and every view stays equal to a recount from the cluster's state.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "sched/policies/fragmentation_internal.h"
#include "sched/policies/policies.h"
#include "sched/scheduler.h"
#include "test_cluster.h"

namespace tessera::sched {
namespace {

using testing::Job;
using testing::MakeNode;

// Tessera's default options (registry.cc), the views on or off.
FragmentationOptions Tessera(bool views) {
  return {.truncated_score = false,
          .quantum_milli = 10,
          .online_mix = true,
          .cpu_balance_weight = 1.0,
          .memory_balance_weight = 1.0,
          .model_balance_weight = 8.0,
          .share_plan = true,
          .gpu_memory_views = views};
}

Scheduler Make(const std::vector<Node>& nodes, bool views) {
  auto state = ClusterState::FromNodes(nodes);
  EXPECT_TRUE(state.ok());
  return Scheduler(std::move(*state), NewFragmentationPolicy("tessera", Tessera(views), {}), 7);
}

bool ViewsMatch(const Scheduler& s) {
  const auto* p = dynamic_cast<const frag::FragmentationPolicy*>(&s.policy());
  return p != nullptr && p->MemoryViewsMatch(s.state());
}

TEST(MemoryViewsTest, SameDecisionsAsPoppingAndEqualToARecountAfterRandomPlaceAndRelease) {
  // 40 GiB cards (two 16 GiB shares leave 600 milli-GPU free that no 16 GiB share can use) and
  // 80 GiB cards, some nodes short of host memory.
  std::vector<Node> nodes;
  for (int i = 0; i < 24; ++i) {
    const bool small = i % 3 != 0;
    nodes.push_back(MakeNode("n" + std::to_string(i), i % 4 == 0 ? 4 : 8, 96000,
                             i % 5 == 0 ? 48 * 1024 : 512 * 1024, small ? "A100-40GB" : "H100-80GB",
                             small ? 40960 : 81920));
  }
  Scheduler with = Make(nodes, true), without = Make(nodes, false);
  std::mt19937_64 rng(3);
  std::vector<Placement> held;
  int placed = 0, views_used = 0, refused = 0;
  for (int i = 0; i < 3000; ++i) {
    if (!held.empty() && rng() % 3 == 0) {
      const size_t k = rng() % held.size();
      with.Release(held[k]);
      without.Release(held[k]);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      PlacementRequest r;
      const uint64_t kind = rng() % 10;
      if (kind < 7) {  // a share asking for GPU memory
        r = Job(1000, 1, 100 * static_cast<MilliGpu>(1 + rng() % 4),
                static_cast<MiB>(4 + rng() % 30) * 1024);
        r.gpu_memory_mib = static_cast<MiB>(4 + rng() % 13) * 1024;
        ++views_used;
      } else if (kind < 9) {  // whole cards, some asking for more memory than a small card has
        r = Job(4000, 1 + static_cast<int>(rng() % 2), kWholeGpu, 32 * 1024);
        if (rng() % 2 == 0) r.gpu_memory_mib = 60 * 1024;
      } else {  // a share pinned to the small cards
        r = Job(1000, 1, 200, 8 * 1024);
        r.gpu_memory_mib = 12 * 1024;
        r.models = ModelMask{1} << with.state().model_id("A100-40GB");
      }
      const PlacementResult a = with.Place(r), b = without.Place(r);
      ASSERT_EQ(a.placed(), b.placed()) << "request " << i;
      if (!a.placed()) {
        ++refused;
        continue;
      }
      ASSERT_EQ(a.placement.node, b.placement.node) << "request " << i;
      ASSERT_EQ(a.placement.device_count, b.placement.device_count) << "request " << i;
      for (int d = 0; d < a.placement.device_count; ++d)
        ASSERT_EQ(a.placement.devices[d], b.placement.devices[d]) << "request " << i;
      held.push_back(a.placement);
      ++placed;
    }
    ASSERT_TRUE(ViewsMatch(with)) << "after step " << i;
  }
  EXPECT_GT(placed, 1000);
  EXPECT_GT(refused, 50) << "the fleet should fill up at times";
  EXPECT_GT(views_used, 1000);
}

// Nodes joining take their place in the views too.
TEST(MemoryViewsTest, NodesAddedMidRunJoinTheViews) {
  std::vector<Node> nodes;
  for (int i = 0; i < 4; ++i)
    nodes.push_back(MakeNode("n" + std::to_string(i), 4, 32000, 262144, "A100-40GB", 40960));
  Scheduler with = Make(nodes, true), without = Make(nodes, false);
  for (int i = 0; i < 60; ++i) {
    if (i % 10 == 5) {
      const Node n = MakeNode("a" + std::to_string(i), 4, 32000, 262144,
                              i % 20 == 5 ? "H100-80GB" : "A100-40GB", i % 20 == 5 ? 81920 : 40960);
      ASSERT_TRUE(with.AddNode(n).ok());
      ASSERT_TRUE(without.AddNode(n).ok());
    }
    PlacementRequest r = Job(1000, 1, 200, 1024);
    r.gpu_memory_mib = (i % 2 ? 16 : 10) * 1024;
    const PlacementResult a = with.Place(r), b = without.Place(r);
    ASSERT_EQ(a.placed(), b.placed()) << i;
    if (a.placed()) {
      ASSERT_EQ(a.placement.node, b.placement.node) << i;
      ASSERT_EQ(a.placement.devices[0], b.placement.devices[0]) << i;
    }
    ASSERT_TRUE(ViewsMatch(with)) << "after step " << i;
  }
}

}  // namespace
}  // namespace tessera::sched
