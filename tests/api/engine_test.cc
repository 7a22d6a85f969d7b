// The engine against a real SQLite store in a temporary directory, with an injected clock.
#include "api/engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "engine_fixture.h"
#include "model/agent_protocol.h"
#include "test_dir.h"

namespace tessera::api {
namespace {

const char* kConfig = R"(
heartbeat_timeout: 10s
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: bob, role: user, groups: [prod], token: bob-token-12}
  - {name: agent, role: agent, token: agent-token-1}
  - {name: rack1, role: agent, nodes: [r1-*], token: rack1-token-1}
  - {name: carol, role: user, groups: [research], token: carol-token-1}
groups:
  - {name: research, reservation: {gpu: 1}, limit: {gpu: 2}}
  - {name: prod}
profiles:
  - {name: nb, gpus: 1, gpu_fraction: 0.1, gpu_memory: 8GiB, max_gpu_memory: 40GiB, cpu: 1, memory: 1GiB, forms: [share]}
  - {name: train, gpus: 1, max_gpus: 4, cpu: 1, memory: 1GiB, forms: [whole]}
queues:
  - {name: notebooks, profile: nb, groups: [research], priority: 10, class: interactive}
  - {name: training, profile: train, groups: [research, prod], class: training, requeue_on_loss: true}
  - {name: fragile, profile: train, groups: [research], requeue_on_loss: false}
)";

class EngineTest : public testing::EngineFixture {
 protected:
  void SetUp() override { Start("engine", kConfig); }
  Json Submit(const std::string& who, Json body) {
    auto r = engine_->Submit(Who(who), body);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : Json();
  }
  Json Heartbeat(const std::string& node, Json extra = Json::object()) {
    extra["node"] = node;
    auto r = engine_->Heartbeat(Who("agent"), extra);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : Json();
  }
  std::string State(const std::string& id) { return (*engine_->GetJob(Who("admin"), id))["state"]; }
};

TEST_F(EngineTest, ConfigErrorsNameTheField) {
  struct Case {
    std::string yaml, want;
  };
  const std::string id = "identities: [{name: a, token: aaaaaaaaaa}]\n";
  const std::string pq = "profiles: [{name: p}]\nqueues: [{name: q, profile: p, groups: [g]}]\n";
  const Case cases[] = {
      {"identities: []", "identities: at least one identity"},
      {"identities: [{name: a, token: short}]", "identities[0].token: too short"},
      {"identities: [{name: a, token_sha256: " + std::string(64, 'g') + "}]",
       "identities[0].token_sha256: expected 64 hex digits"},
      {"identities: [{name: a, role: root, token: aaaaaaaaaa}]",
       "identities[0].role: unknown role 'root'"},
      {"identities: [{name: a, token: aaaaaaaaaa, groups: [x]}]\ngroups: [{name: g}]\n" + pq,
       "identities[0].groups: unknown group 'x'"},
      {id + "groups: [{name: g}]\nprofiles: [{name: p, forms: [share]}]\nqueues: [{name: q, "
            "profile: p, groups: [g]}]",
       "profiles[p].gpu_memory: a share needs a memory cap"},
      {id + "groups: [{name: g}]\nprofiles: [{name: p, forms: [whole]}]\nqueues: [{name: q, "
            "profile: nope, groups: [g]}]",
       "queues[q].profile 'nope' is not a profile"},
      {id + "groups: [{name: g, reservation: {gpu: 4}, limit: {gpu: 2}}]\n" + pq,
       "groups[g].reservation.gpu exceeds its limit"},
      {id + "groups: [{name: g, limit: {gpu: lots}}]\n" + pq, "groups[g].limit.gpu"},
      {id + "groups: [{name: g}]\n" + pq + "bogus: 1", "unknown key 'bogus'"},
      {id + "groups: [{name: g}]\nprofiles: [{name: p, gpu_fraction: 2}]\nqueues: [{name: q, "
            "profile: p, groups: [g]}]",
       "profiles[p].gpu_fraction must be a fraction of at most 1"},
      {id + "groups: [{name: g}]\n" + pq + "class_forms: {training: [slices]}",
       "class_forms.training"},
      {id + "groups: [{name: g}]\nprofiles: [{name: p}]\nqueues: [{name: q, profile: p, groups: "
            "[g], backend: lsf}]",
       "queues[q].backend: unknown backend 'lsf'"},
      {id, "queues: at least one queue"},
      {id + "groups: [{name: g}]\nprofiles: [{name: p}]\nqueues: [{name: q, profile: p, groups: "
            "[g], priority: high}]",
       "queues[q].priority"},
      {id + "backend_nice: 20", "backend_nice: must be an integer from 0 to 19"},
      {id + "backend_nice: low", "backend_nice: must be an integer from 0 to 19"},
      {id + "utilization_sample: 0s", "utilization_sample: must be positive"},
      {"{{{", "not valid YAML"},
      {id + "groups: [{name: g}]\nprofiles: [{name: p}]\nqueues: [{name: q, profile: p, groups: "
            "[g], overcommit: 2}]",
       "queues[q].overcommit: needs swap: true"},
      {id + "groups: [{name: g}]\nprofiles: [{name: p}]\nqueues: [{name: q, profile: p, groups: "
            "[g], swap: true, overcommit: 0.5}]",
       "queues[q].overcommit: must be from 1 to 10"},
      {id + "groups: [{name: g}]\nprofiles: [{name: p}]\nqueues: [{name: q, profile: p, groups: "
            "[g], swap: true, overcommit: 1.234}]",
       "queues[q].overcommit: expected a factor such as 2 or 1.5"},
      {id + "groups: [{name: g}]\nprofiles: [{name: p}]\nqueues: [{name: q, profile: p, groups: "
            "[g], swap: maybe}]",
       "queues[q].swap"},
      {id + "groups: [{name: g}]\nprofiles: [{name: p}]\nqueues: [{name: q, profile: p, groups: "
            "[g], backend: slurm, swap: true}]",
       "queues[q].swap: only for queues run by node agents"},
  };
  for (const Case& c : cases) {
    auto r = ParseConfig(c.yaml);
    ASSERT_FALSE(r.ok()) << c.yaml;
    EXPECT_NE(r.status().message().find(c.want), std::string::npos)
        << r.status().message() << "\nwant: " << c.want;
  }
}

