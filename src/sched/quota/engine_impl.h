// Internal to the quota engine: its runtime structures and the Engine class behind QuotaEngine.
// Split over engine_setup.cc (setup, submission, completion), engine_lifecycle.cc (nodes, cancels,
// restores), engine_place.cc (quota and placement), engine_preempt.cc (preemption, backfill),
// engine_repartition.cc (drains for new layouts), engine_cycle.cc (the cycle and its unsplits),
// engine_views.cc (invariants, views) and engine_mirror.cc (the placement policy's mirror).
// Nothing outside src/sched/quota includes this.
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "model/quantity.h"
#include "partition/amd.h"
#include "partition/catalog.h"
#include "partition/mig.h"
#include "sched/quota/engine.h"
#include "sched/quota/quota_cells.h"
#include "sched/scheduler.h"

namespace tessera::quota::internal {

namespace part = tessera::partition;

inline constexpr int64_t kNever = std::numeric_limits<int64_t>::max() / 4;
// Cost that marks a partition holder as not evictable in CheapestEviction.
inline constexpr int64_t kForbidden = std::numeric_limits<int64_t>::max() / 1024;
// How many share candidates best-fit looks at before falling back to an empty device.
inline constexpr int kShareProbe = 64;

struct Slot {
  std::string name;  // "1g.10gb@3" or "CPX#2"
  std::string profile;
  int start = 0;
  MiB memory = 0;
  MilliGpu compute = 0;
  int holder = -1;
  bool alive = true;  // a destroyed instance stays as a tombstone so grant indices hold
  int slices = 0;     // MIG memory slices it occupies
};

// A pending reconfiguration of a device (or, for an AMD memory mode, of its node).
struct Plan {
  bool active = false;
  int for_job = -1;
  std::vector<part::Instance> evict;  // MIG: instances to destroy
  std::vector<part::Instance> add;    // MIG: instances to create
  bool enable_mig = false;            // MIG: turn MIG on (device was unsplit)
  std::string amd_pair;               // AMD: the new pair ("CPX+NPS1")
  bool node_wide = false;             // AMD memory-mode change
  std::string why;
};

struct Dev {
  int node = 0;
  int index = 0;
  int pool = 0;
  const part::GpuModel* model = nullptr;
  MiB memory = 0;
  int whole = -1;
  bool mig = false;     // MIG mode on
  bool split = false;   // has partition slots (MIG on, or AMD with more than one partition)
  bool closed = false;  // takes no new work (SetDeviceClosed: cordoned or unhealthy)
  int isolation = 1;    // what a share gets here (SetDeviceIsolation); 1: preload
  bool mps = false;     // offers MPS for sm-sharing shares (SetDeviceMps)
  int sm_sum = 0;       // the active-thread percentages of its sm-sharing shares (<= 100)
  // Split by the engine itself (MIG enabled, AMD switched, for partition demand), not as
  // registered: an idle one goes back to whole when whole or share demand waits.
  bool engine_split = false;
  std::string amd_pair;
  std::vector<Slot> slots;
  std::vector<int> shares;
  MiB share_mem = 0;
  MilliGpu share_weight = 0;
  int reserved_by = -1;    // a job this device is kept for
  bool nominated = false;  // kept strictly (reclaim, repartition); else backfill rules apply
  int64_t reserved_until = 0;
  Plan plan;
  MiB share_key = -1;     // key in shared_by_free_, -1 when not there
  int swap_oc = 0;        // the overcommit percent of the shares it holds (0: no swapping)
  uint64_t no_start = 0;  // MIG profiles (bit = catalog index) known to have no legal start now
  int model_id = 0;       // its GPU model (Engine::model_names_), for quotas per model
  int held =
      0;  // shares held swapped out here: they resume here, so it is not idle (its mode stays)

  // What shares of overcommit `oc` may sum to here: memory and compute weight.
  MiB share_capacity(int oc) const { return oc > 0 ? memory * oc / 100 : memory; }
  MilliGpu weight_capacity(int oc) const { return oc > 0 ? kWholeGpu * oc / 100 : kWholeGpu; }
  bool ShareKindFits(int oc) const { return shares.empty() || swap_oc == oc; }  // one oc a dev

