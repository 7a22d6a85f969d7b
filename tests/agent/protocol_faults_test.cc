// A fault-injection harness for the agent protocol (issue 33): real node agents (RunAgent, in
// threads, running real job processes on simulated devices) talk HTTP to an in-process gateway
// that hands their registrations and heartbeats to a real api::Engine (SQLite store) and, on a
// seeded schedule, drops requests, drops replies (the agent times out), delays them, delivers
// them twice, replays an old heartbeat late, stalls the leader (no answers, no passes) and steps
// its wall clock forward, up to 60 s (beyond the release time). Throughout, the engine's own
// invariants must hold after every pass; from the agents' side (each job's own process writes when
// it started, on which device, and when it ended), no device ever runs two jobs at once and no job
// runs twice at once; at the end, with the faults over, every job is terminal, and none failed (the
// jobs only fail when stopped).
//
// TESSERA_FAULT_SEED=N picks the seed (default 1), TESSERA_FAULT_SECONDS=S how long faults go on
// (default 12). The seed is printed, and named in every failure. The schedule of faults follows
// the seed; the threads' timing does not, so a rerun with the seed is close, not identical.
#include <gtest/gtest.h>
#include <httplib.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../support/engine_fixture.h"
#include "agent/agent.h"
#include "api/engine.h"

namespace tessera::api {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

constexpr int kRequestTimeoutMs = 300;  // the agents'; a dropped message costs them this

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoll(v) : fallback;
}

int64_t WallNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Jobs never run as root: a root agent runs them as nobody (as the other agent tests do).
std::string JobAccount() {
  if (geteuid() == 0) return "nobody";
  const passwd* pw = getpwuid(geteuid());
  return pw != nullptr ? pw->pw_name : "nobody";
}

std::string Config() {
  return R"(
heartbeat_timeout: 2s
heartbeat_interval: 1s
partition_stop: 2s
identities:
  - {name: alice, role: user, groups: [research], token: alice-token-1, run_as: )" +
         JobAccount() + R"(}
  - {name: admin, role: admin, token: admin-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups: [{name: research}]
profiles: [{name: card, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}]
queues: [{name: q, profile: card, groups: [research], requeue_on_loss: true}]
)";
}

