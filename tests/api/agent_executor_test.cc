// AgentExecutor (api/agent_executor.h) on its own: registrations, heartbeats and liveness against
// a fake engine (a FakeAgentPort: a JobTable, a real quota engine for the nodes, a commit pipeline
// whose written sequence the test sets, a fake wall and monotonic clock), with no store, HTTP or
// writer thread around it. The served engine with real agents is driven end to end elsewhere
// (api_engine_tests, api_e2e_tests).
#include "api/agent_executor.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "part_fakes.h"

namespace tessera::api {
namespace {

using Json = nlohmann::json;

// The engine as the agents' executor sees it.
class FakeAgentPort final : public AgentPort {
 public:
  explicit FakeAgentPort(const EngineConfig& config) : qe(fakes::NewQuota(config)) {}
  std::unique_lock<std::mutex> Lock() override { return std::unique_lock<std::mutex>(mu); }
  JobTable& JobsToChange() override { return jobs; }
  quota::QuotaEngine& QuotaToChange() override { return *qe; }
  bool Transition(const Job& j, JobState to, JobCause cause) override {
    return fakes::Transition(jobs.Own(j), to, cause);
  }
  bool End(const Job& j, JobState state, JobCause cause, const std::string& reason) override {
    return fakes::End(jobs.Own(j), state, cause, reason);
  }
  void Translate(size_t mark, Batch&) override { translated.push_back(mark); }
  void WantCycle() override { ++cycles_wanted; }
  Status Commit(Batch& b, std::unique_lock<std::mutex>& lock) override {
    EXPECT_TRUE(lock.owns_lock());
    Queue(b);
    return Status::Ok();
  }
  int64_t NowMs() const override { return now_ms; }

  void SetSchedulable(const NodeInfo& n) override {
    schedulable.push_back(n.name);
    qe->SetNodeDown(n.name, n.lost);
  }
  int64_t Queue(Batch& b) override {
    if (b.empty()) return 0;
    for (const store::Event& e : b.events) queued.push_back(e.kind + " " + e.subject);
    b = Batch{};
    return ++last_queued;
  }
  int64_t LastQueued() override { return last_queued; }
  int64_t LastNews(const std::string&) override { return last_queued; }
  int64_t Durable() override { return durable; }
  void AnswerWhenDurable(Result<std::pair<Json, int64_t>> reply,
                         std::function<void(Result<Json>)> done) override {
    EXPECT_TRUE(mu.try_lock()) << "answered under the engine's lock";
    mu.unlock();
    if (!reply.ok()) return done(reply.status());
    answered_after.push_back(reply->second);
    done(std::move(reply->first));
  }
  Status Sync() override { return Status::Ok(); }
  Status Broken() override { return Status::Ok(); }
  Status Reload(const Status& cause) override {
    ++reloads;
    return cause;
  }
  Status SaveNode(const std::string& node, const std::string& inventory) override {
    const bool unlocked = mu.try_lock();
    if (unlocked) mu.unlock();
    EXPECT_TRUE(unlocked) << "the inventory was written under the engine's lock";
    if (!save_error.ok()) return save_error;
    saved[node] = inventory;
    return Status::Ok();
  }
  void Audit(const std::string&, const std::string& kind, const std::string& subject,
             const std::string&, Json) override {
    audited.push_back(kind + " " + subject);
  }
  int64_t Epoch() override { return 3; }
  OrderWatches& Watches() override { return watches; }

