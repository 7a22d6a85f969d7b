#include "sim/histories.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <sstream>

#include "partition/amd.h"
#include "partition/catalog.h"

namespace tessera::sim {

using quota::WorkloadClass;

namespace {

// SplitMix64: the same sequence from a seed everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  int64_t In(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(Next() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool Chance(int pct) { return In(0, 99) < pct; }
  template <typename T>
  const T& Pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(In(0, static_cast<int64_t>(v.size()) - 1))];
  }

 private:
  uint64_t s_;
};

constexpr MiB kGiB = 1024;

void GenerateNodes(Rng& r, const HistoryOptions& o, const std::vector<std::string>& pools,
                   Scenario& s) {
  const std::vector<std::string> models = {"A100-80GB", "H100-80GB", "A30-24GB", "MI300X",
                                           "L4-24GB"};
  const int n = static_cast<int>(r.In(1, o.max_nodes));
  for (int i = 0; i < n; ++i) {
    quota::NodeSpec ns;
    ns.name = "n" + std::to_string(i);
    ns.pool = r.Pick(pools);
    ns.cpu_milli = r.In(8, 64) * 1000;
    ns.memory_mib = r.In(64, 512) * kGiB;
    ns.gpu_model = r.Pick(models);
    ns.gpu_count = static_cast<int>(r.In(1, o.max_gpus_per_node));
    const partition::GpuModel* m = partition::Catalog::BuiltIn().Find(ns.gpu_model);
    if (m == nullptr) {
      ns.gpu_memory_mib = 24 * kGiB;  // a model outside the catalog: whole and shares only
    } else if (m->is_amd() && r.Chance(15)) {
      std::vector<partition::AmdPair> pairs = partition::LegalPairs(*m);
      ns.amd_mode = r.Pick(pairs).ToString();  // registered by the operator
    } else if (m->is_mig() && r.Chance(10) && !m->mig.profiles.empty()) {
      ns.mig_layout = {m->mig.profiles.back().name};  // the largest, at its first start
    }
    s.nodes.push_back(ns);
  }
}

void GenerateGroups(Rng& r, int64_t devices, Scenario& s) {
  const int n = static_cast<int>(r.In(1, 3));
  int64_t left = devices;
  for (int g = 0; g < n; ++g) {
    quota::GroupSpec gs;
    gs.name = "g" + std::to_string(g);
    gs.reservation.gpu_milli = r.Chance(70) ? r.In(0, left / std::max(1, n - g)) * kWholeGpu : 0;
    left -= gs.reservation.gpu_milli / kWholeGpu;
    if (r.Chance(30))
      gs.limit.gpu_milli = std::max(gs.reservation.gpu_milli, r.In(1, devices) * kWholeGpu);
    gs.weight_milli = r.In(1, 3) * 1000;
    s.policy.groups.push_back(gs);
  }
  if (r.Chance(30)) {  // a subgroup inside the first group's reservation and limit
    quota::GroupSpec sub;
    sub.name = "g0-sub";
    sub.parent = "g0";
    const quota::GroupSpec& top = s.policy.groups[0];
    sub.reservation.gpu_milli = top.reservation.gpu_milli / 2 / kWholeGpu * kWholeGpu;
    if (top.limit.gpu_milli < quota::kUnlimited) sub.limit.gpu_milli = top.limit.gpu_milli;
    s.policy.groups.push_back(sub);
  }
}

