// Issue 33: a leader that stalled for 15 s took live nodes for lost when it resumed ("no heartbeat
// for 15s": its own stall) and killed and restarted their running jobs. Real processes: one
// `tessera serve` (SIGSTOP for 15 s, then SIGCONT) and two `tessera agent --simulate` with six
// running jobs. After the stall, no node is lost, no job is requeued or started again, and all six
// still run under their first start.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "proc.h"
#include "serve_fixture.h"
#include "test_dir.h"

namespace tessera {
namespace {

const char* kConfig = R"(
heartbeat_timeout: 10s
identities:
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: admin, role: admin, token: admin-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups: [{name: research}]
profiles: [{name: train, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}]
queues: [{name: training, profile: train, groups: [research], requeue_on_loss: true}]
)";

class LeaderStallE2eTest : public testing::ServeFixture {
 protected:
  void TearDown() override {
    if (server_) server_->Signal(SIGCONT);  // never leave it stopped
    StopAgents();
    server_.reset();
  }
};

TEST_F(LeaderStallE2eTest, AFifteenSecondStallWithSixRunningJobsKillsAndRestartsNone) {
  dir_ = tessera::testing::FreshTestDir("leader-stall");
  std::ofstream(dir_ + "/config.yaml") << tessera::testing::WithJobAccounts(kConfig);
  StartServer();
  StartAgent("n1", "3xH100-80GB");
  StartAgent("n2", "3xH100-80GB");
  ASSERT_TRUE(WaitFor([&] { return ReadyNodes() == 2; })) << server_->Log();
  std::vector<std::string> ids;
  for (int i = 0; i < 6; ++i) {
    Json r = Call("POST", "/v1/jobs", {{"queue", "training"}, {"command", {"sleep", "600"}}});
    ASSERT_TRUE(r.is_object() && r.contains("id")) << r.dump();
    ids.push_back(r["id"]);
  }
  for (const std::string& id : ids) {
    ASSERT_TRUE(WaitFor([&] { return State(id) == "running"; })) << Job(id).dump();
  }
  // The stall: the leader stopped for longer than the heartbeat timeout (time passing is what
  // this test is about), while the agents go on.
  server_->Signal(SIGSTOP);
  std::this_thread::sleep_for(std::chrono::seconds(15));
  const int64_t resumed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
  server_->Signal(SIGCONT);
  // Past the first heartbeats after it (the agents heartbeat every second), and past a cycle.
  ASSERT_TRUE(WaitFor([&] {
    for (const auto& n : Nodes()) {
      if (n.value("state", "") != "ready" || n.value("last_heartbeat_ms", int64_t{0}) < resumed_ms)
        return false;
    }
    return true;
  })) << Nodes().dump();
  std::this_thread::sleep_for(std::chrono::seconds(2));  // a few passes of the leader (the point)
  EXPECT_TRUE(Events("kind=node.lost").empty()) << Events("kind=node.lost").dump();
  EXPECT_TRUE(Events("kind=job.requeued").empty()) << Events("kind=job.requeued").dump();
  for (const std::string& id : ids) {
    EXPECT_EQ(State(id), "running") << Job(id).dump();
    EXPECT_EQ(Events("kind=job.running&subject=" + id).size(), 1u)
        << id << " started again: " << Events("kind=job.running&subject=" + id).dump();
  }
  EXPECT_FALSE(Events("kind=leader.stalled").empty()) << "the leader did not see its own stall";
}

}  // namespace
}  // namespace tessera
