// The polled views (jobs, groups, nodes, summary) come from a snapshot: unchanged state is served
// again without the engine's lock, any change shows in the next read, and while the lock is busy
// (as during a long scheduling cycle) the last rendering is served at once, marked with its age,
// instead of waiting for the lock.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "api/engine.h"
#include "engine_fixture.h"

namespace tessera::api {
namespace {

const char* kConfig = R"(
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups: [{name: research}]
profiles: [{name: train, gpus: 1, cpu: 1, memory: 1GiB, forms: [whole]}]
queues: [{name: training, profile: train, groups: [research]}]
)";

class ViewSnapshotTest : public testing::EngineFixture {
 protected:
  void SetUp() override { Start("views", kConfig); }
};

TEST_F(ViewSnapshotTest, ChangesShowAtOnceAndABusyEngineServesTheLastViewWithItsAge) {
  Register("n1", 1);
  auto nodes = engine_->views().Nodes(Who("admin"));
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ((*nodes)["nodes"].size(), 1u);
  EXPECT_FALSE(nodes->contains("stale_ms"));
  // Read your writes: a change is in the next read.
  Register("n2", 1);
  const std::string id =
      (*engine_->Submit(Who("alice"), {{"queue", "training"}, {"command", {"true"}}}))["id"];
  EXPECT_EQ((*engine_->views().Nodes(Who("admin")))["nodes"].size(), 2u);
  auto jobs = engine_->views().ListJobs(Who("alice"), "", 10);
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ((*jobs)["jobs"].size(), 1u);
  EXPECT_EQ((*jobs)["jobs"][0]["id"], id);
  const Json summary = *engine_->views().Summary(Who("admin"));
  EXPECT_EQ(summary["cluster"]["nodes"], 2);
  // A change, then the engine's lock held (as by a long cycle, which changes memory under the
  // lock): the reads answer at once, from the last rendering, with its age, not the change.
  now_ += 1500;
  Register("n3", 1);
  auto hold = engine_->HoldForTest();
  auto read = std::async(std::launch::async, [this] {
    return std::make_pair(engine_->views().Nodes(Who("admin")),
                          engine_->views().Summary(Who("admin")));
  });
  ASSERT_EQ(read.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "a read waited for the lock";
  auto [busy_nodes, busy_summary] = read.get();
  ASSERT_TRUE(busy_nodes.ok() && busy_summary.ok());
  EXPECT_EQ((*busy_nodes)["nodes"].size(), 2u);
  EXPECT_EQ((*busy_nodes)["stale_ms"], 1500);
  EXPECT_EQ((*busy_summary)["cluster"]["nodes"], 2);
  EXPECT_EQ((*busy_summary)["stale_ms"], 1500);
  hold.unlock();
  auto after = engine_->views().Nodes(Who("admin"));
  ASSERT_TRUE(after.ok());
  EXPECT_EQ((*after)["nodes"].size(), 3u);
  EXPECT_FALSE(after->contains("stale_ms"));
  // Each identity has its own view: alice sees her group's summary only.
  EXPECT_EQ((*engine_->views().Summary(Who("alice")))["groups"].size(), 1u);
  // Agents still read nothing.
  EXPECT_EQ(engine_->views().Nodes(Who("agent")).status().code(), StatusCode::kPermissionDenied);
}

// GET /v1/health (issue 30: within 100 ms under load) never waits for a cycle: with the engine's
// lock held, it answers at once from its last answer, with its age.
TEST_F(ViewSnapshotTest, HealthAnswersWhileTheEngineIsBusy) {
  Register("n1", 1);
  const Json before = engine_->views().Health();
  EXPECT_EQ(before["ok"], true);
  EXPECT_EQ(before["nodes"], 1);
  EXPECT_FALSE(before.contains("stale_ms"));
  now_ += 700;
  auto hold = engine_->HoldForTest();
  auto health = std::async(std::launch::async, [this] { return engine_->views().Health(); });
  ASSERT_EQ(health.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "health waited for the engine's lock";
  const Json busy = health.get();
  EXPECT_EQ(busy["ok"], true);
  EXPECT_EQ(busy["nodes"], 1);
  EXPECT_EQ(busy["stale_ms"], 700);
  hold.unlock();
  EXPECT_FALSE(engine_->views().Health().contains("stale_ms"));
}

}  // namespace
}  // namespace tessera::api