  bool idle() const {
    if (whole >= 0 || !shares.empty() || held > 0) return false;
    for (const Slot& s : slots) {
      if (s.holder >= 0) return false;
    }
    return true;
  }
  bool mig_capable() const { return model && model->is_mig() && !model->mig.profiles.empty(); }
  bool amd_capable() const { return model && model->is_amd(); }
};

struct NodeRt {
  std::string name;
  int pool = 0;
  MilliCpu cpu_total = 0, cpu_free = 0;
  MiB mem_total = 0, mem_free = 0;
  std::vector<int> devs;
  int model_id = -1;      // its devices' GPU model; -1: no GPU
  bool down = false;      // lost, or retired: takes no new work
  MiB held_swap_mib = 0;  // shares held swapped out from its devices (engine_guards.cc)
  NodeSpec spec;          // as added, to tell a return from a replacement
};

struct Grant {
  int node = 0;
  int dev = -1;   // -1: CPU-only
  int slot = -1;  // -1: whole device or device share
  MiB memory = 0;
  MilliGpu compute = 0;
  MilliCpu cpu = 0;
  MiB host_memory = 0;
  int sm_percent = 0;  // a share's compute mode: 0 time-slicing, else sm-sharing at this percent
};

struct Job {
  std::string id, identity;
  int group = 0, queue = 0, profile = 0;
  int swap_oc = 0;        // its queue's swap_overcommit_percent
  int min_isolation = 0;  // its queue's: a share only where the device's grade is at least this
  int sm_percent = 0;     // its queue's compute_percent: 0 time-slicing, else sm-sharing
  WorkloadClass cls = WorkloadClass::kBatch;
  std::vector<AllocationForm> forms;
  uint64_t pools = 0;
  int gpu_count = 0;
  MilliGpu gpu_milli = 0;
  MiB gpu_mem = 0;
  MilliCpu cpu = 0;
  MiB mem = 0;
  int priority = 0;
  bool preemptible = false;
  int64_t submit = 0, walltime = 0, seq = 0;
  // Runtime guards, from its queue (seconds; 0: none), and since when it waits (submitted or
  // last back to pending), for preemption_delay. run_limit: the earlier of max_runtime and (not
  // external) its walltime; paused: seconds held swapped out since it started (the stop moves by
  // them); stop_key: its time in runtime_stops_ (-1: none). known_run: how long it may run, as
  // far as is known (run_limit, else an external job's walltime; 0: unknown), for estimates.
  int64_t max_runtime = 0, min_runtime = 0, preempt_delay = 0, run_limit = 0;
  int64_t known_run() const { return run_limit > 0 ? run_limit : walltime; }
  int64_t paused = 0, stop_key = -1, waiting_since = 0;
  // Idle holdings (QueueSpec::idle_timeout_s, idle_action): idle since (-1: active), swapped out
  // by the guard already.
  int64_t idle_timeout = 0, idle_since = -1;
  bool idle_stop = false, idle_swapped = false;
  bool idle_requeue = false;  // terminating for idleness: back to pending behind its queue
  // Preemption by swapping (engine_guards.cc): held swapped out on device held_dev (-1: not held)
  // since held_since, its memory held_mem counted in its node's held_swap_mib; started at
  // held_start; stopped once held hold_limit seconds (0: no limit).
  int held_dev = -1;
  int64_t held_since = -1, held_start = -1, held_paused = 0, hold_limit = 0;
  MiB held_mem = 0;
  int member = -1;  // its identity in its group's members_ entry; -1: the group lists no users
  bool stop_final = false;  // terminating because a guard stopped it: done, not requeued
  bool resumed = false;     // resumed from a hold: its start is its first run's (SetRunStart)
  JobState state = JobState::kPending;
  int64_t start = -1, grace_end = 0;
  AllocationForm form = AllocationForm::kWhole;
  std::vector<Grant> grants;
  Resources charge;
  bool borrowed = false;
  bool admitted_logged = false;
  int preemptions = 0;
  int rank = -1;           // its place in this cycle's order (AdmitInOrder); -1: not in it
  int awaiting = 0;        // victims still terminating for this job
  int claimant = -1;       // while terminating: the job waiting for this one's capacity
  bool nominated = false;  // some device is kept for this job
  bool paid = false;       // others were preempted for it: it goes first until placed (Order)
  bool external = false;   // its queue's jobs are placed by another scheduler
  std::string ext_pool;    // ... sharing that scheduler's capacity ("" : unbounded)
  std::vector<std::string> ext_pools;  // several backends: the one chosen goes to ext_pool
  std::vector<PoolForecast> dispatch;  // their forecasts at the last dispatch decision
  std::string wait_step, wait_reason;
  // GPU models (engine_models.cc): those it may be placed on now (a bit per model id: its
  // queue's, narrowed while the cycle tries them in order), its queue's, the queue's order (a
  // mask per entry, a family's several bits; empty: any); per quota dimension (quota_cells.h)
  // what it holds per cell (milli-GPU) and the cell of its reclaim.
  uint64_t models = ~uint64_t{0};
  uint64_t queue_models = ~uint64_t{0};
  std::vector<uint64_t> model_order;
  std::array<CellCharge, kDims> cell_charge;
  std::array<int, kDims> claim_cell{-1, -1};
};

// An identity inside a group that lists its users (GroupSpec::members).
struct MemberRt {
  int group = 0;
  std::string identity;
  int64_t weight_milli = 1000;
  Resources limit = UnlimitedResources();
  Resources usage;
  double decayed[4] = {0, 0, 0, 0};
  double fair_share = 0;
};

struct GroupRt {
  GroupSpec spec;
  int parent = -1;
  std::vector<int> children;  // set up once: the groups whose parent it is
  Resources usage;
  MilliGpu preemptible = 0;  // of usage.gpu_milli: the preemptible jobs' (external ones too)
  bool past_limit = false;   // restored past a lowered limit: its invariant waits until within
  double decayed[4] = {0, 0, 0, 0};
  double fair_share = 0;
  bool below = false;
  // Quotas per GPU model or family (GroupSpec::models) and per pool (GroupSpec::pools).
  std::array<DimQuota, kDims> dims;
};

bool Within(const Resources& usage, const Resources& charge, const Resources& cap, const char** w);
bool WithinReservation(const Resources& usage, const Resources& charge, const Resources& res);
std::string Amount(const char* which, int64_t v);
int64_t Component(const Resources& r, const std::string& w);
std::string T(int64_t t);

class Engine final : public QuotaEngine {
 public:
  Status Init(const PolicySpec& policy, const std::vector<NodeSpec>& nodes, EngineOptions o);

