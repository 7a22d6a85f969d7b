// The queue and quota policy: groups, pools, resource profiles, execution queues and the
// class-to-form table. Plain value types plus Validate(), which checks a whole policy and names
// the offending field in its error ("groups[team-a].reservation.gpu exceeds its limit").
//
// Who gets what form is decided here, not by the user: FormsFor() intersects the class's
// forms (the policy's table) with the profile's acceptable forms, in the table's order; a form
// the user asks for must be in that list, or the job is refused.
//
// Thread-safety: value types; no shared state.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "model/cluster.h"
#include "model/resources.h"

namespace tessera::quota {

enum class WorkloadClass { kTraining = 0, kInference, kInteractive, kCi, kBatch };
inline constexpr int kClassCount = 5;
const char* WorkloadClassName(WorkloadClass c);
Result<WorkloadClass> ParseWorkloadClass(std::string_view text);
Result<AllocationForm> ParseAllocationForm(std::string_view text);

// A limit component this large means "no limit".
inline constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max() / 4;
inline Resources UnlimitedResources() { return {kUnlimited, kUnlimited, kUnlimited, kUnlimited}; }

// A team or tenant. Usage of a child counts against every ancestor too.
// One identity (user) inside a group: its weight in the group's fair share (thousandths;
// default 1000) and, optionally, the most it may hold at once of the group's capacity.
struct MemberSpec {
  std::string identity;
  int64_t weight_milli = 1000;
  Resources limit = UnlimitedResources();
};

// A group's quota on one GPU model (catalog name, e.g. "H100-80GB", or a node's own gpu.model),
// in thousandths of a GPU, beside its totals (docs/scheduling.md, "Quota per GPU model").
// What a grant charges against it is what it charges against the group's GPU total: its compute
// share of the device (a whole card 1000; a MIG or AMD partition its compute share, a 1g.10gb of
// an H100 143; a share its compute weight). The reservation is a promise on that model: the
// group's GPU reservation counts first against its per-model reservations, and only the rest
// (the total less their sum) may be held on any model; what a group holds past that is borrowed.
// `model` may also name a family (GpuFamilyOf: "H100" covers H100-80GB and H100-NVL-94GB): the
// quota then counts every model of the family together, and its reservation is kept by any of
// them. A group's reservations on a family and on one of its models may not both be set.
struct ModelQuota {
  std::string model;
  MilliGpu reservation = 0;
  MilliGpu limit = kUnlimited;
};

// A group's quota on one pool (PoolSpec::name), in thousandths of a GPU, charged and promised
// like ModelQuota but on the pool of the device a grant lands on (docs/scheduling.md, "Quota per
// pool"): the GPU reservation less the per-pool reservations may be held in any pool.
struct PoolQuota {
  std::string pool;
  MilliGpu reservation = 0;
  MilliGpu limit = kUnlimited;
};

// GPU model families: the part of a catalog model's name before its first '-' ("H100-80GB":
// "H100"; "MI300X": "MI300X").
std::string GpuFamilyOf(std::string_view model);
// Whether `name` is the family of some catalog model (ASCII case-insensitive). A name that is
// both a family and an alias of one model ("GH200") is the family.
bool IsGpuFamily(std::string_view name);
// Whether a device of `model` (a catalog name, or a node's own gpu.model) counts against a quota
// or a queue entry naming `name` (a catalog model, one of its aliases, or a family).
bool ModelCovers(std::string_view name, std::string_view model);
// Whether `name` names a catalog model (by name or alias) or a family; the error names `field`.
Status CheckModelName(std::string_view name, const std::string& field);

struct GroupSpec {
  std::string name;
  std::string parent;                      // empty: a top-level group
  Resources reservation;                   // guaranteed to the group (reclaimable from borrowers)
  Resources limit = UnlimitedResources();  // most the group may hold at once
  int64_t weight_milli = 1000;  // share of capacity above reservations, relative to siblings
  // The Unix account its members' jobs run under on agent nodes, unless the identity names its
  // own (served control plane only; the simulator ignores it).
  std::string run_as;
  // Members may cancel each other's jobs (served control plane; default: only the owner).
  bool members_cancel = false;
  // Fair share inside the group: members' weights and limits (identities not listed weigh
  // 1000, unlimited). The group's pending jobs go in order of their identity's decayed usage
  // over weight (after priority), and a member at its limit waits (step Admission).
  // (Members' limits count against the group's own.)
  std::vector<MemberSpec> members{};
  // Quota per GPU model (ModelQuota); empty: only the totals. Their reservations sum to at most
  // reservation.gpu_milli.
  std::vector<ModelQuota> models{};
  // Quota per pool (PoolQuota); empty: none. Their reservations sum to at most
  // reservation.gpu_milli.
  std::vector<PoolQuota> pools{};
};

struct PoolSpec {
  std::string name;
  std::vector<AllocationForm> forms;  // what devices of this pool may be granted as
};

// What a job of a queue receives. GPU amounts are per device: gpu_count devices, each with
// gpu_milli compute (1000 = a whole device) and gpu_memory_mib memory (0 = unconstrained).
// cpu_milli and memory_mib are per device too for GPU jobs (a count-4 job receives 4x).
struct ProfileSpec {
  std::string name;
  int gpu_count = 1;
  MilliGpu gpu_milli = kWholeGpu;
  MiB gpu_memory_mib = 0;
  MilliCpu cpu_milli = 0;
  MiB memory_mib = 0;
  std::vector<AllocationForm> forms;  // acceptable, in order of preference; empty = any
  std::vector<std::string> pools;     // pools to draw from; empty = every pool
  int max_gpus = 0;                   // the most a job may ask for; 0 = no cap of its own
  MiB max_gpu_memory_mib = 0;         // the most per device a job may ask for; 0 = no cap
};

struct QueueSpec {
  std::string name;
  std::string profile;
  std::vector<std::string> groups;  // groups allowed to submit
  int priority = 0;                 // higher runs first
  bool preemptible = false;
  WorkloadClass default_class = WorkloadClass::kBatch;
  // Placed by another scheduler (Slurm, PBS, Kubernetes): the cycle admits its jobs against the
  // same limits and charges their request, but places nothing on the engine's nodes.
  bool external = false;
  // The external scheduler whose capacity its jobs share (e.g. "kubernetes"). Once that pool's
  // GPU capacity is known (SetExternalCapacity), admission keeps within it, and a group below
  // its reservation reclaims from borrowers of the pool (preempted: suspended by the server).
  // "" : unbounded, never preempted (Slurm, PBS).
  std::string external_pool{};
  // Several backends behind the queue (`backends: [a, b, c]`, in preference order; issue 39):
  // each job goes to the pool with the earliest predicted start (forecast.h), the first on a
  // tie. Empty: the one external_pool above.
  std::vector<std::string> external_pools{};
  // Swapping (the cap library moves idle shares' memory off the card, src/capgpu/swap.h): the
  // caps of this queue's shares on one device may sum to this percent of its memory (and their
  // compute weights to this percent of the device). 0: no swapping; caps fit the memory.
  // Devices hold shares of one overcommit only, so a share that cannot be swapped never sits
  // where the memory is overcommitted. Set from the server config's queue `swap`/`overcommit`.
  int swap_overcommit_percent = 0;
  // The least isolation its shares accept (model/isolation.h: 0 none ... 4 hardware; set from
  // the server config's queue `isolation`): a share is placed only on a device whose grade
  // (QuotaEngine::SetDeviceIsolation) is at least this. Whole devices and partitions are
  // hardware and always meet it.
  int min_isolation = 0;
  // Compute mode of its shares (issue 38; the server config's queue `compute` and
  // `compute_percent`): 0 is time-slicing (the default: shares take turns on the whole card);
  // 1 to 100 is sm-sharing through MPS, each share's active-thread percentage. A share of an
  // sm-sharing queue goes only on a device that offers MPS (QuotaEngine::SetDeviceMps), where
  // the sm-sharing shares' percentages sum to at most 100 with it: the ceiling each one gets is
  // then a floor too. A device holds shares of one compute mode at a time (docs/scheduling.md).
  int compute_percent = 0;
  // Runtime guards, in seconds (0: none). max_runtime_s: a running job is stopped once it has
  // run this long (a kStopped event says why). min_runtime_s: a running job is no preemption
  // victim (reclaim, priority, drain for a repartition) before it has run this long.
  // preemption_delay_s: a waiting job may preempt (reclaim, priority, drain) only once it has
  // waited this long since it was submitted or last went back to pending.
  int64_t max_runtime_s = 0;
  int64_t min_runtime_s = 0;
  int64_t preemption_delay_s = 0;
  // Idle holdings given back (0: never). A running job held but idle (no activity, as its
  // agent reports it: QuotaEngine::SetIdle) for idle_timeout_s: a share of a swapping queue
  // (swap_overcommit_percent > 0) is swapped out and keeps running; anything else is requeued
  // (idle_action kRequeue: stopped and back to pending, as a preemption) or stopped for good
  // (kStop: ended, not requeued). The event names the idle time.
  int64_t idle_timeout_s = 0;
  enum class IdleAction { kRequeue, kStop };
  IdleAction idle_action = IdleAction::kRequeue;
  // Preemption by swapping: a share of a swapping queue preempted by reclaim or priority is held
  // swapped out (paused, its memory in host RAM or on disk within its node's swap budget) and
  // resumes on its device when capacity returns; held this long (seconds) it is stopped instead.
  // 0: held until it resumes.
  int64_t swap_hold_limit_s = 0;
  // GPU models its jobs accept, in order of preference ("H100-80GB", then "A100-80GB"): a job
  // is placed on the first model with room (and quota), spilling to the next when it is full.
  // A family ("H100") accepts any of its models at that place in the order. Empty: any model.
  std::vector<std::string> models{};
};

// Class -> forms, in order of preference. The default: training gets whole devices; inference
// the smallest hardware partition covering it; interactive and ci capped shares; batch whole
// devices, else shares.
struct ClassForms {
  std::array<std::vector<AllocationForm>, kClassCount> table;
  static ClassForms Default();
  const std::vector<AllocationForm>& of(WorkloadClass c) const {
    return table[static_cast<int>(c)];
  }
};

struct PolicySpec {
  std::vector<GroupSpec> groups;
  std::vector<PoolSpec> pools;
  std::vector<ProfileSpec> profiles;
  std::vector<QueueSpec> queues;
  ClassForms class_forms = ClassForms::Default();

