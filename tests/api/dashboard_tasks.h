// The fixture of the dashboard's browser tests (dashboard_tasks_test.cc,
// dashboard_tasks_more_test.cc): a real `tessera serve` with two groups, simulated agents, and
// Browse(), which runs steps in a fresh headless Chromium driven by puppeteer-core
// (tests/api/dashboard_browser.js: open, wait, click, type, upload, read, axe-core); a failed step,
// a console message or an uncaught exception fails the test.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "proc.h"
#include "serve_fixture.h"
#include "test_dir.h"

namespace tessera::testing {

using Json = nlohmann::json;

inline constexpr const char* kDashboardTasksConfig = R"(
heartbeat_timeout: 20s
cycle: 300ms
idle_after: 2s
utilization_sample: 1s
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: vee, role: user, groups: [vision], token: vision-token-1}
  - {name: val, role: user, groups: [vision], token: vision-token-2}
  - {name: sam, role: user, groups: [speech], token: speech-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups:
  - {name: vision, reservation: {gpu: 1}}
  - {name: speech}
profiles:
  - {name: nb, gpus: 1, gpu_fraction: 0.1, gpu_memory: 8GiB, cpu: 100m, memory: 64MiB, forms: [share]}
  - {name: card, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}
queues:
  - {name: notebooks, profile: nb, groups: [speech, vision], class: interactive}
  - {name: training, profile: card, groups: [speech, vision], class: training}
)";

// The colour-blind-safe colours the dashboard assigns to groups first (Okabe & Ito, less black).
inline const std::set<std::string> kOkabeIto = {"#0072B2", "#E69F00", "#009E73", "#CC79A7",
                                                "#56B4E9", "#D55E00", "#F0E442"};

// axe-core's script (npm, tests/api/dashboard_axe, installed by scripts/setup.sh).
inline std::string AxeScript() {
  return (std::filesystem::path(TESSERA_DASHBOARD_DRIVER).parent_path() /
          "dashboard_axe/node_modules/axe-core/axe.min.js")
      .string();
}

class DashboardTasksTest : public ServeFixture {
 protected:
  void SetUp() override {
    for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
      if (std::filesystem::exists(c)) chromium_ = c;
    }
    ASSERT_FALSE(chromium_.empty()) << "chromium is not installed: run scripts/setup.sh";
    ASSERT_EQ(std::system("node --version > /dev/null"), 0) << "node is not installed";
    dir_ = FreshTestDir("dashboard-tasks");
    WriteConfig(kDashboardTasksConfig);
    StartServer();
  }
  void TearDown() override {
    StopAgents();
    server_.reset();
  }
  void StartAgents(int n, const std::string& simulate) {
    for (int i = 1; i <= n; ++i) StartAgent(n == 1 ? "sim" : "node-" + std::to_string(i), simulate);
    ASSERT_TRUE(WaitFor([&] { return ReadyNodes() == n; }, 60000))
        << ReadyNodes() << " of " << n << " nodes ready\n"
        << server_->Log();
  }
  std::string Submit(const std::string& token, const std::string& name,
                     const std::vector<std::string>& command = {"sleep", "1000"},
                     const std::string& queue = "notebooks") {
    return ServeFixture::Submit(token, {{"queue", queue}, {"command", command}, {"name", name}});
  }
  // The job is held but idle (its activity says so; a job not yet running has none).
  bool HeldButIdle(const std::string& id) {
    Json j = AdminJob(id);
    return j.is_object() && j.contains("activity") && j["activity"].is_object() &&
           j["activity"].value("idle", false);
  }
  std::string Url(const std::string& fragment) {
    return "http://127.0.0.1:" + std::to_string(port_) + "/#" + fragment;
  }
  // Runs `steps` (see dashboard_browser.js) in a fresh headless Chromium; returns the results.
  // A failed step, a console message or an uncaught exception fails the test.
  Json Browse(const Json& steps, int width = 1366) {
    const std::string n = std::to_string(++runs_);
    const std::string in = dir_ + "/steps-" + n + ".json", out = dir_ + "/result-" + n + ".json";
    std::ofstream(in) << Json{{"width", width}, {"height", 900}, {"steps", steps}}.dump();
    const std::string cmd = "node " TESSERA_DASHBOARD_DRIVER " " + chromium_ + " " + in + " " + out;
    const int rc = std::system(cmd.c_str());
    Json r = Json::parse(ReadFile(out), nullptr, false);
    EXPECT_FALSE(r.is_discarded()) << cmd << " wrote no result (rc " << rc << ")";
    if (r.is_discarded()) return Json::object();
    EXPECT_EQ(r["error"], "") << r.dump(1);
    EXPECT_TRUE(r["console"].empty()) << "the page logged to the console: " << r["console"].dump(1);
    return r["results"];
  }

  // Every view and more checked with axe-core at `width` px (defined below the step helpers).
  void ExpectNoSeriousAccessibilityViolation(int width);

  std::string chromium_;
  int runs_ = 0;
};

