// The quota engine's cycle. See engine.h for the steps; comments here say why.
#include "sched/quota/engine.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "model/quantity.h"
#include "partition/amd.h"
#include "partition/catalog.h"
#include "partition/mig.h"

namespace tessera::quota {
namespace {

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
  int slices = 0;     // MIG memory slices it occupies  // a destroyed instance stays as a tombstone so grant indices hold
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
  bool mig = false;    // MIG mode on
  bool split = false;  // has partition slots (MIG on, or AMD with more than one partition)
  std::string amd_pair;
  std::vector<Slot> slots;
  std::vector<int> shares;
  MiB share_mem = 0;
  MilliGpu share_weight = 0;
  int reserved_by = -1;  // a job this device is kept for
  bool nominated = false;  // kept strictly (reclaim, repartition); else backfill rules apply
  int64_t reserved_until = 0;
  Plan plan;
  MiB share_key = -1;  // key in shared_by_free_, -1 when not there
  uint64_t no_start = 0;  // MIG profiles (bit = catalog index) known to have no legal start now

  bool idle() const {
    if (whole >= 0 || !shares.empty()) return false;
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
};

struct Grant {
  int node = 0;
  int dev = -1;   // -1: CPU-only
  int slot = -1;  // -1: whole device or device share
  MiB memory = 0;
  MilliGpu compute = 0;
  MilliCpu cpu = 0;
  MiB host_memory = 0;
};

struct Job {
  std::string id, identity;
  int group = 0, queue = 0, profile = 0;
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
  JobState state = JobState::kPending;
  int64_t start = -1, grace_end = 0;
  AllocationForm form = AllocationForm::kWhole;
  std::vector<Grant> grants;
  Resources charge;
  bool borrowed = false;
  bool admitted_logged = false;
  int preemptions = 0;
  int awaiting = 0;      // victims still terminating for this job
  int claimant = -1;     // while terminating: the job waiting for this one's capacity
  bool nominated = false;  // some device is kept for this job
  std::string wait_step, wait_reason;
};

struct GroupRt {
  GroupSpec spec;
  int parent = -1;
  Resources usage;
  double decayed[4] = {0, 0, 0, 0};
  double fair_share = 0;
  bool below = false;
};

// Within `cap` on every component the charge uses.
bool Within(const Resources& usage, const Resources& charge, const Resources& cap,
            const char** which) {
  Resources after = usage + charge;
  if (charge.gpu_milli > 0 && after.gpu_milli > cap.gpu_milli) return *which = "gpu", false;
  if (charge.gpu_memory_mib > 0 && after.gpu_memory_mib > cap.gpu_memory_mib) {
    return *which = "gpu_memory", false;
  }
  if (charge.cpu_milli > 0 && after.cpu_milli > cap.cpu_milli) return *which = "cpu", false;
  if (charge.memory_mib > 0 && after.memory_mib > cap.memory_mib) return *which = "memory", false;
  return true;
}

bool WithinReservation(const Resources& usage, const Resources& charge, const Resources& res) {
  Resources after = usage + charge;
  bool named = false;
  auto check = [&](int64_t r, int64_t c, int64_t a) {
    if (r <= 0) return true;
    named = true;
    return c <= 0 || a <= r;
  };
  bool ok = check(res.gpu_milli, charge.gpu_milli, after.gpu_milli) &&
            check(res.gpu_memory_mib, charge.gpu_memory_mib, after.gpu_memory_mib) &&
            check(res.cpu_milli, charge.cpu_milli, after.cpu_milli) &&
            check(res.memory_mib, charge.memory_mib, after.memory_mib);
  return ok && named;
}

std::string Amount(const char* which, int64_t v) {
  std::string w = which;
  if (w == "gpu" || w == "cpu") return FormatMilli(v);
  return FormatMiB(v);
}
int64_t Component(const Resources& r, const std::string& w) {
  if (w == "gpu") return r.gpu_milli;
  if (w == "gpu_memory") return r.gpu_memory_mib;
  if (w == "cpu") return r.cpu_milli;
  return r.memory_mib;
}

std::string T(int64_t t) { return "t=" + std::to_string(t) + "s"; }

class Engine final : public QuotaEngine {
 public:
  Status Init(const PolicySpec& policy, const std::vector<NodeSpec>& nodes, EngineOptions o);

  Result<int> Submit(const JobSpec& job, int64_t now) override;
  void Complete(int job, int64_t now) override;
  CycleStats RunCycle(int64_t now) override;
  Status CheckInvariants() const override;
  const std::vector<std::string>& violations() const override { return violations_; }
  int job_count() const override { return static_cast<int>(jobs_.size()); }
  JobView job(int handle) const override;
  JobState job_state(int handle) const override { return jobs_[handle].state; }
  std::vector<GroupView> groups() const override;
  const std::vector<Event>& events() const override { return events_; }
  int device_count() const override { return static_cast<int>(devs_.size()); }
  MilliGpu gpu_capacity() const override { return static_cast<MilliGpu>(devs_.size()) * kWholeGpu; }
  MiB gpu_memory_capacity() const override { return gpu_memory_capacity_; }
  Resources allocated() const override;
  std::vector<int> devices_used_by_class() const override;
  std::string device_layout(int node, int device) const override;

 private:
  // --- helpers
  void Emit(EventKind k, const Job* j, std::string detail) {
    Event e;
    e.time = now_;
    e.kind = k;
    if (j) {
      e.job = j->id;
      e.identity = j->identity;
      e.group = groups_[j->group].spec.name;
    }
    e.detail = std::move(detail);
    events_.push_back(std::move(e));
  }
  std::string DevName(int d) const {
    return nodes_[devs_[d].node].name + "/gpu" + std::to_string(devs_[d].index);
  }
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
  int64_t LostWork(const Job& v) const {
    if (v.state != JobState::kRunning || v.start < 0) return 0;
    return (now_ - v.start) * std::max<int64_t>(v.charge.gpu_milli, 1);
  }
  int64_t ExpectedEnd(const Job& v) const {
    if (v.state == JobState::kTerminating) return v.grace_end;
    if (v.walltime <= 0) return kNever;
    return std::max(now_, v.start + v.walltime);
  }
  // May `j` use device d at all given reservations? Sets *backfill when it does so only
  // because it ends before the reserved start; *blocked when a reservation stopped it.
  bool Usable(const Dev& d, const Job& j, int self, bool* backfill, bool* blocked) const {
    if (d.plan.active) return false;
    if (d.reserved_by < 0 || d.reserved_by == self) return true;
    if (!d.nominated && j.walltime > 0 && now_ + j.walltime <= d.reserved_until) {
      if (backfill) *backfill = true;
      return true;
    }
    if (blocked) *blocked = true;
    return false;
  }
  bool NodeHas(const NodeRt& n, MilliCpu cpu, MiB mem) const {
    return n.cpu_free >= cpu && n.mem_free >= mem;
  }
  int BestMigProfile(const part::GpuModel* m, MilliGpu milli, MiB mem);
  Resources ChargeOf(const Job& j, const std::vector<Grant>& g) const;
  Status Admission(const Job& j, const Resources& charge, bool* guaranteed) const;
  void AddUsage(int group, const Resources& r, int sign);

  // --- placement
  struct Candidate {
    std::vector<Grant> grants;
    bool backfill = false;
    std::vector<std::pair<int, part::Instance>> create;  // MIG instances to create first
    int enable_mig_dev = -1;
    std::string amd_switch;  // with enable_amd_dev: switch an idle device's compute mode
    int amd_dev = -1;
  };
  bool FindWhole(Job& j, int self, Candidate* c, bool* blocked);
  bool FindGang(Job& j, int self, Candidate* c, bool* blocked);
  bool FindPartition(Job& j, int self, Candidate* c, bool* blocked);
  bool FindShare(Job& j, int self, Candidate* c, bool* blocked);
  bool FindCpuOnly(Job& j, Candidate* c);
  void Commit(int self, AllocationForm f, Candidate& c, bool guaranteed);
  void Release(int self);
  bool TryPlace(int self, std::string* step, std::string* reason, bool* backfilled);

  // --- preemption, backfill, repartition
  bool Victim(const Job& claimant, int v, bool reclaim) const;
  bool TryPreempt(int self, bool reclaim);
  void Preempt(int v, int claimant, const std::string& why);
  void FinishTermination(int v);
  void Nominate(int d, int self, int64_t until);
  void ReserveForHead(int self);
  bool TryRepartition(int self);
  bool ApplyPlan(int d);
  void ApplyReadyPlans();
  void RebuildAmdSlots(Dev& d);

