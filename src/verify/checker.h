// The scheduling promises (docs/scheduling.md), checked on a running quota engine from outside.
//
// A Checker watches one QuotaEngine through its public views only (jobs, grants, devices,
// events) after every cycle, and reports each broken promise with the jobs, devices and time:
//
//   safety.exclusive      no device (or partition) in two grants; no whole grant beside others
//   safety.capacity       device compute and memory, partitions, node CPU and memory hold
//   safety.limits         no group, nor any ancestor, holds past its limit (also per GPU model)
//   safety.layout         MIG instances at legal starts without overlap; AMD pairs legal, one
//                         memory mode per node
//   safety.reclaim        reclaim leaves every victim's group at or above its reservation, and
//                         frees for a group no more than its reservation lacks (plus one victim);
//                         a reservation per GPU model is a promise too: reclaim for another group
//                         takes no victim's group on a model from at or above its reservation
//                         there to below it
//   safety.preemption     only preemptible work is preempted, and only for a job of higher
//                         priority in the same group, a group below its reservation, or a drain
//   liveness.start        a waiting job the free capacity could hold (its own brute-force search,
//                         counting an idle device the engine split as whole again), with no job
//                         of higher priority waiting that cannot be held, starts within
//                         3 cycles + grace + drain
//   liveness.reservation  a group below its reservation, with a waiting job inside it that the
//                         cluster could hold once borrowers left, gets it within one cycle +
//                         grace (rounded up to cycles, plus the cycle that sees it); each such
//                         job on its own clock
//   backfill.head         a job of lower standing that starts while the blocked head waits does
//                         not make the head start later than its earliest start (by declared
//                         walltimes) had that job not started; judged when the head starts, or
//                         once that time has passed (at the end, by the estimates)
//   guard.idle            a holding is given back for idleness (swapped out, requeued, stopped)
//                         only under its queue's idle_timeout and not before it; a running job
//                         idle past its queue's idle_timeout holds nothing after the next cycle
//                         (unless swapped out; requeued only while another job waits)
//   guard.walltime        a running job (of a queue placed here) holds nothing after its declared
//                         walltime has passed: backfill and the heads' estimates count on it
//   stability.reconfigure no device changes mode (MIG on/off, AMD pair) or loses a partition
//                         more than `max_reconfigurations_per_hour` times in any hour
//
// Its notion of "could be held" is its own (could_hold.h): a brute-force search over the devices
// as the views show them, deliberately not the scheduler's fit code, and conservative (a job it
// cannot prove holdable is not owed anything), so that what it reports is a real broken promise.
//
// Thread-safety: none; one owner, like the engine it watches.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "sched/quota/engine.h"
#include "sched/quota/policy_model.h"
#include "verify/could_hold.h"

namespace tessera::verify {

struct Violation {
  std::string property;  // "liveness.start"
  int64_t time = 0;
  std::string what;  // for people
  std::vector<std::string> jobs;
  std::vector<std::string> devices;  // "node/3"
  std::string ToString() const;
};

struct Bounds {
  int64_t cycle_s = 10;
  int64_t grace_s = 0;
  int max_reconfigurations_per_hour = 20;
  // 3 cycles + grace + drain (a drain is a grace: only preemptible occupants are drained).
  int64_t StartBound() const { return 3 * cycle_s + 2 * grace_s; }
  // One cycle + grace, the grace rounded up to whole cycles, from the cycle that first saw it.
  int64_t ReservationBound() const {
    return cycle_s * ((grace_s + cycle_s - 1) / cycle_s) + 2 * cycle_s;
  }
};

// What the checked histories contained, for the coverage table.
struct Seen {
  bool unsplit = false;          // an idle split device went back to whole
  bool amd_mode_change = false;  // an AMD device changed its compute or memory mode
  bool gang = false;             // a job placed on two or more devices
  bool node_loss = false;
  bool reclaim_in_flight = false;  // a reclaim waited out a grace
  bool backfill = false;
  bool reclaim = false;
  bool repartition = false;
  bool swap_hold = false;  // a share held swapped out (preempted by swapping), then resumed
};

class Checker {
 public:
  Checker(const quota::PolicySpec& policy, const std::vector<quota::NodeSpec>& nodes,
          Bounds bounds);

  // A submission the engine accepted (its handle).
  void Submitted(int handle, const quota::JobSpec& spec);
  void NodeDown(const std::string& node, bool down);
  // After every cycle (and at the end): reads the engine's views and events since the last call.
  void AfterCycle(const quota::QuotaEngine& e, int64_t now);
  // The history has ended at `now`: a verdict still waiting for its job is given by the
  // estimates it was made on (backfill.head: a head that never started).
  void Finish(int64_t now);

  const std::vector<Violation>& violations() const { return violations_; }
  const Seen& seen() const { return seen_; }
  const Bounds& bounds() const { return bounds_; }

