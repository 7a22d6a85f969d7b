// A repartition with drain survives a control-plane restart: the engine over a real SQLite store,
// reopened mid-drain, keeps the device draining (nothing new lands on it, nothing is preempted a
// second time), and reconfigures it once the preempted job's processes are gone.
#include <gtest/gtest.h>

#include "api/engine.h"
#include "engine_fixture.h"

namespace tessera::api {
namespace {

const char* kConfig = R"(
grace: 30s
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: bob, role: user, groups: [else], token: bob-token-12}
groups: [{name: lab}, {name: else}]
profiles:
  - {name: card, gpus: 1, cpu: 1, memory: 1GiB, forms: [whole]}
  - {name: serve, gpus: 1, gpu_fraction: 0.1, gpu_memory: 9GiB, cpu: 1, memory: 1GiB, forms: [partition]}
queues:
  - {name: batch, profile: card, groups: [lab], preemptible: true, class: batch}
  - {name: serve, profile: serve, groups: [lab], priority: 10, class: inference}
)";

class DrainRestartTest : public testing::EngineFixture {
 protected:
  void SetUp() override {
    now_ = 1'000'000'000;
    Start("drain_restart", kConfig);
  }
  Json Heartbeat(Json extra = Json::object()) {
    extra["node"] = "n1";
    auto r = engine_->agents().Heartbeat(admin(), extra);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : Json();
  }
  Json Job(const std::string& id) { return *engine_->views().GetJob(admin(), id); }
  Json Device() { return (*engine_->views().Nodes(admin()))["nodes"][0]["devices"][0]; }
  int Count(const std::string& kind) {
    store::EventFilter f;
    f.kind_prefix = kind;
    return static_cast<int>((*engine_->views().Events(admin(), 0, 1000, f))["events"].size());
  }
  const Identity& admin() { return config_.identities[0]; }
  // A batch job running on the only card, then an inference job for which the cycle drains it:
  // the batch job's id, and the inference job's in *serve.
  std::string BatchThenServe(std::string* serve) {
    RegisterTheNode();
    std::string batch =
        (*engine_->Submit(admin(), {{"queue", "batch"}, {"command", {"sleep", "1000"}}}))["id"];
    Heartbeat();
    Heartbeat({{"running", {{{"job", batch}, {"pid", 10}}}}});
    now_ += 100'000;
    *serve = (*engine_->Submit(admin(), {{"queue", "serve"}, {"command", {"true"}}}))["id"];
    return batch;
  }
  // Node n1 with one A100, whole.
  void RegisterTheNode() {
    Json dev = {{"index", 0}, {"model", "A100-80GB"}, {"memory_mib", 81920}, {"uuid", "GPU-a"}};
    ASSERT_TRUE(engine_->agents()
                    .RegisterNode(admin(), {{"node", "n1"},
                                            {"cpu_milli", 8000},
                                            {"memory_mib", 65536},
                                            {"devices", Json::array({dev})}})
                    .ok());
  }
};