  void StepCheck(const char* where) {
    if (!options_.check_invariants_each_step) return;
    Status s = CheckInvariants();
    if (!s.ok()) violations_.push_back(T(now_) + " after " + where + ": " + s.message());
  }
  // Recomputes device d's membership in the placement indexes. Call after any change to it.
  void Reindex(int d);

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
  std::set<int> free_slot_devs_;  // devices with a free partition slot
  std::set<int> mig_open_devs_;   // MIG devices with memory slices no instance uses
  // Submit's never-schedulable verdicts, by request shape.
  std::map<std::tuple<int, uint64_t, int, MilliGpu, MiB, int>, std::string> feasible_cache_;
  // Shapes whose repartition search found nothing this cycle.
  std::set<std::tuple<int, uint64_t, MilliGpu, MiB>> repartition_failed_;
  int repartition_attempts_ = 0;
  int active_plans_ = 0;  // devices with a plan waiting (an upper bound between scans)
  std::map<std::tuple<const part::GpuModel*, MilliGpu, MiB>, int> mig_profile_cache_;
  std::map<std::string, int> group_index_, queue_index_, profile_index_;
  MiB gpu_memory_capacity_ = 0;
  int64_t now_ = 0;
  int64_t last_cycle_ = -1;
  int64_t seq_ = 0;
  size_t cursor_node_ = 0, cursor_dev_share_ = 0, cursor_dev_part_ = 0;
  // Failure memo: within one cycle a shape that found no room finds none later either, until
  // something is released. Key: everything the search depends on.
  // The value keeps the earliest end time that failed: a job of the same shape ending no
  // earlier fails too (backfill only admits jobs that end before a reserved start).
  struct MemoEntry {
    std::string step, reason;
    int64_t fail_end = 0;
  };
  std::map<std::tuple<int, uint64_t, int, MilliGpu, MiB, MilliCpu, MiB>, MemoEntry> memo_;
  int heads_ = 0;
  int preempt_searches_ = 0;
  int repartitions_ = 0;
  std::vector<int> partition_demand_;
  CycleStats stats_;
  int max_devs_per_node_ = 0;
};

// ------------------------------------------------------------------------------------------
// Setup

Status Engine::Init(const PolicySpec& policy, const std::vector<NodeSpec>& nodes,
                    EngineOptions o) {
  policy_ = policy;
  options_ = o;
  // Pools: declared ones; with none declared, every node pool offers every form.
  if (policy_.pools.empty()) {
    std::set<std::string> names;
    for (const NodeSpec& n : nodes) names.insert(n.pool.empty() ? "default" : n.pool);
    for (const std::string& n : names) {
      policy_.pools.push_back(
          {n, {AllocationForm::kWhole, AllocationForm::kPartition, AllocationForm::kShare}});
    }
  }
  if (policy_.pools.size() > 64) return Status::InvalidArgument("pools: at most 64");
  Status v = Validate(policy_);
  if (!v.ok()) return v;
  for (size_t i = 0; i < policy_.groups.size(); ++i) {
    group_index_[policy_.groups[i].name] = static_cast<int>(i);
  }
  for (size_t i = 0; i < policy_.groups.size(); ++i) {
    GroupRt g;
    g.spec = policy_.groups[i];
    g.parent = g.spec.parent.empty() ? -1 : group_index_[g.spec.parent];
    groups_.push_back(g);
  }
  for (size_t i = 0; i < policy_.queues.size(); ++i) {
    queue_index_[policy_.queues[i].name] = static_cast<int>(i);
  }
  for (size_t i = 0; i < policy_.profiles.size(); ++i) {
    profile_index_[policy_.profiles[i].name] = static_cast<int>(i);
  }
  const part::Catalog& catalog = part::Catalog::BuiltIn();
  std::set<std::string> node_names;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeSpec& ns = nodes[i];
    std::string field = "nodes[" + (ns.name.empty() ? std::to_string(i) : ns.name) + "]";
    if (ns.name.empty()) return Status::InvalidArgument(field + ".name is empty");
    if (!node_names.insert(ns.name).second) {
      return Status::InvalidArgument(field + ".name is used twice");
    }
    std::string pool = ns.pool.empty() ? "default" : ns.pool;
    int pool_id = -1;
    for (size_t p = 0; p < policy_.pools.size(); ++p) {
      if (policy_.pools[p].name == pool) pool_id = static_cast<int>(p);
    }
    if (pool_id < 0) return Status::InvalidArgument(field + ".pool '" + pool + "' is not a pool");
    if (ns.cpu_milli < 0 || ns.memory_mib < 0 || ns.gpu_count < 0) {
      return Status::InvalidArgument(field + " has a negative amount");
    }
    NodeRt n;
    n.name = ns.name;
    n.pool = pool_id;
    n.cpu_total = n.cpu_free = ns.cpu_milli;
    n.mem_total = n.mem_free = ns.memory_mib;
    const part::GpuModel* model = ns.gpu_model.empty() ? nullptr : catalog.Find(ns.gpu_model);
    MiB dev_mem = model ? model->memory_mib : ns.gpu_memory_mib;
    if (ns.gpu_memory_mib > 0) dev_mem = ns.gpu_memory_mib;
    if (ns.gpu_count > 0 && dev_mem <= 0) {
      return Status::InvalidArgument(field + ".gpu.model '" + ns.gpu_model +
                                     "' is not in the catalog; give gpu.memory");
    }
    if (!ns.mig_layout.empty() && !(model && model->is_mig())) {
      return Status::InvalidArgument(field + ".mig: model '" + ns.gpu_model +
                                     "' is not a MIG model");
    }
    if (!ns.amd_mode.empty() && !(model && model->is_amd())) {
      return Status::InvalidArgument(field + ".amd_mode: model '" + ns.gpu_model +
                                     "' is not an AMD model");
    }
    int node_id = static_cast<int>(nodes_.size());
    for (int k = 0; k < ns.gpu_count; ++k) {
      Dev d;
      d.node = node_id;
      d.index = k;
      d.pool = pool_id;
      d.model = model;
      d.memory = dev_mem;
      if (!ns.mig_layout.empty()) {
        auto plan = part::Plan(*model, ns.mig_layout);
        if (!plan.ok()) return Status::InvalidArgument(field + ".mig: " + plan.status().message());
        d.mig = d.split = true;
        for (const part::Instance& in : plan->layout.instances) {
          const part::MigProfile* p = model->mig.FindProfile(in.profile);
          d.slots.push_back({in.ToString(), p->name, in.start, p->memory_mib,
                             p->compute_slices * kWholeGpu / model->mig.compute_slices, -1, true,
                             p->memory_slices});
        }
      }
      if (d.amd_capable()) {
        std::string pair = ns.amd_mode.empty() ? "SPX+NPS1" : ns.amd_mode;
        auto parsed = part::ParsePair(*model, pair);
        if (!parsed.ok()) return Status::InvalidArgument(field + ".amd_mode: " + parsed.status().message());
        auto shape = part::Partition(*model, *parsed);
        if (!shape.ok()) return Status::InvalidArgument(field + ".amd_mode: " + shape.status().message());
        d.amd_pair = parsed->ToString();
        RebuildAmdSlots(d);
      }
      gpu_memory_capacity_ += d.memory;
      n.devs.push_back(static_cast<int>(devs_.size()));
      devs_.push_back(std::move(d));
    }
    max_devs_per_node_ = std::max(max_devs_per_node_, ns.gpu_count);
    nodes_.push_back(std::move(n));
  }
  for (size_t d = 0; d < devs_.size(); ++d) Reindex(static_cast<int>(d));
  return Status::Ok();
}

void Engine::RebuildAmdSlots(Dev& d) {
  d.slots.clear();
  d.split = false;
  auto pair = part::ParsePair(*d.model, d.amd_pair);
  auto shape = part::Partition(*d.model, *pair);
  if (!shape.ok() || shape->partitions <= 1) return;
  d.split = true;
  for (int i = 0; i < shape->partitions; ++i) {
    d.slots.push_back({pair->compute + "#" + std::to_string(i), pair->compute, i,
                       shape->memory_per_partition_mib, kWholeGpu / shape->partitions, -1});
  }
}

int Engine::BestMigProfile(const part::GpuModel* m, MilliGpu milli, MiB mem) {
  auto key = std::make_tuple(m, milli, mem);
  auto it = mig_profile_cache_.find(key);
  if (it != mig_profile_cache_.end()) return it->second;
  int best = -1;
  const auto& ps = m->mig.profiles;
  for (size_t i = 0; i < ps.size(); ++i) {
    const part::MigProfile& p = ps[i];
    if (p.media_extension) continue;
    MilliGpu compute = p.compute_slices * kWholeGpu / m->mig.compute_slices;
    if (compute < milli || p.memory_mib < mem) continue;
    if (best < 0 ||
        std::tie(p.memory_slices, p.compute_slices, p.memory_mib) <
            std::tie(ps[best].memory_slices, ps[best].compute_slices, ps[best].memory_mib)) {
      best = static_cast<int>(i);
    }
  }
  mig_profile_cache_[key] = best;
  return best;
}

// ------------------------------------------------------------------------------------------
// Submission, completion

Result<int> Engine::Submit(const JobSpec& spec, int64_t now) {
  now_ = std::max(now_, now);
  Job j;
  j.id = spec.id;
  j.identity = spec.identity;
  auto reject = [&](const std::string& why) -> Result<int> {
    Event e;
    e.time = now_;
    e.kind = EventKind::kRejected;
    e.job = spec.id;
    e.identity = spec.identity;
    e.group = spec.group;
    e.detail = why;
    events_.push_back(e);
    return Status::InvalidArgument("job '" + spec.id + "': " + why);
  };
  if (spec.identity.empty()) return reject("no identity");
  auto q = queue_index_.find(spec.queue);
  if (q == queue_index_.end()) return reject("queue '" + spec.queue + "' does not exist");
  const QueueSpec& queue = policy_.queues[q->second];
  std::string group = spec.group.empty() ? queue.groups.front() : spec.group;
  if (std::find(queue.groups.begin(), queue.groups.end(), group) == queue.groups.end()) {
    return reject("group '" + group + "' may not use queue '" + queue.name + "'");
  }
  j.queue = q->second;
  j.group = group_index_[group];
  j.profile = profile_index_[queue.profile];
  const ProfileSpec& pr = policy_.profiles[j.profile];
  j.cls = spec.cls.value_or(queue.default_class);
  j.gpu_count = spec.gpu_count.value_or(pr.gpu_count);
  j.gpu_milli = spec.gpu_milli.value_or(pr.gpu_milli);
  j.gpu_mem = spec.gpu_memory_mib.value_or(pr.gpu_memory_mib);
  j.cpu = spec.cpu_milli.value_or(pr.cpu_milli);
  j.mem = spec.memory_mib.value_or(pr.memory_mib);
  if (j.gpu_count < 0 || j.gpu_milli < 0 || j.gpu_milli > kWholeGpu || j.gpu_mem < 0 ||
      j.cpu < 0 || j.mem < 0) {
    return reject("request has an amount out of range");
  }
  if (j.gpu_count > 1 && j.gpu_milli != kWholeGpu) {
    return reject("a fraction of a GPU needs gpu_count 1");
  }
  if (j.gpu_count > 0 && j.gpu_milli == 0) j.gpu_milli = kWholeGpu;
  auto forms = FormsFor(policy_, pr, j.cls, spec.form);
  if (!forms.ok()) return reject(forms.status().message());
  j.forms = *forms;
  if (j.gpu_count > 1) {
    // Several devices are whole devices (or several partitions/shares are not offered).
    j.forms.erase(std::remove_if(j.forms.begin(), j.forms.end(),
                                 [](AllocationForm f) { return f != AllocationForm::kWhole; }),
                  j.forms.end());
    if (j.forms.empty()) return reject("several devices are granted only as whole devices");
  }
  for (size_t p = 0; p < policy_.pools.size(); ++p) {
    bool listed = pr.pools.empty() || std::find(pr.pools.begin(), pr.pools.end(),
                                                policy_.pools[p].name) != pr.pools.end();
    if (listed) j.pools |= uint64_t{1} << p;
  }
  // Never schedulable: no device in the pools could hold it in any allowed form, even empty.
  uint64_t form_bits = 0;
  for (AllocationForm f : j.forms) form_bits |= uint64_t{1} << static_cast<int>(f);
  auto fkey = std::make_tuple(j.gpu_count, j.pools, static_cast<int>(form_bits), j.gpu_milli,
                              j.gpu_mem, 0);
  auto cached = feasible_cache_.find(fkey);
  if (cached != feasible_cache_.end()) {
    if (!cached->second.empty()) return reject(cached->second);
  } else if (j.gpu_count > 0) {
    std::string& verdict = feasible_cache_[fkey];
    bool any = false;
    int devices_in_pools = 0;
    for (const Dev& d : devs_) {
      if (!InPools(j, d.pool)) continue;
      ++devices_in_pools;
      for (AllocationForm f : j.forms) {
        if (!PoolAllows(d.pool, f)) continue;
        if (f == AllocationForm::kWhole && d.memory >= j.gpu_mem) any = true;
        if (f == AllocationForm::kShare && d.memory >= j.gpu_mem) any = true;
        if (f == AllocationForm::kPartition) {
          if (d.mig_capable() && BestMigProfile(d.model, j.gpu_milli, j.gpu_mem) >= 0) any = true;
          if (d.amd_capable()) {
            auto plan = part::PlanAmd(*d.model, {std::max<MiB>(j.gpu_mem, 1)});
            if (plan.ok()) any = true;
          }
        }
      }
    }
    if (!any) {
      verdict = "never schedulable: no device in pools " + PoolNames(j) + " can hold " +
                std::to_string(j.gpu_count) + " x (gpu " + FormatMilli(j.gpu_milli) + ", " +
                FormatMiB(j.gpu_mem) + ") in any allowed form";
    } else if (j.gpu_count > devices_in_pools) {
      verdict = "never schedulable: wants " + std::to_string(j.gpu_count) + " devices, pools " +
                PoolNames(j) + " have " + std::to_string(devices_in_pools);
    }
    if (!verdict.empty()) return reject(verdict);
  }
  j.priority = queue.priority;
  j.preemptible = queue.preemptible;
  j.submit = now_;
  j.walltime = spec.walltime_s;
  j.seq = seq_++;
  j.wait_step = "Queued";
  j.wait_reason = "waiting for the next scheduling cycle";
  int handle = static_cast<int>(jobs_.size());
  jobs_.push_back(std::move(j));
  pending_.push_back(handle);
  Emit(EventKind::kSubmitted, &jobs_[handle],
       std::string("queue ") + queue.name + ", class " + WorkloadClassName(jobs_[handle].cls));
  return handle;
}

void Engine::Complete(int handle, int64_t now) {
  now_ = std::max(now_, now);
  Job& j = jobs_[handle];
  if (j.state != JobState::kRunning && j.state != JobState::kTerminating) return;
  int claimant = j.claimant;
  Release(handle);
  j.state = JobState::kDone;
  if (claimant >= 0 && jobs_[claimant].awaiting > 0) --jobs_[claimant].awaiting;
  j.claimant = -1;
  Emit(EventKind::kCompleted, &j, "finished");
  if (active_plans_ > 0) ApplyReadyPlans();
  StepCheck("completion");
}

// ------------------------------------------------------------------------------------------
// Quota

void Engine::AddUsage(int g, const Resources& r, int sign) {
  for (; g >= 0; g = groups_[g].parent) {
    if (sign > 0) {
      groups_[g].usage += r;
    } else {
      groups_[g].usage -= r;
    }
  }
}

Status Engine::Admission(const Job& j, const Resources& charge, bool* guaranteed) const {
  const char* which = nullptr;
  for (int g = j.group; g >= 0; g = groups_[g].parent) {
    const GroupRt& gr = groups_[g];
    if (!Within(gr.usage, charge, gr.spec.limit, &which)) {
      std::string w = which;
      return Status::ResourceExhausted(
          "group " + gr.spec.name + " at its " + w + " limit: holds " +
          Amount(which, Component(gr.usage, w)) + ", job needs " +
          Amount(which, Component(charge, w)) + ", limit " +
          Amount(which, Component(gr.spec.limit, w)));
    }
  }
  // The reservation guarantees the components it names (> 0); one naming none guarantees
  // nothing. A GPU-only reservation thus covers a job's GPU compute whatever its CPU needs.
  const GroupRt& own = groups_[j.group];
  *guaranteed = WithinReservation(own.usage, charge, own.spec.reservation);
  return Status::Ok();
}

Resources Engine::ChargeOf(const Job& j, const std::vector<Grant>& gs) const {
  Resources r;
  for (const Grant& g : gs) {
    r.gpu_milli += g.compute;
    r.gpu_memory_mib += g.memory;
    r.cpu_milli += g.cpu;
    r.memory_mib += g.host_memory;
  }
  (void)j;
  return r;
}

// ------------------------------------------------------------------------------------------
// Placement

bool Engine::FindWhole(Job& j, int self, Candidate* c, bool* blocked) {
  if (j.gpu_count > max_devs_per_node_) return FindGang(j, self, c, blocked);
  size_t n = nodes_.size();
  for (size_t step = 0; step < n; ++step) {
    size_t ni = (cursor_node_ + step) % n;
    const NodeRt& node = nodes_[ni];
    if (!InPools(j, node.pool) || !PoolAllows(node.pool, AllocationForm::kWhole)) continue;
    if (static_cast<int>(node.devs.size()) < j.gpu_count) continue;
    if (!NodeHas(node, j.cpu * j.gpu_count, j.mem * j.gpu_count)) continue;
    std::vector<Grant> picked;
    bool backfill = false;
    for (int d : node.devs) {
      const Dev& dev = devs_[d];
      if (dev.split || dev.whole >= 0 || !dev.shares.empty() || dev.memory < j.gpu_mem) continue;
      bool bf = false;
      if (!Usable(dev, j, self, &bf, blocked)) continue;
      backfill = backfill || bf;
      picked.push_back({static_cast<int>(ni), d, -1, dev.memory, kWholeGpu, j.cpu, j.mem});
      if (static_cast<int>(picked.size()) == j.gpu_count) break;
    }
    if (static_cast<int>(picked.size()) == j.gpu_count) {
      c->grants = std::move(picked);
      c->backfill = backfill;
      cursor_node_ = ni;
      return true;
    }
  }
  return false;
}

bool Engine::FindGang(Job& j, int self, Candidate* c, bool* blocked) {
  // Devices across several nodes, all or nothing: fullest-free nodes first, so the gang
  // spans as few nodes as it can.
  std::vector<std::pair<int, std::vector<Grant>>> options;
  for (size_t ni = 0; ni < nodes_.size(); ++ni) {
    const NodeRt& node = nodes_[ni];
    if (!InPools(j, node.pool) || !PoolAllows(node.pool, AllocationForm::kWhole)) continue;
    std::vector<Grant> free;
    MilliCpu cpu = 0;
    MiB mem = 0;
    for (int d : node.devs) {
      const Dev& dev = devs_[d];
      if (dev.split || dev.whole >= 0 || !dev.shares.empty() || dev.memory < j.gpu_mem) continue;
      if (!Usable(dev, j, self, nullptr, blocked)) continue;
      if (!NodeHas(node, cpu + j.cpu, mem + j.mem)) break;
      cpu += j.cpu;
      mem += j.mem;
      free.push_back({static_cast<int>(ni), d, -1, dev.memory, kWholeGpu, j.cpu, j.mem});
    }
    if (!free.empty()) options.emplace_back(static_cast<int>(free.size()), std::move(free));
  }
  std::stable_sort(options.begin(), options.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<Grant> picked;
  for (auto& [count, grants] : options) {
    for (const Grant& g : grants) {
      if (static_cast<int>(picked.size()) == j.gpu_count) break;
      picked.push_back(g);
    }
    (void)count;
    if (static_cast<int>(picked.size()) == j.gpu_count) break;
  }
  if (static_cast<int>(picked.size()) < j.gpu_count) return false;
  c->grants = std::move(picked);
  return true;
}

bool Engine::FindPartition(Job& j, int self, Candidate* c, bool* blocked) {
  size_t n = devs_.size();
  if (n == 0) return false;
  // Pass 0: a free slot of the right size. Pass 1: a new MIG instance on free slices.
  // Pass 2: an idle, unsplit device switched into partitions (nothing is lost: it is idle).
  // Passes 0 and 1 walk their indexes; pass 2 is next fit over all devices.
  auto visit = [&](size_t di, int pass) -> bool {
      const Dev& d = devs_[di];
      if (!InPools(j, d.pool) || !PoolAllows(d.pool, AllocationForm::kPartition)) return false;
      if (!d.mig_capable() && !d.amd_capable()) return false;
      const NodeRt& node = nodes_[d.node];
      if (!NodeHas(node, j.cpu, j.mem)) return false;
      bool bf = false;
      if (!Usable(d, j, self, &bf, blocked)) return false;
      int di_int = static_cast<int>(di);
      if (d.mig_capable()) {
        int pi = BestMigProfile(d.model, j.gpu_milli, j.gpu_mem);
        if (pi < 0) return false;
        const part::MigProfile& p = d.model->mig.profiles[pi];
        if (pass == 0 && d.mig) {
          for (size_t s = 0; s < d.slots.size(); ++s) {
            if (d.slots[s].alive && d.slots[s].holder < 0 &&
                d.slots[s].profile == p.name) {
              c->grants = {{d.node, di_int, static_cast<int>(s), d.slots[s].memory,
                            d.slots[s].compute, j.cpu, j.mem}};
              c->backfill = bf;
              cursor_dev_part_ = di;
              return true;
            }
          }
        } else if (pass == 1 && d.mig && !((d.no_start >> pi) & 1u)) {
          part::Layout layout;
          for (const Slot& s : d.slots) {
            if (s.alive) layout.instances.push_back({s.profile, s.start});
          }
          auto starts = part::LegalStarts(*d.model, layout, p.name);
          if (starts.ok() && !starts->empty()) {
            c->create = {{di_int, part::Instance{p.name, starts->front()}}};
            c->grants = {{d.node, di_int, static_cast<int>(d.slots.size()), p.memory_mib,
                          p.compute_slices * kWholeGpu / d.model->mig.compute_slices, j.cpu,
                          j.mem}};
            c->backfill = bf;
            cursor_dev_part_ = di;
            return true;
          }
          if (pi < 64) devs_[di].no_start |= uint64_t{1} << pi;
        } else if (pass == 2 && !d.split && d.idle()) {
          c->enable_mig_dev = di_int;
          c->create = {{di_int, part::Instance{p.name, p.starts.front()}}};
          c->grants = {{d.node, di_int, 0, p.memory_mib,
                        p.compute_slices * kWholeGpu / d.model->mig.compute_slices, j.cpu,
                        j.mem}};
          c->backfill = bf;
          return true;
        }
      } else {  // AMD
        if (pass == 0 && d.split) {
          for (size_t s = 0; s < d.slots.size(); ++s) {
            const Slot& sl = d.slots[s];
            if (sl.holder < 0 && sl.memory >= j.gpu_mem && sl.compute >= j.gpu_milli) {
              c->grants = {{d.node, di_int, static_cast<int>(s), sl.memory, sl.compute, j.cpu,
                            j.mem}};
              c->backfill = bf;
              cursor_dev_part_ = di;
              return true;
            }
          }
        } else if (pass == 2 && !d.split && d.idle()) {
          // A compute-mode change on an idle device keeps the node's memory mode.
          auto cur = part::ParsePair(*d.model, d.amd_pair);
          std::optional<part::AmdPartitioning> best;
          for (const part::AmdPartitioning& a : part::AllPartitionings(*d.model)) {
            if (a.pair.memory != cur->memory || a.partitions <= 1) return false;
            if (a.memory_per_partition_mib < j.gpu_mem) return false;
            if (kWholeGpu / a.partitions < j.gpu_milli) return false;
            if (!best || a.memory_per_partition_mib < best->memory_per_partition_mib) best = a;
          }
          if (!best) return false;
          c->amd_dev = di_int;
          c->amd_switch = best->pair.ToString();
          c->grants = {{d.node, di_int, 0, best->memory_per_partition_mib,
                        kWholeGpu / best->partitions, j.cpu, j.mem}};
          c->backfill = bf;
          return true;
        }
      }
    return false;
  };
  for (int d : free_slot_devs_) {
    if (visit(static_cast<size_t>(d), 0)) return true;
  }
  for (int d : mig_open_devs_) {
    if (visit(static_cast<size_t>(d), 1)) return true;
  }
  for (size_t step = 0; step < n; ++step) {
    size_t di = (cursor_dev_part_ + step) % n;
    if (visit(di, 2)) {
      cursor_dev_part_ = di;
      return true;
    }
  }
  return false;
}

bool Engine::FindShare(Job& j, int self, Candidate* c, bool* blocked) {
  MiB cap = j.gpu_mem;
  auto fits = [&](int di, bool* bf) {
    const Dev& d = devs_[di];
    if (!InPools(j, d.pool) || !PoolAllows(d.pool, AllocationForm::kShare)) return false;
    if (d.split || d.whole >= 0) return false;
    MiB want = cap > 0 ? cap : d.memory * j.gpu_milli / kWholeGpu;
    if (d.share_mem + want > d.memory || d.share_weight + j.gpu_milli > kWholeGpu) return false;
    if (!NodeHas(nodes_[d.node], j.cpu, j.mem)) return false;
    return Usable(d, j, self, bf, blocked);
  };
  auto take = [&](int di, bool bf) {
    const Dev& d = devs_[di];
    MiB want = cap > 0 ? cap : d.memory * j.gpu_milli / kWholeGpu;
    c->grants = {{d.node, di, -1, want, j.gpu_milli, j.cpu, j.mem}};
    c->backfill = bf;
  };
  // Best fit among devices that already carry shares: the least free memory that holds it.
  int probed = 0;
  for (auto it = shared_by_free_.lower_bound({cap, -1});
       it != shared_by_free_.end() && probed < kShareProbe; ++it, ++probed) {
    bool bf = false;
    if (fits(it->second, &bf)) {
      take(it->second, bf);
      return true;
    }
  }
  // Then an empty device, next fit.
  size_t n = devs_.size();
  for (size_t step = 0; step < n; ++step) {
    size_t di = (cursor_dev_share_ + step) % n;
    const Dev& d = devs_[di];
    if (!d.shares.empty() || !d.idle()) continue;
    bool bf = false;
    if (fits(static_cast<int>(di), &bf)) {
      take(static_cast<int>(di), bf);
      cursor_dev_share_ = di;
      return true;
    }
  }
  // A device with shares beyond the probe window (rare: many near-equal free sizes).
  if (probed >= kShareProbe) {
    for (auto it = shared_by_free_.lower_bound({cap, -1}); it != shared_by_free_.end(); ++it) {
      bool bf = false;
      if (fits(it->second, &bf)) {
        take(it->second, bf);
        return true;
      }
    }
  }
  return false;
}

bool Engine::FindCpuOnly(Job& j, Candidate* c) {
  for (size_t ni = 0; ni < nodes_.size(); ++ni) {
    const NodeRt& node = nodes_[ni];
    if (!InPools(j, node.pool) || !NodeHas(node, j.cpu, j.mem)) continue;
    c->grants = {{static_cast<int>(ni), -1, -1, 0, 0, j.cpu, j.mem}};
    return true;
  }
  return false;
}

void Engine::Reindex(int di) {
  Dev& d = devs_[di];
  if (d.share_key >= 0) shared_by_free_.erase({d.share_key, di});
  d.share_key = -1;
  if (!d.shares.empty() && d.share_weight < kWholeGpu && d.share_mem < d.memory) {
    d.share_key = d.memory - d.share_mem;
    shared_by_free_.insert({d.share_key, di});
  }
  bool free_slot = false;
  int used_slices = 0, instances = 0;
  MilliGpu used_compute = 0;
  for (const Slot& sl : d.slots) {
    if (!sl.alive) continue;
    free_slot = free_slot || sl.holder < 0;
    used_slices += sl.slices;
    used_compute += sl.compute;
    ++instances;
  }
  d.no_start = 0;
  if (free_slot) {
    free_slot_devs_.insert(di);
  } else {
    free_slot_devs_.erase(di);
  }
  if (d.mig && used_slices < d.model->mig.memory_slices &&
      instances < d.model->mig.max_gpu_instances &&
      used_compute + kWholeGpu / d.model->mig.compute_slices <= kWholeGpu) {
    mig_open_devs_.insert(di);
  } else {
    mig_open_devs_.erase(di);
  }
}

void Engine::Commit(int self, AllocationForm f, Candidate& c, bool guaranteed) {
  Job& j = jobs_[self];
  if (c.enable_mig_dev >= 0) {
    Dev& d = devs_[c.enable_mig_dev];
    d.mig = d.split = true;
    Emit(EventKind::kRepartitioned, nullptr,
         DevName(c.enable_mig_dev) + ": MIG enabled on an idle device for " + j.id +
             " (nothing lost)");
  }
  if (c.amd_dev >= 0) {
    Dev& d = devs_[c.amd_dev];
    std::string before = d.amd_pair;
    d.amd_pair = c.amd_switch;
    RebuildAmdSlots(d);
    Emit(EventKind::kRepartitioned, nullptr,
         DevName(c.amd_dev) + ": compute mode " + before + " -> " + d.amd_pair +
             " on an idle device for " + j.id + " (nothing lost)");
  }
  for (auto& [di, inst] : c.create) {
    Dev& d = devs_[di];
    const part::MigProfile* p = d.model->mig.FindProfile(inst.profile);
    d.slots.push_back({inst.ToString(), p->name, inst.start, p->memory_mib,
                       p->compute_slices * kWholeGpu / d.model->mig.compute_slices, -1, true,
                       p->memory_slices});
    if (c.enable_mig_dev < 0) {
      Emit(EventKind::kRepartitioned, nullptr,
           DevName(di) + ": created " + inst.ToString() + " on free slices for " + j.id);
    }
    Reindex(di);
  }
  if (c.amd_dev >= 0) Reindex(c.amd_dev);
  for (Grant& g : c.grants) {
    NodeRt& n = nodes_[g.node];
    n.cpu_free -= g.cpu;
    n.mem_free -= g.host_memory;
    if (g.dev < 0) continue;
    Dev& d = devs_[g.dev];
    if (g.slot >= 0) {
      d.slots[g.slot].holder = self;
    } else if (f == AllocationForm::kWhole) {
      d.whole = self;
    } else {
      d.shares.push_back(self);
      d.share_mem += g.memory;
      d.share_weight += g.compute;
    }
    Reindex(g.dev);
    if (d.reserved_by == self) {
      d.reserved_by = -1;
      d.nominated = false;
    }
  }
  // Whatever else was kept for this job is free again.
  if (j.nominated) {
    for (Dev& d : devs_) {
      if (d.reserved_by == self) d.reserved_by = -1, d.nominated = false;
    }
    j.nominated = false;
  }
  j.grants = c.grants;
  j.form = f;
  j.charge = ChargeOf(j, j.grants);
  j.borrowed = !guaranteed;
  AddUsage(j.group, j.charge, +1);
  j.state = JobState::kRunning;
  j.start = now_;
  j.wait_step.clear();
  j.wait_reason.clear();
  j.awaiting = 0;
  const GroupRt& g = groups_[j.group];
  Emit(EventKind::kAdmitted, &j,
       std::string(guaranteed ? "guaranteed: within reservation" : "borrowed: above reservation") +
           " (" + j.charge.ToString() + "; group holds " + g.usage.ToString() + ")");
  j.admitted_logged = true;
  std::string where;
  for (const Grant& gr : j.grants) {
    if (!where.empty()) where += ", ";
    where += gr.dev < 0 ? nodes_[gr.node].name : DevName(gr.dev);
    if (gr.slot >= 0) where += ":" + devs_[gr.dev].slots[gr.slot].name;
  }
  Emit(EventKind::kPlaced, &j,
       std::string(AllocationFormName(f)) + " on " + where +
           (f == AllocationForm::kShare ? " (cap " + FormatMiB(j.grants[0].memory) +
                                              ", compute weight " +
                                              FormatMilli(j.grants[0].compute) + ")"
                                        : "") +
           (c.backfill ? " [backfill]" : ""));
  if (c.backfill) ++stats_.backfilled;
}

void Engine::Release(int self) {
  Job& j = jobs_[self];
  for (const Grant& g : j.grants) {
    NodeRt& n = nodes_[g.node];
    n.cpu_free += g.cpu;
    n.mem_free += g.host_memory;
    if (g.dev < 0) continue;
    Dev& d = devs_[g.dev];
    if (g.slot >= 0) {
      if (g.slot < static_cast<int>(d.slots.size()) && d.slots[g.slot].holder == self) {
        d.slots[g.slot].holder = -1;
      }
    } else if (d.whole == self) {
      d.whole = -1;
    } else {
      auto it = std::find(d.shares.begin(), d.shares.end(), self);
      if (it != d.shares.end()) {
        d.shares.erase(it);
        d.share_mem -= g.memory;
        d.share_weight -= g.compute;
      }
    }
    Reindex(g.dev);
  }
  AddUsage(j.group, j.charge, -1);
  j.grants.clear();
  j.charge = {};
  memo_.clear();  // room appeared: earlier failures may now fit
}

bool Engine::TryPlace(int self, std::string* step, std::string* reason, bool* backfilled) {
  Job& j = jobs_[self];
  // Admission on the nominal request first: a job past its limit needs no search.
  Resources nominal{j.gpu_count * j.gpu_milli, j.gpu_count * j.gpu_mem,
                    j.cpu * std::max(j.gpu_count, 1), j.mem * std::max(j.gpu_count, 1)};
  if (std::find(j.forms.begin(), j.forms.end(), AllocationForm::kWhole) != j.forms.end() &&
      j.forms.size() == 1) {
    nominal.gpu_milli = j.gpu_count * kWholeGpu;
  }
  bool guaranteed = false;
  Status adm = Admission(j, nominal, &guaranteed);
  if (!adm.ok()) {
    *step = "Admission";
    *reason = adm.message();
    return false;
  }
  auto key = std::make_tuple(j.profile, j.pools, j.gpu_count, j.gpu_milli, j.gpu_mem, j.cpu,
                             j.mem);
  int64_t end = j.walltime > 0 ? now_ + j.walltime : kNever;
  bool use_memo = !j.nominated;
  if (use_memo) {
    auto it = memo_.find(key);
    if (it != memo_.end() && end >= it->second.fail_end) {
      *step = it->second.step;
      *reason = it->second.reason;
      return false;
    }
  }
  bool blocked = false;
  std::string limit_reason;
  for (AllocationForm f : j.forms) {
    Candidate c;
    bool found = false;
    if (j.gpu_count == 0) {
      found = FindCpuOnly(j, &c);
    } else if (f == AllocationForm::kWhole) {
      found = FindWhole(j, self, &c, &blocked);
    } else if (f == AllocationForm::kPartition) {
      found = FindPartition(j, self, &c, &blocked);
    } else {
      found = FindShare(j, self, &c, &blocked);
    }
    if (!found) continue;
    Resources charge = ChargeOf(j, c.grants);
    Status a = Admission(j, charge, &guaranteed);
    if (!a.ok()) {
      limit_reason = a.message();
      continue;
    }
    *backfilled = c.backfill;
    Commit(self, f, c, guaranteed);
    return true;
  }
  if (!limit_reason.empty()) {
    *step = "Admission";
    *reason = limit_reason + " (as placed)";
    return false;
  }
  std::string forms;
  for (AllocationForm f : j.forms) forms += (forms.empty() ? "" : "/") + std::string(AllocationFormName(f));
  std::string shape = j.gpu_count == 0
                          ? "cpu " + FormatMilli(j.cpu)
                          : std::to_string(j.gpu_count) + " x " + forms + " (gpu " +
                                FormatMilli(j.gpu_milli) + ", " + FormatMiB(j.gpu_mem) + ")";
  if (blocked) {
    *step = "Backfill";
    *reason = "room exists only on devices kept for a waiting job; " + shape +
              (j.walltime > 0 ? " would not finish before it starts"
                              : " declares no walltime, so it could delay that job");
  } else {
    *step = "Placement";
    *reason = "no room for " + shape + " in pools " + PoolNames(j) +
              (j.gpu_count > max_devs_per_node_ ? " (gang across nodes, all or nothing)" : "");
  }
  if (use_memo) {
    auto it = memo_.find(key);
    if (it == memo_.end() || end < it->second.fail_end) memo_[key] = {*step, *reason, end};
  }
  return false;
}

// ------------------------------------------------------------------------------------------
// Preemption

bool Engine::Victim(const Job& claimant, int v, bool reclaim) const {
  const Job& x = jobs_[v];
  if (x.state != JobState::kRunning || !x.preemptible) return false;
  if (reclaim) {
    if (x.group == claimant.group) return false;
    const GroupRt& g = groups_[x.group];
    // A borrower: its group holds more GPU than it reserved.
    return g.usage.gpu_milli > g.spec.reservation.gpu_milli;
  }
  return x.group == claimant.group && x.priority < claimant.priority;
}

bool Engine::TryPreempt(int self, bool reclaim) {
  Job& j = jobs_[self];
  if (j.gpu_count == 0 || j.gpu_count > max_devs_per_node_) return false;
  ++preempt_searches_;
  struct Best {
    int64_t cost = kNever;
    std::vector<int> victims;
    std::vector<int> devs;
  } best;
  auto consider = [&](int64_t cost, std::vector<int> victims, std::vector<int> devs) {
    if (victims.empty() || cost >= best.cost) return;
    best.cost = cost;
    best.victims = std::move(victims);
    best.devs = std::move(devs);
  };
  auto occupants = [&](const Dev& d, std::vector<int>* out) {
    if (d.whole >= 0) out->push_back(d.whole);
    for (int s : d.shares) out->push_back(s);
    for (const Slot& s : d.slots) {
      if (s.holder >= 0) out->push_back(s.holder);
    }
  };
  for (AllocationForm f : j.forms) {
    if (f == AllocationForm::kWhole) {
      for (const NodeRt& node : nodes_) {
        if (!InPools(j, node.pool) || !PoolAllows(node.pool, f)) continue;
        if (static_cast<int>(node.devs.size()) < j.gpu_count) continue;
        // Per device: the cost of clearing it, or skip when something there must stay.
        std::vector<std::pair<int64_t, int>> costs;
        for (int d : node.devs) {
          const Dev& dev = devs_[d];
          if (dev.split || dev.plan.active || dev.memory < j.gpu_mem) continue;
          if (dev.reserved_by >= 0 && dev.reserved_by != self && dev.nominated) continue;
          std::vector<int> occ;
          occupants(dev, &occ);
          int64_t cost = 0;
          bool ok = true;
          for (int v : occ) {
            if (!Victim(j, v, reclaim)) ok = false;
            cost += LostWork(jobs_[v]);
          }
          if (ok) costs.push_back({cost, d});
        }
        if (static_cast<int>(costs.size()) < j.gpu_count) continue;
        std::sort(costs.begin(), costs.end());
        int64_t total = 0;
        std::vector<int> victims, devs;
        MilliCpu cpu = node.cpu_free;
        MiB mem = node.mem_free;
        for (int k = 0; k < j.gpu_count; ++k) {
          total += costs[k].first;
          devs.push_back(costs[k].second);
          std::vector<int> occ;
          occupants(devs_[costs[k].second], &occ);
          for (int v : occ) {
            if (std::find(victims.begin(), victims.end(), v) == victims.end()) {
              victims.push_back(v);
              for (const Grant& g : jobs_[v].grants) {
                if (g.dev == costs[k].second) cpu += g.cpu, mem += g.host_memory;
              }
            }
          }
        }
        if (cpu < j.cpu * j.gpu_count || mem < j.mem * j.gpu_count) continue;
        consider(total, victims, devs);
      }
    } else if (f == AllocationForm::kShare) {
      for (size_t di = 0; di < devs_.size(); ++di) {
        const Dev& d = devs_[di];
        if (!InPools(j, d.pool) || !PoolAllows(d.pool, f) || d.split || d.plan.active) continue;
        if (d.reserved_by >= 0 && d.reserved_by != self && d.nominated) continue;
        MiB want = j.gpu_mem > 0 ? j.gpu_mem : d.memory * j.gpu_milli / kWholeGpu;
        if (want > d.memory) continue;
        if (d.whole >= 0) {
          if (Victim(j, d.whole, reclaim)) {
            consider(LostWork(jobs_[d.whole]), {d.whole}, {static_cast<int>(di)});
          }
          continue;
        }
        MiB free_mem = d.memory - d.share_mem;
        MilliGpu free_w = kWholeGpu - d.share_weight;
        std::vector<std::pair<int64_t, int>> vs;
        for (int s : d.shares) {
          if (Victim(j, s, reclaim)) vs.push_back({LostWork(jobs_[s]), s});
        }
        std::sort(vs.begin(), vs.end());
        int64_t cost = 0;
        std::vector<int> victims;
        for (auto& [c, v] : vs) {
          if (free_mem >= want && free_w >= j.gpu_milli) break;
          cost += c;
          victims.push_back(v);
          free_mem += jobs_[v].grants[0].memory;
          free_w += jobs_[v].grants[0].compute;
        }
        if (free_mem >= want && free_w >= j.gpu_milli) {
          consider(cost, victims, {static_cast<int>(di)});
        }
      }
    } else {  // partition: a slot of the right size held by a victim
      for (size_t di = 0; di < devs_.size(); ++di) {
        const Dev& d = devs_[di];
        if (!InPools(j, d.pool) || !PoolAllows(d.pool, f) || !d.split || d.plan.active) continue;
        if (d.reserved_by >= 0 && d.reserved_by != self && d.nominated) continue;
        int pi = d.mig_capable() ? BestMigProfile(d.model, j.gpu_milli, j.gpu_mem) : -1;
        for (const Slot& s : d.slots) {
          if (s.holder < 0 || !Victim(j, s.holder, reclaim)) continue;
          bool right = d.mig_capable()
                           ? (pi >= 0 && s.profile == d.model->mig.profiles[pi].name)
                           : (s.memory >= j.gpu_mem && s.compute >= j.gpu_milli);
          if (right) consider(LostWork(jobs_[s.holder]), {s.holder}, {static_cast<int>(di)});
        }
      }
    }
  }
  if (best.victims.empty()) return false;
  std::string why = std::string(reclaim ? "reclaim: group " : "priority preemption: ") +
                    (reclaim ? groups_[j.group].spec.name + " is below its reservation; " : "") +
                    "for " + j.id + " (priority " + std::to_string(j.priority) + ")";
  for (int d : best.devs) Nominate(d, self, now_ + policy_.grace_seconds);
  j.awaiting = static_cast<int>(best.victims.size());
  for (int v : best.victims) Preempt(v, self, why);
  return true;
}

void Engine::Nominate(int d, int self, int64_t until) {
  devs_[d].reserved_by = self;
  devs_[d].nominated = true;
  devs_[d].reserved_until = until;
  jobs_[self].nominated = true;
}

void Engine::Preempt(int v, int claimant, const std::string& why) {
  Job& x = jobs_[v];
  int64_t lost = LostWork(x);
  x.state = JobState::kTerminating;
  x.grace_end = now_ + policy_.grace_seconds;
  x.claimant = claimant;
  ++stats_.preempted;
  Emit(EventKind::kPreempted, &x,
       why + "; lost " + std::to_string(lost / 1000) + " GPU-s; grace until " + T(x.grace_end));
  if (policy_.grace_seconds == 0) FinishTermination(v);
}

void Engine::FinishTermination(int v) {
  Job& x = jobs_[v];
  int claimant = x.claimant;
  Release(v);
  x.state = JobState::kPending;
  x.claimant = -1;
  x.start = -1;
  ++x.preemptions;
  x.wait_step = "Preempted";
  x.wait_reason = "requeued after preemption";
  pending_.push_back(v);
  Emit(EventKind::kRequeued, &x, "back to pending after preemption");
  if (claimant >= 0 && jobs_[claimant].awaiting > 0) --jobs_[claimant].awaiting;
}

// ------------------------------------------------------------------------------------------
// Backfill: the first blocked job keeps the devices that free up soonest.

void Engine::ReserveForHead(int self) {
  Job& j = jobs_[self];
  if (j.gpu_count == 0 || j.gpu_count > max_devs_per_node_) return;
  if (std::find(j.forms.begin(), j.forms.end(), AllocationForm::kWhole) == j.forms.end()) return;
  int best_node = -1;
  int64_t best_time = kNever + 1;
  std::vector<int> best_devs;
  for (size_t ni = 0; ni < nodes_.size(); ++ni) {
    const NodeRt& node = nodes_[ni];
    if (!InPools(j, node.pool) || !PoolAllows(node.pool, AllocationForm::kWhole)) continue;
    if (static_cast<int>(node.devs.size()) < j.gpu_count) continue;
    std::vector<std::pair<int64_t, int>> ready;
    for (int d : node.devs) {
      const Dev& dev = devs_[d];
      if (dev.split || dev.plan.active || dev.reserved_by >= 0 || dev.memory < j.gpu_mem) continue;
      int64_t t = now_;
      if (dev.whole >= 0) t = std::max(t, ExpectedEnd(jobs_[dev.whole]));
      for (int s : dev.shares) t = std::max(t, ExpectedEnd(jobs_[s]));
      ready.push_back({t, d});
    }
    if (static_cast<int>(ready.size()) < j.gpu_count) continue;
    std::sort(ready.begin(), ready.end());
    int64_t t = ready[j.gpu_count - 1].first;
    if (t < best_time) {
      best_time = t;
      best_node = static_cast<int>(ni);
      best_devs.clear();
      for (int k = 0; k < j.gpu_count; ++k) best_devs.push_back(ready[k].second);
    }
  }
  if (best_node < 0) return;
  for (int d : best_devs) {
    devs_[d].reserved_by = self;
    devs_[d].nominated = false;
    devs_[d].reserved_until = best_time;
  }
  ++heads_;
  memo_.clear();  // the kept devices change what later shapes find
  j.wait_reason += "; keeps " + std::to_string(j.gpu_count) + " device(s) on " +
                   nodes_[best_node].name + (best_time >= kNever ? " (start unknown: running jobs declare no walltime)"
                                                                  : " expected free at " + T(best_time));
}

// ------------------------------------------------------------------------------------------
// Repartitioning

bool Engine::TryRepartition(int self) {
  Job& j = jobs_[self];
  if (j.gpu_count != 1) return false;
  struct Option {
    int dev = -1;
    int64_t cost = kNever;
    std::vector<int> victims;
    Plan plan;
  } best;
  // Drained for it: preemptible work of lower priority, or of borrowers when the job is within
  // its group's reservation. Peers are never drained for peers (layouts would ping-pong).
  bool within_reservation = WithinReservation(
      groups_[j.group].usage, Resources{j.gpu_milli, 0, 0, 0}, groups_[j.group].spec.reservation);
  auto victim_ok = [&](int v) {
    const Job& x = jobs_[v];
    if (x.state != JobState::kRunning || !x.preemptible) return false;
    return x.priority < j.priority || (within_reservation && Victim(j, v, /*reclaim=*/true));
  };
  for (size_t di = 0; di < devs_.size(); ++di) {
    const Dev& d = devs_[di];
    if (!InPools(j, d.pool) || !PoolAllows(d.pool, AllocationForm::kPartition)) continue;
    if (d.plan.active || (d.reserved_by >= 0 && d.reserved_by != self && d.nominated)) continue;
    if (d.mig_capable()) {
      int pi = BestMigProfile(d.model, j.gpu_milli, j.gpu_mem);
      if (pi < 0) continue;
      const std::string& want = d.model->mig.profiles[pi].name;
      if (d.mig) {
        // A layout that already has the profile serves this demand once it frees up.
        bool has = false;
        for (const Slot& s : d.slots) {
          has = has || (s.alive && s.profile == want);
        }
        if (has) continue;
        std::vector<part::CostedInstance> current;
        for (const Slot& s : d.slots) {
          if (!s.alive) continue;
          int64_t cost = 0;
          if (s.holder >= 0) cost = victim_ok(s.holder) ? LostWork(jobs_[s.holder]) + 1 : kForbidden;
          current.push_back({{s.profile, s.start}, cost});
        }
        auto ev = part::CheapestEviction(*d.model, current, want);
        if (!ev.ok() || ev->cost >= kForbidden || ev->evict.empty()) continue;
        if (ev->cost >= best.cost) continue;
        Option o;
        o.dev = static_cast<int>(di);
        o.cost = ev->cost;
        for (const part::Instance& in : ev->evict) {
          for (const Slot& s : d.slots) {
            if (s.profile == in.profile && s.start == in.start && s.holder >= 0) {
              o.victims.push_back(s.holder);
            }
          }
        }
        o.plan.evict = ev->evict;
        o.plan.add = {ev->placed};
        best = std::move(o);
      } else {
        // Unsplit: everything on it must go (only preemptible work may be drained).
        std::vector<int> occ;
        if (d.whole >= 0) occ.push_back(d.whole);
        for (int s : d.shares) occ.push_back(s);
        if (occ.empty()) continue;  // idle: placement's pass 2 handles it
        int64_t cost = 0;
        bool ok = true;
        for (int v : occ) {
          ok = ok && victim_ok(v);
          cost += LostWork(jobs_[v]) + 1;
        }
        if (!ok || cost >= best.cost) continue;
        Option o;
        o.dev = static_cast<int>(di);
        o.cost = cost;
        o.victims = occ;
        o.plan.enable_mig = true;
        o.plan.add = {part::Instance{want, d.model->mig.profiles[pi].starts.front()}};
        best = std::move(o);
      }
    } else if (d.amd_capable()) {
      auto pick = part::PlanAmd(*d.model, {std::max<MiB>(j.gpu_mem, 1)});
      if (!pick.ok() || pick->pair.ToString() == d.amd_pair) continue;
      auto cur = part::ParsePair(*d.model, d.amd_pair);
      bool node_wide = pick->pair.memory != cur->memory;
      std::vector<int> occ;
      const std::vector<int> scope =
          node_wide ? nodes_[d.node].devs : std::vector<int>{static_cast<int>(di)};
      bool ok = true;
      for (int od : scope) {
        const Dev& o = devs_[od];
        if (o.plan.active) ok = false;
        if (o.whole >= 0) occ.push_back(o.whole);
        for (int s : o.shares) occ.push_back(s);
        for (const Slot& s : o.slots) {
          if (s.holder >= 0) occ.push_back(s.holder);
        }
      }
      int64_t cost = 0;
      for (int v : occ) {
        ok = ok && victim_ok(v);
        cost += LostWork(jobs_[v]) + 1;
      }
      if (!ok || cost >= best.cost) continue;
      Option o;
      o.dev = static_cast<int>(di);
      o.cost = cost;
      o.victims = occ;
      o.plan.amd_pair = pick->pair.ToString();
      o.plan.node_wide = node_wide;
      best = std::move(o);
    }
  }
  if (best.dev < 0) return false;
  // Demand served, in the same unit as lost work (milli-GPU seconds): what the job asks, over
  // the time it has waited plus the planning horizon.
  int64_t demand = std::max<int64_t>(j.gpu_milli, 1) *
                   (now_ - j.submit + policy_.repartition_horizon_s);
  if (best.cost > demand) {
    j.wait_step = "Repartition";
    j.wait_reason += "; cheapest repartition (" + DevName(best.dev) + ") loses " +
                     std::to_string(best.cost / 1000) + " GPU-s, more than the demand served (" +
                     std::to_string(demand / 1000) + " GPU-s)";
    return false;
  }
  Dev& d = devs_[best.dev];
  best.plan.active = true;
  best.plan.for_job = self;
  std::string layout_before = device_layout(d.node, d.index);
  best.plan.why = "for " + j.id + " (gpu " + FormatMilli(j.gpu_milli) + ", " +
                  FormatMiB(j.gpu_mem) + "); lost work " + std::to_string(best.cost / 1000) +
                  " GPU-s vs demand " + std::to_string(demand / 1000) + " GPU-s; was " +
                  (layout_before.empty() ? "unsplit" : layout_before);
  if (best.plan.node_wide) {
    for (int od : nodes_[d.node].devs) {
      if (od != best.dev) {
        devs_[od].plan.active = true;  // held still: part of the node-wide change
        devs_[od].plan.for_job = self;
        devs_[od].plan.node_wide = true;
      }
    }
  }
  d.plan = best.plan;
  active_plans_ += best.plan.node_wide ? static_cast<int>(nodes_[d.node].devs.size()) : 1;
  Nominate(best.dev, self, now_ + policy_.grace_seconds);
  j.awaiting = static_cast<int>(best.victims.size());
  j.wait_step = "Repartition";
  j.wait_reason = "draining " + DevName(best.dev) + " for a new layout (" +
                  std::to_string(best.victims.size()) + " job(s) preempted)";
  for (int v : best.victims) {
    Preempt(v, self, "drain " + DevName(best.dev) + " for repartition " + best.plan.why);
  }
  ++repartitions_;
  return true;
}

bool Engine::ApplyPlan(int di) {
  Dev& d = devs_[di];
  if (!d.plan.active || (d.plan.node_wide && d.plan.amd_pair.empty())) return false;
  if (d.plan.node_wide) {
    for (int od : nodes_[d.node].devs) {
      if (!devs_[od].idle()) return false;
    }
  } else if (d.plan.enable_mig || !d.plan.amd_pair.empty()) {
    if (!d.idle()) return false;
  } else {
    for (const part::Instance& in : d.plan.evict) {
      for (const Slot& s : d.slots) {
        if (s.alive && s.profile == in.profile && s.start == in.start && s.holder >= 0) {
          return false;
        }
      }
    }
  }
  std::string before = device_layout(d.node, d.index);
  if (!d.plan.amd_pair.empty()) {
    auto pair = part::ParsePair(*d.model, d.plan.amd_pair);
    if (d.plan.node_wide) {
      std::vector<part::AmdDevice> hive;
      for (int od : nodes_[d.node].devs) {
        hive.push_back({DevName(od), *part::ParsePair(*d.model, devs_[od].amd_pair), false});
      }
      auto change = part::CheckMemoryModeChange(*d.model, hive, pair->memory);
      if (!change.ok()) {
        d.plan = {};
        return false;
      }
      const std::vector<int>& nd = nodes_[d.node].devs;
      for (size_t k = 0; k < nd.size(); ++k) {
        Dev& o = devs_[nd[k]];
        o.amd_pair = nd[k] == di ? pair->ToString() : change->resulting[k].ToString();
        if (nd[k] != di) o.plan = {};
        RebuildAmdSlots(o);
      }
    } else {
      d.amd_pair = pair->ToString();
      RebuildAmdSlots(d);
    }
  } else {
    if (d.plan.enable_mig) {
      d.mig = d.split = true;
      d.slots.clear();
    }
    for (const part::Instance& in : d.plan.evict) {
      for (Slot& s : d.slots) {
        if (s.alive && s.profile == in.profile && s.start == in.start) s.alive = false;
      }
    }
    if (d.idle()) {  // no grant points into the slots: drop the tombstones
      d.slots.erase(std::remove_if(d.slots.begin(), d.slots.end(),
                                   [](const Slot& s) { return !s.alive; }),
                    d.slots.end());
    }
    for (const part::Instance& in : d.plan.add) {
      const part::MigProfile* p = d.model->mig.FindProfile(in.profile);
      d.slots.push_back({in.ToString(), p->name, in.start, p->memory_mib,
                         p->compute_slices * kWholeGpu / d.model->mig.compute_slices, -1, true,
                         p->memory_slices});
    }
  }
  for (int od : nodes_[d.node].devs) Reindex(od);
  Emit(EventKind::kRepartitioned, nullptr,
       DevName(di) + ": " + (before.empty() ? "unsplit" : before) + " -> " +
           device_layout(d.node, d.index) + (d.plan.node_wide ? " (node-wide memory mode)" : "") +
           " " + d.plan.why);
  ++stats_.repartitioned;
  int for_job = d.plan.for_job;
  d.plan = {};
  if (for_job >= 0 && jobs_[for_job].state == JobState::kPending) {
    Nominate(di, for_job, now_);
  }
  memo_.clear();
  return true;
}

void Engine::ApplyReadyPlans() {
  active_plans_ = 0;
  for (size_t d = 0; d < devs_.size(); ++d) {
    if (devs_[d].plan.active) ApplyPlan(static_cast<int>(d));
    if (devs_[d].plan.active) ++active_plans_;
  }
}

// ------------------------------------------------------------------------------------------
// The cycle

CycleStats Engine::RunCycle(int64_t now) {
  now_ = std::max(now_, now);
  stats_ = {};
  memo_.clear();
  heads_ = 0;
  preempt_searches_ = 0;
  repartitions_ = 0;
  partition_demand_.clear();
  // 0. Preemptions whose grace ended; then layouts waiting for their device to be idle.
  for (size_t v = 0; v < jobs_.size(); ++v) {
    if (jobs_[v].state == JobState::kTerminating && jobs_[v].grace_end <= now_) {
      FinishTermination(static_cast<int>(v));
    }
  }
  if (active_plans_ > 0) ApplyReadyPlans();
  // Backfill reservations are recomputed every cycle; nominations stay until used.
  for (Dev& d : devs_) {
    if (d.reserved_by >= 0 && !d.nominated) d.reserved_by = -1;
  }
  // Fair share: decay past usage, add the usage since the last cycle.
  double dt = last_cycle_ < 0 ? 0.0 : static_cast<double>(now_ - last_cycle_);
  double decay = std::pow(0.5, dt / static_cast<double>(policy_.fair_share_half_life_s));
  double cap[4] = {static_cast<double>(std::max<MilliGpu>(gpu_capacity(), 1)),
                   static_cast<double>(std::max<MiB>(gpu_memory_capacity_, 1)), 0, 0};
  for (const NodeRt& n : nodes_) {
    cap[2] += static_cast<double>(n.cpu_total);
    cap[3] += static_cast<double>(n.mem_total);
  }
  cap[2] = std::max(cap[2], 1.0);
  cap[3] = std::max(cap[3], 1.0);
  for (GroupRt& g : groups_) {
    double u[4] = {static_cast<double>(g.usage.gpu_milli),
                   static_cast<double>(g.usage.gpu_memory_mib),
                   static_cast<double>(g.usage.cpu_milli), static_cast<double>(g.usage.memory_mib)};
    double share = 0;
    for (int r = 0; r < 4; ++r) {
      g.decayed[r] = g.decayed[r] * decay + u[r] * dt;
      share = std::max(share, g.decayed[r] /
                                  (cap[r] * static_cast<double>(policy_.fair_share_half_life_s)));
    }
    g.fair_share = share / (static_cast<double>(g.spec.weight_milli) / 1000.0);
    const Resources& res = g.spec.reservation;
    g.below = g.usage.gpu_milli < res.gpu_milli || g.usage.gpu_memory_mib < res.gpu_memory_mib ||
              g.usage.cpu_milli < res.cpu_milli || g.usage.memory_mib < res.memory_mib;
  }
  last_cycle_ = now_;
  // 1. Order.
  std::vector<int> order;
  order.reserve(pending_.size());
  for (int h : pending_) {
    if (jobs_[h].state == JobState::kPending) order.push_back(h);
  }
  pending_.clear();  // jobs requeued during the cycle land here; the waiting rejoin at the end
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  stats_.pending_at_start = static_cast<int>(order.size());
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const Job& x = jobs_[a];
    const Job& y = jobs_[b];
    if (x.priority != y.priority) return x.priority > y.priority;
    bool bx = groups_[x.group].below, by = groups_[y.group].below;
    if (bx != by) return bx;
    double fx = groups_[x.group].fair_share, fy = groups_[y.group].fair_share;
    if (fx != fy) return fx < fy;
    if (x.submit != y.submit) return x.submit < y.submit;
    return x.seq < y.seq;
  });
  // 2-4. Admit and place in order; preempt and reserve for what does not fit.
  std::vector<int> still;
  for (int h : order) {
    Job& j = jobs_[h];
    if (j.state != JobState::kPending) continue;
    std::string step, reason;
    bool backfilled = false;
    if (TryPlace(h, &step, &reason, &backfilled)) {
      ++stats_.admitted;
      continue;
    }
    j.wait_step = step;
    j.wait_reason = reason;
    if (j.awaiting > 0) {
      j.wait_step = "Reclaim";
      j.wait_reason = "waiting for " + std::to_string(j.awaiting) +
                      " preempted job(s) to leave (grace " + std::to_string(policy_.grace_seconds) +
                      "s)";
      still.push_back(h);
      continue;
    }
    if (j.nominated && step != "Admission") {
      // What was kept for it is gone or insufficient; let others use it.
      for (Dev& d : devs_) {
        if (d.reserved_by == h) d.reserved_by = -1, d.nominated = false;
      }
      j.nominated = false;
    }
    if (step == "Placement" || step == "Backfill") {
      Resources nominal{j.gpu_count * j.gpu_milli, 0, 0, 0};
      bool within_reservation =
          WithinReservation(groups_[j.group].usage, nominal, groups_[j.group].spec.reservation);
      bool tried = false;
      if (preempt_searches_ < policy_.max_preemption_searches_per_cycle) {
        if (within_reservation) tried = TryPreempt(h, /*reclaim=*/true);
        if (!tried) tried = TryPreempt(h, /*reclaim=*/false);
      }
      if (tried) {
        if (jobs_[h].awaiting == 0 && TryPlace(h, &step, &reason, &backfilled)) {
          ++stats_.admitted;
          continue;
        }
        j.wait_step = "Reclaim";
        j.wait_reason = (within_reservation ? "reclaiming capacity from borrowers"
                                            : "preempting lower-priority jobs of the group") +
                        std::string("; back by ") + T(now_ + policy_.grace_seconds);
      } else {
        if (std::find(j.forms.begin(), j.forms.end(), AllocationForm::kPartition) !=
            j.forms.end()) {
          partition_demand_.push_back(h);
        }
        if (heads_ < 4 && step == "Placement" && j.forms.front() == AllocationForm::kWhole) {
          ReserveForHead(h);
        }
      }
    }
    still.push_back(h);
  }
  // 5. Repartition for partition demand that still waits.
  if (policy_.repartition) {
    repartition_failed_.clear();
    repartition_attempts_ = 0;
    for (int h : partition_demand_) {
      if (repartitions_ >= policy_.max_repartitions_per_cycle) break;
      // Each search walks every device; a shape that found nothing will not find it again
      // this cycle, and the searches per cycle are bounded.
      if (repartition_attempts_ >= 4 * policy_.max_repartitions_per_cycle) break;
      Job& j = jobs_[h];
      if (j.state != JobState::kPending || j.awaiting > 0) continue;
      auto rkey = std::make_tuple(j.priority, j.pools, j.gpu_milli, j.gpu_mem);
      if (repartition_failed_.count(rkey)) continue;
      ++repartition_attempts_;
      if (!TryRepartition(h)) {
        repartition_failed_.insert(rkey);
        continue;
      }
      ApplyReadyPlans();
      if (jobs_[h].awaiting == 0) {
        std::string step, reason;
        bool bf = false;
        if (TryPlace(h, &step, &reason, &bf)) ++stats_.admitted;
      }
    }
  }
  for (int h : still) {
    if (jobs_[h].state == JobState::kPending) pending_.push_back(h);
  }
  StepCheck("cycle");
  return stats_;
}