  std::mutex mu;
  JobTable jobs;
  std::unique_ptr<quota::QuotaEngine> qe;
  OrderWatches watches;
  int64_t now_ms = 1'000'000;
  int64_t last_queued = 0;
  int64_t durable = 0;
  int cycles_wanted = 0;
  int reloads = 0;
  Status save_error = Status::Ok();
  std::map<std::string, std::string> saved;
  std::vector<std::string> queued, audited, schedulable;  // "kind subject"
  std::vector<int64_t> answered_after;  // the batch each heartbeat's reply waited for
  std::vector<size_t> translated;       // the marks the quota engine's events were taken from
};

Identity Agent(const std::string& node) {
  Identity who;
  who.name = "agent-" + node;
  who.role = Role::kAgent;
  who.nodes = {node};
  return who;
}

Json Registration(const std::string& node) {
  return {{"node", node},
          {"cpu_milli", 16000},
          {"memory_mib", 65536},
          {"devices", {{{"index", 0}, {"model", "H100-80GB"}, {"memory_mib", 81920}}}}};
}

struct Rig {
  Rig() {
    config = fakes::Config(testing::ConfigBuilder().HeartbeatTimeout("10s"));
    auto owned = std::make_unique<FakeAgentPort>(config);
    port = owned.get();
    agents = std::make_unique<AgentExecutor>(std::move(owned), config, "/tmp");
    agents->SetMonotonicClockForTest([this] { return mono_ms; });
  }
  // A job the cycle placed on device 0 of `node`, by the batch numbered `seq`.
  Job& Placed(const std::string& node, int64_t seq) {
    Job j;
    j.rec.id = port->jobs.NewId();
    j.rec.queue = "training";
    j.state = JobState::kPlaced;
    j.spec = {{"command", {"true"}}};
    j.form = "whole";
    j.node = node;
    j.last_seq = seq;
    quota::GrantView g;
    g.node = node;
    g.device = 0;
    g.cpu = 1000;
    g.host_memory = 1024;
    j.grants.push_back(g);
    Job& in = port->jobs.Insert(std::move(j));
    port->jobs.Enter(in);
    return in;
  }
  Result<Json> Beat(const std::string& node, Json extra = Json::object()) {
    extra["node"] = node;
    return agents->Heartbeat(Agent(node), extra);
  }
  void PassAt(int64_t mono) {
    mono_ms = mono;
    auto lock = port->Lock();
    Batch b;
    agents->MarkLostLocked(b);
    port->Queue(b);
  }