void GeneratePolicy(Rng& r, const std::vector<std::string>& pools, Scenario& s) {
  using F = AllocationForm;
  s.policy.pools.push_back({"main", {F::kWhole, F::kPartition, F::kShare}});
  if (pools.size() > 1) s.policy.pools.push_back({"serve", {F::kPartition, F::kShare}});
  s.policy.grace_seconds = r.Pick(std::vector<int64_t>{0, 20, 30, 30});
  s.policy.repartition = r.Chance(90);
  std::vector<std::string> serve_pools;
  if (pools.size() > 1 && r.Chance(50)) serve_pools = {"serve"};
  auto profile = [&](std::string name, int gpus, MilliGpu milli, MiB gpu_mem, std::vector<F> forms,
                     std::vector<std::string> p) {
    quota::ProfileSpec ps;
    ps.name = std::move(name);
    ps.gpu_count = gpus;
    ps.gpu_milli = milli;
    ps.gpu_memory_mib = gpu_mem;
    ps.cpu_milli = r.In(1, 4) * 1000;
    ps.memory_mib = r.In(4, 32) * kGiB;
    ps.forms = std::move(forms);
    ps.pools = std::move(p);
    s.policy.profiles.push_back(ps);
  };
  profile("train", 1, kWholeGpu, 0, {F::kWhole}, {"main"});
  profile("gang", static_cast<int>(r.In(2, 4)), kWholeGpu, 0, {F::kWhole}, {"main"});
  profile("infer", 1, r.In(1, 4) * 100, r.In(5, 20) * kGiB, {F::kPartition, F::kShare},
          serve_pools);
  profile("notebook", 1, r.Pick(std::vector<int64_t>{250, 500}), r.In(4, 24) * kGiB, {F::kShare},
          {});
  std::vector<std::string> leaves;
  for (const quota::GroupSpec& g : s.policy.groups) {
    bool parent = std::any_of(s.policy.groups.begin(), s.policy.groups.end(),
                              [&](const quota::GroupSpec& c) { return c.parent == g.name; });
    if (!parent) leaves.push_back(g.name);
  }
  auto queue = [&](std::string name, std::string prof, WorkloadClass cls) {
    quota::QueueSpec q;
    q.name = std::move(name);
    q.profile = std::move(prof);
    q.groups = leaves;
    q.priority = static_cast<int>(r.In(0, 2));
    q.preemptible = r.Chance(60);
    q.default_class = cls;
    s.policy.queues.push_back(q);
  };
  queue("train", "train", WorkloadClass::kTraining);
  queue("gang", "gang", WorkloadClass::kTraining);
  queue("infer", "infer", WorkloadClass::kInference);
  queue("notebook", "notebook", WorkloadClass::kInteractive);
}

// The leaf group with the largest GPU reservation (none: nullptr).
const quota::GroupSpec* ReservedLeaf(const Scenario& s, const std::vector<std::string>& leaves) {
  const quota::GroupSpec* reserved = nullptr;
  for (const quota::GroupSpec& g : s.policy.groups) {
    bool leaf = std::find(leaves.begin(), leaves.end(), g.name) != leaves.end();
    if (leaf && g.reservation.gpu_milli > 0 &&
        (!reserved || g.reservation.gpu_milli > reserved->reservation.gpu_milli)) {
      reserved = &g;
    }
  }
  return reserved;
}