// ------------------------------------------------------------------------------------------
// Invariants and views

Status Engine::CheckInvariants() const {
  std::vector<MilliCpu> cpu(nodes_.size(), 0);
  std::vector<MiB> mem(nodes_.size(), 0);
  std::vector<Resources> usage(groups_.size());
  std::vector<MiB> share_mem(devs_.size(), 0);
  std::vector<MilliGpu> share_w(devs_.size(), 0);
  for (size_t h = 0; h < jobs_.size(); ++h) {
    const Job& j = jobs_[h];
    bool holds = j.state == JobState::kRunning || j.state == JobState::kTerminating;
    if (!holds) {
      if (!j.grants.empty()) return Status::Internal("job " + j.id + " holds grants while " + JobStateName(j.state));
      continue;
    }
    if (!j.admitted_logged) return Status::Internal("job " + j.id + " runs without an admission event");
    if (j.identity.empty()) return Status::Internal("job " + j.id + " has no identity");
    for (int g = j.group; g >= 0; g = groups_[g].parent) usage[g] += j.charge;
    for (const Grant& gr : j.grants) {
      cpu[gr.node] += gr.cpu;
      mem[gr.node] += gr.host_memory;
      if (gr.dev < 0) continue;
      const Dev& d = devs_[gr.dev];
      if (gr.slot >= 0) {
        if (gr.slot >= static_cast<int>(d.slots.size()) ||
            d.slots[gr.slot].holder != static_cast<int>(h)) {
          return Status::Internal("job " + j.id + " holds a partition of " + DevName(gr.dev) +
                                  " that does not record it");
        }
        if (gr.memory > d.slots[gr.slot].memory) {
          return Status::Internal("job " + j.id + " holds more memory than its partition");
        }
      } else if (j.form == AllocationForm::kWhole) {
        if (d.whole != static_cast<int>(h)) {
          return Status::Internal("job " + j.id + " holds " + DevName(gr.dev) + " not recorded");
        }
      } else {
        share_mem[gr.dev] += gr.memory;
        share_w[gr.dev] += gr.compute;
      }
    }
  }
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const NodeRt& node = nodes_[n];
    if (cpu[n] > node.cpu_total || mem[n] > node.mem_total) {
      return Status::Internal("node " + node.name + " over CPU or memory capacity");
    }
    if (node.cpu_free != node.cpu_total - cpu[n] || node.mem_free != node.mem_total - mem[n]) {
      return Status::Internal("node " + node.name + " free CPU/memory out of step with jobs");
    }
  }
  for (size_t di = 0; di < devs_.size(); ++di) {
    const Dev& d = devs_[di];
    if (d.whole >= 0 && (!d.shares.empty() || d.split)) {
      return Status::Internal(DevName(static_cast<int>(di)) + " is whole-held and also shared or split");
    }
    if (d.split && !d.shares.empty()) {
      return Status::Internal(DevName(static_cast<int>(di)) + " is split and carries device shares");
    }
    if (share_mem[di] != d.share_mem || share_mem[di] > d.memory) {
      return Status::Internal(DevName(static_cast<int>(di)) + ": share caps " +
                              FormatMiB(share_mem[di]) + " exceed or disagree with memory " +
                              FormatMiB(d.memory));
    }
    if (share_w[di] != d.share_weight || share_w[di] > kWholeGpu) {
      return Status::Internal(DevName(static_cast<int>(di)) + ": share weights over one device");
    }
    if (d.mig) {
      part::Layout layout;
      for (const Slot& s : d.slots) {
        if (!s.alive) continue;
        part::Instance in{s.profile, s.start};
        Status c = part::CheckCreate(*d.model, layout, in);
        if (!c.ok()) return Status::Internal(DevName(static_cast<int>(di)) + ": illegal layout: " + c.message());
        layout.instances.push_back(in);
      }
    }
    MiB slot_mem = 0;
    for (const Slot& s : d.slots) slot_mem += s.alive ? s.memory : 0;
    if (slot_mem > d.memory) {
      return Status::Internal(DevName(static_cast<int>(di)) + ": partitions exceed device memory");
    }
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    const GroupRt& gr = groups_[g];
    if (!(usage[g] == gr.usage)) {
      return Status::Internal("group " + gr.spec.name + " usage out of step with its jobs");
    }
    const char* which = nullptr;
    if (!Within(Resources{}, gr.usage, gr.spec.limit, &which)) {
      return Status::Internal("group " + gr.spec.name + " over its " + which + " limit: holds " +
                              gr.usage.ToString());
    }
  }
  return Status::Ok();
}

