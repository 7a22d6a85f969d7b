// The agent loop against a fake control plane (cpp-httplib on 127.0.0.1, port 0) that checks the
// protocol of docs/agent-protocol.md: registration, heartbeats, starts, output uploads by offset,
// finished reports repeated until acked, cancels, may_run, and surviving a control-plane outage.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "agent/agent.h"
#include "capgpu/region.h"
#include "fake_control_plane.h"
#include "test_util.h"

namespace tessera::agent {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::kToken;
using testing::TempDir;
using testing::WaitFor;

// A scriptable control plane. Test code queues starts and cancels and edits may_run; the
// server records what the agent sent and checks each request's shape, counting violations.
class FakeControlPlane : public testing::AgentReports {
 public:
  explicit FakeControlPlane(int port = 0) {
    server_.Post("/v1/agent/register", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorized(req, res)) return;
      json body = json::parse(req.body, nullptr, false);
      std::lock_guard<std::mutex> lock(mu_);
      if (!refusal_.empty()) {  // a server that does not serve this agent's protocol version
        ++refused_registrations_;
        res.status = 409;
        res.set_content(json{{"error", refusal_}}.dump(), "application/json");
        return;
      }
      if (body.is_discarded() || !body.contains("node") || !body.contains("devices") ||
          !body.contains("cpu_milli") || !body.contains("memory_mib") ||
          !body.contains("cgroups")) {
        Violation("register body: " + req.body);
      }
      registrations_.push_back(body);
      registered_ = true;
      res.set_content(json{{"ok", true}, {"heartbeat_ms", 50}}.dump(), "application/json");
    });
    server_.Post("/v1/agent/heartbeat", [this](const httplib::Request& req,
                                               httplib::Response& res) {
      if (!Authorized(req, res)) return;
      json body = json::parse(req.body, nullptr, false);
      std::lock_guard<std::mutex> lock(mu_);
      if (!registered_) {
        res.status = 404;
        res.set_content(R"({"error": "unknown node"})", "application/json");
        return;
      }
      if (body.is_discarded() || !body["running"].is_array() || !body["finished"].is_array()) {
        Violation("heartbeat body: " + req.body);
        return;
      }
      if (refuse_readings_ && body.contains("devices")) {  // a server that refuses a reading
        ++refused_heartbeats_;
        res.status = 400;
        res.set_content(R"({"error": "devices.'memory_used_mib' must be an integer from 0 to 1"})",
                        "application/json");
        return;
      }
      ++heartbeats_;
      last_heartbeat_ = body;
      json reply = {{"start", json::array()}, {"cancel", json::array()}, {"ack", json::array()}};
      running_.clear();
      for (const json& r : body["running"]) {
        running_[r["job"].get<std::string>()] = r["pid"].get<int>();
        pids_seen_[r["job"].get<std::string>()].insert(r["pid"].get<int>());
      }
      for (const json& f : body["finished"]) {
        std::string id = f["job"];
        if (acked_.count(id) != 0) Violation("job " + id + " reported again after its ack");
        if (f["output_bytes"].get<size_t>() != output_[id].size()) {
          Violation("job " + id + " finished before its output was uploaded");
        }
        finished_[id] = f;
        int times = ++finished_reports_[id];
        if (times >= ack_after_) {
          reply["ack"].push_back(id);
          acked_.insert(id);
        }
      }
      for (json& s : pending_start_) {
        may_run_.insert(s["job"].get<std::string>());
        reply["start"].push_back(std::move(s));
      }
      pending_start_.clear();
      for (json& c : pending_cancel_) reply["cancel"].push_back(std::move(c));
      pending_cancel_.clear();
      reply["may_run"] = may_run_;
      res.set_content(reply.dump(), "application/json");
    });
    server_.Put(R"(/v1/agent/jobs/([^/]+)/output)",
                [this](const httplib::Request& req, httplib::Response& res) {
                  if (!Authorized(req, res)) return;
                  std::lock_guard<std::mutex> lock(mu_);
                  std::string id = req.matches[1];
                  size_t offset = std::stoull(req.get_param_value("offset"));
                  std::string& out = output_[id];
                  if (offset != out.size()) {
                    Violation("output of " + id + " at offset " + std::to_string(offset) +
                              ", holding " + std::to_string(out.size()));
                    res.status = 409;
                    return;
                  }
                  if (busy_uploads_ > 0) {  // a limit of the moment: try again later
                    --busy_uploads_;
                    res.status = 429;
                    res.set_content(R"({"error":"busy"})", "application/json");
                    return;
                  }
                  if (req.body.empty()) Violation("empty output upload for " + id);
                  out += req.body;
                  ++uploads_;
                  res.set_content("{}", "application/json");
                });
    port_ = port == 0 ? server_.bind_to_any_port("127.0.0.1")
                      : (server_.bind_to_port("127.0.0.1", port) ? port : -1);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    if (port_ > 0) WaitFor([this] { return server_.is_running(); }, 10s, 1ms);
  }
  ~FakeControlPlane() { Stop(); }

  void Stop() {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }

  int port() const { return port_; }
  // Answers 400 to every heartbeat that carries the devices' readings.
  void RefuseReadings() {
    std::lock_guard<std::mutex> lock(mu_);
    refuse_readings_ = true;
  }
  int RefusedHeartbeats() {
    std::lock_guard<std::mutex> lock(mu_);
    return refused_heartbeats_;
  }
  // Answers every registration 409 with `message` as the error.
  void RefuseRegistrations(const std::string& message) {
    std::lock_guard<std::mutex> lock(mu_);
    refusal_ = message;
  }
  int RefusedRegistrations() {
    std::lock_guard<std::mutex> lock(mu_);
    return refused_registrations_;
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  void Start(const std::string& id, std::vector<std::string> command, json extra = json::object()) {
    std::lock_guard<std::mutex> lock(mu_);
    json s = {{"job", id},
              {"command", command},
              {"env", json::object()},
              {"cpu_milli", 100},
              {"memory_mib", 64},
              {"devices", json::array()},
              {"gpu_memory_limit_bytes", 0}};
    // As a server names it: a root agent runs no job without an account (never as root).
    if (geteuid() == 0) s["run_as"] = "nobody";
    s.update(extra);
    pending_start_.push_back(s);
  }
  void BusyUploads(int n) {  // the next n output uploads are answered 429
    std::lock_guard<std::mutex> lock(mu_);
    busy_uploads_ = n;
  }
  void Cancel(const std::string& id, int grace_ms) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_cancel_.push_back({{"job", id}, {"grace_ms", grace_ms}});
  }
  void Forget(const std::string& id) {  // as after node loss: the job was requeued elsewhere
    std::lock_guard<std::mutex> lock(mu_);
    may_run_.erase(id);
  }

  // Accessors copy under the lock.
  bool IsRunning(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    return running_.count(id) != 0;
  }
  std::set<int> PidsSeen(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    return pids_seen_[id];
  }
  std::string Output(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    return output_[id];
  }
  json LastHeartbeat() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_heartbeat_;
  }

 private:
  bool Authorized(const httplib::Request& req, httplib::Response& res) {
    if (req.get_header_value("Authorization") == std::string("Bearer ") + kToken) return true;
    std::lock_guard<std::mutex> lock(mu_);
    Violation("request without the bearer token: " + req.path);
    res.status = 401;
    return false;
  }
  void Violation(const std::string& what) { violations_.push_back(what); }  // REQUIRES: mu_ held

  httplib::Server server_;
  std::thread thread_;
  int port_ = -1;
  bool registered_ = false;
  std::string refusal_;
  int refused_registrations_ = 0;
  bool refuse_readings_ = false;
  int refused_heartbeats_ = 0;
  json last_heartbeat_;
  int uploads_ = 0;
  std::vector<json> pending_start_, pending_cancel_;
  std::set<std::string> may_run_;
  std::map<std::string, std::set<int>> pids_seen_;
  std::map<std::string, std::string> output_;
  int busy_uploads_ = 0;
};