void GenerateWorkload(Rng& r, const HistoryOptions& o, Scenario& s) {
  std::vector<std::string> leaves;
  for (const quota::QueueSpec& q : s.policy.queues) leaves = q.groups;
  const std::vector<std::string> queues = {"train", "train", "gang",    "gang",
                                           "infer", "infer", "notebook"};
  const int entries = static_cast<int>(r.In(2, o.max_entries));
  for (int i = 0; i < entries; ++i) {
    WorkloadEntry w;
    w.base.queue = r.Pick(queues);
    w.base.group = r.Pick(leaves);
    w.base.identity = "u" + std::to_string(r.In(0, 3));
    w.count = static_cast<int>(r.In(1, o.max_count));
    w.at_s = r.In(0, o.span_s / 30) * 30;
    w.interval_s = r.Chance(40) ? 0 : r.In(1, 10) * 30;  // a burst, or spread out
    const int durations = static_cast<int>(r.In(1, 3));
    for (int d = 0; d < durations; ++d)
      w.durations_s.push_back(r.Chance(30) ? r.In(1, 6) * 10 : r.In(2, 30) * 60);
    w.declare_walltime = r.Chance(80);
    s.workload.push_back(w);
  }
  // Contention: one group fills the cluster with long work, then a group with a reservation asks
  // for more than it all at once (reclaim with claims in flight, heads blocked, backfill).
  const quota::GroupSpec* reserved = ReservedLeaf(s, leaves);
  if (reserved != nullptr && leaves.size() > 1 && r.Chance(40)) {
    int64_t devices = 0;
    for (const quota::NodeSpec& n : s.nodes) devices += n.gpu_count;
    std::string other = reserved->name == leaves[0] ? leaves[1] : leaves[0];
    const int64_t t0 = r.In(0, o.span_s / 60) * 30;
    WorkloadEntry fill;
    fill.base.queue = "train";
    fill.base.group = other;
    fill.base.identity = "u9";
    fill.count = static_cast<int>(devices);
    fill.at_s = t0;
    fill.durations_s = {r.In(20, 60) * 60};
    s.workload.push_back(fill);
    WorkloadEntry claim = fill;
    claim.base.group = reserved->name;
    claim.base.identity = "u8";
    claim.count = static_cast<int>(reserved->reservation.gpu_milli / kWholeGpu + r.In(1, 3));
    claim.at_s = t0 + r.In(1, 10) * 30;
    claim.durations_s = {r.In(5, 20) * 60};
    s.workload.push_back(claim);
  }
  if (r.Chance(25) && !s.nodes.empty()) {
    s.outages.push_back({r.Pick(s.nodes).name, r.In(1, o.span_s / 30) * 30, r.In(2, 30) * 30});
  }
  // A blocked head with short work behind it (drawn last: the histories without it stay as they
  // were): one group's cards free at different times, a gang wider than those freed first, then
  // short jobs of no higher priority that declare their walltimes (backfill, and its promise
  // never to delay the head).
  if (r.Chance(o.head_percent)) {
    int64_t devices = 0;
    for (const quota::NodeSpec& n : s.nodes) devices += n.gpu_count;
    const quota::QueueSpec* gang = nullptr;
    const quota::QueueSpec* small = nullptr;
    for (const quota::QueueSpec& q : s.policy.queues) {
      if (q.name == "gang") gang = &q;
    }
    for (const quota::QueueSpec& q : s.policy.queues) {
      if (gang != nullptr && (q.name == "train" || q.name == "notebook") &&
          q.priority <= gang->priority && small == nullptr)
        small = &q;
    }
    if (gang != nullptr && small != nullptr && devices >= 2) {
      const int64_t t0 = r.In(0, o.span_s / 60) * 30;
      WorkloadEntry busy;
      busy.base.queue = "train";
      busy.base.group = r.Pick(leaves);
      busy.base.identity = "u7";
      busy.count = static_cast<int>(devices);
      busy.at_s = t0;
      busy.durations_s = {r.In(2, 8) * 60, r.In(15, 40) * 60};
      s.workload.push_back(busy);
      WorkloadEntry head = busy;
      head.base.queue = "gang";
      head.count = 1;
      head.at_s = t0 + 30;
      head.durations_s = {r.In(5, 20) * 60};
      s.workload.push_back(head);
      WorkloadEntry shorts = busy;
      shorts.base.queue = small->name;
      shorts.count = static_cast<int>(r.In(2, 4));
      shorts.at_s = t0 + r.In(2, 10) * 30;
      shorts.interval_s = r.In(1, 4) * 30;
      shorts.durations_s = {r.In(1, 6) * 60, r.In(1, 3) * 60};
      // Sometimes they run past the walltime they declare: stopped then, they delay no head.
      if (r.Chance(40)) shorts.walltime_s = r.In(1, 2) * 30;
      s.workload.push_back(shorts);
    }
  }
}

