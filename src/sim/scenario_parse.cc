// Scenario files: the YAML of a cluster, its policy and workload read into a Scenario, every
// bad field an error naming it (ParseScenario, LoadScenario).
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "model/quantity.h"
#include "policy/policy_yaml.h"
#include "policy/yaml_fields.h"
#include "sim/scenario.h"

namespace tessera::sim {
namespace {

using quota::WorkloadClass;
using tessera::AllocationForm;

using policy::EntryName;
using policy::FieldError;
using policy::GetBool;
using policy::GetDuration;
using policy::GetForms;
using policy::GetInt;
using policy::GetMemory;
using policy::GetMilli;
using policy::GetString;
using policy::GetStrings;
using policy::KnownKeys;
using policy::Scalar;
#define TRY TESSERA_TRY
#define TRY_ASSIGN TESSERA_TRY_ASSIGN

// Counts a scenario may ask for: enough for any real cluster, bounded so that a typo (or a
// hostile file) is an error naming the field, not an hour of work or all of memory.
constexpr int64_t kMaxNodesPerEntry = 100'000;
constexpr size_t kMaxNodes = 200'000;
constexpr int64_t kMaxGpusPerNode = 1024;
constexpr int64_t kMaxJobsPerEntry = 10'000'000;

Status Within(int64_t v, int64_t lo, int64_t hi, const std::string& field) {
  if (v < lo || v > hi) {
    return policy::FieldError(field, "must be from " + std::to_string(lo) + " to " +
                                         std::to_string(hi) + ", not " + std::to_string(v));
  }
  return Status::Ok();
}

Status ParseNodeGpu(const YAML::Node& g, const std::string& f, quota::NodeSpec* ns) {
  TRY(KnownKeys(g, f + ".gpu", {"model", "count", "memory"}));
  if (g["model"]) ns->gpu_model = Scalar(g["model"]);
  int64_t c = 1;
  if (g["count"]) TRY_ASSIGN(c, GetInt(g["count"], f + ".gpu.count"));
  TRY(Within(c, 0, kMaxGpusPerNode, f + ".gpu.count"));
  ns->gpu_count = static_cast<int>(c);
  if (g["memory"]) TRY_ASSIGN(ns->gpu_memory_mib, GetMemory(g["memory"], f + ".gpu.memory"));
  return Status::Ok();
}

// One `nodes` entry; with count > 1 it becomes nodes "NAME-0", "NAME-1", ...
Status ParseNodeEntry(const YAML::Node& n, size_t i, std::vector<quota::NodeSpec>* nodes) {
  std::string f = "nodes[" + EntryName(n, i) + "]";
  TRY(KnownKeys(n, f,
                {"name", "count", "pool", "cpu", "memory", "gpu", "mig", "amd_mode", "swap"}));
  quota::NodeSpec ns;
  ns.name = n["name"] ? Scalar(n["name"]) : "node" + std::to_string(i);
  int64_t count = 1;
  if (n["count"]) TRY_ASSIGN(count, GetInt(n["count"], f + ".count"));
  TRY(Within(count, 0, kMaxNodesPerEntry, f + ".count"));
  if (nodes->size() + static_cast<size_t>(count) > kMaxNodes) {
    return policy::FieldError(f + ".count",
                              "a scenario has at most " + std::to_string(kMaxNodes) + " nodes");
  }
  if (n["pool"]) ns.pool = Scalar(n["pool"]);
  if (n["cpu"]) TRY_ASSIGN(ns.cpu_milli, GetMilli(n["cpu"], f + ".cpu"));
  if (n["memory"]) TRY_ASSIGN(ns.memory_mib, GetMemory(n["memory"], f + ".memory"));
  // What swapped-out share memory may take on the node (host RAM and disk), as an agent reports.
  if (n["swap"]) TRY_ASSIGN(ns.swap_mib, GetMemory(n["swap"], f + ".swap"));
  if (n["gpu"]) TRY(ParseNodeGpu(n["gpu"], f, &ns));
  if (n["mig"]) TRY_ASSIGN(ns.mig_layout, GetStrings(n["mig"], f + ".mig"));
  if (n["amd_mode"]) ns.amd_mode = Scalar(n["amd_mode"]);
  // Up to 200,000 copies: grown once for them (still geometrically over many entries).
  const size_t needed = nodes->size() + static_cast<size_t>(count);
  if (needed > nodes->capacity()) nodes->reserve(std::max(needed, 2 * nodes->capacity()));
  for (int64_t k = 0; k < count; ++k) {
    nodes->push_back(ns);
    if (count > 1) nodes->back().name = ns.name + "-" + std::to_string(k);
  }
  return Status::Ok();
}

Status ParseCompareWith(const YAML::Node& n, Scenario* s) {
  TRY(KnownKeys(n, "compare_with", {"name", "class_forms"}));
  if (n["name"]) s->compare_name = Scalar(n["name"]);
  quota::ClassForms cf = s->policy.class_forms;
  if (n["class_forms"]) {
    TRY_ASSIGN(cf, policy::GetClassForms(n["class_forms"], "compare_with.class_forms", cf));
  }
  s->compare_forms = cf;
  return Status::Ok();
}

// A value or a list of them, used in turn, each read by `get`; `field` names them in errors,
// with the list index when `indexed` ("f.duration[2]").
template <typename T>
Status ParseOneOrList(const YAML::Node& n, const std::string& field, bool indexed,
                      Result<T> (*get)(const YAML::Node&, const std::string&),
                      std::vector<T>* out) {
  if (!n.IsSequence()) {
    T v{};
    TRY_ASSIGN(v, get(n, field));
    out->push_back(v);
    return Status::Ok();
  }
  for (size_t k = 0; k < n.size(); ++k) {
    T v{};
    TRY_ASSIGN(v, get(n[k], indexed ? field + "[" + std::to_string(k) + "]" : field));
    out->push_back(v);
  }
  return Status::Ok();
}

// A duration or a list of them, used in turn.
Status ParseDurations(const YAML::Node& n, const std::string& f, std::vector<int64_t>* out) {
  return ParseOneOrList(n, f + ".duration", true, GetDuration, out);
}

// A memory size or a list of them, used in turn.
Status ParseGpuMemories(const YAML::Node& g, const std::string& f, std::vector<MiB>* out) {
  return ParseOneOrList(g, f + ".gpu_memory", false, GetMemory, out);
}

// The request overrides of a workload entry: class, form, gpus, gpu_fraction, gpu_memory, cpu,
// memory.
Status ParseWorkloadRequest(const YAML::Node& n, const std::string& f, WorkloadEntry* w) {
  if (n["class"]) {
    auto c = quota::ParseWorkloadClass(Scalar(n["class"]));
    if (!c.ok()) return FieldError(f + ".class", c.status().message());
    w->base.cls = *c;
  }
  if (n["form"]) {
    auto fm = quota::ParseAllocationForm(Scalar(n["form"]));
    if (!fm.ok()) return FieldError(f + ".form", fm.status().message());
    w->base.form = *fm;
  }
  if (n["gpus"]) {
    int64_t c = 0;
    TRY_ASSIGN(c, GetInt(n["gpus"], f + ".gpus"));
    TRY(Within(c, 0, kMaxGpusPerNode, f + ".gpus"));
    w->base.gpu_count = static_cast<int>(c);
  }
  if (n["gpu_fraction"]) {
    int64_t m = 0;
    TRY_ASSIGN(m, GetMilli(n["gpu_fraction"], f + ".gpu_fraction"));
    w->base.gpu_milli = m;
  }
  if (n["gpu_memory"]) TRY(ParseGpuMemories(n["gpu_memory"], f, &w->gpu_memory_mib));
  if (n["cpu"]) {
    int64_t m = 0;
    TRY_ASSIGN(m, GetMilli(n["cpu"], f + ".cpu"));
    w->base.cpu_milli = m;
  }
  if (n["memory"]) {
    MiB m = 0;
    TRY_ASSIGN(m, GetMemory(n["memory"], f + ".memory"));
    w->base.memory_mib = m;
  }
  return Status::Ok();
}

Result<WorkloadEntry> ParseWorkloadEntry(const YAML::Node& n, size_t i) {
  std::string f = "workload[" + std::to_string(i) + "]";
  TRY(KnownKeys(
      n, f,
      {"queue", "identity", "group", "count", "at", "interval", "duration", "class", "form", "gpus",
       "gpu_fraction", "gpu_memory", "cpu", "memory", "walltime", "idle_after"}));
  WorkloadEntry w;
  if (!n["queue"]) return FieldError(f + ".queue", "required");
  TRY_ASSIGN(w.base.queue, GetString(n["queue"], f + ".queue"));
  w.base.identity = "user" + std::to_string(i);
  if (n["identity"]) TRY_ASSIGN(w.base.identity, GetString(n["identity"], f + ".identity"));
  if (n["group"]) TRY_ASSIGN(w.base.group, GetString(n["group"], f + ".group"));
  int64_t count = 1;
  if (n["count"]) TRY_ASSIGN(count, GetInt(n["count"], f + ".count"));
  TRY(Within(count, 0, kMaxJobsPerEntry, f + ".count"));
  w.count = static_cast<int>(count);
  if (n["at"]) TRY_ASSIGN(w.at_s, GetDuration(n["at"], f + ".at"));
  if (n["interval"]) TRY_ASSIGN(w.interval_s, GetDuration(n["interval"], f + ".interval"));
  if (!n["duration"]) return FieldError(f + ".duration", "required");
  TRY(ParseDurations(n["duration"], f, &w.durations_s));
  if (w.durations_s.empty()) return FieldError(f + ".duration", "empty list");
  TRY(ParseWorkloadRequest(n, f, &w));
  if (const YAML::Node wt = n["walltime"]) {  // true, false, or a duration declared
    Result<bool> declare = GetBool(wt, f + ".walltime");
    if (declare.ok()) {
      w.declare_walltime = *declare;
    } else {
      Result<int64_t> d = GetDuration(wt, f + ".walltime");
      if (!d.ok() || *d <= 0) {
        return FieldError(f + ".walltime", "expected true, false or a positive duration");
      }
      w.walltime_s = *d;
    }
  }
  if (n["idle_after"]) TRY_ASSIGN(w.idle_after_s, GetDuration(n["idle_after"], f + ".idle_after"));
  return w;
}

Status ParseOutages(const YAML::Node& list, Scenario& s) {
  if (!list.IsSequence()) return FieldError("outages", "a list is required");
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node& n = list[i];
    std::string f = "outages[" + std::to_string(i) + "]";
    TRY(KnownKeys(n, f, {"node", "at", "for"}));
    Outage o;
    if (!n["node"]) return FieldError(f + ".node", "required");
    o.node = Scalar(n["node"]);
    bool known = std::any_of(s.nodes.begin(), s.nodes.end(),
                             [&](const quota::NodeSpec& x) { return x.name == o.node; });
    if (!known) return FieldError(f + ".node", "no node '" + o.node + "'");
    if (n["at"]) TRY_ASSIGN(o.at_s, GetDuration(n["at"], f + ".at"));
    if (!n["for"]) return FieldError(f + ".for", "required");
    TRY_ASSIGN(o.for_s, GetDuration(n["for"], f + ".for"));
    if (o.for_s <= 0) return FieldError(f + ".for", "must be positive");
    s.outages.push_back(o);
  }
  return Status::Ok();
}

Result<Scenario> Parse(const YAML::Node& root) {
  Scenario s;
  policy::PolicyKeys keys;
  keys.extra_root = {"name", "until", "cycle", "nodes", "workload", "compare_with", "outages"};
  keys.extra_queue = {"swap"};
  TRY_ASSIGN(s.policy, policy::ParsePolicy(root, keys));
  // A queue's `swap: true` (as in the server's config, with its default overcommit of 2): its
  // shares may swap, and an idle one is swapped out by idle_timeout rather than stopped.
  for (size_t i = 0; root["queues"] && i < root["queues"].size(); ++i) {
    const YAML::Node q = root["queues"][i];
    if (!q["swap"]) continue;
    bool swap = false;
    TRY_ASSIGN(swap, GetBool(q["swap"], "queues[" + policy::EntryName(q, i) + "].swap"));
    s.policy.queues[i].swap_overcommit_percent = swap ? 200 : 0;
  }
  s.name = root["name"] ? Scalar(root["name"]) : "scenario";
  if (root["until"]) TRY_ASSIGN(s.until_s, GetDuration(root["until"], "until"));
  if (root["cycle"]) TRY_ASSIGN(s.cycle_s, GetDuration(root["cycle"], "cycle"));
  if (s.cycle_s <= 0) return FieldError("cycle", "must be positive");
  if (!root["nodes"] || !root["nodes"].IsSequence())
    return FieldError("nodes", "a list is required");
  for (size_t i = 0; i < root["nodes"].size(); ++i)
    TRY(ParseNodeEntry(root["nodes"][i], i, &s.nodes));
  if (root["compare_with"]) TRY(ParseCompareWith(root["compare_with"], &s));
  if (!root["workload"] || !root["workload"].IsSequence()) {
    return FieldError("workload", "a list is required");
  }
  for (size_t i = 0; i < root["workload"].size(); ++i) {
    WorkloadEntry w;
    TRY_ASSIGN(w, ParseWorkloadEntry(root["workload"][i], i));
    // Names the policy has: a job of no queue or group would only be counted "rejected".
    const std::string f = "workload[" + std::to_string(i) + "]";
    if (!std::any_of(s.policy.queues.begin(), s.policy.queues.end(),
                     [&](const quota::QueueSpec& q) { return q.name == w.base.queue; }))
      return FieldError(f + ".queue", "no queue '" + w.base.queue + "'");
    if (!w.base.group.empty() &&
        !std::any_of(s.policy.groups.begin(), s.policy.groups.end(),
                     [&](const quota::GroupSpec& g) { return g.name == w.base.group; }))
      return FieldError(f + ".group", "no group '" + w.base.group + "'");
    s.workload.push_back(w);
  }
  if (root["outages"]) TRY(ParseOutages(root["outages"], s));
  Status v = quota::Validate(s.policy);
  if (!v.ok()) return v;
  return s;
}

}  // namespace

Result<Scenario> ParseScenario(std::string_view yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(std::string("YAML: ") + e.what());
  }
  try {
    if (Status twice = policy::UniqueKeys(root, ""); !twice.ok()) return twice;
    return Parse(root);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(std::string("YAML: ") + e.what());
  }
}

Result<Scenario> LoadScenario(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read scenario '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  auto s = ParseScenario(ss.str());
  if (!s.ok()) return Status::InvalidArgument(path + ": " + s.status().message());
  return s;
}

}  // namespace tessera::sim
