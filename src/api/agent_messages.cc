// The agents' messages checked before anything changes (api/agent_messages.h).
#include "api/agent_messages.h"

#include "model/agent_protocol.h"
#include "model/isolation.h"

namespace tessera::api {

using Json = nlohmann::json;

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
static Status InRange(const Json& obj, const char* key, int64_t max, const std::string& where) {
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
static Status CheckHealth(const Json& d, const std::string& where) {
  if (d.contains("health") &&
      (!d["health"].is_string() || (d["health"] != "ok" && d["health"] != "unhealthy")))
    return Status::InvalidArgument(where + "'health' must be \"ok\" or \"unhealthy\"");
  if (d.contains("health_reason") &&
      (!d["health_reason"].is_string() || d["health_reason"].get<std::string>().size() > 1000))
    return Status::InvalidArgument(where +
                                   "'health_reason' must be a string of at most 1000 bytes");
  return Status::Ok();
}

// Fields given as strings and as booleans, where given: another type is refused, not read as
// the default (a pool of 5 was the pool "default", "simulated": "true" was false).
static Status Typed(const Json& obj, std::initializer_list<const char*> strings,
                    std::initializer_list<const char*> booleans, const std::string& where) {
  for (const char* key : strings) {
    if (obj.contains(key) && !obj[key].is_string())
      return Status::InvalidArgument(where + "'" + key + "' must be a string");
  }
  for (const char* key : booleans) {
    if (obj.contains(key) && !obj[key].is_boolean())
      return Status::InvalidArgument(where + "'" + key + "' must be true or false");
  }
  return Status::Ok();
}

Status CheckRegistration(const Json& body) {
  Status st = OnlyKnownFields(body,
                              {"node", "pool", "cpu_milli", "memory_mib", "swap_mib", "simulated",
                               "devices", "cgroups", "running", "finished", "protocol"},
                              "register");
  if (st.ok()) st = Typed(body, {"node", "pool"}, {"simulated"}, "");
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
    if (st.ok())
      st = Typed(d, {"model", "uuid", "isolation"}, {"simulated", "mig_enabled", "mps"},
                 "a device's ");
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
      Status known = OnlyKnownFields(
          e,
          {"job", "exit_code", "signal", "pid", "output_bytes", "active", "gpu_memory_used_mib",
           "swap", "swapped_mib", "swapped", "stopped_by", "run_ms"},
          std::string("heartbeat: a '") + key + "' entry");
      if (!known.ok()) return known;
      // Why the agent stopped a job itself (docs/agent-protocol.md, "Faults").
      if (e.contains("stopped_by") &&
          (std::string(key) != "finished" ||
           (e["stopped_by"] != kStoppedByPartition && e["stopped_by"] != kStoppedByShutdown))) {
        return Status::InvalidArgument(
            std::string("'") + key +
            ".stopped_by' must be \"partition\" or \"shutdown\" in a 'finished' entry");
      }
      // How long the job ran, by the node's monotonic clock (protocol 5): a finished entry's.
      if (e.contains("run_ms") &&
          (std::string(key) != "finished" || !InRange(e, "run_ms", INT64_MAX, "").ok())) {
        return Status::InvalidArgument(std::string("'") + key +
                                       ".run_ms' must be a non-negative integer (milliseconds) in "
                                       "a 'finished' entry");
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

}  // namespace tessera::api
