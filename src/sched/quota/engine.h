// QuotaEngine: the scheduling cycle over pending jobs, under the queue and quota policy.
//
// One cycle (RunCycle(now)), on a clock the caller supplies (virtual in the simulator):
//   0. finish preemptions whose grace ended; apply planned layouts on drained devices;
//   1. order pending jobs: queue priority, then groups below their reservation, then fair
//      share (dominant-resource share of decayed usage over weight), then submit time;
//   2. admit: within the group's reservation is guaranteed; above it and within every limit
//      (the group's and its ancestors') is borrowed; past a limit waits;
//   3. place, trying the job's forms in order: whole devices (gangs all-or-nothing, across
//      nodes when needed), a hardware partition (the smallest MIG profile or AMD partition
//      covering memory and compute), or a share (a memory cap on a device whose caps sum to at
//      most its memory; the compute weight is a statistical share under time slicing);
//   4. when placement fails: reclaim from borrowers for a job within its group's reservation,
//      else priority preemption inside the group; victims free the need with least lost work
//      (GPU time already spent); the first blocked job reserves the devices that free up
//      soonest, and later jobs may use them only when their declared walltime ends first
//      (backfill that does not delay it);
//   5. repartition: for partition demand that waits, plan a new layout with the partition
//      engine on a device whose occupants allow it; the device is drained (preemptible
//      occupants only) and reconfigured when idle, when the work lost is worth the demand
//      served. An AMD memory-mode change drains the whole node.
//
// Every state change is an Event (who, what, when, why). Every waiting job carries the step
// and reason that holds it. CheckInvariants() verifies capacity, limits and attribution.
//
// Thread-safety: none; one owner drives one engine. Deterministic for the same inputs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/cluster.h"
#include "sched/quota/forecast.h"
#include "sched/quota/policy_model.h"