  Result<int> Submit(const JobSpec& job, int64_t now) override;
  Status Check(const JobSpec& job) const override;
  Result<Job> Build(const JobSpec& job) const;
  std::string NeverSchedulable(const Job& j) const;
  void Complete(int job, int64_t now) override;
  CycleStats RunCycle(int64_t now, const std::function<void()>& between = nullptr) override;
  int StopOverRuntime(int64_t now) override;
  void SetStartTime(int job, int64_t start) override;
  void SetRunStart(int job, int64_t start) override;
  Status RestoreHold(int job, const std::string& node, int device, MiB memory, int64_t held_since,
                     int64_t start, int64_t paused) override;
  int64_t NextRuntimeStop() const override;
  void SetIdle(int job, int64_t idle_since) override;
  int GiveBackIdle(int64_t now) override;
  int64_t NextIdleGiveBack() const override;
  std::vector<MemberView> members() const override;
  Status CheckInvariants() const override;
  const std::vector<std::string>& violations() const override { return violations_; }
  int job_count() const override { return static_cast<int>(jobs_.size()); }
  JobView job(int handle) const override;
  void HeldOf(int handle, std::vector<GrantView>* grants, std::optional<AllocationForm>* form,
              bool* borrowed) const override;
  const std::vector<int>& waiting() const override { return pending_; }
  void WaitOf(int handle, std::string* step, std::string* reason) const override {
    *step = jobs_[handle].wait_step;
    *reason = jobs_[handle].wait_reason;
  }
  JobState job_state(int handle) const override { return jobs_[handle].state; }
  std::vector<GroupView> groups() const override;
  const std::vector<Event>& events() const override { return events_; }
  std::vector<Event>& events_to_record() override { return events_; }
  void ClearEvents() override;
  std::vector<FairShareHistory> FairShare(int64_t* as_of) const override;
  void RestoreFairShare(const std::vector<FairShareHistory>& history, int64_t as_of,
                        int64_t now) override;
  int device_count() const override { return static_cast<int>(devs_.size()); }
  MilliGpu gpu_capacity() const override { return static_cast<MilliGpu>(devs_.size()) * kWholeGpu; }
  MiB gpu_memory_capacity() const override { return gpu_memory_capacity_; }
  Resources allocated() const override;
  std::vector<int> devices_used_by_class() const override;
  std::string device_layout(int node, int device) const override;

  Result<int> AddNode(const NodeSpec& node, int64_t now) override;
  void SetNodeDown(const std::string& node, bool down) override;
  void Evict(int job, int64_t now, const std::string& why) override;
  void SetDeviceClosed(const std::string& node, int index, bool closed) override;
  void SetDeviceIsolation(const std::string& node, int index, int rank) override;
  void SetDeviceMps(const std::string& node, int index, bool mps) override;
  void SetExternalCapacity(const std::string& pool, int64_t gpu_milli) override;
  void SetExternalAnswering(const std::string& pool, bool answering) override;
  void SetExternalPool(int job, const std::string& pool) override;
  void Cancel(int job, int64_t now, const std::string& why) override;
  void Requeue(int job, int64_t now, const std::string& why) override;
  void Stopped(int job, int64_t now) override;
  Status Restore(int job, AllocationForm form, const std::vector<GrantView>& grants, bool borrowed,
                 bool terminating, int64_t now) override;
  DeviceView device(const std::string& node, int index) const override;
  std::vector<Drain> Drains() const override;
  bool MayHaveDrains() const override { return active_plans_ > 0; }
  Status RestoreDrain(const Drain& drain, int64_t now) override;