// RunAgent on a thread, stopped and joined on destruction.
class AgentThread {
 public:
  AgentThread(const std::string& url, const TempDir& dir, const std::string& nvml = "",
              const std::function<void(AgentOptions&)>& tweak = nullptr) {
    options_ = testing::TestAgentOptions(url, dir.path(), "host-a");
    options_.simulate = nvml.empty() ? "2xH100-80GB" : "";
    if (!nvml.empty()) options_.nvml_library = nvml;
    options_.request_timeout_ms = 1000;
    options_.upload_chunk_bytes = 4096;  // several PUTs for larger output
    options_.stop = &stop_;
    options_.log = [](const std::string&) {};
    if (tweak) tweak(options_);
    thread_ = std::thread([this] { rc_ = RunAgent(options_); });
  }
  ~AgentThread() { Stop(); }
  // RunAgent returned (on its own, before any Stop).
  bool exited() const { return rc_.load() != -1; }
  int Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return rc_;
  }

 private:
  AgentOptions options_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::atomic<int> rc_{-1};
};

std::vector<std::string> Sh(const std::string& script) { return {"/bin/sh", "-c", script}; }

// 429 is "too many requests: try again later". An agent gave the rest of a job's output up on
// it, as on a refusal for good (a 4xx), and the job's output was lost past that point.
TEST(AgentLoop, AnOutputUploadAnswered429IsSentAgainLater) {
  TempDir dir;
  FakeControlPlane cp;
  ASSERT_GT(cp.port(), 0);
  cp.BusyUploads(2);
  AgentThread agent(cp.url(), dir);
  ASSERT_TRUE(WaitFor([&] { return cp.Heartbeats() >= 1; }, 5s));
  cp.Start("j-busy", Sh("i=0; while [ $i -lt 500 ]; do echo line-$i; i=$((i+1)); done"));
  ASSERT_TRUE(WaitFor([&] { return cp.Acked("j-busy"); }, 15s));
  const std::string out = cp.Output("j-busy");
  EXPECT_EQ(cp.Finished("j-busy")["output_bytes"].get<size_t>(), out.size());
  EXPECT_NE(out.find("line-499\n"), std::string::npos) << out.size() << " bytes uploaded";
}

