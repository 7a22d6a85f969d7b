// Node administration in the engine over a real SQLite store (issue 35): cordon keeps new work
// off a node or one device, drain also preempts what runs there through the policy's grace and
// requeues it to run elsewhere, uncordon brings the node back; the state survives a restart,
// events name who did it, and only admins may. Job times: start_ms, end_ms, and a waiting job's
// forecast (its position, and its expected start when the scheduler keeps cards for it).
#include <gtest/gtest.h>

#include "engine_test.h"

namespace tessera::api::engine_test {
namespace {

class NodeAdminTest : public EngineTest {
 protected:
  // Without research's reservation: bob's jobs (of the non-preemptible training queue) may then
  // borrow every card (docs/scheduling.md, "Admit"), and these tests fill the cards with them.
  void SetUp() override {
    std::string config = kConfig;
    const std::string reserved = "reservation: {gpu: 1}, ";
    config.erase(config.find(reserved), reserved.size());
    Start("engine", config);
  }
  Json Admin(const std::string& node, const std::string& action, int device = -1) {
    auto r = engine_->AdminNode(Who("admin"), node, action, device);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : Json();
  }
  Json Node(const std::string& name) {
    const Json all = *engine_->views().Nodes(Who("admin"));
    for (const Json& n : all["nodes"]) {
      if (n["name"] == name) return n;
    }
    ADD_FAILURE() << "no node " << name;
    return Json();
  }
  Json Job(const std::string& id) { return *engine_->views().GetJob(Who("admin"), id); }
  std::string Train(Json extra = Json::object()) {
    extra["queue"] = "training";
    extra["command"] = {"sleep", "100"};
    return Submit("bob", extra)["id"];
  }
  std::vector<store::Event> Events(const std::string& kind) {
    store::EventFilter f;
    f.kind_prefix = kind;
    std::vector<store::Event> out;
    const Json all = *engine_->views().Events(Who("admin"), 0, 1000, f);
    for (const Json& e : all["events"]) {
      store::Event x;
      x.actor = e["actor"];
      x.subject = e["subject"];
      x.data = e["data"].dump();
      out.push_back(x);
    }
    return out;
  }
};

TEST_F(NodeAdminTest, CordonKeepsNewWorkOffTheNodeUntilUncordoned) {
  Register("n1", 1);
  Register("n2", 1);
  Json n = Admin("n1", "cordon");
  EXPECT_EQ(n["name"], "n1");
  EXPECT_EQ(n["admin_state"], "cordoned");
  EXPECT_EQ(n["devices"][0]["admin_state"], "cordoned");
  EXPECT_EQ(Node("n2")["admin_state"], "active");
  const std::string a = Train(), b = Train();
  EXPECT_EQ(Job(a)["placement"]["node"], "n2") << Job(a).dump();
  EXPECT_EQ(State(b), "pending") << "nothing new lands on a cordoned node: " << Job(b).dump();
  now_ += 5000;
  ASSERT_TRUE(engine_->RunCycle().ok());
  EXPECT_EQ(State(b), "pending");
  auto ev = Events("node.cordoned");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].actor, "admin");
  EXPECT_EQ(ev[0].subject, "n1");
  // Back to work: the waiting job lands there.
  EXPECT_EQ(Admin("n1", "uncordon")["admin_state"], "active");
  now_ += 5000;
  ASSERT_TRUE(engine_->RunCycle().ok());
  EXPECT_EQ(Job(b)["placement"]["node"], "n1") << Job(b).dump();
  EXPECT_EQ(Events("node.uncordoned").size(), 1u);
  ASSERT_TRUE(engine_->CheckInvariants().ok());
}

TEST_F(NodeAdminTest, DrainPreemptsWhatRunsThereAndItRunsElsewhere) {
  Register("n1", 1);
  const std::string a = Train();
  ASSERT_EQ(Job(a)["placement"]["node"], "n1");
  Heartbeat("n1");
  Heartbeat("n1", {{"running", {{{"job", a}, {"pid", 10}}}}});
  ASSERT_EQ(State(a), "running");
  Register("n2", 1);
  Json n = Admin("n1", "drain");
  EXPECT_EQ(n["admin_state"], "draining") << n.dump();
  Json j = Job(a);
  EXPECT_EQ(j["state"], "preempting") << j.dump();
  EXPECT_NE(j["reason"].get<std::string>().find("drain of n1 by admin"), std::string::npos)
      << j.dump();
  auto ev = Events("node.drained");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].actor, "admin");
  EXPECT_EQ(Json::parse(ev[0].data)["jobs"], Json::array({a}));
  // The agent is told to stop it (the policy's grace), as for any preemption.
  Json hb = Heartbeat("n1", {{"running", {{{"job", a}, {"pid", 10}}}}});
  ASSERT_EQ(hb["cancel"].size(), 1u) << hb.dump();
  EXPECT_EQ(hb["cancel"][0]["job"], a);
  // Its processes end: it is pending again, then placed on n2, never on n1.
  Heartbeat("n1", {{"finished", {{{"job", a}, {"exit_code", 143}, {"signal", 15}}}}});
  now_ += 1000;
  ASSERT_TRUE(engine_->RunCycle().ok());
  j = Job(a);
  EXPECT_EQ(j["placement"]["node"], "n2") << j.dump();
  EXPECT_EQ(j["preemptions"], 1);
  EXPECT_EQ(Node("n1")["admin_state"], "drained");
  EXPECT_EQ(Node("n1")["devices"][0]["admin_state"], "drained");
  // Nothing new lands on it while drained; uncordoned, it takes work again.
  const std::string b = Train();
  EXPECT_EQ(State(b), "pending");
  Admin("n1", "uncordon");
  now_ += 1000;
  ASSERT_TRUE(engine_->RunCycle().ok());
  EXPECT_EQ(Job(b)["placement"]["node"], "n1") << Job(b).dump();
  ASSERT_TRUE(engine_->CheckInvariants().ok());
}

