// Fifty real node agents: one `tessera serve` (SQLite in a temporary directory) and 50 `tessera
// agent --simulate 1xH100-80GB` processes on this machine. All register; 100 short jobs are
// submitted and all succeed, spread over many nodes; no node is ever marked lost; and the server
// answers GET /v1/health within a second throughout (polled every 100 ms from another thread).
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../support/config_builder.h"
#include "../support/test_dir.h"
#include "proc.h"
#include "serve_fixture.h"

namespace tessera {
namespace {

using Json = nlohmann::json;

constexpr int kAgents = 50;
constexpr int kJobs = 100;

// A process's proportional share of resident memory in MiB (shared pages, such as the binary's
// code, split among the processes mapping them); VmRSS where smaps_rollup is missing; 0 when
// neither can be read.
double PssMiB(pid_t pid) {
  for (const auto& [file, key] :
       {std::pair<std::string, std::string>{"smaps_rollup", "Pss:"}, {"status", "VmRSS:"}}) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/" + file);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind(key, 0) == 0) return std::stod(line.substr(key.size())) / 1024.0;
    }
  }
  return 0;
}

// Polls GET /v1/health every 100 ms on its own connection until stopped; keeps the slowest
// answer and counts the ones that did not come (or were not 200).
class HealthProbe {
 public:
  explicit HealthProbe(int port) : client_("127.0.0.1", port) {
    client_.set_connection_timeout(std::chrono::seconds(5));
    client_.set_read_timeout(std::chrono::seconds(5));
    client_.set_keep_alive(true);
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        const auto t0 = std::chrono::steady_clock::now();
        auto r = client_.Get("/v1/health");
        const int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now() - t0)
                               .count();
        probes_.fetch_add(1);
        if (!r || r->status != 200) failures_.fetch_add(1);
        int64_t seen = slowest_ms_.load();
        while (ms > seen && !slowest_ms_.compare_exchange_weak(seen, ms)) {
        }
        // The probe's period (a sleep on purpose: it samples the server every 100 ms).
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }
  ~HealthProbe() { Stop(); }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  int64_t slowest_ms() const { return slowest_ms_.load(); }
  int probes() const { return probes_.load(); }
  int failures() const { return failures_.load(); }

 private:
  httplib::Client client_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> slowest_ms_{0};
  std::atomic<int> probes_{0};
  std::atomic<int> failures_{0};
  std::thread thread_;
};

class ManyAgentsTest : public testing::ServeFixture {
 protected:
  void SetUp() override {
    dir_ = tessera::testing::FreshTestDir("many_agents");
    WriteConfig(tessera::testing::ConfigBuilder()
                    .HeartbeatTimeout("10s")
                    .Cycle("200ms")
                    .Profile("card")
                    .Queue("batch", "card", {"research"}, "class: training")
                    .Yaml());
    wait_ms_ = 60000;
    StartServer();
  }
  void TearDown() override {
    StopAgents();
    server_.reset();
  }
  void StartAgent(int i) {
    char node[16];
    std::snprintf(node, sizeof node, "a%02d", i);
    ServeFixture::StartAgent(node);
  }
  // The events of a kind (admin: all of them), at most 1000.
  Json Events(const std::string& kind) { return ServeFixture::Events("kind=" + kind); }
  std::string SomeAgentLogs() {
    std::string s = "--- serve\n" + server_->Log();
    for (size_t i = 0; i < agents_.size() && i < 3; ++i)
      s += "\n--- agent " + std::to_string(i) + "\n" + agents_[i]->Log();
    return s;
  }
};