// Preemption by swapping: the notebook queue's shares swap (a queue's `swap: true`), so reclaim
// holds one swapped out on its device, within its node's swap budget (some nodes have none: it
// is stopped as before), until it resumes there or its queue's swap_hold_limit stops it. One
// group fills the cards with notebooks, some declaring walltimes shorter than they run (the
// walltime stop moves by the time held); the group with a reservation then asks for shares.
void GenerateSwap(Rng& r, const HistoryOptions& o, Scenario& s) {
  for (quota::QueueSpec& q : s.policy.queues) {
    if (q.name != "notebook") continue;
    q.swap_overcommit_percent = 200;
    q.preemptible = true;
    q.swap_hold_limit_s = r.Chance(50) ? r.In(2, 20) * 60 : 0;
  }
  for (quota::NodeSpec& n : s.nodes) n.swap_mib = r.Chance(20) ? 0 : r.In(1, 3) * 32 * kGiB;
  std::vector<std::string> leaves;
  for (const quota::QueueSpec& q : s.policy.queues) leaves = q.groups;
  const quota::GroupSpec* reserved = ReservedLeaf(s, leaves);
  if (reserved == nullptr || leaves.size() < 2) return;
  int64_t devices = 0;
  for (const quota::NodeSpec& n : s.nodes) devices += n.gpu_count;
  WorkloadEntry fill;
  fill.base.queue = "notebook";
  fill.base.group = reserved->name == leaves[0] ? leaves[1] : leaves[0];
  fill.base.identity = "u6";
  fill.count = static_cast<int>(devices * r.In(4, 8));
  fill.at_s = r.In(0, o.span_s / 60) * 30;
  fill.durations_s = {r.In(10, 40) * 60, r.In(2, 10) * 60};
  if (r.Chance(40)) fill.walltime_s = r.In(5, 30) * 60;
  s.workload.push_back(fill);
  WorkloadEntry claim = fill;
  claim.base.group = reserved->name;
  claim.base.identity = "u5";
  claim.count = static_cast<int>(r.In(1, 4));
  claim.at_s = fill.at_s + r.In(1, 10) * 30;
  claim.interval_s = r.In(0, 4) * 30;
  claim.durations_s = {r.In(1, 10) * 60};
  claim.walltime_s = -1;
  s.workload.push_back(claim);
}

// Runtime guards on some queues: max_runtime stops long jobs, min_runtime keeps young ones from
// being victims, preemption_delay makes a waiting job wait before it preempts, idle_timeout gives
// back what jobs hold idle (requeued or stopped; a swapping queue's shares are swapped out), and
// some workload entries go idle a while after each start (what their agents would report).
void GenerateGuards(Rng& r, Scenario& s) {
  for (quota::QueueSpec& q : s.policy.queues) {
    if (r.Chance(30)) q.max_runtime_s = r.In(5, 40) * 60;
    if (q.preemptible && r.Chance(50)) q.min_runtime_s = r.In(1, 10) * 60;
    if (r.Chance(40)) q.preemption_delay_s = r.In(1, 6) * 30;
    if (r.Chance(30)) {
      q.idle_timeout_s = r.In(1, 10) * 60;
      q.idle_action = r.Chance(50) ? quota::QueueSpec::IdleAction::kRequeue
                                   : quota::QueueSpec::IdleAction::kStop;
    }
  }
  for (WorkloadEntry& w : s.workload) {
    if (r.Chance(30)) w.idle_after_s = r.In(1, 15) * 60;
  }
}

std::string Milli(int64_t m) { return std::to_string(m) + "m"; }
std::string Mem(MiB m) { return std::to_string(m) + "MiB"; }

void YamlResources(std::ostringstream& y, const char* key, const Resources& r, bool limit) {
  std::ostringstream f;
  auto field = [&](const char* k, int64_t v, std::string text) {
    if (limit ? v < quota::kUnlimited : v > 0)
      f << (f.tellp() > 0 ? ", " : "") << k << ": " << text;
  };
  field("gpu", r.gpu_milli, Milli(r.gpu_milli));
  field("gpu_memory", r.gpu_memory_mib, Mem(r.gpu_memory_mib));
  field("cpu", r.cpu_milli, Milli(r.cpu_milli));
  field("memory", r.memory_mib, Mem(r.memory_mib));
  if (f.tellp() > 0) y << ", " << key << ": {" << f.str() << "}";
}

std::string Forms(const std::vector<AllocationForm>& forms) {
  std::string out = "[";
  for (size_t i = 0; i < forms.size(); ++i)
    out += (i ? ", " : "") + std::string(AllocationFormName(forms[i]));
  return out + "]";
}

std::string List(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
  return out + "]";
}

}  // namespace

