// End to end with real processes on this machine: `tessera serve` and `tessera agent
// --simulate` (a declared inventory: there is no GPU here), jobs that really run.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "proc.h"
#include "serve_fixture.h"
#include "test_dir.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
using testing::kTessera;
using testing::Proc;

const char* kConfig = R"(
heartbeat_timeout: 2s
utilization_sample: 200ms
cancel_grace: 1s
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups: [{name: research}]
profiles:
  - {name: nb, gpus: 1, gpu_memory: 8GiB, cpu: 100m, memory: 64MiB, forms: [share]}
  - {name: train, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}
queues:
  - {name: notebooks, profile: nb, groups: [research]}
  - {name: training, profile: train, groups: [research], requeue_on_loss: true}
)";

class E2eTest : public testing::ServeFixture {
 protected:
  void SetUp() override {
    dir_ = tessera::testing::FreshTestDir("e2e");
    std::ofstream(dir_ + "/config.yaml") << tessera::testing::WithJobAccounts(kConfig);
    StartServer();
    StartAgent();
    ASSERT_TRUE(WaitFor([&] { return NodeState() == "ready"; })) << agent_->Log();
  }
  void StartAgent() {
    agent_ = std::make_unique<Proc>(
        std::vector<std::string>{
            kTessera, "agent", "--server", "http://127.0.0.1:" + std::to_string(port_),
            "--token-file", tessera::testing::TokenFile("agent-token-1"), "--node", "n1",
            "--simulate", "2xH100-80GB", "--work", dir_ + "/work", "--cgroup-root", ""},
        dir_ + "/agent.log");
  }
  std::string NodeState() {
    Json j = Call("GET", "/v1/nodes", {}, "admin-token-1");
    if (!j.is_object() || j["nodes"].empty()) return "";
    return j["nodes"][0]["state"];
  }
  void TearDown() override {
    if (agent_) agent_->KillOnly(SIGTERM);  // the agent stops its jobs (own sessions) first
    agent_.reset();
    server_.reset();
  }

  std::unique_ptr<Proc> agent_;
};

// The dashboard in a real headless Chromium: the page served at `/`, given the admin token in the
// URL fragment, runs its script against the live API and shows the cluster's totals and idle
// GPUs, the group's held GPUs and running workers, utilization samples and the event log.
TEST_F(E2eTest, DashboardShowsTotalsGroupsUtilizationAndEvents) {
  std::string chromium;
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (std::filesystem::exists(c)) chromium = c;
  }
  ASSERT_FALSE(chromium.empty()) << "chromium is not installed: run scripts/setup.sh";
  // One whole card held by a running job: 2 GPUs, 1 idle.
  std::string id =
      Call("POST", "/v1/jobs", {{"queue", "training"}, {"command", {"sleep", "30"}}})["id"];
  ASSERT_TRUE(WaitFor([&] { return State(id) == "running"; })) << agent_->Log();
  ASSERT_TRUE(WaitFor(
      [&] { return !Call("GET", "/v1/utilization", {}, "admin-token-1")["samples"].empty(); }));
  // A 2-card job waits (one card is busy): the page shows the step and reason that hold it.
  std::string waiting =
      Call("POST", "/v1/jobs", {{"queue", "training"}, {"gpus", 2}, {"command", {"true"}}})["id"];
  ASSERT_TRUE(WaitFor([&] {
    return Job(waiting).value("wait", Json::object()).value("step", "") == "Placement";
  })) << Job(waiting).dump();
  const std::string dom_file = dir_ + "/dom.html";
  const std::string cmd =
      chromium + " --headless --no-sandbox --disable-gpu --user-data-dir=" + dir_ +
      "/chromium --virtual-time-budget=5000 --dump-dom 'http://127.0.0.1:" + std::to_string(port_) +
      "/#token=admin-token-1' > " + dom_file + " 2> " + dir_ + "/chromium.log";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::string dom = testing::ReadFile(dom_file);
  auto has = [&](const std::string& what) { return dom.find(what) != std::string::npos; };
  EXPECT_TRUE(has(R"(<b id="gpus-total">2</b>)")) << dom;
  EXPECT_TRUE(has(R"(<b id="gpus-idle">1</b>)")) << dom;
  EXPECT_TRUE(has(R"(<b id="nodes">1</b>)")) << dom;
  EXPECT_TRUE(has(R"(<b id="workers">1</b>)")) << dom;
  EXPECT_TRUE(has(R"(<b id="pending">1</b>)")) << dom;
  // The group at a glance: 1 GPU held, 0 held but idle, 1 worker, 1 pending; in the groups view
  // no parent, no reservation, no limit, 1 GPU held.
  EXPECT_TRUE(has(
      R"(research</span></span></td><td class="num">1</td><td class="num">0</td><td class="num">1</td><td class="num">1</td></tr>)"))
      << dom;
  EXPECT_TRUE(has(
      R"(research</span></span></td><td></td><td class="num">0</td><td class="num">none</td><td class="num">1</td>)"))
      << dom;
  // The utilization chart has points.
  EXPECT_TRUE(has(R"(<svg id="util")")) << dom;
  EXPECT_TRUE(has(R"(data-points=")") && !has(R"(data-points="0")")) << dom;
  EXPECT_TRUE(has("<td>job.running</td><td>" + id + "</td>")) << dom;
  EXPECT_TRUE(has(R"(<p id="error" role="alert"></p>)")) << "the page reported an error:\n" << dom;
  // The waiting job's row in the jobs view (the overview fetches no jobs), with the step and
  // reason that hold it.
  const std::string jobs_cmd =
      chromium + " --headless --no-sandbox --disable-gpu --user-data-dir=" + dir_ +
      "/chromium3 --virtual-time-budget=5000 --dump-dom 'http://127.0.0.1:" +
      std::to_string(port_) + "/#token=admin-token-1&view=jobs' > " + dom_file + " 2>> " + dir_ +
      "/chromium.log";
  ASSERT_EQ(std::system(jobs_cmd.c_str()), 0) << jobs_cmd;
  const std::string jobs_dom = testing::ReadFile(dom_file);
  const size_t row = jobs_dom.find("<tr data-job=\"" + waiting + "\" data-state=\"pending\"");
  ASSERT_NE(row, std::string::npos) << jobs_dom;
  EXPECT_NE(jobs_dom.find("<td>Placement: no room for 2 x whole", row), std::string::npos)
      << jobs_dom.substr(row);
  // Without a token the page asks for one instead.
  const std::string bare =
      chromium + " --headless --no-sandbox --disable-gpu --user-data-dir=" + dir_ +
      "/chromium2 --virtual-time-budget=3000 --dump-dom 'http://127.0.0.1:" +
      std::to_string(port_) + "/' > " + dom_file + " 2>> " + dir_ + "/chromium.log";
  ASSERT_EQ(std::system(bare.c_str()), 0);
  const std::string bare_dom = testing::ReadFile(dom_file);
  EXPECT_NE(bare_dom.find(R"(<form id="login">)"), std::string::npos) << bare_dom;
  Call("POST", "/v1/jobs/" + id + "/cancel");
  Call("POST", "/v1/jobs/" + waiting + "/cancel");
}