inline Json Goto(const std::string& url) { return {{"goto", url}}; }
inline Json Wait(const std::string& expr, int timeout_ms = 10000) {
  return {{"wait", expr}, {"timeout_ms", timeout_ms}};
}
inline Json Click(const std::string& selector) { return {{"click", selector}}; }
inline Json Eval(const std::string& expr, const std::string& as) {
  return {{"eval", expr}, {"as", as}};
}
inline Json Type(const std::string& selector, const std::string& text) {
  return {{"type", selector}, {"text", text}};
}
inline Json Upload(const std::string& selector, const std::string& file) {
  return {{"upload", selector}, {"file", file}};
}
inline Json Axe(const std::string& as) { return {{"axe", AxeScript()}, {"as", as}}; }
// The job ids of the jobs table's rows, top to bottom.
inline constexpr const char* kRowIds =
    "[...document.querySelectorAll('#jobs tbody tr[data-job]')].map(r => r.dataset.job)";

// axe-core (npm, tests/api/dashboard_axe, installed by scripts/setup.sh) injected into the page:
// no serious or critical violation on any view, a job's page, the confirmation dialog, or the
// sign-in box, at `width` px.
inline void DashboardTasksTest::ExpectNoSeriousAccessibilityViolation(int width) {
  const std::string axe = AxeScript();
  ASSERT_TRUE(std::filesystem::exists(axe)) << axe << " is missing: run scripts/setup.sh";
  StartAgents(1, "2xA100-80GB");
  const std::string v = Submit("vision-token-1", "vee-notebook");
  const std::string s = Submit("speech-token-1", "sam-train", {"sleep", "1000"}, "training");
  ASSERT_TRUE(WaitFor([&] { return AdminState(v) == "running" && AdminState(s) == "running"; }));
  ASSERT_TRUE(WaitFor([&] { return HeldButIdle(v); }));
  const std::vector<std::pair<std::string, std::string>> views = {
      {"nodes", "document.querySelector('#heatmap a.hn i.h-idle')"},
      {"cards", "document.querySelector('#cardmap .seg[data-idle]')"},
      {"utilization", "document.querySelector('#util path[data-group]')"},
      {"groups", "document.querySelector('#groups tbody tr[data-group]')"},
      {"jobs", "document.querySelector('#jobs tbody tr[data-job]')"},
      {"queues", "document.querySelector('#queues tbody tr[data-queue]')"},
      {"events", "document.querySelector('#events tbody tr[data-kind]')"},
      {"whatif",
       "/jobs replayed|for admins/.test(document.querySelector('#whatif-note').textContent)"},
  };
  {
    Json steps = {
        Goto(Url("token=admin-token-1")),
        Wait("document.querySelector('#held-idle-charts figure') && "
             "document.querySelector('#ov-util path[data-group]')"),
        {{"axe", axe}, {"as", "overview"}},
    };
    for (const auto& [view, ready] : views) {
      steps.push_back(Click("nav a[data-view=" + view + "]"));
      steps.push_back(Wait(ready, 20000));
      steps.push_back({{"axe", axe}, {"as", view}});
    }
    steps.push_back(Click("nav a[data-view=jobs]"));
    steps.push_back(Click("[data-open=\"" + v + "\"]"));
    steps.push_back(Wait("document.querySelector('#job-detail [data-job-state]')"));
    steps.push_back({{"axe", axe}, {"as", "job"}});
    steps.push_back(Click("#cancel-job"));
    steps.push_back({{"axe", axe}, {"as", "cancel dialog"}});
    steps.push_back(Click("#confirm-no"));
    Json r = Browse(steps, width);
    ASSERT_TRUE(r.contains("cancel dialog")) << width << " px: " << r.dump(1);
    Json login = Browse({Goto(Url("token=not-a-token")),
                         Wait("!document.querySelector('#login').hidden"),
                         {{"axe", axe}, {"as", "sign-in"}}},
                        width);
    r["sign-in"] = login.value("sign-in", Json::array({"not reached"}));
    for (const auto& [page, violations] : r.items()) {
      EXPECT_TRUE(violations.empty()) << width << " px, " << page << ": " << violations.dump(1);
    }
  }
}

}  // namespace tessera::testing