TEST(AgentLoop, RunsJobsAsTheControlPlaneSays) {
  TempDir dir;
  FakeControlPlane cp;
  ASSERT_GT(cp.port(), 0);
  cp.AckAfter(3);  // finished reports must be repeated until acked
  AgentThread agent(cp.url(), dir);

  ASSERT_TRUE(WaitFor([&] { return cp.Heartbeats() >= 1; }, 5s));
  std::vector<json> regs = cp.Registrations();
  ASSERT_EQ(regs.size(), 1u);
  EXPECT_EQ(regs[0]["node"], "host-a");
  EXPECT_EQ(regs[0]["simulated"], true);
  ASSERT_EQ(regs[0]["devices"].size(), 2u);
  EXPECT_EQ(regs[0]["devices"][1]["uuid"], "GPU-sim-host-a-1");
  EXPECT_EQ(regs[0]["devices"][1]["simulated"], true);

  // A job that writes more than one upload chunk and exits non-zero.
  cp.Start("j-out",
           Sh("i=0; while [ $i -lt 1000 ]; do echo line-$i; i=$((i+1)); done; "
              "echo \"CVD=$CUDA_VISIBLE_DEVICES\" >&2; exit 3"),
           {{"devices", json::array({{{"index", 1}, {"uuid", "GPU-sim-host-a-1"}, {"mig", ""}}})}});
  cp.Start("j-cancel", Sh("exec sleep 30"));
  cp.Start("j-lost", Sh("exec sleep 30"));

  ASSERT_TRUE(WaitFor([&] { return cp.Acked("j-out"); }, 10s));
  json f = cp.Finished("j-out");
  EXPECT_EQ(f["exit_code"], 3);
  EXPECT_EQ(f["signal"], 0);
  std::string out = cp.Output("j-out");
  EXPECT_EQ(f["output_bytes"].get<size_t>(), out.size());
  EXPECT_EQ(out.rfind("line-0\nline-1\n", 0), 0u);
  EXPECT_NE(out.find("line-999\nCVD=GPU-sim-host-a-1\n"), std::string::npos);
  EXPECT_GT(out.size(), 8192u);  // took several PUTs
  EXPECT_EQ(cp.FinishedReports("j-out"), 3);

  ASSERT_TRUE(WaitFor([&] { return cp.IsRunning("j-cancel") && cp.IsRunning("j-lost"); }, 5s));
  cp.Cancel("j-cancel", 5000);
  ASSERT_TRUE(WaitFor([&] { return cp.Acked("j-cancel"); }, 5s));
  EXPECT_EQ(cp.Finished("j-cancel")["signal"], SIGTERM);
  EXPECT_TRUE(cp.IsRunning("j-lost"));

  cp.Forget("j-lost");  // the next reply's may_run lacks it: the agent must stop it
  ASSERT_TRUE(WaitFor([&] { return cp.Acked("j-lost"); }, 5s));
  EXPECT_EQ(cp.Finished("j-lost")["signal"], SIGTERM);

  // Acked reports are not sent again (checked by the server on every heartbeat).
  int hb = cp.Heartbeats();
  ASSERT_TRUE(WaitFor([&] { return cp.Heartbeats() >= hb + 3; }, 5s));
  EXPECT_EQ(agent.Stop(), 0);
  EXPECT_EQ(cp.Registrations().size(), 1u);
  EXPECT_EQ(cp.Violations(), std::vector<std::string>{});
}