namespace tessera::quota {

// A node as the engine is given it. A known catalog model (gpu_model) gives the device
// memory and partition rules; an unknown one needs gpu_memory_mib and cannot be partitioned.
struct NodeSpec {
  std::string name;
  std::string pool;
  MilliCpu cpu_milli = 0;
  MiB memory_mib = 0;
  std::string gpu_model;
  int gpu_count = 0;
  MiB gpu_memory_mib = 0;               // only for models outside the catalog
  std::vector<std::string> mig_layout;  // initial MIG profiles on every device (MIG enabled)
  std::string amd_mode;                 // initial AMD pair, e.g. "CPX+NPS4"; default SPX+NPS1
  // Host RAM and disk the node gives swapped-out share memory. Swapping shares' caps past a
  // device's memory (their overcommit) must fit in it, summed over the node's devices.
  MiB swap_mib = 0;
};

// A job as submitted: a queue, an identity, and optional overrides of the queue's profile.
struct JobSpec {
  std::string id;
  std::string identity;
  std::string group;  // empty: the queue's first group
  std::string queue;
  std::optional<WorkloadClass> cls;    // default: the queue's
  std::optional<AllocationForm> form;  // must be one the policy allows
  std::optional<int> gpu_count;
  std::optional<MilliGpu> gpu_milli;
  std::optional<MiB> gpu_memory_mib;
  std::optional<MilliCpu> cpu_milli;
  std::optional<MiB> memory_mib;
  int64_t walltime_s = 0;  // declared run time: backfill counts on it, and it is stopped
                           // then (not external: its batch system is told); 0 = unknown
  // Re-entering a job already accepted once (a control plane reloading its store): skips the
  // "never schedulable" check, which depends on the nodes known at the time; and, for one that
  // `holds` capacity (Restore follows), its group's limits, which may have been lowered since.
  bool restoring = false;
  bool holds = false;
};

enum class JobState { kPending, kRunning, kTerminating, kDone, kRejected };
const char* JobStateName(JobState s);

enum class EventKind {
  kSubmitted,
  kRejected,
  kAdmitted,
  kPlaced,
  kPreempted,
  kRequeued,
  kRepartitioned,
  kCompleted,
  kStopped,  // a runtime guard ended it (max_runtime, its walltime); the detail says which
  // Held but idle past its queue's idle_timeout, a swapping share is swapped out: it keeps
  // running and its grant, and its memory leaves the device (the agent's swap path). The detail
  // names the idle time. (Requeued or stopped for idleness: kPreempted "idle_timeout: ..." or
  // kStopped.)
  kSwappedOut,
  // A share held swapped out (a kSwappedOut whose for_job names the claimant: preempted by
  // reclaim or priority on a swapping queue, its memory held in host RAM or on disk, lost work
  // 0) is back on its device: it resumes where it was. The detail says since when it was held.
  kSwappedIn,
};
const char* EventKindName(EventKind k);

struct Event {
  int64_t time = 0;
  EventKind kind = EventKind::kSubmitted;
  std::string job;  // empty for device events
  int handle = -1;  // the job's (-1: a device event, or a submission refused before it had one)
  std::string identity;
  std::string group;
  std::string detail;   // why, for people
  std::string for_job;  // kPreempted: the job it makes room for
};

// What one allocation holds on one device.
struct GrantView {
  std::string node;
  int device = 0;
  std::string slot;  // partition name ("1g.10gb@3", "CPX#2"); empty for whole and device shares
  MilliGpu compute = 0;
  MiB memory = 0;
  MilliCpu cpu = 0;     // host CPU held with it
  MiB host_memory = 0;  // host memory held with it
  // A share's compute mode: 0 time-slicing; 1-100 sm-sharing through MPS at this active-thread
  // percentage (its queue's compute_percent when placed).
  int sm_percent = 0;
};

struct JobView {
  std::string id, identity, group, queue;
  WorkloadClass cls = WorkloadClass::kBatch;
  JobState state = JobState::kPending;
  std::optional<AllocationForm> form;  // while holding something
  bool borrowed = false;
  Resources charge;  // what it holds against quota
  std::vector<GrantView> grants;
  int64_t submit_time = 0;
  int64_t start_time = -1;
  int preemptions = 0;
  int64_t stop_at = -1;     // running under max_runtime or a walltime: when that stops it
  int64_t idle_since = -1;  // while running and reported idle (SetIdle): since when
  // While idle under an idle_timeout and not yet given back: when the guard acts, and how
  // ("swap", "requeue" or "stop"); users are told before it happens.
  int64_t idle_action_at = -1;
  std::string idle_action;
  bool swapped_out = false;  // its idle_timeout swapped it out (until it is active again)
  // Preempted on a swapping queue and held swapped out (pending, its processes paused, its
  // memory off the device): since when, where ("node/gpu0"), and when its queue's
  // swap_hold_limit stops it (-1: no limit). -1 / "" otherwise.
  int64_t held_swapped_since = -1;
  // Held: since when it ran (its start, kept), and the seconds it was held before this hold
  // (not run time): what RestoreHold takes back after a restart.
  int64_t held_start = -1, held_paused = 0;
  std::string held_on;
  int64_t hold_stop_at = -1;
  std::string wait_step;    // while pending: "Admission", "Placement", "Backfill", "Reclaim", ...
  std::string wait_reason;  // for people
  std::string ext_pool;     // an external job's backend pool (the one chosen, of several)
  std::vector<PoolForecast> dispatch;  // several pools: each one's forecast when it was placed
};

// A group's quota and usage on one GPU model (GroupSpec::models), in milli-GPU.
struct ModelQuotaView {
  std::string model;
  int64_t usage = 0;  // held on that model, this group and its descendants
  int64_t reservation = 0;
  int64_t limit = kUnlimited;
};

struct GroupView {
  std::string name;
  Resources usage;  // held, this group and its descendants
  Resources reservation;
  Resources limit;
  double fair_share = 0;  // dominant share of decayed usage over weight
  // Per GPU model: each model it has a quota on or holds something of, in model order.
  std::vector<ModelQuotaView> models{};
  // Quota per pool (issue 37): each pool it holds GPU in or has a quota on, with its usage,
  // reservation and limit there (ModelQuotaView's fields; `model` is the pool's name).
  std::vector<ModelQuotaView> pools{};
};

// One identity inside a group that lists its users (GroupSpec::members): its fair share
// inside the group (the dominant share of its decayed usage over its weight; lower goes first).
struct MemberView {
  std::string group, identity;
  int64_t weight_milli = 1000;
  Resources usage;  // held now
  Resources limit;
  double fair_share = 0;
};

struct CycleStats {
  int pending_at_start = 0;
  int admitted = 0;
  int preempted = 0;
  int repartitioned = 0;
  int backfilled = 0;  // placed on devices reserved for a blocked job, finishing before it
};

struct EngineOptions {
  bool check_invariants_each_step = false;  // after every cycle, completion and submit
  // A preempted job's capacity returns when its processes are reported gone (Stopped()), not
  // when the grace ends: what a control plane with real processes needs. The simulator leaves
  // this off and lets the grace end it.
  bool await_stop = false;
  // Deliberate breaks, for the promise checker's own tests (tests/verify): each turns one guard
  // off, so that a test can show the checker notices what the guard prevents. kNone elsewhere.
  enum class Break {
    kNone,
    kNoUnsplit,                 // an idle card the engine split never goes back to whole
    kReclaimIgnoresInFlight,    // reclaim does not count the claims waiting out a grace
    kReclaimAnyBorrower,        // reclaim may take a victim's group below its reservation
    kPreemptNonPreemptible,     // preemption may take work of a non-preemptible queue
    kIgnoreLimits,              // admission ignores group limits
    kDoubleBookWhole,           // a held device may be granted whole again
    kMigOverlap,                // a new MIG instance may start on slices already in use
    kThrash,                    // idle split cards go back to whole every cycle, demand or not
    kNoReclaim,                 // a group below its reservation never preempts borrowers
    kFairShareIgnoresWeights,   // the fair-share order ignores groups' weights
    kIgnoreHostCapacity,        // placement ignores the node's free CPU and host memory
    kBackfillIgnoresHead,       // any job may use the cards kept for a blocked head
    kIgnoreWalltime,            // a job runs on past its declared walltime
    kIgnoreMaxRuntime,          // a job runs on past its queue's max_runtime
    kIgnoreMinRuntime,          // a job younger than its queue's min_runtime may be a victim
    kIgnorePreemptionDelay,     // a job may preempt before its queue's preemption_delay
    kHoldForAnyClaimant,        // a swapping share is held whatever takes its place
    kReclaimIgnoresSwapBudget,  // reclaim for a share counts room at the overcommit alone
    kBorrowReserved,            // non-preemptible work may borrow capacity groups reserve
  };
  Break engine_break = Break::kNone;
};

// A partition as a device holds it, for views and for the agents that create it.
struct SlotView {
  std::string name;     // "1g.10gb@3", "CPX#2"
  std::string profile;  // "1g.10gb", "CPX"
  int start = 0;
  std::string holder;  // job id, empty when free
};

struct DeviceView {
  std::string node;
  int index = 0;
  bool mig = false;
  std::string amd_pair;         // "CPX+NPS4"; empty for non-AMD
  std::vector<SlotView> slots;  // live partitions
  bool draining = false;        // a new layout waits for the device (or node) to empty
  std::string plan;             // why, while draining
  std::string plan_for;         // the job it drains for ("": none, or an administrator's drain)
};

class QuotaEngine {
 public:
  // Validates the policy and nodes (pools exist, models known or sized). Errors name the field.
  static Result<std::unique_ptr<QuotaEngine>> Create(const PolicySpec& policy,
                                                     const std::vector<NodeSpec>& nodes,
                                                     EngineOptions options = {});
  virtual ~QuotaEngine() = default;