  int64_t grace_seconds = 0;              // a preempted job keeps its slot this long
  int64_t fair_share_half_life_s = 3600;  // decay of past usage in the fair-share key
  bool repartition = true;                // may the cycle change partition layouts
  int64_t repartition_horizon_s = 3600;   // demand served is valued over this horizon
  int max_repartitions_per_cycle = 8;
  // Which node and device(s) a whole-device or share grant takes: a placement-core policy
  // (sched/policy.h: tessera, fgd, bestfit, packing, ...), or "nextfit" for the cycle's own
  // next-fit / best-fit search. The policy chooses among the devices the cycle may use; what it
  // cannot place (backfill onto devices kept for a waiting job) falls back to the cycle's search.
  std::string placement = "tessera";
  int max_preemption_searches_per_cycle = 64;
};

// Checks names (unique, non-empty, references resolve), amounts (non-negative, reservation
// within limit, children's reservations within the parent's, weights positive), profiles
// (count and fraction consistent) and the class table. The error names the field.
Status Validate(const PolicySpec& policy);

// The forms a job may get: the class's forms in the table's order, kept when the profile
// accepts them. With `asked`, that one form if allowed, else kInvalidArgument naming what is.
Result<std::vector<AllocationForm>> FormsFor(const PolicySpec& policy, const ProfileSpec& profile,
                                             WorkloadClass cls,
                                             std::optional<AllocationForm> asked);

}  // namespace tessera::quota