// The size of the file at `path`, -1 when there is none.
int64_t FileSize(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

// The node keeps at most max_output bytes of a job's output (plus what the job prints within one
// turn of the agent's loop): past it the file is cut to its first bytes and a note, whatever the
// job goes on printing, and that is what is uploaded and reported. Once the control plane has
// acked a finished job, its output file leaves the node.
TEST(AgentLoop, OutputPastTheCapIsDroppedAndAckedOutputLeavesTheNode) {
  TempDir dir;
  FakeControlPlane cp;
  ASSERT_GT(cp.port(), 0);
  cp.AckAfter(2);
  constexpr int64_t kCap = 16384;
  // What the job prints in one turn of the agent's loop: tens of ms at the shell's ~20 MB/s here
  // (under 1 MB), up to 4 MiB on a loaded machine. The job prints five times that.
  constexpr int64_t kSlack = 4 << 20;
  AgentThread agent(cp.url(), dir, "", [](AgentOptions& o) { o.max_output_bytes = kCap; });
  ASSERT_TRUE(WaitFor([&] { return cp.Heartbeats() >= 1; }, 5s));
  // 20 MB, 40 bytes a line, then a pause while the job still runs, then one more line.
  cp.Start("loud",
           Sh("i=0; while [ $i -lt 500000 ]; do echo 012345678901234567890123456789012345678; "
              "i=$((i+1)); done; sleep 2; echo late"));
  cp.Start("quiet", Sh("echo small"));
  const std::string loud = dir.path() + "/jobs/loud.out", quiet = dir.path() + "/jobs/quiet.out";
  int64_t largest = 0;
  // Printing done: the file is cut to the cap exactly, and stays so while the job sleeps.
  ASSERT_TRUE(WaitFor(
      [&] {
        const int64_t size = FileSize(loud);
        largest = std::max(largest, size);
        return size == kCap && cp.Output("loud").size() > 0;
      },
      30s))
      << "loud.out holds " << FileSize(loud) << " bytes, the cap is " << kCap;
  EXPECT_LE(largest, kCap + kSlack);
  ASSERT_TRUE(WaitFor(
      [&] {
        largest = std::max(largest, FileSize(loud));
        return cp.Acked("loud");
      },
      30s));
  EXPECT_LE(largest, kCap + kSlack);
  const std::string out = cp.Output("loud");
  EXPECT_EQ(cp.Finished("loud")["output_bytes"], kCap);
  EXPECT_EQ(out.size(), static_cast<size_t>(kCap));
  EXPECT_EQ(out.rfind("012345678901234567890123456789012345678\n0123", 0), 0u);
  EXPECT_NE(out.find("tessera-agent: output cut at 16384 bytes"), std::string::npos)
      << out.substr(out.size() - 200);
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(out.find("late"), std::string::npos);
  // Acked: the node keeps neither file.
  EXPECT_TRUE(WaitFor([&] { return FileSize(loud) < 0; }, 5s)) << "loud.out is still on the node";
  ASSERT_TRUE(cp.Acked("quiet"));
  EXPECT_EQ(cp.Output("quiet"), "small\n");
  EXPECT_TRUE(WaitFor([&] { return FileSize(quiet) < 0; }, 5s)) << "quiet.out is still on the node";
  EXPECT_EQ(agent.Stop(), 0);
  EXPECT_EQ(cp.Violations(), std::vector<std::string>{});
}

// Telemetry on a node whose devices come from NVML (the stand-in library: device 0 is 37% busy
// and lists one compute process, the pid in FAKE_NVML_PID): the heartbeat carries each device's
// utilization and memory, and the job whose process that is is active and uses its memory.
TEST(AgentLoop, ReportsNvmlTelemetryAndTheJobsOnTheDevices) {
  TempDir dir;
  FakeControlPlane cp;
  ASSERT_GT(cp.port(), 0);
  ::setenv("FAKE_NVML_PID", "1", 1);  // nobody's, until the job runs
  AgentThread agent(cp.url(), dir, FAKE_NVML_PATH);
  ASSERT_TRUE(WaitFor([&] { return cp.Heartbeats() >= 1; }, 5s));
  ASSERT_EQ(cp.Registrations()[0]["devices"].size(), 2u);
  cp.Start("j-gpu", Sh("exec sleep 30"),
           {{"devices", json::array({{{"index", 0}, {"uuid", "GPU-fake-agent-0"}, {"mig", ""}}})}});
  ASSERT_TRUE(WaitFor([&] { return cp.Pid("j-gpu") > 0; }, 5s));
  ::setenv("FAKE_NVML_PID", std::to_string(cp.Pid("j-gpu")).c_str(), 1);
  json hb;
  ASSERT_TRUE(WaitFor(
      [&] {
        hb = cp.LastHeartbeat();
        return hb.contains("running") && !hb["running"].empty() &&
               hb["running"][0].contains("gpu_memory_used_mib");
      },
      5s))
      << hb.dump();
  EXPECT_EQ(hb["running"][0]["active"], true) << hb.dump();  // a sleeping process on a busy device
  EXPECT_EQ(hb["running"][0]["gpu_memory_used_mib"], 3072);
  ASSERT_EQ(hb["devices"].size(), 2u) << hb.dump();
  EXPECT_EQ(hb["devices"][0]["util_pct"], 37);
  EXPECT_EQ(hb["devices"][0]["memory_used_mib"], 0);
  EXPECT_EQ(hb["devices"][1]["util_pct"], 0);
  ::unsetenv("FAKE_NVML_PID");
  EXPECT_EQ(agent.Stop(), 0);
}

// A share's region is the job's own file, and what it says there is a claim: a job that wrote
// 2^62 bytes "used" made every heartbeat of its node one the control plane refused (a number past
// what any device holds), and the node was lost with every other user's job on it (the red team).
// The agent reports no more than the share may hold, its devices no more than they have.
TEST(AgentLoop, WhatAJobWritesInItsRegionIsReportedWithinItsShare) {
  TempDir dir;
  FakeControlPlane cp;
  ASSERT_GT(cp.port(), 0);
  AgentThread agent(cp.url(), dir);
  ASSERT_TRUE(WaitFor([&] { return cp.Heartbeats() >= 1; }, 5s));
  cp.Start("j-share", Sh("exec sleep 30"),
           {{"devices", json::array({{{"index", 0}, {"uuid", "GPU-sim-host-a-0"}, {"mig", ""}}})},
            {"gpu_memory_limit_bytes", int64_t{1} << 30}});
  std::string path;  // the launcher's region directory is one of its own making under region_dir
  ASSERT_TRUE(WaitFor(
      [&] {
        std::error_code ec;
        for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path(), ec))
          if (e.path().filename() == "tessera-capgpu-j-share") path = e.path().string();
        return !path.empty();
      },
      5s));
  {
    capgpu::Region region;
    ASSERT_EQ(region.Open(path.c_str()), 0) << path;
    region.data().used[0] = uint64_t{1} << 62;  // as the job may write it
  }
  json hb;
  ASSERT_TRUE(WaitFor(
      [&] {
        hb = cp.LastHeartbeat();
        return hb.contains("running") && !hb["running"].empty() &&
               hb["running"][0].value("gpu_memory_used_mib", int64_t{0}) > 0 &&
               hb.contains("devices") && !hb["devices"].empty();
      },
      5s))
      << hb.dump();
  EXPECT_EQ(hb["running"][0]["gpu_memory_used_mib"], 1024) << hb.dump();
  EXPECT_LE(hb["devices"][0]["memory_used_mib"].get<int64_t>(), 81920) << hb.dump();
  // Two devices' counts that wrap past 2^64 together read as the whole share, not as 0.
  {
    capgpu::Region region;
    ASSERT_EQ(region.Open(path.c_str()), 0) << path;
    region.data().used[0] = uint64_t{1} << 63;
    region.data().used[1] = uint64_t{1} << 63;
  }
  const int seen = cp.Heartbeats();
  ASSERT_TRUE(WaitFor([&] { return cp.Heartbeats() >= seen + 2; }, 5s));
  EXPECT_EQ(cp.LastHeartbeat()["running"][0]["gpu_memory_used_mib"], 1024)
      << cp.LastHeartbeat().dump();
  EXPECT_EQ(agent.Stop(), 0);
}

