// Node administration kept in PostgreSQL (issue 35): a cordon and a device's drain survive a
// restart of the engine over the same database, as over SQLite (node_admin_test.cc). A private
// PostgreSQL server (tests/store/pg_harness.h) is started for it.
#include <gtest/gtest.h>

#include "engine_test.h"
#include "pg_harness.h"

namespace tessera::api::engine_test {
namespace {

class NodeAdminPgTest : public EngineTest {
 protected:
  void SetUp() override {
    std::string error;
    tessera::testing::PgServer* server = tessera::testing::SharedPgServer(&error);
    ASSERT_NE(server, nullptr) << error;
    auto url = server->CreateUniqueDatabase("node_admin");
    ASSERT_TRUE(url.ok()) << url.status().ToString();
    Start("node_admin_pg", kConfig, StoreAt(*url));
  }
  Json Node(const std::string& name) {
    const Json all = *engine_->views().Nodes(Who("admin"));
    for (const Json& n : all["nodes"]) {
      if (n["name"] == name) return n;
    }
    ADD_FAILURE() << "no node " << name;
    return Json();
  }
};

TEST_F(NodeAdminPgTest, CordonAndADevicesDrainSurviveARestart) {
  Register("n1", 2);
  ASSERT_TRUE(engine_->AdminNode(Who("admin"), "n1", "cordon").ok());
  ASSERT_TRUE(engine_->AdminNode(Who("admin"), "n1", "drain", 1).ok());
  Reopen();
  Json n = Node("n1");
  EXPECT_EQ(n["admin_state"], "cordoned");
  EXPECT_EQ(n["devices"][0]["admin_state"], "cordoned");
  EXPECT_EQ(n["devices"][1]["admin_state"], "drained");  // nothing held there
  const std::string a = Submit("bob", {{"queue", "training"}, {"command", {"sleep", "100"}}})["id"];
  EXPECT_EQ(State(a), "pending") << "a restart must not uncordon";
  ASSERT_TRUE(engine_->AdminNode(Who("admin"), "n1", "uncordon").ok());
  Reopen();
  EXPECT_EQ(Node("n1")["admin_state"], "active");
  EXPECT_EQ(Node("n1")["devices"][1]["admin_state"], "active");
  now_ += 1000;
  ASSERT_TRUE(engine_->RunCycle().ok());
  EXPECT_EQ(State(a), "placed");
}

}  // namespace
}  // namespace tessera::api::engine_test