TEST_F(NodeAdminTest, OneDeviceCordonedOrDrainedAlone) {
  Register("n1", 2);
  const std::string a = Train();
  Heartbeat("n1");
  Heartbeat("n1", {{"running", {{{"job", a}, {"pid", 10}}}}});
  const int on = Job(a)["placement"]["devices"][0]["index"];
  const int other = 1 - on;
  // The free device cordoned: a second job waits; the node itself stays active.
  Json n = Admin("n1", "cordon", other);
  EXPECT_EQ(n["admin_state"], "active");
  EXPECT_EQ(n["devices"][other]["admin_state"], "cordoned");
  EXPECT_EQ(n["devices"][on]["admin_state"], "active");
  const std::string b = Train();
  EXPECT_EQ(State(b), "pending") << Job(b).dump();
  // The busy device drained: its job is preempted; the cordoned one is opened again, and b
  // lands there, not on the drained one.
  Admin("n1", "drain", on);
  EXPECT_EQ(State(a), "preempting");
  Admin("n1", "uncordon", other);
  now_ += 1000;
  ASSERT_TRUE(engine_->RunCycle().ok());
  EXPECT_EQ(Job(b)["placement"]["devices"][0]["index"], other) << Job(b).dump();
  auto ev = Events("node.cordoned");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].subject, "n1:" + std::to_string(other));
  EXPECT_EQ(Json::parse(ev[0].data)["device"], other);
  ASSERT_TRUE(engine_->CheckInvariants().ok());
}

// docs/nodes.md: "`tessera uncordon gpu-03:5` opens device 5 of a cordoned node". A new user
// found it did not: the device read active while jobs waited with "no node ... takes new work",
// the node as a whole kept down by its own cordon.
TEST_F(NodeAdminTest, ADeviceUncordonedOnACordonedNodeTakesWorkAndNoOtherDoes) {
  Register("n1", 2);
  Admin("n1", "cordon");
  Json n = Admin("n1", "uncordon", 1);
  EXPECT_EQ(n["admin_state"], "cordoned");
  EXPECT_EQ(n["devices"][1]["admin_state"], "active");
  const std::string a = Train(), b = Train();
  now_ += 1000;
  ASSERT_TRUE(engine_->RunCycle().ok());
  EXPECT_EQ(Job(a)["placement"]["node"], "n1") << Job(a).dump();
  EXPECT_EQ(Job(a)["placement"]["devices"][0]["index"], 1) << Job(a).dump();
  EXPECT_EQ(State(b), "pending") << "device 0 stays cordoned with its node: " << Job(b).dump();
  ASSERT_TRUE(engine_->CheckInvariants().ok());
}

// A new user: the summary counted a drained card as idle (1 GPU idle while a job waited for a
// card), and a card whose shares overcommit it made the idle figure smaller than the empty
// cards. Idle is what the cards that take work have free; the others are "unavailable".
TEST_F(NodeAdminTest, TheSummaryCountsNoCardThatTakesNoWorkAsIdle) {
  Register("n1", 3);
  const std::string a = Train();
  Heartbeat("n1", {{"running", {{{"job", a}, {"pid", 10}}}}});
  const int on = Job(a)["placement"]["devices"][0]["index"];
  Admin("n1", "cordon", (on + 1) % 3);
  auto s = engine_->views().Summary(Who("admin"));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)["cluster"]["gpu_milli_total"], 3000) << s->dump();
  EXPECT_EQ((*s)["cluster"]["gpu_milli_idle"], 1000) << s->dump();
  EXPECT_EQ((*s)["cluster"]["gpu_milli_unavailable"], 1000) << s->dump();
  ASSERT_TRUE(engine_->CheckInvariants().ok());
}

