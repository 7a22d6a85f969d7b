// The quota engine's runtime guards per queue (issue 37): max_runtime stops a running job at its
// time with a kStopped event; min_runtime keeps a young job from being a preemption victim
// (priority and reclaim); preemption_delay keeps a job from preempting before it has waited.
// Each test has a known answer in exact seconds.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "quota_world.h"
#include "sched/quota/engine.h"
#include "sched/quota/policy_model.h"

namespace tessera::quota {
namespace {

using namespace quota_world;  // NOLINT

QueueSpec& Queue(PolicySpec& p, const std::string& name) {
  for (QueueSpec& q : p.queues) {
    if (q.name == name) return q;
  }
  ADD_FAILURE() << "no queue " << name;
  return p.queues.front();
}

std::vector<Event> EventsOf(const World& w, EventKind k) {
  std::vector<Event> out;
  for (const Event& e : w.e->events()) {
    if (e.kind == k) out.push_back(e);
  }
  return out;
}

TEST(QuotaGuards, MaxRuntimeStopsARunningJobAtItsTimeWithAnEvent) {
  PolicySpec p = BasePolicy();
  Queue(p, "train").max_runtime_s = 100;
  World w(p, {Node("n0", "train", 1)});
  w.Submit(Job("long", "train", "a"), 0);
  w.Submit(Job("next", "train", "b"), 0);
  w.e->RunCycle(0);
  ASSERT_EQ(w.State("long"), JobState::kRunning);
  EXPECT_EQ(w.View("long").stop_at, 100);  // users are told before it happens
  EXPECT_EQ(w.e->NextRuntimeStop(), 100);
  w.e->RunCycle(99);
  EXPECT_EQ(w.State("long"), JobState::kRunning);
  // Between cycles, at its exact time: stopped, its card free for the next cycle.
  EXPECT_EQ(w.e->StopOverRuntime(100), 1);
  EXPECT_EQ(w.State("long"), JobState::kDone);
  const std::vector<Event> stops = EventsOf(w, EventKind::kStopped);
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].job, "long");
  EXPECT_EQ(stops[0].time, 100);
  EXPECT_NE(stops[0].detail.find("max_runtime 100s of queue train"), std::string::npos)
      << stops[0].detail;
  EXPECT_STREQ(EventKindName(EventKind::kStopped), "stopped");
  w.e->RunCycle(100);
  ASSERT_EQ(w.State("next"), JobState::kRunning);
  EXPECT_EQ(w.e->NextRuntimeStop(), 200);
  // The cycle itself stops what reached its limit (here at the first cycle after 200).
  w.e->RunCycle(205);
  EXPECT_EQ(w.State("next"), JobState::kDone);
  EXPECT_EQ(EventsOf(w, EventKind::kStopped).back().time, 205);
  EXPECT_EQ(w.e->NextRuntimeStop(), -1);
  EXPECT_EQ(w.e->allocated().gpu_milli, 0);
  w.Done();
}

TEST(QuotaGuards, MaxRuntimeUnderAwaitStopEndsTheJobOnceItsProcessesAreGone) {
  PolicySpec p = BasePolicy();
  Queue(p, "train").max_runtime_s = 50;
  auto r = QuotaEngine::Create(p, {Node("n0", "train", 1)},
                               {.check_invariants_each_step = true, .await_stop = true});
  ASSERT_TRUE(r.ok());
  QuotaEngine& e = **r;
  const int h = *e.Submit(Job("j", "train", "a"), 0);
  e.RunCycle(0);
  ASSERT_EQ(e.job_state(h), JobState::kRunning);
  e.RunCycle(50);
  EXPECT_EQ(e.job_state(h), JobState::kTerminating);  // still holds its card
  EXPECT_EQ(e.allocated().gpu_milli, kWholeGpu);
  e.Stopped(h, 52);
  EXPECT_EQ(e.job_state(h), JobState::kDone);  // not requeued
  EXPECT_EQ(e.allocated().gpu_milli, 0);
  e.RunCycle(60);
  EXPECT_EQ(e.job_state(h), JobState::kDone);
  EXPECT_TRUE(e.violations().empty());
}

