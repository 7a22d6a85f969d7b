#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <random>

#include "test_cluster.h"

namespace tessera::sched {
namespace {

using testing::Job;
using testing::MakeNode;

std::unique_ptr<Scheduler> Make(const std::vector<Node>& nodes, const std::string& policy,
                                uint64_t seed = 42, std::vector<WeightedType> mix = {}) {
  auto state = ClusterState::FromNodes(nodes);
  EXPECT_TRUE(state.ok()) << state.status().ToString();
  PolicyConfig config;
  config.target_mix = std::move(mix);
  if (config.target_mix.empty()) {
    config.target_mix = {{TaskType{1000, 500, 1, 0}, 0.5}, {TaskType{1000, 1000, 1, 0}, 0.5}};
  }
  auto p = MakePolicy(policy, config);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::make_unique<Scheduler>(std::move(*state), std::move(*p), seed);
}

TEST(ClusterStateTest, RejectsMixedModelsAndTooManyDevices) {
  Node mixed = MakeNode("n0", 2, 8000, 8192);
  mixed.devices[1].model = "T4";
  auto s = ClusterState::FromNodes({mixed});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("n0"), std::string::npos);
  EXPECT_FALSE(ClusterState::FromNodes({MakeNode("big", kMaxDevices + 1, 1000, 1024)}).ok());
}

// Every policy honours CPU, memory, GPU count, fraction and model constraints.
class EveryPolicyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryPolicyTest, HonoursEveryConstraint) {
  std::vector<Node> nodes = {MakeNode("a", 2, 8000, 16384, "T4"),
                             MakeNode("b", 4, 32000, 65536, "V100"),
                             MakeNode("cpu", 0, 64000, 262144, "")};
  auto s = Make(nodes, GetParam());
  // A 4-GPU job fits only on b.
  auto r = s->Place(Job(1000, 4, 1000));
  ASSERT_TRUE(r.placed());
  EXPECT_EQ(s->state().node_name(r.placement.node), "b");
  EXPECT_EQ(r.placement.device_count, 4);
  // A job restricted to T4 lands on a.
  PlacementRequest t4 = Job(1000, 1, 300);
  t4.models = ModelMask{1} << s->state().model_id("T4");
  r = s->Place(t4);
  ASSERT_TRUE(r.placed());
  EXPECT_EQ(s->state().node_name(r.placement.node), "a");
  // A CPU-only job too big for a and b (after b's 4 GPUs took 1 core) goes to the CPU node.
  r = s->Place(Job(40000, 0, 0));
  ASSERT_TRUE(r.placed());
  EXPECT_EQ(s->state().node_name(r.placement.node), "cpu");
  EXPECT_EQ(r.placement.device_count, 0);
  // Memory: nothing has 300 GiB.
  r = s->Place(Job(1000, 0, 0, 300 * 1024));
  EXPECT_EQ(r.outcome, Outcome::kNeverSchedulable);
  EXPECT_EQ(r.step, "ResourceFit");
  EXPECT_TRUE(s->state().CheckInvariants().ok());
}

TEST_P(EveryPolicyTest, FillsExactlyAndReleasesExactly) {
  std::vector<Node> nodes = {MakeNode("a", 2, 64000, 65536), MakeNode("b", 2, 64000, 65536)};
  auto s = Make(nodes, GetParam());
  const ClusterState before = s->state();
  std::vector<Placement> held;
  // Two whole GPUs, then 8 quarter-GPU shares fill the other two (whole jobs first, so that
  // even the random policy cannot spread the shares over every GPU).
  for (int i = 0; i < 2; ++i) {
    auto r = s->Place(Job(1000, 1, 1000));
    ASSERT_TRUE(r.placed()) << GetParam() << " whole " << i;
    held.push_back(r.placement);
  }
  for (int i = 0; i < 8; ++i) {
    auto r = s->Place(Job(1000, 1, 250));
    ASSERT_TRUE(r.placed()) << i;
    held.push_back(r.placement);
  }
  EXPECT_EQ(s->state().gpu_allocated(), 4000);
  auto full = s->Place(Job(1000, 1, 1));
  EXPECT_EQ(full.outcome, Outcome::kUnschedulableNow);
  EXPECT_EQ(full.step, "GpuFit");
  ASSERT_TRUE(s->state().CheckInvariants().ok());
  for (const Placement& p : held) s->Release(p);
  EXPECT_EQ(s->state().gpu_allocated(), 0);
  for (int i = 0; i < s->state().node_count(); ++i) {
    const NodeState& a = s->state().node(i);
    const NodeState& b = before.node(i);
    EXPECT_EQ(a.cpu_free, b.cpu_free);
    EXPECT_EQ(a.memory_free, b.memory_free);
    EXPECT_EQ(a.gpu_free, b.gpu_free);
    EXPECT_EQ(a.gpu_holders, b.gpu_holders);
  }
  // Capacity released is usable again, by a job as large as a node.
  EXPECT_TRUE(s->Place(Job(1000, 2, 1000)).placed());
}

TEST_P(EveryPolicyTest, SameSeedSameDecisions) {
  std::vector<Node> nodes;
  for (int i = 0; i < 20; ++i) nodes.push_back(MakeNode("n" + std::to_string(i), 4, 32000, 131072));
  auto a = Make(nodes, GetParam(), 7);
  auto b = Make(nodes, GetParam(), 7);
  std::mt19937_64 rng(1);
  for (int i = 0; i < 200; ++i) {
    MilliGpu milli = static_cast<MilliGpu>(100 + rng() % 900);
    PlacementRequest j = rng() % 3 == 0 ? Job(2000, 1, 1000) : Job(1000, 1, milli);
    auto ra = a->Place(j);
    auto rb = b->Place(j);
    ASSERT_EQ(ra.placed(), rb.placed());
    if (ra.placed()) {
      ASSERT_EQ(ra.placement.node, rb.placement.node);
      ASSERT_EQ(ra.placement.devices, rb.placement.devices);
    }
  }
}