Scenario GenerateHistory(uint64_t seed, const HistoryOptions& o) {
  Rng r(seed);
  Scenario s;
  s.name = "history-" + std::to_string(seed);
  s.cycle_s = 10;
  s.until_s = o.span_s + 2400;
  std::vector<std::string> pools = {"main"};
  if (r.Chance(35)) pools.push_back("serve");
  GenerateNodes(r, o, pools, s);
  int64_t devices = 0;
  for (const quota::NodeSpec& n : s.nodes) devices += n.gpu_count;
  GenerateGroups(r, devices, s);
  GeneratePolicy(r, pools, s);
  GenerateWorkload(r, o, s);
  if (r.Chance(o.swap_percent)) GenerateSwap(r, o, s);  // drawn last: the others stay as they were
  if (r.Chance(o.guard_percent)) GenerateGuards(r, s);  // and after it
  return s;
}

std::string ScenarioYaml(const Scenario& s) {
  std::ostringstream y;
  const quota::PolicySpec& p = s.policy;
  y << "name: " << s.name << "\nuntil: " << s.until_s << "\ncycle: " << s.cycle_s
    << "\ngrace: " << p.grace_seconds << "\nrepartition: " << (p.repartition ? "true" : "false")
    << "\n";
  y << "pools:\n";
  for (const quota::PoolSpec& x : p.pools)
    y << "  - {name: " << x.name << ", forms: " << Forms(x.forms) << "}\n";
  y << "groups:\n";
  for (const quota::GroupSpec& g : p.groups) {
    y << "  - {name: " << g.name;
    if (!g.parent.empty()) y << ", parent: " << g.parent;
    YamlResources(y, "reservation", g.reservation, false);
    YamlResources(y, "limit", g.limit, true);
    y << ", weight: " << Milli(g.weight_milli) << "}\n";
  }
  y << "profiles:\n";
  for (const quota::ProfileSpec& x : p.profiles) {
    y << "  - {name: " << x.name << ", gpus: " << x.gpu_count
      << ", gpu_fraction: " << Milli(x.gpu_milli);
    if (x.gpu_memory_mib > 0) y << ", gpu_memory: " << Mem(x.gpu_memory_mib);
    y << ", cpu: " << Milli(x.cpu_milli) << ", memory: " << Mem(x.memory_mib)
      << ", forms: " << Forms(x.forms);
    if (!x.pools.empty()) y << ", pools: " << List(x.pools);
    y << "}\n";
  }
  y << "queues:\n";
  for (const quota::QueueSpec& q : p.queues) {
    y << "  - {name: " << q.name << ", profile: " << q.profile << ", groups: " << List(q.groups)
      << ", priority: " << q.priority << ", preemptible: " << (q.preemptible ? "true" : "false")
      << ", class: " << quota::WorkloadClassName(q.default_class);
    if (q.swap_overcommit_percent > 0) y << ", swap: true";  // 200, as a scenario's swap reads
    if (q.swap_hold_limit_s > 0) y << ", swap_hold_limit: " << q.swap_hold_limit_s;
    if (q.max_runtime_s > 0) y << ", max_runtime: " << q.max_runtime_s;
    if (q.min_runtime_s > 0) y << ", min_runtime: " << q.min_runtime_s;
    if (q.preemption_delay_s > 0) y << ", preemption_delay: " << q.preemption_delay_s;
    if (q.idle_timeout_s > 0) {
      y << ", idle_timeout: " << q.idle_timeout_s << ", idle_action: "
        << (q.idle_action == quota::QueueSpec::IdleAction::kStop ? "stop" : "requeue");
    }
    y << "}\n";
  }
  y << "class_forms:\n";
  for (int c = 0; c < quota::kClassCount; ++c) {
    y << "  " << quota::WorkloadClassName(static_cast<WorkloadClass>(c)) << ": "
      << Forms(p.class_forms.table[static_cast<size_t>(c)]) << "\n";
  }
  y << "nodes:\n";
  for (const quota::NodeSpec& n : s.nodes) {
    y << "  - {name: " << n.name << ", pool: " << n.pool << ", cpu: " << Milli(n.cpu_milli)
      << ", memory: " << Mem(n.memory_mib) << ", gpu: {model: " << n.gpu_model
      << ", count: " << n.gpu_count;
    if (n.gpu_memory_mib > 0) y << ", memory: " << Mem(n.gpu_memory_mib);
    y << "}";
    if (!n.mig_layout.empty()) y << ", mig: " << List(n.mig_layout);
    if (!n.amd_mode.empty()) y << ", amd_mode: " << n.amd_mode;
    if (n.swap_mib > 0) y << ", swap: " << Mem(n.swap_mib);
    y << "}\n";
  }
  y << "workload:\n";
  for (const WorkloadEntry& w : s.workload) {
    y << "  - {queue: " << w.base.queue << ", identity: " << w.base.identity;
    if (!w.base.group.empty()) y << ", group: " << w.base.group;
    y << ", count: " << w.count << ", at: " << w.at_s << ", interval: " << w.interval_s
      << ", duration: [";
    for (size_t d = 0; d < w.durations_s.size(); ++d) y << (d ? ", " : "") << w.durations_s[d];
    y << "]";
    if (!w.gpu_memory_mib.empty()) {
      y << ", gpu_memory: [";
      for (size_t d = 0; d < w.gpu_memory_mib.size(); ++d)
        y << (d ? ", " : "") << Mem(w.gpu_memory_mib[d]);
      y << "]";
    }
    if (w.idle_after_s >= 0) y << ", idle_after: " << w.idle_after_s;
    if (!w.declare_walltime) {
      y << ", walltime: false";
    } else if (w.walltime_s >= 0) {
      y << ", walltime: " << w.walltime_s;
    }
    y << "}\n";
  }
  if (!s.outages.empty()) {
    y << "outages:\n";
    for (const Outage& o : s.outages)
      y << "  - {node: " << o.node << ", at: " << o.at_s << ", for: " << o.for_s << "}\n";
  }
  return y.str();
}

