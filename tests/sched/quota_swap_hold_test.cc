// Preemption by swapping (issue 36): a share of a swapping queue preempted by reclaim is held
// swapped out instead of stopped (no work lost), resumes on its own device when capacity
// returns, is stopped once held its queue's swap_hold_limit, and is stopped as before when its
// node's swap budget has no room for its memory. Known answers in exact seconds.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "quota_world.h"
#include "sched/quota/engine.h"
#include "sched/quota/policy_model.h"

namespace tessera::quota {
namespace {

using namespace quota_world;  // NOLINT

std::vector<Event> Of(const World& w, EventKind k) {
  std::vector<Event> out;
  for (const Event& e : w.e->events()) {
    if (e.kind == k) out.push_back(e);
  }
  return out;
}

// The base policy with queue inter's shares swapping at `overcommit` percent, group a reserving
// 0.2 GPU (reclaim for its share takes one of b's).
PolicySpec SwapPolicy(int overcommit) {
  PolicySpec p = BasePolicy();
  p.groups[0].reservation = Gpu(200);
  for (QueueSpec& q : p.queues) {
    if (q.name == "inter") q.swap_overcommit_percent = overcommit;
  }
  return p;
}

// One node of one A100-80GB in `pool`, with `swap_mib` of swap budget.
NodeSpec SwapNode(const std::string& pool, MiB swap_mib) {
  NodeSpec n = Node("n0", pool, 1);
  n.swap_mib = swap_mib;
  return n;
}

// One A100-80GB in the share pool; queue inter swaps (overcommit 100%: caps fit the memory);
// group b (no reservation) fills the card with five 16 GiB shares, then group a, which reserves
// 0.2 GPU, asks for one: reclaim takes one of b's.
struct SwapWorld {
  PolicySpec p = BasePolicy();
  std::unique_ptr<World> w;
  explicit SwapWorld(MiB swap_mib, int64_t hold_limit = 0, int claimants = 1) {
    p.groups[0].reservation = Gpu(200 * claimants);
    for (QueueSpec& q : p.queues) {
      if (q.name != "inter") continue;
      q.swap_overcommit_percent = 100;
      q.swap_hold_limit_s = hold_limit;
    }
    NodeSpec n = Node("n0", "inter", 1);
    n.swap_mib = swap_mib;
    w = std::make_unique<World>(p, std::vector<NodeSpec>{n});
    for (int i = 0; i < 5; ++i) w->Submit(Job("b" + std::to_string(i), "inter", "b"), 0);
    w->e->RunCycle(0);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(w->State("b" + std::to_string(i)), JobState::kRunning);
    for (int i = 0; i < claimants; ++i) w->Submit(Job("a" + std::to_string(i), "inter", "a"), 100);
    w->e->RunCycle(100);
  }
  // The b share reclaim chose.
  std::string Victim() const {
    for (int i = 0; i < 5; ++i) {
      const std::string id = "b" + std::to_string(i);
      if (w->State(id) != JobState::kRunning) return id;
    }
    return "";
  }
};

TEST(QuotaSwapHold, AReclaimedShareOfASwappingQueueIsHeldSwappedOutAndResumesWithNoWorkLost) {
  SwapWorld s(32 * kGiB);
  World& w = *s.w;
  ASSERT_EQ(w.State("a0"), JobState::kRunning) << "the claimant waits for no grace";
  const std::string v = s.Victim();
  ASSERT_FALSE(v.empty());
  EXPECT_TRUE(Of(w, EventKind::kPreempted).empty()) << "held, not stopped";
  const std::vector<Event> out = Of(w, EventKind::kSwappedOut);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].job, v);
  EXPECT_EQ(out[0].for_job, "a0");
  EXPECT_EQ(out[0].time, 100);
  EXPECT_EQ(out[0].detail.rfind("reclaim: group a is below its reservation", 0), 0u)
      << out[0].detail;
  EXPECT_NE(out[0].detail.find("held swapped out on n0/gpu0"), std::string::npos);
  EXPECT_NE(out[0].detail.find("lost 0 GPU-s"), std::string::npos) << out[0].detail;
  const JobView held = w.View(v);
  EXPECT_EQ(held.state, JobState::kPending);
  EXPECT_EQ(held.held_swapped_since, 100);
  EXPECT_EQ(held.held_on, "n0/gpu0");
  EXPECT_EQ(held.hold_stop_at, -1);
  EXPECT_EQ(held.wait_step, "SwappedOut");
  EXPECT_EQ(held.wait_reason.rfind("held swapped out since t=100s on n0/gpu0", 0), 0u)
      << held.wait_reason;
  EXPECT_EQ(held.preemptions, 1);
  // It waits for its own device, not for another.
  w.e->RunCycle(200);
  EXPECT_EQ(w.State(v), JobState::kPending);
  EXPECT_EQ(w.View(v).wait_step, "SwappedOut");
  // Capacity returns: the claimant ends and the held share resumes where it was, its start kept.
  w.e->Complete(w.h["a0"], 300);
  w.e->RunCycle(300);
  ASSERT_EQ(w.State(v), JobState::kRunning);
  EXPECT_EQ(w.View(v).start_time, 0) << "it ran from t=0: no work lost";
  EXPECT_EQ(w.View(v).held_swapped_since, -1);
  ASSERT_EQ(w.View(v).grants.size(), 1u);
  EXPECT_EQ(w.View(v).grants[0].node, "n0");
  EXPECT_EQ(w.View(v).grants[0].device, 0);
  const std::vector<Event> in = Of(w, EventKind::kSwappedIn);
  ASSERT_EQ(in.size(), 1u);
  EXPECT_EQ(in[0].job, v);
  EXPECT_EQ(in[0].time, 300);
  EXPECT_NE(in[0].detail.find("held swapped out since t=100s (200s)"), std::string::npos)
      << in[0].detail;
  EXPECT_STREQ(EventKindName(EventKind::kSwappedIn), "swapped_in");
  w.Done();
}