// `swap: true` with an overcommit factor reaches the quota policy as whole percent.
TEST_F(EngineTest, SwapQueuesCarryTheirOvercommit) {
  const std::string base =
      "identities: [{name: a, token: aaaaaaaaaa}]\ngroups: [{name: g}]\n"
      "profiles: [{name: p, forms: [share], gpu_memory: 8GiB}]\n";
  for (auto [queue, want] : std::initializer_list<std::pair<std::string, int>>{
           {"{name: q, profile: p, groups: [g]}", 0},
           {"{name: q, profile: p, groups: [g], swap: false}", 0},
           {"{name: q, profile: p, groups: [g], swap: true}", 200},
           {"{name: q, profile: p, groups: [g], swap: true, overcommit: 1.5}", 150},
           {"{name: q, profile: p, groups: [g], swap: true, overcommit: \"3\"}", 300}}) {
    auto r = ParseConfig(base + "queues: [" + queue + "]\n");
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->policy.queues[0].swap_overcommit_percent, want) << queue;
    EXPECT_EQ(r->FindRoute("q")->swap_overcommit_percent, want) << queue;
  }
}

TEST_F(EngineTest, BadSubmissionsAreRefusedAndChangeNothing) {
  Register("n1", 2);
  struct Case {
    std::string who;
    Json body;
    StatusCode code;
    std::string want;
  };
  const Case cases[] = {
      {"alice", {{"command", {"true"}}}, StatusCode::kInvalidArgument, "'queue' is required"},
      {"alice",
       {{"queue", "nope"}, {"command", {"true"}}},
       StatusCode::kInvalidArgument,
       "unknown queue 'nope'"},
      {"alice", {{"queue", "notebooks"}}, StatusCode::kInvalidArgument, "'command' is required"},
      {"alice",
       {{"queue", "notebooks"}, {"command", Json::array()}},
       StatusCode::kInvalidArgument,
       "must not be empty"},
      {"alice",
       {{"queue", "notebooks"}, {"command", {"true"}}, {"gpu_memory", "99GiB"}},
       StatusCode::kInvalidArgument,
       "allows at most 40GiB of GPU memory"},
      {"alice",
       {{"queue", "notebooks"}, {"command", {"true"}}, {"gpu_memory", "8"}},
       StatusCode::kInvalidArgument,
       "needs a unit"},
      {"alice",
       {{"queue", "training"}, {"command", {"true"}}, {"gpus", 9}},
       StatusCode::kInvalidArgument,
       "allows at most 4 GPUs"},
      {"alice",
       {{"queue", "notebooks"}, {"command", {"true"}}, {"form", "whole"}},
       StatusCode::kInvalidArgument,
       "form whole is not allowed for class interactive"},
      {"alice",
       {{"queue", "notebooks"}, {"command", {"true"}}, {"colour", "red"}},
       StatusCode::kInvalidArgument,
       "unknown field 'colour'"},
      {"bob",
       {{"queue", "notebooks"}, {"command", {"true"}}},
       StatusCode::kPermissionDenied,
       "may not submit"},
      {"alice",
       {{"queue", "training"}, {"command", {"true"}}, {"group", "prod"}},
       StatusCode::kPermissionDenied,
       "as group 'prod'"},
      {"agent",
       {{"queue", "notebooks"}, {"command", {"true"}}},
       StatusCode::kPermissionDenied,
       "agents cannot"},
      // Environment names are written into batch scripts: only shell names.
      {"alice",
       {{"queue", "notebooks"}, {"command", {"true"}}, {"env", {{"X=1; rm -rf /; Y", "v"}}}},
       StatusCode::kInvalidArgument,
       "is not a variable name"},
      {"alice",
       {{"queue", "notebooks"}, {"command", {"true"}}, {"env", {{"A B", "v"}}}},
       StatusCode::kInvalidArgument,
       "'A B' is not a variable name"},
      {"alice",
       {{"queue", "notebooks"}, {"command", {"true"}}, {"env", {{"9A", "v"}}}},
       StatusCode::kInvalidArgument,
       "is not a variable name"},
      {"alice",
       {{"queue", "notebooks"}, {"command", {"true"}}, {"env", {{"A", 1}}}},
       StatusCode::kInvalidArgument,
       "the value of 'A' must be a string"},
      {"alice",
       {{"queue", "notebooks"}, {"command", Json(std::vector<std::string>(4097, "x"))}},
       StatusCode::kInvalidArgument,
       "more than 4096 arguments"},
      {"alice",
       {{"queue", "notebooks"}, {"command", {"true"}}, {"cpu", "9223372036854775807m"}},
       StatusCode::kInvalidArgument,
       "above 2^40"},
      {"alice",
       {{"queue", "notebooks"}, {"command", {"true"}}, {"walltime", int64_t{1} << 62}},
       StatusCode::kInvalidArgument,
       "ten years"},
  };
  for (const Case& c : cases) {
    auto r = engine_->Submit(Who(c.who), c.body);
    ASSERT_FALSE(r.ok()) << c.body.dump();
    EXPECT_EQ(r.status().code(), c.code) << c.body.dump();
    EXPECT_NE(r.status().message().find(c.want), std::string::npos) << r.status().message();
  }
  EXPECT_TRUE((*engine_->ListJobs(Who("admin"), "", 100))["jobs"].empty());
  auto ev = engine_->Events(Who("admin"), 0, 100, {});
  for (const auto& e : (*ev)["events"]) EXPECT_NE(e["kind"], "job.submitted");
}