TEST_F(DrainRestartTest, ADrainInProgressSurvivesARestart) {
  RegisterTheNode();
  // A preemptible batch job holds the only card, whole, and runs.
  std::string batch =
      (*engine_->Submit(admin(), {{"queue", "batch"}, {"command", {"sleep", "1000"}}}))["id"];
  ASSERT_EQ(Job(batch)["state"], "placed");
  Heartbeat();
  Heartbeat({{"running", {{{"job", batch}, {"pid", 10}}}}});
  // An inference job wants a MIG instance: the cycle drains the card for a new layout.
  now_ += 100'000;
  std::string serve =
      (*engine_->Submit(admin(), {{"queue", "serve"}, {"command", {"true"}}}))["id"];
  ASSERT_EQ(Job(batch)["state"], "preempting") << Job(batch).dump();
  EXPECT_NE(Job(batch)["reason"].get<std::string>().find("drain n1/gpu0 for repartition"),
            std::string::npos);
  ASSERT_EQ(Job(serve)["state"], "pending");
  EXPECT_EQ(Job(serve)["wait"]["step"], "Repartition") << Job(serve).dump();
  EXPECT_TRUE(Device()["draining"].get<bool>()) << Device().dump();
  ASSERT_EQ(Count("job.preempted"), 1);

  // The control plane restarts mid-drain.
  Reopen();
  EXPECT_TRUE(Device()["draining"].get<bool>()) << "the drain was forgotten: " << Device().dump();
  EXPECT_EQ(Job(batch)["state"], "preempting");
  // Cycles while the batch job's processes are still stopping: nothing lands on the card, nothing
  // is preempted twice; the agent is told again to stop the job.
  for (int i = 0; i < 3; ++i) {
    now_ += 1000;
    ASSERT_TRUE(engine_->RunCycle().ok());
  }
  EXPECT_EQ(Count("job.preempted"), 1);
  EXPECT_EQ(Job(serve)["state"], "pending");
  Json hb = Heartbeat({{"running", {{{"job", batch}, {"pid", 10}}}}});
  ASSERT_EQ(hb["cancel"].size(), 1u) << hb.dump();
  EXPECT_EQ(hb["cancel"][0]["grace_ms"], 30000);
  // Its processes end: the card gets MIG and the inference job its instance; batch waits.
  Heartbeat({{"finished", {{{"job", batch}, {"exit_code", 143}, {"signal", 15}}}}});
  EXPECT_EQ(Job(batch)["state"], "pending");
  EXPECT_EQ(Job(batch)["preemptions"], 1);
  now_ += 1000;
  ASSERT_TRUE(engine_->RunCycle().ok());
  Json s = Job(serve);
  ASSERT_EQ(s["state"], "placed") << s.dump();
  EXPECT_EQ(s["placement"]["form"], "partition");
  EXPECT_EQ(s["placement"]["devices"][0]["partition"].get<std::string>().rfind("1g.10gb@", 0), 0u)
      << s.dump();
  EXPECT_FALSE(Device()["draining"].get<bool>());
  EXPECT_TRUE(Device()["mig"].get<bool>());
  EXPECT_EQ(Count("device.repartitioned"), 1);
  ASSERT_TRUE(engine_->CheckInvariants().ok());
  // And a restart now finds no drain left to finish.
  Reopen();
  EXPECT_FALSE(Device()["draining"].get<bool>());
  EXPECT_EQ(Job(serve)["state"], "placed");
}

// A job cancelled while it is being preempted ends cancelled when its processes stop; it is not
// requeued (it was: pending again, the cancel kept only in memory, and it ran once more).
TEST_F(DrainRestartTest, ACancelDuringAPreemptionEndsTheJob) {
  std::string serve;
  std::string batch = BatchThenServe(&serve);
  ASSERT_FALSE(serve.empty());
  ASSERT_EQ(Job(batch)["state"], "preempting") << Job(batch).dump();
  auto c = engine_->Cancel(admin(), batch);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)["state"], "preempting");
  Heartbeat({{"finished", {{{"job", batch}, {"exit_code", 143}, {"signal", 15}}}}});
  EXPECT_EQ(Job(batch)["state"], "cancelled") << Job(batch).dump();
  EXPECT_EQ(Count("job.requeued"), 0);
  now_ += 1000;
  ASSERT_TRUE(engine_->RunCycle().ok());
  EXPECT_EQ(Job(batch)["state"], "cancelled");
  ASSERT_TRUE(engine_->CheckInvariants().ok());
  Reopen();
  EXPECT_EQ(Job(batch)["state"], "cancelled");
}