TEST(QuotaSwapHold, HeldPastItsQueuesHoldLimitItIsStopped) {
  SwapWorld s(32 * kGiB, /*hold_limit=*/600);
  World& w = *s.w;
  const std::string v = s.Victim();
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(w.View(v).hold_stop_at, 700);
  EXPECT_NE(w.View(v).wait_reason.find("stopped at t=700s by its queue's swap_hold_limit 600s"),
            std::string::npos)
      << w.View(v).wait_reason;
  w.e->RunCycle(699);
  EXPECT_EQ(w.State(v), JobState::kPending);
  w.e->RunCycle(700);
  EXPECT_EQ(w.State(v), JobState::kDone);
  const std::vector<Event> stops = Of(w, EventKind::kStopped);
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].job, v);
  EXPECT_EQ(stops[0].time, 700);
  EXPECT_EQ(stops[0].detail.rfind("swap_hold_limit 600s of queue inter reached (held swapped out "
                                  "on n0/gpu0 since t=100s): stopped",
                                  0),
            0u)
      << stops[0].detail;
  // Its node's swap budget is free again: a second reclaim may hold another.
  w.Done();
}

TEST(QuotaSwapHold, NoRoomInItsNodesSwapBudgetStopsItAsBefore) {
  SwapWorld s(8 * kGiB);  // 8 GiB of swap: a 16 GiB share cannot be held
  World& w = *s.w;
  EXPECT_TRUE(Of(w, EventKind::kSwappedOut).empty());
  const std::vector<Event> pre = Of(w, EventKind::kPreempted);
  ASSERT_EQ(pre.size(), 1u);
  EXPECT_EQ(pre[0].for_job, "a0");
  w.Done();
}

// The budget counts what its node holds already: two 16 GiB holds fit 32 GiB, a third does not.
TEST(QuotaSwapHold, TheNodesSwapBudgetCountsWhatItHoldsAlready) {
  SwapWorld s(32 * kGiB, 0, /*claimants=*/3);
  World& w = *s.w;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(w.State("a" + std::to_string(i)), JobState::kRunning) << i;
  EXPECT_EQ(Of(w, EventKind::kSwappedOut).size(), 2u);
  EXPECT_EQ(Of(w, EventKind::kPreempted).size(), 1u);
  w.Done();
}

