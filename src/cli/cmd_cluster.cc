// `tessera queues`, `groups` and `nodes`: the cluster as GET /v1/queues, /v1/groups and /v1/nodes
// show it, as tables (whole with --json).
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cli/cluster_views.h"
#include "cli/table.h"
#include "common/text.h"
#include "model/duration.h"
#include "model/quantity.h"

namespace tessera::cli {
namespace {

using Json = nlohmann::json;

// The strings of a JSON array, joined by commas.
std::string JoinedStrings(const Json& list) {
  return Join(list.get<std::vector<std::string>>(), ",");
}

// A queue's runtime guards (docs/scheduling.md), e.g. "max 2h, idle 30m (requeue)"; "-" for none.

std::string QueueGuards(const Json& q) {
  std::string out;
  const std::pair<const char*, const char*> guards[] = {{"max_runtime_s", "max"},
                                                        {"min_runtime_s", "min"},
                                                        {"preemption_delay_s", "preempts after"},
                                                        {"idle_timeout_s", "idle"}};
  for (const auto& [field, name] : guards) {
    const int64_t s = q.value(field, int64_t{0});
    if (s <= 0) continue;
    out += (out.empty() ? "" : ", ") + std::string(name) + " " + FormatDurationMs(s * 1000);
    if (std::string(field) == "idle_timeout_s") out += " (" + q.value("idle_action", "") + ")";
  }
  return out.empty() ? "-" : out;
}

// An amount in thousandths, g[what][field]; "-" for none (a limit the group leaves unset is null).

std::string Milli(const Json& g, const char* what, const char* field) {
  if (!g.is_object() || !g.contains(what) || !g[what].is_object()) return "-";
  const Json v = g[what].value(field, Json());
  return v.is_number_integer() ? FormatMilli(v.get<int64_t>()) : std::string("-");
}

// "job(form[ partition][,identity])" per holder, space-separated; "other(form)" for a job of a

// group the caller is not in (the server names it only to those who may see it).

std::string DeviceHolders(const Json& d) {
  std::string holders;
  for (const auto& h : d["holders"]) {
    holders += (holders.empty() ? "" : " ") + h.value("job", std::string("other")) + "(" +
               h["form"].get<std::string>() +
               (h.contains("partition") ? " " + h["partition"].get<std::string>() : "") +
               (h.contains("identity") ? "," + h["identity"].get<std::string>() : "") + ")";
  }
  return holders;
}

// The partition layout: MIG instances (free ones too), the AMD mode, or "whole".

std::string DeviceLayout(const Json& d) {
  std::string layout;
  for (const auto& p : d.value("partitions", Json::array())) {
    layout += (layout.empty() ? "" : ",") + p["name"].get<std::string>();
  }
  if (layout.empty()) layout = d.value("mig", false) ? "MIG (empty)" : d.value("amd_mode", "");
  if (layout.empty()) layout = "-";
  if (d.value("draining", false)) layout += " draining";
  return layout;
}

// The host CPU and memory the node's jobs hold, of its own: "2/16 cpu 8GiB/64GiB" ("-" from a

// server that does not say).

std::string HostUsed(const Json& n) {
  const Json cpu = n.value("cpu_milli_used", Json()), mem = n.value("memory_mib_used", Json());
  if (!cpu.is_number_integer() || !mem.is_number_integer()) return "-";
  return FormatMilli(cpu.get<int64_t>()) + "/" + FormatMilli(n.value("cpu_milli", int64_t{0})) +
         " cpu " + FormatMiB(mem.get<int64_t>()) + "/" +
         FormatMiB(n.value("memory_mib", int64_t{0}));
}

}  // namespace

void ListQueues(const ClientOptions& co, int* exit_code) {
  CallAndPrint(co, "GET", "/v1/queues", exit_code, [&](Json& j) {
    std::vector<std::vector<std::string>> rows = {
        {"QUEUE", "PRIORITY", "CLASS", "FORMS", "GROUPS", "PREEMPTIBLE", "GUARDS"}};
    for (const auto& q : j["queues"]) {
      rows.push_back({q["name"], std::to_string(q["priority"].get<int>()), q["class"],
                      JoinedStrings(q["forms"]), JoinedStrings(q["groups"]),
                      q["preemptible"].get<bool>() ? "yes" : "no", QueueGuards(q)});
    }
    PrintTable(rows);
  });
}

void ListGroups(const ClientOptions& co, int* exit_code) {
  CallAndPrint(co, "GET", "/v1/groups", exit_code, [&](Json& j) {
    std::vector<std::vector<std::string>> rows = {
        {"GROUP", "GPU USED", "RESERVED", "LIMIT", "CPU USED", "CPU LIMIT"}};
    for (const auto& g : j["groups"]) {
      rows.push_back({g.value("name", ""), Milli(g, "usage", "gpu_milli"),
                      Milli(g, "reservation", "gpu_milli"), Milli(g, "limit", "gpu_milli"),
                      Milli(g, "usage", "cpu_milli"), Milli(g, "limit", "cpu_milli")});
    }
    PrintTable(rows);
  });
}

void ListNodes(const ClientOptions& co, int* exit_code) {
  CallAndPrint(co, "GET", "/v1/nodes", exit_code, [&](Json& j) {
    std::vector<std::vector<std::string>> rows = {{"NODE", "STATE", "HOST USED", "DEVICE", "MODEL",
                                                   "LAYOUT", "USED", "MEMORY USED", "HOLDERS"}};
    for (const auto& n : j["nodes"]) {
      std::string state =
          n["state"].get<std::string>() + (n["simulated"].get<bool>() ? " (simulated)" : "");
      const std::string node_admin = n.value("admin_state", "active");
      const std::string host = HostUsed(n);
      if (n["devices"].empty())
        rows.push_back({n["name"], state, host, "-", "-", "-", "-", "-", "-"});
      for (const auto& d : n["devices"]) {
        std::string holders = DeviceHolders(d);
        std::string layout = DeviceLayout(d);
        // Cordoned, draining or drained (the device's own, else the node's): said after the state.
        const std::string admin = d.value("admin_state", node_admin);
        // A device its agent reports unhealthy (issue 38): said after the state, with why.
        const std::string health =
            d.value("health", "ok") == "unhealthy"
                ? ", unhealthy: " + EscapeForTerminal(d.value("health_reason", ""))
                : "";
        rows.push_back({n["name"], state + (admin == "active" ? "" : ", " + admin) + health, host,
                        std::to_string(d["index"].get<int>()),
                        d["model"].get<std::string>() + (d["simulated"].get<bool>() ? "*" : ""),
                        layout, FormatMilli(d["gpu_milli_used"]),
                        FormatMiB(d["gpu_memory_mib_used"]) + "/" + FormatMiB(d["memory_mib"]),
                        holders.empty() ? "-" : holders});
      }
    }
    PrintTable(rows);
  });
}

}  // namespace tessera::cli
