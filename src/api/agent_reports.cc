// What the agents report, applied to the engine's state: device isolation, device health (an
// unhealthy device's jobs preempted or finished), device telemetry, and running jobs' activity
// (idle or active, swap state), from registrations and heartbeats (agent_gateway.cc).
#include <algorithm>
#include <string>
#include <vector>

#include "api/agent_executor.h"
#include "api/recovery.h"
#include "common/log.h"
#include "model/isolation.h"
#include "model/quantity.h"

namespace tessera::api {

void ApplyIsolation(quota::QuotaEngine& qe, const NodeInfo& n) {
  for (const DeviceInfo& d : n.devices) {
    const int rank = IsolationRank(d.isolation);
    if (rank >= 0) qe.SetDeviceIsolation(n.name, d.index, rank);
    qe.SetDeviceMps(n.name, d.index, d.mps);
  }
}

void AgentExecutor::RecordHealthLocked(NodeInfo& n, const Json& devices, const std::string& actor,
                                       Batch& b) {
  bool changed = false;
  for (const auto& d : devices) {
    if (!d.is_object() || !d.contains("health") || !d.contains("index")) continue;
    const int index = d["index"].get<int>();
    if (index < 0 || index >= static_cast<int>(n.devices.size())) continue;
    DeviceInfo& dev = n.devices[index];
    const bool healthy = d["health"] == "ok";
    const std::string reason = healthy ? "" : d.value("health_reason", std::string("unhealthy"));
    // An administrator returned the device: the agent's old reason is the one cleared (it may not
    // have heard yet, or be older than health_reset); ok or another reason ends that.
    if (!healthy && !dev.health_cleared.empty() && reason == dev.health_cleared) continue;
    dev.health_cleared.clear();
    if (healthy) dev.health_reset = false;
    if (healthy == dev.healthy && reason == dev.health_reason) continue;
    const bool was = dev.healthy;
    dev.healthy = healthy;
    dev.health_reason = reason;
    if (was == healthy) continue;  // still unhealthy, another reason: the first one's event stands
    changed = true;
    const std::string subject = n.name + ":" + std::to_string(index);
    Json data = {{"node", n.name}, {"device", index}, {"uuid", dev.uuid}};
    if (healthy) {
      b.Add(EventAt(port_->NowMs(), actor, "device.healthy", subject, "healthy again", data),
            nullptr);
      continue;
    }
    // Its jobs are preempted as any preemption is (the agent's stop order, the policy's grace),
    // then pending again with their submit time: they run elsewhere. The device's event first,
    // then theirs.
    std::vector<std::string> stopped;
    if (config_.unhealthy_requeue) {
      for (const std::string& id : port_->Jobs().OnNode(n.name)) {
        const Job& j = port_->Jobs().Get(id);
        if (j.state == JobState::kPreempting || j.handle < 0) continue;
        if (std::any_of(j.grants.begin(), j.grants.end(),
                        [&](const auto& g) { return g.node == n.name && g.device == index; }))
          stopped.push_back(id);
      }
    }
    data["jobs"] = stopped;
    data["policy"] = config_.unhealthy_requeue ? "requeue" : "finish";
    b.Add(EventAt(port_->NowMs(), actor, "device.unhealthy", subject, reason, data), nullptr);
    for (const std::string& id : stopped)
      port_->Evict(port_->Jobs().Get(id), "device " + subject + " unhealthy: " + reason, b);
    static const log::Logger kLog("engine");
    kLog.Warn("device unhealthy", {{"device", subject}, {"reason", reason}});
  }
  if (!changed) return;
  port_->SetSchedulable(n);
  b.Touch({n.name});
  port_->WantCycle();
}

// An administrator's word (uncordon of NODE, or of NODE:DEVICE when device >= 0): the unhealthy
// devices there are healthy again, each with a device.healthy event naming who and the reason
// cleared; their agent is told to start over (health_reset) with the heartbeat replies.
void AgentExecutor::ClearHealthLocked(const std::string& node, int device, const std::string& who,
                                      Batch& b) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  NodeInfo& n = it->second;
  for (DeviceInfo& dev : n.devices) {
    if (dev.healthy || (device >= 0 && dev.index != device)) continue;
    dev.healthy = true;
    dev.health_cleared = dev.health_reason.empty() ? "unhealthy" : dev.health_reason;
    dev.health_reset = true;
    dev.health_reason.clear();
    const std::string subject = n.name + ":" + std::to_string(dev.index);
    b.Add(EventAt(port_->NowMs(), who, "device.healthy", subject, "returned by " + who,
                  {{"node", n.name},
                   {"device", dev.index},
                   {"uuid", dev.uuid},
                   {"by", who},
                   {"cleared", dev.health_cleared}}),
          nullptr);
    static const log::Logger kLog("engine");
    kLog.Info("device returned", {{"device", subject}, {"by", who}});
  }
}