 private:
  // --- helpers
  void Emit(EventKind k, const Job* j, std::string detail) {
    Event e;
    e.time = now_;
    e.kind = k;
    if (j) {
      e.job = j->id;
      e.handle = static_cast<int>(j - jobs_.data());  // every job that emits is one of jobs_
      e.identity = j->identity;
      e.group = groups_[j->group].spec.name;
    }
    e.detail = std::move(detail);
    events_.push_back(std::move(e));
  }
  std::string DevName(int d) const;  // "node/gpuN"
  bool PoolAllows(int pool, AllocationForm f) const {
    const auto& forms = policy_.pools[pool].forms;
    return std::find(forms.begin(), forms.end(), f) != forms.end();
  }
  bool InPools(const Job& j, int pool) const { return (j.pools >> pool) & 1u; }
  std::string PoolNames(const Job& j) const {
    std::string s;
    for (size_t p = 0; p < policy_.pools.size(); ++p) {
      if (InPools(j, static_cast<int>(p))) s += (s.empty() ? "" : ",") + policy_.pools[p].name;
    }
    return "[" + s + "]";
  }
  int64_t LostWork(const Job& v) const;
  int64_t ExpectedEnd(const Job& v) const;
  // May `j` use device d at all given reservations? Sets *backfill when it does so only
  // because it ends before the reserved start; *blocked when a reservation stopped it.
  bool Usable(const Dev& d, const Job& j, int self, bool* backfill, bool* blocked) const {
    if (d.plan.active || d.closed || nodes_[d.node].down) return false;
    if (avoiding_ && j.group == avoid_group_ &&
        std::find(avoid_devs_.begin(), avoid_devs_.end(), &d - devs_.data()) != avoid_devs_.end())
      return false;
    if (d.reserved_by < 0 || d.reserved_by == self) return true;
    if (!d.nominated && (Outranks(j, jobs_[d.reserved_by]) ||
                         options_.engine_break == EngineOptions::Break::kBackfillIgnoresHead))
      return true;
    if (!d.nominated && j.known_run() > 0 && now_ + j.known_run() <= d.reserved_until) {
      if (backfill) *backfill = true;
      return true;
    }
    if (blocked) *blocked = true;
    return false;
  }
  // j may use the cards kept for `head` (engine_place.cc).
  bool Outranks(const Job& j, const Job& head) const;
  // Inside its group's reservation (counting its claims in flight): a reclaim may make room.
  bool InsideReservation(const Job& j) const {
    const GroupRt& g = groups_[j.group];
    if (g.spec.reservation.gpu_milli <= 0) return false;
    Resources held = g.usage;
    if (static_cast<size_t>(j.group) < claimed_gpu_.size()) held.gpu_milli += claimed_gpu_[j.group];
    return WithinReservation(held, Resources{j.gpu_count * j.gpu_milli, 0, 0, 0},
                             g.spec.reservation) &&
           (!g.dims[kModelDim].on || !ReclaimCells(kModelDim, j).empty()) &&  // on a model and
           (!g.dims[kPoolDim].on || !ReclaimCells(kPoolDim, j).empty());      // a pool it accepts
  }
  // Runtime guards (engine_guards.cc). A running job younger than its min_runtime is no victim;
  // a waiting job that has waited less than its preemption_delay preempts nothing.
  bool PastMinRuntime(const Job& v) const;
  bool MayPreempt(const Job& j) const;       // never while held swapped out (it waits for its card)
  void WatchRuntime(int self);               // placed: its runtime stop, when it has one
  void MoveStart(int self, int64_t start);   // SetStartTime, SetRunStart: the guards move with it
  void Admitted(int self, bool guaranteed);  // running from now, charged: kAdmitted
  void ForgetRuntime(int self);              // no longer running (also forgets its idleness)
  // A share of a swapping queue: idleness swaps it out rather than stopping it.
  static bool IdleSwaps(const Job& j) { return j.form == AllocationForm::kShare && j.swap_oc > 0; }
  // Preemption by swapping (engine_guards.cc). The one choice between stopping a victim and
  // holding it swapped out: a running share of a swapping queue, on a device that stays a share
  // device, whose node's swap budget (NodeSpec::swap_mib, less its overcommit and what it holds
  // already) takes its memory.
  bool HoldsSwappedOut(const Job& v) const;
  // Preempt's other way: held swapped out (kSwappedOut naming the claimant, lost work 0),
  // pending for its device. False (nothing done) when HoldsSwappedOut says no.
  bool HoldSwappedOut(int v, int claimant, const std::string& why);
  // Placed again (Commit): a held job resumes where it was (kSwappedIn).
  void ResumedFromHold(int self);
  // A held job no longer held (cancelled, its node lost): its node's budget back.
  void DropHold(int self);
  // "held swapped out since T on node/gpuN; resumes there when capacity returns (...)".
  std::string HeldReason(const Job& j) const;
  // Held past its queue's swap_hold_limit: stopped (kStopped), by `now`.
  int StopOverHoldLimit();
  // The job's member entry (its group lists users), created on first sight; -1 otherwise.
  int MemberOf(int group, const std::string& identity);
  void AddMemberUsage(const Job& j, int sign);
  // Ends a running job for a runtime guard (max_runtime, idle_timeout's stop): kStopped with
  // `why`; done at once, or under await_stop terminating until Stopped().
  void GuardStop(int self, const std::string& why);
  // Placed now, it would take its group above its reservation; and a reclaim could take it back.
  bool WouldBorrow(const Job& j) const;
  bool WouldBeReclaimed(const Job& j, const std::vector<int>& order) const;
  // Kept for another job that `j` does not come before: preempting what is on it would free it
  // for that job, not for `j` (a reclaim once preempted a borrower every 30 s from a card kept
  // for a higher-priority gang, and the card went back and forth between MIG and whole).
  // Preemption frees no closed device for anyone.
  bool KeptFromMe(const Dev& d, const Job& j, int self) const {
    if (d.closed) return true;
    return d.reserved_by >= 0 && d.reserved_by != self &&
           (d.nominated || !Outranks(j, jobs_[d.reserved_by]));
  }
  bool NodeHas(const NodeRt& n, MilliCpu cpu, MiB mem) const {
    if (options_.engine_break == EngineOptions::Break::kIgnoreHostCapacity) return !n.down;
    return !n.down && n.cpu_free >= cpu && n.mem_free >= mem;
  }
  int BestMigProfile(const part::GpuModel* m, MilliGpu milli, MiB mem) const;
  Resources ChargeOf(const Job& j, const std::vector<Grant>& g) const;
  Status Admission(const Job& j, const Resources& charge, bool* guaranteed) const;
  void AddUsage(int group, const Resources& r, int sign);
  void ChargeGroups(const Job& j, int sign);
  bool WithinLimits(int g) const;  // its totals and its quotas per model and pool

