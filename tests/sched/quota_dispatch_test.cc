// One queue over several external backends (issue 39): the forecast (forecast.h) and the cycle's
// choice of backend (engine_dispatch.cc). The backends here are the engine's pools only: nothing
// outside the quota engine runs.
#include <gtest/gtest.h>

#include "quota_world.h"
#include "sched/quota/forecast.h"

namespace tessera::quota {
namespace {

using namespace quota_world;  // NOLINT

TEST(Forecast, PredictedStartIsNowWhenItFitsElseWhenEnoughHoldsEnd) {
  EXPECT_EQ(PredictStart(-1, 7, {{5000, kForecastNever}}, 3000), 7) << "unbounded: now";
  EXPECT_EQ(PredictStart(2000, 7, {{1000, 50}}, 1000), 7) << "fits beside the hold";
  EXPECT_EQ(PredictStart(2000, 7, {{1000, 90}, {1000, 50}}, 2000), 90) << "both must end";
  EXPECT_EQ(PredictStart(2000, 7, {{1000, 90}, {1000, 50}}, 1000), 50) << "the first end";
  EXPECT_EQ(PredictStart(2000, 7, {{1000, kForecastNever}, {1000, 50}}, 2000), kForecastNever);
  EXPECT_EQ(PredictStart(2000, 7, {}, 3000), kForecastNever) << "more than the whole backend";
  EXPECT_EQ(PredictStart(2000, 60, {{2000, 50}}, 1000), 60) << "an end already past: now";
}

TEST(Forecast, TheEarliestWinsAndATieGoesToTheFirstListed) {
  EXPECT_EQ(ChooseEarliest({{"a", 10, ""}, {"b", 5, ""}, {"c", 5, ""}}), 1);
  EXPECT_EQ(ChooseEarliest({{"a", 5, ""}, {"b", 5, ""}}), 0);
  EXPECT_EQ(ChooseEarliest({{"a", kForecastNever, ""}}), -1);
  EXPECT_EQ(
      DescribeForecasts(
          {{"a", 3, ""}, {"b", 130, "1 of 2 GPU free"}, {"c", kForecastNever, "not answering"}}, 3),
      "a now, b in 127s (1 of 2 GPU free), c never (not answering)");
}

PolicySpec ThreeBackends() {
  PolicySpec p = BasePolicy();
  p.groups[0].limit.gpu_milli = 5000;
  p.queues.push_back({"multi", "gpu1", {"a", "b"}, 0, true, C::kTraining});
  p.queues.back().external = true;
  p.queues.back().external_pools = {"kube-a", "kube-b", "slurm"};
  return p;
}

TEST(QuotaDispatch, ABurstFillsTheFirstBackendThenSpillsToTheNextInOrder) {
  World w(ThreeBackends(), {});
  w.e->SetExternalCapacity("kube-a", 2000);
  w.e->SetExternalCapacity("kube-b", 1000);  // slurm: no capacity known, unbounded
  for (const char* id : {"j1", "j2", "j3", "j4", "j5", "j6"}) w.Submit(Job(id, "multi", "a"), 0);
  w.e->RunCycle(1);
  EXPECT_EQ(w.View("j1").ext_pool, "kube-a");
  EXPECT_EQ(w.View("j2").ext_pool, "kube-a");
  EXPECT_EQ(w.View("j3").ext_pool, "kube-b");
  EXPECT_EQ(w.View("j4").ext_pool, "slurm");
  EXPECT_EQ(w.View("j5").ext_pool, "slurm");
  // The group's limit (5 cards) counts all three backends once.
  EXPECT_EQ(w.State("j6"), JobState::kPending);
  EXPECT_EQ(w.View("j6").wait_step, "Admission");
  // Each decision keeps every backend's forecast: j3 would have waited forever in kube-a.
  const auto& d = w.View("j3").dispatch;
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].pool, "kube-a");
  EXPECT_EQ(d[0].start, kForecastNever);
  EXPECT_EQ(d[1].start, 1);
  EXPECT_EQ(d[2].start, 1);
  w.Done();
}

TEST(QuotaDispatch, AJobGoesWhereItStartsFirstEvenWhenTheFirstBackendHasRoomLeft) {
  World w(ThreeBackends(), {});
  w.e->SetExternalCapacity("kube-a", 2000);
  w.e->SetExternalCapacity("kube-b", 2000);
  w.e->SetExternalCapacity("slurm", 0);
  w.Submit(Job("short", "multi", "a", 1, 100), 0);
  w.e->RunCycle(0);
  EXPECT_EQ(w.View("short").ext_pool, "kube-a");
  // kube-a has a card free but this job wants two: there it starts when `short` ends (t=100);
  // kube-b starts it now.
  w.Submit(Job("pair", "multi", "a", 2), 5);
  w.e->RunCycle(5);
  EXPECT_EQ(w.State("pair"), JobState::kRunning);
  EXPECT_EQ(w.View("pair").ext_pool, "kube-b");
  const auto& d = w.View("pair").dispatch;
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].start, 100);
  EXPECT_EQ(d[0].note, "1 of 2 GPU free");
  EXPECT_EQ(d[1].start, 5);
  EXPECT_EQ(d[2].start, kForecastNever);
  // Nowhere now: it waits in Tessera (bound to no backend) with each backend's forecast.
  w.Submit(Job("third", "multi", "a", 2), 6);
  w.e->RunCycle(6);
  EXPECT_EQ(w.State("third"), JobState::kPending);
  EXPECT_EQ(w.View("third").ext_pool, "");
  EXPECT_NE(w.View("third").wait_reason.find("no backend has room now: kube-a in 94s "
                                             "(1 of 2 GPU free), kube-b never"),
            std::string::npos)
      << w.View("third").wait_reason;
  // `short` ends: kube-a has room again and takes it.
  w.e->Cancel(w.h["short"], 100, "done");
  w.e->RunCycle(100);
  EXPECT_EQ(w.View("third").ext_pool, "kube-a");
  w.Done();
}

TEST(QuotaDispatch, ABackendNotAnsweringGetsNoNewWorkUntilItAnswers) {
  World w(ThreeBackends(), {});
  w.e->SetExternalCapacity("kube-a", 2000);
  w.e->SetExternalCapacity("kube-b", 2000);
  w.Submit(Job("j1", "multi", "a"), 0);
  w.e->RunCycle(0);
  EXPECT_EQ(w.View("j1").ext_pool, "kube-a");
  w.e->SetExternalAnswering("kube-a", false);
  w.Submit(Job("j2", "multi", "a"), 1);
  w.e->RunCycle(1);
  EXPECT_EQ(w.View("j2").ext_pool, "kube-b") << "a tie with kube-a, were it answering";
  EXPECT_EQ(w.State("j1"), JobState::kRunning) << "what it holds stays held";
  EXPECT_EQ(w.View("j2").dispatch[0].note, "not answering");
  w.e->SetExternalAnswering("kube-a", true);
  w.Submit(Job("j3", "multi", "a"), 2);
  w.e->RunCycle(2);
  EXPECT_EQ(w.View("j3").ext_pool, "kube-a");
  w.Done();
}

}  // namespace
}  // namespace tessera::quota