// Nodes joining a running scheduler are taken in place (no rebuild): every policy indexes them at
// once, past its indexes' first size, with a GPU model new to the state, and nothing else moves.
TEST_P(EveryPolicyTest, NodesJoinInPlace) {
  auto s = Make({MakeNode("a", 2, 64000, 65536), MakeNode("b", 2, 64000, 65536)}, GetParam());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(s->Place(Job(1000, 1, 1000)).placed());
  EXPECT_EQ(s->Place(Job(1000, 1, 100)).outcome, Outcome::kUnschedulableNow);
  // A V100 node joins: a V100-only request goes there, as does anything else now.
  ASSERT_TRUE(s->AddNode(MakeNode("v", 4, 64000, 65536, "V100")).ok());
  PlacementRequest v100 = Job(1000, 1, 500);
  v100.models = ModelMask{1} << s->state().model_id("V100");
  auto r = s->Place(v100);
  ASSERT_TRUE(r.placed());
  EXPECT_EQ(s->state().node_name(r.placement.node), "v");
  // Ten more join one by one (the indexes grow past their first size): every GPU is reachable.
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(s->AddNode(MakeNode("j" + std::to_string(i), 2, 64000, 65536)).ok());
  int placed = 0;
  while (s->Place(Job(1000, 1, 1000)).placed()) ++placed;
  EXPECT_EQ(placed, 3 + 20) << "the V100 node's 3 free GPUs and the 20 of the joined nodes";
  EXPECT_EQ(s->state().gpu_allocated(), s->state().gpu_capacity() - 500);
  EXPECT_TRUE(s->state().CheckInvariants().ok());
  // A node the state cannot hold is refused and changes nothing.
  Node mixed = MakeNode("m", 2, 8000, 8192);
  mixed.devices[1].model = "T4";
  EXPECT_FALSE(s->AddNode(mixed).ok());
  EXPECT_EQ(s->state().node_count(), 13);
}

INSTANTIATE_TEST_SUITE_P(Policies, EveryPolicyTest, ::testing::ValuesIn(PolicyNames()),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           std::string n = param_info.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

TEST(PolicyRegistryTest, UnknownNameListsKnownOnes) {
  auto p = MakePolicy("fastest", {});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("bestfit"), std::string::npos);
  EXPECT_NE(p.status().message().find("tessera"), std::string::npos);
}

TEST(PolicyRegistryTest, FgdNeedsTheMixUpFrontTesseraDoesNot) {
  EXPECT_FALSE(MakePolicy("fgd", {}).ok());
  EXPECT_TRUE(MakePolicy("tessera", {}).ok());
}

TEST(DiagnoseTest, NeverVersusNow) {
  auto s = Make({MakeNode("a", 2, 8000, 16384, "T4")}, "tessera");
  auto r = s->Place(Job(1000, 4, 1000));
  EXPECT_EQ(r.outcome, Outcome::kNeverSchedulable);
  EXPECT_NE(r.reason.find("even when empty"), std::string::npos) << r.reason;
  PlacementRequest wrong = Job(1000, 1, 500);
  wrong.models = ModelMask{1} << 5;  // a model id no node has
  r = s->Place(wrong);
  EXPECT_EQ(r.outcome, Outcome::kNeverSchedulable);
  EXPECT_EQ(r.step, "GpuModel");
  ASSERT_TRUE(s->Place(Job(7000, 1, 100)).placed());
  r = s->Place(Job(2000, 1, 100));
  EXPECT_EQ(r.outcome, Outcome::kUnschedulableNow);
  EXPECT_EQ(r.step, "ResourceFit");
}

// Every scoring policy puts a second share on the GPU the first one opened, keeping the other
// GPUs whole (random excepted: it has no preference).
TEST(BaselinePreferenceTest, SharesStackOnAnOpenedGpu) {
  for (const std::string policy :
       {"packing", "bestfit", "dotprod", "clustering", "fgd", "tessera"}) {
    auto s = Make({MakeNode("p", 2, 32000, 65536), MakeNode("e", 2, 32000, 65536)}, policy, 1);
    auto first = s->Place(Job(1000, 1, 400));
    ASSERT_TRUE(first.placed());
    auto second = s->Place(Job(1000, 1, 600));  // exactly what the opened GPU has left
    ASSERT_TRUE(second.placed());
    EXPECT_EQ(second.placement.node, first.placement.node) << policy;
    EXPECT_EQ(second.placement.devices[0], first.placement.devices[0]) << policy;
  }
}

TEST(ClusteringTest, KeepsKindsApart) {
  auto s = Make({MakeNode("a", 4, 32000, 65536), MakeNode("b", 4, 32000, 65536)}, "clustering", 3);
  auto share = s->Place(Job(1000, 1, 500));
  ASSERT_TRUE(share.placed());
  auto whole = s->Place(Job(1000, 1, 1000));
  ASSERT_TRUE(whole.placed());
  EXPECT_NE(whole.placement.node, share.placement.node) << "whole-GPU jobs avoid the share node";
  auto share2 = s->Place(Job(1000, 1, 600));
  ASSERT_TRUE(share2.placed());
  EXPECT_EQ(share2.placement.node, share.placement.node);
}

}  // namespace
}  // namespace tessera::sched
