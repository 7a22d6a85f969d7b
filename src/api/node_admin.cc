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
// Schedulable() is the one place that decides whether a device may take new work (the node is
// known and up, and neither it nor the device is cordoned or draining); ApplySchedulableLocked
// tells the quota engine, and is called whenever an input of the decision changes.
#include <algorithm>

#include "api/engine.h"
#include "common/log.h"

namespace tessera::api {
namespace {

const char* AdminName(int a) {
  static const char* kNames[] = {"active", "cordoned", "draining"};
  return kNames[a];
}

Result<int> ParseAdmin(const std::string& s) {
  for (int a = 0; a < 3; ++a) {
    if (s == AdminName(a)) return a;
  }
  return Status::InvalidArgument("unknown node state '" + s + "'");
}

}  // namespace

Engine::Admin Engine::AdminOf(const std::string& node, int device) const {
  auto it = admin_.find(node);
  if (it == admin_.end()) return Admin::kActive;
  if (device >= 0) {
    auto d = it->second.devices.find(device);
    if (d != it->second.devices.end()) return d->second;
  }
  return it->second.node;
}

std::string Engine::AdminStateName(const std::string& node, int device, bool holds) const {
  const Admin a = AdminOf(node, device);
  if (a == Admin::kDraining && !holds) return "drained";
  return AdminName(static_cast<int>(a));
}

bool Engine::Schedulable(const std::string& node, int device) const {
  auto n = nodes_.find(node);
  if (n == nodes_.end() || n->second.lost) return false;
  // A device its agent reports unhealthy (agent_gateway.cc, RecordHealthLocked).
  if (device >= 0 && device < static_cast<int>(n->second.devices.size()) &&
      !n->second.devices[device].healthy)
    return false;
  return AdminOf(node, device) == Admin::kActive;
}

void Engine::ApplySchedulableLocked(const std::string& node) {
  auto n = nodes_.find(node);
  if (n == nodes_.end()) return;
  // The node as a whole (its CPU-only work too) is down while lost or cordoned as a whole.
  qe_->SetNodeDown(node, n->second.lost || AdminOf(node, -1) != Admin::kActive);
  for (const DeviceInfo& d : n->second.devices) {
    qe_->SetDeviceClosed(node, d.index, !Schedulable(node, d.index));
  }
}

Status Engine::LoadNodeAdminLocked() {
  admin_.clear();
  auto stored = store_->ListSettings(kNodeAdminKey);
  if (!stored.ok()) return stored.status();
  const size_t prefix = std::string(kNodeAdminKey).size();
  for (const auto& [key, value] : *stored) {
    const Status corrupt = Status::Internal("stored node state '" + key + "' is corrupt");
    Json j = Json::parse(value, nullptr, false);
    if (!j.is_object() || !j.value("state", Json()).is_string()) return corrupt;
    Result<int> state = ParseAdmin(j["state"].get<std::string>());
    if (!state.ok()) return corrupt;
    NodeAdmin a;
    a.node = static_cast<Admin>(*state);
    const Json devices = j.value("devices", Json::object());
    if (!devices.is_object()) return corrupt;
    for (const auto& [index, s] : devices.items()) {
      if (!s.is_string() || index.empty() || index.size() > 4 ||
          index.find_first_not_of("0123456789") != std::string::npos)
        return corrupt;
      Result<int> ds = ParseAdmin(s.get<std::string>());
      if (!ds.ok()) return corrupt;
      a.devices[std::stoi(index)] = static_cast<Admin>(*ds);
    }
    if (a.node != Admin::kActive || !a.devices.empty()) admin_[key.substr(prefix)] = a;
  }
  return Status::Ok();
}

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
  auto nit = nodes_.find(node);
  if (nit == nodes_.end()) return Status::NotFound("no node '" + node + "'");
  const std::string subject = device >= 0 ? node + ":" + std::to_string(device) : node;
  if (device >= 0) {
    const auto& devs = nit->second.devices;
    if (std::none_of(devs.begin(), devs.end(),
                     [&](const DeviceInfo& d) { return d.index == device; })) {
      return Status::NotFound("node '" + node + "' has no device " + std::to_string(device) +
                              " (it has " + std::to_string(devs.size()) + ")");
    }
  }
  NodeAdmin next = admin_.count(node) ? admin_[node] : NodeAdmin{};
  if (device < 0) {
    next.node = to;
    next.devices.clear();  // the whole node: every device follows it again
  } else if (to == next.node) {
    next.devices.erase(device);
  } else {
    next.devices[device] = to;
  }
  // Durable before anything acts on it (a restart finds it; the quota engine follows memory).
  Json saved = {{"state", AdminName(static_cast<int>(next.node))}, {"devices", Json::object()}};
  for (const auto& [d, a] : next.devices)
    saved["devices"][std::to_string(d)] = AdminName(static_cast<int>(a));
  if (Status st = store_->PutSetting(kNodeAdminKey + node, saved.dump()); !st.ok()) return st;
  if (next.node == Admin::kActive && next.devices.empty()) {
    admin_.erase(node);
  } else {
    admin_[node] = next;
  }
  Batch b;
  // Uncordon is also the word that returns an unhealthy device (docs/nodes.md).
  if (to == Admin::kActive) ClearHealthLocked(nit->second, device, who.name, b);
  ApplySchedulableLocked(node);
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
      const bool there = std::any_of(j.grants.begin(), j.grants.end(), [&](const auto& g) {
        return g.node == node && (device < 0 || g.device == device);
      });
      if (!there) continue;
      qe_->Evict(j.handle, NowS(), why);
      stopped.push_back(id);
    }
    TranslateLocked(mark, b);
  }
  Json data = {{"node", node}};
  if (device >= 0) data["device"] = device;
  if (to == Admin::kDraining) data["jobs"] = stopped;
  b.Add(MakeEvent(who.name, kind, subject, "by " + who.name, data), nullptr);
  b.Touch({node});
  cycle_wanted_ = true;
  static const log::Logger kLog("engine");
  kLog.Info(std::string(kind), {{"node", subject}, {"by", who.name}});
  if (Status st = CommitLocked(b, lock); !st.ok()) return st;
  lock.unlock();
  auto all = NodesNow(who);
  if (!all.ok()) return all.status();
  for (Json& n : (*all)["nodes"]) {
    if (n["name"] == node) return n;
  }
  return Status::NotFound("no node '" + node + "'");
}

}  // namespace tessera::api