// A share held swapped out runs that much longer: its walltime stop moves by the time held
// (engine_guards.cc). The forecast of when its card frees (a blocked head's "expected free at",
// and how long backfill may use the card) moves with it: it said start + walltime, the time held
// too early, so a head was told its card would free before the share could be stopped.
TEST(QuotaSwapHold, AResumedShareIsForecastToEndByItsWalltimePlusTheTimeItWasHeld) {
  World w(SwapPolicy(100), {SwapNode("any", 32 * kGiB)});
  std::map<std::string, int64_t> end;  // each b share's start plus walltime
  for (int i = 0; i < 5; ++i) {
    const std::string id = "b" + std::to_string(i);
    const int64_t at = i == 4 ? 50 : 0, walltime = i == 4 ? 1000 : 900 + 10 * i;
    w.Submit(Job(id, "inter", "b", 1, walltime), at);
    w.e->RunCycle(at);
    ASSERT_EQ(w.State(id), JobState::kRunning);
    end[id] = at + walltime;
  }
  w.Submit(Job("a0", "inter", "a"), 100);
  w.e->RunCycle(100);
  ASSERT_EQ(w.State("a0"), JobState::kRunning);
  std::string victim;
  for (const auto& [id, e] : end) {
    if (w.State(id) != JobState::kRunning) victim = id;
  }
  ASSERT_FALSE(victim.empty());
  w.e->Complete(w.h["a0"], 300);
  w.e->RunCycle(300);
  ASSERT_EQ(w.State(victim), JobState::kRunning) << "resumed after 200 s held";
  end[victim] += 200;
  EXPECT_EQ(w.View(victim).stop_at, end[victim]);
  int64_t free_at = 0;
  for (const auto& [id, e] : end) free_at = std::max(free_at, e);
  // A whole card for group b (no reservation: nothing is reclaimed for it) waits for all five
  // (preemptible: a job that may not be preempted would not borrow the card a reserves part of).
  w.Submit(Job("h", "train-lo", "b"), 400);
  w.e->RunCycle(400);
  ASSERT_EQ(w.State("h"), JobState::kPending);
  EXPECT_NE(w.View("h").wait_reason.find(
                "keeps 1 device(s) on n0 expected free at t=" + std::to_string(free_at) + "s"),
            std::string::npos)
      << "victim " << victim << ": " << w.View("h").wait_reason;
  w.Done();
}

// The served side moves a job's start to its agent's report of it running (SetRunStart); not so
// a share resumed from a hold, whose start is its first run's. Held and resumed within the same
// second (0 s held), it was taken for a fresh start (the review of SetRunStart).
TEST(QuotaSwapHold, AShareResumedInTheSecondItWasHeldKeepsItsFirstStart) {
  World w(SwapPolicy(100), {SwapNode("any", 32 * kGiB)});
  for (int i = 0; i < 5; ++i) {
    w.Submit(Job("b" + std::to_string(i), "inter", "b", 1, 900), 0);
    w.e->RunCycle(0);
  }
  w.Submit(Job("a0", "inter", "a"), 100);
  w.e->RunCycle(100);
  ASSERT_EQ(w.State("a0"), JobState::kRunning);
  std::string victim;
  for (int i = 0; i < 5; ++i) {
    if (w.State("b" + std::to_string(i)) != JobState::kRunning) victim = "b" + std::to_string(i);
  }
  ASSERT_FALSE(victim.empty());
  w.e->Complete(w.h["a0"], 100);
  w.e->RunCycle(100);
  ASSERT_EQ(w.State(victim), JobState::kRunning) << "resumed in the second it was held";
  EXPECT_EQ(w.View(victim).stop_at, 900);
  w.e->SetRunStart(w.h[victim], 101);  // its agent's report of it running again
  EXPECT_EQ(w.View(victim).stop_at, 900) << "counted again from its resume";
  const std::string other = victim == "b0" ? "b1" : "b0";  // never held: its start moves
  w.e->SetRunStart(w.h[other], 1);
  EXPECT_EQ(w.View(other).stop_at, 901);
  w.Done();
}

