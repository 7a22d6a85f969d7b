// Recovery: memory from what is durable. On open, and after a write failed (memory ran ahead of
// the store), a new memory is built from the store alone: the quota engine made anew with the
// fair-share history, the nodes from their inventories with their cordons and drains, the live
// jobs re-entered (held ones with their grants, partitions made again; pending ones in submit
// order) and the partition drains in progress resumed. The engine installs it only once it is
// whole (Engine::Load): a load that fails half-way installs nothing it read, and memory that ran
// ahead of the store is dropped all the same (nothing is served until a reload succeeds).
//
// Pure but for the store reads: no engine, no lock. A job the policy can no longer schedule (its
// queue is gone, say) is loaded failed, with the reason, and listed for the next Tick to record.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "api/config.h"
#include "api/job_table.h"
#include "api/node_admin_table.h"
#include "api/records.h"
#include "common/status.h"
#include "sched/quota/engine.h"
#include "store/store.h"

namespace tessera::api {

// The engine's memory, as the store says it is.
struct Memory {
  std::unique_ptr<quota::QuotaEngine> quota;
  JobTable jobs;
  std::map<std::string, NodeInfo> nodes;  // by name; heard at the load (a fresh window each)
  NodeAdminTable admin;                   // cordons and drains
  std::vector<quota::QuotaEngine::Drain> drains;  // the partition drains as last committed
  std::vector<std::string> failed_on_load;        // ended by the load: written by the next Tick
};

// `now_ms`: the wall clock; `heard_mono_ms`: the monotonic time every node counts as heard at.
// `restore_fair_share`: the stored fair-share history into the new quota engine.
Result<Memory> Recover(store::Store& store, const EngineConfig& config, int64_t now_ms,
                       int64_t heard_mono_ms,
                       const std::function<Status(quota::QuotaEngine&)>& restore_fair_share);

// A stored inventory (the setting "node/NAME": a registration's body) as a node.
Result<NodeInfo> NodeOfInventory(const std::string& key, const std::string& inventory);

// Whether device `device` of `node` may take new work: the node is known and not lost, the
// device is healthy, and neither the node nor the device is cordoned or draining. The one place
// that decides it (node_admin.cc).
bool Schedulable(const NodeInfo& n, const NodeAdminTable& admin, int device);
// Tells the quota engine what Schedulable says of `node` and each of its devices; called
// whenever an input of it changes (registration, loss and return, health, cordon, load).
void ApplySchedulable(quota::QuotaEngine& qe, const NodeInfo& n, const NodeAdminTable& admin);
// Tells the quota engine each device's isolation grade and MPS (where its agent said one), for
// the queues that want a minimum (agent_reports.cc).
void ApplyIsolation(quota::QuotaEngine& qe, const NodeInfo& n);

}  // namespace tessera::api
