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

// One card in queue "train", whose jobs run 100 s at most, and jobs `a` (group a) and `b` (group b)
// submitted to it at 0.
World TwoJobsOneCardMaxRuntime(const std::string& a, const std::string& b) {
  PolicySpec p = BasePolicy();
  Queue(p, "train").max_runtime_s = 100;
  World w(p, {Node("n0", "train", 1)});
  w.Submit(Job(a, "train", "a"), 0);
  w.Submit(Job(b, "train", "b"), 0);
  return w;
}

std::vector<Event> EventsOf(const World& w, EventKind k) {
  std::vector<Event> out;
  for (const Event& e : w.e->events()) {
    if (e.kind == k) out.push_back(e);
  }
  return out;
}

// Every event about a job carries its handle (the served engine finds its record by it, not by a
// search by id); device events and refused submissions carry none.
TEST(QuotaEvents, AJobsEventsCarryItsHandle) {
  World w = TwoJobsOneCardMaxRuntime("first", "second");
  EXPECT_FALSE(w.e->Submit(Job("lost", "no-such-queue", "a"), 0).ok());
  w.e->RunCycle(0);
  w.e->RunCycle(200);  // "first" stopped at its max_runtime, "second" placed
  int jobs = 0;
  for (const Event& e : w.e->events()) {
    if (e.job == "lost" || e.job.empty()) {
      EXPECT_EQ(e.handle, -1) << EventKindName(e.kind) << " " << e.job;
      continue;
    }
    ++jobs;
    EXPECT_EQ(e.handle, w.h.at(e.job)) << EventKindName(e.kind) << " " << e.job;
  }
  EXPECT_GE(jobs, 5);  // submitted twice, placed twice, stopped once at least
}

TEST(QuotaGuards, MaxRuntimeStopsARunningJobAtItsTimeWithAnEvent) {
  World w = TwoJobsOneCardMaxRuntime("long", "next");
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
// A job's declared walltime is a limit, as a batch system's time limit is: backfill placed work
// beside a blocked head only because it would end by then, so a job that runs longer is stopped
// at its walltime (the earlier of it and its queue's max_runtime), not left to delay the head.
// An external queue's jobs are left to their batch system, which is given the walltime.
TEST(QuotaGuards, AJobIsStoppedAtItsDeclaredWalltime) {
  PolicySpec p = BasePolicy();
  Queue(p, "train").max_runtime_s = 300;
  World w(p, {Node("n0", "train", 2)});
  JobSpec declared = Job("declared", "train", "a");
  declared.walltime_s = 120;
  w.Submit(declared, 0);
  JobSpec longer = Job("longer", "train", "a");
  longer.walltime_s = 1000;  // past max_runtime: the queue's guard comes first
  w.Submit(longer, 0);
  w.e->RunCycle(0);
  ASSERT_EQ(w.State("declared"), JobState::kRunning);
  ASSERT_EQ(w.State("longer"), JobState::kRunning);
  EXPECT_EQ(w.View("declared").stop_at, 120);
  EXPECT_EQ(w.View("longer").stop_at, 300);
  EXPECT_EQ(w.e->NextRuntimeStop(), 120);
  EXPECT_EQ(w.e->StopOverRuntime(120), 1);
  EXPECT_EQ(w.State("declared"), JobState::kDone);
  const std::vector<Event> stops = EventsOf(w, EventKind::kStopped);
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].job, "declared");
  EXPECT_NE(stops[0].detail.find("walltime 120s (declared at submission) reached"),
            std::string::npos)
      << stops[0].detail;
  EXPECT_EQ(w.e->StopOverRuntime(300), 1);
  EXPECT_EQ(w.State("longer"), JobState::kDone);
  EXPECT_NE(EventsOf(w, EventKind::kStopped).back().detail.find("max_runtime 300s"),
            std::string::npos);
  w.Done();
  // Another scheduler's job keeps running here: that scheduler was given the walltime.
  PolicySpec ext = BasePolicy();
  ext.queues.push_back({"slurm", "gpu1", {"a", "b"}, 0, true, WorkloadClass::kTraining});
  ext.queues.back().external = true;
  World x(ext, {});
  JobSpec batch = Job("batch", "slurm", "a");
  batch.walltime_s = 120;
  x.Submit(batch, 0);
  x.e->RunCycle(0);
  ASSERT_EQ(x.State("batch"), JobState::kRunning);
  EXPECT_EQ(x.View("batch").stop_at, -1);
  EXPECT_EQ(x.e->StopOverRuntime(1000), 0);
  EXPECT_EQ(x.State("batch"), JobState::kRunning);
  x.Done();
}

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