// A heartbeat the control plane refuses for a reading (a number it will not take) is sent again
// without the readings: the node stays alive and its orders keep coming. Before, the agent sent
// the same refused body for good, its node was lost and its jobs were requeued while they still
// ran there (the red team, through a share's region).
TEST(AgentLoop, AHeartbeatRefusedForItsReadingsGoesAgainWithoutThem) {
  TempDir dir;
  FakeControlPlane cp;
  ASSERT_GT(cp.port(), 0);
  cp.RefuseReadings();
  AgentThread agent(cp.url(), dir);
  ASSERT_TRUE(WaitFor([&] { return cp.Heartbeats() >= 3; }, 5s));
  EXPECT_GT(cp.RefusedHeartbeats(), 0);
  cp.Start("j-on", Sh("exec sleep 30"));
  ASSERT_TRUE(WaitFor([&] { return cp.IsRunning("j-on"); }, 5s));
  EXPECT_FALSE(cp.LastHeartbeat().contains("devices")) << cp.LastHeartbeat().dump();
  EXPECT_EQ(agent.Stop(), 0);
}

// A node name every message would fail to encode (not UTF-8) or that cannot name files is
// refused at start with exit code 2, not at the first message.
TEST(AgentLoop, RefusesANodeNameItCannotSend) {
  TempDir dir;
  for (const std::string& bad :
       {std::string("bad\xff"), std::string("has space"), std::string("a/b")}) {
    AgentOptions o;
    o.node_name = bad;
    o.control_plane_url = "http://127.0.0.1:1";
    o.work_dir = dir.path() + "/work";
    o.simulate = "1xH100-80GB";
    o.cgroup_root = "";
    EXPECT_EQ(RunAgent(o), 2) << bad;
  }
}

