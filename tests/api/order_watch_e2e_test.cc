// Orders reach agents without waiting for a heartbeat: real `tessera serve` and `tessera agent
// --simulate` processes with a 10 s heartbeat interval. A job submitted, finished or cancelled
// between heartbeats is acted on within a second or two, through the agent's order watch (a long
// poll on GET /v1/agent/orders) and its prompt report of exits; with only the heartbeat it would
// take up to 10 s.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "proc.h"
#include "serve_fixture.h"
#include "test_dir.h"

namespace tessera {
namespace {

using testing::kTessera;
using testing::Proc;
using Clock = std::chrono::steady_clock;

const char* kConfig = R"(
heartbeat_interval: 10s
heartbeat_timeout: 30s
cancel_grace: 1s
identities:
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: admin, role: admin, token: admin-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups: [{name: research}]
profiles: [{name: train, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}]
queues: [{name: training, profile: train, groups: [research]}]
)";

class OrderWatchE2eTest : public testing::ServeFixture {
 protected:
  void SetUp() override {
    dir_ = tessera::testing::FreshTestDir("order-watch");
    std::ofstream(dir_ + "/config.yaml") << tessera::testing::WithJobAccounts(kConfig);
    StartServer();
    agent_ = std::make_unique<Proc>(
        std::vector<std::string>{
            kTessera, "agent", "--server", "http://127.0.0.1:" + std::to_string(port_),
            "--token-file", tessera::testing::TokenFile("agent-token-1"), "--node", "n1",
            "--simulate", "1xH100-80GB", "--work", dir_ + "/work", "--cgroup-root", ""},
        dir_ + "/agent.log");
    ASSERT_TRUE(WaitFor([&] {
      Json j = Call("GET", "/v1/nodes", {}, "admin-token-1");
      return j.is_object() && !j["nodes"].empty() && j["nodes"][0]["state"] == "ready";
    })) << agent_->Log();
    // Past the first heartbeat, so that the next one is about 10 s away.
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  }
  void TearDown() override {
    if (agent_) agent_->KillOnly(SIGTERM);
    agent_.reset();
    server_.reset();
  }
  // Milliseconds until the job reaches `state` (-1: not within 8 s).
  int64_t MsUntil(const std::string& id, const std::string& state, Clock::time_point from) {
    if (!WaitFor([&] { return State(id) == state; }, 8000)) return -1;
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - from).count();
  }

  std::unique_ptr<Proc> agent_;
};

TEST_F(OrderWatchE2eTest, StartsFinishesAndCancelsBetweenHeartbeats) {
  auto t0 = Clock::now();
  const std::string quick =
      Call("POST", "/v1/jobs", {{"queue", "training"}, {"command", {"true"}}})["id"];
  const int64_t done = MsUntil(quick, "succeeded", t0);
  ASSERT_GE(done, 0) << State(quick) << "\n" << agent_->Log();
  EXPECT_LT(done, 3000) << "started and reported only with a heartbeat";

  t0 = Clock::now();
  const std::string slow =
      Call("POST", "/v1/jobs", {{"queue", "training"}, {"command", {"sleep", "60"}}})["id"];
  const int64_t running = MsUntil(slow, "running", t0);
  ASSERT_GE(running, 0) << State(slow) << "\n" << agent_->Log();
  EXPECT_LT(running, 3000);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  t0 = Clock::now();
  Call("POST", "/v1/jobs/" + slow + "/cancel");
  const int64_t cancelled = MsUntil(slow, "cancelled", t0);
  ASSERT_GE(cancelled, 0) << State(slow) << "\n" << agent_->Log();
  EXPECT_LT(cancelled, 4000) << "the cancel waited for a heartbeat";
}

}  // namespace
}  // namespace tessera
