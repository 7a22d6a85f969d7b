// The observed workload as a scenario (`tessera whatif`): the jobs submitted in a window, with
// their arrival times, how long they held their grants and what they asked for (from the event
// log and their records), the registered nodes, and the server's own policy (the policy part of
// its config, which is a scenario's schema). Replayed by the simulator under another class-to-form
// table, it says how many cards each class would need; `observed` says what happened. The replay
// itself is the simulator's (EngineConfig::whatif.replay, wired in by `tessera serve`): the API
// never includes sim/.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <set>

#include "api/job_events.h"
#include "api/views.h"
#include "policy/policy_yaml.h"

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

std::string Seconds(int64_t ms) { return std::to_string((ms + 999) / 1000) + "s"; }

int64_t Percentile(std::vector<int64_t> v, int pct) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) * static_cast<size_t>(pct) / 100];
}

// The jobs submitted in [since, until) as the event log shows them (oldest event first): who
// submitted each, when it was submitted and first placed, how long it held its grants; per class,
// the most devices its jobs held at once.
class ObservedWindow {
 public:
  ObservedWindow(int64_t since, int64_t until, store::StoreReader* store)
      : since_(since), until_(until), store_(store) {}

  // One job.* event; `ends_hold`: it ends the job's hold on its grants.
  Status Observe(const store::Event& e, bool ends_hold) {
    if (e.kind == "job.submitted") {
      if (e.time_ms < since_ || e.time_ms >= until_) return Status::Ok();
      Json d = Json::parse(e.data, nullptr, false);
      Observed o;
      o.identity = e.actor;
      o.group = d.is_object() ? d.value("group", "") : "";
      o.queue = d.is_object() ? d.value("queue", "") : "";
      o.submit_ms = e.time_ms;
      jobs_[e.subject] = o;
      return Status::Ok();
    }
    auto it = jobs_.find(e.subject);
    if (it == jobs_.end() || e.time_ms >= until_) return Status::Ok();
    Observed& o = it->second;
    if (e.kind == "job.placed") return Placed(o, e);
    if (ends_hold) Close(o, e.subject, e.time_ms);
    return Status::Ok();
  }

  // Ends the holds still open at the window's end.
  void CloseAll() {
    for (auto& [id, o] : jobs_) Close(o, id, until_);
  }

  // One workload entry per job that ran (arrival, held time, needs), and its wait by class. A
  // job of a queue or group `config` no longer has is counted in *left_out, not replayed: the
  // scenario's policy is today's, and a workload naming what it lacks is refused.
  Status Workload(const EngineConfig& config, YAML::Node* workload,
                  std::map<std::string, std::vector<int64_t>>* waits, int64_t* replayed,
                  int64_t* left_out) {
    for (const auto& [id, o] : jobs_) {
      if (o.first_placed_ms < 0) continue;  // never ran: nothing to replay
      if (config.FindQueue(o.queue) == nullptr ||
          (!o.group.empty() && config.FindGroup(o.group) == nullptr)) {
        ++*left_out;
        continue;
      }
      auto rec = store_->GetJob(id);
      if (!rec.ok()) return rec.status();
      if (!*rec) continue;
      Json spec = Json::parse((*rec)->spec, nullptr, false);
      if (!spec.is_object()) continue;
      workload->push_back(WorkloadEntry(o, spec));
      (*waits)[class_of_[id]].push_back((o.first_placed_ms - o.submit_ms) / 1000);
      ++*replayed;
    }
    return Status::Ok();
  }

  // {class: {jobs, max_devices, wait_p50_s, wait_p99_s, wait_max_s}}.
  Json ObservedJson(const std::map<std::string, std::vector<int64_t>>& waits) {
    Json observed = Json::object();
    for (const auto& [c, w] : waits) {
      observed[c] = {{"jobs", static_cast<int64_t>(w.size())},
                     {"max_devices", peak_[c]},
                     {"wait_p50_s", Percentile(w, 50)},
                     {"wait_p99_s", Percentile(w, 99)},
                     {"wait_max_s", w.empty() ? 0 : *std::max_element(w.begin(), w.end())}};
    }
    return observed;
  }

 private:
  const std::string& Cls(const std::string& id) { return class_of_[id]; }