// Versions (docs/agent-protocol.md): a registration without `protocol` is version 1 (an agent of
// the release before versions) and is served, as is the current version; a version outside the
// served range is refused (409) naming both the agent's version and the range, and the node is
// not registered.
TEST_F(EngineTest, AgentProtocolVersionsOutsideTheServedRangeAreRefused) {
  auto reg = [&](const std::string& node, const Json& protocol) {
    Json body = {{"node", node}, {"cpu_milli", 1000}, {"memory_mib", 1024}};
    if (!protocol.is_null()) body["protocol"] = protocol;
    return engine_->RegisterNode(Who("agent"), body);
  };
  auto missing = reg("old", nullptr);
  EXPECT_TRUE(missing.ok()) << missing.status().ToString();
  auto current = reg("current", kAgentProtocolVersion);
  EXPECT_TRUE(current.ok()) << current.status().ToString();
  auto oldest = reg("oldest", kAgentProtocolMinServed);
  EXPECT_TRUE(oldest.ok()) << oldest.status().ToString();

  auto too_new = reg("new", 7);
  ASSERT_FALSE(too_new.ok());
  EXPECT_EQ(too_new.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(too_new.status().message(),
            "agent protocol 7 is not served by this server (it serves 1-" +
                std::to_string(kAgentProtocolVersion) + "); upgrade the server");

  auto too_old = reg("ancient", 0);
  ASSERT_FALSE(too_old.ok());
  EXPECT_EQ(too_old.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(too_old.status().message(),
            "agent protocol 0 is not served by this server (it serves 1-" +
                std::to_string(kAgentProtocolVersion) + "); upgrade the agent");

  auto huge = reg("huge", uint64_t{1} << 63);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("upgrade the server"), std::string::npos);
  auto typed = reg("typed", "2");
  ASSERT_FALSE(typed.ok());
  EXPECT_EQ(typed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(typed.status().message().find("'protocol'"), std::string::npos);

  std::set<std::string> names;
  const Json nodes = *engine_->Nodes(Who("admin"));
  for (const auto& n : nodes["nodes"]) names.insert(n["name"].get<std::string>());
  EXPECT_EQ(names, (std::set<std::string>{"old", "current", "oldest"}));
}

// Agents' messages are checked whole before anything changes: wrong types, unknown fields,
// numbers no machine has, an inventory the scheduler cannot hold; each answer names the field.
TEST_F(EngineTest, BadAgentMessagesAreRefusedAndChangeNothing) {
  Register("n1", 1);
  const std::string id = Submit("alice", {{"queue", "training"}, {"command", {"true"}}})["id"];
  Heartbeat("n1");
  ASSERT_EQ(State(id), "starting");
  const Json dev = {{"index", 0}, {"model", "H100-80GB"}, {"memory_mib", 81920}, {"uuid", "u"}};
  auto reg = [&](Json body) { return engine_->RegisterNode(Who("agent"), body); };
  const std::pair<Json, std::string> bad_registrations[] = {
      {{{"node", "n2"}, {"cpu_milli", "lots"}, {"memory_mib", 1024}}, "'cpu_milli'"},
      {{{"node", "n2"}, {"cpu_milli", 1000}, {"memory_mib", uint64_t{1} << 63}}, "'memory_mib'"},
      {{{"node", "n2"}, {"cpu_milli", 1000}, {"memory_mib", 1024}, {"gpus", 8}},
       "unknown field 'gpus'"},
      {{{"node", "n2"},
        {"cpu_milli", 1000},
        {"memory_mib", 1024},
        {"devices", {{{"index", 0}, {"model", "H100-80GB"}, {"memory_mib", -1}}}}},
       "'memory_mib'"},
      {{{"node", "n2"},
        {"cpu_milli", 1000},
        {"memory_mib", 1024},
        {"devices", {dev, {{"index", 1}, {"model", "A100-80GB"}, {"memory_mib", 81920}}}}},
       "mixes GPU models"},
      {{{"node", "n2"}, {"cpu_milli", 1000}, {"memory_mib", 1024}, {"running", {{{"job", 7}}}}},
       "string 'job'"},
  };
  for (const auto& [body, want] : bad_registrations) {
    auto r = reg(body);
    ASSERT_FALSE(r.ok()) << body.dump();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << body.dump();
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
  }
  const std::pair<Json, std::string> bad_heartbeats[] = {
      {{{"node", "n1"}, {"finished", {{{"job", id}, {"exit_code", "zero"}}}}},
       "'finished.exit_code'"},
      {{{"node", "n1"}, {"running", {{{"job", id}, {"pid", 1.5}}}}}, "'running.pid'"},
      {{{"node", "n1"}, {"running", "all"}}, "'running' must be a list"},
      {{{"node", "n1"}, {"finished", {{{"job", id}, {"exit_code", 0}, {"colour", 1}}}}},
       "unknown field 'colour'"},
      {{{"node", "n1"}, {"status", "fine"}}, "unknown field 'status'"},
      {{{"node", "n1"}, {"finished", {{{"job", id}, {"exit_code", int64_t{4294967296}}}}}},
       "'finished.exit_code' is out of range"},
      {{{"node", "n1"},
        {"finished", {{{"job", id}, {"exit_code", 0}, {"signal", uint64_t{1} << 63}}}}},
       "'finished.signal' is out of range"},
  };
  for (const auto& [body, want] : bad_heartbeats) {
    auto r = engine_->Heartbeat(Who("agent"), body);
    ASSERT_FALSE(r.ok()) << body.dump();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << body.dump();
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
  }
  // Nothing changed: n2 never joined, the job still starts on n1, and the scheduler still works.
  EXPECT_EQ((*engine_->Nodes(Who("admin")))["nodes"].size(), 1u);
  EXPECT_EQ(State(id), "starting");
  EXPECT_TRUE(engine_->CheckInvariants().ok());
  Reopen();
  EXPECT_EQ(State(id), "starting");
}

// An agent credential bound to its nodes (`nodes: [r1-*]`) registers, heartbeats and uploads
// output for those only; anything else is refused (403) and changes nothing.
TEST_F(EngineTest, AnAgentSpeaksOnlyForItsNodes) {
  const Identity& rack = Who("rack1");
  Json devs =
      Json::array({{{"index", 0}, {"model", "H100-80GB"}, {"memory_mib", 81920}, {"uuid", "u0"}}});
  Json inv = {{"cpu_milli", 8000}, {"memory_mib", 65536}, {"devices", devs}};
  inv["node"] = "r1-a";
  ASSERT_TRUE(engine_->RegisterNode(rack, inv).ok());
  inv["node"] = "r2-a";
  auto other = engine_->RegisterNode(rack, inv);
  ASSERT_EQ(other.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(other.status().message().find("may not register for node 'r2-a'"), std::string::npos);
  Register("n1", 1);  // by the unbound agent identity
  // A job on n1: rack1 may not heartbeat as n1 (and learn its orders), report it, or write its
  // output.
  Json j = Submit("alice", {{"queue", "training"}, {"command", {"true"}}});
  ASSERT_EQ(j["state"], "placed") << j.dump();
  const std::string node = j["placement"]["node"];
  const std::string id = j["id"];
  auto hb =
      engine_->Heartbeat(rack, {{"node", node}, {"finished", {{{"job", id}, {"exit_code", 0}}}}});
  EXPECT_EQ(hb.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(State(id), "placed") << "a refused heartbeat changed the job";
  EXPECT_EQ(engine_->WriteOutput(rack, id, 0, "forged").code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(engine_->Heartbeat(rack, {{"node", "r1-a"}}).ok());
  EXPECT_TRUE(engine_->WriteOutput(Who("agent"), id, 0, "real").ok());
  // Uploads continue where the stored bytes end (or repeat them); one past the end is refused.
  const Status hole = engine_->WriteOutput(Who("agent"), id, 1000, "later");
  EXPECT_EQ(hole.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(hole.message().find("continues at byte 4, not 1000"), std::string::npos)
      << hole.message();
  EXPECT_TRUE(engine_->WriteOutput(Who("agent"), id, 2, "al").ok());   // a repeat
  EXPECT_TRUE(engine_->WriteOutput(Who("agent"), id, 4, "!\n").ok());  // the next bytes
  // Output has a ceiling.
  EXPECT_EQ(engine_->WriteOutput(Who("agent"), id, config_.max_output_bytes, "x").code(),
            StatusCode::kResourceExhausted);
  // Each refused claim is in the audit trail: who, for which node, doing what.
  ASSERT_TRUE(engine_->Tick().ok());  // after a commit, the queued audit events are durable
  auto ev = engine_->Events(Who("admin"), 0, 1000, {"agent.refused", "", ""});
  ASSERT_TRUE(ev.ok());
  std::set<std::string> actions;
  for (const auto& e : (*ev)["events"]) {
    EXPECT_EQ(e["actor"], "rack1");
    actions.insert(e["data"]["action"].get<std::string>() + "@" + e["subject"].get<std::string>());
  }
  EXPECT_EQ(actions,
            (std::set<std::string>{"register@r2-a", "heartbeat@" + node, "upload output@" + node}));
}

TEST(ConfigHeartbeats, TheIntervalIsToldToAgentsAndFitsTheTimeout) {
  auto c = ParseConfig("heartbeat_interval: 5s\nheartbeat_timeout: 20s\n" +
                       std::string(kConfig).substr(std::string(kConfig).find("identities:")));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->heartbeat_interval_ms, 5000);
  auto bad = ParseConfig("heartbeat_interval: 6s\n" + std::string(kConfig));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("heartbeat_interval"), std::string::npos)
      << bad.status().message();
}

TEST(ConfigNodes, OnlyAgentsSpeakForNodesAndPatternsAreChecked) {
  const std::string alice = "role: user, groups: [research], token: alice-token-1";
  auto user = ParseConfig(std::string(kConfig).replace(
      std::string(kConfig).find(alice), alice.size(),
      "role: user, nodes: [x], groups: [research], token: alice-token-1"));
  ASSERT_FALSE(user.ok());
  EXPECT_NE(user.status().message().find("only agents speak for nodes"), std::string::npos)
      << user.status().message();
  auto bad =
      ParseConfig(std::string(kConfig).replace(std::string(kConfig).find("[r1-*]"), 6, "[r*1]"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'r*1' is not a node name or a prefix"), std::string::npos)
      << bad.status().message();
}

// Group members see each other's jobs but not their environment (secrets), and only the owner
// (or an admin) cancels a job.
TEST_F(EngineTest, AGroupMateSeesNoSecretsAndCannotCancel) {
  Json j = Submit("alice",
                  {{"queue", "training"}, {"command", {"true"}}, {"env", {{"API_KEY", "s3cret"}}}});
  const std::string id = j["id"];
  EXPECT_EQ(j["spec"]["env"]["API_KEY"], "s3cret");  // the owner's own reply
  auto seen = engine_->GetJob(Who("carol"), id);
  ASSERT_TRUE(seen.ok());
  EXPECT_EQ((*seen)["spec"]["env"]["API_KEY"], "(hidden)") << seen->dump();
  auto listed = engine_->ListJobs(Who("carol"), "", 10);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->dump().find("s3cret"), std::string::npos) << listed->dump();
  EXPECT_EQ((*engine_->GetJob(Who("admin"), id))["spec"]["env"]["API_KEY"], "s3cret");
  auto c = engine_->Cancel(Who("carol"), id);
  EXPECT_EQ(c.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(State(id), "cancelled");
  EXPECT_TRUE(engine_->Cancel(Who("alice"), id).ok());
  // Arguments marked secret are hidden from the group too; a bad index is refused.
  Json s = Submit("alice", {{"queue", "training"},
                            {"command", {"login", "--password", "hunter2"}},
                            {"secret_args", {2}}});
  EXPECT_EQ(s["spec"]["command"][2], "hunter2");
  const Json seen_s = *engine_->GetJob(Who("carol"), s["id"]);
  EXPECT_EQ(seen_s["spec"]["command"], Json({"login", "--password", "(hidden)"}));
  EXPECT_EQ(engine_->ListJobs(Who("carol"), "", 10)->dump().find("hunter2"), std::string::npos);
  auto bad = engine_->Submit(Who("alice"),
                             {{"queue", "training"}, {"command", {"true"}}, {"secret_args", {1}}});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  // A group that says members_cancel lets a member cancel another's job.
  for (auto& g : config_.policy.groups) g.members_cancel = g.name == "research";
  Reopen();
  EXPECT_TRUE(engine_->Cancel(Who("carol"), s["id"]).ok());
}

TEST_F(EngineTest, AuthorizationMatrix) {
  Register("n1", 4);
  std::string a = Submit("alice", {{"queue", "training"}, {"command", {"true"}}})["id"];
  std::string b = Submit("bob", {{"queue", "training"}, {"command", {"true"}}})["id"];
  // who -> can see/cancel alice's job, bob's job; may list nodes; may register a node
  struct Row {
    std::string who;
    bool see_a, see_b, nodes, register_node;
  };
  const Row rows[] = {{"admin", true, true, true, true},
                      {"alice", true, false, true, false},
                      {"bob", false, true, true, false},
                      {"agent", false, false, false, true}};
  for (const Row& r : rows) {
    EXPECT_EQ(engine_->GetJob(Who(r.who), a).ok(), r.see_a) << r.who;
    EXPECT_EQ(engine_->GetJob(Who(r.who), b).ok(), r.see_b) << r.who;
    EXPECT_EQ(engine_->JobOutput(Who(r.who), a).ok(), r.see_a) << r.who;
    EXPECT_EQ(engine_->Nodes(Who(r.who)).ok(), r.nodes) << r.who;
    EXPECT_EQ(engine_->Summary(Who(r.who)).ok(), r.nodes) << r.who;
    auto reg = engine_->RegisterNode(
        Who(r.who), {{"node", "x-" + r.who}, {"cpu_milli", 1000}, {"memory_mib", 1024}});
    EXPECT_EQ(reg.ok(), r.register_node) << r.who;
    if (!reg.ok()) {
      EXPECT_EQ(reg.status().code(), StatusCode::kPermissionDenied);
    }
    auto hb = engine_->Heartbeat(Who(r.who), {{"node", "n1"}});
    EXPECT_EQ(hb.ok(), r.register_node) << r.who;
    auto listed = engine_->ListJobs(Who(r.who), "", 100);
    if (r.who == "agent") {
      EXPECT_FALSE(listed.ok());
    } else {
      ASSERT_TRUE(listed.ok());
      size_t want = (r.see_a ? 1 : 0) + (r.see_b ? 1 : 0);
      EXPECT_EQ((*listed)["jobs"].size(), want) << r.who;
    }
  }
  // Cancel follows visibility: bob cannot cancel alice's job (it looks absent to him).
  auto c = engine_->Cancel(Who("bob"), a);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(engine_->Cancel(Who("alice"), a).ok());
  // Queues: bob sees training only; alice sees all three.
  EXPECT_EQ((*engine_->Queues(Who("bob")))["queues"].size(), 1u);
  EXPECT_EQ((*engine_->Queues(Who("alice")))["queues"].size(), 3u);
}

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
  ASSERT_TRUE(engine_->WriteOutput(Who("agent"), id, 0, "hi\n").ok());
  hb = Heartbeat("n1", {{"finished", {{{"job", id}, {"exit_code", 0}}}}});
  EXPECT_EQ(hb["ack"], Json::array({id}));
  EXPECT_EQ(State(id), "succeeded");
  EXPECT_EQ(engine_->JobOutput(Who("alice"), id)->bytes, "hi\n");
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
  config_.max_output_bytes = 10;
  Reopen();
  Register("n1", 1);
  const std::string id =
      Submit("alice", {{"queue", "notebooks"}, {"command", {"yes"}}, {"gpu_memory", "8GiB"}})["id"];
  Heartbeat("n1");
  ASSERT_TRUE(engine_->WriteOutput(Who("agent"), id, 0, "0123456").ok());
  // The part below the cap is kept, the rest refused.
  ASSERT_TRUE(engine_->WriteOutput(Who("agent"), id, 7, "789abc").ok());
  EXPECT_EQ(engine_->WriteOutput(Who("agent"), id, 10, "d").code(), StatusCode::kResourceExhausted);
  auto all = engine_->JobOutput(Who("alice"), id);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->bytes, "0123456789");
  EXPECT_EQ(all->total, 10);
  auto mid = engine_->JobOutput(Who("alice"), id, 3, 4);
  EXPECT_EQ(mid->bytes, "3456");
  EXPECT_EQ(mid->offset, 3);
  EXPECT_EQ(engine_->JobOutput(Who("alice"), id, 20, 4)->bytes, "");
  EXPECT_EQ(engine_->JobOutput(Who("alice"), id, -1, 4).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->JobOutput(Who("bob"), id).status().code(), StatusCode::kNotFound);
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
  Json sixth = *engine_->GetJob(Who("alice"), ids[5]);
  EXPECT_EQ(sixth["state"], "pending");
  EXPECT_EQ(sixth["wait"]["step"], "Placement") << sixth.dump();
  EXPECT_NE(sixth["reason"].get<std::string>().find("no room for 1 x share"), std::string::npos)
      << sixth["reason"];
  Json nodes = *engine_->Nodes(Who("admin"));
  EXPECT_EQ(nodes["nodes"][0]["devices"][0]["gpu_memory_mib_used"], 5 * 16384);
  EXPECT_EQ(nodes["nodes"][0]["devices"][0]["holders"].size(), 5u);
  EXPECT_EQ(nodes["nodes"][0]["devices"][0]["holders"][0]["identity"], "alice");
  // The research group's limit is 2 GPUs: whole-device training waits on the limit.
  Register("n2", 4);
  std::string t =
      Submit("alice", {{"queue", "training"}, {"command", {"true"}}, {"gpus", 2}})["id"];
  Json tj = *engine_->GetJob(Who("alice"), t);
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
  now_ += 11'000;  // past the heartbeat timeout
  ASSERT_TRUE(engine_->Tick().ok());
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
  now_ += 5'000;
  Heartbeat("n1");  // n1 stays alive
  now_ += 6'000;
  Heartbeat("n1");
  ASSERT_TRUE(engine_->Tick().ok());
  EXPECT_EQ(State(f), "lost");
  auto events =
      (*engine_->Events(Who("admin"), 0, 1000, store::EventFilter{"node.", "", ""}))["events"];
  bool lost = false, returned = false;
  for (const auto& e : events) {
    lost = lost || e["kind"] == "node.lost";
    returned = returned || e["kind"] == "node.returned";
  }
  EXPECT_TRUE(lost && returned);
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
  Json before = *engine_->Nodes(Who("admin"));
  Reopen();
  ASSERT_TRUE(engine_->CheckInvariants().ok());
  for (const auto& id : ids) EXPECT_TRUE(engine_->GetJob(Who("admin"), id).ok());
  EXPECT_EQ(State(ids[2]), "pending");
  ASSERT_TRUE(engine_->Tick().ok());
  EXPECT_EQ(State(ids[2]), "pending") << "nothing freed, nothing placed twice";
  Json after = *engine_->Nodes(Who("admin"));
  EXPECT_EQ(before["nodes"][0]["devices"], after["nodes"][0]["devices"]);
  // New ids continue after the old ones.
  std::string next = Submit("alice", {{"queue", "notebooks"}, {"command", {"true"}}})["id"];
  EXPECT_EQ(next, "j-4");
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
  auto job = engine_->GetJob(Who("admin"), id);
  ASSERT_TRUE(job.ok());
  EXPECT_NE((*job)["reason"].get<std::string>().find("no longer schedulable after a restart"),
            std::string::npos)
      << job->dump();
  auto ev = engine_->Events(Who("admin"), 0, 1000, {});
  ASSERT_TRUE(ev.ok());
  int failed = 0;
  for (const auto& e : (*ev)["events"])
    failed += e["kind"] == "job.failed" && e["subject"] == id ? 1 : 0;
  EXPECT_EQ(failed, 1);
}

// Job lists are cut from a cached rendering of 100 or 1000 (or rendered whole past 1000): any
// limit gives the newest jobs first, the same whichever rendering it came from.
TEST_F(EngineTest, JobListsOfAnyLimitAreTheNewestFirst) {
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i)
    ids.push_back(Submit("alice", {{"queue", "training"}, {"command", {"true"}}})["id"]);
  auto names = [&](int limit) {
    std::vector<std::string> out;
    const Result<Json> list = engine_->ListJobs(Who("admin"), "", limit);
    if (!list.ok()) return out;
    for (const auto& j : (*list)["jobs"]) out.push_back(j["id"]);
    return out;
  };
  const std::vector<std::string> newest_two = {ids[4], ids[3]};
  EXPECT_EQ(names(2), newest_two);
  EXPECT_EQ(names(100).size(), 5u);
  EXPECT_EQ(names(2), newest_two) << "cut from the cached rendering of 100";
  EXPECT_EQ(names(500).size(), 5u);
  EXPECT_EQ(names(5000).size(), 5u);
  EXPECT_EQ(names(0).size(), 0u);
}

TEST_F(EngineTest, ARepeatedIdempotencyKeyReturnsTheFirstJob) {
  const Json body = {{"queue", "training"}, {"command", {"true"}}};
  bool replayed = false;
  auto first = engine_->Submit(Who("alice"), body, "key-1", &replayed);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(replayed);
  const std::string id = (*first)["id"];
  auto again = engine_->Submit(Who("alice"), body, "key-1", &replayed);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(replayed);
  EXPECT_EQ((*again)["id"], id);
  // Keys belong to their identity: bob's "key-1" is his own.
  replayed = false;
  auto bobs = engine_->Submit(Who("bob"), body, "key-1", &replayed);
  ASSERT_TRUE(bobs.ok());
  EXPECT_FALSE(replayed);
  EXPECT_NE((*bobs)["id"], id);
  auto bad = engine_->Submit(Who("alice"), body, "not a key", &replayed);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("Idempotency-Key"), std::string::npos);
  EXPECT_EQ((*engine_->ListJobs(Who("admin"), "", 100))["jobs"].size(), 2u);
  // Ended and not loaded after a restart: found in the store.
  ASSERT_TRUE(engine_->Cancel(Who("alice"), id).ok());
  Reopen();
  replayed = false;
  auto stored = engine_->Submit(Who("alice"), body, "key-1", &replayed);
  ASSERT_TRUE(stored.ok());
  EXPECT_TRUE(replayed);
  EXPECT_EQ((*stored)["id"], id);
  EXPECT_EQ((*stored)["state"], "cancelled");
  // After the window, the key makes a new job.
  now_ += Engine::kIdempotencyWindowMs + 1000;
  replayed = false;
  auto later = engine_->Submit(Who("alice"), body, "key-1", &replayed);
  ASSERT_TRUE(later.ok());
  EXPECT_FALSE(replayed);
  EXPECT_NE((*later)["id"], id);
}

TEST_F(EngineTest, JobsRunAsTheIdentitysAccountOrItsGroupsOrItsNameAndRootOnlyOnARunAsRootQueue) {
  const std::string text =
      std::string(kConfig) + "  - {name: ops, profile: train, groups: [prod], run_as_root: true}\n";
  auto c = ParseConfig(text);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (Identity& i : c->identities) {
    if (i.name == "alice") i.run_as = "alice-unix";
  }
  for (auto& g : c->policy.groups) {
    if (g.name == "prod") g.run_as = "prod-svc";
  }
  config_ = *c;
  Reopen();
  Register("n1", 4);
  const std::string a = Submit("alice", {{"queue", "training"}, {"command", {"true"}}})["id"];
  const std::string b = Submit("bob", {{"queue", "training"}, {"command", {"true"}}})["id"];
  const std::string k = Submit("carol", {{"queue", "training"}, {"command", {"true"}}})["id"];
  const std::string r = Submit("bob", {{"queue", "ops"}, {"command", {"true"}}})["id"];
  Json hb = Heartbeat("n1");
  ASSERT_EQ(hb["start"].size(), 4u) << hb.dump();
  std::map<std::string, std::string> run_as;
  for (const auto& s : hb["start"]) run_as[s["job"]] = s.value("run_as", "<none>");
  EXPECT_EQ(run_as[a], "alice-unix");  // the identity's own
  EXPECT_EQ(run_as[b], "prod-svc");    // bob has none: his group's
  EXPECT_EQ(run_as[k], "carol");       // neither: her own name, never the agent's account (root)
  EXPECT_EQ(run_as[r], "root");        // the run_as_root queue
  // Config: names are checked; root is never an identity's or a group's account.
  auto bad =
      ParseConfig(std::string(kConfig).replace(std::string(kConfig).find("{name: bob, role: user"),
                                               22, "{name: bob, run_as: 'x y', role: user"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("identities[2].run_as"), std::string::npos)
      << bad.status().message();
  for (const std::string root : {"run_as: root,", "run_as_root: true,"}) {
    auto refused = ParseConfig(
        std::string(kConfig).replace(std::string(kConfig).find("{name: bob, role: user"), 22,
                                     "{name: bob, " + root + " role: user"));
    ASSERT_FALSE(refused.ok()) << root;
    EXPECT_NE(refused.status().message().find("queue"), std::string::npos)
        << refused.status().message();
  }
  auto group_root = ParseConfig(std::string(kConfig).replace(
      std::string(kConfig).find("{name: prod}"), 12, "{name: prod, run_as: root}"));
  ASSERT_FALSE(group_root.ok());
  // An identity whose name is no account and that sets none: its submissions are refused.
  auto odd = ParseConfig(std::string(kConfig).replace(std::string(kConfig).find("{name: carol,"),
                                                      13, "{name: Carol.Smith,"));
  ASSERT_TRUE(odd.ok()) << odd.status().ToString();
  bool warned = false;
  for (const std::string& w : odd->warnings)
    warned = warned || w.find("'Carol.Smith' has no Unix account") != std::string::npos;
  EXPECT_TRUE(warned);
}

TEST_F(EngineTest, ConfigWarnsOfSharedAccountsAndAgentsForEveryNode) {
  auto c = ParseConfig(std::string(kConfig).replace(std::string(kConfig).find("{name: prod}"), 12,
                                                    "{name: prod, run_as: svc}"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::string all;
  for (const std::string& w : c->warnings) all += w + "\n";
  EXPECT_NE(all.find("group 'prod' sets run_as 'svc' for all its members"), std::string::npos)
      << all;
  EXPECT_NE(all.find("identity 'agent' (agent) has no nodes"), std::string::npos) << all;
  EXPECT_EQ(all.find("'rack1' (agent) has no nodes"), std::string::npos) << all;
  auto shared = ParseConfig(std::string(kConfig).replace(std::string(kConfig).find("{name: carol,"),
                                                         13, "{name: carol, run_as: alice,"));
  ASSERT_TRUE(shared.ok());
  all.clear();
  for (const std::string& w : shared->warnings) all += w + "\n";
  EXPECT_NE(all.find("identities 'alice', 'carol' run their jobs as the one Unix account 'alice'"),
            std::string::npos)
      << all;
}

// One identity cannot flood the queue: past max_jobs_per_identity jobs not yet ended, its
// submissions are refused (429 over HTTP) until some end; other identities are not affected; the
// count survives a restart.
TEST_F(EngineTest, AnIdentityHasAtMostMaxJobsNotYetEnded) {
  auto c = ParseConfig(std::string(kConfig) + "max_jobs_per_identity: 2\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  config_ = *c;
  Reopen();
  const Json body = {{"queue", "training"}, {"command", {"true"}}};
  const std::string a = Submit("alice", body)["id"];
  ASSERT_FALSE(Submit("alice", body)["id"].get<std::string>().empty());
  auto third = engine_->Submit(Who("alice"), body);
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("max_jobs_per_identity"), std::string::npos)
      << third.status().message();
  EXPECT_TRUE(engine_->Submit(Who("carol"), body).ok());  // her own count
  Reopen();
  EXPECT_EQ(engine_->Submit(Who("alice"), body).status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(engine_->Cancel(Who("alice"), a).ok());
  EXPECT_TRUE(engine_->Submit(Who("alice"), body).ok()) << "an ended job makes room";
  EXPECT_EQ(engine_->Submit(Who("alice"), body).status().code(), StatusCode::kResourceExhausted);
  auto bad = ParseConfig(std::string(kConfig) + "max_jobs_per_identity: 0\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("max_jobs_per_identity"), std::string::npos);
}

TEST_F(EngineTest, NamesAndArgumentsThatCannotBeShownOrRunAsStoredAreRefused) {
  Register("n1", 1);
  std::string nul_arg = "a";
  nul_arg += '\0';
  nul_arg += "rm -rf";
  auto r = engine_->Submit(Who("alice"), {{"queue", "training"}, {"command", {"echo", nul_arg}}});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("argument 1 contains a NUL byte"), std::string::npos)
      << r.status().message();
  r = engine_->Submit(Who("alice"),
                      {{"queue", "training"}, {"command", {"true"}}, {"name", "\x1b]0;owned\x07"}});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'name'"), std::string::npos) << r.status().message();
  // A node named with a terminal escape is refused at registration.
  auto reg = engine_->RegisterNode(
      Who("admin"), {{"node", "n\x1b[2J"}, {"cpu_milli", 1000}, {"memory_mib", 1024}});
  EXPECT_EQ(reg.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(reg.status().message().find("printable ASCII"), std::string::npos)
      << reg.status().message();
}

// Fair share survives a restart: a group that used the cluster still ranks behind one that did
// not, with its history decayed over the time the server was down.
TEST_F(EngineTest, FairShareHistorySurvivesARestart) {
  Register("n1", 2);
  const std::string id = Submit("alice", {{"queue", "training"}, {"command", {"true"}}})["id"];
  for (int i = 0; i < 5; ++i) {  // ten minutes of one card held by research
    now_ += 120'000;
    ASSERT_TRUE(engine_->RunCycle().ok());
  }
  auto share = [&](const std::string& group) {
    const Json groups = *engine_->Groups(Who("admin"));
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

TEST_F(EngineTest, EventsPageByCursorAndFilter) {
  Register("n1", 1);
  for (int i = 0; i < 5; ++i) Submit("alice", {{"queue", "notebooks"}, {"command", {"true"}}});
  Json p1 = *engine_->Events(Who("admin"), 0, 3, {});
  ASSERT_EQ(p1["events"].size(), 3u);
  Json p2 = *engine_->Events(Who("admin"), p1["next"], 3, {});
  EXPECT_GT(p2["events"][0]["seq"].get<int64_t>(), p1["events"][2]["seq"].get<int64_t>());
  Json submitted =
      *engine_->Events(Who("admin"), 0, 100, store::EventFilter{"job.submitted", "", ""});
  EXPECT_EQ(submitted["events"].size(), 5u);
  // bob sees none of alice's job events.
  Json bob = *engine_->Events(Who("bob"), 0, 100, store::EventFilter{"job.", "", ""});
  EXPECT_TRUE(bob["events"].empty());
}

// An agent's order watch (the long poll behind GET /v1/agent/orders) wakes as soon as a durable
// decision gives its node new orders (a start, a cancel), and not for what the node's own
// heartbeats changed; a newer watch answers the older with 0; other nodes' agents are refused.
TEST_F(EngineTest, AnOrderWatchWakesForNewOrdersOnly) {
  Register("n1", 1);
  std::mutex m;
  std::vector<int64_t> woke;
  auto watch = [&](int64_t after) {
    return engine_->WatchOrders(Who("agent"), "n1", after, [&](int64_t s) {
      std::lock_guard<std::mutex> g(m);
      woke.push_back(s);
    });
  };
  auto woken = [&](size_t n) {  // waits up to 2 s for the n-th call
    for (int i = 0; i < 200; ++i) {
      {
        std::lock_guard<std::mutex> g(m);
        if (woke.size() >= n) return woke[n - 1];
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return int64_t{-1};
  };
  Json hb = Heartbeat("n1");
  ASSERT_TRUE(hb["seq"].is_number_integer()) << hb.dump();
  auto t = watch(hb["seq"]);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_NE(*t, 0u) << "nothing new for n1: the watch waits";
  // A start order: the watch wakes with a sequence past what the agent knew.
  const std::string id =
      Submit("alice", {{"queue", "training"}, {"command", {"sleep", "60"}}})["id"];
  const int64_t s1 = woken(1);
  ASSERT_GT(s1, hb["seq"].get<int64_t>()) << "no wake for a job placed on n1";
  hb = Heartbeat("n1");
  ASSERT_EQ(hb["start"].size(), 1u) << hb.dump();
  EXPECT_GE(hb["seq"].get<int64_t>(), s1);
  // The node's own heartbeats (starting, then running) are no news to its agent.
  ASSERT_TRUE(watch(hb["seq"]).ok());
  hb = Heartbeat("n1", {{"running", {{{"job", id}, {"pid", 42}}}}});
  EXPECT_EQ(State(id), "running");
  ASSERT_TRUE(engine_->Sync().ok());
  EXPECT_EQ(woken(2), -1) << "woken by the node's own heartbeat";
  // A cancel is an order: the same watch wakes.
  ASSERT_TRUE(engine_->Cancel(Who("alice"), id).ok());
  EXPECT_GT(woken(2), s1);
  // Asked after an older sequence, a watch answers at once (ticket 0).
  auto at_once = watch(0);
  ASSERT_TRUE(at_once.ok());
  EXPECT_EQ(*at_once, 0u);
  EXPECT_GT(woken(3), 0);
  // A newer watch replaces an older one, which is answered with 0.
  hb = Heartbeat("n1");
  ASSERT_TRUE(watch(hb["seq"]).ok());
  ASSERT_TRUE(watch(hb["seq"]).ok());
  EXPECT_EQ(woken(4), 0);
  // Only the agents of n1 may watch n1; unknown nodes are named.
  EXPECT_EQ(engine_->WatchOrders(Who("rack1"), "n1", 0, [](int64_t) {}).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(engine_->WatchOrders(Who("alice"), "n1", 0, [](int64_t) {}).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(engine_->WatchOrders(Who("agent"), "n9", 0, [](int64_t) {}).status().code(),
            StatusCode::kNotFound);
  engine_->UnwatchAll();
  EXPECT_EQ(woken(5), 0);
}

// Cycles on submission: a cheap one, or one that leaves no backlog, never holds the next back;
// after one of 2 ms or more that left 1,000 or more jobs waiting, none runs before nine times
// its length has passed, so they hold the engine at most a tenth of the time.
TEST(CycleBudgetTest, OnlyLongCyclesOverABacklogHoldTheNextBackForNineTimesTheirLength) {
  CycleBudget b;
  EXPECT_TRUE(b.Allows(0));
  b.Ran(/*end_us=*/1'000'000, /*took_us=*/1'999, /*left_waiting=*/50'000);
  EXPECT_TRUE(b.Allows(1'000'000)) << "a cycle under 2 ms holds nothing back";
  b.Ran(/*end_us=*/1'500'000, /*took_us=*/300'000, /*left_waiting=*/999);
  EXPECT_TRUE(b.Allows(1'500'000)) << "a long cycle without a backlog (an index rebuild) neither";
  b.Ran(/*end_us=*/2'000'000, /*took_us=*/20'000, /*left_waiting=*/1'000);
  EXPECT_FALSE(b.Allows(2'000'000));
  EXPECT_FALSE(b.Allows(2'179'999));
  EXPECT_TRUE(b.Allows(2'180'000));
  b.Ran(/*end_us=*/3'000'000, /*took_us=*/500, /*left_waiting=*/10'000);  // a cheap one lifts it
  EXPECT_TRUE(b.Allows(3'000'000));
}

}  // namespace
}  // namespace tessera::api

namespace tessera::api {
namespace {

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
  auto r = engine_->RegisterNode(
      Who("agent"),
      {{"node", "n1"},
       {"cpu_milli", 32000},
       {"memory_mib", 65536},
       {"swap_mib", 262144},
       {"devices",
        {{{"index", 0}, {"model", "H100-80GB"}, {"memory_mib", 81920}, {"uuid", "n1-0"}}}}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto bad = engine_->RegisterNode(
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
  Json view = *engine_->GetJob(Who("alice"), id);
  EXPECT_EQ(view["activity"]["swap"], "resuming");
  EXPECT_EQ(view["activity"]["swapped_mib"], 16384);
  Json events =
      (*engine_->Events(Who("admin"), 0, 1000, store::EventFilter{"job.swap", "", ""}))["events"];
  ASSERT_EQ(events.size(), 2u) << "one event per change, not per heartbeat";
  EXPECT_NE(events[0]["reason"].get<std::string>().find("swapped out: 16384 MiB"),
            std::string::npos);
  EXPECT_NE(events[1]["reason"].get<std::string>().find("resuming"), std::string::npos);
  // A state the protocol does not know is refused, naming the field, and changes nothing.
  auto refused = engine_->Heartbeat(
      Who("agent"), {{"node", "n1"}, {"running", {{{"job", id}, {"pid", 7}, {"swap", "asleep"}}}}});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("running.swap"), std::string::npos);
  EXPECT_EQ((*engine_->GetJob(Who("alice"), id))["activity"]["swap"], "resuming");
}

}  // namespace
}  // namespace tessera::api