TEST_F(E2eTest, SubmitRunCaptureOutput) {
  Json j = Call("POST", "/v1/jobs",
                {{"queue", "notebooks"},
                 {"gpu_memory", "8GiB"},
                 {"command",
                  {"sh", "-c",
                   "echo out-$TESSERA_JOB_ID; echo dev=$CUDA_VISIBLE_DEVICES "
                   "cap=$TESSERA_GPU_MEMORY_LIMIT; echo err >&2"}}});
  const std::string id = j["id"];
  ASSERT_TRUE(WaitFor([&] { return State(id) == "succeeded"; })) << State(id) << "\n"
                                                                 << agent_->Log();
  auto out = client_->Get(("/v1/jobs/" + id + "/output").c_str(),
                          {{"Authorization", "Bearer alice-token-1"}});
  ASSERT_TRUE(out);
  EXPECT_NE(out->body.find("out-" + id), std::string::npos) << out->body;
  EXPECT_NE(out->body.find("dev=GPU-sim-n1-"), std::string::npos) << out->body;
  EXPECT_NE(out->body.find("cap=8589934592"), std::string::npos) << out->body;
  EXPECT_NE(out->body.find("err"), std::string::npos);
  // It ends within the agent's first heartbeat period, never listed running: its start is how
  // long the agent says it ran before its end (protocol 5's run_ms), not unknown.
  const Json done = Call("GET", "/v1/jobs/" + id);
  ASSERT_TRUE(done.contains("start_ms")) << done.dump();
  EXPECT_GE(done["start_ms"].get<int64_t>(), done["submit_ms"].get<int64_t>());
  EXPECT_LE(done["start_ms"].get<int64_t>(), done["end_ms"].get<int64_t>());
  // A failing command reports its exit code.
  std::string f =
      Call("POST", "/v1/jobs", {{"queue", "training"}, {"command", {"sh", "-c", "exit 3"}}})["id"];
  ASSERT_TRUE(WaitFor([&] { return State(f) == "failed"; }));
  EXPECT_EQ(Call("GET", "/v1/jobs/" + f)["exit_code"], 3);
}

