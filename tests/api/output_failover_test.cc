// Issue 33: a job's output survives a failover. Real processes and a real PostgreSQL: two
// `tessera serve` on one database (one leads, one waits) and one `tessera agent --simulate` given
// both servers' URLs, running a real job. The job prints a line, the leader is killed (SIGKILL: its
// data directory, where the output was, is gone with it as far as the new leader knows), the
// standby leads; the job's output must then be readable from the new leader while the job runs on
// printing nothing, and whole once the job printed more and ended.
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "server_pair.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
using testing::kTessera;
using testing::Proc;

const char* kConfig = R"(
heartbeat_timeout: 1h
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups: [{name: research}]
profiles:
  - {name: train, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}
queues:
  - {name: training, profile: train, groups: [research]}
)";

class OutputFailoverTest : public testing::ServerPairTest {
 protected:
  void SetUp() override { SetUpPair("outfail", kConfig); }
  void TearDown() override {
    if (agent_) agent_->Kill(SIGKILL);
    ServerPairTest::TearDown();
  }
  std::string Output(int k, const std::string& id) {
    httplib::Client c("127.0.0.1", ports_[k]);
    c.set_connection_timeout(1);
    c.set_read_timeout(5);
    auto r =
        c.Get(("/v1/jobs/" + id + "/output").c_str(), {{"Authorization", "Bearer alice-token-1"}});
    return r && r->status / 100 == 2 ? r->body : "";
  }
  std::string State(int k, const std::string& id) {
    Json j = Get(k, "/v1/jobs/" + id);
    return j.is_object() ? j.value("state", "") : "";
  }
  std::string Logs() {
    std::string out;
    for (auto& [k, server] : servers_) {
      if (server) out += "--- server " + std::to_string(k) + "\n" + server->Log();
    }
    std::ifstream in(dir_ + "/agent.log");
    return out + "--- agent\n" +
           std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  std::unique_ptr<Proc> agent_;
};

TEST_F(OutputFailoverTest, AJobsOutputIsReadFromTheNewLeaderAfterAFailover) {
  LeaderAndStandby();
  agent_ = std::make_unique<Proc>(
      std::vector<std::string>{kTessera, "agent", "--server", Url(0) + "," + Url(1), "--token-file",
                               testing::TokenFile("agent-token-1"), "--node", "n1", "--simulate",
                               "1xH100-80GB", "--work", dir_ + "/work", "--cgroup-root", ""},
      dir_ + "/agent.log");
  // The job prints a line, waits for the test's go, prints another and ends.
  const std::string go = dir_ + "/go";
  const std::string script = "echo before-the-failover; while [ ! -e " + go +
                             " ]; do sleep 0.1; done; echo after-the-failover";
  std::string id;
  {
    httplib::Client c("127.0.0.1", ports_[0]);
    auto r = c.Post("/v1/jobs", {{"Authorization", "Bearer alice-token-1"}},
                    Json{{"queue", "training"}, {"command", {"/bin/sh", "-c", script}}}.dump(),
                    "application/json");
    ASSERT_TRUE(r && r->status == 201) << (r ? r->body : "no answer");
    id = Json::parse(r->body)["id"];
  }
  ASSERT_TRUE(tessera::testing::WaitFor([&] { return Output(0, id) == "before-the-failover\n"; },
                                        std::chrono::seconds(20)))
      << Output(0, id) << Logs();

  servers_[0]->Kill(SIGKILL);
  ASSERT_TRUE(WaitForRole(1, "leader", 15000)) << Logs();
  // The job runs on and prints nothing more: what it printed under the old leader is read from
  // the new one.
  EXPECT_TRUE(tessera::testing::WaitFor([&] { return Output(1, id) == "before-the-failover\n"; },
                                        std::chrono::seconds(15)))
      << "output read from the new leader: '" << Output(1, id) << "'\n"
      << Logs();
  EXPECT_EQ(State(1, id), "running");

  std::ofstream(go) << "go\n";
  ASSERT_TRUE(tessera::testing::WaitFor([&] { return State(1, id) == "succeeded"; },
                                        std::chrono::seconds(20)))
      << Get(1, "/v1/jobs/" + id).dump() << Logs();
  EXPECT_EQ(Output(1, id), "before-the-failover\nafter-the-failover\n") << Logs();
}

}  // namespace
}  // namespace tessera
