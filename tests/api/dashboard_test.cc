// Dashboard v2 in a real headless Chromium against a real `tessera serve` and a real simulated
// agent (2 x A100-80GB): the card map shows the MIG instance and the shares on the right devices
// with the right owners, the idle holding is marked, the utilization chart has points and keeps
// them across a server restart, the jobs filters and a job's events work from the URL fragment,
// the event kind filter, the groups and what-if views answer, and no page logs a console message
// or an uncaught exception. A screenshot of each view is saved for people to look at.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "proc.h"
#include "serve_fixture.h"
#include "test_dir.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
using testing::kTessera;
using testing::Proc;
using Attrs = std::map<std::string, std::string>;

const char* kConfig = R"(
heartbeat_timeout: 5s
cycle: 300ms
idle_after: 2s
utilization_sample: 1s
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: vee, role: user, groups: [vision], token: vision-token-1}
  - {name: sam, role: user, groups: [speech], token: speech-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups:
  - {name: vision, reservation: {gpu: 1}}
  - {name: speech}
profiles:
  - {name: serve, gpus: 1, gpu_fraction: 0.1, gpu_memory: 10GB, cpu: 100m, memory: 64MiB, forms: [partition, share, whole]}
  - {name: nb, gpus: 1, gpu_fraction: 0.1, gpu_memory: 8GiB, cpu: 100m, memory: 64MiB, forms: [share]}
class_forms:
  inference: [partition, share, whole]
queues:
  - {name: inference, profile: serve, groups: [vision], class: inference}
  - {name: notebooks, profile: nb, groups: [speech, vision], class: interactive}
)";

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The attributes of every element whose start tag begins with `start` (e.g. `<div class="seg`),
// in document order.
std::vector<Attrs> Tags(const std::string& dom, const std::string& start) {
  static const std::regex attr(R"re(([a-zA-Z_:][-a-zA-Z0-9_:.]*)="([^"]*)")re");
  std::vector<Attrs> out;
  for (size_t at = dom.find(start); at != std::string::npos; at = dom.find(start, at + 1)) {
    const size_t end = dom.find('>', at);
    const std::string tag = dom.substr(at, end - at);
    Attrs a;
    for (std::sregex_iterator it(tag.begin(), tag.end(), attr), stop; it != stop; ++it)
      a[(*it)[1]] = (*it)[2];
    a["#offset"] = std::to_string(at);
    out.push_back(a);
  }
  return out;
}
const Attrs* Find(const std::vector<Attrs>& tags, const std::string& key,
                  const std::string& value) {
  for (const auto& t : tags) {
    auto it = t.find(key);
    if (it != t.end() && it->second == value) return &t;
  }
  return nullptr;
}
std::string Get(const Attrs* a, const std::string& key) {
  if (!a) return "<no element>";
  auto it = a->find(key);
  return it == a->end() ? "<absent>" : it->second;
}

// Console messages (every level: Chromium logs console.error, console.log and uncaught
// exceptions alike as INFO:CONSOLE) and uncaught exceptions in a Chromium log.
std::string ConsoleLines(const std::string& log) {
  std::string out, line;
  std::istringstream in(log);
  while (std::getline(in, line)) {
    if (line.find(":CONSOLE") != std::string::npos || line.find("CONSOLE(") != std::string::npos ||
        line.find("Uncaught") != std::string::npos) {
      out += line + "\n";
    }
  }
  return out;
}

class DashboardTest : public testing::ServeFixture {
 protected:
  void SetUp() override {
    for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
      if (std::filesystem::exists(c)) chromium_ = c;
    }
    ASSERT_FALSE(chromium_.empty()) << "chromium is not installed: run scripts/setup.sh";
    dir_ = tessera::testing::FreshTestDir("dashboard");
    std::ofstream(dir_ + "/config.yaml") << tessera::testing::WithJobAccounts(kConfig);
    StartServer();
    if (HasFatalFailure()) return;
    agent_ = std::make_unique<Proc>(
        std::vector<std::string>{
            kTessera, "agent", "--server", "http://127.0.0.1:" + std::to_string(port_),
            "--token-file", tessera::testing::TokenFile("agent-token-1"), "--node", "sim",
            "--simulate", "2xA100-80GB", "--work", dir_ + "/work", "--cgroup-root", ""},
        dir_ + "/agent.log");
    ASSERT_TRUE(WaitFor([&] { return NodeReady(); })) << server_->Log() << agent_->Log();
  }
  void TearDown() override {
    if (agent_) agent_->KillOnly(SIGTERM);  // the agent stops its jobs first
    agent_.reset();
    server_.reset();
  }
  bool NodeReady() {
    Json j = Call("GET", "/v1/nodes", {}, "admin-token-1");
    return j.is_object() && !j["nodes"].empty() && j["nodes"][0]["state"] == "ready";
  }
  // Loads the page at `fragment` (after '#') in a fresh headless Chromium; returns the DOM after
  // the script ran (a screenshot instead when `screenshot` is given) and collects the console.
  std::string Load(const std::string& fragment, const std::string& screenshot = "",
                   const std::string& flags = "") {
    const std::string n = std::to_string(++loads_);
    const std::string out = dir_ + "/dom-" + n + ".html", log = dir_ + "/chromium-" + n + ".log";
    std::string cmd =
        chromium_ +
        " --headless --no-sandbox --disable-gpu --enable-logging=stderr --v=0 --user-data-dir=" +
        dir_ + "/chromium-" + n + " --virtual-time-budget=8000 " + flags;
    cmd += screenshot.empty() ? std::string("--dump-dom")
                              : "--window-size=1366,900 --screenshot=" + screenshot;
    cmd += " 'http://127.0.0.1:" + std::to_string(port_) + "/#" + fragment + "' > " + out + " 2> " +
           log;
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    console_ += ConsoleLines(testing::ReadFile(log));
    return testing::ReadFile(out);
  }

  std::string chromium_;
  std::unique_ptr<Proc> agent_;
  int loads_ = 0;
  std::string console_;  // every console line of every load
};

// The console check can fail: a page that calls console.error and throws is caught.
TEST_F(DashboardTest, TheConsoleCheckCatchesErrors) {
  const std::string page = dir_ + "/bad.html";
  std::ofstream(page)
      << "<html><body><script>console.error('boom'); null.x;</script></body></html>";
  const std::string cmd =
      chromium_ +
      " --headless --no-sandbox --disable-gpu --enable-logging=stderr --v=0 --user-data-dir=" +
      dir_ + "/chromium-bad --virtual-time-budget=1000 --dump-dom file://" + page +
      " > /dev/null 2> " + dir_ + "/bad.log";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const std::string lines = ConsoleLines(testing::ReadFile(dir_ + "/bad.log"));
  EXPECT_NE(lines.find("boom"), std::string::npos) << testing::ReadFile(dir_ + "/bad.log");
  EXPECT_NE(lines.find("Uncaught"), std::string::npos) << lines;
}

TEST_F(DashboardTest, CardMapIdleUtilizationAcrossRestartFiltersAndScreenshots) {
  // A vision inference job (a MIG instance on an A100) and two speech notebooks (shares): one
  // sleeps (held but idle after 2 s), one computes. (The inference job sleeps too.)
  const std::string inf =
      Submit("vision-token-1", {{"queue", "inference"}, {"command", {"sleep", "1000"}}});
  const std::string sleeper =
      Submit("speech-token-1", {{"queue", "notebooks"}, {"command", {"sleep", "1000"}}});
  const std::string busy = Submit(
      "speech-token-1", {{"queue", "notebooks"}, {"command", {"sh", "-c", "while :; do :; done"}}});
  for (const auto& id : {inf, sleeper, busy}) {
    ASSERT_TRUE(WaitFor([&] { return AdminJob(id).value("state", "") == "running"; }))
        << AdminJob(id).dump() << agent_->Log();
  }
  ASSERT_TRUE(WaitFor([&] {
    Json j = AdminJob(sleeper);
    return j.contains("activity") && j["activity"].value("idle", false);
  })) << AdminJob(sleeper).dump();
  const Json inf_at = AdminJob(inf)["placement"];
  ASSERT_EQ(inf_at["form"], "partition") << inf_at.dump();
  const Json sleeper_at = AdminJob(sleeper)["placement"], busy_at = AdminJob(busy)["placement"];
  ASSERT_EQ(sleeper_at["form"], "share") << sleeper_at.dump();
  ASSERT_EQ(busy_at["form"], "share") << busy_at.dump();

  // The card map.
  {
    const std::string dom = Load("token=admin-token-1&view=cards");
    EXPECT_NE(dom.find(R"(<p id="error" role="alert"></p>)"), std::string::npos)
        << "the page reported an error:\n"
        << dom;
    const auto devices = Tags(dom, "<div class=\"device\"");
    const auto segs = Tags(dom, "<div class=\"seg");
    ASSERT_EQ(devices.size(), 2u) << dom;
    // The MIG instance: on the A100 the job was placed on, owned by vee of vision.
    const Json& d = inf_at["devices"][0];
    const Attrs* s = Find(segs, "data-job", inf);
    ASSERT_NE(s, nullptr) << dom;
    EXPECT_EQ(Get(s, "data-node"), "sim");
    EXPECT_EQ(Get(s, "data-device"), std::to_string(d["index"].get<int>()));
    EXPECT_EQ(Get(s, "data-group"), "vision");
    EXPECT_EQ(Get(s, "data-identity"), "vee");
    EXPECT_EQ(Get(s, "data-partition"), d["partition"].get<std::string>());
    EXPECT_EQ(Get(s, "data-profile").rfind("1g.10gb", 0), 0u) << Get(s, "data-profile");
    const Attrs* dev = nullptr;
    for (const auto& x : devices) {
      if (Get(&x, "data-device") == std::to_string(d["index"].get<int>())) dev = &x;
    }
    EXPECT_EQ(Get(dev, "data-model"), "A100-80GB");
    EXPECT_EQ(Get(dev, "data-layout"), "MIG");
    // The MIG segment sits inside that device's element (after its start, before the next one's).
    const size_t seg_at = std::stoul(Get(s, "#offset")), dev_at = std::stoul(Get(dev, "#offset"));
    EXPECT_GT(seg_at, dev_at);
    for (const auto& x : devices) {
      const size_t o = std::stoul(Get(&x, "#offset"));
      EXPECT_FALSE(o > dev_at && o < seg_at) << "the MIG segment is drawn on another device";
    }
    // The shares: on their devices, owned by sam of speech, 8 GiB of 80 wide (10 %).
    for (const auto& [id, at] : {std::pair{sleeper, sleeper_at}, std::pair{busy, busy_at}}) {
      const Attrs* sh = Find(segs, "data-job", id);
      ASSERT_NE(sh, nullptr) << id << "\n" << dom;
      EXPECT_EQ(Get(sh, "data-device"), std::to_string(at["devices"][0]["index"].get<int>())) << id;
      EXPECT_EQ(Get(sh, "data-group"), "speech");
      EXPECT_EQ(Get(sh, "data-identity"), "sam");
      EXPECT_EQ(Get(sh, "data-form"), "share");
      EXPECT_NE(Get(sh, "style").find("width: 10%"), std::string::npos) << Get(sh, "style");
    }
    // The idle holding is marked (hatched, the word "idle"); the busy one is not.
    const Attrs* idle = Find(segs, "data-job", sleeper);
    EXPECT_EQ(Get(idle, "data-idle"), "true");
    EXPECT_NE(Get(idle, "class").find("idle"), std::string::npos);
    const size_t idle_at = std::stoul(Get(idle, "#offset"));
    EXPECT_NE(dom.substr(idle_at, dom.find("</div>", idle_at) - idle_at)
                  .find("<span class=\"tag\">idle</span>"),
              std::string::npos);
    EXPECT_EQ(Get(Find(segs, "data-job", busy), "data-idle"), "<absent>");
    // A legend entry per group holding something.
    EXPECT_NE(dom.find(R"(<span data-group="speech")"), std::string::npos);
    EXPECT_NE(dom.find(R"(<span data-group="vision")"), std::string::npos);
  }

  // Utilization: enough history (10 s of 1 s samples) to tell old points from new ones.
  ASSERT_TRUE(WaitFor(
      [&] {
        Json u = Call("GET", "/v1/utilization?since=" + std::to_string(NowMs() - 900000), {},
                      "admin-token-1");
        return u.is_object() && !u["samples"].empty() &&
               u["samples"][0]["time_ms"].get<int64_t>() < NowMs() - 10000;
      },
      30000));
  int64_t first = 0, step = 0;
  {
    const std::string dom = Load("token=admin-token-1&view=utilization&range=15m");
    const auto chart = Tags(dom, "<svg id=\"util\"");
    ASSERT_EQ(chart.size(), 1u) << dom;
    EXPECT_GE(std::stoi(Get(&chart[0], "data-points")), 3) << dom;
    first = std::stoll(Get(&chart[0], "data-first-time"));
    step = std::stoll(Get(&chart[0], "data-step"));
    EXPECT_LE(step, 3000);  // 15 min in at most ~300 points
    EXPECT_NE(dom.find(R"(<path d="M)"), std::string::npos) << "no area drawn";
    EXPECT_NE(dom.find(R"(data-group="speech")"), std::string::npos);
    EXPECT_NE(dom.find(R"(data-time=")"), std::string::npos) << "no time axis labels";
  }
  // Restart the server on the same data and port: the chart still starts before the restart.
  const int64_t restart_ms = NowMs();
  server_->Kill(SIGKILL);
  const int before = port_;
  StartServer();
  ASSERT_EQ(port_, before);
  ASSERT_TRUE(WaitFor([&] { return NodeReady(); }, 20000)) << server_->Log();
  {
    const std::string dom = Load("token=admin-token-1&view=utilization&range=15m");
    const auto chart = Tags(dom, "<svg id=\"util\"");
    ASSERT_EQ(chart.size(), 1u) << dom;
    EXPECT_GE(std::stoi(Get(&chart[0], "data-points")), 3) << dom;
    const int64_t again = std::stoll(Get(&chart[0], "data-first-time"));
    EXPECT_LE(again, first + step) << "the history before the restart is gone";
    EXPECT_LT(again, restart_ms - 2 * step) << "the chart starts after the restart";
  }

  // Filters from the fragment: only speech jobs, then only vision's.
  {
    const std::string dom = Load("token=admin-token-1&view=jobs&group=speech");
    const auto rows = Tags(dom, "<tr data-job=");
    EXPECT_EQ(rows.size(), 2u) << dom;
    for (const auto& r : rows) EXPECT_EQ(Get(&r, "data-group"), "speech") << dom;
    EXPECT_NE(Find(rows, "data-job", sleeper), nullptr);
    EXPECT_NE(Find(rows, "data-job", busy), nullptr);
    EXPECT_EQ(Find(rows, "data-job", inf), nullptr);
  }
  {
    const std::string dom = Load("token=admin-token-1&view=jobs&group=vision&state=running");
    const auto rows = Tags(dom, "<tr data-job=");
    ASSERT_EQ(rows.size(), 1u) << dom;
    EXPECT_EQ(Get(&rows[0], "data-job"), inf);
  }
  // A job's detail: its events (the sleeper's job.idle among them).
  {
    const std::string dom = Load("token=admin-token-1&view=jobs&job=" + sleeper);
    const size_t at = dom.find("data-events=\"" + sleeper + "\"");
    ASSERT_NE(at, std::string::npos) << dom;
    EXPECT_NE(dom.find("<td>job.idle</td>", at), std::string::npos) << dom.substr(at);
    EXPECT_NE(dom.find("<td>job.running</td>", at), std::string::npos) << dom.substr(at);
  }
  // The event log filtered by kind.
  {
    const std::string dom = Load("token=admin-token-1&view=events&kind=job.idle");
    const auto rows = Tags(dom, "<tr data-kind=");
    ASSERT_FALSE(rows.empty()) << dom;
    for (const auto& r : rows) EXPECT_EQ(Get(&r, "data-kind").rfind("job.idle", 0), 0u) << dom;
  }
  // Groups: a row each, and the what-if report (admin) with the interactive class replayed.
  {
    const std::string dom = Load("token=admin-token-1&view=whatif");
    EXPECT_NE(dom.find(R"(<tr data-group="vision">)"), std::string::npos) << dom;
    EXPECT_NE(dom.find(R"(<tr data-group="speech">)"), std::string::npos) << dom;
    EXPECT_NE(dom.find(R"(<tr data-class="interactive">)"), std::string::npos) << dom;
    EXPECT_NE(dom.find(R"(<p id="error" role="alert"></p>)"), std::string::npos) << dom;
  }
  // A user sees a note there, not an error; and only their own group's jobs.
  {
    const std::string dom = Load("token=speech-token-1&view=whatif");
    EXPECT_NE(dom.find("The what-if report is for admins."), std::string::npos) << dom;
    EXPECT_NE(dom.find(R"(<p id="error" role="alert"></p>)"), std::string::npos) << dom;
    // The jobs are loaded for the views that show them (jobs, groups, queues).
    const std::string jobs = Load("token=speech-token-1&view=jobs");
    EXPECT_EQ(Tags(jobs, "<tr data-job=").size(), 2u) << jobs;
  }

  // A screenshot of each view.
  const std::string shots = TESSERA_DASHBOARD_SCREENSHOTS;
  std::filesystem::create_directories(shots);
  for (const std::string view :
       {"overview", "cards", "utilization", "groups", "jobs", "queues", "events", "whatif"}) {
    const std::string file = shots + "/" + view + ".png";
    std::filesystem::remove(file);
    Load("token=admin-token-1&view=" + view + (view == "utilization" ? "&range=15m" : ""), file);
    ASSERT_TRUE(std::filesystem::exists(file)) << file;
    EXPECT_GT(std::filesystem::file_size(file), 1000u) << file;
  }
  // The card map in dark mode too (prefers-color-scheme: dark).
  Load("token=admin-token-1&view=cards", shots + "/cards-dark.png",
       "--force-dark-mode --blink-settings=preferredColorScheme=0 ");
  EXPECT_GT(std::filesystem::file_size(shots + "/cards-dark.png"), 1000u);
  // No console message and no uncaught exception on any load.
  EXPECT_EQ(console_, "") << "the dashboard logged to the console";
  std::printf("dashboard screenshots: %s\n", shots.c_str());
  for (const auto& id : {inf, sleeper, busy})
    Call("POST", "/v1/jobs/" + id + "/cancel", {}, "admin-token-1");
}

}  // namespace
}  // namespace tessera