  EngineConfig config;
  int64_t mono_ms = 0;
  FakeAgentPort* port;
  std::unique_ptr<AgentExecutor> agents;
};

TEST(AgentExecutor, ARegistrationIsWrittenOutsideTheLockBeforeTheNodeTakesWork) {
  Rig r;
  Result<Json> reply = r.agents->RegisterNode(Agent("n1"), Registration("n1"));
  ASSERT_TRUE(reply.ok()) << reply.status().message();
  EXPECT_EQ((*reply)["epoch"], 3);
  ASSERT_EQ(r.port->saved.count("n1"), 1u);
  EXPECT_EQ(Json::parse(r.port->saved["n1"])["devices"][0]["model"], "H100-80GB");
  ASSERT_EQ(r.agents->NodesLocked().count("n1"), 1u);
  EXPECT_EQ(r.agents->NodesLocked().at("n1").devices.size(), 1u);
  EXPECT_EQ(r.port->queued, std::vector<std::string>{"node.registered n1"});
  EXPECT_GT(r.port->cycles_wanted, 0);

  // A write that fails: the node is not taken, memory is rebuilt, and the agent hears why.
  r.port->save_error = Status::Internal("disk full");
  reply = r.agents->RegisterNode(Agent("n2"), Registration("n2"));
  EXPECT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().message(), "disk full");
  EXPECT_EQ(r.agents->NodesLocked().count("n2"), 0u);
  EXPECT_EQ(r.port->reloads, 1);
}

// The executor reads the quota engine through its port and changes it only by name: a device
// gone unhealthy preempts the job on it, and what the quota engine decided of that is taken into
// the heartbeat's own batch, after the device's event.
// A port that lends the registered nodes to change (as AgentPort::Nodes() once did).
template <class Port>
concept LendsNodes = requires(Port& p) {
  p.Nodes();
};

TEST(AgentExecutor, AnUnhealthyDevicesJobIsPreemptedInTheHeartbeatsBatch) {
  static_assert(
      std::is_same_v<decltype(std::declval<AgentPort&>().Quota()), const quota::QuotaEngine&>,
      "an executor's port lends the quota engine read only");
  // The jobs too: the agents' executor writes only its own side of a job (AgentSideOf), and the
  // job's state and record through the named calls.
  static_assert(std::is_same_v<decltype(std::declval<AgentPort&>().Jobs()), const JobTable&>,
                "an executor's port lends the jobs read only");
  static_assert(
      std::is_same_v<decltype(std::declval<AgentPort&>().AgentSideOf(std::declval<const Job&>())),
                     Job::AgentSide&>,
      "the agents' executor changes its own side of a job");
  static_assert(!LendsNodes<AgentPort>, "the registered nodes are the executor's own");
  Rig r;
  ASSERT_TRUE(r.agents->RegisterNode(Agent("n1"), Registration("n1")).ok());
  Job& j = r.Placed("n1", 0);
  j.spec["gpus"] = 1;
  j.rec.identity = "alice";
  auto handle = r.port->qe->Submit(QuotaSpecOf(j), 1000);
  ASSERT_TRUE(handle.ok()) << handle.status().message();
  j.handle = *handle;
  r.port->qe->RunCycle(1000);
  ASSERT_EQ(r.port->qe->job(j.handle).state, quota::JobState::kRunning);
  j.state = JobState::kRunning;
  const size_t before = r.port->qe->events().size();
  const int wanted = r.port->cycles_wanted;

  Result<Json> beat = r.Beat(
      "n1", {{"devices", {{{"index", 0}, {"health", "unhealthy"}, {"health_reason", "Xid 79"}}}}});
  ASSERT_TRUE(beat.ok()) << beat.status().message();
  ASSERT_EQ(r.port->translated, std::vector<size_t>{before});
  bool preempted = false;
  for (size_t i = before; i < r.port->qe->events().size(); ++i) {
    const quota::Event& e = r.port->qe->events()[i];
    preempted = preempted || (e.kind == quota::EventKind::kPreempted && e.job == j.rec.id);
  }
  EXPECT_TRUE(preempted) << "the quota engine did not preempt the job on the unhealthy device";
  EXPECT_GT(r.port->cycles_wanted, wanted);
  ASSERT_FALSE(r.port->queued.empty());
  EXPECT_EQ(r.port->queued.back(), "device.unhealthy n1:0");
}

TEST(AgentExecutor, AnAgentSpeakingForAnotherNodeIsRefusedAndAudited) {
  Rig r;
  ASSERT_TRUE(r.agents->RegisterNode(Agent("n1"), Registration("n1")).ok());
  ASSERT_TRUE(r.agents->RegisterNode(Agent("n2"), Registration("n2")).ok());
  Result<Json> beat = r.agents->Heartbeat(Agent("n1"), {{"node", "n2"}});
  EXPECT_EQ(beat.status().code(), StatusCode::kPermissionDenied);
  Result<Json> reg = r.agents->RegisterNode(Agent("n1"), Registration("n3"));
  EXPECT_EQ(reg.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(r.port->audited, (std::vector<std::string>{"agent.refused n2", "agent.refused n3"}));
  EXPECT_EQ(r.agents->NodesLocked().count("n3"), 0u);
  // A field the protocol does not name is refused before anything changes.
  Result<Json> odd = r.Beat("n1", {{"gpus", 8}});
  EXPECT_EQ(odd.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(odd.status().message().find("'gpus'"), std::string::npos);
}

TEST(AgentExecutor, AStartOrderGoesOutOnlyOnceItsPlacementIsDurable) {
  Rig r;
  ASSERT_TRUE(r.agents->RegisterNode(Agent("n1"), Registration("n1")).ok());
  Job& j = r.Placed("n1", r.port->last_queued + 1);
  r.port->durable = j.last_seq - 1;  // the placement is still on its way to the store
  Result<Json> reply = r.Beat("n1");
  ASSERT_TRUE(reply.ok()) << reply.status().message();
  EXPECT_TRUE((*reply)["start"].empty());
  EXPECT_EQ(j.state, JobState::kPlaced);

  r.port->durable = j.last_seq;
  reply = r.Beat("n1");
  ASSERT_TRUE(reply.ok());
  ASSERT_EQ((*reply)["start"].size(), 1u);
  EXPECT_EQ((*reply)["start"][0]["job"], j.rec.id);
  EXPECT_EQ((*reply)["start"][0]["devices"][0]["index"], 0);
  EXPECT_EQ((*reply)["start"][0]["env"]["TESSERA_QUEUE"], "training");
  EXPECT_EQ(j.state, JobState::kStarting);
  EXPECT_EQ(r.port->queued.back(), "job.starting " + j.rec.id);
}

TEST(AgentExecutor, AnExitIsAcknowledgedOnlyWithTheBatchThatRecordsIt) {
  Rig r;
  ASSERT_TRUE(r.agents->RegisterNode(Agent("n1"), Registration("n1")).ok());
  Job& j = r.Placed("n1", 1);
  ASSERT_TRUE(r.port->Transition(j, JobState::kStarting, JobCause::kStarted));
  r.port->durable = r.port->last_queued;
  ASSERT_TRUE(r.Beat("n1", {{"running", {{{"job", j.rec.id}, {"pid", 42}}}}}).ok());
  EXPECT_EQ(j.state, JobState::kRunning);
  EXPECT_EQ(j.agent.pid, 42);
  // A heartbeat with nothing to acknowledge waits for no write.
  EXPECT_EQ(r.port->answered_after.back(), 0);

  Result<Json> reply = r.Beat("n1", {{"finished", {{{"job", j.rec.id}, {"exit_code", 0}}}}});
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ((*reply)["ack"], Json::array({j.rec.id}));
  EXPECT_EQ(j.state, JobState::kSucceeded);
  EXPECT_EQ(r.port->queued.back(), "job.succeeded " + j.rec.id);
  EXPECT_EQ(r.port->answered_after.back(), r.port->last_queued);  // the batch with the exit
}

// A job that ends before any heartbeat lists it running (`echo hello` exits within the first
// heartbeat period) was never given a start: its view said neither when it started nor how long
// it ran. Its agent (protocol 5) says how long it ran by the node's monotonic clock (`run_ms`),
// and the job starts that long before its end; no earlier than its submission. An agent that
// says nothing (protocol 4 or older) leaves the start unknown, and a start the running report
// gave is kept.
TEST(AgentExecutor, AJobThatEndsBeforeItsFirstRunningReportStartsAsLongAgoAsItRan) {
  Rig r;
  ASSERT_TRUE(r.agents->RegisterNode(Agent("n1"), Registration("n1")).ok());
  const auto ended = [&](Json entry, int64_t start_ms = 0, int64_t submit_ms = 0) -> Job& {
    Job& j = r.Placed("n1", r.port->last_queued + 1);
    j.rec.submit_ms = submit_ms;
    j.start_ms = start_ms;
    EXPECT_TRUE(r.port->Transition(j, JobState::kStarting, JobCause::kStarted));
    r.port->durable = r.port->last_queued = j.last_seq;
    entry["job"] = j.rec.id;
    entry["exit_code"] = 0;
    Result<Json> reply = r.Beat("n1", {{"finished", {entry}}});
    EXPECT_TRUE(reply.ok()) << reply.status().message();
    EXPECT_EQ(j.state, JobState::kSucceeded);
    return j;
  };
  EXPECT_EQ(ended({{"run_ms", 1500}}).start_ms, r.port->now_ms - 1500);
  EXPECT_EQ(ended({{"run_ms", 0}}).start_ms, r.port->now_ms);
  EXPECT_EQ(ended(Json::object()).start_ms, 0);  // an older agent: not known
  EXPECT_EQ(ended({{"run_ms", 1500}}, /*start_ms=*/999'000).start_ms, 999'000);
  EXPECT_EQ(ended({{"run_ms", 5'000'000}}, 0, /*submit_ms=*/990'000).start_ms, 990'000);

  // A run_ms that is not a non-negative integer is refused, named, and nothing changes.
  for (const Json& bad : {Json(-1), Json("1500"), Json(1.5)}) {
    Job& j = r.Placed("n1", r.port->last_queued + 1);
    ASSERT_TRUE(r.port->Transition(j, JobState::kStarting, JobCause::kStarted));
    Result<Json> reply =
        r.Beat("n1", {{"finished", {{{"job", j.rec.id}, {"exit_code", 0}, {"run_ms", bad}}}}});
    ASSERT_FALSE(reply.ok()) << bad.dump();
    EXPECT_NE(reply.status().message().find("finished.run_ms"), std::string::npos)
        << reply.status().message();
    EXPECT_EQ(j.state, JobState::kStarting);
    EXPECT_EQ(j.start_ms, 0);
  }
}

TEST(AgentExecutor, ASilentNodeIsLostButNotForTheLeadersOwnStall) {
  Rig r;
  ASSERT_TRUE(r.agents->RegisterNode(Agent("n1"), Registration("n1")).ok());
  // The leader stalls for 19 s (no pass): the silence is its own; the node gets a fresh window.
  r.PassAt(1'000);
  r.PassAt(20'000);
  EXPECT_FALSE(r.agents->NodesLocked().at("n1").lost);
  EXPECT_EQ(r.port->queued.back(), "leader.stalled cluster");
  r.PassAt(24'000);
  r.PassAt(28'000);
  EXPECT_FALSE(r.agents->NodesLocked().at("n1").lost);  // 8 s into its window
  // Passes every 4 s, and still no heartbeat: lost once the window is 10 s old.
  r.PassAt(30'000);
  EXPECT_TRUE(r.agents->NodesLocked().at("n1").lost);
  EXPECT_EQ(r.port->queued.back(), "node.lost n1");
  // A heartbeat brings it back.
  ASSERT_TRUE(r.Beat("n1").ok());
  EXPECT_FALSE(r.agents->NodesLocked().at("n1").lost);
  EXPECT_EQ(r.port->queued.back(), "node.returned n1");
}

}  // namespace
}  // namespace tessera::api
