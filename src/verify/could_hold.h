// "Could this waiting job be held right now?", answered by brute force over the devices as the
// engine's views show them, for the property checker (checker.h). Deliberately independent of
// the scheduler's fit code (src/sched): its own reading of the policy (forms, pools, profiles),
// of the GPU catalog (MIG starts, AMD pairs) and of occupancy. Conservative: a gang is held only
// on one node, a partition only in the smallest covering profile, a share only where compute
// and memory both fit; what it cannot show holdable is reported as not holdable.
//
// Thread-safety: value types and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/cluster.h"
#include "partition/catalog.h"
#include "sched/quota/engine.h"
#include "sched/quota/policy_model.h"

namespace tessera::verify {

// A job's request as the policy resolves it.
struct Want {
  std::string id;
  int group = -1;
  int priority = 0;
  bool preemptible = false;
  std::vector<AllocationForm> forms;  // in order
  std::vector<std::string> pools;     // empty: every pool
  std::vector<std::string> models{};  // its queue's GPU models (catalog names); empty: any
  int count = 1;
  MilliGpu milli = kWholeGpu;
  MiB gpu_mem = 0;
  MilliCpu cpu = 0;  // per device
  MiB mem = 0;       // per device
  bool external = false;
  bool valid = false;        // resolved (known queue and profile)
  int64_t walltime = 0;      // declared run time; 0 = none
  int64_t idle_timeout = 0;  // its queue's (guard.idle); 0 = none
  bool idle_stop = false;    // its queue's idle_action is stop (else requeue, or a swap)
  // Its queue's runtime guards, in seconds (0: none): max_runtime (queues placed here only),
  // min_runtime (no victim younger), preemption_delay (preempts only after waiting this long).
  int64_t max_runtime = 0, min_runtime = 0, preemption_delay = 0;
  std::string identity;
};

struct DeviceInfo {
  int node = 0;
  int index = 0;
  const partition::GpuModel* model = nullptr;  // null outside the catalog
  MiB memory = 0;
  bool registered_split = false;  // the node came with this device split (the operator's)
  std::string name;               // "node/3"
};

struct NodeInfo {
  std::string name, pool;
  MilliCpu cpu = 0;
  MiB mem = 0;
  std::vector<int> devices;  // into World::devices
  std::string model{};       // its GPU model: the catalog's name, else gpu_model as given
};

// What does not change: the policy and the nodes.
struct World {
  quota::PolicySpec policy;
  std::vector<NodeInfo> nodes;
  std::vector<DeviceInfo> devices;
  std::vector<int> parent;  // per group, -1 at the top
  std::vector<std::string> group_names;

  static World Make(const quota::PolicySpec& policy, const std::vector<quota::NodeSpec>& nodes);
  int GroupIndex(const std::string& name) const;
  bool PoolAllows(const std::string& pool, AllocationForm f) const;
  Want Resolve(const quota::JobSpec& spec) const;
};

// One holder on a device.
struct Holding {
  int job = -1;
  AllocationForm form = AllocationForm::kWhole;
  std::string slot;  // partition name, empty for whole and shares
  MilliGpu compute = 0;
  MiB memory = 0;
};

struct DeviceNow {
  bool mig = false;
  std::string amd_pair;
  std::vector<quota::SlotView> slots;
  bool draining = false;
  std::vector<Holding> holders;
  // A counterfactual's (backfill.head): split as its operator registered it, not free whole.
  bool as_registered = false;
  // Its mode changed by the engine since registration: split by the engine since, which may
  // return it to whole when it is idle (the operator's layout no longer stands).
  bool owned = false;
  // Shares held swapped out here: their processes stay (paused), and they resume only here, so
  // it takes shares beside them but is never free whole, nor split under them.
  std::vector<int> held{};
};

struct JobNow {
  quota::JobState state = quota::JobState::kPending;
  int group = -1;
  Resources charge;  // from its grants
  std::vector<quota::GrantView> grants;
  std::optional<AllocationForm> form;
  bool borrowed = false;
  int64_t start = -1;         // while running: when it started
  int64_t idle_since = -1;    // while running and reported idle
  bool swapped_out = false;   // its idle_timeout swapped it out
  int held_on = -1;           // pending, held swapped out (preempted by swapping): its device
  bool at_admission = false;  // pending, held at a limit (its wait step is Admission)
};

// Everything the checks read, as of one instant.
struct Snapshot {
  std::vector<DeviceNow> devices;
  std::vector<MilliCpu> cpu_free;
  std::vector<MiB> mem_free;
  std::vector<bool> down;
  std::vector<JobNow> jobs;       // by handle
  std::vector<Resources> usage;   // per group, itself and descendants, running and leaving
  std::vector<MilliGpu> staying;  // per group: GPU of running (not leaving) jobs, with descendants
  std::vector<MilliGpu>
      guaranteed;  // the same, of jobs admitted within the reservation (not borrowed)
  // Per group, per GPU model (NodeInfo::model): GPU held, running and leaving, and running only.
  std::vector<std::map<std::string, MilliGpu>> model_usage, model_staying;
  // The same per pool (NodeInfo::pool).
  std::vector<std::map<std::string, MilliGpu>> pool_usage, pool_staying;

  static Snapshot Take(const World& w, const quota::QuotaEngine& e, const std::vector<bool>& down);
};

// An idle device the engine may return to whole (it split it; the operator did not).
bool Returnable(const World& w, const Snapshot& s, int device);

// Free as a whole device, ignoring the jobs in `gone`: nothing on it, no layout change under
// way, and not split unless the engine split it (then it may return it).
bool WholeFree(const World& w, const Snapshot& s, int d, const std::vector<bool>& gone);

// Whether `want` could be held on the snapshot's free capacity, ignoring the jobs in `gone`
// (as if they had left), in any of its forms. `why` (optional) receives where.
// A share held swapped out (`held_on`, a device; -1: none) resumes only where it was held.
bool CouldHold(const World& w, const Snapshot& s, const Want& want, const std::vector<bool>& gone,
               std::string* where = nullptr, int held_on = -1);

// The MIG profile the engine offers for a partition request: the smallest covering memory and
// compute (not "+me"); nullptr when none.
const partition::MigProfile* SmallestCovering(const partition::GpuModel& m, MilliGpu milli,
                                              MiB mem);

}  // namespace tessera::verify
