// Node administration: an administrator cordons a node or one of its devices (no new work lands
// there), drains it (no new work, and what runs there is preempted, through the policy's grace as
// any preemption, and requeued to run elsewhere) or uncordons it (it takes work again).
//
//   POST /v1/nodes/{node}/cordon|drain|uncordon  {"device": N}?  ─► setting "node.admin/NODE"
//     ─► Schedulable() per device ─► the quota engine (SetDeviceClosed, SetNodeDown)
//     ─► drain: Evict each job held there ─► job.preempted, stop orders, then job.requeued
//
// The state is durable (a setting per node, written before anything acts on it) and survives
// restarts and reloads; node.cordoned, node.drained and node.uncordoned events name who did it.
// A node's own state covers its devices; a device's own state (set by acting on NODE:DEVICE)
// overrides the node's for that device. Draining reads "drained" once nothing is held there.
//
// Schedulable() (api/recovery.h) is the one place that decides whether a device may take new work
// (the node is known and up, the device healthy, and neither it nor the device is cordoned or
// draining); ApplySchedulable tells the quota engine, and is called whenever an input of the
// decision changes.
#include <algorithm>

#include "api/engine.h"
#include "api/recovery.h"
#include "common/log.h"

namespace tessera::api {

using Admin = NodeAdminTable::State;

bool Schedulable(const NodeInfo& n, const NodeAdminTable& admin, int device) {
  if (n.lost) return false;
  // A device its agent reports unhealthy (AgentExecutor::RecordHealthLocked, agent_reports.cc).
  if (device >= 0 && device < static_cast<int>(n.devices.size()) && !n.devices[device].healthy)
    return false;
  return admin.Of(n.name, device) == Admin::kActive;
}

void ApplySchedulable(quota::QuotaEngine& qe, const NodeInfo& n, const NodeAdminTable& admin) {
  // The node as a whole (its CPU-only work too) is down while lost, or cordoned as a whole with
  // none of its devices opened on its own: `uncordon NODE:DEVICE` opens that device, and the node
  // is then up for it and for CPU-only work; its other devices stay closed.
  bool opened = false;
  for (const DeviceInfo& d : n.devices) opened = opened || Schedulable(n, admin, d.index);
  qe.SetNodeDown(n.name, n.lost || (admin.Of(n.name, -1) != Admin::kActive && !opened));
  for (const DeviceInfo& d : n.devices) {
    qe.SetDeviceClosed(n.name, d.index, !Schedulable(n, admin, d.index));
  }
}

namespace {

// The node as GET /v1/nodes shows it.
Result<Json> NodeView(Views& views, const Identity& who, const std::string& node) {
  auto all = views.Nodes(who);
  if (!all.ok()) return all.status();
  for (Json& n : (*all)["nodes"]) {
    if (n["name"] == node) return n;
  }
  return Status::NotFound("no node '" + node + "'");
}

}  // namespace

Result<Json> Engine::AdminNode(const Identity& who, const std::string& node,
                               const std::string& action, int device) {
  if (who.role != Role::kAdmin)
    return Status::PermissionDenied("only admins cordon, drain or uncordon nodes");
  Admin to = Admin::kActive;
  const char* kind = "";
  if (action == "cordon") {
    to = Admin::kCordoned, kind = "node.cordoned";
  } else if (action == "drain") {
    to = Admin::kDraining, kind = "node.drained";
  } else if (action == "uncordon") {
    to = Admin::kActive, kind = "node.uncordoned";
  } else {
    return Status::InvalidArgument("unknown node action '" + action +
                                   "' (one of cordon, drain, uncordon)");
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (!broken_.ok()) return broken_;
  const auto& nodes = agents_.NodesLocked();
  auto nit = nodes.find(node);
  if (nit == nodes.end()) return Status::NotFound("no node '" + node + "'");
  const std::string subject = device >= 0 ? node + ":" + std::to_string(device) : node;
  if (device >= 0) {
    const auto& devs = nit->second.devices;
    if (std::none_of(devs.begin(), devs.end(),
                     [&](const DeviceInfo& d) { return d.index == device; })) {
      return Status::NotFound("node '" + node + "' has no device " + std::to_string(device) +
                              " (it has " + std::to_string(devs.size()) + ")");
    }
  }
  // Durable before anything acts on it (a restart finds it; the quota engine follows memory).
  const NodeAdminTable::Change change = admin_.Plan(node, device, to);
  // Already so: nothing to store or say (uncordon still returns an unhealthy device).
  const bool unhealthy = std::any_of(
      nit->second.devices.begin(), nit->second.devices.end(),
      [&](const DeviceInfo& d) { return !d.healthy && (device < 0 || d.index == device); });
  if (!admin_.Changes(change) && (to != Admin::kActive || !unhealthy)) {
    lock.unlock();
    return NodeView(views_, who, node);
  }
  if (Status st = store_->PutSetting(change.key, change.value); !st.ok()) return st;
  admin_.Apply(change);
  Batch b;
  // Uncordon is also the word that returns an unhealthy device (docs/nodes.md).
  if (to == Admin::kActive) agents_.ClearHealthLocked(node, device, who.name, b);
  ApplySchedulable(*qe_, nit->second, admin_);
  Json stopped = Json::array();
  if (to == Admin::kDraining) {
    // What is held there is preempted as any preemption is (job.preempted, the agent's stop order
    // and the policy's grace), then pending again with its submit time: it runs elsewhere.
    const std::string why = "drain of " + subject + " by " + who.name;
    const size_t mark = qe_->events().size();
    const std::vector<std::string> held = jobs_.OnNode(node);  // a copy: the walk changes jobs
    for (const std::string& id : held) {
      Job& j = jobs_.Get(id);
      if (j.state == JobState::kPreempting || j.handle < 0) continue;
      // Held swapped out there too: it would wait for the drained card until its hold limit.
      const bool held_here = j.state == JobState::kPending && j.agent.swap.held_on == node &&
                             (device < 0 || j.agent.swap.held_device == device);
      const bool there =
          held_here || std::any_of(j.grants.begin(), j.grants.end(), [&](const auto& g) {
            return g.node == node && (device < 0 || g.device == device);
          });
      if (!there) continue;
      qe_->Evict(j.handle, NowS(), why);
      stopped.push_back(id);
    }
    cycle_.TranslateLocked(mark, b);
  }
  Json data = {{"node", node}};
  if (device >= 0) data["device"] = device;
  if (to == Admin::kDraining) data["jobs"] = stopped;
  b.Add(EventAt(clock_(), who.name, kind, subject, "by " + who.name, data), nullptr);
  b.Touch({node});
  cycle_.pacer().Want();
  static const log::Logger kLog("engine");
  kLog.Info(std::string(kind), {{"node", subject}, {"by", who.name}});
  if (Status st = CommitLocked(b, lock); !st.ok()) return st;
  lock.unlock();
  return NodeView(views_, who, node);
}

}  // namespace tessera::api
