#include "sim/scenario.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <queue>
#include <set>
#include <sstream>
#include <unordered_map>

#include "model/quantity.h"
#include "policy/policy_yaml.h"
#include "policy/yaml_fields.h"

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
  TRY(KnownKeys(n, f, {"name", "count", "pool", "cpu", "memory", "gpu", "mig", "amd_mode"}));
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
  w.base.queue = Scalar(n["queue"]);
  w.base.identity = n["identity"] ? Scalar(n["identity"]) : "user" + std::to_string(i);
  if (n["group"]) w.base.group = Scalar(n["group"]);
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
  if (n["walltime"]) TRY_ASSIGN(w.declare_walltime, GetBool(n["walltime"], f + ".walltime"));
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
    s.workload.push_back(w);
  }
  if (root["outages"]) TRY(ParseOutages(root["outages"], s));
  Status v = quota::Validate(s.policy);
  if (!v.ok()) return v;
  return s;
}

int64_t Percentile(std::vector<int64_t> v, int pct) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t idx = (v.size() * static_cast<size_t>(pct) + 99) / 100;
  if (idx > 0) --idx;
  return v[std::min(idx, v.size() - 1)];
}

// The kind of a preemption or repartition, without the job-specific parts.
std::string Reason(const quota::Event& e) {
  const std::string& d = e.detail;
  if (e.kind == quota::EventKind::kPreempted) {
    if (d.rfind("reclaim", 0) == 0) return "reclaim: a group below its reservation took it back";
    if (d.rfind("idle_timeout", 0) == 0) return "idle past its queue's idle_timeout: requeued";
    if (d.rfind("priority", 0) == 0) return "priority preemption inside the group";
    if (d.rfind("drain", 0) == 0) return "drained for a repartition";
    return d.substr(0, d.find(';'));
  }
  if (d.find("created") != std::string::npos) return "instance created on free slices";
  if (d.find("MIG enabled") != std::string::npos) return "MIG enabled on an idle device";
  if (d.find("compute mode") != std::string::npos) return "AMD compute mode set on an idle device";
  if (d.find("node-wide") != std::string::npos) return "AMD memory mode changed (node drained)";
  return "layout changed after draining";
}

struct Arrival {
  int64_t time = 0;
  quota::JobSpec spec;
  int64_t duration = 0;
  MilliGpu nominal_gpu = 0;
  int64_t idle_after = -1;
};

// The jobs of one workload entry, numbered "IDENTITY-ENTRY-I".
void AddArrivals(const WorkloadEntry& w, size_t k, const quota::ProfileSpec* prof,
                 std::vector<Arrival>* arrivals) {
  for (int i = 0; i < w.count; ++i) {
    Arrival a;
    a.time = w.at_s + w.interval_s * i;
    a.spec = w.base;
    a.spec.id = w.base.identity + "-" + std::to_string(k) + "-" + std::to_string(i);
    a.duration = w.durations_s[static_cast<size_t>(i) % w.durations_s.size()];
    if (!w.gpu_memory_mib.empty()) {
      a.spec.gpu_memory_mib = w.gpu_memory_mib[static_cast<size_t>(i) % w.gpu_memory_mib.size()];
    }
    a.spec.walltime_s = w.declare_walltime ? a.duration : 0;
    a.idle_after = w.idle_after_s;
    int count = a.spec.gpu_count.value_or(prof ? prof->gpu_count : 1);
    MilliGpu milli = a.spec.gpu_milli.value_or(prof ? prof->gpu_milli : kWholeGpu);
    a.nominal_gpu = count * milli;
    arrivals->push_back(std::move(a));
  }
}

// The arrivals, in time order.
std::vector<Arrival> Arrivals(const Scenario& s) {
  std::map<std::string, const quota::ProfileSpec*> profile_of_queue;
  for (const quota::QueueSpec& q : s.policy.queues) {
    for (const quota::ProfileSpec& p : s.policy.profiles) {
      if (p.name == q.profile) profile_of_queue[q.name] = &p;
    }
  }
  std::vector<Arrival> arrivals;
  for (size_t k = 0; k < s.workload.size(); ++k) {
    const WorkloadEntry& w = s.workload[k];
    const quota::ProfileSpec* prof =
        profile_of_queue.count(w.base.queue) ? profile_of_queue[w.base.queue] : nullptr;
    AddArrivals(w, k, prof, &arrivals);
  }
  std::stable_sort(arrivals.begin(), arrivals.end(),
                   [](const Arrival& a, const Arrival& b) { return a.time < b.time; });
  return arrivals;
}