  // --- placement
  struct Candidate {
    std::vector<Grant> grants;
    bool backfill = false;
    std::optional<sched::Placement> mirrored;  // already reserved in the mirror (the policy's pick)
    std::vector<std::pair<int, part::Instance>> create;  // MIG instances to create first
    int enable_mig_dev = -1;
    std::string amd_switch;  // with enable_amd_dev: switch an idle device's compute mode
    int amd_dev = -1;
  };
  // A pick that used a kept card only by j's reservation (Outranks) and borrows as charged.
  bool BorrowsKeptCard(const Job& j, const Candidate& c) const;
  bool FindWhole(Job& j, int self, Candidate* c, bool* blocked);
  bool FindGang(Job& j, int self, Candidate* c, bool* blocked);
  bool FindPartition(Job& j, int self, Candidate* c, bool* blocked);
  // FindPartition's visit of device di in one of its passes, and its MIG and AMD halves.
  bool PartitionAt(const Job& j, int self, size_t di, int pass, Candidate* c, bool* blocked);
  bool MigPartitionAt(const Job& j, size_t di, int pass, Candidate* c);
  bool AmdPartitionAt(const Job& j, size_t di, int pass, Candidate* c);
  // What an unsplit of `di` for job `for_job` changes (engine_cycle.cc); a device the engine split
  // that may go back to whole by itself (not an AMD card in a node-wide memory mode).
  std::vector<int> UnsplitScope(int di, int for_job) const;
  bool MayUnsplitAlone(const Dev& d) const;
  bool UnsplitInTurn(int h);
  bool returnable_dirty_ = true;       // returnable_nodes_ must be found again
  std::vector<int> returnable_nodes_;  // nodes with an idle card the engine split (UnsplitInTurn)
  std::optional<part::AmdPartitioning> AmdShapeFor(const Dev& d, const Job& j,
                                                   bool keep_memory_mode) const;
  // Whether a swapping share of `want` MiB on device `di` keeps its node's overcommit (the caps
  // past each device's memory, summed) within the node's swap budget.
  bool SwapRoom(int di, MiB want, MiB freed = 0) const;  // `freed`: its shares' memory leaving
  bool FindShare(Job& j, int self, Candidate* c, bool* blocked);
  bool FindCpuOnly(Job& j, int self, Candidate* c, bool* blocked);
  bool FindInForm(Job& j, int self, AllocationForm f, Candidate* c, bool* blocked);
  void Commit(int self, AllocationForm f, Candidate& c, bool guaranteed);
  void ApplyCandidateLayout(const Job& j, const Candidate& c);  // MIG on, AMD mode, new instances
  void TakeGrants(int self, AllocationForm f, const std::vector<Grant>& grants);
  std::string PlacedDetail(const Job& j, AllocationForm f, bool backfill) const;
  void Release(int self);
  // guaranteed_only: placed only where its charge stays inside its group's reservation.
  bool TryPlace(int self, std::string* step, std::string* reason, bool* backfilled,
                bool guaranteed_only = false);
  bool TakesHostFromHead(const Job& j, int self, const std::vector<Grant>& grants) const;
  void NoRoomReason(const Job& j, bool blocked, std::string* step, std::string* reason) const;