// Held at its group's limit, it says so too (a new user read only "at its gpu limit" for the
// 20 s of its delay, and could not tell it would preempt).
TEST(QuotaGuards, PreemptionDelayIsSaidAtTheLimitToo) {
  PolicySpec p = BasePolicy();
  Queue(p, "train-hi").preemption_delay_s = 60;
  p.groups[0].limit.gpu_milli = kWholeGpu;
  p.groups[1].limit.gpu_milli = kWholeGpu;
  World w(p, {Node("n0", "train", 3)});
  w.Submit(Job("lo", "train-lo", "a"), 0);
  w.e->RunCycle(0);
  w.Submit(Job("hi", "train-hi", "a"), 10);
  w.e->RunCycle(10);
  EXPECT_EQ(w.View("hi").wait_step, "Admission");
  EXPECT_NE(w.View("hi").wait_reason.find("may preempt from t=70s (preemption_delay 60s)"),
            std::string::npos)
      << w.View("hi").wait_reason;
  w.e->RunCycle(70);
  EXPECT_EQ(w.Count(EventKind::kPreempted), 1);
  // Not where nothing of its group may go for it (the review): b at its limit with a job that
  // is not preemptible.
  w.Submit(Job("b-np", "train", "b"), 80);
  w.e->RunCycle(80);
  ASSERT_EQ(w.State("b-np"), JobState::kRunning);
  w.Submit(Job("b-hi", "train-hi", "b"), 90);
  w.e->RunCycle(90);
  EXPECT_EQ(w.View("b-hi").wait_step, "Admission");
  EXPECT_EQ(w.View("b-hi").wait_reason.find("may preempt"), std::string::npos)
      << w.View("b-hi").wait_reason;
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

namespace tessera::quota {
namespace {

using namespace quota_world;  // NOLINT

QueueSpec& QueueOf(PolicySpec& p, const std::string& name) {
  for (QueueSpec& q : p.queues) {
    if (q.name == name) return q;
  }
  ADD_FAILURE() << "no queue " << name;
  return p.queues.front();
}

std::vector<Event> KindOf(const World& w, EventKind k) {
  std::vector<Event> out;
  for (const Event& e : w.e->events()) {
    if (e.kind == k) out.push_back(e);
  }
  return out;
}

// idle_timeout (issue 37): a whole card held but idle that long goes back: the job is stopped
// as a preemption stops it and requeued, with an event naming the idle time; the card is free.
TEST(QuotaIdleGuard, AnIdleWholeCardIsRequeuedAtItsTimeWithAnEvent) {
  PolicySpec p = BasePolicy();
  QueueOf(p, "train").idle_timeout_s = 300;
  World w(p, {Node("n0", "train", 1)});
  w.Submit(Job("idle", "train", "a"), 0);
  w.e->RunCycle(0);
  ASSERT_EQ(w.State("idle"), JobState::kRunning);
  const int h = w.h["idle"];
  EXPECT_EQ(w.e->NextIdleGiveBack(), -1);  // not idle yet
  w.e->SetIdle(h, 50);
  EXPECT_EQ(w.e->NextIdleGiveBack(), 350);
  EXPECT_EQ(w.View("idle").idle_since, 50);
  EXPECT_EQ(w.View("idle").idle_action_at, 350);  // users are told before it happens
  EXPECT_EQ(w.View("idle").idle_action, "requeue");
  w.Submit(Job("waits", "train", "b"), 60);  // a job waits for the card
  w.e->RunCycle(60);
  EXPECT_EQ(w.e->GiveBackIdle(349), 0);
  EXPECT_EQ(w.State("idle"), JobState::kRunning);
  EXPECT_EQ(w.e->GiveBackIdle(350), 1);
  const std::vector<Event> pre = KindOf(w, EventKind::kPreempted);
  ASSERT_EQ(pre.size(), 1u);
  EXPECT_EQ(pre[0].time, 350);
  EXPECT_EQ(pre[0].detail.rfind("idle_timeout: idle 300s since", 0), 0u) << pre[0].detail;
  EXPECT_NE(pre[0].detail.find("requeued"), std::string::npos) << pre[0].detail;
  EXPECT_EQ(w.State("idle"), JobState::kPending);  // grace 0: back to pending at once
  EXPECT_EQ(w.e->allocated().gpu_milli, 0);
  EXPECT_EQ(w.e->NextIdleGiveBack(), -1);
  w.e->RunCycle(360);
  EXPECT_EQ(w.State("waits"), JobState::kRunning) << "the waiting job gets the card";
  w.Done();
}

// A new user: with nothing waiting, an idle job was stopped and placed back on its card every
// idle_timeout (29 GPU-s lost every 30 s, for good). A requeue gives the holding to a job that
// waits: with none it runs on past its timeout, and goes at the first cycle another job waits.
TEST(QuotaIdleGuard, AnIdleJobIsRequeuedOnlyOnceAnotherJobWaits) {
  PolicySpec p = BasePolicy();
  QueueOf(p, "train").idle_timeout_s = 300;
  World w(p, {Node("n0", "train", 1)});
  w.Submit(Job("idle", "train", "a"), 0);
  w.e->RunCycle(0);
  w.e->SetIdle(w.h["idle"], 50);
  for (int64_t t = 350; t <= 1000; t += 50) w.e->RunCycle(t);
  EXPECT_EQ(w.State("idle"), JobState::kRunning);
  EXPECT_TRUE(KindOf(w, EventKind::kPreempted).empty());
  w.Submit(Job("waits", "train", "b"), 1010);
  w.e->RunCycle(1010);  // given back in the cycle that sees a job wait
  const std::vector<Event> pre = KindOf(w, EventKind::kPreempted);
  ASSERT_EQ(pre.size(), 1u);
  EXPECT_EQ(pre[0].detail.rfind("idle_timeout: idle 960s since t=50s", 0), 0u) << pre[0].detail;
  w.e->RunCycle(1020);
  EXPECT_EQ(w.State("waits"), JobState::kRunning);
  w.Done();
}

// Activity resets the clock; the cycle itself gives back what reached its time.
TEST(QuotaIdleGuard, ActivityAgainResetsTheIdleClock) {
  PolicySpec p = BasePolicy();
  QueueOf(p, "train").idle_timeout_s = 300;
  World w(p, {Node("n0", "train", 1)});
  w.Submit(Job("j", "train", "a"), 0);
  w.e->RunCycle(0);
  const int h = w.h["j"];
  w.e->SetIdle(h, 50);
  w.e->SetIdle(h, -1);  // active again at 100
  EXPECT_EQ(w.e->NextIdleGiveBack(), -1);
  EXPECT_EQ(w.View("j").idle_since, -1);
  w.e->SetIdle(h, 200);
  w.e->SetIdle(h, 260);  // still idle: the first report's time counts
  EXPECT_EQ(w.e->NextIdleGiveBack(), 500);
  w.Submit(Job("waits", "train", "b"), 300);  // a job waits for the card
  w.e->RunCycle(400);
  EXPECT_EQ(w.State("j"), JobState::kRunning);
  w.e->RunCycle(510);
  EXPECT_EQ(KindOf(w, EventKind::kPreempted).size(), 1u);
  EXPECT_EQ(KindOf(w, EventKind::kPreempted)[0].time, 510);
  w.Done();
}

// A share of a swapping queue is swapped out, not stopped: it keeps running and its share.
TEST(QuotaIdleGuard, AnIdleShareOfASwappingQueueIsSwappedOutNotKilled) {
  PolicySpec p = BasePolicy();
  QueueOf(p, "inter").idle_timeout_s = 60;
  QueueOf(p, "inter").swap_overcommit_percent = 200;
  World w(p, {Node("n0", "inter", 1)});
  w.Submit(Job("s", "inter", "a"), 0);
  w.e->RunCycle(0);
  ASSERT_EQ(w.State("s"), JobState::kRunning);
  const int h = w.h["s"];
  w.e->SetIdle(h, 10);
  EXPECT_EQ(w.View("s").idle_action, "swap");
  w.e->RunCycle(70);
  const std::vector<Event> out = KindOf(w, EventKind::kSwappedOut);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].time, 70);
  EXPECT_EQ(out[0].detail.rfind("idle_timeout: idle 60s since", 0), 0u) << out[0].detail;
  EXPECT_NE(out[0].detail.find("swapped out, not stopped"), std::string::npos);
  EXPECT_STREQ(EventKindName(EventKind::kSwappedOut), "swapped_out");
  EXPECT_EQ(w.State("s"), JobState::kRunning);
  EXPECT_TRUE(w.View("s").swapped_out);
  EXPECT_EQ(w.View("s").idle_action_at, -1);  // done: nothing more will happen
  EXPECT_TRUE(KindOf(w, EventKind::kPreempted).empty());
  EXPECT_TRUE(KindOf(w, EventKind::kStopped).empty());
  w.e->RunCycle(500);  // not again
  EXPECT_EQ(KindOf(w, EventKind::kSwappedOut).size(), 1u);
  w.e->SetIdle(h, -1);  // used again: back
  EXPECT_FALSE(w.View("s").swapped_out);
  w.Done();
}

// idle_action stop: ended, not requeued, with a kStopped event naming the idle time.
TEST(QuotaIdleGuard, IdleActionStopEndsTheJob) {
  PolicySpec p = BasePolicy();
  QueueOf(p, "train").idle_timeout_s = 120;
  QueueOf(p, "train").idle_action = QueueSpec::IdleAction::kStop;
  World w(p, {Node("n0", "train", 1)});
  w.Submit(Job("j", "train", "a"), 0);
  w.e->RunCycle(0);
  w.e->SetIdle(w.h["j"], 30);
  EXPECT_EQ(w.View("j").idle_action, "stop");
  EXPECT_EQ(w.e->GiveBackIdle(150), 1);
  EXPECT_EQ(w.State("j"), JobState::kDone);
  const std::vector<Event> st = KindOf(w, EventKind::kStopped);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_NE(st[0].detail.find("idle 120s since"), std::string::npos) << st[0].detail;
  EXPECT_EQ(w.e->allocated().gpu_milli, 0);
  w.Done();
}

TEST(QuotaIdleGuard, ValidateNamesTheField) {
  PolicySpec p = BasePolicy();
  QueueOf(p, "train").idle_timeout_s = -1;
  Status s = Validate(p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("queues[train].idle_timeout"), std::string::npos) << s.message();
  p = BasePolicy();
  p.groups[0].members = {{"alice", 0, UnlimitedResources()}};
  s = Validate(p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("groups[a].users[alice].weight"), std::string::npos) << s.message();
  p.groups[0].members = {{"alice", 1000, UnlimitedResources()}, {"alice", 1000, {}}};
  s = Validate(p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("groups[a].users[alice]"), std::string::npos) << s.message();
}

JobSpec JobOf(const std::string& id, const std::string& identity, const std::string& queue,
              const std::string& group) {
  JobSpec j = Job(id, queue, group);
  j.identity = identity;
  return j;
}

// Fair share inside a group: of two members' waiting jobs, the member with less decayed usage
// over its weight goes first, whatever the submit order.
TEST(QuotaMembers, TheMemberBelowItsWeightedShareGoesFirst) {
  PolicySpec p = BasePolicy();
  p.groups[0].members = {{"alice", 1000, UnlimitedResources()},
                         {"bob", 1000, UnlimitedResources()}};
  World w(p, {Node("n0", "train", 1)});
  w.Submit(JobOf("a1", "alice", "train", "a"), 0);
  w.e->RunCycle(0);
  w.e->RunCycle(300);  // usage counts at each cycle (as a group's does)
  w.e->Complete(w.h["a1"], 600);
  w.Submit(JobOf("a2", "alice", "train", "a"), 600);  // first in time
  w.Submit(JobOf("b1", "bob", "train", "a"), 601);
  w.e->RunCycle(610);
  EXPECT_EQ(w.State("b1"), JobState::kRunning);  // alice used the card for 600 s, bob never
  EXPECT_EQ(w.State("a2"), JobState::kPending);
  const std::vector<MemberView> m = w.e->members();
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].identity, "alice");
  EXPECT_GT(m[0].fair_share, m[1].fair_share);
  EXPECT_EQ(m[1].usage.gpu_milli, kWholeGpu);
  w.Done();
}