// The gateway between the agents and the engine, with the faults. Thread-safe.
class FaultyGateway {
 public:
  FaultyGateway(Engine* engine, const Identity& agent, uint64_t seed)
      : engine_(engine), agent_(agent), rng_(seed) {
    server_.new_task_queue = [] { return new httplib::ThreadPool(32); };
    server_.Post("/v1/agent/register",
                 [this](const httplib::Request& q, httplib::Response& r) { Serve(q, r, true); });
    server_.Post("/v1/agent/heartbeat",
                 [this](const httplib::Request& q, httplib::Response& r) { Serve(q, r, false); });
    // Output is not what this harness is about: every upload is taken.
    server_.Put(R"(/v1/agent/jobs/.*/output)",
                [](const httplib::Request&, httplib::Response& r) { r.status = 200; });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(1ms);
  }
  ~FaultyGateway() {
    Stall(false);
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void Faults(bool on) { faults_.store(on); }
  // A stalled leader answers nothing until it resumes (requests wait, as on a stopped process).
  void Stall(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    stalled_ = on;
    resumed_.notify_all();
  }
  std::map<std::string, int> Counts() {
    std::lock_guard<std::mutex> lock(mu_);
    return counts_;
  }

 private:
  // What happens to one request, drawn from the seeded generator.
  enum class Fault { kNone, kDropRequest, kDropReply, kDelay, kLateReply, kTwice, kReplay };

  Fault Draw(int* delay_ms) {
    std::lock_guard<std::mutex> lock(mu_);
    const int roll = std::uniform_int_distribution<int>(0, 99)(rng_);
    *delay_ms = std::uniform_int_distribution<int>(20, kRequestTimeoutMs * 4 / 5)(rng_);
    if (!faults_.load()) return Fault::kNone;
    Fault f = roll < 5    ? Fault::kDropRequest
              : roll < 10 ? Fault::kDropReply
              : roll < 18 ? Fault::kDelay
              : roll < 22 ? Fault::kLateReply
              : roll < 27 ? Fault::kTwice
              : roll < 30 ? Fault::kReplay
                          : Fault::kNone;
    const char* names[] = {"none",       "drop_request", "drop_reply", "delay",
                           "late_reply", "twice",        "replay"};
    ++counts_[names[static_cast<int>(f)]];
    return f;
  }

  void WaitIfStalled() {
    std::unique_lock<std::mutex> lock(mu_);
    resumed_.wait(lock, [this] { return !stalled_; });
  }

  Result<Json> Call(bool registration, const Json& body) {
    return registration ? engine_->agents().RegisterNode(agent_, body)
                        : engine_->agents().Heartbeat(agent_, body);
  }

  void Serve(const httplib::Request& q, httplib::Response& r, bool registration) {
    WaitIfStalled();
    Json body = Json::parse(q.body, nullptr, false);
    int delay_ms = 0;
    const Fault f = Draw(&delay_ms);
    const auto lost = std::chrono::milliseconds(kRequestTimeoutMs + 100);
    if (f == Fault::kDropRequest) {
      std::this_thread::sleep_for(lost);  // never reaches the engine; the agent gives up
      r.status = 503;
      return;
    }
    if (f == Fault::kDelay) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    if (f == Fault::kReplay && !registration) {
      // An older heartbeat of this node delivered again, late; its reply goes nowhere.
      Json old;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = last_.find(body.value("node", ""));
        if (it != last_.end()) old = it->second;
      }
      if (old.is_object()) (void)Call(false, old);
    }
    Result<Json> res = Call(registration, body);
    if (f == Fault::kTwice) res = Call(registration, body);  // the same request delivered twice
    if (!registration) {
      std::lock_guard<std::mutex> lock(mu_);
      Json& keep = last_[body.value("node", "")];
      // Kept now and then, so that a replay is some heartbeats old.
      if (!keep.is_object() || std::uniform_int_distribution<int>(0, 9)(rng_) == 0) keep = body;
    }
    if (f == Fault::kDropReply) {
      std::this_thread::sleep_for(lost);  // done by the engine; the answer never arrives
      r.status = 503;
      return;
    }
    if (f == Fault::kLateReply) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    WaitIfStalled();
    if (!res.ok()) {
      const StatusCode c = res.status().code();
      r.status = c == StatusCode::kNotFound ? 404 : c == StatusCode::kInvalidArgument ? 400 : 503;
      r.set_content(Json{{"error", res.status().message()}}.dump(), "application/json");
      return;
    }
    Json out = *res;
    if (registration) out["heartbeat_ms"] = 100;  // the agents' period, real time
    out.erase("seq");                             // no order watch: heartbeats only
    r.set_content(out.dump(), "application/json");
  }

  Engine* engine_;
  const Identity& agent_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<bool> faults_{true};
  std::mutex mu_;
  std::condition_variable resumed_;
  bool stalled_ = false;
  std::mt19937_64 rng_;
  std::map<std::string, Json> last_;
  std::map<std::string, int> counts_;
};

// A node agent (RunAgent) on a thread, stopped and joined on destruction.
class NodeAgent {
 public:
  NodeAgent(const std::string& url, const std::string& node, const std::string& dir) {
    options_.control_plane_url = url;
    options_.token = "agent-token-1";
    options_.node_name = node;
    options_.simulate = "2xH100-80GB";
    options_.work_dir = dir + "/work-" + node;
    options_.cgroup_root = "";
    options_.region_dir = dir;
    options_.poll_ms = 10;
    options_.default_heartbeat_ms = 100;
    options_.max_backoff_ms = 200;
    options_.request_timeout_ms = kRequestTimeoutMs;
    options_.stop_grace_ms = 1000;
    options_.stop = &stop_;
    options_.handle_signals = false;
    options_.log = [](const std::string&) {};
    thread_ = std::thread([this] { agent::RunAgent(options_); });
  }
  ~NodeAgent() {
    stop_ = true;
    thread_.join();
  }