JobView Engine::job(int handle) const {
  const Job& j = jobs_[handle];
  JobView v;
  v.id = j.id;
  v.identity = j.identity;
  v.group = groups_[j.group].spec.name;
  v.queue = policy_.queues[j.queue].name;
  v.cls = j.cls;
  v.state = j.state;
  if (!j.grants.empty()) v.form = j.form;
  v.borrowed = j.borrowed;
  v.charge = j.charge;
  for (const Grant& g : j.grants) {
    GrantView gv;
    gv.node = nodes_[g.node].name;
    gv.device = g.dev < 0 ? -1 : devs_[g.dev].index;
    if (g.slot >= 0) gv.slot = devs_[g.dev].slots[g.slot].name;
    gv.compute = g.compute;
    gv.memory = g.memory;
    v.grants.push_back(gv);
  }
  v.submit_time = j.submit;
  v.start_time = j.start;
  v.preemptions = j.preemptions;
  v.wait_step = j.wait_step;
  v.wait_reason = j.wait_reason;
  return v;
}

std::vector<GroupView> Engine::groups() const {
  std::vector<GroupView> out;
  for (const GroupRt& g : groups_) {
    out.push_back({g.spec.name, g.usage, g.spec.reservation, g.spec.limit, g.fair_share});
  }
  return out;
}