struct SimJob {
  int group = 0;
  int cls = 0;
  int64_t submit = 0, duration = 0, start = -1;
  int64_t idle_after = -1;
  MilliGpu nominal = 0;
  bool started_once = false;
  bool pending = false;
};

// One run on the virtual clock: feeds the engine arrivals and completions cycle by cycle and
// builds the report from its events and samples.
class ScenarioRun {
 public:
  ScenarioRun(const Scenario& s, quota::QuotaEngine& e, const std::string& name,
              verify::Checker& checker)
      : s_(s), e_(e), checker_(checker), arrivals_(Arrivals(s)) {
    InitReport(name);
  }

  void Cycle(int64_t t) {
    FeedUntil(t);
    Outages(t);
    quota::CycleStats cs = e_.RunCycle(t);
    ++r_.cycles;
    r_.backfilled += cs.backfilled;
    FollowEvents();
    checker_.AfterCycle(e_, t);
    r_.sample_times.push_back(t);
    SampleGroups(t);
    SampleDevices();
  }

  RunReport Finish() {
    CloseReclaims();
    double cycles = static_cast<double>(std::max<int64_t>(r_.cycles, 1));
    r_.gpu_compute_utilization = gpu_util_sum_ / cycles;
    r_.gpu_memory_utilization = mem_util_sum_ / cycles;
    CountJobs();
    Summarize(cycles);
    r_.preemption_reasons.assign(preempt_reasons_.begin(), preempt_reasons_.end());
    r_.repartition_reasons.assign(repart_reasons_.begin(), repart_reasons_.end());
    return std::move(r_);
  }

 private:
  using Completion = std::tuple<int64_t, int, int64_t>;  // end, handle, start

  // Nodes lost (what they held goes back to pending) and returned, up to t.
  void Outages(int64_t t) {
    for (const Outage& o : s_.outages) {
      const bool down = o.at_s <= t && t < o.at_s + o.for_s;
      if (down == down_[o.node]) continue;
      down_[o.node] = down;
      e_.SetNodeDown(o.node, down);
      checker_.NodeDown(o.node, down);
      if (!down) continue;
      std::vector<quota::GrantView> grants;
      for (int h = 0; h < e_.job_count(); ++h) {
        quota::JobState st = e_.job_state(h);
        if (st != quota::JobState::kRunning && st != quota::JobState::kTerminating) continue;
        e_.HeldOf(h, &grants, nullptr, nullptr);
        bool there = std::any_of(grants.begin(), grants.end(),
                                 [&](const quota::GrantView& g) { return g.node == o.node; });
        if (there) e_.Requeue(h, t, "node " + o.node + " lost");
      }
    }
  }

  void InitReport(const std::string& name) {
    r_.name = name;
    r_.devices = e_.device_count();
    std::vector<quota::GroupView> gv = e_.groups();
    for (size_t g = 0; g < gv.size(); ++g) {
      group_index_[gv[g].name] = static_cast<int>(g);
      GroupReport gr;
      gr.name = gv[g].name;
      gr.reservation_gpu = gv[g].reservation.gpu_milli;
      gr.limit_gpu = gv[g].limit.gpu_milli;
      r_.groups.push_back(gr);
    }
    for (int c = 0; c < quota::kClassCount; ++c) {
      ClassReport cr;
      cr.name = quota::WorkloadClassName(static_cast<WorkloadClass>(c));
      r_.classes.push_back(cr);
    }
    group_waits_.resize(r_.groups.size());
    class_waits_.resize(quota::kClassCount);
    pending_gpu_.resize(r_.groups.size());
    short_since_.assign(r_.groups.size(), -1);
    class_dev_sum_.assign(quota::kClassCount, 0);
    group_held_sum_.assign(r_.groups.size(), 0);
  }