int64_t JobCount(const Scenario& s) {
  int64_t n = 0;
  for (const WorkloadEntry& w : s.workload) n += w.count;
  return n;
}

Result<HistoryResult> RunHistory(const Scenario& s, const RunOptions& o) {
  auto r = RunOnce(s, s.name, o);
  if (!r.ok()) return r.status();
  HistoryResult h;
  h.violations = r->promises;
  h.seen = r->seen;
  h.jobs = JobCount(s);
  const size_t engine_own = r->invariant_violations.size() - r->promises.size();
  for (size_t i = 0; i < engine_own; ++i)
    h.violations.push_back({"engine.invariant", 0, r->invariant_violations[i], {}, {}});
  return h;
}

namespace {

bool Breaks(const Scenario& s, const std::string& property, const RunOptions& o) {
  auto r = RunHistory(s, o);
  if (!r.ok()) return false;
  return std::any_of(r->violations.begin(), r->violations.end(),
                     [&](const verify::Violation& v) { return v.property == property; });
}

// Each entry as single jobs, at the times and with the durations and memories they had.
Scenario Singles(const Scenario& s) {
  Scenario out = s;
  out.workload.clear();
  for (const WorkloadEntry& w : s.workload) {
    for (int i = 0; i < w.count; ++i) {
      WorkloadEntry one = w;
      one.count = 1;
      one.at_s = w.at_s + w.interval_s * i;
      one.interval_s = 0;
      one.durations_s = {w.durations_s[static_cast<size_t>(i) % w.durations_s.size()]};
      if (!w.gpu_memory_mib.empty())
        one.gpu_memory_mib = {w.gpu_memory_mib[static_cast<size_t>(i) % w.gpu_memory_mib.size()]};
      out.workload.push_back(one);
    }
  }
  return out;
}

}  // namespace

Scenario Shrink(const Scenario& s, const std::string& property, const RunOptions& o) {
  Scenario best = s;
  Scenario singles = Singles(s);
  if (Breaks(singles, property, o)) best = singles;
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t i = best.workload.size(); i-- > 0;) {
      Scenario t = best;
      t.workload.erase(t.workload.begin() + static_cast<std::ptrdiff_t>(i));
      if (!t.workload.empty() && Breaks(t, property, o)) best = std::move(t), progress = true;
    }
    for (size_t i = best.outages.size(); i-- > 0;) {
      Scenario t = best;
      t.outages.erase(t.outages.begin() + static_cast<std::ptrdiff_t>(i));
      if (Breaks(t, property, o)) best = std::move(t), progress = true;
    }
    for (size_t i = best.nodes.size(); i-- > 0 && best.nodes.size() > 1;) {
      Scenario t = best;
      const std::string gone = t.nodes[i].name;
      t.nodes.erase(t.nodes.begin() + static_cast<std::ptrdiff_t>(i));
      std::erase_if(t.outages, [&](const Outage& x) { return x.node == gone; });
      if (Breaks(t, property, o)) best = std::move(t), progress = true;
    }
    for (size_t i = 0; i < best.nodes.size(); ++i) {  // fewer devices
      while (best.nodes[i].gpu_count > 1) {
        Scenario t = best;
        --t.nodes[i].gpu_count;
        if (!Breaks(t, property, o)) break;
        best = std::move(t), progress = true;
      }
    }
  }
  best.name = s.name + "-shrunk";
  return best;
}