// A heartbeat's device telemetry (`devices`: [{index, util_pct, memory_used_mib}]) on n.
void AgentExecutor::RecordTelemetryLocked(NodeInfo& n, const Json& body) {
  for (const auto& d : body.value("devices", Json::array())) {
    const int index = d["index"].get<int>();
    if (index >= static_cast<int>(n.devices.size())) continue;
    DeviceInfo& dev = n.devices[index];
    dev.util_pct = d.value("util_pct", -1);
    dev.memory_used_mib = d.value("memory_used_mib", MiB{-1});
    dev.telemetry_ms = port_->NowMs();
  }
}

// A running job's activity report: the last active time, and the change to or from "held but
// idle" (no activity for idle_after) as a job.idle / job.active event. Its data carry the times
// that `tessera usage` needs to count idle holding exactly from the event log.
void AgentExecutor::ObserveActivityLocked(const Job& j, const Json& report,
                                          const std::string& actor, Batch& b) {
  Job::AgentSide& side = port_->AgentSideOf(j);
  const bool held =
      j.state == JobState::kPending && !side.swap.held_on.empty();  // swapped out, paused
  if (j.state != JobState::kRunning && !held) return;
  if (report.contains("gpu_memory_used_mib"))
    side.activity.gpu_memory_used_mib = report["gpu_memory_used_mib"].get<MiB>();
  if (report.contains("swap")) {
    // A swapping share's state: every change is an event (swapped out, resuming, back).
    const std::string state = report["swap"].get<std::string>();
    const MiB swapped = report.value("swapped_mib", MiB{0});
    if (state != side.swap.state) {
      std::string detail = state == "swapped"
                               ? "swapped out: " + std::to_string(swapped) + " MiB off the device"
                           : state == "resuming" ? "resuming: waiting for room on the device"
                           : state == "resident" ? "back on the device"
                                                 : state;
      b.Add(EventAt(port_->NowMs(), actor, "job.swap", j.rec.id, detail,
                    {{"from", side.swap.state.empty() ? "resident" : side.swap.state},
                     {"to", state},
                     {"swapped_mib", swapped}}),
            nullptr);
      side.swap.state = state;
    }
    side.swap.swapped_mib = swapped;
  }
  if (held || !report.contains("active")) return;  // no telemetry: never judged idle
  const int64_t now = port_->NowMs();
  if (side.activity.last_active_ms == 0) side.activity.last_active_ms = now;
  if (report["active"].get<bool>()) {
    if (side.activity.idle) {
      side.activity.idle = false;
      if (j.handle >= 0) port_->SetIdle(j, -1);  // its queue's idle_timeout starts over
      if (side.swap.order == "idle") side.swap.order.clear();  // in use again: back by itself
      b.Add(EventAt(port_->NowMs(), actor, "job.active", j.rec.id,
                    "activity again after " +
                        std::to_string((now - side.activity.last_active_ms) / 1000) + "s idle",
                    {{"at_ms", now}, {"idle_since_ms", side.activity.last_active_ms}}),
            nullptr);
    }
    side.activity.last_active_ms = now;
    return;
  }
  if (!side.activity.idle && now - side.activity.last_active_ms >= config_.idle_after_ms) {
    side.activity.idle = true;
    // Its queue's idle_timeout counts from the last activity (the quota engine gives it back).
    if (j.handle >= 0) port_->SetIdle(j, side.activity.last_active_ms / 1000);
    b.Add(EventAt(port_->NowMs(), actor, "job.idle", j.rec.id,
                  "held but idle: no activity for " +
                      std::to_string((now - side.activity.last_active_ms) / 1000) + "s",
                  {{"since_ms", side.activity.last_active_ms}}),
          nullptr);
  }
}

}  // namespace tessera::api