Resources Engine::allocated() const {
  Resources r;
  for (const Dev& d : devs_) {
    if (d.whole >= 0) {
      r.gpu_milli += kWholeGpu;
      r.gpu_memory_mib += d.memory;
    }
    r.gpu_milli += d.share_weight;
    r.gpu_memory_mib += d.share_mem;
    for (const Slot& s : d.slots) {
      if (s.holder >= 0) r.gpu_milli += s.compute, r.gpu_memory_mib += s.memory;
    }
  }
  for (const NodeRt& n : nodes_) {
    r.cpu_milli += n.cpu_total - n.cpu_free;
    r.memory_mib += n.mem_total - n.mem_free;
  }
  return r;
}

std::vector<int> Engine::devices_used_by_class() const {
  std::vector<int> out(kClassCount, 0);
  for (const Dev& d : devs_) {
    bool seen[kClassCount] = {false, false, false, false, false};
    if (d.whole >= 0) seen[static_cast<int>(jobs_[d.whole].cls)] = true;
    for (int s : d.shares) seen[static_cast<int>(jobs_[s].cls)] = true;
    for (const Slot& s : d.slots) {
      if (s.holder >= 0) seen[static_cast<int>(jobs_[s.holder].cls)] = true;
    }
    for (int c = 0; c < kClassCount; ++c) out[c] += seen[c] ? 1 : 0;
  }
  return out;
}