// A share's memory cap holds for the job the agent launches: the cap library is preloaded, the
// agent created the share's region, and a CUDA client (the capgpu tests' probe, over the
// stand-in libcuda.so.1 those tests build, since there is no GPU here) sees the cap as the
// device's total and is refused past it.
TEST_F(E2eTest, ShareCapIsEnforcedOnTheLaunchedJob) {
  Json j = Call("POST", "/v1/jobs",
                {{"queue", "notebooks"},
                 {"gpu_memory", "8GiB"},
                 {"env", {{"LD_LIBRARY_PATH", CAPGPU_FAKE_DRIVER_DIR}}},
                 {"command", {CAPGPU_PROBE, "total", "alloc", "6GiB", "alloc", "3GiB", "info"}}});
  const std::string id = j["id"];
  ASSERT_TRUE(WaitFor([&] { return State(id) == "succeeded"; })) << State(id) << "\n"
                                                                 << agent_->Log();
  auto out = client_->Get(("/v1/jobs/" + id + "/output").c_str(),
                          {{"Authorization", "Bearer alice-token-1"}});
  ASSERT_TRUE(out);
  EXPECT_NE(out->body.find("total 0 8589934592"), std::string::npos) << out->body;
  EXPECT_NE(out->body.find("alloc 0\nalloc 2\n"), std::string::npos)
      << "6 GiB fits, 3 more do not:\n"
      << out->body;
  EXPECT_NE(out->body.find("free=2147483648 total=8589934592"), std::string::npos) << out->body;
}

TEST_F(E2eTest, CancelARunningJob) {
  std::string id =
      Call("POST", "/v1/jobs", {{"queue", "training"}, {"command", {"sleep", "60"}}})["id"];
  ASSERT_TRUE(WaitFor([&] { return State(id) == "running"; })) << agent_->Log();
  Call("POST", "/v1/jobs/" + id + "/cancel");
  ASSERT_TRUE(WaitFor([&] { return State(id) == "cancelled"; }, 10000))
      << State(id) << agent_->Log();
  // Its device is free again: two whole-device jobs can run on the two devices.
  std::string a =
      Call("POST", "/v1/jobs", {{"queue", "training"}, {"command", {"sleep", "0.2"}}})["id"];
  std::string b =
      Call("POST", "/v1/jobs", {{"queue", "training"}, {"command", {"sleep", "0.2"}}})["id"];
  ASSERT_TRUE(WaitFor([&] { return State(a) == "succeeded" && State(b) == "succeeded"; }));
}

TEST_F(E2eTest, NodeLossRequeuesAndReturnRunsItAgain) {
  std::string id =
      Call("POST", "/v1/jobs", {{"queue", "training"}, {"command", {"sleep", "30"}}})["id"];
  ASSERT_TRUE(WaitFor([&] { return State(id) == "running"; }));
  agent_->Kill(SIGKILL);  // the agent and its job vanish with the node
  ASSERT_TRUE(WaitFor([&] { return NodeState() == "lost"; }, 10000));
  EXPECT_EQ(State(id), "pending");
  Json events = Call("GET", "/v1/events?kind=job.requeued", {}, "admin-token-1");
  ASSERT_EQ(events["events"].size(), 1u);
  StartAgent();
  ASSERT_TRUE(WaitFor([&] { return NodeState() == "ready"; }));
  ASSERT_TRUE(WaitFor([&] { return State(id) == "running"; })) << State(id);
  events = Call("GET", "/v1/events?kind=node.", {}, "admin-token-1");
  std::string kinds;
  for (const auto& e : events["events"]) kinds += e["kind"].get<std::string>() + " ";
  EXPECT_NE(kinds.find("node.lost"), std::string::npos) << kinds;
  EXPECT_NE(kinds.find("node.returned"), std::string::npos) << kinds;
  // Held once: one device in use.
  Json nodes = Call("GET", "/v1/nodes", {}, "admin-token-1");
  int64_t used = 0;
  for (const auto& d : nodes["nodes"][0]["devices"]) used += d["gpu_milli_used"].get<int64_t>();
  EXPECT_EQ(used, 1000);
}

// An agent that comes back without its jobs (killed with them, restarted at once, before the
// 2 s heartbeat timeout): it says it runs nothing, so the job is over there at once (requeued,
// as its queue says) and runs again, rather than showing "running" until a heartbeat timeout
// notices, or forever when the agent heartbeats in time.
TEST_F(E2eTest, AnAgentRestartedWithoutItsJobsEndsThemAtOnce) {
  std::string id =
      Call("POST", "/v1/jobs", {{"queue", "training"}, {"command", {"sleep", "30"}}})["id"];
  ASSERT_TRUE(WaitFor([&] { return State(id) == "running"; })) << agent_->Log();
  agent_->Kill(SIGKILL);  // the agent and its job, without a word to the control plane
  StartAgent();
  ASSERT_TRUE(WaitFor(
      [&] {
        Json e = Call("GET", "/v1/events?kind=job.requeued", {}, "admin-token-1");
        return e.is_object() && !e["events"].empty();
      },
      5000));
  Json requeued = Call("GET", "/v1/events?kind=job.requeued", {}, "admin-token-1");
  EXPECT_NE(
      requeued["events"][0]["reason"].get<std::string>().find("when its agent registered again"),
      std::string::npos)
      << requeued.dump();
  ASSERT_TRUE(WaitFor([&] { return State(id) == "running"; }, 10000)) << State(id) << agent_->Log();
  Json lost = Call("GET", "/v1/events?kind=node.lost", {}, "admin-token-1");
  EXPECT_TRUE(lost["events"].empty()) << lost.dump();
  Json nodes = Call("GET", "/v1/nodes", {}, "admin-token-1");
  int64_t used = 0;
  for (const auto& d : nodes["nodes"][0]["devices"]) used += d["gpu_milli_used"].get<int64_t>();
  EXPECT_EQ(used, 1000);  // held once
}