 private:
  void Report(std::string property, int64_t now, std::string what, std::vector<std::string> jobs,
              std::vector<std::string> devices = {});
  void ReadEvents(const quota::QuotaEngine& e, int64_t now);
  void CheckDevices(Snapshot& s, int64_t now);
  void CheckLimits(const Snapshot& s, int64_t now);
  // safety.borrowing: a non-preemptible job placed past its group's reservation leaves every
  // reservation within reach (FirmNeed within the cards).
  void CheckBorrowing(const Snapshot& s, int64_t now);
  // What the groups' reservations and the work reclaim could never take back need of the
  // cards, in GPU: per group the larger of its reservation and its own jobs less its preemptible
  // ones above the reservation, plus its children's needs; with `extra` GPU of non-preemptible
  // work more in group `g` (-1: none). *firm: the non-preemptible work alone, with `extra`.
  MilliGpu FirmNeed(const Snapshot& s, int g, MilliGpu extra, MilliGpu* firm) const;
  void CheckReclaim(const Snapshot& s, int64_t now);
  void CheckStart(const Snapshot& s, int64_t now);
  void CheckReservation(const Snapshot& s, int64_t now);
  void CheckHead(const Snapshot& s, int64_t now);
  // backfill.head's verdicts waiting for their head to start.
  void JudgeHeads(const Snapshot* s, int64_t now);
  // A claimant's victims staying on as the claimant's, with the other free cards of their node
  // it needs.
  void TakeForClaim(const Want& c, const Snapshot& s, const std::vector<int>& victims,
                    Snapshot* t) const;
  // The earliest time `head` could be held if the running jobs left at their declared ends
  // (never, without a walltime) and the jobs in `gone` had not started; kNoStart when none.
  // Claims in flight: a whole claimant's victims stay as its (TakeForClaim); a partition's or a
  // share's too when `every_claim_stays`, else they leave at the end of their grace.
  int64_t EarliestStart(const Snapshot& s, const Want& head, const std::vector<bool>& gone,
                        int64_t now, bool every_claim_stays) const;
  void CheckStability(const quota::QuotaEngine& e, int64_t now);
  void CheckFairness(const Snapshot& s, int64_t now);
  void CheckIdle(const Snapshot& s, int64_t now);
  void CheckWalltime(const Snapshot& s, int64_t now);
  // Time held swapped out is not run time (guard.walltime): kept from the events.
  void NotePause(const quota::Event& x, int handle);
  int64_t Paused(int handle) const;  // seconds held swapped out since it last started
  // An event giving back an idle holding ("idle_timeout: idle Ns ..."): under its queue's
  // idle_timeout, and not before.
  void CheckIdleEvent(const quota::Event& x, int64_t now);
  // A preemption of `victim` for `claimant` (reclaim, priority, a drain; held swapped out too):
  // the victim has run its min_runtime, the claimant waited its preemption_delay.
  void CheckPreemptionGuards(const quota::Event& x, int victim, int claimant);

  bool Admissible(const Snapshot& s, const Want& w) const;

  World world_;
  Bounds bounds_;
  std::vector<bool> down_;   // per node
  std::vector<Want> wants_;  // by handle
  std::map<std::string, int> handle_of_;
  struct Pause {
    int64_t paused = 0;       // held swapped out since it started, in seconds
    int64_t held_paused = 0;  // paused when it was last held
    int64_t held_at = -1;     // held swapped out since (-1: not held)
    int device = -1;          // while held: the device it resumes on (World::devices), once read
  };
  std::map<int, Pause> pauses_;  // by handle, jobs ever held swapped out
  // guard.min_runtime and guard.preemption_delay: each running job's start as the last cycle's
  // views showed it (kept while held swapped out: it resumes with it), and since when each job
  // waits (submitted, or back to pending), from the events.
  std::map<int, int64_t> started_at_, waiting_since_;
  // Each job's place in the order, by handle (backfill.head's "lower standing"): its submission;
  // a job requeued for idleness goes to the back, as the engine puts it (behind the jobs waiting
  // then), once it is back to pending.
  std::vector<int64_t> standing_;
  int64_t next_standing_ = 0;
  std::set<int> idle_requeued_;
  size_t events_seen_ = 0;
  std::map<int, int64_t> owed_since_;  // liveness.start: handle -> first cycle owed
  std::vector<char> was_pending_;      // by handle, at the last look (backfill.head)
  std::set<int> paid_for_;             // jobs others were preempted for, until they start
  // backfill.head: a start behind a blocked head that put the head's earliest start past
  // `without`, judged once the head starts (late only if after `without`) or `without` passes.
  struct HeadDelay {
    int64_t at = 0, without = 0;
    std::string what;
    std::vector<std::string> jobs;
  };
  std::map<int, HeadDelay> head_delays_;  // by the head's handle: the earliest `without`
  std::map<int, int64_t> short_since_;    // liveness.reservation: handle -> first cycle owed
  // safety.reclaim per GPU model: each group's running GPU per model at the last check.
  std::vector<std::map<std::string, MilliGpu>> prev_model_staying_, prev_pool_staying_;
  bool others_waited_ = false;  // guard.idle: a job waited (pending, not held) at the last check
  // Victims leaving for a claimant: victim handle -> claimant handle, while terminating.
  std::map<int, int> leaving_for_;
  // Victims leaving for a claimant by any preemption (reclaim, priority, drain).
  std::map<int, int> making_room_for_;
  // When each job preempted and still in its grace leaves at the latest (backfill.head).
  std::map<int, int64_t> leaves_by_;
  std::vector<int> own_for_own_;  // this cycle: preempted for a job of their own group
  std::set<int> preempted_this_cycle_;
  std::vector<int> placed_this_cycle_;  // from the events (safety.borrowing)
  struct Layout {
    bool seen = false;
    std::string mode;  // "MIG", "CPX+NPS4", ""
    std::set<std::string> slots;
  };
  std::vector<Layout> layout_;  // per device, last seen
  std::vector<char> owned_;     // per device: its mode changed by the engine (it may unsplit it)
  std::vector<std::vector<int64_t>> reconfig_times_;  // per device
  int64_t fair_since_ = -1;                           // fairness: the hour being summed began
  std::vector<int64_t> fair_held_;                    // per group, milli-GPU summed over its cycles
  std::vector<int64_t> fair_job_held_;  // the same per job: the most one placement can tilt it
  std::set<std::string> reported_;      // one report per (property, subject)
  std::vector<Violation> violations_;
  Seen seen_;
};

}  // namespace tessera::verify