// Found by a new user's run of `tessera up`: a job preempted while placed, before any start order
// went out, stayed `preempting` with its card held until the server restarted: its agent never
// heard of it, so no exit ever came to end the preemption (and a cancel only said "cancel
// requested"). It holds nothing on the node: pending again at the node's next heartbeat, and the
// job it was preempted for gets the card.
TEST_F(DrainRestartTest, AJobPreemptedBeforeItsStartWentOutIsRequeuedNotHeldForever) {
  RegisterTheNode();
  std::string batch =
      (*engine_->Submit(admin(), {{"queue", "batch"}, {"command", {"sleep", "1000"}}}))["id"];
  ASSERT_EQ(Job(batch)["state"], "placed");
  now_ += 1000;
  std::string serve =
      (*engine_->Submit(admin(), {{"queue", "serve"}, {"command", {"true"}}}))["id"];
  ASSERT_EQ(Job(batch)["state"], "preempting") << Job(batch).dump();
  Reopen();  // and a restart does not forget that it never started
  ASSERT_EQ(Job(batch)["state"], "preempting") << Job(batch).dump();
  Json orders = Heartbeat();  // the agent runs nothing: no start of `batch` ever went out
  for (const Json& c : orders["cancel"]) EXPECT_NE(c["job"], batch) << orders.dump();
  for (const Json& st : orders["start"]) EXPECT_NE(st["job"], batch) << orders.dump();
  EXPECT_EQ(Job(batch)["state"], "pending") << Job(batch).dump();
  EXPECT_EQ(Count("job.requeued"), 1);
  for (int i = 0; i < 3 && Job(serve)["state"] == "pending"; ++i) {
    now_ += 1000;
    ASSERT_TRUE(engine_->RunCycle().ok());
    Heartbeat();
  }
  EXPECT_NE(Job(serve)["state"], "pending") << Job(serve).dump();
  EXPECT_EQ(Job(batch)["state"], "pending") << Job(batch).dump();
  ASSERT_TRUE(engine_->CheckInvariants().ok());
}

// Cancelled while so preempted, it ends cancelled at its node's next heartbeat (it only said
// "cancel requested", and stayed).
TEST_F(DrainRestartTest, AJobPreemptedBeforeItsStartAndCancelledEndsCancelled) {
  RegisterTheNode();
  std::string batch =
      (*engine_->Submit(admin(), {{"queue", "batch"}, {"command", {"sleep", "1000"}}}))["id"];
  now_ += 1000;
  ASSERT_TRUE(engine_->Submit(admin(), {{"queue", "serve"}, {"command", {"true"}}}).ok());
  ASSERT_EQ(Job(batch)["state"], "preempting") << Job(batch).dump();
  ASSERT_TRUE(engine_->Cancel(admin(), batch).ok());
  Heartbeat();
  EXPECT_EQ(Job(batch)["state"], "cancelled") << Job(batch).dump();
  EXPECT_EQ(Count("job.requeued"), 0);
  ASSERT_TRUE(engine_->CheckInvariants().ok());
}

// Stopped by its walltime before its start went out (a slow node): it ends so at its node's next
// heartbeat, not requeued, and not held preempting for an exit that never comes.
TEST_F(DrainRestartTest, AJobStoppedByItsWalltimeBeforeItsStartEndsSaying) {
  RegisterTheNode();
  std::string batch = (*engine_->Submit(
      admin(), {{"queue", "batch"}, {"command", {"sleep", "1000"}}, {"walltime", 1}}))["id"];
  ASSERT_EQ(Job(batch)["state"], "placed");
  now_ += 2000;
  ASSERT_TRUE(engine_->Tick().ok());
  ASSERT_EQ(Job(batch)["state"], "preempting") << Job(batch).dump();
  Heartbeat();
  Json j = Job(batch);
  EXPECT_EQ(j["state"], "failed") << j.dump();
  EXPECT_NE(j["reason"].get<std::string>().find("stopped: walltime 1s"), std::string::npos)
      << j.dump();
  EXPECT_EQ(Count("job.requeued"), 0);
  ASSERT_TRUE(engine_->CheckInvariants().ok());
}

// Why a card drains names the job it drains for: to those who may see that job alone (the
// review: bob's /v1/nodes read "for j-2 (gpu 0.1, 9GiB) ..." of a job of another group).
TEST_F(DrainRestartTest, WhoADrainIsForIsToldOnlyToThoseWhoMaySeeTheJob) {
  std::string serve;
  BatchThenServe(&serve);
  ASSERT_TRUE(Device()["draining"].get<bool>()) << Device().dump();
  EXPECT_EQ(Device()["drain_reason"].get<std::string>().rfind("for " + serve + " (", 0), 0u)
      << Device().dump();
  const Json seen = (*engine_->views().Nodes(config_.identities[1]))["nodes"][0]["devices"][0];
  EXPECT_TRUE(seen["draining"].get<bool>());
  EXPECT_EQ(seen["drain_reason"], "for another group's job") << seen.dump();
}

}  // namespace
}  // namespace tessera::api