// Asked again for the state it is in, a node is left as it is and the event log says it once
// (a second cordon wrote node.cordoned twice; an uncordon of an active node wrote one).
TEST_F(NodeAdminTest, AskedForTheStateItIsInANodeWritesNothingMore) {
  Register("n1", 2);
  EXPECT_EQ(Admin("n1", "cordon")["admin_state"], "cordoned");
  EXPECT_EQ(Admin("n1", "cordon")["admin_state"], "cordoned");
  EXPECT_EQ(Events("node.cordoned").size(), 1u);
  EXPECT_EQ(Admin("n1", "drain", 1)["devices"][1]["admin_state"], "drained");
  Admin("n1", "drain", 1);
  EXPECT_EQ(Events("node.drained").size(), 1u);
  // The whole node cordoned again while one device drains is a change: the device follows it.
  EXPECT_EQ(Admin("n1", "cordon")["devices"][1]["admin_state"], "cordoned");
  EXPECT_EQ(Events("node.cordoned").size(), 2u);
  EXPECT_EQ(Admin("n1", "uncordon")["admin_state"], "active");
  EXPECT_EQ(Admin("n1", "uncordon")["admin_state"], "active");
  EXPECT_EQ(Admin("n1", "uncordon", 0)["devices"][0]["admin_state"], "active");
  EXPECT_EQ(Events("node.uncordoned").size(), 1u);
  ASSERT_TRUE(engine_->CheckInvariants().ok());
}

TEST_F(NodeAdminTest, TheStateSurvivesARestartAndARegistration) {
  Register("n1", 1);
  Admin("n1", "cordon");
  Reopen();
  EXPECT_EQ(Node("n1")["admin_state"], "cordoned");
  Register("n1", 1);  // the agent registers again after the restart
  EXPECT_EQ(Node("n1")["admin_state"], "cordoned");
  const std::string a = Train();
  EXPECT_EQ(State(a), "pending") << "a restart must not uncordon: " << Job(a).dump();
  Admin("n1", "uncordon");
  Reopen();
  EXPECT_EQ(Node("n1")["admin_state"], "active");
  now_ += 1000;
  ASSERT_TRUE(engine_->RunCycle().ok());
  EXPECT_EQ(State(a), "placed");
}

TEST_F(NodeAdminTest, OnlyAdminsAndOnlyWhatExists) {
  Register("n1", 2);
  auto r = engine_->AdminNode(Who("alice"), "n1", "cordon");
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  r = engine_->AdminNode(Who("admin"), "nope", "drain");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("no node 'nope'"), std::string::npos);
  r = engine_->AdminNode(Who("admin"), "n1", "cordon", 7);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("no device 7"), std::string::npos) << r.status().ToString();
  r = engine_->AdminNode(Who("admin"), "n1", "freeze");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Node("n1")["admin_state"], "active");
}

TEST_F(NodeAdminTest, JobTimesAndAWaitingJobsForecast) {
  Register("n1", 1);
  const int64_t t0 = now_;
  const std::string a = Train({{"walltime", "1h"}});
  EXPECT_FALSE(Job(a).contains("start_ms")) << "placed, not started yet";
  Heartbeat("n1");
  now_ += 2000;
  Heartbeat("n1", {{"running", {{{"job", a}, {"pid", 10}}}}});
  EXPECT_EQ(Job(a)["start_ms"], t0 + 2000);
  // Two more wait behind it: the first keeps the card, expected free when a's walltime ends
  // (counted from its start, rounded up to the second).
  const std::string b = Train({{"walltime", "1h"}}), c = Train({{"walltime", "1h"}});
  Json jb = Job(b), jc = Job(c);
  ASSERT_EQ(jb["state"], "pending");
  EXPECT_EQ(jb["forecast"]["position"], 1) << jb.dump();
  EXPECT_EQ(jc["forecast"]["position"], 2) << jc.dump();
  EXPECT_EQ(jb["forecast"]["expected_start_ms"], (t0 + 2000 + 999) / 1000 * 1000 + 3600 * 1000)
      << jb.dump();
  EXPECT_FALSE(jb.contains("end_ms"));
  // It ends: end_ms, and its start kept (also once out of memory, from the store).
  now_ += 3000;
  Heartbeat("n1", {{"finished", {{{"job", a}, {"exit_code", 0}}}}});
  Json ja = Job(a);
  EXPECT_EQ(ja["state"], "succeeded");
  EXPECT_EQ(ja["start_ms"], t0 + 2000);
  EXPECT_EQ(ja["end_ms"], t0 + 5000);
  Reopen();
  ja = Job(a);
  EXPECT_EQ(ja["start_ms"], t0 + 2000) << ja.dump();
  EXPECT_EQ(ja["end_ms"], t0 + 5000);
}

}  // namespace
}  // namespace tessera::api::engine_test