 private:
  agent::AgentOptions options_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// One run of a job as its own process recorded it.
struct JobRun {
  std::string job, device, file;
  int64_t pid = 0, start_ns = 0, end_ns = 0;  // end 0: no end recorded
};

std::vector<JobRun> Runs(const std::string& dir) {
  std::vector<JobRun> runs;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
    std::ifstream in(f.path());
    JobRun r;
    r.file = f.path().filename();
    std::string word;
    while (in >> word) {
      if (word == "start") {
        in >> r.job >> r.pid >> r.device >> r.start_ns;
      } else if (word == "end") {
        in >> r.end_ns;
      }
    }
    if (r.start_ns > 0) runs.push_back(r);
  }
  return runs;
}

// Overlaps of runs on one device or of one job, judged by the processes' own times. A run with
// no end recorded ends `now_ns` if its process is gone (killed past its trap), else is running.
std::vector<std::string> Overlaps(std::vector<JobRun> runs, int64_t now_ns) {
  for (JobRun& r : runs) {
    if (r.end_ns == 0) r.end_ns = now_ns;
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < runs.size(); ++i) {
    for (size_t k = i + 1; k < runs.size(); ++k) {
      const JobRun& a = runs[i];
      const JobRun& b = runs[k];
      const bool overlap = a.start_ns < b.end_ns && b.start_ns < a.end_ns;
      if (!overlap) continue;
      if (a.device == b.device)
        out.push_back("device " + a.device + " ran " + a.job + " (pid " + std::to_string(a.pid) +
                      ") and " + b.job + " (pid " + std::to_string(b.pid) + ") at once");
      if (a.job == b.job)
        out.push_back("job " + a.job + " ran twice at once (pids " + std::to_string(a.pid) + ", " +
                      std::to_string(b.pid) + ")");
    }
  }
  return out;
}

class ProtocolFaultsTest : public testing::EngineFixture {};

