// The agent under control-plane faults (issue 33), against a fake control plane (cpp-httplib on
// 127.0.0.1): the server side of these protocol fields (docs/agent-protocol.md: `finished` in the
// registration, `epoch` in replies, `partition_stop_ms` in the register reply) is built
// separately, so the fake plays a server that speaks them. It can go away and come back on the
// same port with its state (an outage, a partition), answer with any epoch, and, like the real
// server, treat a job it started on the node that a registration lists neither running nor
// finished as lost and start it again.
//   - exit records on disk: a job that ended while the control plane was unreachable, its agent
//     then restarted, is reported in the new registration and its heartbeats until acked, its
//     record then deleted, and it does not run again;
//   - fencing: a reply with a lower epoch than the agent has seen is ignored (no start, no stop
//     through may_run), a higher one applied; a restarted agent remembers the epoch;
//   - partition self-stop: cut off for partition_stop_ms, the agent stops its jobs and reports
//     their exits when it reaches the control plane again.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "agent/agent.h"
#include "fake_control_plane.h"
#include "test_util.h"

namespace tessera::agent {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::ReadAll;
using testing::TempDir;
using testing::WaitFor;

class FaultyControlPlane : public testing::AgentReports {
 public:
  FaultyControlPlane() { Up(); }
  ~FaultyControlPlane() { Down(); }