// A control plane that does not serve the agent's protocol version (docs/agent-protocol.md,
// "Versions"): the agent logs the refusal, naming both versions, and exits 1 after one try
// instead of retrying forever.
TEST(AgentLoop, ExitsWhenItsProtocolVersionIsRefused) {
  TempDir dir;
  FakeControlPlane cp;
  ASSERT_GT(cp.port(), 0);
  const std::string refusal =
      "agent protocol 2 is not served by this server (it serves 3-4); upgrade the agent";
  cp.RefuseRegistrations(refusal);
  auto logged = std::make_shared<std::vector<std::string>>();
  auto log_mu = std::make_shared<std::mutex>();
  AgentThread agent(cp.url(), dir, "", [&](AgentOptions& o) {
    o.simulate = "1xH100-80GB";
    o.log = [logged, log_mu](const std::string& line) {
      std::lock_guard<std::mutex> lock(*log_mu);
      logged->push_back(line);
    };
  });
  const bool exited = WaitFor([&] { return agent.exited(); }, 10s);
  const int rc = agent.Stop();
  ASSERT_TRUE(exited) << "the agent kept retrying a refused protocol version";
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(cp.RefusedRegistrations(), 1);
  bool said = false;
  std::lock_guard<std::mutex> lock(*log_mu);
  for (const std::string& line : *logged) said = said || line.find(refusal) != std::string::npos;
  EXPECT_TRUE(said) << "the refusal was not logged";
}

