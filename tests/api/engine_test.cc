// The engine against a real SQLite store in a temporary directory, with an injected clock:
// configuration errors, refused submissions and agent messages, and who may do what.
#include "api/engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "engine_fixture.h"
#include "engine_test.h"
#include "model/agent_protocol.h"
#include "test_dir.h"

namespace tessera::api {
namespace {

using engine_test::EngineTest;
using engine_test::kConfig;

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
      // It blamed heartbeat_interval ("at most half of heartbeat_timeout (0s)").
      {id + "heartbeat_timeout: 0", "heartbeat_timeout: must be positive"},
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
      {id + "groups: [{name: g}]\nprofiles: [{name: p}]\nqueues: [{name: q, profile: p, groups: "
            "[g], compute: mps}]",
       "queues[q].compute: must be time-slicing or sm-sharing, not 'mps'"},
      {id + "groups: [{name: g}]\nprofiles: [{name: p}]\nqueues: [{name: q, profile: p, groups: "
            "[g], compute: sm-sharing}]",
       "queues[q].compute_percent: required with compute: sm-sharing"},
      {id + "groups: [{name: g}]\nprofiles: [{name: p}]\nqueues: [{name: q, profile: p, groups: "
            "[g], compute: sm-sharing, compute_percent: 101}]",
       "queues[q].compute_percent: must be an integer from 1 to 100"},
      {id + "groups: [{name: g}]\nprofiles: [{name: p}]\nqueues: [{name: q, profile: p, groups: "
            "[g], compute: sm-sharing, compute_percent: 0}]",
       "queues[q].compute_percent: must be an integer from 1 to 100"},
      {id + "groups: [{name: g}]\nprofiles: [{name: p}]\nqueues: [{name: q, profile: p, groups: "
            "[g], compute: time-slicing, compute_percent: 50}]",
       "queues[q].compute_percent: only with compute: sm-sharing"},
      {id + "groups: [{name: g}]\nprofiles: [{name: p}]\nqueues: [{name: q, profile: p, groups: "
            "[g], compute_percent: 50}]",
       "queues[q].compute_percent: needs compute: sm-sharing"},
      {id + "groups: [{name: g}]\nprofiles: [{name: p}]\nqueues: [{name: q, profile: p, groups: "
            "[g], backend: slurm, compute: sm-sharing, compute_percent: 50}]",
       "queues[q].compute: only for queues run by node agents"},
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

// `compute: sm-sharing` with `compute_percent` reaches the quota policy (issue 38); time-slicing
// (the default) is 0.
TEST_F(EngineTest, QueuesCarryTheirComputeMode) {
  const std::string base =
      "identities: [{name: a, token: aaaaaaaaaa}]\ngroups: [{name: g}]\n"
      "profiles: [{name: p, forms: [share], gpu_memory: 8GiB}]\n";
  for (auto [queue, want] : std::initializer_list<std::pair<std::string, int>>{
           {"{name: q, profile: p, groups: [g]}", 0},
           {"{name: q, profile: p, groups: [g], compute: time-slicing}", 0},
           {"{name: q, profile: p, groups: [g], compute: sm-sharing, compute_percent: 40}", 40},
           {"{name: q, profile: p, groups: [g], compute: sm-sharing, compute_percent: 100}",
            100}}) {
    auto r = ParseConfig(base + "queues: [" + queue + "]\n");
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->policy.queues[0].compute_percent, want) << queue;
    EXPECT_EQ(r->FindRoute("q")->compute_percent, want) << queue;
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
      // Past int64: once read as -1 and called negative.
      {"alice",
       {{"queue", "notebooks"}, {"command", {"true"}}, {"walltime", UINT64_MAX}},
       StatusCode::kInvalidArgument,
       "ten years"},
      // Once taken: a fraction of 0 became a whole card; one beside no GPUs was dropped.
      {"alice",
       {{"queue", "notebooks"}, {"command", {"true"}}, {"gpu_fraction", 0}},
       StatusCode::kInvalidArgument,
       "'gpu_fraction' must be above 0 (a share of a GPU; 'gpus': 0 for none)"},
      {"alice",
       {{"queue", "training"}, {"command", {"true"}}, {"gpus", 0}, {"gpu_fraction", "0.5"}},
       StatusCode::kInvalidArgument,
       "'gpu_fraction' is for a job of 1 GPU ('gpus' is 0)"},
      {"alice",
       {{"queue", "training"}, {"command", {"true"}}, {"gpus", 2}, {"gpu_fraction", "0.5"}},
       StatusCode::kInvalidArgument,
       "'gpu_fraction' is for a job of 1 GPU ('gpus' is 2)"},
      // A fraction of a queue of whole cards ran on a whole card, charged whole (a new user).
      {"alice",
       {{"queue", "training"}, {"command", {"true"}}, {"gpu_fraction", "0.5"}},
       StatusCode::kInvalidArgument,
       "queue 'training' grants whole GPUs only (profile 'train'), so a fraction (0.5) would hold "
       "a whole one"},
      // Once taken: one argument or variable past the kernel's limit for one string (128 KiB)
      // failed at exec on the node (E2BIG); and a user's many 1 MiB submissions took 2.7 MB of
      // the server's memory each (the red team).
      {"alice",
       {{"queue", "notebooks"}, {"command", {"echo", std::string(131072, 'x')}}},
       StatusCode::kInvalidArgument,
       "argument 1 is 131072 bytes: at most 131071"},
      {"alice",
       {{"queue", "notebooks"},
        {"command", {"true"}},
        {"env", {{"BIG", std::string(900000, 'x')}}}},
       StatusCode::kInvalidArgument,
       "'env': the value of 'BIG' is 900000 bytes: at most 131067"},
      {"alice",
       {{"queue", "notebooks"},
        {"command", Json(std::vector<std::string>(3, std::string(100000, 'x')))}},
       StatusCode::kInvalidArgument,
       "'command' and 'env' hold 300000 bytes: at most 262144"},
      {"alice",
       {{"queue", "notebooks"}, {"command", {"echo", "pw"}}, {"secret_args", {1, 1}}},
       StatusCode::kInvalidArgument,
       "'secret_args' must list indices into 'command' (0 to 1), each once"},
      // It said "must be a non-negative integer" of 2147483647.
      {"alice",
       {{"queue", "training"}, {"command", {"true"}}, {"gpus", 2147483647}},
       StatusCode::kInvalidArgument,
       "'gpus' must be an integer from 0 to 4096"},
      // Once taken (the red team): no CPU or memory counted against the group's limit, and no
      // cgroup limit on the node (0 is "max" there): forty such jobs ran where twenty fit.
      {"alice",
       {{"queue", "notebooks"}, {"command", {"true"}}, {"cpu", "0"}},
       StatusCode::kInvalidArgument,
       "'cpu' must be above 0"},
      {"alice",
       {{"queue", "notebooks"}, {"command", {"true"}}, {"memory", "0B"}},
       StatusCode::kInvalidArgument,
       "'memory' must be above 0"},
      {"alice",
       {{"queue", "notebooks"}, {"command", {"true"}}, {"class", 5}},
       StatusCode::kInvalidArgument,
       "'class' must be a string"},
      // Once taken as a CPU job without a word (a new user): GPU memory or a form beside no GPUs.
      {"alice",
       {{"queue", "notebooks"}, {"command", {"true"}}, {"gpus", 0}, {"gpu_memory", "8GiB"}},
       StatusCode::kInvalidArgument,
       "'gpu_memory' is for a job with GPUs ('gpus' is 0)"},
      {"alice",
       {{"queue", "notebooks"}, {"command", {"true"}}, {"gpus", 0}, {"form", "partition"}},
       StatusCode::kInvalidArgument,
       "'form' is the form of a job's GPUs ('gpus' is 0)"},
  };
  for (const Case& c : cases) {
    auto r = engine_->Submit(Who(c.who), c.body);
    ASSERT_FALSE(r.ok()) << c.body.dump();
    EXPECT_EQ(r.status().code(), c.code) << c.body.dump();
    EXPECT_NE(r.status().message().find(c.want), std::string::npos) << r.status().message();
  }
  EXPECT_TRUE((*engine_->views().ListJobs(Who("admin"), "", 100))["jobs"].empty());
  auto ev = engine_->views().Events(Who("admin"), 0, 100, {});
  for (const auto& e : (*ev)["events"]) EXPECT_NE(e["kind"], "job.submitted");
}

// The red team: a person signed in through the provider had their jobs run as the account named
// like their provider username (no account claim in the token), which the person may choose:
// `daemon`, or a colleague's `run_as` account, whose jobs' environments they could then read. A
// provider identity's account comes from the account claim or its group's run_as alone; a
// static identity's name is still its account (the config's author chose it).
TEST_F(EngineTest, AProviderIdentityIsNeverRunAsTheAccountNamedLikeItsUsername) {
  Identity from_provider;
  from_provider.name = "daemon";
  from_provider.subject = "c0ffee-1";
  from_provider.role = Role::kUser;
  from_provider.groups = {"research"};
  auto r = engine_->Submit(from_provider, {{"queue", "notebooks"}, {"command", {"true"}}});
  ASSERT_FALSE(r.ok()) << r->dump();
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("no Unix account"), std::string::npos)
      << r.status().message();
  from_provider.run_as = "nobody";  // the token's account claim
  r = engine_->Submit(from_provider, {{"queue", "notebooks"}, {"command", {"true"}}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["spec"]["run_as"], "nobody");
  r = engine_->Submit(Who("alice"), {{"queue", "notebooks"}, {"command", {"true"}}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["spec"]["run_as"], "alice");
}

// Versions (docs/agent-protocol.md): a registration without `protocol` is version 1 (an agent of
// the release before versions) and is served, as is the current version; a version outside the
// served range is refused (409) naming both the agent's version and the range, and the node is
// not registered.
TEST_F(EngineTest, AgentProtocolVersionsOutsideTheServedRangeAreRefused) {
  auto reg = [&](const std::string& node, const Json& protocol) {
    Json body = {{"node", node}, {"cpu_milli", 1000}, {"memory_mib", 1024}};
    if (!protocol.is_null()) body["protocol"] = protocol;
    return engine_->agents().RegisterNode(Who("agent"), body);
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
  const Json nodes = *engine_->views().Nodes(Who("admin"));
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
  auto reg = [&](Json body) { return engine_->agents().RegisterNode(Who("agent"), body); };
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
      // Once read as their defaults: pool "default", not simulated, no uuid.
      {{{"node", "n2"}, {"cpu_milli", 1000}, {"memory_mib", 1024}, {"pool", 5}},
       "'pool' must be a string"},
      {{{"node", "n2"}, {"cpu_milli", 1000}, {"memory_mib", 1024}, {"simulated", "true"}},
       "'simulated' must be true or false"},
      {{{"node", "n2"},
        {"cpu_milli", 1000},
        {"memory_mib", 1024},
        {"devices", {{{"index", 0}, {"model", "H100-80GB"}, {"memory_mib", 81920}, {"uuid", 5}}}}},
       "a device's 'uuid' must be a string"},
      {{{"node", "n2"},
        {"cpu_milli", 1000},
        {"memory_mib", 1024},
        {"devices",
         {{{"index", 0}, {"model", "H100-80GB"}, {"memory_mib", 81920}, {"mig_enabled", 1}}}}},
       "a device's 'mig_enabled' must be true or false"},
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
    auto r = engine_->agents().Heartbeat(Who("agent"), body);
    ASSERT_FALSE(r.ok()) << body.dump();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << body.dump();
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
  }
  // Nothing changed: n2 never joined, the job still starts on n1, and the scheduler still works.
  EXPECT_EQ((*engine_->views().Nodes(Who("admin")))["nodes"].size(), 1u);
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
  ASSERT_TRUE(engine_->agents().RegisterNode(rack, inv).ok());
  inv["node"] = "r2-a";
  auto other = engine_->agents().RegisterNode(rack, inv);
  ASSERT_EQ(other.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(other.status().message().find("may not register for node 'r2-a'"), std::string::npos);
  Register("n1", 1);  // by the unbound agent identity
  // A job on n1: rack1 may not heartbeat as n1 (and learn its orders), report it, or write its
  // output.
  Json j = Submit("alice", {{"queue", "training"}, {"command", {"true"}}});
  ASSERT_EQ(j["state"], "placed") << j.dump();
  const std::string node = j["placement"]["node"];
  const std::string id = j["id"];
  auto hb = engine_->agents().Heartbeat(
      rack, {{"node", node}, {"finished", {{{"job", id}, {"exit_code", 0}}}}});
  EXPECT_EQ(hb.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(State(id), "placed") << "a refused heartbeat changed the job";
  EXPECT_EQ(engine_->agents().WriteOutput(rack, id, 0, "forged").code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(engine_->agents().Heartbeat(rack, {{"node", "r1-a"}}).ok());
  EXPECT_TRUE(engine_->agents().WriteOutput(Who("agent"), id, 0, "real").ok());
  // Uploads continue where the stored bytes end (or repeat them); one past the end is refused.
  const Status hole = engine_->agents().WriteOutput(Who("agent"), id, 1000, "later");
  EXPECT_EQ(hole.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(hole.message().find("continues at byte 4, not 1000"), std::string::npos)
      << hole.message();
  EXPECT_TRUE(engine_->agents().WriteOutput(Who("agent"), id, 2, "al").ok());   // a repeat
  EXPECT_TRUE(engine_->agents().WriteOutput(Who("agent"), id, 4, "!\n").ok());  // the next bytes
  // A "repeat" of other bytes rewrote what was stored, also after the job ended (the red team's
  // forged output of a finished job): refused, the stored bytes kept.
  const Status rewrite = engine_->agents().WriteOutput(Who("agent"), id, 0, "forged");
  EXPECT_EQ(rewrite.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(rewrite.message().find("differ from those stored"), std::string::npos)
      << rewrite.message();
  EXPECT_TRUE(engine_->agents().WriteOutput(Who("agent"), id, 4, "!\nmore").ok());  // and more
  // Output has a ceiling.
  EXPECT_EQ(
      engine_->agents().WriteOutput(Who("agent"), id, config_.limits.max_output_bytes, "x").code(),
      StatusCode::kResourceExhausted);
  // Each refused claim is in the audit trail: who, for which node, doing what.
  ASSERT_TRUE(engine_->Tick().ok());  // after a commit, the queued audit events are durable
  auto ev = engine_->views().Events(Who("admin"), 0, 1000, {"agent.refused", "", ""});
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
  auto seen = engine_->views().GetJob(Who("carol"), id);
  ASSERT_TRUE(seen.ok());
  EXPECT_EQ((*seen)["spec"]["env"]["API_KEY"], "(hidden)") << seen->dump();
  auto listed = engine_->views().ListJobs(Who("carol"), "", 10);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->dump().find("s3cret"), std::string::npos) << listed->dump();
  EXPECT_EQ((*engine_->views().GetJob(Who("admin"), id))["spec"]["env"]["API_KEY"], "s3cret");
  auto c = engine_->Cancel(Who("carol"), id);
  EXPECT_EQ(c.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(State(id), "cancelled");
  EXPECT_TRUE(engine_->Cancel(Who("alice"), id).ok());
  // Arguments marked secret are hidden from the group too; a bad index is refused.
  Json s = Submit("alice", {{"queue", "training"},
                            {"command", {"login", "--password", "hunter2"}},
                            {"secret_args", {2}}});
  EXPECT_EQ(s["spec"]["command"][2], "hunter2");
  const Json seen_s = *engine_->views().GetJob(Who("carol"), s["id"]);
  EXPECT_EQ(seen_s["spec"]["command"], Json({"login", "--password", "(hidden)"}));
  EXPECT_EQ(engine_->views().ListJobs(Who("carol"), "", 10)->dump().find("hunter2"),
            std::string::npos);
  auto bad = engine_->Submit(Who("alice"),
                             {{"queue", "training"}, {"command", {"true"}}, {"secret_args", {1}}});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  // A group that says members_cancel lets a member cancel another's job.
  for (auto& g : config_.policy.groups) g.members_cancel = g.name == "research";
  Reopen();
  EXPECT_TRUE(engine_->Cancel(Who("carol"), s["id"]).ok());
}

// The nodes view shows what is held where to every user, and which job holds it only to those who
// may see the job (the red team: bob's view named alice's job); with the host CPU and memory in
// use on each node (a new user: `tessera nodes` said nothing of them). The queues view names a
// queue's runtime guards (a new user: a job stopped at a max_runtime no view showed).
TEST_F(EngineTest, NodesNameOnlyVisibleJobsAndShowHostUseAndQueuesTheirGuards) {
  Register("n1", 4);
  const std::string a = Submit("alice", {{"queue", "training"}, {"command", {"true"}}})["id"];
  Heartbeat("n1");
  const Json mine = *engine_->views().Nodes(Who("alice"));
  const Json theirs = *engine_->views().Nodes(Who("bob"));
  EXPECT_NE(mine.dump().find("\"" + a + "\""), std::string::npos) << mine.dump();
  EXPECT_EQ(theirs.dump().find("\"" + a + "\""), std::string::npos) << theirs.dump();
  size_t holders = 0;
  for (const auto& d : theirs["nodes"][0]["devices"]) holders += d["holders"].size();
  EXPECT_EQ(holders, 1u) << theirs.dump();  // held, by a job bob may not name
  EXPECT_EQ(theirs["nodes"][0]["cpu_milli_used"], 1000) << theirs.dump();
  // A drain's event lists the jobs it stopped: another group's to no one else (the review).
  ASSERT_TRUE(engine_->AdminNode(Who("admin"), "n1", "drain").ok());
  store::EventFilter drained;
  drained.kind_prefix = "node.drained";
  const Json for_bob = (*engine_->views().Events(Who("bob"), 0, 100, drained))["events"];
  const Json for_alice = (*engine_->views().Events(Who("alice"), 0, 100, drained))["events"];
  ASSERT_EQ(for_bob.size(), 1u);
  EXPECT_EQ(for_bob[0]["data"]["jobs"], Json::array()) << for_bob.dump();
  ASSERT_EQ(for_alice.size(), 1u);
  EXPECT_EQ(for_alice[0]["data"]["jobs"], Json::array({a})) << for_alice.dump();
  EXPECT_EQ(theirs["nodes"][0]["memory_mib_used"], 1024) << theirs.dump();
  for (auto& q : config_.policy.queues) {
    if (q.name != "training") continue;
    q.max_runtime_s = 7200;
    q.idle_timeout_s = 1800;
  }
  Reopen();
  const Json queues = *engine_->views().Queues(Who("bob"));
  ASSERT_EQ(queues["queues"].size(), 1u);
  EXPECT_EQ(queues["queues"][0]["max_runtime_s"], 7200) << queues.dump();
  EXPECT_EQ(queues["queues"][0]["idle_timeout_s"], 1800) << queues.dump();
  EXPECT_EQ(queues["queues"][0]["idle_action"], "requeue") << queues.dump();
  EXPECT_EQ(queues["queues"][0]["min_runtime_s"], 0) << queues.dump();
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
    EXPECT_EQ(engine_->views().GetJob(Who(r.who), a).ok(), r.see_a) << r.who;
    EXPECT_EQ(engine_->views().GetJob(Who(r.who), b).ok(), r.see_b) << r.who;
    EXPECT_EQ(engine_->views().JobOutput(Who(r.who), a).ok(), r.see_a) << r.who;
    EXPECT_EQ(engine_->views().Nodes(Who(r.who)).ok(), r.nodes) << r.who;
    EXPECT_EQ(engine_->views().Summary(Who(r.who)).ok(), r.nodes) << r.who;
    auto reg = engine_->agents().RegisterNode(
        Who(r.who), {{"node", "x-" + r.who}, {"cpu_milli", 1000}, {"memory_mib", 1024}});
    EXPECT_EQ(reg.ok(), r.register_node) << r.who;
    if (!reg.ok()) {
      EXPECT_EQ(reg.status().code(), StatusCode::kPermissionDenied);
    }
    auto hb = engine_->agents().Heartbeat(Who(r.who), {{"node", "n1"}});
    EXPECT_EQ(hb.ok(), r.register_node) << r.who;
    auto listed = engine_->views().ListJobs(Who(r.who), "", 100);
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
  EXPECT_EQ((*engine_->views().Queues(Who("bob")))["queues"].size(), 1u);
  EXPECT_EQ((*engine_->views().Queues(Who("alice")))["queues"].size(), 3u);
}

}  // namespace
}  // namespace tessera::api