// Past the card's memory, a swapping queue's shares need their node's swap budget (SwapRoom).
// Reclaim counted the room at the overcommit alone: on a node with no budget it found room for
// the claimant with no victim, so preempted nothing, and the claimant, within its group's
// reservation, waited behind a borrower's shares until they ended (a generated history, seed 840).
TEST(QuotaSwapHold, ReclaimCountsTheNodesSwapBudgetNotTheOvercommitAlone) {
  World w(SwapPolicy(200), {SwapNode("inter", 0)});  // no budget: shares fit the card's memory
  for (int i = 0; i < 5; ++i) w.Submit(Job("b" + std::to_string(i), "inter", "b"), 0);
  w.e->RunCycle(0);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(w.State("b" + std::to_string(i)), JobState::kRunning);
  w.Submit(Job("a0", "inter", "a"), 100);
  w.e->RunCycle(100);
  EXPECT_EQ(Of(w, EventKind::kPreempted).size(), 1u) << w.View("a0").wait_reason;
  EXPECT_TRUE(Of(w, EventKind::kSwappedOut).empty()) << "no budget to hold it: stopped";
  for (int64_t t = 110; t <= 200; t += 10) w.e->RunCycle(t);
  EXPECT_EQ(w.State("a0"), JobState::kRunning) << w.View("a0").wait_reason;
  w.Done();
}

// A share is held swapped out only where a share takes its place. A reclaim for a partition
// clears the card and enables MIG on it, which a paused process's context forbids; the share was
// held there anyway, MIG was enabled under it, and it waited for a card that would not take it
// back until its hold limit stopped it (a generated history, seed 2). Now it is stopped with a
// grace, as a victim of a queue that does not swap.
TEST(QuotaSwapHold, ASharePreemptedForAPartitionIsStoppedNotHeld) {
  World w(SwapPolicy(100), {SwapNode("any", 32 * kGiB)});
  w.Submit(Job("b0", "inter", "b"), 0);
  w.e->RunCycle(0);
  ASSERT_EQ(w.State("b0"), JobState::kRunning);
  w.Submit(Job("a0", "infer", "a"), 100);  // a partition only
  for (int64_t t = 100; t <= 200; t += 10) w.e->RunCycle(t);
  EXPECT_TRUE(Of(w, EventKind::kSwappedOut).empty());
  ASSERT_EQ(Of(w, EventKind::kPreempted).size(), 1u);
  EXPECT_EQ(Of(w, EventKind::kPreempted)[0].job, "b0");
  EXPECT_EQ(w.State("a0"), JobState::kRunning) << w.View("a0").wait_reason;
  EXPECT_EQ(w.View("a0").form, AllocationForm::kPartition);
  w.Done();
}

// A whole job may take a card with a share held swapped out on it (the share's memory is off
// the card); the share waits, held, and resumes there once the whole job has ended. (An earlier
// reading of the docs said such a card took no whole job, and that a held share without a hold
// limit could keep a reservation waiting for good: neither is so.)
TEST(QuotaSwapHold, AWholeJobMayTakeACardWithAHeldShareWhichResumesWhenItEnds) {
  PolicySpec p = SwapPolicy(100);
  p.groups[0].reservation = Gpu(2000);
  World w(p, {SwapNode("any", 32 * kGiB)});
  for (int i = 0; i < 5; ++i) w.Submit(Job("b" + std::to_string(i), "inter", "b"), 0);
  w.e->RunCycle(0);
  w.Submit(Job("a0", "inter", "a"), 100);
  w.e->RunCycle(100);
  ASSERT_EQ(Of(w, EventKind::kSwappedOut).size(), 1u);
  const std::string held = Of(w, EventKind::kSwappedOut)[0].job;
  w.Submit(Job("whole", "train", "a"), 200);
  w.e->RunCycle(200);
  w.e->Complete(w.h["a0"], 300);
  for (int64_t t = 300; t <= 400; t += 10) w.e->RunCycle(t);
  ASSERT_EQ(w.State("whole"), JobState::kRunning) << w.View("whole").wait_reason;
  EXPECT_EQ(w.State(held), JobState::kPending);
  EXPECT_EQ(w.View(held).held_on, "n0/gpu0");
  EXPECT_TRUE(Of(w, EventKind::kStopped).empty());
  w.e->Complete(w.h["whole"], 500);
  w.e->RunCycle(500);
  ASSERT_EQ(w.State(held), JobState::kRunning) << w.View(held).wait_reason;
  EXPECT_EQ(w.View(held).start_time, 0) << "it ran from t=0: no work lost";
  w.Done();
}

