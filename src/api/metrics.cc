// GET /metrics: the Prometheus text exposition format, version 0.0.4. What the views show
// (capacity, allocation, jobs, heartbeats, telemetry) read under the engine's mutex and copied,
// counters since start (admissions, preemptions, repartitions) and latency histograms
// (scheduling cycle, HTTP requests), rendered outside it. The metric list: docs/metrics.md.
//
// Units are the base ones (bytes, seconds, ratios), except GPU compute and CPU, counted in
// thousandths (`_gpu_milli`, `_cpu_milli`: 1000 per card or core) as everywhere in Tessera.
// Everything is integer arithmetic; decimals are printed from integers (microseconds,
// milliseconds, percent), never through floating point.
#include <algorithm>
#include <array>
#include <cctype>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "api/views.h"
#include "common/text.h"

namespace tessera::api {
namespace {

constexpr const auto& kBoundsUs = LatencyHistogram::kBoundsUs;
constexpr int64_t kMiB = int64_t{1} << 20;

// `v` / 10^digits as a decimal ("0.0005", "12", "-1.5"): trailing zeros trimmed.
std::string Decimal(int64_t v, int digits) {
  int64_t scale = 1;
  for (int i = 0; i < digits; ++i) scale *= 10;
  const bool negative = v < 0;
  const uint64_t a = negative ? static_cast<uint64_t>(-(v + 1)) + 1 : static_cast<uint64_t>(v);
  std::string out = (negative ? "-" : "") + std::to_string(a / scale);
  std::string frac = std::to_string(a % scale);
  frac.insert(0, static_cast<size_t>(digits) - frac.size(), '0');
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  return frac.empty() ? out : out + "." + frac;
}

// A label value escaped per the exposition format: backslash, double quote, line feed.
std::string Escape(const std::string& v) {
  return EscapeChars(v, {{'\\', "\\\\"}, {'"', "\\\""}, {'\n', "\\n"}});
}

using Labels = std::vector<std::pair<std::string, std::string>>;

// One metric family: its HELP and TYPE lines and samples, in the order added. A family without
// samples prints nothing.
class Family {
 public:
  Family(std::string name, std::string type, std::string help)
      : name_(std::move(name)), type_(std::move(type)), help_(std::move(help)) {}
  void Add(const Labels& labels, const std::string& value) { Sample("", labels, value); }
  void Add(const Labels& labels, int64_t value) { Sample("", labels, std::to_string(value)); }
  void AddHistogram(const Labels& labels, const LatencyHistogram& h) {
    int64_t cumulative = 0;
    for (size_t i = 0; i <= kBoundsUs.size(); ++i) {
      if (i < h.counts.size()) cumulative += h.counts[i];
      Labels with = labels;
      with.emplace_back("le", i < kBoundsUs.size() ? Decimal(kBoundsUs[i], 6) : "+Inf");
      Sample("_bucket", with, std::to_string(cumulative));
    }
    Sample("_sum", labels, Decimal(h.sum_us, 6));
    Sample("_count", labels, std::to_string(h.count));
  }
  void RenderTo(std::string& out) const {
    if (samples_.empty()) return;
    out += "# HELP " + name_ + " " + help_ + "\n# TYPE " + name_ + " " + type_ + "\n" + samples_;
  }