  // Queues a job at `now`. kInvalidArgument (also recorded as a kRejected event) for an unknown
  // queue, a group the queue does not allow, a form the policy forbids, or a request no device
  // of the profile's pools could ever hold. Returns the job's handle.
  virtual Result<int> Submit(const JobSpec& job, int64_t now) = 0;
  // What Submit would refuse, without submitting (kInvalidArgument with the reason).
  virtual Status Check(const JobSpec& job) const = 0;
  // The job finished; its capacity returns at once. REQUIRES: running or terminating.
  virtual void Complete(int job, int64_t now) = 0;
  // `between`, when given, is called after each job the cycle considered: decisions made so far
  // are final (events() holds them), so a caller may record them while the cycle goes on.
  virtual CycleStats RunCycle(int64_t now, const std::function<void()>& between = nullptr) = 0;
  // Runtime guards (QueueSpec::max_runtime_s, JobSpec::walltime_s): stops every running job that
  // has run its queue's max_runtime or its declared walltime by `now`, with a kStopped event naming
  // the guard; returns how many. Without await_stop it ends at once (state done, capacity back);
  // with await_stop it is terminating until Stopped(), then done (not requeued). RunCycle does this
  // first; a caller may call it between cycles, at NextRuntimeStop(), to stop a job at its exact
  // time.
  virtual int StopOverRuntime(int64_t now) = 0;
  // The earliest time StopOverRuntime would stop a running job; -1 when none has a limit.
  virtual int64_t NextRuntimeStop() const = 0;
  // Activity, as the job's agent reports it: held but idle since `idle_since` (-1: active
  // again). Ignored unless running. A swapped-out share that is active again is back.
  virtual void SetIdle(int job, int64_t idle_since) = 0;
  // Idle holdings given back (QueueSpec::idle_timeout_s): every running job idle for its
  // queue's idle_timeout by `now` is swapped out (a share of a swapping queue: kSwappedOut, it
  // keeps running), else requeued as a preemption is (kPreempted "idle_timeout: ...", grace,
  // back to pending) or stopped (kStopped, as max_runtime). Returns how many. RunCycle does it
  // first; a caller may call it at NextIdleGiveBack() to act at the exact second.
  virtual int GiveBackIdle(int64_t now) = 0;
  // The earliest time GiveBackIdle would act; -1 when none.
  virtual int64_t NextIdleGiveBack() const = 0;