// A new user: a drain of the card a share is held on left the share held there (the card read
// "drained" while it waited) until its hold limit stopped it as failed, with other cards free.
// Evicted (a drain), a held share gives its hold up: pending, it runs again from its start
// wherever there is room, and the card holds nothing.
TEST(QuotaSwapHold, AnEvictedHeldShareIsRequeuedToRunElsewhere) {
  SwapWorld s(32 * kGiB, /*hold_limit=*/600);
  World& w = *s.w;
  const std::string v = s.Victim();
  ASSERT_FALSE(v.empty());
  ASSERT_EQ(w.View(v).held_on, "n0/gpu0");
  w.e->Evict(w.h[v], 200, "drain of n0/gpu0 by admin");
  EXPECT_EQ(w.State(v), JobState::kPending);
  EXPECT_EQ(w.View(v).held_on, "");
  EXPECT_EQ(w.View(v).wait_step, "Requeued");
  const std::vector<Event> requeued = Of(w, EventKind::kRequeued);
  ASSERT_EQ(requeued.size(), 1u);
  EXPECT_EQ(requeued[0].job, v);
  EXPECT_EQ(requeued[0].detail,
            "drain of n0/gpu0 by admin; it was held swapped out on n0/gpu0: it runs again from its "
            "start where there is room");
  w.e->RunCycle(700);  // past the hold limit: no longer held, it is not stopped
  EXPECT_TRUE(Of(w, EventKind::kStopped).empty());
  w.Done();
}

// After a restart the control plane puts a hold back (QuotaEngine::RestoreHold, from what it
// stored of JobView::held_*): the share waits for its own card again, not for another, and
// resumes there keeping its start and the time it was held. Only a pending share of a swapping
// queue can be held; anything else is refused, changing nothing.
TEST(QuotaSwapHold, ARestoredHoldResumesOnItsOwnCardKeepingItsStart) {
  PolicySpec p = SwapPolicy(100);
  p.queues.push_back({"inter-plain", "share16", {"a", "b"}, 0, true, C::kInteractive});
  NodeSpec n0 = Node("n0", "inter", 1), n1 = Node("n1", "inter", 1);
  n0.swap_mib = n1.swap_mib = 32 * kGiB;
  World w(p, {n0, n1});
  JobSpec held = Job("held", "inter", "b", 1, 1000);
  held.restoring = true;
  w.Submit(held, 0);
  EXPECT_FALSE(w.e->RestoreHold(w.h["held"], "n9", 0, 16 * kGiB, 100, 0, 0).ok());
  EXPECT_FALSE(w.e->RestoreHold(w.h["held"], "n0", 3, 16 * kGiB, 100, 0, 0).ok());
  w.Submit(Job("plain", "inter-plain", "b"), 0);  // a share that does not swap
  EXPECT_FALSE(w.e->RestoreHold(w.h["plain"], "n0", 0, 16 * kGiB, 100, 0, 0).ok());
  w.e->Cancel(w.h["plain"], 0, "not needed");
  ASSERT_TRUE(w.e->RestoreHold(w.h["held"], "n1", 0, 16 * kGiB, 100, 0, 50).ok());
  EXPECT_EQ(w.View("held").held_on, "n1/gpu0");
  EXPECT_EQ(w.View("held").wait_step, "SwappedOut");
  // Both cards are free: it resumes on its own (n1), not on the first free one (n0).
  w.e->RunCycle(150);
  ASSERT_EQ(w.State("held"), JobState::kRunning) << w.View("held").wait_reason;
  EXPECT_EQ(w.View("held").grants[0].node, "n1");
  EXPECT_EQ(w.View("held").start_time, 0) << "it ran from t=0: no work lost";
  // Its walltime stop moves by the 50 s held before and the 50 s of this hold.
  EXPECT_EQ(w.View("held").stop_at, 0 + 1000 + 50 + 50);
  EXPECT_EQ(Of(w, EventKind::kSwappedIn).size(), 1u);
  w.Done();
}

}  // namespace
}  // namespace tessera::quota
