// Node administration through real processes (issue 35): one `tessera serve` and two
// `tessera agent --simulate` nodes of two cards each. Draining a node stops its running jobs
// through the preemption path (the agent's SIGTERM, the policy's grace) and they run again on the
// other node; nothing new lands on the drained node; uncordoned, it takes work again. The
// admin's cordon, drain and uncordon go through the `tessera` CLI as a person types them.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "proc.h"
#include "serve_fixture.h"
#include "support/config_builder.h"
#include "test_dir.h"

namespace tessera {
namespace {

class NodeAdminE2eTest : public testing::ServeFixture {
 protected:
  void TearDown() override {
    StopAgents();
    server_.reset();
  }
  // `tessera ARGS` as the admin; its stdout (and stderr, for failures).
  std::string Cli(const std::vector<std::string>& args, int* rc) {
    const std::string out = dir_ + "/cli.out";
    std::string cmd = "TESSERA_URL=http://127.0.0.1:" + std::to_string(port_) +
                      " TESSERA_TOKEN_FILE=" + testing::TokenFile("admin-token-1") + " " +
                      testing::kTessera;
    for (const std::string& a : args) cmd += " '" + a + "'";
    *rc = std::system((cmd + " >" + out + " 2>&1").c_str());
    return testing::ReadFile(out);
  }
  std::string NodeOf(const std::string& id) {
    Json j = Job(id);
    return j.contains("placement") ? j["placement"].value("node", "") : "";
  }
  std::string AdminState(const std::string& node) {
    for (const auto& n : Nodes())
      if (n["name"] == node) return n.value("admin_state", "");
    return "";
  }
  std::string Submit() {
    Json r = Call("POST", "/v1/jobs", {{"queue", "training"}, {"command", {"sleep", "600"}}});
    EXPECT_TRUE(r.is_object() && r.contains("id")) << r.dump();
    return r.value("id", "");
  }
};

TEST_F(NodeAdminE2eTest, DrainedJobsRunElsewhereNothingLandsUncordonTakesWorkAgain) {
  dir_ = testing::FreshTestDir("node-admin-e2e");
  WriteConfig(testing::ConfigBuilder().Grace("2s").Yaml());
  StartServer();
  StartAgent("n1", "2xH100-80GB");
  StartAgent("n2", "2xH100-80GB");
  ASSERT_TRUE(WaitFor([&] { return ReadyNodes() == 2; })) << server_->Log();
  // n2 cordoned: both jobs go to n1.
  int rc = -1;
  std::string out = Cli({"cordon", "n2"}, &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "n2 cordoned\n");
  const std::string a = Submit(), b = Submit();
  for (const std::string& id : {a, b}) {
    ASSERT_TRUE(WaitFor([&] { return State(id) == "running"; })) << Job(id).dump();
    EXPECT_EQ(NodeOf(id), "n1");
  }
  out = Cli({"uncordon", "n2"}, &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "n2 active\n");
  // Drain n1: both are stopped by their agent and run again on n2.
  out = Cli({"drain", "n1"}, &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "n1 draining\n");
  for (const std::string& id : {a, b}) {
    ASSERT_TRUE(WaitFor([&] { return State(id) == "running" && NodeOf(id) == "n2"; }))
        << Job(id).dump();
    EXPECT_EQ(Job(id)["preemptions"], 1);
    EXPECT_EQ(Events("kind=job.preempted&subject=" + id).size(), 1u);
  }
  ASSERT_TRUE(WaitFor([&] { return AdminState("n1") == "drained"; })) << Nodes().dump();
  Json drained = Events("kind=node.drained");
  ASSERT_EQ(drained.size(), 1u);
  EXPECT_EQ(drained[0]["actor"], "admin");
  // Nothing new lands on the drained node: a third job waits (n2 is full).
  const std::string c = Submit();
  std::this_thread::sleep_for(std::chrono::seconds(2));  // several cycles (what is tested)
  EXPECT_EQ(State(c), "pending") << Job(c).dump();
  // Uncordoned, n1 takes it.
  out = Cli({"uncordon", "n1"}, &rc);
  ASSERT_EQ(rc, 0) << out;
  ASSERT_TRUE(WaitFor([&] { return State(c) == "running"; })) << Job(c).dump();
  EXPECT_EQ(NodeOf(c), "n1");
  // `tessera nodes` says a cordoned device's state; one device alone: NODE:DEVICE.
  out = Cli({"cordon", "n1:1"}, &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "n1:1 cordoned\n");
  out = Cli({"nodes"}, &rc);
  EXPECT_NE(out.find("ready (simulated), cordoned"), std::string::npos) << out;
  out = Cli({"drain", "n9"}, &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("no node 'n9'"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera
