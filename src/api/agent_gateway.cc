// The node agents' side: registration (a node joins the scheduler's cluster), heartbeats (exits
// and running jobs in; start and stop orders out), node loss, and job output uploads. What the
// agents report about devices and jobs is applied in agent_reports.cc.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <future>
#include <set>

#include "api/engine.h"
#include "common/log.h"
#include "model/agent_protocol.h"
#include "model/isolation.h"
#include "model/quantity.h"

namespace tessera::api {
namespace {

// Agents' messages carry only the fields the protocol names (docs/agent-protocol.md): anything
// else is a 400 naming it, before anything changes.
Status OnlyKnownFields(const Json& obj, std::initializer_list<const char*> known,
                       const std::string& where) {
  for (const auto& [k, v] : obj.items()) {
    bool ok = false;
    for (const char* name : known) ok = ok || k == name;
    if (!ok) return Status::InvalidArgument(where + ": unknown field '" + k.substr(0, 64) + "'");
  }
  return Status::Ok();
}

// A registration's numbers, each within what a real machine could have (so that no sum of
// capacities can overflow).
Status InRange(const Json& obj, const char* key, int64_t max, const std::string& where) {
  if (!obj.contains(key)) return Status::Ok();
  const Json& v = obj[key];
  const bool ok = v.is_number_integer() &&
                  (v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(max)
                                          : v.get<int64_t>() >= 0 && v.get<int64_t>() <= max);
  if (!ok)
    return Status::InvalidArgument(where + "'" + key + "' must be an integer from 0 to " +
                                   std::to_string(max));
  return Status::Ok();
}

// The agent's protocol version (docs/agent-protocol.md, "Versions"): absent is version 1, the
// protocol of agents from before versions; one this server does not serve is refused (409) with
// a message naming both versions.
Status CheckProtocolVersion(const Json& body) {
  if (!body.contains("protocol")) return Status::Ok();
  const Json& v = body["protocol"];
  if (!v.is_number_integer()) return Status::InvalidArgument("'protocol' must be an integer");
  const int64_t version =
      v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX ? INT64_MAX : v.get<int64_t>();
  const std::string refusal = AgentProtocolRefusal(version);
  if (!refusal.empty()) return Status::FailedPrecondition(refusal);
  return Status::Ok();
}

// A device's health (agent protocol 3): "health" is "ok" or "unhealthy", "health_reason" a
// string of at most 1,000 bytes.
Status CheckHealth(const Json& d, const std::string& where) {
  if (d.contains("health") &&
      (!d["health"].is_string() || (d["health"] != "ok" && d["health"] != "unhealthy")))
    return Status::InvalidArgument(where + "'health' must be \"ok\" or \"unhealthy\"");
  if (d.contains("health_reason") &&
      (!d["health_reason"].is_string() || d["health_reason"].get<std::string>().size() > 1000))
    return Status::InvalidArgument(where +
                                   "'health_reason' must be a string of at most 1000 bytes");
  return Status::Ok();
}

Status CheckRegistration(const Json& body) {
  Status st = OnlyKnownFields(body,
                              {"node", "pool", "cpu_milli", "memory_mib", "swap_mib", "simulated",
                               "devices", "cgroups", "running", "finished", "protocol"},
                              "register");
  if (st.ok()) st = InRange(body, "cpu_milli", int64_t{1} << 30, "");   // a million cores
  if (st.ok()) st = InRange(body, "memory_mib", int64_t{1} << 40, "");  // an exbibyte
  if (st.ok()) st = InRange(body, "swap_mib", int64_t{1} << 40, "");
  if (!st.ok() || !body.contains("devices") || !body["devices"].is_array()) return st;
  for (const Json& d : body["devices"]) {
    if (!d.is_object()) return Status::InvalidArgument("each device must be an object");
    st = OnlyKnownFields(d,
                         {"index", "model", "memory_mib", "uuid", "simulated", "mig_enabled",
                          "health", "health_reason", "isolation", "mps"},
                         "register: a device");
    if (st.ok()) st = CheckHealth(d, "a device's ");
    if (st.ok() && d.contains("mps") && !d["mps"].is_boolean())
      st = Status::InvalidArgument("a device's 'mps' must be true or false");
    if (st.ok() && d.contains("isolation") &&
        (!d["isolation"].is_string() || IsolationRank(d["isolation"].get<std::string>()) < 0))
      st = Status::InvalidArgument(
          "a device's 'isolation' must be one of hardware, driver, mps, preload, none");
    if (st.ok()) st = InRange(d, "memory_mib", int64_t{1} << 30, "a device's ");  // a pebibyte
    if (st.ok()) st = InRange(d, "index", 63, "a device's ");
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

// The jobs an agent says it runs as it registers (`running`: [{job}, ...]).
Result<std::set<std::string>> RunningOfRegistration(const Json& body) {
  std::set<std::string> running;
  if (body.contains("running")) {
    if (!body["running"].is_array()) return Status::InvalidArgument("'running' must be a list");
    for (const auto& r : body["running"]) {
      if (!r.is_object() || !r.contains("job") || !r["job"].is_string()) {
        return Status::InvalidArgument("each 'running' entry needs a string 'job'");
      }
      running.insert(r["job"].get<std::string>());
    }
  }
  return running;
}

// A heartbeat's `finished` and `running` lists: entries {job, ...} with integer numbers.
Status CheckHeartbeatJobs(const Json& body) {
  for (const char* key : {"finished", "running"}) {
    if (!body.contains(key)) continue;
    if (!body[key].is_array())
      return Status::InvalidArgument(std::string("'") + key + "' must be a list");
    for (const auto& e : body[key]) {
      if (!e.is_object() || !e.contains("job") || !e["job"].is_string()) {
        return Status::InvalidArgument(std::string("each '") + key +
                                       "' entry needs a string 'job'");
      }
      Status known =
          OnlyKnownFields(e,
                          {"job", "exit_code", "signal", "pid", "output_bytes", "active",
                           "gpu_memory_used_mib", "swap", "swapped_mib", "swapped", "stopped_by"},
                          std::string("heartbeat: a '") + key + "' entry");
      if (!known.ok()) return known;
      // Why the agent stopped a job itself: only "partition" (docs/agent-protocol.md, "Faults").
      if (e.contains("stopped_by") &&
          (std::string(key) != "finished" || e["stopped_by"] != kStoppedByPartition)) {
        return Status::InvalidArgument(std::string("'") + key +
                                       ".stopped_by' must be \"partition\" in a 'finished' entry");
      }
      for (const char* f : {"exit_code", "signal", "pid", "output_bytes"}) {
        if (e.contains(f) && !e[f].is_number_integer()) {
          return Status::InvalidArgument(std::string("'") + key + "." + f + "' must be an integer");
        }
      }
      // Read as int: a value past it would wrap (an exit code of 2^32 read as 0, "succeeded").
      for (const char* f : {"exit_code", "signal"}) {
        if (!e.contains(f)) continue;
        const bool fits = e[f].is_number_unsigned() ? e[f].get<uint64_t>() <= INT32_MAX
                                                    : e[f].get<int64_t>() >= INT32_MIN &&
                                                          e[f].get<int64_t>() <= INT32_MAX;
        if (!fits)
          return Status::InvalidArgument(std::string("'") + key + "." + f + "' is out of range");
      }
    }
  }
  return Status::Ok();
}

// RegisterNode's node and devices from its body, checked (the agent's `running` list aside).
Result<NodeInfo> NodeOfRegistration(const Json& body) {
  auto number = [&](const char* key) -> int64_t {
    return body.contains(key) && body[key].is_number_integer() ? body[key].get<int64_t>() : 0;
  };
  NodeInfo n;
  n.name = body["node"].get<std::string>();
  n.pool = body.contains("pool") && body["pool"].is_string() ? body["pool"].get<std::string>()
                                                             : "default";
  n.cpu_milli = number("cpu_milli");
  n.memory_mib = number("memory_mib");
  n.swap_mib = number("swap_mib");
  n.simulated =
      body.contains("simulated") && body["simulated"].is_boolean() && body["simulated"].get<bool>();
  if (n.cpu_milli <= 0 || n.memory_mib <= 0)
    return Status::InvalidArgument("'cpu_milli' and 'memory_mib' must be positive integers");
  if (body.contains("devices")) {
    if (!body["devices"].is_array()) return Status::InvalidArgument("'devices' must be a list");
    for (const auto& d : body["devices"]) {
      if (!d.is_object()) return Status::InvalidArgument("each device must be an object");
      auto str = [&](const char* key) {
        return d.contains(key) && d[key].is_string() ? d[key].get<std::string>() : "";
      };
      DeviceInfo di{
          d.contains("index") && d["index"].is_number_integer() ? d["index"].get<int>() : -1,
          str("model"),
          d.contains("memory_mib") && d["memory_mib"].is_number_integer()
              ? d["memory_mib"].get<int64_t>()
              : 0,
          str("uuid"),
          d.contains("simulated") && d["simulated"].is_boolean() && d["simulated"].get<bool>()};
      di.isolation = str("isolation");
      di.mps = d.contains("mps") && d["mps"].is_boolean() && d["mps"].get<bool>();
      if (di.model.empty() || di.memory_mib <= 0)
        return Status::InvalidArgument("each device needs 'model' and 'memory_mib'");
      if (di.index != static_cast<int>(n.devices.size()))
        return Status::InvalidArgument("device indices must be 0, 1, 2, ...");
      if (!n.devices.empty() &&
          (di.model != n.devices[0].model || di.memory_mib != n.devices[0].memory_mib)) {
        return Status::InvalidArgument("node '" + n.name + "' mixes GPU models (" +
                                       n.devices[0].model + ", " + di.model +
                                       "): run one agent per model with --node names of their own");
      }
      n.devices.push_back(di);
    }
  }
  if (n.devices.size() > 64) return Status::InvalidArgument("too many devices (at most 64)");
  return n;
}

Status CheckTelemetry(const Json& body) {
  if (body.contains("devices")) {
    if (!body["devices"].is_array()) return Status::InvalidArgument("'devices' must be a list");
    for (const auto& d : body["devices"]) {
      if (!d.is_object() || !d.contains("index"))
        return Status::InvalidArgument("each 'devices' entry needs an 'index'");
      Status st =
          OnlyKnownFields(d, {"index", "util_pct", "memory_used_mib", "health", "health_reason"},
                          "heartbeat: a 'devices' entry");
      if (st.ok()) st = CheckHealth(d, "devices.");
      if (st.ok()) st = InRange(d, "index", 1023, "devices.");
      if (st.ok()) st = InRange(d, "util_pct", 100, "devices.");
      if (st.ok()) st = InRange(d, "memory_used_mib", int64_t{1} << 40, "devices.");
      if (!st.ok()) return st;
    }
  }
  for (const auto& r : body.value("running", Json::array())) {
    if (r.contains("active") && !r["active"].is_boolean())
      return Status::InvalidArgument("'running.active' must be true or false");
    if (Status st = InRange(r, "gpu_memory_used_mib", int64_t{1} << 40, "running."); !st.ok())
      return st;
    if (Status st = InRange(r, "swapped_mib", int64_t{1} << 40, "running."); !st.ok()) return st;
    if (r.contains("swap")) {
      static const std::set<std::string> kStates = {"resident", "swapping-out", "swapped",
                                                    "resuming", "unswappable",  "mixed"};
      if (!r["swap"].is_string() || kStates.count(r["swap"].get<std::string>()) == 0) {
        return Status::InvalidArgument(
            "'running.swap' must be one of resident, swapping-out, swapped, resuming, unswappable, "
            "mixed");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status Engine::SpeaksFor(const Identity& who, const std::string& node, const char* what) {
  if (who.MaySpeakFor(node)) return Status::Ok();
  static const log::Logger kLog("serve");
  kLog.Warn("refused: an identity spoke for a node it is not bound to",
            {{"identity", who.name}, {"action", what}, {"node", node}});
  {
    std::lock_guard<std::mutex> lock(mu_);
    AuditLocked(who.name, "agent.refused", node, std::string("may not ") + what + " for this node",
                {{"action", what}});
  }
  return Status::PermissionDenied("identity '" + who.name + "' may not " + what + " for node '" +
                                  node + "'");
}

Result<Json> Engine::RegisterNode(const Identity& who, const Json& body) {
  if (who.role != Role::kAgent && who.role != Role::kAdmin)
    return Status::PermissionDenied("only agents register nodes");
  if (!body.is_object() || !body.contains("node") || !body["node"].is_string() ||
      body["node"].get<std::string>().empty()) {
    return Status::InvalidArgument("'node' is required");
  }
  if (Status st = ValidateNodeName(body["node"].get<std::string>()); !st.ok()) return st;
  if (Status st = SpeaksFor(who, body["node"].get<std::string>(), "register"); !st.ok()) return st;
  if (Status st = CheckProtocolVersion(body); !st.ok()) return st;
  if (Status st = CheckRegistration(body); !st.ok()) return st;
  if (Status st = CheckHeartbeatJobs(body); !st.ok()) return st;  // its `running`, `finished`
  Result<NodeInfo> parsed = NodeOfRegistration(body);
  if (!parsed.ok()) return parsed.status();
  NodeInfo& n = *parsed;
  Result<std::set<std::string>> running = RunningOfRegistration(body);
  if (!running.ok()) return running.status();
  const quota::NodeSpec spec = SpecOf(n);
  Json inv = body;
  inv["node"] = n.name;
  inv["pool"] = n.pool;
  // Registrations one at a time (the store's inventory and memory's in the same order), and the
  // inventory's fsync outside the engine's mutex: the scheduler checks the inventory first
  // (one it cannot hold is refused and never saved), keeps the node down while it is written,
  // and takes it up once durable, so nothing is placed on an inventory a restart would not find.
  std::unique_lock<std::mutex> registering(register_mu_);
  std::unique_lock<std::mutex> lock(mu_);
  if (!broken_.ok()) return broken_;
  auto added = qe_->AddNode(spec, NowS());
  if (!added.ok())
    return Status::InvalidArgument("node '" + n.name + "': " + added.status().message());
  qe_->SetNodeDown(n.name, true);
  lock.unlock();
  Status st = store_->PutSetting("node/" + n.name, inv.dump());
  lock.lock();
  if (!st.ok()) return ReloadLocked(st);
  // Up (AddNode of the same inventory brings a down node back; after a reload meanwhile, adds it).
  added = qe_->AddNode(spec, NowS());
  if (!added.ok())
    return ReloadLocked(Status::Internal("node '" + n.name + "': " + added.status().message()));
  n.last_heartbeat_ms = clock_();
  n.heard_mono_ms = silence_.Now();
  ApplyIsolationLocked(n);
  auto old = nodes_.find(n.name);
  Batch b;
  b.Add(EventAt(clock_(), who.name, "node.registered", n.name, "",
                {{"devices", n.devices.size()}, {"simulated", n.simulated}}),
        nullptr);
  if (old != nodes_.end() && old->second.lost) {
    b.Add(EventAt(clock_(), who.name, "node.returned", n.name, "registered again after loss"),
          nullptr);
  }
  n.running_reported = *running;
  if (old != nodes_.end() && old->second.devices.size() == n.devices.size()) {
    // Health as last known, so that what the registration says of it is a change (or not).
    for (size_t i = 0; i < n.devices.size(); ++i) {
      n.devices[i].healthy = old->second.devices[i].healthy;
      n.devices[i].health_reason = old->second.devices[i].health_reason;
      n.devices[i].health_cleared = old->second.devices[i].health_cleared;
      n.devices[i].health_reset = old->second.devices[i].health_reset;
    }
  }
  nodes_[n.name] = n;
  ApplySchedulableLocked(n.name);  // its cordon or drain, kept across registrations
  pacer_.Want();
  // Exits the agent kept on disk while it (or its link) was down: the jobs ended, they do not
  // run again. Acknowledged (like a heartbeat's) once durable.
  Json ack = Json::array();
  for (const auto& f : body.value("finished", Json::array())) {
    const std::string id = f["job"].get<std::string>();
    ack.push_back(id);
    Job* it = jobs_.Find(id);
    if (it == nullptr || !Holds(*it) || !it->backend.empty() || it->parts_done.count(n.name))
      continue;
    const auto on = NodesOf(*it);
    if (std::find(on.begin(), on.end(), n.name) == on.end()) continue;
    FinishReportedLocked(*it, n.name, f, b);
  }
  // What the agent runs now is the truth: a job the control plane believed started there that
  // the (restarted) agent does not run is over there, at once rather than at a heartbeat timeout.
  // (An agent that does not say what it runs is not reconciled.)
  const std::vector<std::string> held =
      body.contains("running") ? jobs_.OnNode(n.name) : std::vector<std::string>{};  // a copy
  for (const std::string& id : held) {
    Job& j = jobs_.Get(id);
    if (j.state == JobState::kPlaced || running->count(id) || j.parts_done.count(n.name)) continue;
    if (GangPartUnsent(j, n.name)) continue;
    LoseJobLocked(j, n.name, "not running on node '" + n.name + "' when its agent registered again",
                  b);
  }
  // A device the agent reports unhealthy (or healthy again) as it registers (protocol 3; an
  // older agent says nothing of health: as it was).
  RecordHealthLocked(nodes_[n.name], body.value("devices", Json::array()), "agent:" + n.name, b);
  st = CommitLocked(b, lock);
  if (!st.ok()) return st;
  Json reply = {{"ok", true},
                {"heartbeat_ms", config_.heartbeat_interval_ms},
                {"epoch", leader_epoch_},
                {"ack", std::move(ack)}};
  if (config_.partition_stop_ms > 0) reply["partition_stop_ms"] = config_.partition_stop_ms;
  return reply;
}

void Engine::FinishPartLocked(Job& j, const std::string& node, int code, int sig, Batch& b) {
  j.parts_done.insert(node);
  bool all_done = true;
  for (const std::string& n : NodesOf(j)) all_done = all_done && j.parts_done.count(n);
  const bool failed = code != 0 || sig != 0;
  const std::string actor = "agent:" + node;
  if (j.state == JobState::kPreempting && failed && !j.cancel_requested && !j.guard_stopped) {
    // Stopped by the preemption (a signal, or a non-zero exit): pending again once all parts are.
    // Cancelled meanwhile, it ends cancelled below instead (requeued, it ran once more).
    if (!all_done) return;
    const size_t mark = qe_->events().size();
    qe_->Stopped(j.handle, NowS());
    TranslateLocked(mark, b);  // job.requeued: pending again, its submit time kept
    pacer_.Want();
    return;
  }
  if (!all_done && !failed && !j.cancel_requested) {
    b.Add(EventAt(clock_(), actor, "job.part_finished", j.rec.id, "part on " + node + " ended"),
          &j);
    return;
  }
  const JobState state = j.cancel_requested ? JobState::kCancelled
                         : failed           ? JobState::kFailed
                                            : JobState::kSucceeded;
  std::string reason = j.cancel_requested ? "cancelled"
                       : j.guard_stopped
                           ? "stopped: " + j.rec.reason.substr(std::min(
                                               j.rec.reason.size(), std::strlen(kGuardStopping)))
                       : sig != 0  ? "killed by signal " + std::to_string(sig)
                       : code != 0 ? "exit code " + std::to_string(code)
                                   : "";
  if (failed && NodesOf(j).size() > 1) reason += " (part on " + node + ")";
  if (!EndLocked(j, state, JobCause::kExited, reason)) return;
  j.rec.exit_code = code;
  b.Add(EventAt(clock_(), actor, std::string("job.") + JobStateName(state), j.rec.id, reason,
                {{"exit_code", code}, {"signal", sig}}),
        &j);
  pacer_.Want();
}

// A part of a gang whose start order has not gone to `node` yet. The job may already be
// running elsewhere: the first part's start moves it to "starting", its first report to
// "running", and the other parts' orders follow (each once its decisions are durable).
bool GangPartUnsent(const Job& j, const std::string& node) {
  if (j.state != JobState::kStarting && j.state != JobState::kRunning) return false;
  return NodesOf(j).size() > 1 && !j.parts_done.count("sent:" + node);
}

Json Engine::StartOrderLocked(Job& j, const NodeInfo& n) const {
  Json devs = Json::array();
  MilliCpu cpu = 0;
  MiB mem = 0, cap = 0;
  for (const auto& g : j.grants) {
    if (g.node != n.name) continue;
    cpu += g.cpu;
    mem += g.host_memory;
    if (g.device < 0) continue;
    Json d = {
        {"index", g.device},
        {"uuid", g.device < static_cast<int>(n.devices.size()) ? n.devices[g.device].uuid : ""},
        {"mig", ""}};
    if (!g.slot.empty()) d["slot"] = g.slot;  // the agent creates (or finds) this partition
    // An AMD device's pair, for a partition and a whole card or share alike: the agent switches
    // an idle card the cycle returned to SPX+NPS1 back before it starts the job.
    const std::string pair = qe_->device(g.node, g.device).amd_pair;
    if (!pair.empty()) d["mode"] = pair;
    devs.push_back(d);
    if (j.form == "share") cap = g.memory;
  }
  Json env = j.spec.value("env", Json::object());
  env["TESSERA_QUEUE"] = j.rec.queue;
  env["TESSERA_GROUP"] = j.rec.group;
  env["TESSERA_IDENTITY"] = j.rec.identity;
  env["TESSERA_FORM"] = j.form;
  const std::vector<std::string> nodes = NodesOf(j);
  if (nodes.size() > 1) {
    std::string list;
    for (const auto& x : nodes) list += (list.empty() ? "" : ",") + x;
    env["TESSERA_GANG_NODES"] = list;
    env["TESSERA_GANG_RANK"] =
        std::to_string(std::find(nodes.begin(), nodes.end(), n.name) - nodes.begin());
  }
  Json order = {{"job", j.rec.id},
                {"command", j.spec["command"]},
                {"env", env},
                {"cpu_milli", cpu},
                {"memory_mib", mem},
                {"devices", devs},
                {"gpu_memory_limit_bytes", cap * 1024 * 1024}};
  if (j.spec.contains("run_as")) order["run_as"] = j.spec["run_as"];
  if (j.form == "share") {
    const QueueRoute* route = config_.FindRoute(j.rec.queue);
    if (route != nullptr && route->swap_overcommit_percent > 0) order["swap"] = true;
    // sm-sharing (issue 38): the agent starts the job as an MPS client at the grant's percent.
    const int pct = j.grants.empty() ? 0 : j.grants[0].sm_percent;
    if (pct > 0) order["compute"] = {{"mode", "sm-sharing"}, {"percent", pct}};
  }
  return order;
}

Result<Json> Engine::Heartbeat(const Identity& who, const Json& body) {
  std::promise<Result<Json>> answered;
  HeartbeatAsync(who, body, [&answered](Result<Json> r) { answered.set_value(std::move(r)); });
  Result<Json> result = answered.get_future().get();
  if (!result.ok()) (void)Sync();  // a failed write: memory is rebuilt before the caller looks
  return result;
}

void Engine::HeartbeatAsync(const Identity& who, const Json& body,
                            std::function<void(Result<Json>)> done) {
  // A failed write: the agent reports the exits again; nothing was started.
  AnswerWhenDurable(HeartbeatQueued(who, body), std::move(done));
}

Result<std::pair<Json, int64_t>> Engine::HeartbeatQueued(const Identity& who, const Json& body) {
  if (who.role != Role::kAgent && who.role != Role::kAdmin)
    return Status::PermissionDenied("only agents heartbeat");
  if (!body.is_object() || !body.contains("node") || !body["node"].is_string())
    return Status::InvalidArgument("'node' is required");
  if (Status st = OnlyKnownFields(body, {"node", "running", "finished", "devices"}, "heartbeat");
      !st.ok())
    return st;
  if (Status st = CheckTelemetry(body); !st.ok()) return st;
  if (Status st = CheckHeartbeatJobs(body); !st.ok()) return st;
  const std::string node = body["node"].get<std::string>();
  if (Status st = ValidateNodeName(node); !st.ok()) return st;
  if (Status st = SpeaksFor(who, node, "heartbeat"); !st.ok()) return st;
  std::unique_lock<std::mutex> lock(mu_);
  if (!broken_.ok()) return broken_;
  auto nit = nodes_.find(node);
  if (nit == nodes_.end()) return Status::NotFound("node '" + node + "' is not registered");
  NodeInfo& n = nit->second;
  n.last_heartbeat_ms = clock_();
  n.heard_mono_ms = silence_.Now();
  Batch b;
  b.from_node = node;
  const std::string actor = "agent:" + node;
  if (n.lost) {
    n.lost = false;
    n.jobs_released = false;
    ApplySchedulableLocked(node);  // up, unless cordoned
    pacer_.Want();
    b.Add(EventAt(clock_(), actor, "node.returned", node, "heartbeat after loss"), nullptr);
  }
  auto on_node = [&](const Job& j) {
    const auto nodes = NodesOf(j);
    return Holds(j) && j.backend.empty() &&
           std::find(nodes.begin(), nodes.end(), node) != nodes.end();
  };
  n.running_reported.clear();
  for (const auto& r : body.value("running", Json::array()))
    n.running_reported.insert(r["job"].get<std::string>());
  Json ack = Json::array();
  for (const auto& f : body.value("finished", Json::array())) {
    const std::string id = f["job"].get<std::string>();
    ack.push_back(id);
    Job* it = jobs_.Find(id);
    if (it == nullptr || !on_node(*it) || it->parts_done.count(node)) continue;
    FinishReportedLocked(*it, node, f, b);
  }
  for (const auto& r : body.value("running", Json::array())) {
    Job* it = jobs_.Find(r["job"].get<std::string>());
    if (it != nullptr && it->state == JobState::kPending && it->held_on == node) {
      Json swap_only = r;  // held swapped out: its swap state only, no activity
      swap_only.erase("active");
      ObserveActivityLocked(*it, swap_only, actor, b);
      continue;
    }
    if (it == nullptr || !on_node(*it)) continue;
    Job& j = *it;
    // An earlier placement's process: not this one's start (OrdersLocked has it stopped first).
    if (j.state == JobState::kPlaced && j.stale_on.count(node)) continue;
    j.pid = r.value("pid", int64_t{0});
    if ((j.state == JobState::kStarting || j.state == JobState::kPlaced) &&
        TransitionLocked(j, JobState::kRunning, JobCause::kRunning)) {
      j.last_active_ms = clock_();  // a fresh start counts as activity
      b.Add(EventAt(clock_(), actor, "job.running", j.rec.id, "", {{"pid", j.pid}, {"node", node}}),
            &j);
    }
    // Back on its device by its agent's word: the "in" order has been carried out.
    if (j.swap_order == "in" && r.contains("swapped") && r["swapped"].is_boolean() &&
        !r["swapped"].get<bool>()) {
      j.swap_order.clear();
    }
    ObserveActivityLocked(j, r, actor, b);
  }
  RecordTelemetryLocked(n, body);
  RecordHealthLocked(n, body.value("devices", Json::array()), actor, b);
  const int64_t durable = writer_.Durable();
  Json orders = OrdersLocked(n, b, durable);
  // What these orders reflect: every decision about the node up to here (an order watch after
  // it wakes for the next one, not for what this heartbeat changed itself).
  orders["seq"] = std::min(seq_.LastNews(node), durable);
  // With nothing to acknowledge the reply waits for no write. Its orders name only durable
  // decisions (see OrdersLocked), and what this heartbeat changed (running, starting) is
  // queued: were it lost, the next heartbeat says it again. Exits are acknowledged only once
  // durable: an acked exit is never reported again.
  QueueLocked(b);
  const int64_t target = ack.empty() ? 0 : seq_.last();
  orders["ack"] = std::move(ack);
  orders["epoch"] = leader_epoch_;
  // Devices an administrator returned: the agent starts their health over (until it says ok).
  Json reset = Json::array();
  for (const DeviceInfo& d : n.devices) {
    if (d.health_reset) reset.push_back(d.index);
  }
  if (!reset.empty()) orders["health_reset"] = std::move(reset);
  return std::pair<Json, int64_t>{std::move(orders), target};
}

// The heartbeat's telemetry: device entries {index, util_pct 0-100, memory_used_mib}, and on each
// running entry "active" (its devices or processes showed activity since the last heartbeat) and
// "gpu_memory_used_mib". All optional; an agent that sends none is never judged idle.
// Orders for node n: start what was placed there; stop what is cancelled or preempted; the
// rest may run (anything else the agent runs is stopped).
Json Engine::OrdersLocked(const NodeInfo& n, Batch& b, int64_t durable) {
  const std::string& node = n.name;
  auto on_node = [&](const Job& j) {
    const auto nodes = NodesOf(j);
    return Holds(j) && j.backend.empty() &&
           std::find(nodes.begin(), nodes.end(), node) != nodes.end();
  };
  Json start = Json::array(), cancel = Json::array(), may_run = Json::array();
  const int64_t preempt_grace_ms = config_.policy.grace_seconds * 1000;
  Json swap = Json::object();
  for (const std::string& id : jobs_.OnNode(node)) {
    Job& j = jobs_.Get(id);
    if (j.state == JobState::kPending && !j.held_on.empty()) {
      // Held swapped out here: its processes stay, paused, until it resumes or is stopped.
      if (j.held_on == node) {
        may_run.push_back(id);
        swap[id] = "out";
      }
      continue;
    }
    if (!on_node(j) || j.parts_done.count(node)) continue;
    if (!j.swap_order.empty()) swap[id] = j.swap_order;
    const bool gang = NodesOf(j).size() > 1;
    // A decision still on its way to the store is not acted on: its order goes out with a
    // later heartbeat, once it is durable (the job stays allowed to run meanwhile).
    const bool decided = j.last_seq <= durable;
    if (j.state == JobState::kPlaced && j.stale_on.count(node)) {
      // Requeued from here while its process ran, and placed here again: that process stops
      // first (it is not in may_run), so that no two bindings of the job run at once.
      if (n.running_reported.count(id)) continue;
      j.stale_on.erase(node);
    }
    if (j.state == JobState::kPlaced || GangPartUnsent(j, node)) {
      if (!decided) continue;
      const bool starts = j.state == JobState::kPlaced;  // else: a gang's next part
      if (starts && !TransitionLocked(j, JobState::kStarting, JobCause::kStarted)) continue;
      start.push_back(StartOrderLocked(j, n));
      j.start_sent_ms = clock_();
      j.starting_since_mono = silence_.Now();
      if (gang) j.parts_done.insert("sent:" + node);
      if (starts) {
        b.Add(EventAt(clock_(), "engine", "job.starting", id, "", {{"node", node}}), &j);
      }
      continue;
    }
    if (j.state == JobState::kStarting && !gang && decided && !n.running_reported.count(id) &&
        clock_() - j.start_sent_ms >= 2 * config_.heartbeat_interval_ms) {
      // Sent, and neither running nor finished on the agent's word since: the reply that carried
      // the start was lost. Sent again (an agent ignores a start for a job it runs).
      start.push_back(StartOrderLocked(j, n));
      j.start_sent_ms = clock_();
      continue;
    }
    may_run.push_back(id);
    if (!decided) continue;
    if (j.state == JobState::kPreempting) {
      cancel.push_back({{"job", id}, {"grace_ms", preempt_grace_ms}});
    } else if (j.cancel_requested) {
      cancel.push_back({{"job", id}, {"grace_ms", config_.cancel_grace_ms}});
    }
  }
  Json orders = {{"start", start}, {"cancel", cancel}, {"may_run", may_run}};
  if (!swap.empty()) orders["swap"] = std::move(swap);
  return orders;
}

Status Engine::WriteOutput(const Identity& who, const std::string& job, int64_t offset,
                           const std::string& bytes) {
  if (who.role != Role::kAgent && who.role != Role::kAdmin)
    return Status::PermissionDenied("only agents upload output");
  if (offset < 0) return Status::InvalidArgument("'offset' must not be negative");
  if (offset >= config_.max_output_bytes) {
    return Status::ResourceExhausted("output of job '" + job + "' is over the limit of " +
                                     std::to_string(config_.max_output_bytes) +
                                     " bytes (max_output)");
  }
  // The part below the limit is kept; the next upload is refused.
  const size_t keep = static_cast<size_t>(
      std::min<int64_t>(static_cast<int64_t>(bytes.size()), config_.max_output_bytes - offset));
  {
    std::unique_lock<std::mutex> lock(mu_);
    Job* it = jobs_.Find(job);
    if (it == nullptr) return Status::NotFound("no job '" + job + "'");
    // Only for a job on a node this agent speaks for.
    bool mine = who.role == Role::kAdmin;
    for (const std::string& n : NodesOf(*it)) mine = mine || who.MaySpeakFor(n);
    if (!mine) {
      lock.unlock();
      return SpeaksFor(who, it->node.empty() ? "(none)" : it->node, "upload output");
    }
  }
  int fd = ::open(JobOutputPath(data_dir_, job).c_str(),
                  O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (fd < 0) return Status::Internal("cannot open output of '" + job + "'");
  // Uploads come in order (docs/agent-protocol.md): one may start where the stored bytes end, or
  // repeat bytes already stored (an upload whose answer was lost); one past the end would leave
  // a hole of bytes the job never wrote, and is refused (409).
  struct stat st {};
  if (::fstat(fd, &st) != 0 || offset > static_cast<int64_t>(st.st_size)) {
    const int64_t have = static_cast<int64_t>(st.st_size);
    ::close(fd);
    return Status::FailedPrecondition("output of job '" + job + "' continues at byte " +
                                      std::to_string(have) + ", not " + std::to_string(offset));
  }
  ssize_t n = ::pwrite(fd, bytes.data(), keep, static_cast<off_t>(offset));
  ::close(fd);
  if (n != static_cast<ssize_t>(keep))
    return Status::Internal("short write of output of '" + job + "'");
  return Status::Ok();
}

}  // namespace tessera::api