// A job printing as fast as it can (200 MB at pipe speed) never holds back its node's heartbeats:
// the agent heartbeats first and uploads for at most half a period. Sampled every 100 ms, the
// last heartbeat is never more than the 1 s period plus 1 s old, and the node is never lost.
TEST_F(E2eTest, FastOutputNeverDelaysHeartbeats) {
  const std::string cmd =
      "yes 0123456789012345678901234567890123456789012345678901234567890123456789 | "
      "head -c 200000000; sleep 1";
  std::string id =
      Call("POST", "/v1/jobs", {{"queue", "training"}, {"command", {"sh", "-c", cmd}}})["id"];
  int64_t worst_ms = 0;
  int samples = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (State(id) != "succeeded" && std::chrono::steady_clock::now() < until) {
    Json nodes = Call("GET", "/v1/nodes", {}, "admin-token-1");
    const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    if (nodes.is_object() && !nodes["nodes"].empty()) {
      worst_ms = std::max(worst_ms, now - nodes["nodes"][0]["last_heartbeat_ms"].get<int64_t>());
      ++samples;
    }
    // A sample every 100 ms (a sleep on purpose: the heartbeats' ages over time are measured).
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(State(id), "succeeded") << agent_->Log();
  EXPECT_GT(samples, 10);
  EXPECT_LT(worst_ms, 2000) << "a heartbeat was held back";
  Json lost = Call("GET", "/v1/events?kind=node.lost", {}, "admin-token-1");
  EXPECT_TRUE(lost["events"].empty()) << lost.dump();
}

// An inventory the scheduler cannot hold (two GPU models on one node) is refused at
// registration with the reason, never saved: the server restarts cleanly and the good node and
// its job are still there.
TEST_F(E2eTest, ABadInventoryIsRefusedAndTheServerRestartsCleanly) {
  std::string id =
      Call("POST", "/v1/jobs", {{"queue", "training"}, {"command", {"sleep", "30"}}})["id"];
  ASSERT_TRUE(WaitFor([&] { return State(id) == "running"; }));
  const Json bad = {
      {"node", "mixed"},
      {"cpu_milli", 8000},
      {"memory_mib", 65536},
      {"devices",
       {{{"index", 0}, {"model", "H100-80GB"}, {"memory_mib", 81920}, {"uuid", "a"}},
        {{"index", 1}, {"model", "A100-80GB"}, {"memory_mib", 81920}, {"uuid", "b"}}}}};
  auto r = client_->Post("/v1/agent/register", {{"Authorization", "Bearer agent-token-1"}},
                         bad.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("mixes GPU models"), std::string::npos) << r->body;
  server_->Kill(SIGKILL);
  StartServer();  // same data: it must start
  ASSERT_TRUE(WaitFor([&] { return State(id) == "running"; }, 10000)) << server_->Log();
  Json nodes = Call("GET", "/v1/nodes", {}, "admin-token-1");
  ASSERT_EQ(nodes["nodes"].size(), 1u) << nodes.dump();
  EXPECT_EQ(nodes["nodes"][0]["name"], "n1");
  Call("POST", "/v1/jobs/" + id + "/cancel");
}

TEST_F(E2eTest, ServerRestartKeepsJobsAndAgentReconciles) {
  std::string id =
      Call("POST", "/v1/jobs", {{"queue", "training"}, {"command", {"sleep", "2"}}})["id"];
  ASSERT_TRUE(WaitFor([&] { return State(id) == "running"; }));
  server_->Kill(SIGKILL);
  StartServer();  // same port, same data directory
  ASSERT_TRUE(WaitFor([&] { return !State(id).empty(); }, 5000)) << server_->Log();
  EXPECT_EQ(State(id), "running") << Call("GET", "/v1/jobs/" + id).dump() << server_->Log();
  ASSERT_TRUE(WaitFor([&] { return State(id) == "succeeded"; }, 20000))
      << State(id) << agent_->Log();
}

}  // namespace
}  // namespace tessera