TEST_F(ProtocolFaultsTest, InvariantsHoldUnderDroppedDelayedDuplicatedMessagesStallsAndJumps) {
  const uint64_t seed = static_cast<uint64_t>(EnvInt("TESSERA_FAULT_SEED", 1));
  const int64_t fault_ms = EnvInt("TESSERA_FAULT_SECONDS", 12) * 1000;
  SCOPED_TRACE("TESSERA_FAULT_SEED=" + std::to_string(seed));
  std::printf("[protocol-faults] seed %llu, %lld s of faults\n",
              static_cast<unsigned long long>(seed), static_cast<long long>(fault_ms / 1000));
  Start("protocol_faults", Config());
  const std::string records = dir_ + "/records";
  std::filesystem::create_directories(records);
  ::chmod(dir_.c_str(), 0755);
  ::chmod(records.c_str(), 0777);  // the jobs run as JobAccount()

  // The engine's wall clock follows real time, plus the jumps; its monotonic clock is real time.
  engine_->agents().SetMonotonicClockForTest([] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               SteadyClock::now().time_since_epoch())
        .count();
  });
  const auto t0 = SteadyClock::now();
  const int64_t base_ms = now_;
  std::atomic<int64_t> jumped_ms{0};
  auto elapsed_ms = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - t0).count();
  };
  auto sync_clock = [&] { now_.SetMs(base_ms + elapsed_ms() + jumped_ms.load()); };

  FaultyGateway gateway(engine_.get(), Who("agent"), seed);
  std::vector<std::unique_ptr<NodeAgent>> agents;
  for (const char* node : {"n1", "n2", "n3"})
    agents.push_back(std::make_unique<NodeAgent>(gateway.url(), node, dir_));

  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<std::string> ids, violations;
  int stalls = 0, jumps = 0;
  auto pass = [&] {
    sync_clock();
    Status st = engine_->Tick();
    if (st.ok()) st = engine_->RunCycle();
    if (st.ok()) st = engine_->CheckInvariants();
    if (!st.ok())
      violations.push_back("engine at " + std::to_string(elapsed_ms()) + " ms: " + st.ToString());
  };
  auto submit = [&] {
    // Runs 0.3-1.5 s; on SIGTERM writes its end and exits 143 (as a shell stopped would).
    const std::string script =
        "F=" + records + "/$TESSERA_JOB_ID.$$; echo \"start $TESSERA_JOB_ID $$ " +
        "$CUDA_VISIBLE_DEVICES $(date +%s%N)\" > $F; trap 'echo \"end $(date +%s%N)\" >> $F; " +
        "exit 143' TERM; i=0; while [ $i -lt " + std::to_string(uniform(3, 15)) +
        " ]; do sleep 0.1; i=$((i+1)); done; echo \"end $(date +%s%N)\" >> $F";
    auto r =
        engine_->Submit(Who("alice"), {{"queue", "q"}, {"command", {"/bin/sh", "-c", script}}});
    if (r.ok())
      ids.push_back((*r)["id"]);
    else
      violations.push_back("submit: " + r.status().ToString());
  };

  int64_t next_fault_ms = 1500;
  while (elapsed_ms() < fault_ms) {
    if (ids.size() < 60 && uniform(0, 2) == 0) submit();
    pass();
    if (elapsed_ms() >= next_fault_ms) {
      next_fault_ms = elapsed_ms() + uniform(1500, 3000);
      if (uniform(0, 1) == 0) {
        // The leader stalls: no pass, no answer (the agents' partition_stop is 2 s).
        const int ms = uniform(500, 3500);
        ++stalls;
        gateway.Stall(true);
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        gateway.Stall(false);
      } else {
        // Its wall clock jumps forward (an NTP step, a resumed VM), its monotonic clock does
        // not: no node is silent for it, even for jumps beyond the release time (partition_stop
        // 2 s + 10 s + 2 s), which released live nodes' jobs while they ran when the leader
        // judged silence on its wall clock.
        ++jumps;
        jumped_ms += uniform(1, 60) * 1000;
      }
    }
    std::this_thread::sleep_for(100ms);
  }

  // The faults end; everything must settle: every job terminal.
  gateway.Faults(false);
  const auto settle_until = SteadyClock::now() + 25s;
  auto terminal = [&] {
    for (const std::string& id : ids) {
      const std::string s = (*engine_->views().GetJob(Who("admin"), id))["state"];
      if (s != "succeeded" && s != "failed" && s != "cancelled" && s != "lost") return false;
    }
    return true;
  };
  while (!terminal() && SteadyClock::now() < settle_until) {
    pass();
    std::this_thread::sleep_for(100ms);
  }
  std::map<std::string, int> states;
  for (const std::string& id : ids) {
    Json j = *engine_->views().GetJob(Who("admin"), id);
    ++states[j["state"].get<std::string>()];
    if (j["state"] == "succeeded") continue;
    std::string history;
    auto events = engine_->views().Events(Who("admin"), 0, 1000, store::EventFilter{"", id, ""});
    if (events.ok()) {
      for (const auto& e : (*events)["events"])
        history += "\n  " + e.value("actor", "") + " " + e.value("kind", "") + " " +
                   e.value("reason", "") + " " + e["data"].dump();
    }
    ADD_FAILURE() << "job " << id << " is " << j["state"] << ": " << j.value("reason", "")
                  << history;
  }
  agents.clear();
  const std::vector<JobRun> runs = Runs(records);
  for (const std::string& v : Overlaps(runs, WallNs())) violations.push_back(v);
  for (const std::string& v : violations) ADD_FAILURE() << v;
  std::ostringstream summary;
  summary << "[protocol-faults] seed " << seed << ": " << ids.size() << " jobs, " << runs.size()
          << " runs, " << stalls << " leader stalls, " << jumps << " clock jumps (" << jumped_ms
          << " ms); faults:";
  for (const auto& [name, n] : gateway.Counts()) summary << " " << name << " " << n;
  summary << "; states:";
  for (const auto& [name, n] : states) summary << " " << name << " " << n;
  auto lost =
      engine_->views().Events(Who("admin"), 0, 100000, store::EventFilter{"node.lost", "", ""});
  summary << "; nodes lost " << (lost.ok() ? (*lost)["events"].size() : 0);
  std::printf("%s; %zu violations\n", summary.str().c_str(), violations.size());
}

}  // namespace
}  // namespace tessera::api