  // --- Driven from a control plane (nodes come and go, jobs are cancelled and lost).
  // Adds a node (its index), or brings back a down node of the same name and inventory. A node of
  // that name with another inventory is retired (it must hold nothing) and replaced.
  virtual Result<int> AddNode(const NodeSpec& node, int64_t now) = 0;
  // A down node takes no new work; what it held must be requeued or ended by the caller.
  virtual void SetNodeDown(const std::string& node, bool down) = 0;
  // Preempts a running job now, for `why` (an administrator's drain): terminating, through the
  // policy's grace and Stopped() as a preemption, then pending again with its submit time. A
  // job held swapped out gives its hold up (kRequeued): it runs again from its start elsewhere.
  // Nothing if it is neither.
  virtual void Evict(int job, int64_t now, const std::string& why) = 0;
  // A closed device takes no new work (cordoned by an operator, or unhealthy as its agent
  // reports); what it holds stays until the caller ends, requeues or lets it finish. Reopened,
  // it takes work again. An unknown node or index is ignored.
  virtual void SetDeviceClosed(const std::string& node, int index, bool closed) = 0;
  // The isolation a share gets on the device (model/isolation.h rank; default 1, "preload": the
  // cap library alone), as its agent reports it. Shares of a queue with a higher min_isolation
  // are not placed there. An unknown node or index is ignored.
  virtual void SetDeviceIsolation(const std::string& node, int index, int rank) = 0;
  // Whether the device offers MPS for sm-sharing shares (its agent runs the control daemon
  // there). Shares of an sm-sharing queue go only where it does, and get the grade
  // max(the device's, mps) there. Default false. An unknown node or index is ignored.
  virtual void SetDeviceMps(const std::string& node, int index, bool mps) = 0;
  // The GPU capacity (thousandths of a card) an external pool (QueueSpec::external_pool) has
  // for this engine's jobs; negative: unbounded (the default).
  virtual void SetExternalCapacity(const std::string& pool, int64_t gpu_milli) = 0;
  // A pool that stops answering gets no new work (its held jobs stay held) until it answers.
  virtual void SetExternalAnswering(const std::string& pool, bool answering) = 0;
  // Before Restore, for a job of several pools: the one it was dispatched to.
  virtual void SetExternalPool(int job, const std::string& pool) = 0;
  // Withdraws a pending job or ends a held one (its capacity returns at once).
  virtual void Cancel(int job, int64_t now, const std::string& why) = 0;
  // A held job goes back to pending, keeping its submit time (its node was lost).
  virtual void Requeue(int job, int64_t now, const std::string& why) = 0;
  // A terminating job's processes are gone: it returns to pending now (see await_stop).
  virtual void Stopped(int job, int64_t now) = 0;
  // Re-enters a held allocation after a restart: `grants` as job(handle).grants listed them.
  // Partitions named in the grants are re-created on their devices. Fails, changing nothing, when
  // the capacity is not free or the grant does not fit the device.
  virtual Status Restore(int job, AllocationForm form, const std::vector<GrantView>& grants,
                         bool borrowed, bool terminating, int64_t now) = 0;
  // A restored job's first start, as recorded before the restart (Restore starts it at `now`):
  // max_runtime, min_runtime and lost work count from it. Ignored unless running, or when later.
  virtual void SetStartTime(int job, int64_t start) = 0;
  // Its processes started running at `start` (its agent's report, later than its placement by the
  // start's delivery): runtime guards count from then. Ignored unless running, when not later, or
  // for a share resumed from a hold (its start is its first run's; the hold is added), even one
  // held less than a second.
  virtual void SetRunStart(int job, int64_t start) = 0;
  // Re-enters a hold after a restart: a share preempted by swapping, pending, its processes
  // paused on `node`'s card `device` with `memory` off the card since `held_since`, having run
  // from `start` and been held `paused` seconds before this hold (JobView::held_*). Fails,
  // changing nothing, unless the job is a pending share of a swapping queue and the card known.
  virtual Status RestoreHold(int job, const std::string& node, int device, MiB memory,
                             int64_t held_since, int64_t start, int64_t paused) = 0;
  virtual DeviceView device(const std::string& node, int index) const = 0;

