// The engine against a real SQLite store, with an injected clock: jobs through their agents
// (gangs, output, shares, node loss), restarts, and swapping shares.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "api/engine.h"
#include "engine_fixture.h"
#include "engine_test.h"
#include "model/agent_protocol.h"
#include "test_dir.h"

namespace tessera::api {
namespace {

using engine_test::EngineTest;
using engine_test::kConfig;

TEST_F(EngineTest, LifecycleThroughTheAgent) {
  Register("n1", 1);
  Json j = Submit("alice",
                  {{"queue", "notebooks"}, {"command", {"echo", "hi"}}, {"gpu_memory", "8GiB"}});
  const std::string id = j["id"];
  EXPECT_EQ(j["state"], "placed");
  EXPECT_EQ(j["placement"]["form"], "share");
  Json hb = Heartbeat("n1");
  ASSERT_EQ(hb["start"].size(), 1u);
  EXPECT_EQ(hb["start"][0]["gpu_memory_limit_bytes"], int64_t{8} << 30);
  EXPECT_EQ(hb["start"][0]["devices"][0]["uuid"], "n1-0");
  EXPECT_EQ(State(id), "starting");
  Heartbeat("n1", {{"running", {{{"job", id}, {"pid", 42}}}}});
  EXPECT_EQ(State(id), "running");
  ASSERT_TRUE(engine_->agents().WriteOutput(Who("agent"), id, 0, "hi\n").ok());
  hb = Heartbeat("n1", {{"finished", {{{"job", id}, {"exit_code", 0}}}}});
  EXPECT_EQ(hb["ack"], Json::array({id}));
  EXPECT_EQ(State(id), "succeeded");
  EXPECT_EQ(engine_->views().JobOutput(Who("alice"), id)->bytes, "hi\n");
  // A failing job and a cancelled running job.
  std::string f = Submit("alice", {{"queue", "notebooks"}, {"command", {"false"}}})["id"];
  Heartbeat("n1");
  Heartbeat("n1", {{"finished", {{{"job", f}, {"exit_code", 1}}}}});
  EXPECT_EQ(State(f), "failed");
  std::string c = Submit("alice", {{"queue", "notebooks"}, {"command", {"sleep", "100"}}})["id"];
  Heartbeat("n1");
  Heartbeat("n1", {{"running", {{{"job", c}, {"pid", 43}}}}});
  EXPECT_EQ((*engine_->Cancel(Who("alice"), c))["state"], "running");
  hb = Heartbeat("n1", {{"running", {{{"job", c}, {"pid", 43}}}}});
  ASSERT_EQ(hb["cancel"].size(), 1u);
  Heartbeat("n1", {{"finished", {{{"job", c}, {"exit_code", 143}, {"signal", 15}}}}});
  EXPECT_EQ(State(c), "cancelled");
  ASSERT_TRUE(engine_->CheckInvariants().ok());
}

// A gang across two nodes: its second part's start order still goes out when the first part
// already reported running before the second node's heartbeat (found flaky in CI: the order was
// sent only while the job was "starting").
TEST_F(EngineTest, EveryGangPartStartsEvenAfterAnotherPartRuns) {
  Register("n1", 1);
  Register("n2", 1);
  const std::string id =
      Submit("alice", {{"queue", "training"}, {"command", {"sleep", "100"}}, {"gpus", 2}})["id"];
  ASSERT_EQ(State(id), "placed");
  Json first = Heartbeat("n1");
  ASSERT_EQ(first["start"].size(), 1u);
  EXPECT_EQ(first["start"][0]["env"]["TESSERA_GANG_RANK"], "0");
  Heartbeat("n1", {{"running", {{{"job", id}, {"pid", 7}}}}});
  EXPECT_EQ(State(id), "running");
  ASSERT_TRUE(engine_->Sync().ok());
  Json second = Heartbeat("n2");
  ASSERT_EQ(second["start"].size(), 1u) << second.dump();
  EXPECT_EQ(second["start"][0]["env"]["TESSERA_GANG_RANK"], "1");
  EXPECT_EQ(Heartbeat("n2")["start"].size(), 0u);  // once
  EXPECT_EQ(Heartbeat("n1")["start"].size(), 0u);
  ASSERT_TRUE(engine_->CheckInvariants().ok());
}

TEST_F(EngineTest, OutputIsCappedAtMaxOutputAndReadInRanges) {
  const std::string id = OutputJob(10);
  ASSERT_TRUE(engine_->agents().WriteOutput(Who("agent"), id, 0, "0123456").ok());
  // The part below the cap is kept, the rest refused.
  ASSERT_TRUE(engine_->agents().WriteOutput(Who("agent"), id, 7, "789abc").ok());
  EXPECT_EQ(engine_->agents().WriteOutput(Who("agent"), id, 10, "d").code(),
            StatusCode::kResourceExhausted);
  auto all = engine_->views().JobOutput(Who("alice"), id);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->bytes, "0123456789");
  EXPECT_EQ(all->total, 10);
  auto mid = engine_->views().JobOutput(Who("alice"), id, 3, 4);
  EXPECT_EQ(mid->bytes, "3456");
  EXPECT_EQ(mid->offset, 3);
  EXPECT_EQ(engine_->views().JobOutput(Who("alice"), id, 20, 4)->bytes, "");
  EXPECT_EQ(engine_->views().JobOutput(Who("alice"), id, -1, 4).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->views().JobOutput(Who("bob"), id).status().code(), StatusCode::kNotFound);
}

// A cut at the server's max_output says so at the end of what is kept (as the agent's own cut
// does), where the limit has room for the note; an upload repeated (its answer lost) keeps it.
TEST_F(EngineTest, OutputCutAtMaxOutputEndsWithANoteSayingSo) {
  const std::string id = OutputJob(400);
  const std::string note =
      "\ntessera: output cut at 400 bytes (max_output); the rest was dropped\n";
  ASSERT_TRUE(engine_->agents().WriteOutput(Who("agent"), id, 0, std::string(300, 'a')).ok());
  for (int upload = 0; upload < 2; ++upload) {
    ASSERT_TRUE(engine_->agents().WriteOutput(Who("agent"), id, 300, std::string(200, 'b')).ok());
    auto all = engine_->views().JobOutput(Who("alice"), id);
    ASSERT_TRUE(all.ok());
    EXPECT_EQ(all->total, 400);
    EXPECT_EQ(all->bytes, std::string(300, 'a') + std::string(100 - note.size(), 'b') + note);
  }
  EXPECT_EQ(engine_->agents().WriteOutput(Who("agent"), id, 400, "c").code(),
            StatusCode::kResourceExhausted);
}

TEST_F(EngineTest, SharesPackByMemoryAndGroupsStopAtTheirLimit) {
  Register("n1", 1);  // one 80 GiB device
  std::vector<std::string> ids;
  for (int i = 0; i < 6; ++i) {
    ids.push_back(Submit(
        "alice", {{"queue", "notebooks"}, {"command", {"true"}}, {"gpu_memory", "16GiB"}})["id"]);
  }
  // Five 16 GiB shares fit in 80 GiB; the sixth waits for GPU memory on the device.
  int placed = 0;
  for (const auto& id : ids) placed += State(id) == "placed" ? 1 : 0;
  EXPECT_EQ(placed, 5);
  Json sixth = *engine_->views().GetJob(Who("alice"), ids[5]);
  EXPECT_EQ(sixth["state"], "pending");
  EXPECT_EQ(sixth["wait"]["step"], "Placement") << sixth.dump();
  EXPECT_NE(sixth["reason"].get<std::string>().find("no room for 1 x share"), std::string::npos)
      << sixth["reason"];
  Json nodes = *engine_->views().Nodes(Who("admin"));
  EXPECT_EQ(nodes["nodes"][0]["devices"][0]["gpu_memory_mib_used"], 5 * 16384);
  EXPECT_EQ(nodes["nodes"][0]["devices"][0]["holders"].size(), 5u);
  EXPECT_EQ(nodes["nodes"][0]["devices"][0]["holders"][0]["identity"], "alice");
  // The research group's limit is 2 GPUs: whole-device training waits on the limit.
  Register("n2", 4);
  std::string t =
      Submit("alice", {{"queue", "training"}, {"command", {"true"}}, {"gpus", 2}})["id"];
  Json tj = *engine_->views().GetJob(Who("alice"), t);
  EXPECT_EQ(tj["state"], "pending");
  EXPECT_EQ(tj["wait"]["step"], "Admission") << tj.dump();
  EXPECT_NE(tj["reason"].get<std::string>().find("group research at its gpu limit"),
            std::string::npos)
      << tj["reason"];
  ASSERT_TRUE(engine_->CheckInvariants().ok());
}

TEST_F(EngineTest, NodeLossRequeuesOrLosesAndReturnAllocatesNothingTwice) {
  Register("n1", 1);
  std::string a = Submit("alice", {{"queue", "training"}, {"command", {"sleep", "100"}}})["id"];
  Heartbeat("n1");
  Heartbeat("n1", {{"running", {{{"job", a}, {"pid", 7}}}}});
  EXPECT_EQ(State(a), "running");
  Pass(11'000);                    // past the heartbeat timeout, the leader watching
  EXPECT_EQ(State(a), "pending");  // requeued: training requeues on loss, and no node is left
  // The node returns: the old process is not in may_run, and the job is started afresh.
  Json hb = Heartbeat("n1", {{"running", {{{"job", a}, {"pid", 7}}}}});
  EXPECT_TRUE(hb["may_run"].empty());
  ASSERT_TRUE(engine_->Tick().ok());
  EXPECT_EQ(State(a), "placed");
  hb = Heartbeat("n1");
  EXPECT_EQ(hb["start"].size(), 1u);
  ASSERT_TRUE(engine_->CheckInvariants().ok());
  // A queue that does not requeue marks the job lost.
  Register("n2", 1);
  std::string f = Submit("alice", {{"queue", "fragile"}, {"command", {"sleep", "100"}}})["id"];
  EXPECT_EQ(State(f), "placed");
  Pass(5'000);
  Heartbeat("n1");  // n1 stays alive
  Pass(5'000);
  Heartbeat("n1");
  Pass(1'000);
  EXPECT_EQ(State(f), "lost");
  auto events = (*engine_->views().Events(Who("admin"), 0, 1000,
                                          store::EventFilter{"node.", "", ""}))["events"];
  bool lost = false, returned = false;
  for (const auto& e : events) {
    lost = lost || e["kind"] == "node.lost";
    returned = returned || e["kind"] == "node.returned";
  }
  EXPECT_TRUE(lost && returned);
}

// Issue 33: a leader that stalled for 15 s (stopped, starved, or waiting on its store) declared
// live nodes lost on resuming ("no heartbeat for 15s": its own stall) and killed and restarted
// their jobs. A stall the leader sees in its own monotonic clock grants every node a fresh window.
TEST_F(EngineTest, ALeaderStallGivesEveryNodeAFreshHeartbeatWindowBeforeJudgingIt) {
  tessera::testing::FakeClock mono{0};
  engine_->agents().SetMonotonicClockForTest(mono.AsClock());
  Register("n1", 1);
  std::string a = Submit("alice", {{"queue", "training"}, {"command", {"sleep", "100"}}})["id"];
  Heartbeat("n1");
  Heartbeat("n1", {{"running", {{{"job", a}, {"pid", 7}}}}});
  ASSERT_TRUE(engine_->Tick().ok());
  ASSERT_EQ(State(a), "running");
  now_ += 15'000;  // the stall: both clocks move, no heartbeat is heard
  mono += 15'000;
  ASSERT_TRUE(engine_->Tick().ok());
  EXPECT_EQ(State(a), "running") << "a live node was declared lost for the leader's own stall";
  auto events =
      (*engine_->views().Events(Who("admin"), 0, 1000, store::EventFilter{"", "", ""}))["events"];
  bool stalled = false, lost = false;
  for (const auto& e : events) {
    stalled = stalled || e["kind"] == "leader.stalled";
    lost = lost || e["kind"] == "node.lost";
  }
  EXPECT_TRUE(stalled) << events.dump();
  EXPECT_FALSE(lost);
  // The window is fresh, not endless: silent for the timeout after the stall (the leader passing
  // every second again), the node is lost.
  for (int s = 1; s <= 9; ++s) {
    now_ += 1'000;
    mono += 1'000;
    ASSERT_TRUE(engine_->Tick().ok());
  }
  EXPECT_EQ(State(a), "running");
  now_ += 1'000;
  mono += 1'000;
  ASSERT_TRUE(engine_->Tick().ok());
  EXPECT_EQ(State(a), "pending");  // requeued: n1 is lost now
  ASSERT_TRUE(engine_->CheckInvariants().ok());
}

// Issue 33: a running job requeued (its node taken for lost) and placed again on another device
// of the same node while its old process still ran there: the agent ignored the new start (the
// job id runs) and the old process kept the old device, which the leader gave to another job.
TEST_F(EngineTest, AJobPlacedAgainWhereItsOldProcessRunsStartsOnlyOnceThatStopped) {
  Register("n1", 2);
  std::string a = Submit("alice", {{"queue", "training"}, {"command", {"sleep", "100"}}})["id"];
  Heartbeat("n1");
  Heartbeat("n1", {{"running", {{{"job", a}, {"pid", 7}}}}});
  ASSERT_EQ(State(a), "running");
  Pass(11'000);  // past the heartbeat timeout: n1 is lost and a requeued
  ASSERT_EQ(State(a), "pending");
  // n1 returns; its agent still runs a's old process. a is placed on n1 again.
  Heartbeat("n1", {{"running", {{{"job", a}, {"pid", 7}}}}});
  ASSERT_TRUE(engine_->Tick().ok());
  ASSERT_EQ(State(a), "placed");
  Json hb = Heartbeat("n1", {{"running", {{{"job", a}, {"pid", 7}}}}});
  EXPECT_TRUE(hb["start"].empty()) << "a start the agent would ignore: " << hb.dump();
  for (const auto& id : hb["may_run"]) EXPECT_NE(id, a) << "the old process must stop";
  EXPECT_EQ(State(a), "placed") << "the old process's report taken for the new placement's";
  // Once the agent no longer runs it, the new placement starts.
  hb = Heartbeat("n1");
  ASSERT_EQ(hb["start"].size(), 1u) << hb.dump();
  EXPECT_EQ(hb["start"][0]["job"], a);
  EXPECT_EQ(State(a), "starting");
  Heartbeat("n1", {{"running", {{{"job", a}, {"pid", 8}}}}});
  EXPECT_EQ(State(a), "running");
  ASSERT_TRUE(engine_->CheckInvariants().ok());
}

// Issue 33: a start order went out once, in one heartbeat reply; a lost reply left the job in
// "starting" for good, holding its device.
TEST_F(EngineTest, AStartWhoseReplyWasLostIsSentAgainAndOneNeverConfirmedIsRequeued) {
  Register("n1", 1);
  std::string a = Submit("alice", {{"queue", "training"}, {"command", {"sleep", "100"}}})["id"];
  Json hb = Heartbeat("n1");
  ASSERT_EQ(hb["start"].size(), 1u);  // this reply is lost: the agent never sees it
  ASSERT_EQ(State(a), "starting");
  now_ += 1'000;
  hb = Heartbeat("n1");  // the agent's next heartbeat, running nothing
  EXPECT_TRUE(hb["start"].empty()) << "too soon to tell a lost reply from a slow start";
  now_ += 1'000;
  hb = Heartbeat("n1");
  ASSERT_EQ(hb["start"].size(), 1u) << "the start was not sent again: " << hb.dump();
  EXPECT_EQ(hb["start"][0]["job"], a);
  Heartbeat("n1", {{"running", {{{"job", a}, {"pid", 9}}}}});
  EXPECT_EQ(State(a), "running");
  ASSERT_TRUE(engine_->Cancel(Who("alice"), a).ok());
  Heartbeat("n1", {{"finished", {{{"job", a}, {"exit_code", 143}}}}});
  // An agent that heartbeats but never confirms a start: after three heartbeat timeouts the job
  // is requeued (training requeues) rather than holding its card for good.
  std::string b = Submit("alice", {{"queue", "training"}, {"command", {"sleep", "100"}}})["id"];
  ASSERT_TRUE(engine_->Tick().ok());
  Heartbeat("n1");
  ASSERT_EQ(State(b), "starting");
  for (int s = 0; s < 29; ++s) {  // both clocks move, a second at a time
    now_ += 1'000;
    mono_ += 1'000;
    Heartbeat("n1");
    ASSERT_TRUE(engine_->Tick().ok());
  }
  EXPECT_EQ(State(b), "starting");
  now_ += 1'000;
  mono_ += 1'000;
  Heartbeat("n1");
  ASSERT_TRUE(engine_->Tick().ok());
  EXPECT_NE(State(b), "starting");
  auto events = (*engine_->views().Events(Who("admin"), 0, 1000,
                                          store::EventFilter{"job.requeued", b, ""}))["events"];
  ASSERT_EQ(events.size(), 1u);
  EXPECT_NE(events[0]["reason"].get<std::string>().find("was not confirmed within 30s"),
            std::string::npos)
      << events[0];
  ASSERT_TRUE(engine_->CheckInvariants().ok());
}

TEST_F(EngineTest, RestartRebuildsStateWithoutDoubleAllocation) {
  Register("n1", 2);
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i)
    ids.push_back(Submit("alice", {{"queue", "training"}, {"command", {"true"}}})["id"]);
  // Two placed (two devices), the third waits (the group's limit of 2 GPUs).
  EXPECT_EQ(State(ids[0]), "placed");
  EXPECT_EQ(State(ids[1]), "placed");
  EXPECT_EQ(State(ids[2]), "pending");
  Json before = *engine_->views().Nodes(Who("admin"));
  Reopen();
  ASSERT_TRUE(engine_->CheckInvariants().ok());
  for (const auto& id : ids) EXPECT_TRUE(engine_->views().GetJob(Who("admin"), id).ok());
  EXPECT_EQ(State(ids[2]), "pending");
  ASSERT_TRUE(engine_->Tick().ok());
  EXPECT_EQ(State(ids[2]), "pending") << "nothing freed, nothing placed twice";
  Json after = *engine_->views().Nodes(Who("admin"));
  EXPECT_EQ(before["nodes"][0]["devices"], after["nodes"][0]["devices"]);
  // New ids continue after the old ones.
  std::string next = Submit("alice", {{"queue", "notebooks"}, {"command", {"true"}}})["id"];
  EXPECT_EQ(next, "j-4");
}

// Jobs submitted in one millisecond (the clock stands still here) wait in submission order after
// a restart too: the store loaded them by their ids' text, so j-10 and j-11 went ahead of j-2.
TEST_F(EngineTest, JobsSubmittedInOneMillisecondKeepTheirOrderAcrossARestart) {
  std::vector<std::string> ids;  // no node yet: all wait
  for (int i = 0; i < 11; ++i)
    ids.push_back(Submit("alice", {{"queue", "training"}, {"command", {"true"}}})["id"]);
  ASSERT_EQ(ids[1], "j-2");
  ASSERT_EQ(ids[9], "j-10");
  Reopen();
  Register("n1", 2);
  ASSERT_TRUE(engine_->Tick().ok());
  EXPECT_EQ(State(ids[0]), "placed");
  EXPECT_EQ(State(ids[1]), "placed");
  for (size_t i = 2; i < ids.size(); ++i) EXPECT_EQ(State(ids[i]), "pending") << ids[i];
}

// A job the policy no longer admits after a restart (its queue was removed) fails, and the
// failure is written: the next restart reads it as failed, with one job.failed event, instead
// of failing it again in memory only.
TEST_F(EngineTest, AJobThePolicyNoLongerAdmitsFailsDurablyOnRestart) {
  const std::string id = Submit("alice", {{"queue", "fragile"}, {"command", {"true"}}})["id"];
  EXPECT_EQ(State(id), "pending");
  std::string without = kConfig;
  without.erase(without.find("  - {name: fragile"));
  auto c = ParseConfig(without);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  config_ = *c;
  Reopen();
  EXPECT_EQ(State(id), "failed");
  ASSERT_TRUE(engine_->Tick().ok());
  Reopen();
  EXPECT_EQ(State(id), "failed") << "read back from the store";
  auto job = engine_->views().GetJob(Who("admin"), id);
  ASSERT_TRUE(job.ok());
  EXPECT_NE((*job)["reason"].get<std::string>().find("no longer schedulable after a restart"),
            std::string::npos)
      << job->dump();
  auto ev = engine_->views().Events(Who("admin"), 0, 1000, {});
  ASSERT_TRUE(ev.ok());
  int failed = 0;
  for (const auto& e : (*ev)["events"])
    failed += e["kind"] == "job.failed" && e["subject"] == id ? 1 : 0;
  EXPECT_EQ(failed, 1);
}

// A group's limit lowered while its jobs run (a new user): the server refused to start ("group
// research over its gpu limit"), the whole control plane down for an edit of the config. Now
// what runs keeps running, the group takes nothing new until it is back under the limit, and a
// waiting job the new limit can never hold fails, with the reason, as a fresh one is refused.
TEST_F(EngineTest, ALimitLoweredUnderRunningJobsKeepsThemAndServes) {
  Register("n1", 4);
  const std::string a =
      Submit("alice", {{"queue", "training"}, {"command", {"sleep", "100"}}})["id"];
  const std::string b =
      Submit("alice", {{"queue", "training"}, {"command", {"sleep", "100"}}})["id"];
  const std::string big =
      Submit("alice", {{"queue", "training"}, {"gpus", 2}, {"command", {"true"}}})["id"];
  ASSERT_EQ(State(a), "placed");
  ASSERT_EQ(State(b), "placed");
  ASSERT_EQ(State(big), "pending");  // at the limit of 2
  std::string lowered = kConfig;
  const std::string was = "limit: {gpu: 2}";
  lowered.replace(lowered.find(was), was.size(), "limit: {gpu: 1}");
  auto c = ParseConfig(lowered);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  config_ = *c;
  Reopen();
  ASSERT_TRUE(engine_->CheckInvariants().ok()) << engine_->CheckInvariants().ToString();
  EXPECT_EQ(State(a), "placed");
  EXPECT_EQ(State(b), "placed");
  EXPECT_EQ(State(big), "failed");
  const Json failed = *engine_->views().GetJob(Who("admin"), big);
  EXPECT_NE(failed["reason"].get<std::string>().find("may hold at most 1 of gpu"),
            std::string::npos)
      << failed.dump();
  const std::string next =
      Submit("alice", {{"queue", "training"}, {"command", {"sleep", "100"}}})["id"];
  ASSERT_TRUE(engine_->Tick().ok());
  EXPECT_EQ(State(next), "pending");
  const Json waits = *engine_->views().GetJob(Who("admin"), next);
  EXPECT_NE(waits["reason"].get<std::string>().find("at its gpu limit"), std::string::npos)
      << waits.dump();
  ASSERT_TRUE(engine_->CheckInvariants().ok()) << engine_->CheckInvariants().ToString();
}

// Fair share survives a restart: a group that used the cluster still ranks behind one that did
// not, with its history decayed over the time the server was down.
// Only unfinished jobs are loaded at start. An ended job was then unknown to cancel ("no job",
// 404, where it had said "already ended") and its events hidden from its own group's users.
TEST_F(EngineTest, AnEndedJobIsTheSameAfterARestartToCancelAndToItsEvents) {
  const std::string id = Submit("alice", {{"queue", "training"}, {"command", {"true"}}})["id"];
  ASSERT_TRUE(engine_->Cancel(Who("alice"), id).ok());
  const auto events_of = [&](const std::string& who) {
    int n = 0;
    const Json all = *engine_->views().Events(Who(who), 0, 1000, store::EventFilter{});
    for (const Json& e : all["events"]) n += e["subject"] == id ? 1 : 0;
    return n;
  };
  const int before = events_of("alice");
  ASSERT_GE(before, 2);  // submitted, cancelled
  Reopen();
  auto again = engine_->Cancel(Who("alice"), id);
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition) << again.status().ToString();
  EXPECT_EQ(again.status().message(), "job '" + id + "' has already ended (cancelled)");
  EXPECT_EQ(engine_->Cancel(Who("bob"), id).status().code(), StatusCode::kNotFound)
      << "bob's groups do not hold it";
  EXPECT_EQ(events_of("alice"), before);
  EXPECT_EQ(events_of("carol"), before) << "carol shares alice's group";
  EXPECT_EQ(events_of("bob"), 0);
}

TEST_F(EngineTest, FairShareHistorySurvivesARestart) {
  Register("n1", 2);
  const std::string id = Submit("alice", {{"queue", "training"}, {"command", {"true"}}})["id"];
  for (int i = 0; i < 5; ++i) {  // ten minutes of one card held by research
    now_ += 120'000;
    ASSERT_TRUE(engine_->RunCycle().ok());
  }
  auto share = [&](const std::string& group) {
    const Json groups = *engine_->views().Groups(Who("admin"));
    for (const auto& g : groups["groups"]) {
      if (g["name"] == group) return g["fair_share"].get<double>();
    }
    return -1.0;
  };
  const double before = share("research");
  ASSERT_GT(before, 0.0);
  EXPECT_EQ(share("prod"), 0.0);
  ASSERT_TRUE(engine_->Cancel(Who("alice"), id).ok());
  engine_.reset();   // the engine saves its history when it stops
  now_ += 3600'000;  // an hour down: one half-life (the default)
  Reopen();
  ASSERT_TRUE(engine_->RunCycle().ok());
  const double after = share("research");
  EXPECT_GT(after, 0.0) << "the history was lost";
  EXPECT_NEAR(after, before / 2, before * 0.05);
}
// Issue 37: GET /v1/groups gives each group's usage per pool, whether or not any pool quota is
// set (no reservation, no limit: null).
TEST_F(EngineTest, GroupsShowUsagePerPool) {
  Register("n1", 2);
  const std::string id = Submit("alice", {{"queue", "training"}, {"command", {"true"}}})["id"];
  ASSERT_EQ(State(id), "placed");
  const Json groups = *engine_->views().Groups(Who("admin"));
  bool seen = false;
  for (const auto& g : groups["groups"]) {
    if (g["name"] != "research") continue;
    seen = true;
    ASSERT_EQ(g["pools"].size(), 1u) << g.dump();
    EXPECT_TRUE(g["pools"][0]["pool"].is_string());
    EXPECT_EQ(g["pools"][0]["gpu_milli_usage"], 1000);
    EXPECT_EQ(g["pools"][0]["gpu_milli_reservation"], 0);
    EXPECT_TRUE(g["pools"][0]["gpu_milli_limit"].is_null());
  }
  EXPECT_TRUE(seen);
}

const char* kSwapConfig = R"(
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups:
  - {name: research}
profiles:
  - {name: nb, gpus: 1, gpu_fraction: 0.1, gpu_memory: 16GiB, cpu: 1, memory: 1GiB, forms: [share]}
queues:
  - {name: notebooks, profile: nb, groups: [research], class: interactive, swap: true, overcommit: 2}
  - {name: plain, profile: nb, groups: [research], class: interactive}
)";

class SwapEngineTest : public EngineTest {
 protected:
  void SetUp() override { Start("swap", kSwapConfig); }
};

// A swapping queue's shares overcommit one 80 GiB card up to 160 GiB of caps, and their start
// orders tell the agent to create the share's region with swapping on.
TEST_F(SwapEngineTest, OvercommittedSharesOnOneCardAndSwapInTheirOrders) {
  // A node that offers 256 GiB of host RAM and disk to swapped-out memory.
  auto r = engine_->agents().RegisterNode(
      Who("agent"),
      {{"node", "n1"},
       {"cpu_milli", 32000},
       {"memory_mib", 65536},
       {"swap_mib", 262144},
       {"devices",
        {{{"index", 0}, {"model", "H100-80GB"}, {"memory_mib", 81920}, {"uuid", "n1-0"}}}}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto bad = engine_->agents().RegisterNode(
      Who("agent"),
      {{"node", "n2"}, {"cpu_milli", 1000}, {"memory_mib", 1024}, {"swap_mib", "lots"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("swap_mib"), std::string::npos);
  std::vector<std::string> ids;
  for (int i = 0; i < 11; ++i) {
    Json j = Submit("alice", {{"queue", "notebooks"}, {"command", {"sleep", "60"}}});
    ids.push_back(j["id"]);
  }
  Json plain = Submit("alice", {{"queue", "plain"}, {"command", {"sleep", "60"}}});
  Json hb = Heartbeat("n1");
  ASSERT_EQ(hb["start"].size(), 10u) << "ten 16 GiB caps on one 80 GiB card at 200%";
  for (const Json& order : hb["start"]) {
    EXPECT_EQ(order["swap"], true);
    EXPECT_EQ(order["gpu_memory_limit_bytes"], int64_t{16} << 30);
  }
  EXPECT_EQ(State(ids[10]), "pending");
  EXPECT_EQ(State(plain["id"]), "pending") << "a share that cannot swap stays off the card";

  // The agent reports each share's swap state: changes are events, the job view shows it.
  const std::string id = ids[0];
  Heartbeat("n1", {{"running",
                    {{{"job", id}, {"pid", 7}, {"swap", "swapped"}, {"swapped_mib", 16384}}}}});
  Heartbeat("n1", {{"running",
                    {{{"job", id}, {"pid", 7}, {"swap", "swapped"}, {"swapped_mib", 16384}}}}});
  Heartbeat("n1", {{"running",
                    {{{"job", id}, {"pid", 7}, {"swap", "resuming"}, {"swapped_mib", 16384}}}}});
  ASSERT_TRUE(engine_->Sync().ok());  // heartbeats commit after they answer
  Json view = *engine_->views().GetJob(Who("alice"), id);
  EXPECT_EQ(view["activity"]["swap"], "resuming");
  EXPECT_EQ(view["activity"]["swapped_mib"], 16384);
  Json events = (*engine_->views().Events(Who("admin"), 0, 1000,
                                          store::EventFilter{"job.swap", "", ""}))["events"];
  ASSERT_EQ(events.size(), 2u) << "one event per change, not per heartbeat";
  EXPECT_NE(events[0]["reason"].get<std::string>().find("swapped out: 16384 MiB"),
            std::string::npos);
  EXPECT_NE(events[1]["reason"].get<std::string>().find("resuming"), std::string::npos);
  // A state the protocol does not know is refused, naming the field, and changes nothing.
  auto refused = engine_->agents().Heartbeat(
      Who("agent"), {{"node", "n1"}, {"running", {{{"job", id}, {"pid", 7}, {"swap", "asleep"}}}}});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("running.swap"), std::string::npos);
  EXPECT_EQ((*engine_->views().GetJob(Who("alice"), id))["activity"]["swap"], "resuming");
}

}  // namespace
}  // namespace tessera::api
