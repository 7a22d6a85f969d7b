// Issue 33, the control plane's side of faults between it and its agents: exits kept on the node
// while its agent was down, the leader's fencing epoch in every reply, and a cut-off node whose
// jobs are released only once its agent has stopped them itself (partition_stop).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "api/engine.h"
#include "engine_fixture.h"

namespace tessera::api {
namespace {

constexpr const char* kConfig = R"(
heartbeat_timeout: 10s
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups:
  - {name: research, reservation: {gpu: 1}, limit: {gpu: 2}}
profiles:
  - {name: train, gpus: 1, cpu: 1, memory: 1GiB, forms: [whole]}
queues:
  - {name: training, profile: train, groups: [research], requeue_on_loss: true}
)";

class AgentFaultsTest : public testing::EngineFixture {
 protected:
  Json Heartbeat(const std::string& node, Json extra = Json::object()) {
    extra["node"] = node;
    auto r = engine_->agents().Heartbeat(Who("agent"), extra);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : Json();
  }
  Result<Json> RegisterWith(const std::string& node, Json extra) {
    Json body = {{"node", node},
                 {"cpu_milli", 32000},
                 {"memory_mib", 65536},
                 {"devices",
                  {{{"index", 0}, {"model", "H100-80GB"}, {"memory_mib", 81920}, {"uuid", "u0"}}}}};
    for (auto& [k, v] : extra.items()) body[k] = v;
    return engine_->agents().RegisterNode(Who("agent"), body);
  }
  std::string State(const std::string& id) {
    return (*engine_->views().GetJob(Who("admin"), id))["state"];
  }
  std::string RunOne() {
    std::string id = (*engine_->Submit(
        Who("alice"), {{"queue", "training"}, {"command", {"sleep", "100"}}}))["id"];
    Heartbeat("n1");
    Heartbeat("n1", {{"running", {{{"job", id}, {"pid", 7}}}}});
    EXPECT_EQ(State(id), "running");
    return id;
  }
};

// A job that finished while its agent was down ran again when the agent returned: the
// registration found it not running and requeued it.
TEST_F(AgentFaultsTest, AnExitKeptOnTheNodeIsRecordedWhenItsAgentRegistersAgain) {
  Start("agent-faults", kConfig);
  ASSERT_TRUE(RegisterWith("n1", Json::object()).ok());
  const std::string a = RunOne();
  // The agent restarts; the job ended meanwhile and its exit waited on the node's disk.
  auto r = RegisterWith(
      "n1", {{"running", Json::array()}, {"finished", {{{"job", a}, {"exit_code", 0}}}}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(State(a), "succeeded") << "requeued, to run a second time";
  ASSERT_EQ((*r)["ack"].size(), 1u);
  EXPECT_EQ((*r)["ack"][0], a);
  EXPECT_TRUE(Heartbeat("n1")["start"].empty());
  // A malformed exit record is refused, naming what is wrong; nothing is half-applied.
  auto bad = RegisterWith("n1", {{"finished", {{{"job", a}, {"exit_code", "zero"}}}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("finished.exit_code"), std::string::npos)
      << bad.status().message();
  ASSERT_TRUE(engine_->CheckInvariants().ok());
}

// Agents remember the highest epoch they have seen and ignore replies from an older leader: so
// every reply carries the epoch of the lease this engine opened under.
TEST_F(AgentFaultsTest, EveryReplyToAnAgentCarriesTheLeasesEpoch) {
  Start("agent-epoch", kConfig,
        [](const std::string& dir) -> Result<std::unique_ptr<store::Store>> {
          auto s = store::Store::Open(dir + "/tessera.db");
          if (!s.ok()) return s.status();
          for (int i = 0; i < 3; ++i) {  // three leaders before this one
            auto led = (*s)->TryLead("http://me:" + std::to_string(i));
            if (!led.ok()) return led.status();
          }
          return s;
        });
  auto lead = store::Store::Open(dir_ + "/tessera.db");
  ASSERT_TRUE(lead.ok());
  auto leader = (*lead)->Leader();
  ASSERT_TRUE(leader.ok());
  auto r = RegisterWith("n1", Json::object());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["epoch"], leader->epoch);
  EXPECT_EQ(Heartbeat("n1")["epoch"], leader->epoch);
  EXPECT_FALSE(r->contains("partition_stop_ms"));  // off unless configured
}

// A node cut off from the leader: its agent stops its jobs after partition_stop; the leader
// takes the node for lost at the heartbeat timeout (nothing new goes there) but requeues its jobs
// only after partition_stop, the agent's kill grace and a heartbeat timeout of slack, so the
// job's next placement never runs beside the cut-off copy.
TEST_F(AgentFaultsTest, ALostNodesJobsAreReleasedOnlyAfterItsAgentHasStoppedThem) {
  Start("agent-partition", std::string(kConfig) + "partition_stop: 20s\n");
  auto r = RegisterWith("n1", Json::object());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)["partition_stop_ms"], 20000);
  const std::string a = RunOne();
  // Released 20 s partition_stop + 10 s kill grace + 10 s (a heartbeat timeout) of slack = 40 s
  // after the node was last heard; the node itself is lost at 10 s.
  int lost_at = -1;
  for (int s = 1; s < 40; ++s) {
    Pass(1'000);
    auto nodes = (*engine_->views().Nodes(Who("admin")))["nodes"];
    if (lost_at < 0 && nodes[0]["state"] == "lost") lost_at = s;
    ASSERT_EQ(State(a), "running") << "released at " << s << " s, while its agent may run it";
  }
  EXPECT_EQ(lost_at, 10) << "the node itself is lost at the heartbeat timeout";
  Pass(1'000);
  EXPECT_EQ(State(a), "pending");  // requeued; no node to run it
  ASSERT_TRUE(engine_->CheckInvariants().ok());
}

// The 30-minute soak's failures: a cut-off agent stopped its job itself (partition_stop), then
// reached the leader again before the leader released the node's jobs, and reported exit 143;
// the leader took that for the job's own end and recorded it failed. The agent says why it
// stopped the job (`stopped_by: partition`): the job is requeued (its queue requeues on loss)
// with an event saying so, or lost where the queue does not requeue, as for a lost node.
TEST_F(AgentFaultsTest, AJobItsAgentStoppedForAPartitionIsRequeuedNotFailed) {
  std::string config = std::string(kConfig) + "partition_stop: 20s\n";
  const std::string training = "requeue_on_loss: true}\n";
  config.insert(config.find(training) + training.size(),
                "  - {name: once, profile: train, groups: [research], requeue_on_loss: false}\n");
  Start("agent-partition-stop", config);
  ASSERT_TRUE(RegisterWith("n1", Json::object()).ok());
  const std::string a = RunOne();
  Pass(12'000);  // lost at 10 s, released at 40 s: in between, the agent heals
  ASSERT_EQ(State(a), "running");
  Heartbeat("n1",
            {{"finished",
              {{{"job", a}, {"exit_code", 143}, {"signal", 0}, {"stopped_by", "partition"}}}}});
  EXPECT_NE(State(a), "failed");
  Json job = *engine_->views().GetJob(Who("admin"), a);
  EXPECT_TRUE(job["state"] == "pending" || job["state"] == "placed" || job["state"] == "starting")
      << job.dump();
  auto events = (*engine_->views().Events(Who("admin"), 0, 1000,
                                          store::EventFilter{"job.", a, ""}))["events"];
  bool requeued = false;
  for (const auto& e : events) {
    EXPECT_NE(e["kind"], "job.failed") << events.dump();
    if (e["kind"] == "job.requeued" && e.value("reason", "").find("partition") != std::string::npos)
      requeued = true;
  }
  EXPECT_TRUE(requeued) << "no job.requeued event naming the partition: " << events.dump();
  ASSERT_TRUE(engine_->CheckInvariants().ok());

  // A queue that does not requeue on loss: the job is lost (not failed), as on a lost node.
  ASSERT_TRUE(RegisterWith("n2", Json::object()).ok());  // n1's card may hold `a` again
  std::string b =
      (*engine_->Submit(Who("alice"), {{"queue", "once"}, {"command", {"sleep", "9"}}}))["id"];
  Heartbeat("n2");
  Heartbeat("n2", {{"running", {{{"job", b}, {"pid", 8}}}}});
  ASSERT_EQ(State(b), "running");
  Heartbeat("n2",
            {{"finished",
              {{{"job", b}, {"exit_code", 0}, {"signal", 15}, {"stopped_by", "partition"}}}}});
  EXPECT_EQ(State(b), "lost");

  // Any other reason is refused, naming the field.
  auto bad = engine_->agents().Heartbeat(
      Who("agent"), {{"node", "n2"}, {"finished", {{{"job", b}, {"stopped_by", "whim"}}}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("finished.stopped_by"), std::string::npos)
      << bad.status().message();
  ASSERT_TRUE(engine_->CheckInvariants().ok());
}

// An agent stopped by its operator (SIGTERM: an upgrade, a reboot, Ctrl-C on `tessera up`) stops
// its jobs first. Their end was recorded as a bare signal ("killed by signal 15"), as if the job
// itself had failed. The agent says why (`stopped_by: shutdown`): the job ends (never run again
// from scratch, issue 33) and its reason names the shutdown; one that ended well meanwhile (exit
// 0, no signal) succeeded, as it said.
TEST_F(AgentFaultsTest, AJobStoppedByItsAgentsShutdownEndsSayingSo) {
  Start("agent-shutdown-stop", kConfig);
  ASSERT_TRUE(RegisterWith("n1", Json::object()).ok());
  const std::string a = RunOne();
  Heartbeat("n1", {{"finished",
                    {{{"job", a}, {"exit_code", 0}, {"signal", 15}, {"stopped_by", "shutdown"}}}}});
  Json job = *engine_->views().GetJob(Who("admin"), a);
  EXPECT_EQ(job["state"], "failed") << job.dump();
  EXPECT_EQ(job.value("reason", ""),
            "stopped as its agent on node 'n1' was shut down (killed by signal 15)")
      << job.dump();
  auto events = (*engine_->views().Events(Who("admin"), 0, 1000,
                                          store::EventFilter{"job.failed", a, ""}))["events"];
  ASSERT_EQ(events.size(), 1u) << events.dump();
  EXPECT_NE(events[0].value("reason", "").find("shut down"), std::string::npos) << events.dump();

  // One that ended well as the agent stopped: succeeded, as it said.
  const std::string c = RunOne();
  Heartbeat("n1", {{"finished",
                    {{{"job", c}, {"exit_code", 0}, {"signal", 0}, {"stopped_by", "shutdown"}}}}});
  EXPECT_EQ(State(c), "succeeded");
  // Another reason is still refused, naming the field.
  auto bad = engine_->agents().Heartbeat(
      Who("agent"), {{"node", "n1"}, {"finished", {{{"job", c}, {"stopped_by", "reboot"}}}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("finished.stopped_by"), std::string::npos)
      << bad.status().message();
  ASSERT_TRUE(engine_->CheckInvariants().ok());
}

// Found by the protocol fault harness (tests/agent/protocol_faults_test.cc): a node taken for
// lost had its job requeued and placed on the same node again; the agent then stopped the old
// process (absent from may_run) and reported its exit 143, which the leader took for the new
// placement's end: failed. The old process's exit belongs to the old placement: acknowledged,
// and the new start goes out.
TEST_F(AgentFaultsTest, TheExitOfAnEarlierPlacementsProcessDoesNotEndTheNewOne) {
  Start("agent-stale-exit", kConfig);
  ASSERT_TRUE(RegisterWith("n1", Json::object()).ok());
  const std::string a = RunOne();
  Pass(11'000);  // lost at the 10 s timeout, its job requeued at once (no partition_stop)
  ASSERT_EQ(State(a), "pending");
  // The node is back, its agent still running the old process.
  Json hb = Heartbeat("n1", {{"running", {{{"job", a}, {"pid", 7}}}}});
  ASSERT_TRUE(engine_->RunCycle().ok());
  ASSERT_EQ(State(a), "placed") << "placed again on n1, its only node";
  hb = Heartbeat("n1", {{"running", {{{"job", a}, {"pid", 7}}}}});
  EXPECT_TRUE(hb["start"].empty()) << "started beside its old process: " << hb.dump();
  hb = Heartbeat("n1", {{"finished", {{{"job", a}, {"exit_code", 143}, {"signal", 0}}}}});
  ASSERT_EQ(hb["ack"].size(), 1u) << hb.dump();
  EXPECT_NE(State(a), "failed") << "the old process's exit ended the new placement";
  ASSERT_EQ(hb["start"].size(), 1u) << "the old process gone, the new start goes: " << hb.dump();
  Heartbeat("n1", {{"running", {{{"job", a}, {"pid", 9}}}}});
  EXPECT_EQ(State(a), "running");
  ASSERT_TRUE(engine_->CheckInvariants().ok());
}

// Issue 37's runtime guard, served: a queue's max_runtime, or a job's declared walltime (a limit,
// as a batch system's: backfill counts on it), stops a running job through its agent (the cancel
// order and grace a preemption uses), and the job then ends, not requeued; while it runs, the job
// says when it will be stopped.
TEST_F(AgentFaultsTest, AQueuesMaxRuntimeOrAJobsWalltimeStopsItThroughTheAgentAndEndsIt) {
  struct Case {
    std::string queue_guard;  // added to the queue
    Json walltime;            // the job's, when not null
    std::string reason;
  };
  const std::vector<Case> cases = {
      {", max_runtime: 30s", nullptr, "stopped: max_runtime 30s of queue training"},
      {"", "30s", "stopped: walltime 30s (declared at submission) reached"},
      {", max_runtime: 1h", 30, "stopped: walltime 30s (declared"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.reason);
    std::string config = kConfig;
    config.replace(config.find("requeue_on_loss: true}"), 22,
                   "requeue_on_loss: true" + c.queue_guard + "}");
    Start("agent-max-runtime", config);
    ASSERT_TRUE(RegisterWith("n1", Json::object()).ok());
    Json body = {{"queue", "training"}, {"command", {"sleep", "100"}}};
    if (!c.walltime.is_null()) body["walltime"] = c.walltime;
    const std::string a = (*engine_->Submit(Who("alice"), body))["id"];
    Heartbeat("n1");
    Heartbeat("n1", {{"running", {{{"job", a}, {"pid", 7}}}}});
    ASSERT_EQ(State(a), "running");
    Json job = *engine_->views().GetJob(Who("admin"), a);
    ASSERT_TRUE(job.contains("stop_at_ms")) << job.dump();
    const int64_t stop_at = job["stop_at_ms"].get<int64_t>();
    EXPECT_EQ(stop_at, job["submit_ms"].get<int64_t>() / 1000 * 1000 + 30'000) << job.dump();
    for (int s = 1; s < 30; ++s) {
      now_ += 1'000;
      Heartbeat("n1", {{"running", {{{"job", a}, {"pid", 7}}}}});
      ASSERT_TRUE(engine_->Tick().ok());
      ASSERT_EQ(State(a), "running") << "stopped early, at " << s << " s";
    }
    now_ += 1'000;
    ASSERT_TRUE(engine_->Tick().ok());
    EXPECT_EQ(State(a), "preempting");
    Json hb = Heartbeat("n1", {{"running", {{{"job", a}, {"pid", 7}}}}});
    ASSERT_EQ(hb["cancel"].size(), 1u) << hb.dump();
    EXPECT_EQ(hb["cancel"][0]["job"], a);
    Heartbeat("n1", {{"finished", {{{"job", a}, {"exit_code", 143}, {"signal", 15}}}}});
    job = *engine_->views().GetJob(Who("admin"), a);
    EXPECT_EQ(job["state"], "failed") << job.dump();
    EXPECT_NE(job["reason"].get<std::string>().find(c.reason), std::string::npos) << job.dump();
    ASSERT_TRUE(engine_->Tick().ok());
    EXPECT_EQ(State(a), "failed") << "requeued after its guard stopped it";
    EXPECT_TRUE(Heartbeat("n1")["start"].empty());
    ASSERT_TRUE(engine_->CheckInvariants().ok());
  }
}

// Found by a new user: a walltime counted from the cycle's second of the placement (rounded down)
// stopped jobs up to a second and more early (`--walltime 10s` ran 8.8 s), and a restart of the
// server counted it again from the restart (a 10 s job ran 21 s). It counts from when the job
// started running, rounded up to the second, and a restart keeps that start.
TEST_F(AgentFaultsTest, AWalltimeCountsFromTheJobsStartAndARestartKeepsIt) {
  Start("agent-walltime-start", kConfig);
  ASSERT_TRUE(RegisterWith("n1", Json::object()).ok());
  now_ += 200;  // placed at 1000.2 s
  const std::string a = (*engine_->Submit(
      Who("alice"),
      {{"queue", "training"}, {"command", {"sleep", "100"}}, {"walltime", "10s"}}))["id"];
  Heartbeat("n1");
  now_ += 700;  // running from 1000.9 s
  Heartbeat("n1", {{"running", {{{"job", a}, {"pid", 7}}}}});
  Json job = *engine_->views().GetJob(Who("admin"), a);
  ASSERT_EQ(job["state"], "running") << job.dump();
  const int64_t start_ms = job["start_ms"].get<int64_t>();
  EXPECT_EQ(start_ms, 1'000'900);
  EXPECT_EQ(job["stop_at_ms"].get<int64_t>(), 1'011'000) << job.dump();
  now_ += 5'000;
  Reopen();
  job = *engine_->views().GetJob(Who("admin"), a);
  ASSERT_EQ(job["state"], "running") << job.dump();
  EXPECT_EQ(job["stop_at_ms"].get<int64_t>(), 1'011'000) << "counted again from the restart";
  now_ += 4'000;  // 1009.9 s
  Heartbeat("n1", {{"running", {{{"job", a}, {"pid", 7}}}}});
  ASSERT_TRUE(engine_->Tick().ok());
  EXPECT_EQ(State(a), "running") << "stopped before it ran 10 s";
  now_ += 1'100;  // 1011 s
  ASSERT_TRUE(engine_->Tick().ok());
  EXPECT_EQ(State(a), "preempting");
  ASSERT_TRUE(engine_->CheckInvariants().ok());
}

// idle_timeout (issue 37): a whole card its agent reports idle (no activity) for its queue's
// idle_timeout is given back, while another job waits for it: 'preempting' (the agent's cancel
// order) at that second, with the idle time in its reason, then pending again once its process
// is gone.
TEST_F(AgentFaultsTest, AnIdleWholeCardIsRequeuedThroughTheAgent) {
  std::string config = std::string(kConfig) + "idle_after: 5s\n";
  config.replace(config.find("requeue_on_loss: true}"), 22,
                 "requeue_on_loss: true, idle_timeout: 30s}");
  Start("agent-idle", config);
  ASSERT_TRUE(RegisterWith("n1", Json::object()).ok());
  const std::string a = RunOne();
  // Another job waits for the card (with none, an idle job is not given back: it would only be
  // placed there again).
  const std::string waits = (*engine_->Submit(
      Who("alice"), {{"queue", "training"}, {"command", {"sleep", "100"}}}))["id"];
  auto idle_beat = [&] {
    return Heartbeat("n1", {{"running", {{{"job", a}, {"pid", 7}, {"active", false}}}}});
  };
  now_ += 5'000;  // idle since its start: job.idle at 5 s; users are told what comes and when
  idle_beat();
  Json told = *engine_->views().GetJob(Who("alice"), a);
  EXPECT_EQ(told["idle_action"], "requeue") << told.dump();
  ASSERT_TRUE(told.contains("idle_action_at_ms")) << told.dump();
  EXPECT_EQ(told["idle_action_at_ms"].get<int64_t>(),
            told["activity"]["last_active_ms"].get<int64_t>() / 1000 * 1000 + 30'000)
      << told.dump();
  for (int s = 6; s < 30; ++s) {  // given back at 30 s
    now_ += 1'000;
    idle_beat();
    ASSERT_TRUE(engine_->Tick().ok());
    ASSERT_EQ(State(a), "running") << "given back early, at " << s << " s";
  }
  now_ += 1'000;
  idle_beat();
  ASSERT_TRUE(engine_->Tick().ok());
  Json job = *engine_->views().GetJob(Who("admin"), a);
  EXPECT_EQ(job["state"], "preempting") << job.dump();
  EXPECT_NE(job["reason"].get<std::string>().find("idle_timeout: idle 30s since"),
            std::string::npos)
      << job.dump();
  Json hb = idle_beat();
  ASSERT_EQ(hb["cancel"].size(), 1u) << hb.dump();
  EXPECT_EQ(hb["cancel"][0]["job"], a);
  Heartbeat("n1", {{"finished", {{{"job", a}, {"exit_code", 143}, {"signal", 15}}}}});
  EXPECT_EQ(State(a), "pending") << "an idle card is requeued, not ended";
  now_ += 1'000;
  ASSERT_TRUE(engine_->Tick().ok());
  EXPECT_EQ(State(waits), "placed") << "the waiting job gets the card";
  ASSERT_TRUE(engine_->CheckInvariants().ok());
}

TEST(RuntimeGuardConfig, AreDurationsOnAgentQueuesOnly) {
  std::string base = kConfig;
  auto with = [&](const std::string& extra) {
    std::string c = base;
    c.replace(c.find("requeue_on_loss: true}"), 22, "requeue_on_loss: true, " + extra + "}");
    return ParseConfig(c);
  };
  auto ok = with("max_runtime: 2h, min_runtime: 10m, preemption_delay: 1m");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->policy.queues[0].max_runtime_s, 7200);
  EXPECT_EQ(ok->policy.queues[0].min_runtime_s, 600);
  EXPECT_EQ(ok->policy.queues[0].preemption_delay_s, 60);
  auto bad = with("max_runtime: 500ms");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("max_runtime"), std::string::npos);
  auto batch = with("backend: slurm, max_runtime: 1h");
  ASSERT_FALSE(batch.ok());
  EXPECT_NE(batch.status().message().find("queues[training].max_runtime"), std::string::npos)
      << batch.status().message();
}

TEST(PartitionStopConfig, IsADurationOfAtLeastTheHeartbeatTimeout) {
  auto bad = ParseConfig(std::string(kConfig) + "partition_stop: 5s\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("partition_stop"), std::string::npos);
  auto good = ParseConfig(std::string(kConfig) + "partition_stop: 1m\n");
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->partition_stop_ms, 60'000);
  EXPECT_EQ(good->PartitionReleaseMs(), 60'000 + 10'000 + 10'000);
}

// Issue 33: the leader measured a node's silence on its wall clock. A step of the wall clock
// forward (an NTP step, a resumed VM) longer than the release time made every live node look
// silent: lost, its running jobs released (requeued) while they ran, and a start on its way given
// up as never confirmed. Silence is judged on the monotonic clock, which the step does not move.
TEST_F(AgentFaultsTest, AWallClockStepLongerThanTheReleaseTimeLosesNoNodeAndReleasesNoJob) {
  Start("agent-wall-step", std::string(kConfig) + "partition_stop: 20s\n");
  ASSERT_EQ(config_.PartitionReleaseMs(), 40'000);
  Register("n1", 2);
  auto submit = [&] {
    return (*engine_->Submit(Who("alice"),
                             {{"queue", "training"}, {"command", {"sleep", "100"}}}))["id"]
        .get<std::string>();
  };
  const std::string a = submit(), b = submit();
  ASSERT_EQ(Heartbeat("n1")["start"].size(), 2u);
  const Json running_a = {{"running", {{{"job", a}, {"pid", 7}}}}};
  Heartbeat("n1", running_a);  // b's start is on its way
  ASSERT_EQ(State(a), "running");
  ASSERT_EQ(State(b), "starting");

  now_ += 60'000;  // the wall clock steps 60 s forward; the leader passes, the agent heartbeats
  ASSERT_TRUE(engine_->Tick().ok());
  for (int s = 1; s <= 3; ++s) {
    Heartbeat("n1", running_a);
    Pass(1'000);
  }
  EXPECT_EQ(State(a), "running") << "a live node's job released after a step of the wall clock";
  EXPECT_EQ(State(b), "starting") << "a start on its way given up after a step of the wall clock";
  auto kinds = [&] {
    const Json events = (*engine_->views().Events(Who("admin"), 0, 1000, {}))["events"];
    std::set<std::string> k;
    for (const auto& e : events) k.insert(e["kind"]);
    return k;
  };
  EXPECT_EQ(kinds().count("node.lost"), 0u) << "a live node lost after a step of the wall clock";
  EXPECT_EQ(kinds().count("job.requeued"), 0u);

  // A real silence, on the monotonic clock, still loses the node at the heartbeat timeout and
  // releases its jobs at the release time.
  Heartbeat("n1", running_a);
  int lost_at = 0, released_at = 0;
  for (int s = 1; s <= 41 && released_at == 0; ++s) {
    Pass(1'000);
    if (lost_at == 0 && kinds().count("node.lost")) lost_at = s;
    if (State(a) != "running") released_at = s;
  }
  EXPECT_EQ(lost_at, 10);
  EXPECT_EQ(released_at, 40);
  EXPECT_EQ(State(a), "pending");  // requeued; no node to run it
  ASSERT_TRUE(engine_->CheckInvariants().ok());
}

}  // namespace
}  // namespace tessera::api
