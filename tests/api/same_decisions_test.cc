// One scheduler: each example scenario runs through the simulator (`tessera sim scenario`) and
// through the served engine (api::Engine over a real SQLite store, its agents played in-process
// through the heartbeat API, a virtual clock), and both make the same admission, placement,
// preemption and repartition decisions, in the same order, at the same times.
//
// The served engine runs with `schedule_on_submit: false`, so that, as in the simulator, jobs
// wait for the next cycle; it is otherwise the product's code path: Submit (validation, group
// commit), RegisterNode, Heartbeat (exits, preempted jobs stopping), RunCycle.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <queue>
#include <set>
#include <sstream>

#include "api/engine.h"
#include "model/quantity.h"
#include "partition/catalog.h"
#include "sim/scenario.h"

namespace tessera::api {
namespace {

struct Decision {
  int64_t time_s = 0;
  std::string kind;  // admitted, placed, preempted, repartitioned
  std::string job;
  std::string detail;
  bool operator==(const Decision&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Decision& d) {
  return os << "t=" << d.time_s << " " << d.kind << " " << d.job << ": " << d.detail;
}

// Rewrites the simulator's job ids ("alice-1-3") into the server's ("j-7") inside a text: every
// maximal run of [A-Za-z0-9_-] that is a known id is replaced.
std::string MapIds(const std::string& text, const std::map<std::string, std::string>& ids) {
  std::string out;
  auto word = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  };
  for (size_t i = 0; i < text.size();) {
    if (!word(text[i])) {
      out += text[i++];
      continue;
    }
    size_t j = i;
    while (j < text.size() && word(text[j])) ++j;
    const std::string token = text.substr(i, j - i);
    auto it = ids.find(token);
    out += it == ids.end() ? token : it->second;
    i = j;
  }
  return out;
}

// The simulator's decisions, its job ids mapped to the server's (the n-th accepted job is j-n).
std::vector<Decision> Simulated(const sim::Scenario& s) {
  std::vector<quota::Event> events;
  sim::RunOptions o;
  o.check_invariants_each_step = false;
  o.events = &events;
  auto r = sim::RunOnce(s, "sim", o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  std::map<std::string, std::string> id_of;
  for (const quota::Event& e : events) {
    if (e.kind == quota::EventKind::kSubmitted)
      id_of[e.job] = "j-" + std::to_string(id_of.size() + 1);
  }
  std::vector<Decision> out;
  for (const quota::Event& e : events) {
    std::string kind;
    switch (e.kind) {
      case quota::EventKind::kAdmitted:
        kind = "admitted";
        break;
      case quota::EventKind::kPlaced:
        kind = "placed";
        break;
      case quota::EventKind::kPreempted:
        kind = "preempted";
        break;
      case quota::EventKind::kRepartitioned:
        kind = "repartitioned";
        break;
      default:
        continue;
    }
    out.push_back({e.time, kind, e.job.empty() ? "" : id_of[e.job], MapIds(e.detail, id_of)});
  }
  return out;
}

class Served {
 public:
  // `source`: the scenario's text, kept as the server's config text (the policy `tessera whatif`
  // replays under).
  explicit Served(const sim::Scenario& s, const std::string& source = "") : s_(s) {
    dir_ = "/dev/shm/tessera-same-decisions-" + std::to_string(::getpid()) + "-" + s.name;
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    config_.policy = s.policy;
    if (config_.policy.pools.empty()) {  // as the simulator does: every node pool offers every form
      std::set<std::string> pools;
      for (const auto& n : s.nodes) pools.insert(n.pool.empty() ? "default" : n.pool);
      for (const auto& p : pools) {
        config_.policy.pools.push_back(
            {p, {AllocationForm::kWhole, AllocationForm::kPartition, AllocationForm::kShare}});
      }
    }
    config_.schedule_on_submit = false;
    config_.source_yaml = source;
    config_.whatif.replay = sim::WhatIfReport;  // as `tessera serve` wires it
    config_.cycle_ms = s.cycle_s * 1000;
    for (const auto& q : s.policy.queues) {
      QueueRoute r;
      r.queue = q.name;
      config_.routes.push_back(r);
    }
    admin_ = {"admin", Role::kAdmin, {}, "", {}, "nobody", "", 0};
    auto store = store::Store::Open(dir_ + "/tessera.db");
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    auto e = Engine::Open(config_, std::move(*store), dir_, [this] { return now_ms_; });
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(*e);
  }
  ~Served() {
    engine_.reset();
    std::filesystem::remove_all(dir_);
  }

  Engine& engine() { return *engine_; }
  const Identity& admin() const { return admin_; }

  std::vector<Decision> Run() {
    for (const quota::NodeSpec& n : s_.nodes) Register(n);
    std::vector<Arrival> arrivals = Arrivals();
    size_t next = 0;
    for (int64_t t = 0; t <= s_.until_s; t += s_.cycle_s) {
      while (true) {  // completions and arrivals up to t, in time order, as the simulator does
        const bool arrival = next < arrivals.size() && arrivals[next].time <= t;
        const bool done = !completions_.empty() && std::get<0>(completions_.top()) <= t;
        if (!arrival && !done) break;
        if (done && (!arrival || std::get<0>(completions_.top()) <= arrivals[next].time)) {
          auto [end, id, start] = completions_.top();
          completions_.pop();
          if (start_[id] == start) Finish(id, end, 0);
          continue;
        }
        Submit(arrivals[next++]);
      }
      // Preempted jobs whose grace ended stop now (their processes exit on SIGTERM).
      now_ms_ = t * 1000;
      for (auto it = grace_end_.begin(); it != grace_end_.end();) {
        if (it->first.first > t) break;
        Finish(it->second, t, 15);
        it = grace_end_.erase(it);
      }
      now_ms_ = t * 1000;
      Status st = engine_->RunCycle();
      EXPECT_TRUE(st.ok()) << st.ToString();
      Follow(t);
    }
    Status inv = engine_->CheckInvariants();
    EXPECT_TRUE(inv.ok()) << inv.ToString();
    return decisions_;
  }

 private:
  struct Arrival {
    int64_t time = 0, duration = 0;
    quota::JobSpec spec;
  };

  std::vector<Arrival> Arrivals() const {
    std::vector<Arrival> out;
    for (const sim::WorkloadEntry& w : s_.workload) {
      for (int i = 0; i < w.count; ++i) {
        Arrival a;
        a.time = w.at_s + w.interval_s * i;
        a.spec = w.base;
        a.duration = w.durations_s[static_cast<size_t>(i) % w.durations_s.size()];
        if (!w.gpu_memory_mib.empty())
          a.spec.gpu_memory_mib =
              w.gpu_memory_mib[static_cast<size_t>(i) % w.gpu_memory_mib.size()];
        a.spec.walltime_s = w.declare_walltime ? a.duration : 0;
        out.push_back(a);
      }
    }
    std::stable_sort(out.begin(), out.end(),
                     [](const Arrival& a, const Arrival& b) { return a.time < b.time; });
    return out;
  }

  void Register(const quota::NodeSpec& n) {
    ASSERT_TRUE(n.mig_layout.empty() && n.amd_mode.empty())
        << "initial layouts are not registered by agents";
    const partition::GpuModel* m = partition::Catalog::BuiltIn().Find(n.gpu_model);
    const MiB mem = n.gpu_memory_mib > 0 ? n.gpu_memory_mib : m ? m->memory_mib : 0;
    Json devs = Json::array();
    for (int i = 0; i < n.gpu_count; ++i) {
      devs.push_back({{"index", i},
                      {"model", n.gpu_model},
                      {"memory_mib", mem},
                      {"uuid", n.name + "-" + std::to_string(i)}});
    }
    auto r = engine_->agents().RegisterNode(admin_, {{"node", n.name},
                                                     {"pool", n.pool.empty() ? "default" : n.pool},
                                                     {"cpu_milli", n.cpu_milli},
                                                     {"memory_mib", n.memory_mib},
                                                     {"devices", devs}});
    ASSERT_TRUE(r.ok()) << n.name << ": " << r.status().ToString();
  }

  void Submit(const Arrival& a) {
    now_ms_ = a.time * 1000;
    const quota::JobSpec& q = a.spec;
    Json body = {{"queue", q.queue}, {"command", {"true"}}, {"walltime", q.walltime_s}};
    if (!q.group.empty()) body["group"] = q.group;
    if (q.cls) body["class"] = quota::WorkloadClassName(*q.cls);
    if (q.form) body["form"] = AllocationFormName(*q.form);
    if (q.gpu_count) body["gpus"] = *q.gpu_count;
    if (q.gpu_milli) body["gpu_fraction"] = std::to_string(*q.gpu_milli) + "m";
    if (q.gpu_memory_mib) body["gpu_memory"] = std::to_string(*q.gpu_memory_mib) + "MiB";
    if (q.cpu_milli) body["cpu"] = std::to_string(*q.cpu_milli) + "m";
    if (q.memory_mib) body["memory"] = std::to_string(*q.memory_mib) + "MiB";
    Identity who{q.identity, Role::kAdmin, {}, "", {}, "nobody", "", 0};
    auto r = engine_->Submit(who, body);
    if (!r.ok()) return;  // refused, as the simulator refuses it
    duration_[(*r)["id"].get<std::string>()] = a.duration;
  }

  // The job's processes end on every node it holds (`signal` 0: exit 0).
  void Finish(const std::string& id, int64_t t, int signal) {
    now_ms_ = t * 1000;
    for (const std::string& node : nodes_[id]) {
      Json fin = {{"job", id}, {"exit_code", signal ? 128 + signal : 0}, {"signal", signal}};
      auto r =
          engine_->agents().Heartbeat(admin_, {{"node", node}, {"finished", Json::array({fin})}});
      EXPECT_TRUE(r.ok()) << r.status().ToString();
    }
  }

  // The decisions of the cycle at t, and what the in-process agents must do about them.
  void Follow(int64_t t) {
    while (true) {
      auto page = engine_->views().Events(admin_, cursor_, 1000, {});
      EXPECT_TRUE(page.ok());
      if (!page.ok() || (*page)["events"].empty()) break;
      cursor_ = (*page)["next"];
      for (const auto& e : (*page)["events"]) {
        const std::string kind = e["kind"];
        const std::string id = e["subject"];
        if (kind == "job.placed") {
          std::set<std::string> nodes;
          for (const auto& g : e["data"]["grants"]) nodes.insert(g["node"].get<std::string>());
          nodes_[id] = nodes;
          start_[id] = t;
          completions_.push({t + duration_[id], id, t});
        } else if (kind == "job.preempted") {
          // Its processes stop when the grace ends, in submit order (the simulator ends graces in
          // handle order); should its work end first, it completes as in the simulator.
          grace_end_[{t + s_.policy.grace_seconds, std::stoll(id.substr(2))}] = id;
        }
        if (kind == "job.placed") {  // the admission is recorded with its placement
          decisions_.push_back(
              {e["time_ms"].get<int64_t>() / 1000, "admitted", id, e["data"]["admission"]});
        }
        static const std::map<std::string, std::string> kCompared = {
            {"job.placed", "placed"},
            {"job.preempted", "preempted"},
            {"device.repartitioned", "repartitioned"}};
        auto k = kCompared.find(kind);
        if (k == kCompared.end()) continue;
        decisions_.push_back({e["time_ms"].get<int64_t>() / 1000, k->second,
                              kind == "device.repartitioned" ? "" : id, e["reason"]});
      }
    }
  }
  const sim::Scenario& s_;
  std::string dir_;
  EngineConfig config_;
  Identity admin_;
  std::unique_ptr<Engine> engine_;
  int64_t now_ms_ = 0;
  int64_t cursor_ = 0;
  std::vector<Decision> decisions_;
  std::map<std::string, int64_t> duration_, start_;
  std::map<std::string, std::set<std::string>> nodes_;
  using Completion = std::tuple<int64_t, std::string, int64_t>;
  std::priority_queue<Completion, std::vector<Completion>, std::greater<>> completions_;
  std::map<std::pair<int64_t, int64_t>, std::string> grace_end_;  // (end, job number) -> id
};

class SameDecisions : public ::testing::TestWithParam<std::string> {};

TEST_P(SameDecisions, SimulatorAndServedEngineDecideAlike) {
  auto s = sim::LoadScenario(std::string(TESSERA_SOURCE_DIR) + "/examples/scenarios/" + GetParam());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const std::vector<Decision> want = Simulated(*s);
  Served served(*s);
  const std::vector<Decision> got = served.Run();
  ASSERT_FALSE(want.empty());
  const size_t n = std::min(want.size(), got.size());
  size_t first = n;
  for (size_t i = 0; i < n && first == n; ++i) {
    if (!(want[i] == got[i])) first = i;
  }
  ASSERT_EQ(first, n) << "decision " << first << " differs:\n  simulator: " << want[first]
                      << "\n  served:    " << got[first];
  EXPECT_EQ(want.size(), got.size());
  std::map<std::string, int> kinds;
  for (const Decision& d : want) ++kinds[d.kind];
  std::printf("%s: %zu decisions alike (%d placed, %d preempted, %d repartitioned)\n",
              GetParam().c_str(), want.size(), kinds["placed"], kinds["preempted"],
              kinds["repartitioned"]);
}

// `tessera whatif` on a recorded history: utilization-math served with interactive sessions on
// whole cards (its compare_with table, how such estates run today), then the observed jobs
// replayed with interactive=share. It reports the 40 cards that come back, and the emitted
// scenario run by `tessera sim scenario` (a real process) reports the same.
TEST(WhatIf, TheRecordedUtilizationMathHistoryReturnsFortyCards) {
  std::ifstream in(std::string(TESSERA_SOURCE_DIR) + "/examples/scenarios/utilization-math.yaml");
  std::stringstream text;
  text << in.rdbuf();
  const std::string source = text.str() + "\nclass_forms: {interactive: [whole]}\n";  // as recorded
  auto s = sim::ParseScenario(source);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  s->compare_forms.reset();
  Served served(*s, source);
  served.Run();
  auto w = served.engine().views().WhatIfScenario(served.admin(), 0, s->until_s * 1000);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)["jobs"], 100);  // 30 training, 20 inference, 50 notebooks
  EXPECT_EQ((*w)["observed"]["interactive"]["max_devices"], 50) << (*w)["observed"].dump();
  EXPECT_EQ((*w)["observed"]["interactive"]["jobs"], 50);
  auto what_if = sim::WithClassForms((*w)["scenario"].get<std::string>(), {"interactive=share"});
  ASSERT_TRUE(what_if.ok()) << what_if.status().ToString();
  auto replay = sim::ParseScenario(*what_if);
  ASSERT_TRUE(replay.ok()) << replay.status().ToString() << "\n" << *what_if;
  auto report = sim::RunScenario(*replay);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_TRUE(report->baseline.has_value());
  auto cards = [](const sim::RunReport& r, const std::string& cls) {
    for (const auto& c : r.classes) {
      if (c.name == cls) return c.max_devices;
    }
    return -1;
  };
  EXPECT_EQ(cards(*report->baseline, "interactive"), 50);  // as configured: what was observed
  EXPECT_EQ(cards(report->run, "interactive"), 10);        // as shares
  EXPECT_EQ(cards(*report->baseline, "interactive") - cards(report->run, "interactive"), 40);
  EXPECT_EQ(cards(report->run, "training"), 30);
  EXPECT_TRUE(report->run.invariant_violations.empty());
  // What GET /v1/whatif answers (the dashboard's what-if view): the same cards.
  auto served_report =
      served.engine().views().WhatIf(served.admin(), 0, s->until_s * 1000, {"interactive=share"});
  ASSERT_TRUE(served_report.ok()) << served_report.status().ToString();
  EXPECT_EQ((*served_report)["classes"]["interactive"]["returned"], 40) << served_report->dump();
  EXPECT_EQ((*served_report)["classes"]["interactive"]["observed_cards"], 50);
  EXPECT_EQ((*served_report)["returned"], 40);
  // The same scenario through `tessera sim scenario`, as a process: the same figures.
  const std::string file = "/dev/shm/tessera-whatif-" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(file) << *what_if;
  FILE* p = ::popen(
      (std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera sim scenario --json " + file).c_str(),
      "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  EXPECT_EQ(::pclose(p), 0) << out;
  std::filesystem::remove(file);
  Json cli = Json::parse(out, nullptr, false);
  Json mine = Json::parse(sim::ReportJson(*report), nullptr, false);
  ASSERT_TRUE(cli.is_object()) << out;
  for (const char* run : {"run", "baseline"}) {
    for (const char* f : {"classes", "groups", "jobs", "preemptions", "repartitions"}) {
      EXPECT_EQ(cli[run][f], mine[run][f]) << run << "." << f;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Examples, SameDecisions,
                         ::testing::Values("reclaim.yaml", "utilization-math.yaml",
                                           "mixed-24h.yaml"),
                         [](const auto& p) {
                           std::string n = p.param.substr(0, p.param.find('.'));
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace tessera::api
