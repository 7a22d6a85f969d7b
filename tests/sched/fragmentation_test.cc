// The indexed FGD policy against a brute-force scan written straight from PROTOCOL.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "sched/scheduler.h"
#include "test_cluster.h"

namespace tessera::sched {
namespace {

using testing::Job;
using testing::MakeNode;

double Fragment(const NodeState& n, const std::vector<WeightedType>& mix) {
  MilliGpu free = 0;
  for (int d = 0; d < n.device_count; ++d) free += n.gpu_free[d];
  double f = 0;
  for (const WeightedType& w : mix) {
    const TaskType& t = w.type;
    int fit = 0;
    MilliGpu small = 0;
    for (int d = 0; d < n.device_count; ++d) {
      if (n.gpu_free[d] >= t.gpu_milli) {
        ++fit;
      } else {
        small += n.gpu_free[d];
      }
    }
    bool runs = t.gpu_milli > 0 && n.model >= 0 && (t.models == 0 || (t.models >> n.model) & 1) &&
                n.cpu_free >= t.cpu_milli && fit >= t.gpu_count;
    f += w.weight * static_cast<double>(runs ? small : free);
  }
  return f;
}

// FGD's score of the best device choice on node n (or -1 when r does not fit).
int BruteScore(const NodeState& n, const PlacementRequest& r,
               const std::vector<WeightedType>& mix) {
  if (!NodeFits(n, r)) return -1;
  const double before = Fragment(n, mix);
  auto score_after = [&](const NodeState& after) {
    double delta = Fragment(after, mix) - before;
    return static_cast<int>(std::floor(100.0 / (1.0 + std::exp(delta / 1000.0))));
  };
  NodeState after = n;
  after.cpu_free -= r.cpu_milli;
  after.memory_free -= r.memory_mib;
  if (!r.fractional()) {
    int need = r.gpu_count;
    for (int d = 0; d < n.device_count && need > 0; ++d) {
      if (after.gpu_free[d] == kWholeGpu) {
        after.gpu_free[d] = 0;
        --need;
      }
    }
    return score_after(after);
  }
  int best = -1;
  for (int d = 0; d < n.device_count; ++d) {
    if (n.gpu_free[d] < r.gpu_milli) continue;
    NodeState a = after;
    a.gpu_free[d] -= r.gpu_milli;
    best = std::max(best, score_after(a));
  }
  return best;
}

TEST(FgdIndexTest, EveryDecisionIsABestScoreOfABruteForceScan) {
  std::vector<Node> nodes;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 40; ++i) {
    int gpus = (i % 3 == 0) ? 8 : (i % 3 == 1 ? 2 : 4);
    nodes.push_back(MakeNode("n" + std::to_string(i), gpus,
                             8000 + static_cast<MilliCpu>(rng() % 64) * 1000, 262144,
                             i % 4 == 0 ? "T4" : "G2"));
  }
  const std::vector<WeightedType> mix = {
      {TaskType{4000, 0, 0, 0}, 0.15},    {TaskType{3000, 810, 1, 0}, 0.25},
      {TaskType{6000, 470, 1, 0}, 0.15},  {TaskType{8000, 1000, 1, 0}, 0.3},
      {TaskType{12000, 1000, 2, 0}, 0.1}, {TaskType{16000, 1000, 8, 0}, 0.05}};
  auto state = ClusterState::FromNodes(nodes);
  ASSERT_TRUE(state.ok());
  auto policy = MakePolicy("fgd", PolicyConfig{mix});
  ASSERT_TRUE(policy.ok());
  Scheduler s(std::move(*state), std::move(*policy), 11);
  int placed = 0;
  for (int i = 0; i < 400; ++i) {
    const WeightedType& w = mix[rng() % mix.size()];
    // Some requests outside the mix too (new shapes), to exercise index creation.
    PlacementRequest r = Job(w.type.cpu_milli + (i % 7 == 0 ? 500 : 0), w.type.gpu_count,
                             w.type.gpu_milli == 1000 || w.type.gpu_count == 0
                                 ? w.type.gpu_milli
                                 : w.type.gpu_milli - (i % 5 == 0 ? 130 : 0));
    if (i % 11 == 0) r.models = ModelMask{1} << s.state().model_id("T4");
    int best = -1;
    for (int n = 0; n < s.state().node_count(); ++n) {
      best = std::max(best, BruteScore(s.state().node(n), r, mix));
    }
    const ClusterState before = s.state();
    auto res = s.Place(r);
    if (best < 0) {
      EXPECT_FALSE(res.placed()) << i;
      continue;
    }
    ASSERT_TRUE(res.placed()) << i;
    ++placed;
    // The chosen node and device reach the best score found by the scan.
    NodeState chosen = before.node(res.placement.node);
    NodeState after = chosen;
    after.cpu_free -= r.cpu_milli;
    for (int k = 0; k < res.placement.device_count; ++k)
      after.gpu_free[res.placement.devices[k]] -= r.gpu_milli;
    double delta = Fragment(after, mix) - Fragment(chosen, mix);
    int got = static_cast<int>(std::floor(100.0 / (1.0 + std::exp(delta / 1000.0))));
    EXPECT_EQ(got, best) << "decision " << i;
    ASSERT_TRUE(s.state().CheckInvariants().ok());
  }
  EXPECT_GT(placed, 100);
}

// Nodes joining mid-run (of both models) take their place in the index: every decision still
// reaches the brute-force best, and a job pinned to a model lands only on that model.
TEST(FgdIndexTest, NodesAddedMidRunAreScoredLikeTheOthers) {
  std::vector<Node> nodes;
  for (int i = 0; i < 6; ++i)
    nodes.push_back(MakeNode("n" + std::to_string(i), 4, 32000, 262144, i % 2 ? "T4" : "G2"));
  const std::vector<WeightedType> mix = {{TaskType{2000, 500, 1, 0}, 0.5},
                                         {TaskType{8000, 1000, 1, 0}, 0.3},
                                         {TaskType{12000, 1000, 2, 0}, 0.2}};
  auto state = ClusterState::FromNodes(nodes);
  ASSERT_TRUE(state.ok());
  auto policy = MakePolicy("fgd", PolicyConfig{mix});
  ASSERT_TRUE(policy.ok());
  Scheduler s(std::move(*state), std::move(*policy), 3);
  std::mt19937_64 rng(9);
  int placed = 0;
  for (int i = 0; i < 240; ++i) {
    if (i % 12 == 0) {
      ASSERT_TRUE(
          s.AddNode(MakeNode("a" + std::to_string(i), 4, 32000, 262144, (i / 12) % 2 ? "T4" : "G2"))
              .ok());
    }
    const WeightedType& w = mix[rng() % mix.size()];
    PlacementRequest r = Job(w.type.cpu_milli, w.type.gpu_count, w.type.gpu_milli);
    const bool pinned = i % 3 == 0;
    if (pinned) r.models = ModelMask{1} << s.state().model_id("T4");
    int best = -1;
    for (int n = 0; n < s.state().node_count(); ++n)
      best = std::max(best, BruteScore(s.state().node(n), r, mix));
    const ClusterState before = s.state();
    auto res = s.Place(r);
    ASSERT_EQ(res.placed(), best >= 0) << i;
    if (!res.placed()) continue;
    ++placed;
    NodeState chosen = before.node(res.placement.node);
    if (pinned) {
      EXPECT_EQ(chosen.model, s.state().model_id("T4")) << i;
    }
    NodeState after = chosen;
    after.cpu_free -= r.cpu_milli;
    for (int k = 0; k < res.placement.device_count; ++k)
      after.gpu_free[res.placement.devices[k]] -= r.gpu_milli;
    const double delta = Fragment(after, mix) - Fragment(chosen, mix);
    EXPECT_EQ(static_cast<int>(std::floor(100.0 / (1.0 + std::exp(delta / 1000.0)))), best)
        << "decision " << i;
    if (i % 4 == 3) s.Release(res.placement);  // some room comes back
  }
  EXPECT_GT(placed, 100);
}

// The fragment is summed in integers (request counts x milli-GPU): the same mix listed in
// another order gives the same decisions, where floating-point sums could break near-ties
// differently.
TEST(TesseraPolicyTest, TheOrderOfTheMixChangesNoDecision) {
  std::vector<Node> nodes;
  for (int i = 0; i < 24; ++i)
    nodes.push_back(MakeNode("n" + std::to_string(i), 8, 96000, 393216, i % 3 ? "G2" : "T4"));
  std::vector<WeightedType> mix;
  std::mt19937_64 rng(21);
  int64_t total = 0;
  for (int k = 0; k < 30; ++k) {
    const int64_t count = 1 + static_cast<int64_t>(rng() % 97);
    const MilliGpu gpu = k % 5 == 0 ? 1000 : 100 * (1 + static_cast<MilliGpu>(rng() % 9)) + 7 * k;
    mix.push_back(
        {TaskType{1000 * (1 + static_cast<MilliCpu>(rng() % 12)), gpu, 1 + (k % 7 == 0 ? 1 : 0), 0},
         0, count});
    total += count;
  }
  for (auto& w : mix) w.weight = static_cast<double>(w.count) / static_cast<double>(total);
  std::vector<WeightedType> reversed(mix.rbegin(), mix.rend());
  auto decisions = [&](const std::vector<WeightedType>& m) {
    auto state = ClusterState::FromNodes(nodes);
    auto policy = MakePolicy("tessera-oracle", PolicyConfig{m});
    Scheduler s(std::move(*state), std::move(*policy), 5);
    std::mt19937_64 draw(77);
    std::vector<std::pair<int, int>> out;
    for (int i = 0; i < 400; ++i) {
      const WeightedType& w = mix[draw() % mix.size()];
      PlacementRequest r = Job(w.type.cpu_milli, w.type.gpu_count, w.type.gpu_milli);
      if (i % 4 == 0) r.models = ModelMask{1} << s.state().model_id("T4");
      auto res = s.Place(r);
      out.emplace_back(res.placed() ? res.placement.node : -1,
                       res.placed() ? res.placement.devices[0] : -1);
      if (res.placed() && i % 3 == 2) s.Release(res.placement);
    }
    return out;
  };
  const auto a = decisions(mix), b = decisions(reversed);
  EXPECT_EQ(a, b);
  EXPECT_GT(std::count_if(a.begin(), a.end(), [](const auto& d) { return d.first >= 0; }), 200);
}

TEST(TypicalMixTest, KeepsThePopularTypesCoveringTheShare) {
  std::vector<PlacementRequest> reqs;
  for (int i = 0; i < 60; ++i) reqs.push_back(Job(1000, 1, 500));
  for (int i = 0; i < 35; ++i) reqs.push_back(Job(2000, 1, 1000));
  for (int i = 0; i < 5; ++i) reqs.push_back(Job(3000, 0, 0));
  auto mix = TypicalMix(reqs, 0.95);
  ASSERT_EQ(mix.size(), 2u);
  EXPECT_DOUBLE_EQ(mix[0].weight, 60.0 / 95.0);
  EXPECT_EQ(mix[1].type.gpu_milli, 1000);
  EXPECT_EQ(TypicalMix(reqs, 1.0).size(), 3u);
}

// The CPU balance term steers a CPU-only job away from a node whose free GPUs still need CPU.
TEST(TesseraPolicyTest, CpuOnlyJobsSpareTheCpuOfNodesWithFreeGpus) {
  // g: 4 free GPUs, 48 cores. c: no GPU left free, 48 cores. Both could take the job.
  std::vector<Node> nodes = {MakeNode("g", 4, 48000, 262144), MakeNode("c", 4, 48000, 262144)};
  auto state = ClusterState::FromNodes(nodes);
  ASSERT_TRUE(state.ok());
  auto policy = MakePolicy("tessera", {});
  ASSERT_TRUE(policy.ok());
  Scheduler s(std::move(*state), std::move(*policy), 1);
  // Teach the mix: GPU jobs need 10 cores per GPU. Fill node c's GPUs with them.
  int on_c = 0;
  for (int i = 0; i < 8 && on_c < 4; ++i) {
    auto r = s.Place(Job(10000, 1, 1000));
    ASSERT_TRUE(r.placed());
    if (s.state().node_name(r.placement.node) == "c") {
      ++on_c;
    } else {
      s.Release(r.placement);
    }
  }
  ASSERT_EQ(on_c, 4);
  auto cpu_job = s.Place(Job(8000, 0, 0));
  ASSERT_TRUE(cpu_job.placed());
  EXPECT_EQ(s.state().node_name(cpu_job.placement.node), "c");
}

}  // namespace
}  // namespace tessera::sched
