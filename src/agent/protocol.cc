#include "agent/protocol.h"

#include <nlohmann/json.hpp>

#include "common/text.h"
#include "model/cluster.h"

namespace tessera::agent {
namespace {

using nlohmann::json;

Status Bad(const std::string& what) {
  return Status::InvalidArgument("control plane reply: " + what);
}

Result<JobSpec> ParseStart(const json& j) {
  if (!j.is_object()) return Bad("a start entry is not an object");
  JobSpec spec;
  if (!j.contains("job") || !j["job"].is_string()) return Bad("a start entry has no string 'job'");
  spec.id = j["job"].get<std::string>();
  auto field = [&](const char* name) {
    return "start entry for job " + spec.id + ": field '" + name + "' ";
  };
  if (!j.contains("command") || !j["command"].is_array() || j["command"].empty()) {
    return Bad(field("command") + "must be a non-empty list of strings");
  }
  for (const json& a : j["command"]) {
    if (!a.is_string()) return Bad(field("command") + "must be a non-empty list of strings");
    spec.command.push_back(a.get<std::string>());
  }
  if (j.contains("env") && !j["env"].is_null()) {
    if (!j["env"].is_object()) return Bad(field("env") + "must be an object of strings");
    for (const auto& [k, v] : j["env"].items()) {
      if (!v.is_string()) return Bad(field("env") + "must be an object of strings (" + k + ")");
      spec.env[k] = v.get<std::string>();
    }
  }
  for (const char* name : {"cpu_milli", "memory_mib", "gpu_memory_limit_bytes"}) {
    if (!j.contains(name) || j[name].is_null()) continue;
    if (!j[name].is_number_integer() || j[name].get<int64_t>() < 0) {
      return Bad(field(name) + "must be a non-negative integer");
    }
  }
  // Not given, or null: 0 (json::value() would throw on a null).
  auto size = [&](const char* name) {
    return j.contains(name) && !j[name].is_null() ? j[name].get<int64_t>() : int64_t{0};
  };
  spec.cpu_milli = size("cpu_milli");
  spec.memory_mib = size("memory_mib");
  spec.gpu_memory_limit_bytes = size("gpu_memory_limit_bytes");
  if (j.contains("swap") && !j["swap"].is_null()) {
    if (!j["swap"].is_boolean()) return Bad(field("swap") + "must be true or false");
    spec.swap = j["swap"].get<bool>();
  }
  if (j.contains("compute") && !j["compute"].is_null()) {
    const json& c = j["compute"];
    const std::string mode = c.is_object() && c.contains("mode") && c["mode"].is_string()
                                 ? c["mode"].get<std::string>()
                                 : "";
    if (mode != "time-slicing" && mode != "sm-sharing")
      return Bad(field("compute") + "must be {\"mode\": \"time-slicing\" or \"sm-sharing\"}");
    if (mode == "sm-sharing") {
      if (!c.contains("percent") || !c["percent"].is_number_integer() ||
          c["percent"].get<int64_t>() < 1 || c["percent"].get<int64_t>() > 100)
        return Bad(field("compute") + "percent must be an integer from 1 to 100");
      spec.sm_percent = c["percent"].get<int>();
    }
  }
  if (j.contains("run_as") && !j["run_as"].is_null()) {
    if (!j["run_as"].is_string()) return Bad(field("run_as") + "must be a string");
    spec.run_as = j["run_as"].get<std::string>();
  }
  if (j.contains("devices") && !j["devices"].is_null()) {
    if (!j["devices"].is_array()) return Bad(field("devices") + "must be a list");
    for (const json& d : j["devices"]) {
      if (!d.is_object() || !d.contains("uuid") || !d["uuid"].is_string()) {
        return Bad(field("devices") + "entries need a string 'uuid'");
      }
      DeviceBinding b;
      b.uuid = d["uuid"].get<std::string>();
      if (d.contains("index") && d["index"].is_number_integer()) b.index = d["index"].get<int>();
      if (d.contains("mig") && d["mig"].is_string()) b.mig = d["mig"].get<std::string>();
      if (d.contains("slot") && d["slot"].is_string()) b.slot = d["slot"].get<std::string>();
      if (d.contains("mode") && d["mode"].is_string()) b.mode = d["mode"].get<std::string>();
      spec.devices.push_back(std::move(b));
    }
  }
  return spec;
}

json FinishedList(const std::vector<FinishedReport>& finished) {
  json f = json::array();
  for (const FinishedReport& e : finished) {
    json entry = {{"job", e.job},
                  {"exit_code", e.exit_code},
                  {"signal", e.signal},
                  {"output_bytes", e.output_bytes}};
    if (!e.stopped_by.empty()) entry["stopped_by"] = e.stopped_by;
    if (e.run_ms >= 0) entry["run_ms"] = e.run_ms;
    f.push_back(std::move(entry));
  }
  return f;
}

// A non-negative integer field of a reply: `fallback` when absent or null.
Result<int64_t> NonNegative(const json& j, const char* name, int64_t fallback) {
  if (!j.contains(name) || j[name].is_null()) return fallback;
  if (!j[name].is_number_integer() || j[name].get<int64_t>() < 0)
    return Bad(std::string("'") + name + "' must be a non-negative integer");
  return j[name].get<int64_t>();
}

}  // namespace

Status ValidateNodeName(const std::string& node) { return tessera::ValidateNodeName(node); }

std::string RegisterBody(const Inventory& inventory, bool cgroups,
                         const std::vector<RunningJob>& running,
                         const std::vector<FinishedReport>& finished) {
  json devices = json::array();
  for (const DiscoveredDevice& d : inventory.devices) {
    json dj = {{"index", d.index},
               {"model", d.model},
               {"memory_mib", d.memory_mib},
               {"uuid", d.uuid},
               {"simulated", d.simulated}};
    if (d.mig_enabled) dj["mig_enabled"] = true;
    dj["health"] = d.healthy ? "ok" : "unhealthy";
    if (!d.isolation.empty()) dj["isolation"] = d.isolation;
    if (d.mps) dj["mps"] = true;  // protocol 4
    if (!d.healthy) dj["health_reason"] = d.health_reason;
    devices.push_back(std::move(dj));
  }
  json body = {{"node", inventory.node},
               {"cpu_milli", inventory.host.cpu_milli},
               {"memory_mib", inventory.host.memory_mib},
               {"simulated", inventory.simulated},
               {"devices", std::move(devices)},
               {"cgroups", cgroups},
               {"protocol", kAgentProtocolVersion}};
  json r = json::array();
  for (const RunningJob& job : running) r.push_back({{"job", job.id}, {"pid", job.pid}});
  body["running"] = std::move(r);
  if (!finished.empty()) body["finished"] = FinishedList(finished);
  if (!inventory.pool.empty()) body["pool"] = inventory.pool;
  if (inventory.swap_mib > 0) body["swap_mib"] = inventory.swap_mib;
  return body.dump();
}

std::optional<std::string> ProtocolRefusal(int http_status, std::string_view body) {
  if (http_status / 100 != 4) return std::nullopt;
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("error") || !j["error"].is_string())
    return std::nullopt;
  std::string error = j["error"].get<std::string>();
  if (error.rfind(kAgentProtocolRefusalPrefix, 0) != 0) return std::nullopt;
  return error;
}