  // Completions, runtime-guard stops (at their exact second: a job ending then completes) and
  // arrivals up to t, in time order.
  void FeedUntil(int64_t t) {
    while (true) {
      bool has_arrival = next_ < arrivals_.size() && arrivals_[next_].time <= t;
      bool has_done = !completions_.empty() && std::get<0>(completions_.top()) <= t;
      // Idleness (idle_after) and the idle guard's give-backs, at their exact seconds: before
      // what happens later, after a completion at the same second.
      int64_t later = t;
      if (has_arrival) later = std::min(later, arrivals_[next_].time);
      if (has_done) later = std::min(later, std::get<0>(completions_.top()));
      if (!idles_.empty() && std::get<0>(idles_.top()) <= later &&
          !(has_done && std::get<0>(completions_.top()) == std::get<0>(idles_.top()))) {
        auto [at, h, start] = idles_.top();
        idles_.pop();
        if (e_.job_state(h) == quota::JobState::kRunning && jobs_[h].start == start)
          e_.SetIdle(h, at);
        continue;
      }
      const int64_t give_back = e_.NextIdleGiveBack();
      if (give_back >= 0 && give_back <= later &&
          !(has_done && std::get<0>(completions_.top()) <= give_back)) {
        e_.GiveBackIdle(give_back);
        continue;
      }
      const int64_t stop = e_.NextRuntimeStop();
      if (stop >= 0 && stop <= t && (!has_done || stop < std::get<0>(completions_.top())) &&
          (!has_arrival || stop <= arrivals_[next_].time)) {
        e_.StopOverRuntime(stop);
        continue;
      }
      if (!has_arrival && !has_done) break;
      if (has_done && (!has_arrival || std::get<0>(completions_.top()) <= arrivals_[next_].time)) {
        auto [end, h, start] = completions_.top();
        completions_.pop();
        quota::JobState st = e_.job_state(h);
        // A job preempted and placed again since has a newer completion of its own.
        if ((st == quota::JobState::kRunning || st == quota::JobState::kTerminating) &&
            jobs_[h].start == start) {
          e_.Complete(h, end);
        }
        continue;
      }
      Arrive(arrivals_[next_++]);
    }
  }

  void Arrive(const Arrival& a) {
    auto h = e_.Submit(a.spec, a.time);
    ++r_.jobs;
    if (!h.ok()) {
      ++r_.rejected;
      return;
    }
    checker_.Submitted(*h, a.spec);
    if (static_cast<size_t>(*h) >= jobs_.size()) jobs_.resize(*h + 1);
    SimJob& sj = jobs_[*h];
    auto gi = group_index_.find(e_.job(*h).group);
    sj.group = gi->second;
    sj.cls = static_cast<int>(e_.job(*h).cls);
    sj.submit = a.time;
    sj.duration = a.duration;
    sj.idle_after = a.idle_after;
    sj.nominal = a.nominal_gpu;
    handle_of_[a.spec.id] = *h;
  }

  // Follow the events of this step.
  void FollowEvents() {
    const std::vector<quota::Event>& ev = e_.events();
    for (; cursor_ < ev.size(); ++cursor_) {
      const quota::Event& x = ev[cursor_];
      if (x.kind == quota::EventKind::kSwappedOut) {
        ++r_.swapped_out;
        if (r_.notable_events.size() < 50) r_.notable_events.push_back(x);
        continue;
      }
      if (x.kind == quota::EventKind::kPreempted) {
        if (x.detail.rfind("idle_timeout:", 0) == 0) ++r_.idle_requeued;
        ++r_.preemptions;
        ++preempt_reasons_[Reason(x)];
        if (r_.notable_events.size() < 50) r_.notable_events.push_back(x);
        continue;
      }
      if (x.kind == quota::EventKind::kStopped) {
        ++(x.detail.rfind("idle_timeout:", 0) == 0 ? r_.idle_stopped : r_.stopped);
        if (r_.notable_events.size() < 50) r_.notable_events.push_back(x);
        continue;
      }
      if (x.kind == quota::EventKind::kRepartitioned) {
        ++r_.repartitions;
        ++repart_reasons_[Reason(x)];
        if (r_.notable_events.size() < 50) r_.notable_events.push_back(x);
        continue;
      }
      OnJobEvent(x);
    }
  }