  // Starts answering (again, on the same port, with the state it had).
  void Up() {
    server_ = std::make_unique<httplib::Server>();
    server_->Post("/v1/agent/register", [this](const httplib::Request& req,
                                               httplib::Response& res) {
      json body = json::parse(req.body, nullptr, false);
      std::lock_guard<std::mutex> lock(mu_);
      registrations_.push_back(body);
      if (old_server_ && body.contains("finished")) {  // as a server before the field
        res.status = 400;
        res.set_content(R"({"error": "register: unknown field 'finished'"})", "application/json");
        return;
      }
      std::set<std::string> listed;
      for (const json& r : body.value("running", json::array())) listed.insert(r["job"]);
      for (const json& f : body.value("finished", json::array())) {
        listed.insert(f["job"]);
        finished_[f["job"]] = f;
        placed_.erase(f["job"].get<std::string>());
      }
      // Started here, neither running nor finished: lost, so started again.
      for (const auto& [id, start] : placed_) {
        if (listed.count(id) != 0) continue;
        desired_[id] = start;
        requeued_.insert(id);  // a new run: an old run's exit does not undo it
      }
      json reply = {{"ok", true}, {"heartbeat_ms", 50}};
      if (epoch_ >= 0) reply["epoch"] = epoch_;
      if (partition_stop_ms_ > 0) reply["partition_stop_ms"] = partition_stop_ms_;
      res.set_content(reply.dump(), "application/json");
    });
    server_->Post("/v1/agent/heartbeat", [this](const httplib::Request& req,
                                                httplib::Response& res) {
      json body = json::parse(req.body, nullptr, false);
      std::lock_guard<std::mutex> lock(mu_);
      ++heartbeats_;
      for (const json& f : body["finished"]) {
        if (old_server_ && f.contains("stopped_by")) {  // as a server before the field
          res.status = 400;
          res.set_content(
              R"({"error": "heartbeat: a 'finished' entry: unknown field 'stopped_by'"})",
              "application/json");
          return;
        }
      }
      json reply = {{"start", json::array()}, {"cancel", json::array()}, {"ack", json::array()}};
      running_.clear();
      for (const json& r : body["running"]) {
        const std::string id = r["job"];
        running_[id] = r["pid"].get<int>();
        desired_.erase(id);
        requeued_.erase(id);
      }
      for (const json& f : body["finished"]) {
        const std::string id = f["job"];
        if (acked_.count(id) != 0) violations_.push_back("job " + id + " reported after its ack");
        finished_[id] = f;
        if (requeued_.count(id) == 0) {
          desired_.erase(id);
          placed_.erase(id);
        }
        if (++finished_reports_[id] >= ack_after_) {
          reply["ack"].push_back(id);
          acked_.insert(id);
        }
      }
      // Starts are repeated until the agent reports the job (as the real server does).
      for (const auto& [id, start] : desired_) {
        reply["start"].push_back(start);
        placed_[id] = start;
        requeued_.erase(id);  // out: the next exit reported is this run's
      }
      json may = json::array();
      for (const auto& [id, start] : placed_) {
        if (forgotten_.count(id) == 0) may.push_back(id);
      }
      reply["may_run"] = may;
      if (epoch_ >= 0) reply["epoch"] = epoch_;
      res.set_content(reply.dump(), "application/json");
    });
    if (port_ < 0) {
      port_ = server_->bind_to_any_port("127.0.0.1");
    } else {
      EXPECT_TRUE(WaitFor([&] { return server_->bind_to_port("127.0.0.1", port_); }, 10s, 50ms));
    }
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    WaitFor([this] { return server_->is_running(); }, 10s, 1ms);
  }
  // Stops answering: connections are refused (an outage, a partition).
  void Down() {
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
    server_.reset();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  void Start(const std::string& id, std::vector<std::string> command) {
    std::lock_guard<std::mutex> lock(mu_);
    json s = {{"job", id},        {"command", command}, {"env", json::object()},
              {"cpu_milli", 100}, {"memory_mib", 64},   {"devices", json::array()}};
    if (geteuid() == 0) s["run_as"] = "nobody";
    desired_[id] = s;
  }
  void Forget(const std::string& id) {  // left out of may_run from now on
    std::lock_guard<std::mutex> lock(mu_);
    forgotten_.insert(id);
  }
  void SetEpoch(int64_t e) {
    std::lock_guard<std::mutex> lock(mu_);
    epoch_ = e;
  }
  void SetPartitionStopMs(int64_t ms) {
    std::lock_guard<std::mutex> lock(mu_);
    partition_stop_ms_ = ms;
  }
  // Refuses a registration with `finished` and a heartbeat's `finished` entry with `stopped_by`
  // (400, unknown field), as a server before those fields.
  void BeOld() {
    std::lock_guard<std::mutex> lock(mu_);
    old_server_ = true;
  }

 private:
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = -1;
  int64_t epoch_ = -1;  // -1: replies carry none
  int64_t partition_stop_ms_ = 0;
  bool old_server_ = false;
  std::map<std::string, json> desired_;  // starts to send until the job is reported
  std::map<std::string, json> placed_;   // started on the node, not reported finished
  std::set<std::string> forgotten_;
  std::set<std::string> requeued_;  // started again as lost by a registration
};

// RunAgent on a thread with its log kept, stopped and joined on destruction.
class Agent {
 public:
  Agent(const std::string& url, const std::string& dir) {
    options_ = testing::TestAgentOptions(url, dir, "host-f");
    options_.simulate = "1xH100-80GB";
    options_.request_timeout_ms = 500;
    options_.stop = &stop_;
    options_.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      log_.push_back(line);
    };
    thread_ = std::thread([this] { rc_ = RunAgent(options_); });
  }
  ~Agent() { Stop(); }
  int Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return rc_;
  }
  // Log lines containing every one of `words`.
  std::vector<std::string> Logged(const std::vector<std::string>& words) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    for (const std::string& line : log_) {
      bool all = true;
      for (const std::string& w : words) all = all && line.find(w) != std::string::npos;
      if (all) out.push_back(line);
    }
    return out;
  }

 private:
  AgentOptions options_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  int rc_ = -1;
  std::mutex mu_;
  std::vector<std::string> log_;
};

std::vector<std::string> Sh(const std::string& script) { return {"/bin/sh", "-c", script}; }

bool Exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