Result<RegisterReply> ParseRegisterReplyFields(std::string_view body, int64_t fallback_ms) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Bad("register reply is not a JSON object");
  if (j.contains("ok") && j["ok"].is_boolean() && !j["ok"].get<bool>()) {
    // A reason that is not a string (found by fuzz/agent_protocol) is no reason, not an exception.
    const bool said = j.contains("error") && j["error"].is_string();
    return Bad("register refused: " +
               (said ? j["error"].get<std::string>() : std::string("no reason given")));
  }
  RegisterReply reply;
  reply.heartbeat_ms = fallback_ms;
  if (j.contains("heartbeat_ms") && !j["heartbeat_ms"].is_null()) {
    if (!j["heartbeat_ms"].is_number_integer() || j["heartbeat_ms"].get<int64_t>() <= 0) {
      return Bad("heartbeat_ms must be a positive integer");
    }
    reply.heartbeat_ms = j["heartbeat_ms"].get<int64_t>();
  }
  Result<int64_t> epoch = NonNegative(j, "epoch", -1);
  if (!epoch.ok()) return epoch.status();
  reply.epoch = *epoch;
  Result<int64_t> stop = NonNegative(j, "partition_stop_ms", 0);
  if (!stop.ok()) return stop.status();
  reply.partition_stop_ms = *stop;
  return reply;
}