  // --- preemption, backfill, repartition
  bool Victim(const Job& claimant, int v, bool reclaim) const;
  bool TryPreempt(int self, bool reclaim);
  bool TryPreemptExternal(int self, bool reclaim);
  bool TryPreemptForLimit(int self);  // held at a limit (engine_preempt_limit.cc)
  // An external job's nominal GPU: its cards whole when it only takes whole cards.
  int64_t ExternalGpu(const Job& j) const;
  using Standing = std::tuple<int, int64_t, int64_t>;
  static Standing StandingOf(const Job& x) { return {x.priority, -x.submit, -x.seq}; }
  Standing TopStanding(const std::vector<int>& victims) const;  // the one furthest ahead
  struct PreemptOption {  // the cheapest set of victims found so far
    int64_t cost = kNever;
    Standing top{};  // its victim furthest ahead in the order: (priority, -submit, -seq)
    std::vector<int> victims, devs;
    AllocationForm form = AllocationForm::kWhole;  // the claimant's, in the place they leave
    int taken = 0;                                 // offers taken (each better than the last)
    void Consider(int64_t c, Standing s, std::vector<int> v, std::vector<int> d);
  };
  void Offer(PreemptOption* best, int64_t cost, std::vector<int> v, std::vector<int> d) const;
  void Occupants(const Dev& d, std::vector<int>* out) const;
  std::vector<int> Holders(int ni) const;  // the jobs on node ni's cards, each once
  // Every change of a job's state goes through here: it keeps preemptible_running_.
  void SetState(int handle, JobState s);
  void SearchPreemption(const Job& j, int self, bool reclaim, PreemptOption* best);
  void PreemptForWhole(const Job& j, int self, bool reclaim, PreemptOption* best);
  int64_t HostFreeAt(const NodeRt& node, const Job& j) const;
  int64_t DevFreeAt(const Dev& dev) const;
  bool InstanceAdmitted(const Job& j, const Dev& d) const;
  void RefreshHeadsOn(int ni);
  void PreemptForWholeEveryWay(const Job& j, const NodeRt& node,
                               const std::vector<std::pair<int64_t, int>>& costs,
                               PreemptOption* best);
  void PreemptForShare(const Job& j, int self, bool reclaim, PreemptOption* best);
  void PreemptForPartition(const Job& j, int self, bool reclaim, PreemptOption* best);
  void Preempt(int v, int claimant, const std::string& why, bool may_hold = true);
  void FinishTermination(int v);
  void Nominate(int d, int self, int64_t until);
  void ReserveForHead(int self);
  void KeepHeadsAfterClaim(int claimant);  // engine_preempt.cc
  bool TryRepartition(int self);
  struct DrainOption {  // the cheapest device (or node) to drain for a new layout
    int dev = -1;
    int64_t cost = kNever;
    std::vector<int> victims;
    Plan plan;
    Standing top{};  // as PreemptOption's
  };
  bool NodeHoldsAfter(const Job& j, const DrainOption& o) const;
  bool HostFitsAfter(const Job& j, int node, const std::vector<int>& victims) const;
  // Or with more victims on the node for j's CPU and memory (engine_repartition.cc).
  bool HostVictims(const Job& j, int node, bool reclaim, std::vector<int>* v, int64_t* cost) const;
  bool LendersKeepReservations(const std::vector<int>& victims) const;
  void ConsiderClearing(const Job& j, int di, bool reclaim, PreemptOption* best) const;
  // May v be drained for j? Lower-priority preemptible work, or borrowers' for j in reservation.
  bool DrainVictim(const Job& j, bool within_reservation, int v) const;
  // Work lost by draining `occupants` for j, or kNever when one of them may not be drained.
  int64_t DrainCost(const Job& j, bool within_reservation, const std::vector<int>& occupants) const;
  void MigDrainOption(const Job& j, int di, bool within_reservation, DrainOption* best);
  void AmdDrainOption(const Job& j, int di, bool within_reservation, DrainOption* best);
  // Draining device di (its victims lost at `cost`) for `plan`: kept when cheaper (ties: Offer).
  void OfferDrain(int di, int64_t cost, std::vector<int> v, Plan plan, DrainOption* best) const;
  bool ApplyPlan(int d);
  bool PlanReady(const Dev& d) const;  // what the plan changes is idle
  bool ApplyAmdPlan(int di);           // false (plan dropped) when the hive refuses the memory mode
  void ApplyMigPlan(Dev& d);
  void ApplyReadyPlans();
  void RebuildAmdSlots(Dev& d);
  // The placement core's view of the devices (engine_mirror.cc), where PolicySpec::placement
  // chooses whole and share grants: rebuilt when nodes change, kept in step by Commit and
  // Release, split devices blocked whole. The engine's state stays the truth: picks are checked.
  void RebuildMirror();
  void MirrorAddNode(int node);  // a node joined: into the mirror in place, else rebuilt later
  void MirrorAdopt(int self, const std::vector<Grant>& grants);
  void MirrorRelease(int self);
  void MirrorSyncSplit(int di);
  bool PolicyPick(Job& j, int self, AllocationForm f, Candidate* c);
  void DropPick(Candidate& c);
  // The cycle's phases (engine_cycle.cc).
  void EndGraces();          // 0. preemptions whose grace ended; layouts waiting for idle devices
  void UpdateFairShare();    //    decayed usage, fair-share keys, groups below their reservation
  std::vector<int> Order();  // 1. pending jobs in scheduling order
  // 2-4; returns who still waits. `between` runs before each job is considered.
  std::vector<int> AdmitInOrder(const std::vector<int>& order,
                                const std::function<void()>& between);
  void RepartitionForDemand();  // 5.
  void ReclaimFirst(int x);     // the guaranteed-first pass's reclaim
  void AvoidForClaim(int x, int h);
  bool PlaceAfterClaim(int h, bool claimed, bool guaranteed_only);
  Status AddNodeRt(const NodeSpec& ns, const std::string& field);
  // AddNodeRt's new device d of `ns`: the MIG layout or AMD mode the spec gives it.
  Status SplitNewDevice(Dev& d, const NodeSpec& ns, const std::string& field);
  // Restore's check of one recorded grant of j, added to c: the partitions to re-create go to
  // `layouts` (per device), the share memory to `share_add`.
  Status RestoreGrant(const Job& j, const GrantView& g, AllocationForm form, Candidate* c,
                      std::map<int, MiB>* share_add, std::map<int, part::Layout>* layouts) const;
  // RestoreGrant's partition slot: found in the device's layout, or to be created there.
  Status RestoreSlot(const GrantView& g, const std::string& where, Grant* gr, Candidate* c,
                     std::map<int, part::Layout>* layouts) const;
  int NodeByName(const std::string& name) const;
  // Sets `field` of device `index` of node `name` to `value` (no such device: nothing) and
  // forgets the memo (SetDeviceClosed, SetDeviceIsolation, SetDeviceMps).
  template <typename T>
  void SetDev(const std::string& name, int index, T Dev::*field, T value);
  void CommitExternal(int self, const Resources& charge, bool guaranteed);
  void EndHeld(int self);             // releases and settles claimants
  void StepCheck(const char* where);  // CheckInvariants, with check_invariants_each_step
  // CheckInvariants' parts: the jobs' grants against the devices (summed into the tally), then
  // the sums against the nodes, devices and groups.
  struct InvariantTally;
  Status CheckJobHoldings(InvariantTally* t) const;
  Status CheckNodeTotals(const InvariantTally& t) const;
  Status CheckDevices(const InvariantTally& t) const;
  Status CheckGroupUsage(const InvariantTally& t) const;
  void Reindex(int d);  // device d's membership in the placement indexes, after any change