TEST_F(ManyAgentsTest, FiftyAgentsRunAHundredJobsWithNoNodeLostAndHealthWithinASecond) {
  const auto t0 = std::chrono::steady_clock::now();
  HealthProbe health(port_);
  for (int i = 0; i < kAgents; ++i) StartAgent(i);
  ASSERT_TRUE(WaitFor([&] { return ReadyNodes() == kAgents; }, 30000))
      << ReadyNodes() << " of " << kAgents << " nodes ready\n"
      << SomeAgentLogs();
  const double registered_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::vector<std::string> ids;
  for (int i = 0; i < kJobs; ++i) {
    Json r =
        Call("POST", "/v1/jobs",
             {{"queue", "batch"},
              {"name", "many-" + std::to_string(i)},
              {"command",
               {"sh", "-c", "echo \"$TESSERA_JOB_ID ran on $CUDA_VISIBLE_DEVICES\"; sleep 1"}}});
    ASSERT_TRUE(r.is_object() && r.contains("id")) << r.dump();
    ids.push_back(r["id"]);
  }
  const double submitted_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // All succeed: two waves of 50 (one card per node), each a second plus heartbeats.
  std::map<std::string, std::string> states;
  ASSERT_TRUE(WaitFor(
      [&] {
        Json j = Call("GET", "/v1/jobs?limit=1000", {}, "admin-token-1");
        if (!j.is_object()) return false;
        states.clear();
        for (const auto& job : j["jobs"]) states[job["id"]] = job["state"];
        return std::all_of(ids.begin(), ids.end(), [&](const std::string& id) {
          auto s = states.find(id);
          return s != states.end() && (s->second == "succeeded" || s->second == "failed" ||
                                       s->second == "cancelled" || s->second == "lost");
        });
      },
      60000))
      << SomeAgentLogs();
  const double done_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int succeeded = 0;
  for (const std::string& id : ids) {
    succeeded += states[id] == "succeeded";
    EXPECT_EQ(states[id], "succeeded") << id << ": " << Job(id).dump();
  }
  EXPECT_EQ(succeeded, kJobs);
  // Each job really ran, on its node, and its output came back.
  for (int i = 0; i < kJobs; i += 10) {
    EXPECT_NE(Output(ids[i]).find(ids[i] + " ran on GPU-sim-"), std::string::npos)
        << ids[i] << ": " << Output(ids[i]);
  }

  // Spread: one card per node, and 100 jobs submitted at once: nearly every node runs some.
  std::set<std::string> nodes;
  for (const auto& e : Events("job.running")) nodes.insert(e["data"].value("node", ""));
  // (At least half of them: a slow machine may submit slower than the first jobs end, and a
  // node freed early may then take several.)
  EXPECT_GE(static_cast<int>(nodes.size()), kAgents / 2)
      << "jobs ran on only " << nodes.size() << " nodes";

  // No node was ever marked lost, and every agent registered once (no re-registration after a
  // missed heartbeat).
  Json lost = Events("node.lost");
  EXPECT_TRUE(lost.empty()) << lost.dump();
  EXPECT_TRUE(Events("node.returned").empty());
  EXPECT_EQ(Events("node.registered").size(), static_cast<size_t>(kAgents));
  EXPECT_EQ(ReadyNodes(), kAgents);

  health.Stop();
  EXPECT_EQ(health.failures(), 0) << "of " << health.probes() << " health probes";
  EXPECT_LT(health.slowest_ms(), 1000) << "a GET /v1/health took " << health.slowest_ms() << " ms";
  EXPECT_GT(health.probes(), 10);

  double agents_pss = 0;
  for (const auto& a : agents_) agents_pss += PssMiB(a->pid());
  const double server_pss = PssMiB(server_->pid());
  EXPECT_LT(server_pss, 1024) << "tessera serve's memory";
  std::printf(
      "[many_agents] %d agents ready after %.1f s; %d jobs submitted by %.1f s, done by %.1f s, on "
      "%zu nodes; health: %d probes, slowest %lld ms; memory (PSS): serve %.0f MiB, agents %.0f "
      "MiB in all\n",
      kAgents, registered_s, kJobs, submitted_s, done_s, nodes.size(), health.probes(),
      static_cast<long long>(health.slowest_ms()), server_pss, agents_pss);
}

}  // namespace
}  // namespace tessera