  // Drains in progress (a device, or for an AMD memory mode its node, waiting to empty for a new
  // layout), so that a control plane can keep them across a restart: Drains() lists them,
  // RestoreDrain() puts one back (its device is kept for `job` again when that job still waits).
  struct Drain {
    std::string node;
    int device = 0;
    std::string job;                 // the job it is for
    std::vector<std::string> evict;  // MIG instances to destroy ("1g.10gb@3")
    std::vector<std::string> add;    // MIG instances to create
    bool enable_mig = false;
    std::string amd_pair;    // AMD: the new pair ("CPX+NPS1")
    bool node_wide = false;  // AMD memory-mode change (every device of the node)
    std::string why;
    bool operator==(const Drain&) const = default;
  };
  virtual std::vector<Drain> Drains() const = 0;
  virtual bool MayHaveDrains() const = 0;  // cheap: false means Drains() is empty
  virtual Status RestoreDrain(const Drain& drain, int64_t now) = 0;

  // OK, or the first violation: a device, partition or share over capacity; a group over a
  // limit; something running without an admission event or without identity and group.
  virtual Status CheckInvariants() const = 0;
  // Violations found by the per-step checks (EngineOptions) so far.
  virtual const std::vector<std::string>& violations() const = 0;

  virtual int job_count() const = 0;
  virtual JobView job(int handle) const = 0;
  // What a job holds (job()'s grants, form and borrowed, without the rest of the view).
  virtual void HeldOf(int handle, std::vector<GrantView>* grants,
                      std::optional<AllocationForm>* form, bool* borrowed) const = 0;
  // Handles of the jobs left waiting by the last cycle and submitted or requeued since (may hold
  // some that have started or ended since).
  virtual const std::vector<int>& waiting() const = 0;
  // The step and reason holding a pending job (cheaper than job()).
  virtual void WaitOf(int handle, std::string* step, std::string* reason) const = 0;
  virtual JobState job_state(int handle) const = 0;
  virtual std::vector<GroupView> groups() const = 0;
  // Members of the groups that list their users, and the identities seen in them.
  virtual std::vector<MemberView> members() const = 0;
  virtual const std::vector<Event>& events() const = 0;
  // The same, for a caller that records them: it may move their texts out before ClearEvents.
  virtual std::vector<Event>& events_to_record() = 0;
  // Drops the events recorded so far (a control plane that has recorded them elsewhere: a
  // long-running server would otherwise keep every decision ever made).
  virtual void ClearEvents() = 0;
  // Fair-share history: each group's decayed usage (resource-seconds per resource: GPU,
  // GPU memory, CPU, host memory) as of the last cycle, which `as_of` receives. A served
  // control plane saves it and gives it back after a restart, decayed over the time between.
  struct FairShareHistory {
    std::string group;
    double decayed[4] = {0, 0, 0, 0};
  };
  virtual std::vector<FairShareHistory> FairShare(int64_t* as_of) const = 0;
  // Groups the policy no longer has are ignored.
  virtual void RestoreFairShare(const std::vector<FairShareHistory>& history, int64_t as_of,
                                int64_t now) = 0;
  virtual int device_count() const = 0;
  virtual MilliGpu gpu_capacity() const = 0;
  virtual MiB gpu_memory_capacity() const = 0;
  // Compute and memory held by all allocations now (whole devices count in full).
  virtual Resources allocated() const = 0;
  // Devices holding at least one job of each class (a shared device counts for each class).
  virtual std::vector<int> devices_used_by_class() const = 0;
  // "1g.10gb@0, 3g.40gb@4" or "CPX+NPS4" or "" for one device, for reports and tests.
  virtual std::string device_layout(int node, int device) const = 0;
};

}  // namespace tessera::quota