  // A job.placed: the hold before it (if any) closed, a new one opened on its grants' devices.
  Status Placed(Observed& o, const store::Event& e) {
    Close(o, e.subject, e.time_ms);
    if (class_of_[e.subject].empty()) {
      auto rec = store_->GetJob(e.subject);
      if (!rec.ok()) return rec.status();
      Json spec = *rec ? Json::parse((*rec)->spec, nullptr, false) : Json();
      class_of_[e.subject] = spec.is_object() ? spec.value("class", "batch") : "batch";
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
    auto& h = held_[Cls(e.subject)];
    for (const auto& dev : o.devices) ++h[dev];
    peak_[Cls(e.subject)] = std::max(peak_[Cls(e.subject)], static_cast<int>(h.size()));
    return Status::Ok();
  }

  void Close(Observed& o, const std::string& id, int64_t t) {
    if (o.open_since < 0) return;
    o.held_ms += std::max<int64_t>(0, std::min(t, until_) - o.open_since);
    o.open_since = -1;
    auto& h = held_[Cls(id)];
    for (const auto& d : o.devices) {
      if (--h[d] == 0) h.erase(d);
    }
    o.devices.clear();
  }

  YAML::Node WorkloadEntry(const Observed& o, const Json& spec) const {
    YAML::Node w;
    w["queue"] = o.queue;
    w["identity"] = o.identity;
    w["group"] = o.group;
    w["at"] = std::to_string((o.submit_ms - since_) / 1000) + "s";
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
    return w;
  }

  const int64_t since_, until_;
  store::StoreReader* store_;
  std::map<std::string, Observed> jobs_;
  std::map<std::string, std::string> class_of_;  // job -> class
  std::map<std::string, std::map<std::pair<std::string, int>, int>>
      held_;                         // class -> device -> holders
  std::map<std::string, int> peak_;  // class -> most devices at once
};

// The scenario's head: its name, length and cycle, and the server's policy (its config's policy
// keys, queues without the server's own keys).
Status ScenarioPolicy(const EngineConfig& config, int64_t since, int64_t until, YAML::Node& out) {
  YAML::Node src;
  try {
    src = YAML::Load(config.source_yaml.empty() ? std::string("{}") : config.source_yaml);
  } catch (const YAML::Exception& e) {
    return Status::Internal(std::string("the config no longer parses: ") + e.what());
  }
  out["name"] = "observed";
  out["until"] = Seconds(until - since);
  out["cycle"] = Seconds(config.cycle_ms);
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
  return Status::Ok();
}

// Without pools in the policy, the server's implicit pool: every form, on each pool named.
void AddImplicitPools(const std::set<std::string>& pools, YAML::Node& out) {
  if (out["pools"]) return;
  YAML::Node ps(YAML::NodeType::Sequence);
  for (const auto& p : pools) {
    YAML::Node pn;
    pn["name"] = p;
    for (const char* f : {"whole", "partition", "share"}) pn["forms"].push_back(f);
    ps.push_back(pn);
  }
  out["pools"] = ps;
}

}  // namespace

Result<Json> Views::WhatIfScenario(const Identity& who, int64_t since, int64_t until) {
  if (who.role != Role::kAdmin)
    return Status::PermissionDenied("only admins replay the observed workload");
  const int64_t now = ledger_.NowMs();
  if (until <= 0 || until > now) until = now;
  // The replay runs every cycle of the window: without `since`, the last 7 days (as `tessera
  // whatif` asks), and never more than a month (once since 1970: 56 years of cycles).
  constexpr int64_t kDayMs = 86'400'000;
  if (since <= 0) since = std::max<int64_t>(0, until - 7 * kDayMs);
  if (since >= until)
    return Status::InvalidArgument("'since' must be before 'until' (and before now)");
  if (until - since > 31 * kDayMs) {
    return Status::InvalidArgument("'since': the replay window is at most 31 days (asked: " +
                                   std::to_string((until - since) / kDayMs) +
                                   " days); the simulator replays every cycle of it");
  }
  ObservedWindow window(since, until, &ledger_.DurableStore());
  Status walked = ForEachJobEvent(ledger_.DurableStore(), [&](const store::Event& e) -> Status {
    return window.Observe(e, EndsHold(e.kind));
  });
  if (!walked.ok()) return walked;
  window.CloseAll();

  // The scenario: the server's policy, its nodes, the observed jobs.
  YAML::Node out(YAML::NodeType::Map);
  if (Status st = ScenarioPolicy(config_, since, until, out); !st.ok()) return st;
  std::set<std::string> pools;
  YAML::Node nodes(YAML::NodeType::Sequence);
  ledger_.Read([&](const ReadModel& m) {
    for (const auto& [name, n] : m.nodes) {
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
  });
  out["nodes"] = nodes;
  AddImplicitPools(pools, out);
  YAML::Node workload(YAML::NodeType::Sequence);
  std::map<std::string, std::vector<int64_t>> waits;  // class -> observed waits (s)
  int64_t replayed = 0, left_out = 0;
  if (Status st = window.Workload(config_, &workload, &waits, &replayed, &left_out); !st.ok())
    return st;
  out["workload"] = workload;
  YAML::Emitter emit;
  emit << out;
  return Json{{"since_ms", since},
              {"until_ms", until},
              {"jobs", replayed},
              {"jobs_not_replayed", left_out},  // of a queue or group no longer configured
              {"scenario", std::string(emit.c_str())},
              {"observed", window.ObservedJson(waits)}};
}

Result<Json> Views::WhatIf(const Identity& who, int64_t since_ms, int64_t until_ms,
                           const std::vector<std::string>& forms) {
  Result<Json> observed = WhatIfScenario(who, since_ms, until_ms);
  if (!observed.ok()) return observed.status();
  if (!config_.whatif.replay) {
    return Status::FailedPrecondition(
        "this server has no simulator wired in to replay the workload (GET /v1/whatif/scenario "
        "gives the scenario; `tessera whatif` replays it)");
  }
  return config_.whatif.replay(*observed, forms);
}

}  // namespace tessera::api