  void OnJobEvent(const quota::Event& x) {
    auto it = handle_of_.find(x.job);
    if (it == handle_of_.end()) return;
    SimJob& sj = jobs_[it->second];
    if (x.kind == quota::EventKind::kSubmitted || x.kind == quota::EventKind::kRequeued) {
      sj.pending = true;
      pending_gpu_[sj.group].insert(sj.nominal);
    } else if (x.kind == quota::EventKind::kPlaced) {
      if (sj.pending) {
        pending_gpu_[sj.group].erase(pending_gpu_[sj.group].find(sj.nominal));
        sj.pending = false;
      }
      sj.start = x.time;
      completions_.push({x.time + sj.duration, it->second, x.time});
      if (sj.idle_after >= 0 && sj.idle_after < sj.duration)
        idles_.push({x.time + sj.idle_after, it->second, x.time});
      if (!sj.started_once) {
        sj.started_once = true;
        group_waits_[sj.group].push_back(x.time - sj.submit);
        class_waits_[sj.cls].push_back(x.time - sj.submit);
      }
    }
  }

  void SampleGroups(int64_t t) {
    const std::vector<quota::MemberView> mv = e_.members();
    for (size_t m = 0; m < mv.size(); ++m) {
      if (m >= r_.members.size()) {
        r_.members.push_back({mv[m].group, mv[m].identity, mv[m].weight_milli, {}});
        r_.members.back().gpu_held.assign(r_.sample_times.size() - 1, 0);  // not seen before
      }
      r_.members[m].gpu_held.push_back(mv[m].usage.gpu_milli);
    }
    std::vector<quota::GroupView> gv = e_.groups();
    for (size_t g = 0; g < gv.size(); ++g) {
      GroupReport& gr = r_.groups[g];
      MilliGpu held = gv[g].usage.gpu_milli;
      gr.gpu_held.push_back(held);
      gr.max_gpu_held = std::max(gr.max_gpu_held, held);
      group_held_sum_[g] += static_cast<double>(held);
      if (held > gv[g].limit.gpu_milli) gr.limit_exceeded = true;
      // Short of its reservation while asking for something inside it?
      MilliGpu room = gv[g].reservation.gpu_milli - held;
      bool shorted = room > 0 && !pending_gpu_[g].empty() && *pending_gpu_[g].begin() <= room;
      if (shorted && short_since_[g] < 0) short_since_[g] = t;
      if (!shorted && short_since_[g] >= 0) {
        gr.reclaim_times_s.push_back(t - short_since_[g]);
        gr.reclaim_max_s = std::max(gr.reclaim_max_s, t - short_since_[g]);
        short_since_[g] = -1;
      }
    }
  }

  void SampleDevices() {
    Resources a = e_.allocated();
    gpu_util_sum_ += static_cast<double>(a.gpu_milli) /
                     static_cast<double>(std::max<MilliGpu>(e_.gpu_capacity(), 1));
    mem_util_sum_ += static_cast<double>(a.gpu_memory_mib) /
                     static_cast<double>(std::max<MiB>(e_.gpu_memory_capacity(), 1));
    std::vector<int> used = e_.devices_used_by_class();
    for (int c = 0; c < quota::kClassCount; ++c) {
      r_.classes[c].max_devices = std::max(r_.classes[c].max_devices, used[c]);
      class_dev_sum_[c] += used[c];
    }
  }

  // Still short at the end: count the open interval too.
  void CloseReclaims() {
    for (size_t g = 0; g < r_.groups.size(); ++g) {
      if (short_since_[g] >= 0) {
        int64_t d = r_.sample_times.empty() ? 0 : r_.sample_times.back() - short_since_[g];
        r_.groups[g].reclaim_times_s.push_back(d);
        r_.groups[g].reclaim_max_s = std::max(r_.groups[g].reclaim_max_s, d);
      }
    }
  }

  void CountJobs() {
    for (size_t h = 0; h < jobs_.size(); ++h) {
      const SimJob& sj = jobs_[h];
      GroupReport& gr = r_.groups[sj.group];
      ++gr.jobs;
      ++r_.classes[sj.cls].jobs;
      if (sj.started_once) {
        ++gr.started;
      } else {
        ++gr.never_started;
        // A job that never started waited at least until the end.
        int64_t w = s_.until_s - sj.submit;
        group_waits_[sj.group].push_back(w);
        class_waits_[sj.cls].push_back(w);
      }
    }
  }