  PolicySpec policy_;
  EngineOptions options_;
  std::vector<GroupRt> groups_;
  std::vector<NodeRt> nodes_;
  std::vector<Dev> devs_;
  std::vector<Job> jobs_;
  std::vector<Event> events_;
  std::vector<std::string> violations_;
  std::vector<int> pending_;  // handles, any order; rebuilt each cycle
  // Placement indexes, so that a search touches candidates rather than every device:
  std::set<std::pair<MiB, int>> shared_by_free_;  // devices with shares and room, by free memory
  std::set<int> free_slot_devs_;                  // devices with a free partition slot
  std::set<int> mig_open_devs_;                   // MIG devices with memory slices no instance uses
  using Shape = std::tuple<int, uint64_t, int, MilliGpu, MiB, uint64_t, int>;  // + the queue
  mutable std::map<Shape, std::string> feasible_cache_;  // Submit's never-schedulable verdicts
  // Shapes whose repartition search found nothing this cycle.
  std::set<std::tuple<int, uint64_t, MilliGpu, MiB>> repartition_failed_;
  int repartition_attempts_ = 0;
  int active_plans_ = 0;  // devices with a plan waiting (an upper bound between scans)
  mutable std::map<std::tuple<const part::GpuModel*, MilliGpu, MiB>, int> mig_profile_cache_;
  std::map<std::string, int> group_index_, queue_index_, profile_index_;
  std::map<std::string, int> node_index_;  // the live (latest) node of each name
  std::unique_ptr<sched::Scheduler> mirror_;
  bool mirror_dirty_ = true;
  std::map<int, std::vector<sched::Placement>> mirror_held_;  // job handle -> its placements
  std::map<int, sched::Placement> mirror_blocks_;             // device -> its block while split
  std::vector<sched::ModelMask> pool_models_;                 // pool -> mirror model ids
  MiB gpu_memory_capacity_ = 0;
  MilliGpu gpu_capacity_ = 0;  // every live node's cards, whole
  Status BorrowRoom(const Job& j, const Resources& charge, bool held = true) const;  // admission
  bool InChain(int g, int ancestor) const;
  MilliCpu cpu_capacity_ = 0;  // every node's, for the fair-share key
  MiB host_memory_capacity_ = 0;
  std::set<int> preemptible_running_;  // handles of preemptible jobs in kRunning, in handle order
  std::set<int> terminating_;          // handles in kTerminating, in handle order
  std::set<std::pair<int64_t, int>> runtime_stops_;  // (max_runtime stop time, handle), running
  std::set<std::pair<int64_t, int>> idle_checks_;    // (idle_timeout time, handle), idle, running
  std::set<int> idle_overdue_;  // idle past it, to requeue once another job waits (engine_guards)
  std::vector<MemberRt> members_;
  std::map<std::pair<int, std::string>, int> member_index_;
  // Per group (its own and its descendants'), as of this cycle: GPU of claims in flight (pending
  // jobs granted preempted capacity, waiting out the grace) and GPU already leaving (terminating
  // jobs). Reclaim counts both, so that it stops at the reservation on either side.
  std::vector<int64_t> claimed_gpu_, leaving_gpu_;
  void AddToChain(std::vector<int64_t>& per_group, int g, int64_t v);