 private:
  void Sample(const char* suffix, const Labels& labels, const std::string& value) {
    samples_ += name_ + suffix;
    if (!labels.empty()) {
      samples_ += '{';
      for (size_t i = 0; i < labels.size(); ++i) {
        samples_ += (i ? "," : "") + labels[i].first + "=\"" + Escape(labels[i].second) + "\"";
      }
      samples_ += '}';
    }
    samples_ += " " + value + "\n";
  }
  std::string name_, type_, help_;
  std::string samples_;
};

// The step of a pending job's reason ("Placement: no device ..." -> "Placement"): one word, so
// that the label stays bounded; anything else is "Other".
std::string WaitStep(const std::string& reason) {
  const size_t colon = reason.find(": ");
  if (colon == std::string::npos || colon == 0 || colon > 32) return "Other";
  const std::string step = reason.substr(0, colon);
  const bool word = std::all_of(step.begin(), step.end(),
                                [](char c) { return std::isalpha(static_cast<unsigned char>(c)); });
  return word ? step : "Other";
}

// What the render needs, copied under the engine's mutex.
struct DeviceRow {
  int index = 0;
  std::string model;
  MiB memory_mib = 0;
  int util_pct = -1;
  MiB memory_used_mib = -1;
  bool healthy = true;
  std::string isolation{};
};
struct NodeRow {
  std::string name, pool;
  MilliCpu cpu_milli = 0;
  MiB memory_mib = 0;
  int64_t heartbeat_age_ms = 0;
  bool lost = false;
  std::vector<DeviceRow> devices;
};
struct JobRow {
  std::string id;
  JobState state = JobState::kPending;
  std::string queue, group, reason, form, node;
  bool holds = false, idle = false;
  MiB gpu_memory_used_mib = -1;
  std::vector<quota::GrantView> grants;
  std::string swap_state;
  MiB swapped_mib = 0;
};

// Counters since start and latency histograms, copied under their locks.
struct Counters {
  std::map<std::tuple<std::string, std::string, std::string>, int64_t> admissions;
  std::map<std::string, int64_t> preemptions, repartitions;
  LatencyHistogram cycle;
  std::map<std::tuple<std::string, std::string, int>, LatencyHistogram> http;
};

// The nodes' and their devices' families: capacity, heartbeats, telemetry.
struct NodeFamilies {
  Family dev_gpu{"tessera_device_gpu_milli", "gauge",
                 "GPU compute capacity of a device, in thousandths of a card (1000 per card)."};
  Family dev_mem{"tessera_device_memory_bytes", "gauge", "GPU memory of a device."};
  Family node_cpu{"tessera_node_cpu_milli", "gauge",
                  "CPU capacity of a node, in thousandths of a core."};
  Family node_mem{"tessera_node_memory_bytes", "gauge", "Host memory of a node."};
  Family hb_age{"tessera_agent_heartbeat_age_seconds", "gauge",
                "Time since the node's agent last registered or heartbeat."};
  Family lost{"tessera_node_lost", "gauge",
              "1 when the node is lost (no heartbeat within heartbeat_timeout), else 0."};
  Family util{"tessera_device_utilization_ratio", "gauge",
              "SM utilization of a device as its agent last reported it (0 to 1)."};
  Family mem_used{"tessera_device_memory_used_bytes", "gauge",
                  "GPU memory in use on a device as its agent last reported it."};
  Family unhealthy{"tessera_device_unhealthy", "gauge",
                   "1 when the device's agent reports it unhealthy (a critical XID, a double-bit "
                   "ECC error): it takes no new work; else 0."};
  Family isolation{"tessera_device_isolation", "gauge",
                   "1 for the isolation grade (none, preload, mps, driver, hardware) the device's "
                   "agent gives co-resident work there (absent when it says none)."};
};

NodeFamilies NodeMetrics(const std::vector<NodeRow>& nodes) {
  NodeFamilies f;
  for (const NodeRow& n : nodes) {
    for (const DeviceRow& d : n.devices) {
      const Labels l = {{"node", n.name},
                        {"device", std::to_string(d.index)},
                        {"model", d.model},
                        {"pool", n.pool}};
      f.dev_gpu.Add(l, kWholeGpu);
      f.dev_mem.Add(l, d.memory_mib * kMiB);
      const Labels nd = {{"node", n.name}, {"device", std::to_string(d.index)}};
      if (d.util_pct >= 0) f.util.Add(nd, Decimal(d.util_pct, 2));
      if (d.memory_used_mib >= 0) f.mem_used.Add(nd, d.memory_used_mib * kMiB);
      f.unhealthy.Add(nd, d.healthy ? 0 : 1);
      if (!d.isolation.empty())
        f.isolation.Add(
            {{"node", n.name}, {"device", std::to_string(d.index)}, {"grade", d.isolation}}, 1);
    }
    f.node_cpu.Add({{"node", n.name}, {"pool", n.pool}}, n.cpu_milli);
    f.node_mem.Add({{"node", n.name}, {"pool", n.pool}}, n.memory_mib * kMiB);
    f.hb_age.Add({{"node", n.name}}, Decimal(n.heartbeat_age_ms, 3));
    f.lost.Add({{"node", n.name}}, n.lost ? 1 : 0);
  }
  return f;
}

// The jobs' families: allocation, counts by state and wait step, idleness.
struct JobFamilies {
  Family a_gpu{"tessera_allocated_gpu_milli", "gauge",
               "GPU compute held by jobs, in thousandths of a card."};
  Family a_gmem{"tessera_allocated_gpu_memory_bytes", "gauge", "GPU memory held by jobs."};
  Family a_cpu{"tessera_allocated_cpu_milli", "gauge",
               "Host CPU held by jobs, in thousandths of a core."};
  Family a_mem{"tessera_allocated_memory_bytes", "gauge", "Host memory held by jobs."};
  Family jobs_fam{"tessera_jobs", "gauge",
                  "Jobs not ended, by state (pending, placed, starting, running, preempting)."};
  Family pending_fam{
      "tessera_pending_jobs", "gauge",
      "Pending jobs by queue and the step that holds them (Admission, Placement, Backfill, ...)."};
  Family alloc_idle{"tessera_allocation_idle", "gauge",
                    "1 when the allocation is held but idle (no activity on its devices for "
                    "idle_after), else 0."};
  Family alloc_mem_used{
      "tessera_allocation_gpu_memory_used_bytes", "gauge",
      "GPU memory the allocation's processes use, as its agent last reported it."};
  Family alloc_swapped{
      "tessera_allocation_gpu_memory_swapped_bytes", "gauge",
      "A swapping share's device memory held off the device (host RAM or disk), with its swap "
      "state (resident, swapped, resuming, ...), as its agent last reported it."};
  Family idle_fam{"tessera_idle_held_gpu_milli", "gauge",
                  "GPU compute held by idle allocations, by group, in thousandths of a card."};
};

// Allocation: the grants of the jobs that hold something, summed by where and whose; the jobs
// counted by state and by what holds the pending ones.
struct JobTally {
  using DevKey = std::tuple<std::string, int, std::string, std::string,
                            std::string>;  // node, device, form, group, queue
  using NodeKey =
      std::tuple<std::string, std::string, std::string, std::string>;  // node, form, group, queue
  std::map<DevKey, std::pair<MilliGpu, MiB>> by_device;
  std::map<NodeKey, std::pair<MilliCpu, MiB>> by_node;
  std::map<std::tuple<std::string, std::string, std::string>, int64_t>
      job_count;                                                   // state, queue, group
  std::map<std::pair<std::string, std::string>, int64_t> pending;  // queue, step
  std::map<std::string, MilliGpu> idle_held;
};

// Sums the jobs into `t`, and adds each holding job's idleness and memory use to `f`.
void TallyJobs(const std::vector<JobRow>& jobs, JobTally* t, JobFamilies* f) {
  for (const JobRow& j : jobs) {
    ++t->job_count[{JobStateName(j.state), j.queue, j.group}];
    if (j.state == JobState::kPending) ++t->pending[{j.queue, WaitStep(j.reason)}];
    if (!j.holds || j.grants.empty()) continue;  // external backends' jobs hold no grants here
    for (const auto& g : j.grants) {
      if (g.device >= 0) {
        auto& v = t->by_device[{g.node, g.device, j.form, j.group, j.queue}];
        v.first += g.compute;
        v.second += g.memory;
        if (j.idle) t->idle_held[j.group] += g.compute;
      }
      auto& c = t->by_node[{g.node, j.form, j.group, j.queue}];
      c.first += g.cpu;
      c.second += g.host_memory;
    }
    const Labels l = {{"job", j.id}, {"node", j.node}, {"group", j.group}, {"queue", j.queue}};
    f->alloc_idle.Add(l, j.idle ? 1 : 0);
    if (j.gpu_memory_used_mib >= 0) f->alloc_mem_used.Add(l, j.gpu_memory_used_mib * kMiB);
    if (!j.swap_state.empty()) {
      Labels sl = l;
      sl.push_back({"state", j.swap_state});
      f->alloc_swapped.Add(sl, j.swapped_mib * kMiB);
    }
  }
}

// What the jobs hold, by device (GPU) and by node (host).
void AllocationMetrics(const JobTally& t, std::map<std::string, std::string>& pool_of,
                       JobFamilies* f) {
  for (const auto& [k, v] : t.by_device) {
    const auto& [node, device, form, group, queue] = k;
    const Labels l = {{"node", node},   {"device", std::to_string(device)},
                      {"form", form},   {"group", group},
                      {"queue", queue}, {"pool", pool_of[node]}};
    f->a_gpu.Add(l, v.first);
    f->a_gmem.Add(l, v.second * kMiB);
  }
  for (const auto& [k, v] : t.by_node) {
    const auto& [node, form, group, queue] = k;
    const Labels l = {{"node", node},
                      {"form", form},
                      {"group", group},
                      {"queue", queue},
                      {"pool", pool_of[node]}};
    f->a_cpu.Add(l, v.first);
    f->a_mem.Add(l, v.second * kMiB);
  }
}

// Idle held GPU by group; jobs by state; pending jobs by queue and step.
void CountMetrics(const JobTally& t, JobFamilies* f) {
  for (const auto& [group, milli] : t.idle_held) f->idle_fam.Add({{"group", group}}, milli);
  for (const auto& [k, n] : t.job_count) {
    f->jobs_fam.Add(
        {{"state", std::get<0>(k)}, {"queue", std::get<1>(k)}, {"group", std::get<2>(k)}}, n);
  }
  for (const auto& [k, n] : t.pending) {
    f->pending_fam.Add({{"queue", k.first}, {"reason", k.second}}, n);
  }
}

// The jobs' families from `tally` (its idle_held: each group's entry, 0 so far).
JobFamilies JobMetrics(const std::vector<JobRow>& jobs, JobTally tally,
                       std::map<std::string, std::string>& pool_of) {
  JobFamilies f;
  TallyJobs(jobs, &tally, &f);
  AllocationMetrics(tally, pool_of, &f);
  CountMetrics(tally, &f);
  return f;
}

// Counters since the server started and latency histograms.
struct CounterFamilies {
  Family adm{"tessera_admissions_total", "counter",
             "Placements since the server started, by queue, group and kind (guaranteed: within "
             "the reservation; borrowed)."};
  Family pre{
      "tessera_preemptions_total", "counter",
      "Preemptions since the server started, by reason (reclaim, priority, repartition, other)."};
  Family rep{"tessera_repartitions_total", "counter",
             "Device repartitions (MIG, AMD modes) since the server started, by node."};
  Family cyc{"tessera_scheduling_cycle_seconds", "histogram", "Time each scheduling cycle takes."};
  Family req{"tessera_http_request_duration_seconds", "histogram",
             "Time the API takes to handle a request, by method, route pattern and status code."};
};

// Quota per GPU model and per pool (issue 37): per group and model (or pool), what the group
// (with its descendants) holds there, and its reservation and limit there where its config sets
// them (GET /v1/groups' `models` and `pools`).
struct QuotaDimensionFamilies {
  explicit QuotaDimensionFamilies(const std::string& dim, const std::string& what)
      : held{"tessera_group_" + dim + "_held_gpu_milli", "gauge",
             "GPU compute a group and its descendants hold " + what +
                 ", in thousandths of a card (each group with a quota there or holding some)."},
        res{"tessera_group_" + dim + "_reservation_gpu_milli", "gauge",
            "A group's reservation " + what + ", in thousandths of a card (where set)."},
        lim{"tessera_group_" + dim + "_limit_gpu_milli", "gauge",
            "The most a group may hold " + what + ", in thousandths of a card (where set)."} {}
  Family held, res, lim;
};

// `dim` "model" or "pool": the label and the metric names; `of` the group's views in it.
QuotaDimensionFamilies QuotaDimensionMetrics(
    const std::vector<quota::GroupView>& groups, const std::string& dim, const std::string& what,
    std::vector<quota::ModelQuotaView> quota::GroupView::*of) {
  QuotaDimensionFamilies f(dim, what);
  for (const quota::GroupView& g : groups) {
    for (const quota::ModelQuotaView& m : g.*of) {
      const Labels l = {{"group", g.name}, {dim, m.model}};
      f.held.Add(l, m.usage);
      if (m.reservation > 0) f.res.Add(l, m.reservation);
      if (m.limit < quota::kUnlimited) f.lim.Add(l, m.limit);
    }
  }
  return f;
}

CounterFamilies CounterMetrics(const Counters& c) {
  CounterFamilies f;
  for (const auto& [k, n] : c.admissions) {
    f.adm.Add({{"queue", std::get<0>(k)}, {"group", std::get<1>(k)}, {"kind", std::get<2>(k)}}, n);
  }
  for (const auto& [why, n] : c.preemptions) f.pre.Add({{"reason", why}}, n);
  for (const auto& [node, n] : c.repartitions) f.rep.Add({{"node", node}}, n);
  f.cyc.AddHistogram({}, c.cycle);
  for (const auto& [k, h] : c.http) {
    f.req.AddHistogram({{"method", std::get<0>(k)},
                        {"route", std::get<1>(k)},
                        {"code", std::to_string(std::get<2>(k))}},
                       h);
  }
  return f;
}

}  // namespace

Result<std::string> Views::Metrics(const Identity& who) {
  if (who.role != Role::kAdmin && who.role != Role::kMetrics && !config_.metrics_public) {
    return Status::PermissionDenied(
        "metrics are for admins (or set metrics_public: true in the config)");
  }
  std::vector<NodeRow> nodes;
  std::vector<JobRow> jobs;
  std::vector<quota::GroupView> groups;
  Counters counters;
  const int64_t now = ledger_.NowMs();
  Status durable = ledger_.ReadDurable([&](const ReadModel& m) {
    nodes.clear();
    jobs.clear();
    groups = m.quota.groups();
    for (const auto& [name, n] : m.nodes) {
      NodeRow row{name,
                  n.pool,
                  n.cpu_milli,
                  n.memory_mib,
                  std::max<int64_t>(0, now - n.last_heartbeat_ms),
                  n.lost,
                  {}};
      for (const DeviceInfo& d : n.devices) {
        row.devices.push_back({d.index, d.model, d.memory_mib, d.util_pct, d.memory_used_mib,
                               d.healthy, d.isolation});
      }
      nodes.push_back(std::move(row));
    }
    m.jobs.ForEachLive([&](const Job& j) {
      jobs.push_back({j.rec.id, j.state, j.rec.queue, j.rec.group, j.rec.reason, j.form, j.node,
                      Holds(j), j.agent.activity.idle, j.agent.activity.gpu_memory_used_mib,
                      Holds(j) ? j.grants : std::vector<quota::GrantView>{}, j.agent.swap.state,
                      j.agent.swap.swapped_mib});
    });
    counters.admissions = m.counters.durable().admissions;
    counters.preemptions = m.counters.durable().preemptions;
    counters.repartitions = m.counters.durable().repartitions;
    counters.cycle = m.counters.cycle_latency();
    counters.http = m.counters.RequestLatencies();
    return Status::Ok();
  });
  if (!durable.ok()) return durable;

  std::map<std::string, std::string> pool_of;
  for (const NodeRow& n : nodes) pool_of[n.name] = n.pool;
  const NodeFamilies nf = NodeMetrics(nodes);
  JobTally tally;
  for (const auto& g : config_.policy.groups) tally.idle_held[g.name] = 0;
  const JobFamilies jf = JobMetrics(jobs, std::move(tally), pool_of);
  const CounterFamilies cf = CounterMetrics(counters);
  const QuotaDimensionFamilies mf =
      QuotaDimensionMetrics(groups, "model", "on one GPU model", &quota::GroupView::models);
  const QuotaDimensionFamilies pf =
      QuotaDimensionMetrics(groups, "pool", "in one pool", &quota::GroupView::pools);

  std::string out;
  for (const Family* f : {&nf.dev_gpu,
                          &nf.dev_mem,
                          &nf.node_cpu,
                          &nf.node_mem,
                          &jf.a_gpu,
                          &jf.a_gmem,
                          &jf.a_cpu,
                          &jf.a_mem,
                          &jf.jobs_fam,
                          &jf.pending_fam,
                          &cf.adm,
                          &cf.pre,
                          &cf.rep,
                          &cf.cyc,
                          &cf.req,
                          &nf.hb_age,
                          &nf.lost,
                          &nf.util,
                          &nf.mem_used,
                          &jf.alloc_idle,
                          &jf.alloc_mem_used,
                          &jf.alloc_swapped,
                          &jf.idle_fam,
                          &nf.unhealthy,
                          &nf.isolation,
                          &mf.held,
                          &mf.res,
                          &mf.lim,
                          &pf.held,
                          &pf.res,
                          &pf.lim}) {
    f->RenderTo(out);
  }
  return out;
}

}  // namespace tessera::api
