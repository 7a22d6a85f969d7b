// The observed workload as a scenario (`tessera whatif`): the jobs submitted in a window, with
// their arrival times, how long they held their grants and what they asked for (from the event
// log and their records), the registered nodes, and the server's own policy (the policy part of
// its config, which is a scenario's schema). Replayed by the simulator under another class-to-form
// table, it says how many cards each class would need; `observed` says what happened.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <set>

#include "api/engine.h"
#include "policy/policy_yaml.h"
#include "sim/scenario.h"

namespace tessera::api {
namespace {

struct Observed {
  std::string identity, group, queue;
  int64_t submit_ms = 0;
  int64_t first_placed_ms = -1;
  int64_t held_ms = 0;      // summed over its holds, clipped to the window's end
  int64_t open_since = -1;  // holding since (-1: not holding)
  std::set<std::pair<std::string, int>> devices;  // of the current hold
};

int64_t Percentile(std::vector<int64_t> v, int pct) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) * static_cast<size_t>(pct) / 100];
}

std::string Seconds(int64_t ms) { return std::to_string((ms + 999) / 1000) + "s"; }

}  // namespace

Result<Json> Engine::WhatIfScenario(const Identity& who, int64_t since, int64_t until) {
  if (who.role != Role::kAdmin)
    return Status::PermissionDenied("only admins replay the observed workload");
  const int64_t now = clock_();
  if (until <= 0 || until > now) until = now;
  if (since >= until)
    return Status::InvalidArgument("'since' must be before 'until' (and before now)");
  std::map<std::string, Observed> jobs;
  std::map<std::string, std::string> class_of;  // job -> class
  std::map<std::string, std::map<std::pair<std::string, int>, int>>
      held;                         // class -> device -> holders
  std::map<std::string, int> peak;  // class -> most devices at once
  auto cls = [&](const std::string& id) -> const std::string& { return class_of[id]; };
  auto close = [&](Observed& o, const std::string& id, int64_t t) {
    if (o.open_since < 0) return;
    o.held_ms += std::max<int64_t>(0, std::min(t, until) - o.open_since);
    o.open_since = -1;
    auto& h = held[cls(id)];
    for (const auto& d : o.devices) {
      if (--h[d] == 0) h.erase(d);
    }
    o.devices.clear();
  };
  Status walked = ForEachJobEvent([&](const store::Event& e) -> Status {
    if (e.kind == "job.submitted") {
      if (e.time_ms < since || e.time_ms >= until) return Status::Ok();
      Json d = Json::parse(e.data, nullptr, false);
      Observed o;
      o.identity = e.actor;
      o.group = d.is_object() ? d.value("group", "") : "";
      o.queue = d.is_object() ? d.value("queue", "") : "";
      o.submit_ms = e.time_ms;
      jobs[e.subject] = o;
      return Status::Ok();
    }
    auto it = jobs.find(e.subject);
    if (it == jobs.end() || e.time_ms >= until) return Status::Ok();
    Observed& o = it->second;
    if (e.kind == "job.placed") {
      close(o, e.subject, e.time_ms);
      if (class_of[e.subject].empty()) {
        auto rec = store_->GetJob(e.subject);
        if (!rec.ok()) return rec.status();
        Json spec = *rec ? Json::parse((*rec)->spec, nullptr, false) : Json();
        class_of[e.subject] = spec.is_object() ? spec.value("class", "batch") : "batch";
      }
      if (o.first_placed_ms < 0) o.first_placed_ms = e.time_ms;
      o.open_since = e.time_ms;
      Json d = Json::parse(e.data, nullptr, false);
      if (d.is_object() && d.contains("grants") && d["grants"].is_array()) {
        for (const auto& g : d["grants"]) {
          if (g.value("device", -1) >= 0)
            o.devices.insert({g.value("node", ""), g.value("device", -1)});
        }
      }
      auto& h = held[cls(e.subject)];
      for (const auto& dev : o.devices) ++h[dev];
      peak[cls(e.subject)] = std::max(peak[cls(e.subject)], static_cast<int>(h.size()));
    } else if (EndsHold(e.kind)) {
      close(o, e.subject, e.time_ms);
    }
    return Status::Ok();
  });
  if (!walked.ok()) return walked;
  for (auto& [id, o] : jobs) close(o, id, until);

  // The scenario: the server's policy, its nodes, the observed jobs.
  YAML::Node src;
  try {
    src = YAML::Load(config_.source_yaml.empty() ? std::string("{}") : config_.source_yaml);
  } catch (const YAML::Exception& e) {
    return Status::Internal(std::string("the config no longer parses: ") + e.what());
  }
  YAML::Node out(YAML::NodeType::Map);
  out["name"] = "observed";
  out["until"] = Seconds(until - since);
  out["cycle"] = Seconds(config_.cycle_ms);
  for (const std::string& key : policy::PolicyRootKeys()) {
    if (!src.IsMap() || !src[key]) continue;
    YAML::Node v = YAML::Clone(src[key]);
    if (key == "queues" && v.IsSequence()) {
      for (YAML::Node q : v) {
        for (const std::string& k : ServerQueueKeys()) {
          if (q.IsMap() && q[k]) q.remove(k);
        }
      }
    }
    out[key] = v;
  }
  std::unique_lock<std::mutex> lock(mu_);
  std::set<std::string> pools;
  YAML::Node nodes(YAML::NodeType::Sequence);
  for (const auto& [name, n] : nodes_) {
    if (n.devices.empty()) continue;
    YAML::Node node;
    node["name"] = name;
    node["pool"] = n.pool.empty() ? "default" : n.pool;
    pools.insert(n.pool.empty() ? "default" : n.pool);
    node["cpu"] = std::to_string(n.cpu_milli) + "m";
    node["memory"] = std::to_string(n.memory_mib) + "MiB";
    node["gpu"]["model"] = n.devices[0].model;
    node["gpu"]["count"] = static_cast<int>(n.devices.size());
    node["gpu"]["memory"] = std::to_string(n.devices[0].memory_mib) + "MiB";
    nodes.push_back(node);
  }
  lock.unlock();
  out["nodes"] = nodes;
  if (!out["pools"]) {  // the server's implicit pool: every form
    YAML::Node ps(YAML::NodeType::Sequence);
    for (const auto& p : pools) {
      YAML::Node pn;
      pn["name"] = p;
      for (const char* f : {"whole", "partition", "share"}) pn["forms"].push_back(f);
      ps.push_back(pn);
    }
    out["pools"] = ps;
  }
  YAML::Node workload(YAML::NodeType::Sequence);
  std::map<std::string, std::vector<int64_t>> waits;  // class -> observed waits (s)
  int64_t replayed = 0;
  for (const auto& [id, o] : jobs) {
    if (o.first_placed_ms < 0) continue;  // never ran: nothing to replay
    auto rec = store_->GetJob(id);
    if (!rec.ok()) return rec.status();
    if (!*rec) continue;
    Json spec = Json::parse((*rec)->spec, nullptr, false);
    if (!spec.is_object()) continue;
    YAML::Node w;
    w["queue"] = o.queue;
    w["identity"] = o.identity;
    w["group"] = o.group;
    w["at"] = std::to_string((o.submit_ms - since) / 1000) + "s";
    w["duration"] = Seconds(std::max<int64_t>(1000, o.held_ms));
    if (spec.contains("class")) w["class"] = spec["class"].get<std::string>();
    if (spec.value("gpus", 0) > 0) w["gpus"] = spec["gpus"].get<int>();
    if (spec.value("gpu_milli", int64_t{0}) > 0)
      w["gpu_fraction"] = std::to_string(spec["gpu_milli"].get<int64_t>()) + "m";
    if (spec.value("gpu_memory_mib", int64_t{0}) > 0)
      w["gpu_memory"] = std::to_string(spec["gpu_memory_mib"].get<int64_t>()) + "MiB";
    if (spec.value("cpu_milli", int64_t{0}) > 0)
      w["cpu"] = std::to_string(spec["cpu_milli"].get<int64_t>()) + "m";
    if (spec.value("memory_mib", int64_t{0}) > 0)
      w["memory"] = std::to_string(spec["memory_mib"].get<int64_t>()) + "MiB";
    w["walltime"] = spec.value("walltime_s", int64_t{0}) > 0;
    workload.push_back(w);
    waits[class_of[id]].push_back((o.first_placed_ms - o.submit_ms) / 1000);
    ++replayed;
  }
  out["workload"] = workload;
  YAML::Emitter emit;
  emit << out;
  Json observed = Json::object();
  for (const auto& [c, w] : waits) {
    observed[c] = {{"jobs", static_cast<int64_t>(w.size())},
                   {"max_devices", peak[c]},
                   {"wait_p50_s", Percentile(w, 50)},
                   {"wait_p99_s", Percentile(w, 99)},
                   {"wait_max_s", w.empty() ? 0 : *std::max_element(w.begin(), w.end())}};
  }
  return Json{{"since_ms", since},
              {"until_ms", until},
              {"jobs", replayed},
              {"scenario", std::string(emit.c_str())},
              {"observed", observed}};
}

Result<Json> Engine::WhatIf(const Identity& who, int64_t since_ms, int64_t until_ms,
                            const std::vector<std::string>& forms) {
  Result<Json> observed = WhatIfScenario(who, since_ms, until_ms);
  if (!observed.ok()) return observed.status();
  Result<sim::WhatIfResult> r = sim::WhatIf(*observed, forms);
  if (!r.ok()) return r.status();
  return r->report;
}

}  // namespace tessera::api