void Coverage::Add(const verify::Seen& s) {
  ++histories;
  unsplit += s.unsplit;
  amd_mode_change += s.amd_mode_change;
  gang += s.gang;
  node_loss += s.node_loss;
  reclaim_in_flight += s.reclaim_in_flight;
  backfill += s.backfill;
  swap_hold += s.swap_hold;
}

namespace {
std::vector<std::pair<const char*, int64_t>> Rows(const Coverage& c) {
  return {{"unsplit (an idle split card back to whole)", c.unsplit},
          {"AMD mode change", c.amd_mode_change},
          {"gang (a job on 2+ devices)", c.gang},
          {"node loss", c.node_loss},
          {"reclaim in flight (waiting out a grace)", c.reclaim_in_flight},
          {"backfill", c.backfill},
          {"swap hold (held swapped out, then resumed)", c.swap_hold}};
}
}  // namespace

std::string Coverage::Table(int min_pct) const {
  std::ostringstream o;
  o << "coverage over " << histories << " histories (share that include each; goal >= " << min_pct
    << "%):\n";
  for (const auto& [name, n] : Rows(*this)) {
    const int64_t tenths = histories > 0 ? n * 1000 / histories : 0;
    o << "  " << name << std::string(44 - std::min<size_t>(44, std::string(name).size()), ' ')
      << tenths / 10 << "." << tenths % 10 << "%"
      << (n * 100 < static_cast<int64_t>(min_pct) * histories ? "  (below goal)" : "") << "\n";
  }
  return o.str();
}

bool Coverage::AllAtLeast(int pct) const {
  for (const auto& [name, n] : Rows(*this)) {
    if (n * 100 < static_cast<int64_t>(pct) * histories) return false;
  }
  return histories > 0;
}

SweepResult Sweep(uint64_t first, int64_t count, const RunOptions& o, const HistoryOptions& h,
                  double max_seconds, size_t keep_failures) {
  SweepResult out;
  std::map<std::string, int64_t> by_property;
  auto started = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < count; ++i) {
    if (max_seconds > 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() >
            max_seconds) {
      break;
    }
    const uint64_t seed = first + static_cast<uint64_t>(i);
    Scenario s = GenerateHistory(seed, h);
    auto r = RunHistory(s, o);
    ++out.histories;
    if (!r.ok()) {
      ++out.failing;
      ++by_property["generator"];
      const SweepFailure f{seed, {"generator", 0, r.status().message(), {}, {}}};
      if (out.failures.size() < keep_failures) out.failures.push_back(f);
      if (out.first_by_property["generator"].size() < keep_failures)
        out.first_by_property["generator"].push_back(f);
      continue;
    }
    out.coverage.Add(r->seen);
    if (r->violations.empty()) continue;
    ++out.failing;
    std::vector<std::string> props;
    for (const verify::Violation& v : r->violations) props.push_back(v.property);
    std::sort(props.begin(), props.end());
    props.erase(std::unique(props.begin(), props.end()), props.end());
    for (const std::string& p : props) {
      ++by_property[p];
      std::vector<SweepFailure>& firsts = out.first_by_property[p];
      if (firsts.size() >= keep_failures) continue;
      for (const verify::Violation& v : r->violations) {
        if (v.property != p) continue;
        firsts.push_back({seed, v});
        break;
      }
    }
    if (out.failures.size() < keep_failures) out.failures.push_back({seed, r->violations.front()});
  }
  out.by_property.assign(by_property.begin(), by_property.end());
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

}  // namespace tessera::sim