Result<int64_t> ParseRegisterReply(std::string_view body, int64_t fallback_ms) {
  Result<RegisterReply> r = ParseRegisterReplyFields(body, fallback_ms);
  if (!r.ok()) return r.status();
  return r->heartbeat_ms;
}

int64_t MiBRoundedUp(int64_t bytes) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  return bytes / kMiB + (bytes % kMiB > 0 ? 1 : 0);
}

std::string HeartbeatBody(const std::string& node, const std::vector<RunningJob>& running,
                          const std::vector<FinishedReport>& finished,
                          const std::vector<DeviceTelemetry>& devices) {
  json r = json::array();
  for (const RunningJob& job : running) {
    json e = {{"job", job.id}, {"pid", job.pid}};
    if (job.active >= 0) e["active"] = job.active == 1;
    if (job.gpu_memory_used_bytes >= 0)
      e["gpu_memory_used_mib"] = MiBRoundedUp(job.gpu_memory_used_bytes);
    if (!job.swap_state.empty()) {
      e["swap"] = job.swap_state;
      e["swapped_mib"] = MiBRoundedUp(job.swapped_bytes);
      if (job.swap_ordered) e["swapped"] = job.swap_state == "swapped";  // all off the device
    }
    r.push_back(std::move(e));
  }
  json body = {{"node", node}, {"running", std::move(r)}, {"finished", FinishedList(finished)}};
  if (!devices.empty()) {
    json d = json::array();
    for (const DeviceTelemetry& t : devices) {
      json e = {{"index", t.index}};
      if (t.util_pct >= 0) e["util_pct"] = t.util_pct;
      if (t.memory_used_mib >= 0) e["memory_used_mib"] = t.memory_used_mib;
      if (!t.health.empty()) e["health"] = t.health;
      if (!t.health_reason.empty()) e["health_reason"] = t.health_reason;
      d.push_back(std::move(e));
    }
    body["devices"] = std::move(d);
  }
  return body.dump();
}