  void Summarize(double cycles) {
    for (size_t g = 0; g < r_.groups.size(); ++g) {
      GroupReport& gr = r_.groups[g];
      gr.mean_gpu_held = group_held_sum_[g] / cycles;
      gr.wait_p50_s = Percentile(group_waits_[g], 50);
      gr.wait_p99_s = Percentile(group_waits_[g], 99);
      gr.wait_max_s = Percentile(group_waits_[g], 100);
    }
    for (int c = 0; c < quota::kClassCount; ++c) {
      ClassReport& cr = r_.classes[c];
      cr.mean_devices = class_dev_sum_[c] / cycles;
      cr.wait_p50_s = Percentile(class_waits_[c], 50);
      cr.wait_p99_s = Percentile(class_waits_[c], 99);
      cr.wait_max_s = Percentile(class_waits_[c], 100);
    }
  }

  const Scenario& s_;
  quota::QuotaEngine& e_;
  verify::Checker& checker_;
  std::map<std::string, bool> down_;
  const std::vector<Arrival> arrivals_;
  RunReport r_;
  std::map<std::string, int> group_index_;
  std::vector<SimJob> jobs_;  // by engine handle
  std::unordered_map<std::string, int> handle_of_;
  std::vector<std::vector<int64_t>> group_waits_, class_waits_;
  // Pending nominal GPU per group, for "demand within the reservation".
  std::vector<std::multiset<MilliGpu>> pending_gpu_;
  std::priority_queue<Completion, std::vector<Completion>, std::greater<>> completions_;
  std::priority_queue<Completion, std::vector<Completion>, std::greater<>> idles_;  // idle_after
  std::map<std::string, int64_t> preempt_reasons_, repart_reasons_;
  std::vector<int64_t> short_since_;
  double gpu_util_sum_ = 0, mem_util_sum_ = 0;
  std::vector<double> class_dev_sum_;
  std::vector<double> group_held_sum_;
  size_t next_ = 0, cursor_ = 0;
};

}  // namespace

Result<Scenario> ParseScenario(std::string_view yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(std::string("YAML: ") + e.what());
  }
  try {
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

Result<RunReport> RunOnce(const Scenario& s, const std::string& name, RunOptions o) {
  auto started = std::chrono::steady_clock::now();
  auto created = quota::QuotaEngine::Create(
      s.policy, s.nodes,
      {.check_invariants_each_step = o.check_invariants_each_step, .engine_break = o.engine_break});
  if (!created.ok()) return created.status();
  quota::QuotaEngine& e = **created;
  verify::Checker checker(s.policy, s.nodes,
                          {.cycle_s = s.cycle_s,
                           .grace_s = s.policy.grace_seconds,
                           .max_reconfigurations_per_hour = o.max_reconfigurations_per_hour});
  ScenarioRun run(s, e, name, checker);
  for (int64_t t = 0; t <= s.until_s; t += s.cycle_s) run.Cycle(t);
  RunReport r = run.Finish();
  r.invariant_violations = e.violations();
  r.promises = checker.violations();
  r.seen = checker.seen();
  for (const verify::Violation& v : r.promises) r.invariant_violations.push_back(v.ToString());
  Status final_check = e.CheckInvariants();
  if (!final_check.ok()) r.invariant_violations.push_back("at end: " + final_check.message());
  if (o.events != nullptr) *o.events = e.events();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return r;
}

Result<ScenarioReport> RunScenario(const Scenario& s, RunOptions o) {
  ScenarioReport out;
  out.scenario = s.name;
  auto run = RunOnce(s, "policy", o);
  if (!run.ok()) return run.status();
  out.run = std::move(run).value();
  if (s.compare_forms) {
    Scenario b = s;
    b.policy.class_forms = *s.compare_forms;
    auto base = RunOnce(b, s.compare_name, o);
    if (!base.ok()) return base.status();
    out.baseline = std::move(base).value();
  }
  return out;
}

}  // namespace tessera::sim