std::string Engine::device_layout(int node, int device) const {
  const Dev& d = devs_[nodes_[node].devs[device]];
  if (d.amd_capable()) return d.amd_pair;
  if (!d.mig) return "";
  std::vector<const Slot*> s;
  for (const Slot& x : d.slots) {
    if (x.alive) s.push_back(&x);
  }
  std::sort(s.begin(), s.end(), [](const Slot* a, const Slot* b) { return a->start < b->start; });
  std::string out;
  for (const Slot* x : s) out += (out.empty() ? "" : ", ") + x->name;
  return out.empty() ? "(MIG, no instances)" : out;
}

}  // namespace

Result<std::unique_ptr<QuotaEngine>> QuotaEngine::Create(const PolicySpec& policy,
                                                         const std::vector<NodeSpec>& nodes,
                                                         EngineOptions options) {
  auto e = std::make_unique<Engine>();
  Status s = e->Init(policy, nodes, options);
  if (!s.ok()) return s;
  return std::unique_ptr<QuotaEngine>(std::move(e));
}

const char* JobStateName(JobState s) {
  switch (s) {
    case JobState::kPending: return "pending";
    case JobState::kRunning: return "running";
    case JobState::kTerminating: return "terminating";
    case JobState::kDone: return "done";
    case JobState::kRejected: return "rejected";
  }
  return "unknown";
}

const char* EventKindName(EventKind k) {
  switch (k) {
    case EventKind::kSubmitted: return "submitted";
    case EventKind::kRejected: return "rejected";
    case EventKind::kAdmitted: return "admitted";
    case EventKind::kPlaced: return "placed";
    case EventKind::kPreempted: return "preempted";
    case EventKind::kRequeued: return "requeued";
    case EventKind::kRepartitioned: return "repartitioned";
    case EventKind::kCompleted: return "completed";
  }
  return "unknown";
}

}  // namespace tessera::quota