namespace {

Result<HeartbeatReply> ParseHeartbeatReplyChecked(std::string_view body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Bad("heartbeat reply is not a JSON object");
  HeartbeatReply reply;
  auto list = [&](const char* name) -> Result<const json*> {
    if (!j.contains(name) || j[name].is_null()) return static_cast<const json*>(nullptr);
    if (!j[name].is_array()) return Bad(std::string("'") + name + "' must be a list");
    return &j[name];
  };
  Result<const json*> start = list("start");
  if (!start.ok()) return start.status();
  if (*start != nullptr) {
    for (const json& s : **start) {
      Result<JobSpec> spec = ParseStart(s);
      if (!spec.ok()) return spec.status();
      reply.start.push_back(std::move(spec).value());
    }
  }
  Result<const json*> cancel = list("cancel");
  if (!cancel.ok()) return cancel.status();
  if (*cancel != nullptr) {
    for (const json& c : **cancel) {
      if (!c.is_object() || !c.contains("job") || !c["job"].is_string()) {
        return Bad("a cancel entry has no string 'job'");
      }
      CancelOrder order{c["job"].get<std::string>(), 0};
      if (c.contains("grace_ms") && !c["grace_ms"].is_null()) {
        if (!c["grace_ms"].is_number_integer() || c["grace_ms"].get<int64_t>() < 0) {
          return Bad("cancel of job " + order.job + ": grace_ms must be a non-negative integer");
        }
        order.grace_ms =
            std::min<int64_t>(c["grace_ms"].get<int64_t>(), 86'400'000);  // a day at most
      }
      reply.cancel.push_back(std::move(order));
    }
  }
  for (const char* name : {"may_run", "ack"}) {
    Result<const json*> ids = list(name);
    if (!ids.ok()) return ids.status();
    if (*ids == nullptr) continue;
    std::vector<std::string> out;
    for (const json& id : **ids) {
      if (!id.is_string()) return Bad(std::string("'") + name + "' must be a list of job ids");
      out.push_back(id.get<std::string>());
    }
    if (std::string(name) == "may_run") {
      reply.may_run = std::move(out);
    } else {
      reply.ack = std::move(out);
    }
  }
  if (j.contains("swap") && !j["swap"].is_null()) {
    if (!j["swap"].is_object()) return Bad("'swap' must be an object of job ids to orders");
    for (const auto& [job, order] : j["swap"].items()) {
      if (!order.is_string() || (order != "out" && order != "in" && order != "idle")) {
        return Bad("swap order of job " + job + ": must be \"out\", \"in\" or \"idle\"");
      }
      reply.swap[job] = order.get<std::string>();
    }
  }
  if (j.contains("seq")) {
    if (!j["seq"].is_number_integer() || j["seq"].get<int64_t>() < 0)
      return Bad("'seq' must be a non-negative integer");
    reply.seq = j["seq"].get<int64_t>();
  }
  Result<int64_t> epoch = NonNegative(j, "epoch", -1);
  if (!epoch.ok()) return epoch.status();
  reply.epoch = *epoch;
  Result<const json*> reset = list("health_reset");
  if (!reset.ok()) return reset.status();
  if (*reset != nullptr) {
    for (const json& i : **reset) {
      if (!i.is_number_integer() || i.get<int64_t>() < 0 || i.get<int64_t>() > 1023)
        return Bad("'health_reset' must be a list of device indexes");
      reply.health_reset.push_back(i.get<int>());
    }
  }
  return reply;
}

}  // namespace

Result<HeartbeatReply> ParseHeartbeatReply(std::string_view body) {
  // Every field is type-checked before it is read; this is the net under that, so that a reply
  // no check foresaw is an error the agent reports and retries, never an exception that ends it.
  try {
    return ParseHeartbeatReplyChecked(body);
  } catch (const json::exception& e) {
    return Bad(std::string("heartbeat reply: ") + e.what());
  }
}

Result<OrdersWake> ParseOrdersWake(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Bad("order watch reply is not a JSON object");
  OrdersWake out;
  if (!j.contains("wake") || !j["wake"].is_boolean())
    return Bad("order watch reply: 'wake' must be true or false");
  out.wake = j["wake"].get<bool>();
  if (j.contains("seq")) {
    if (!j["seq"].is_number_integer() || j["seq"].get<int64_t>() < 0)
      return Bad("order watch reply: 'seq' must be a non-negative integer");
    out.seq = j["seq"].get<int64_t>();
  }
  return out;
}

std::string OutputPath(const std::string& job, int64_t offset) {
  return "/v1/agent/jobs/" + PercentEncoded(job) + "/output?offset=" + std::to_string(offset);
}

std::string OrdersWatchPath(const std::string& node, int64_t after, int64_t wait_ms) {
  return "/v1/agent/orders?node=" + PercentEncoded(node) + "&after=" + std::to_string(after) +
         "&wait_ms=" + std::to_string(wait_ms);
}

}  // namespace tessera::agent