// A job ends while the control plane is unreachable, and its agent is stopped before it could
// report it (as it would be by a crash or a reboot). The restarted agent reports the exit from
// its record on disk in its registration (so the control plane does not take the job for lost
// and start it again) and in its heartbeats until acked, then deletes the record.
TEST(AgentFaults, AnExitRecordedOnDiskIsReportedAfterARestartAndTheJobDoesNotRunAgain) {
  TempDir dir;
  FaultyControlPlane cp;
  const std::string marker = dir.path() + "/runs", go = dir.path() + "/go";
  // A root agent runs the job as nobody: it must reach both files.
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  testing::WriteAll(marker, "");
  ASSERT_EQ(chmod(marker.c_str(), 0666), 0);
  cp.Start("once", Sh("echo ran >> " + marker + "; while [ ! -e " + go +
                      " ]; do sleep 0.02; done; exit 4"));
  int pid = 0;
  {
    Agent agent(cp.url(), dir.path());
    ASSERT_TRUE(WaitFor([&] { return (pid = cp.Pid("once")) > 0; }, 10s));
    cp.Down();
    std::this_thread::sleep_for(300ms);  // it runs this long at least (its run_ms)
    testing::WriteAll(go, "");
    // Reaped by the agent (a zombie still answers kill 0): its exit is recorded.
    ASSERT_TRUE(WaitFor([&] { return kill(pid, 0) != 0; }, 10s));
    agent.Stop();  // the control plane is still down: nothing reported
  }
  EXPECT_TRUE(cp.Finished("once").is_null()) << "reported before the restart";
  cp.AckAfter(2);  // heartbeats repeat it until acked
  cp.Up();
  Agent agent(cp.url(), dir.path());
  ASSERT_TRUE(WaitFor([&] { return cp.Acked("once"); }, 10s))
      << cp.Registrations().back().dump() << "\n"
      << testing::Joined(agent.Logged({}));
  std::vector<json> regs = cp.Registrations();
  ASSERT_GE(regs.size(), 2u);
  const json& reg = regs.back();
  const json fin = reg.value("finished", json::array());
  EXPECT_EQ(fin.size(), 1u) << reg.dump();
  if (fin.size() == 1) {
    EXPECT_EQ(fin[0]["job"], "once");
    EXPECT_EQ(fin[0]["exit_code"], 4);
    EXPECT_EQ(fin[0]["signal"], 0);
    // How long it ran, kept on disk with the exit across the restart.
    EXPECT_GE(fin[0].value("run_ms", -1), 300) << fin[0].dump();
  }
  EXPECT_EQ(cp.FinishedReports("once"), 2);
  EXPECT_EQ(cp.Finished("once")["exit_code"], 4);
  // Acked: the record leaves the node.
  EXPECT_TRUE(WaitFor([&] { return !Exists(dir.path() + "/jobs/exits/once.json"); }, 5s));
  // Nothing more happens over a few heartbeats: the job is not run again.
  const int hb = cp.Heartbeats();
  ASSERT_TRUE(WaitFor([&] { return cp.Heartbeats() >= hb + 5; }, 5s));
  EXPECT_EQ(ReadAll(marker), "ran\n") << "the job ran again";
  EXPECT_EQ(agent.Stop(), 0);
  EXPECT_EQ(cp.Violations(), std::vector<std::string>{});
}