// After a restart the control plane restores a job (started at the restore) and gives back its
// recorded start: the guard counts from that.
TEST(QuotaGuards, ARestoredJobKeepsItsStartForTheGuards) {
  PolicySpec p = BasePolicy();
  Queue(p, "train").max_runtime_s = 100;
  World w(p, {Node("n0", "train", 1)});
  w.Submit(Job("j", "train", "a"), 0);
  w.e->RunCycle(0);
  const std::vector<GrantView> grants = w.View("j").grants;
  auto r = QuotaEngine::Create(p, {Node("n0", "train", 1)}, {.check_invariants_each_step = true});
  ASSERT_TRUE(r.ok());
  QuotaEngine& e = **r;
  JobSpec spec = Job("j", "train", "a");
  spec.restoring = true;
  const int h = *e.Submit(spec, 60);
  ASSERT_TRUE(e.Restore(h, AllocationForm::kWhole, grants, true, false, 60).ok());
  EXPECT_EQ(e.job(h).stop_at, 160);
  e.SetStartTime(h, 0);
  EXPECT_EQ(e.job(h).stop_at, 100);
  EXPECT_EQ(e.NextRuntimeStop(), 100);
  e.RunCycle(100);
  EXPECT_EQ(e.job_state(h), JobState::kDone);
  EXPECT_TRUE(e.violations().empty());
}

// A lower-priority job of the same group is preempted only once it has run min_runtime.
TEST(QuotaGuards, MinRuntimeKeepsAYoungJobFromPriorityPreemption) {
  PolicySpec p = BasePolicy();
  Queue(p, "train-lo").min_runtime_s = 300;
  World w(p, {Node("n0", "train", 1)});
  w.Submit(Job("lo", "train-lo", "a"), 0);
  w.e->RunCycle(0);
  ASSERT_EQ(w.State("lo"), JobState::kRunning);
  w.Submit(Job("hi", "train-hi", "a"), 10);
  for (int64_t t = 10; t < 300; t += 10) {
    w.e->RunCycle(t);
    ASSERT_EQ(w.State("hi"), JobState::kPending) << "t=" << t;
  }
  EXPECT_EQ(w.Count(EventKind::kPreempted), 0);
  w.e->RunCycle(300);
  EXPECT_EQ(w.Count(EventKind::kPreempted), 1);
  EXPECT_EQ(EventsOf(w, EventKind::kPreempted)[0].time, 300);
  EXPECT_EQ(w.State("hi"), JobState::kRunning);  // grace 0: placed in the same cycle
  w.Done();
}

// A borrower is reclaimed for a group below its reservation only once it has run min_runtime.
TEST(QuotaGuards, MinRuntimeKeepsAYoungBorrowerFromReclaim) {
  PolicySpec p = BasePolicy();
  p.groups[1].reservation = Gpu(1000);
  Queue(p, "train-lo").min_runtime_s = 120;
  World w(p, {Node("n0", "train", 1)});
  w.Submit(Job("borrower", "train-lo", "a"), 0);
  w.e->RunCycle(0);
  ASSERT_EQ(w.State("borrower"), JobState::kRunning);
  w.Submit(Job("owner", "train", "b"), 5);
  w.e->RunCycle(10);
  w.e->RunCycle(110);
  EXPECT_EQ(w.State("owner"), JobState::kPending);
  EXPECT_EQ(w.Count(EventKind::kPreempted), 0);
  w.e->RunCycle(120);
  EXPECT_EQ(w.Count(EventKind::kPreempted), 1);
  EXPECT_EQ(w.State("owner"), JobState::kRunning);
  w.Done();
}