TEST(AgentLoop, KeepsJobsRunningWhileTheControlPlaneIsDown) {
  TempDir dir;
  auto cp = std::make_unique<FakeControlPlane>();
  int port = cp->port();
  AgentThread agent(cp->url(), dir);
  cp->Start("long", Sh("echo before; sleep 1; echo after; exec sleep 30"));
  ASSERT_TRUE(
      WaitFor([&] { return cp->IsRunning("long") && cp->Output("long") == "before\n"; }, 5s));
  int pid = *cp->PidsSeen("long").begin();
  EXPECT_EQ(cp->Violations(), std::vector<std::string>{});
  cp.reset();  // the control plane goes away

  // An outage lasting several failed heartbeats (time passing is the point); the job writes
  // "after" meanwhile.
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(kill(pid, 0), 0) << "the job must survive the outage";

  // It comes back on the same port without the node's registration (lost state): the agent
  // gets 404 on heartbeat, registers again, and resumes, output continuing from its offset.
  FakeControlPlane back(port);
  ASSERT_EQ(back.port(), port);
  ASSERT_TRUE(WaitFor([&] { return back.IsRunning("long"); }, 5s));
  EXPECT_EQ(back.Registrations().size(), 1u);
  EXPECT_EQ(back.PidsSeen("long"), std::set<int>{pid});
  // The new server holds no earlier bytes, so the agent's offset 7 is refused (409) and
  // given up: nothing is sent twice.
  std::vector<std::string> v = back.Violations();
  for (const std::string& s : v)
    EXPECT_NE(s.find("output of long at offset 7"), std::string::npos) << s;
  EXPECT_EQ(agent.Stop(), 0);
  EXPECT_NE(kill(pid, 0), 0) << "stopping the agent stops its jobs";
  EXPECT_EQ(back.Finished("long")["signal"], SIGTERM) << "and reports how they ended";
}

}  // namespace
}  // namespace tessera::agent