// A server that does not know the registration's `finished` field (400, unknown field) still
// registers the agent: it registers again without the field and reports the exits in its
// heartbeats, as before the field, rather than retrying the refused body forever.
TEST(AgentFaults, AServerWithoutFinishedInRegistrationGetsTheExitsInHeartbeats) {
  TempDir dir;
  FaultyControlPlane cp;
  cp.BeOld();
  ASSERT_EQ(mkdir((dir.path() + "/jobs").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((dir.path() + "/jobs/exits").c_str(), 0700), 0);
  testing::WriteAll(dir.path() + "/jobs/exits/old.json",
                    R"({"job": "old", "exit_code": 2, "signal": 0, "output_bytes": 0})");
  Agent agent(cp.url(), dir.path());
  ASSERT_TRUE(WaitFor([&] { return cp.Acked("old"); }, 10s)) << cp.Registrations().size();
  EXPECT_EQ(cp.Finished("old")["exit_code"], 2);
  EXPECT_FALSE(cp.Finished("old").contains("run_ms"));  // its record says nothing of it
  EXPECT_EQ(cp.Registrations().size(), 2u);
  EXPECT_EQ(agent.Stop(), 0);
}

// A corrupt record is named in the log and skipped; the agent runs on.
TEST(AgentFaults, ACorruptExitRecordIsLoggedAndSkipped) {
  TempDir dir;
  FaultyControlPlane cp;
  ASSERT_EQ(mkdir((dir.path() + "/jobs").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((dir.path() + "/jobs/exits").c_str(), 0700), 0);
  testing::WriteAll(dir.path() + "/jobs/exits/bad.json", "{\"job\": \"bad\", \"exit_co");
  Agent agent(cp.url(), dir.path());
  ASSERT_TRUE(WaitFor([&] { return cp.Heartbeats() >= 2; }, 10s));
  EXPECT_EQ(agent.Logged({"bad.json"}).size(), 1u);
  EXPECT_TRUE(cp.Finished("bad").is_null());
  EXPECT_EQ(agent.Stop(), 0);
}

// A reply from a leader older than one the agent has heard from (a resumed, deposed leader) is
// ignored: its may_run, which omits the running job, stops nothing, and its start starts
// nothing. A reply with a higher epoch is applied. The epoch outlives the agent.
TEST(AgentFaults, AReplyWithALowerEpochIsIgnoredAndAHigherOneApplied) {
  TempDir dir;
  FaultyControlPlane cp;
  cp.SetEpoch(5);
  auto agent = std::make_unique<Agent>(cp.url(), dir.path());
  cp.Start("keep", Sh("exec sleep 30"));
  int pid = 0;
  ASSERT_TRUE(WaitFor([&] { return (pid = cp.Pid("keep")) > 0; }, 10s));
  cp.SetEpoch(4);
  cp.Forget("keep");
  cp.Start("new", Sh("exec sleep 30"));
  // Several stale replies go by (time passing is the point: nothing may happen meanwhile).
  int hb = cp.Heartbeats();
  ASSERT_TRUE(WaitFor([&] { return cp.Heartbeats() >= hb + 5; }, 10s));
  EXPECT_EQ(kill(pid, 0), 0) << "a stale reply's may_run stopped the job";
  EXPECT_EQ(cp.Pid("new"), 0) << "a stale reply's start was carried out";
  EXPECT_TRUE(cp.Finished("keep").is_null());
  EXPECT_EQ(agent->Logged({"epoch 4", "5"}).size(), 1u) << "one warning per change";

  cp.SetEpoch(6);  // a newer leader: its orders apply
  ASSERT_TRUE(WaitFor([&] { return cp.Pid("new") > 0; }, 10s));
  ASSERT_TRUE(WaitFor([&] { return cp.Acked("keep"); }, 10s));
  EXPECT_EQ(cp.Finished("keep")["signal"], SIGTERM);
  EXPECT_EQ(agent->Stop(), 0);
  agent.reset();

  // A restarted agent remembers epoch 6: an epoch-5 server does not register it.
  cp.SetEpoch(5);
  const size_t regs = cp.Registrations().size();
  hb = cp.Heartbeats();
  agent = std::make_unique<Agent>(cp.url(), dir.path());
  ASSERT_TRUE(WaitFor([&] { return cp.Registrations().size() >= regs + 2; }, 10s));
  EXPECT_EQ(cp.Heartbeats(), hb) << "registered with a stale leader";
  cp.SetEpoch(6);
  ASSERT_TRUE(WaitFor([&] { return cp.Heartbeats() > hb; }, 10s));
  EXPECT_EQ(agent->Stop(), 0);
}

// With partition_stop_ms set, an agent that reaches no server for that long stops its jobs
// itself (before the leader, which waits that long plus a margin, requeues them), and reports
// their exits once it reaches the control plane again.
TEST(AgentFaults, ACutOffAgentStopsItsJobsAfterPartitionStopMsAndReportsThemLater) {
  TempDir dir;
  FaultyControlPlane cp;
  cp.SetPartitionStopMs(1000);
  Agent agent(cp.url(), dir.path());
  cp.Start("p1", Sh("exec sleep 30"));
  int pid = 0;
  ASSERT_TRUE(WaitFor([&] { return (pid = cp.Pid("p1")) > 0; }, 10s));
  const auto cut = std::chrono::steady_clock::now();
  cp.Down();
  ASSERT_TRUE(WaitFor([&] { return kill(pid, 0) != 0; }, 10s)) << "the job kept running";
  const auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - cut);
  // Its last good reply came at most a heartbeat (50 ms) before the cut.
  EXPECT_GE(took.count(), 900);
  EXPECT_LE(took.count(), 5000);  // SIGTERM ends sleep at once; slack for a loaded machine
  EXPECT_EQ(agent.Logged({"partition_stop_ms"}).size(), 1u);
  cp.Up();
  ASSERT_TRUE(WaitFor([&] { return cp.Acked("p1"); }, 10s));
  EXPECT_EQ(cp.Finished("p1")["signal"], SIGTERM);
  // Why it ended: the leader requeues it (as for a lost node) rather than take it for the job's
  // own end (the soak's exit-143 failures).
  EXPECT_EQ(cp.Finished("p1").value("stopped_by", ""), "partition") << cp.Finished("p1").dump();
  EXPECT_EQ(agent.Stop(), 0);
  EXPECT_EQ(cp.Violations(), std::vector<std::string>{});
}

// The reason is in the exit record on disk: an agent restarted while still cut off reports the
// job as stopped for the partition in its registration. A job that ended on its own is not.
TEST(AgentFaults, APartitionStopOutlivesARestartOfTheAgent) {
  TempDir dir;
  FaultyControlPlane cp;
  cp.SetPartitionStopMs(1000);
  auto agent = std::make_unique<Agent>(cp.url(), dir.path());
  cp.Start("p2", Sh("exec sleep 30"));
  cp.Start("own", Sh("exit 3"));
  int pid = 0;
  ASSERT_TRUE(WaitFor([&] { return (pid = cp.Pid("p2")) > 0 && cp.Acked("own"); }, 10s));
  EXPECT_FALSE(cp.Finished("own").contains("stopped_by")) << cp.Finished("own").dump();
  cp.Down();
  ASSERT_TRUE(WaitFor([&] { return kill(pid, 0) != 0; }, 10s)) << "the job kept running";
  EXPECT_EQ(agent->Stop(), 0);  // restarted before it could report the exit
  agent.reset();
  const std::string record = ReadAll(dir.path() + "/jobs/exits/p2.json");
  EXPECT_NE(record.find("\"stopped_by\":\"partition\""), std::string::npos) << record;
  cp.Up();
  agent = std::make_unique<Agent>(cp.url(), dir.path());
  ASSERT_TRUE(WaitFor([&] { return cp.Acked("p2"); }, 10s));
  const json reg = cp.Registrations().back();
  ASSERT_EQ(reg.value("finished", json::array()).size(), 1u) << reg.dump();
  EXPECT_EQ(reg["finished"][0].value("stopped_by", ""), "partition") << reg.dump();
  EXPECT_EQ(agent->Stop(), 0);
}

// An agent stopped by its operator (SIGTERM: an upgrade, a reboot) stops its jobs and reports
// them in its last heartbeat saying why (`stopped_by: shutdown`), so that the leader requeues
// them (or ends them lost) rather than take the signal for their own failure. A job that ended on
// its own before is reported as it ended.
TEST(AgentFaults, AStoppedAgentReportsTheJobsItStoppedAsStoppedForTheShutdown) {
  TempDir dir;
  FaultyControlPlane cp;
  Agent agent(cp.url(), dir.path());
  cp.Start("s1", Sh("exec sleep 30"));
  cp.Start("own", Sh("exit 3"));
  int pid = 0;
  ASSERT_TRUE(WaitFor([&] { return (pid = cp.Pid("s1")) > 0 && cp.Acked("own"); }, 10s));
  EXPECT_EQ(agent.Stop(), 0);
  EXPECT_NE(kill(pid, 0), 0) << "the job outlived its agent";
  EXPECT_EQ(cp.Finished("s1").value("stopped_by", ""), "shutdown") << cp.Finished("s1").dump();
  EXPECT_EQ(cp.Finished("s1")["signal"], SIGTERM) << cp.Finished("s1").dump();
  EXPECT_FALSE(cp.Finished("own").contains("stopped_by")) << cp.Finished("own").dump();
  EXPECT_EQ(cp.Violations(), std::vector<std::string>{});
}

// A server from before `stopped_by` refuses a heartbeat that carries it (400, unknown field):
// the agent reports its exits without the field from then on, rather than retry the refused
// body forever (that server takes the exit for the job's end, as before the field).
TEST(AgentFaults, AServerWithoutStoppedByGetsTheExitWithoutIt) {
  TempDir dir;
  FaultyControlPlane cp;
  cp.BeOld();
  cp.SetPartitionStopMs(1000);
  Agent agent(cp.url(), dir.path());
  cp.Start("p3", Sh("exec sleep 30"));
  int pid = 0;
  ASSERT_TRUE(WaitFor([&] { return (pid = cp.Pid("p3")) > 0; }, 10s));
  cp.Down();
  ASSERT_TRUE(WaitFor([&] { return kill(pid, 0) != 0; }, 10s)) << "the job kept running";
  cp.Up();
  ASSERT_TRUE(WaitFor([&] { return cp.Acked("p3"); }, 10s))
      << testing::Joined(agent.Logged({"stopped_by"}));
  EXPECT_FALSE(cp.Finished("p3").contains("stopped_by"));
  EXPECT_EQ(agent.Logged({"stopped_by"}).size(), 1u) << "said once";
  EXPECT_EQ(agent.Stop(), 0);
}

}  // namespace
}  // namespace tessera::agent