// A preemptor waits preemption_delay (since it was submitted) before it preempts; the reason
// it waits says until when.
TEST(QuotaGuards, PreemptionDelayHoldsThePreemptorUntilItHasWaited) {
  PolicySpec p = BasePolicy();
  Queue(p, "train-hi").preemption_delay_s = 60;
  World w(p, {Node("n0", "train", 1)});
  w.Submit(Job("lo", "train-lo", "a"), 0);
  w.e->RunCycle(0);
  w.Submit(Job("hi", "train-hi", "a"), 10);
  w.e->RunCycle(10);
  w.e->RunCycle(60);
  EXPECT_EQ(w.State("hi"), JobState::kPending);
  EXPECT_EQ(w.Count(EventKind::kPreempted), 0);
  EXPECT_NE(w.View("hi").wait_reason.find("may preempt from t=70s (preemption_delay 60s)"),
            std::string::npos)
      << w.View("hi").wait_reason;
  w.e->RunCycle(70);
  EXPECT_EQ(w.Count(EventKind::kPreempted), 1);
  EXPECT_EQ(w.State("hi"), JobState::kRunning);
  EXPECT_EQ(w.State("lo"), JobState::kPending);  // requeued
  w.Done();
}

TEST(QuotaGuards, ReclaimWaitsForThePreemptionDelayToo) {
  PolicySpec p = BasePolicy();
  p.groups[1].reservation = Gpu(1000);
  Queue(p, "train").preemption_delay_s = 30;
  World w(p, {Node("n0", "train", 1)});
  w.Submit(Job("borrower", "train-lo", "a"), 0);
  w.e->RunCycle(0);
  w.Submit(Job("owner", "train", "b"), 0);
  w.e->RunCycle(20);
  EXPECT_EQ(w.State("owner"), JobState::kPending);
  w.e->RunCycle(30);
  EXPECT_EQ(w.State("owner"), JobState::kRunning);
  w.Done();
}

// A card drained for a higher-priority partition job (or preempted for it) keeps a young job
// until its min_runtime has passed.
TEST(QuotaGuards, MinRuntimeKeepsAYoungJobFromADrain) {
  PolicySpec p = BasePolicy();
  Queue(p, "train-lo").min_runtime_s = 200;
  p.queues.push_back({"infer-hi", "part8", {"a", "b"}, 10, false, C::kInference});
  World w(p, {Node("n0", "any", 1)});
  w.Submit(Job("lo", "train-lo", "a"), 0);
  w.e->RunCycle(0);
  ASSERT_EQ(w.State("lo"), JobState::kRunning);
  w.Submit(Job("inf", "infer-hi", "a"), 10);
  for (int64_t t = 10; t < 200; t += 10) w.e->RunCycle(t);
  EXPECT_EQ(w.Count(EventKind::kPreempted), 0);
  EXPECT_EQ(w.State("inf"), JobState::kPending);
  for (int64_t t = 200; t <= 220; t += 10) w.e->RunCycle(t);
  ASSERT_EQ(w.Count(EventKind::kPreempted), 1);
  EXPECT_EQ(EventsOf(w, EventKind::kPreempted)[0].time, 200);
  EXPECT_EQ(w.State("inf"), JobState::kRunning);
  w.Done();
}

TEST(QuotaGuards, NegativeGuardsAreRefusedNamingTheField) {
  for (const char* which : {"max_runtime", "min_runtime", "preemption_delay"}) {
    PolicySpec p = BasePolicy();
    QueueSpec& q = Queue(p, "train");
    (std::string(which) == "max_runtime"   ? q.max_runtime_s
     : std::string(which) == "min_runtime" ? q.min_runtime_s
                                           : q.preemption_delay_s) = -1;
    Status s = Validate(p);
    ASSERT_FALSE(s.ok()) << which;
    EXPECT_NE(s.message().find(std::string("queues[train].") + which), std::string::npos)
        << s.message();
  }
}

}  // namespace
}  // namespace tessera::quota