// Without users listed, the group's order is as before (submit time).
TEST(QuotaMembers, AGroupWithoutUsersKeepsSubmitOrder) {
  PolicySpec p = BasePolicy();
  World w(p, {Node("n0", "train", 1)});
  w.Submit(JobOf("a1", "alice", "train", "a"), 0);
  w.e->RunCycle(0);
  w.e->RunCycle(300);
  w.e->Complete(w.h["a1"], 600);
  w.Submit(JobOf("a2", "alice", "train", "a"), 600);
  w.Submit(JobOf("b1", "bob", "train", "a"), 601);
  w.e->RunCycle(610);
  EXPECT_EQ(w.State("a2"), JobState::kRunning);
  EXPECT_TRUE(w.e->members().empty());
  w.Done();
}

// A member's limit: past it, its job waits at admission with the reason, while the group has
// room and another member's job runs.
TEST(QuotaMembers, AMembersLimitHoldsItsJobsAtAdmission) {
  PolicySpec p = BasePolicy();
  p.groups[0].members = {{"alice", 1000, Resources{kWholeGpu, kUnlimited, kUnlimited, kUnlimited}}};
  World w(p, {Node("n0", "train", 3)});
  w.Submit(JobOf("a1", "alice", "train", "a"), 0);
  w.Submit(JobOf("a2", "alice", "train", "a"), 0);
  w.Submit(JobOf("b1", "bob", "train", "a"), 0);
  w.e->RunCycle(0);
  EXPECT_EQ(w.State("a1"), JobState::kRunning);
  EXPECT_EQ(w.State("b1"), JobState::kRunning);
  ASSERT_EQ(w.State("a2"), JobState::kPending);
  EXPECT_EQ(w.View("a2").wait_step, "Admission");
  EXPECT_NE(w.View("a2").wait_reason.find("user alice at its gpu limit in group a"),
            std::string::npos)
      << w.View("a2").wait_reason;
  w.e->Complete(w.h["a1"], 100);
  w.e->RunCycle(100);
  EXPECT_EQ(w.State("a2"), JobState::kRunning);
  w.Done();
}

}  // namespace
}  // namespace tessera::quota