  // --- Quota per GPU model and per pool (engine_models.cc, quota_cells.h; docs/scheduling.md).
  // Models by id (a bit in Job::models): catalog names as the catalog spells them, else a node's
  // own gpu.model. At most 64.
  std::vector<std::string> model_names_;
  std::map<std::string, int> model_index_;
  int ModelId(const std::string& name);                   // -1 past 64 models
  std::vector<uint64_t> queue_model_mask_;                // per queue: its models (all: any)
  std::vector<std::vector<uint64_t>> queue_model_order_;  // per queue: its entries in order
  std::array<bool, kDims> any_quota_{};                   // some group has quotas along it
  std::vector<sched::ModelMask> model_mirror_;            // model id -> the mirror's models of it
  // {dimension, group, cell} -> GPU reclaimed, in flight / leaving (terminating).
  std::map<std::array<int, 3>, int64_t> claimed_cells_, leaving_cells_;
  Status InitModels();  // and the pools' quotas
  int CellOf(int d, int dev) const {
    return d == kModelDim ? devs_[dev].model_id : devs_[dev].pool;
  }
  int CellCount(int d) const {
    return static_cast<int>(d == kModelDim ? model_names_.size() : policy_.pools.size());
  }
  std::string QuotaName(int d, const std::string& name) const {
    return d == kModelDim ? name : "pool " + name;
  }
  bool Serves(const Job& j, const Dev& d) const {
    return InPools(j, d.pool) && ((j.models >> d.model_id) & 1u);
  }
  bool ServesNode(const Job& j, const NodeRt& n) const {
    return InPools(j, n.pool) && (n.model_id < 0 || ((j.models >> n.model_id) & 1u));
  }
  void NewModel(int id);  // a family's quotas and queue entries take a model seen later
  bool ChainHasQuota(int d, int g) const;
  CellCharge ChargeCells(int d, const std::vector<Grant>& grants) const;
  void ChargeJobCells(Job& j, int sign);  // its cell_charge, into its groups' usage per cell
  // Per-cell limits of the group and its ancestors, and whether the placement stays guaranteed
  // (*guaranteed is only ever cleared): see GroupSpec::models and GroupSpec::pools.
  Status CellAdmission(const Job& j, const std::vector<Grant>& grants, bool* guaranteed) const;
  // `masks` less the cells where j's group or an ancestor is at a limit; empty masks dropped
  // (the first limit met into *reason).
  std::vector<uint64_t> CellsWithin(int d, const Job& j, std::vector<uint64_t> masks,
                                    std::string* reason) const;
  // The masks of models TryPlace tries in turn (the queue's order; models at a limit left out).
  std::vector<uint64_t> ModelsToTry(const Job& j, std::string* reason) const;
  // The masks a reclaim for j tries in turn along dimension d: cells where its group is below a
  // reservation there first, then the others where the job stays guaranteed.
  std::vector<uint64_t> ReclaimCells(int d, const Job& j) const;
  bool TryReclaim(int self);
  // Taking `taken` from group g keeps it at its reservations per model and per pool.
  bool KeepsReservations(int g, const CellTaken& taken) const;
  void AddTaken(const Job& x, CellTaken* taken) const;
  void AddClaim(const Job& j, int64_t gpu_milli);  // claimed_cells_ at j's claim_cell
  void AddLeaving(const Job& x, int sign);         // leaving_gpu_ and leaving_cells_
  void MirrorModelMasks(int only_node = -1);
  // TryPlace on the models in j.models (the original TryPlace; TryPlace tries them in turn).
  bool TryPlaceIn(int self, std::string* step, std::string* reason, bool* backfilled,
                  bool guaranteed_only);
  std::set<int> reserved_devs_;  // devices whose reserved_by may be set
  int64_t now_ = 0, last_cycle_ = -1, seq_ = 0;
  size_t cursor_node_ = 0, cursor_dev_share_ = 0, cursor_dev_part_ = 0;
  // Failure memo: in one cycle a shape (all the search depends on, its share kind too) with no
  // room finds none until something is released; fail_end: the earliest end that failed.
  struct MemoEntry {
    std::string step, reason;
    int64_t fail_end = 0;
  };
  std::map<std::tuple<int, uint64_t, int, MilliGpu, MiB, MilliCpu, MiB, uint64_t, int64_t>,
           MemoEntry>
      memo_;
  int heads_ = 0, preempt_searches_ = 0, repartitions_ = 0;
  // Free cards a claim will reclaim once avoid_group_ borrows, its jobs' last (AvoidForClaim).
  std::vector<int> avoid_devs_;
  int avoid_group_ = -1, avoid_for_ = -1;
  bool avoiding_ = false;
  std::vector<int> partition_demand_;
  // Jobs that found no room this cycle and would take a whole device or a share: idle devices
  // the engine split go back to whole for them (UnsplitForDemand).
  std::vector<int> whole_demand_;
  void UnsplitForDemand();
  void Unsplit(int di, const std::string& for_job);
  CycleStats stats_;
  int max_devs_per_node_ = 0;
  std::map<std::string, int64_t> ext_cap_;   // external pool -> GPU capacity (milli); or unbounded
  std::map<std::string, int64_t> ext_used_;  // external pool -> GPU charged by its held jobs
  std::set<std::string> ext_down_;  // external pools not answering: no new work (engine_dispatch)
  // A job of several pools: the one with the earliest predicted start, into j.ext_pool (true when
  // it starts now); otherwise false with the forecasts in `reason`.
  bool ChoosePool(Job& j, int64_t need, std::string* reason);
};

}  // namespace tessera::quota::internal
