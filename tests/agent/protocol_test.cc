#include "agent/protocol.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace tessera::agent {
namespace {

using nlohmann::json;

TEST(AgentProtocol, RegisterBodyMarksSimulation) {
  Inventory inv;
  inv.node = "host-a";
  inv.host = {16000, 65536};
  inv.simulated = true;
  inv.devices.push_back({0, "H100-80GB", 81920, "GPU-sim-host-a-0", true, false});
  json j = json::parse(RegisterBody(inv, true));
  EXPECT_EQ(j["node"], "host-a");
  EXPECT_EQ(j["cpu_milli"], 16000);
  EXPECT_EQ(j["memory_mib"], 65536);
  EXPECT_EQ(j["simulated"], true);
  EXPECT_EQ(j["cgroups"], true);
  ASSERT_EQ(j["devices"].size(), 1u);
  EXPECT_EQ(j["devices"][0]["uuid"], "GPU-sim-host-a-0");
  EXPECT_EQ(j["devices"][0]["model"], "H100-80GB");
  EXPECT_EQ(j["devices"][0]["memory_mib"], 81920);
  EXPECT_EQ(j["devices"][0]["simulated"], true);
  EXPECT_EQ(j["devices"][0]["index"], 0);
  EXPECT_EQ(j["protocol"], kAgentProtocolVersion);
}

// A version refusal (docs/agent-protocol.md, "Versions") is told apart from every other answer:
// the agent exits on it instead of retrying.
TEST(AgentProtocol, ProtocolRefusalIsRecognized) {
  const std::string msg =
      "agent protocol 7 is not served by this server (it serves 1-2); upgrade the server";
  auto r = ProtocolRefusal(409, json{{"error", msg}}.dump());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, msg);
  EXPECT_EQ(ProtocolRefusal(400, json{{"error", msg}}.dump()), msg);
  EXPECT_FALSE(ProtocolRefusal(503, json{{"error", msg}}.dump()).has_value());
  EXPECT_FALSE(ProtocolRefusal(200, json{{"ok", true}}.dump()).has_value());
  EXPECT_FALSE(ProtocolRefusal(400, json{{"error", "register: unknown field 'x'"}}.dump()));
  EXPECT_FALSE(ProtocolRefusal(409, "not json").has_value());
  EXPECT_FALSE(ProtocolRefusal(409, json{{"error", 7}}.dump()).has_value());
  // The server's own message is one the agent recognizes.
  EXPECT_TRUE(ProtocolRefusal(409, json{{"error", AgentProtocolRefusal(0)}}.dump()).has_value());
  EXPECT_EQ(AgentProtocolRefusal(kAgentProtocolVersion), "");
}

TEST(AgentProtocol, RegisterReply) {
  EXPECT_EQ(*ParseRegisterReply(R"({"ok": true, "heartbeat_ms": 250})", 1000), 250);
  EXPECT_EQ(*ParseRegisterReply(R"({"ok": true})", 1000), 1000);
  EXPECT_FALSE(ParseRegisterReply(R"({"ok": false, "error": "no"})", 1000).ok());
  // Found by fuzz/agent_protocol: a refusal whose reason is not a string threw.
  auto odd = ParseRegisterReply(R"({"ok": false, "error": 3.5})", 1000);
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.status().message().find("no reason given"), std::string::npos);
  EXPECT_FALSE(ParseRegisterReply(R"({"heartbeat_ms": -1})", 1000).ok());
  EXPECT_FALSE(ParseRegisterReply("not json", 1000).ok());
}

TEST(AgentProtocol, HeartbeatBody) {
  RunningJob r;
  r.id = "j-12";
  r.pid = 4242;
  json j = json::parse(HeartbeatBody("host-a", {r}, {{"j-11", 0, 0, 120}}));
  EXPECT_EQ(j, json::parse(R"({"node": "host-a", "running": [{"job": "j-12", "pid": 4242}],
      "finished": [{"job": "j-11", "exit_code": 0, "signal": 0, "output_bytes": 120}]})"));
  // With telemetry: activity and charged memory (rounded up to MiB), and the devices.
  r.active = 0;
  r.gpu_memory_used_bytes = (int64_t{3} << 20) + 1;
  j = json::parse(HeartbeatBody("host-a", {r}, {}, {{0, 37, 4096}, {1, -1, -1}}));
  EXPECT_EQ(
      j["running"][0],
      json::parse(R"({"job": "j-12", "pid": 4242, "active": false, "gpu_memory_used_mib": 4})"));
  EXPECT_EQ(
      j["devices"],
      json::parse(R"([{"index": 0, "util_pct": 37, "memory_used_mib": 4096}, {"index": 1}])"));
}

// Protocol 3: every device's health at registration, and in heartbeats where known.
TEST(AgentProtocol, DeviceHealthInRegistrationAndHeartbeats) {
  Inventory inv;
  inv.node = "host-a";
  inv.host = {16000, 65536};
  inv.devices.push_back({0, "H100-80GB", 81920, "GPU-a", false, false});
  inv.devices.push_back({1, "H100-80GB", 81920, "GPU-b", false, false});
  inv.devices[1].healthy = false;
  inv.devices[0].isolation = "preload";
  inv.devices[1].health_reason = "XID 79: GPU has fallen off the bus";
  json j = json::parse(RegisterBody(inv, true));
  EXPECT_EQ(j["protocol"], kAgentProtocolVersion);
  EXPECT_EQ(j["devices"][0]["health"], "ok");
  EXPECT_FALSE(j["devices"][0].contains("health_reason"));
  EXPECT_EQ(j["devices"][1]["health"], "unhealthy");
  EXPECT_EQ(j["devices"][1]["health_reason"], "XID 79: GPU has fallen off the bus");
  EXPECT_EQ(j["devices"][0]["isolation"], "preload");
  EXPECT_FALSE(j["devices"][1].contains("isolation")) << "not known: left out";
  DeviceTelemetry bad{0, 5, 100, "unhealthy", "double-bit ECC errors: 1 since the driver loaded"};
  DeviceTelemetry good{1, -1, -1, "ok", ""};
  j = json::parse(HeartbeatBody("host-a", {}, {}, {bad, good}));
  EXPECT_EQ(j["devices"], json::parse(R"([{"index": 0, "util_pct": 5, "memory_used_mib": 100,
      "health": "unhealthy", "health_reason": "double-bit ECC errors: 1 since the driver loaded"},
      {"index": 1, "health": "ok"}])"));
}

TEST(AgentProtocol, HeartbeatReplyAsDocumented) {
  Result<HeartbeatReply> r = ParseHeartbeatReply(R"({
    "start": [{"job": "j-13", "command": ["python3", "train.py"], "env": {"K": "V"},
               "cpu_milli": 2000, "memory_mib": 4096,
               "devices": [{"index": 0, "uuid": "GPU-sim-host-a-0", "mig": ""}],
               "gpu_memory_limit_bytes": 8589934592, "swap": true}],
    "cancel": [{"job": "j-9", "grace_ms": 5000}],
    "may_run": ["j-12"], "ack": ["j-11"]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->start.size(), 1u);
  const JobSpec& s = r->start[0];
  EXPECT_EQ(s.id, "j-13");
  EXPECT_EQ(s.command, (std::vector<std::string>{"python3", "train.py"}));
  EXPECT_EQ(s.env.at("K"), "V");
  EXPECT_EQ(s.cpu_milli, 2000);
  EXPECT_EQ(s.memory_mib, 4096);
  ASSERT_EQ(s.devices.size(), 1u);
  EXPECT_EQ(s.devices[0].uuid, "GPU-sim-host-a-0");
  EXPECT_EQ(s.gpu_memory_limit_bytes, 8589934592);
  EXPECT_TRUE(s.swap);
  EXPECT_FALSE(
      ParseHeartbeatReply(R"({"start": [{"job": "j", "command": ["x"], "swap": 1}]})").ok());
  ASSERT_EQ(r->cancel.size(), 1u);
  EXPECT_EQ(r->cancel[0].job, "j-9");
  EXPECT_EQ(r->cancel[0].grace_ms, 5000);
  ASSERT_TRUE(r->may_run.has_value());
  EXPECT_EQ(*r->may_run, std::vector<std::string>{"j-12"});
  EXPECT_EQ(r->ack, std::vector<std::string>{"j-11"});
}

// Devices an administrator returned (issue 38): the agent starts their health over.
TEST(AgentProtocol, HeartbeatReplyCarriesHealthResets) {
  Result<HeartbeatReply> r = ParseHeartbeatReply(R"({"health_reset": [0, 3]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->health_reset, (std::vector<int>{0, 3}));
  EXPECT_TRUE(ParseHeartbeatReply("{}")->health_reset.empty()) << "absent: none";
  auto bad = ParseHeartbeatReply(R"({"health_reset": ["0"]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'health_reset' must be a list of device indexes"),
            std::string::npos)
      << bad.status().message();
}

TEST(AgentProtocol, EmptyReplyDoesNothingAndLeavesMayRunUnset) {
  Result<HeartbeatReply> r = ParseHeartbeatReply("{}");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->start.empty());
  EXPECT_FALSE(r->may_run.has_value());
  r = ParseHeartbeatReply(R"({"may_run": []})");
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->may_run.has_value());
  EXPECT_TRUE(r->may_run->empty());
}

TEST(AgentProtocol, MalformedRepliesNameTheField) {
  struct Case {
    const char* body;
    const char* want;
  };
  for (const Case& c : std::vector<Case>{
           {"[]", "not a JSON object"},
           {R"({"start": {}})", "'start' must be a list"},
           {R"({"start": [{"command": ["x"]}]})", "no string 'job'"},
           {R"({"start": [{"job": "j", "command": "x"}]})", "job j: field 'command'"},
           {R"({"start": [{"job": "j", "command": ["x"], "cpu_milli": "2"}]})", "'cpu_milli'"},
           {R"({"start": [{"job": "j", "command": ["x"], "env": {"A": 1}}]})", "'env'"},
           {R"({"cancel": [{"job": "j", "grace_ms": -5}]})", "grace_ms"},
           {R"({"may_run": [1]})", "'may_run' must be a list of job ids"},
       }) {
    Result<HeartbeatReply> r = ParseHeartbeatReply(c.body);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_NE(r.status().message().find(c.want), std::string::npos)
        << c.body << ": " << r.status().message();
  }
}

TEST(AgentProtocol, NodeNamesThatCannotBeSentAreRefused) {
  for (const char* good : {"n1", "gpu-node-07.rack3", "a"})
    EXPECT_TRUE(ValidateNodeName(good).ok()) << good;
  for (const std::string& bad : {std::string(), std::string("bad\xff"), std::string("has space"),
                                 std::string("a/b"), std::string(254, 'x')}) {
    Status st = ValidateNodeName(bad);
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find("printable ASCII"), std::string::npos) << st.message();
  }
}

// A size given as null is a size not given (0), as for every other optional field; it used to
// throw from json::value() and take the agent down.
TEST(AgentProtocol, NullSizesAreNotGiven) {
  Result<HeartbeatReply> r = ParseHeartbeatReply(
      R"({"start": [{"job": "j", "command": ["x"], "cpu_milli": null, "memory_mib": null,)"
      R"( "gpu_memory_limit_bytes": null}]})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->start.size(), 1u);
  EXPECT_EQ(r->start[0].cpu_milli, 0);
  EXPECT_EQ(r->start[0].memory_mib, 0);
  EXPECT_EQ(r->start[0].gpu_memory_limit_bytes, 0);
}

// The order sequence of a heartbeat reply and the order watch's answer (docs/agent-protocol.md).
TEST(AgentProtocol, OrderSequenceAndWatchReplies) {
  EXPECT_EQ(ParseHeartbeatReply(R"({"start": []})")->seq, -1) << "no seq: the agent does not watch";
  EXPECT_EQ(ParseHeartbeatReply(R"({"seq": 41})")->seq, 41);
  EXPECT_FALSE(ParseHeartbeatReply(R"({"seq": -1})").ok());
  EXPECT_FALSE(ParseHeartbeatReply(R"({"seq": "41"})").ok());
  Result<OrdersWake> w = ParseOrdersWake(R"({"wake": true, "seq": 42})");
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(w->wake);
  EXPECT_EQ(w->seq, 42);
  EXPECT_FALSE(ParseOrdersWake(R"({"wake": false})")->wake);
  for (const char* bad :
       {"[]", "{}", R"({"wake": 1})", R"({"wake": true, "seq": -3})", "not json"}) {
    EXPECT_FALSE(ParseOrdersWake(bad).ok()) << bad;
  }
}

// Issue 33's fields: unacked exits in the registration (left out when none), the leader's epoch
// in both replies and partition_stop_ms in the register reply (absent: -1 and 0, off).
TEST(AgentProtocol, FinishedInRegistrationEpochAndPartitionStop) {
  Inventory inv;
  inv.node = "host-a";
  EXPECT_FALSE(json::parse(RegisterBody(inv, true)).contains("finished"));
  json j = json::parse(RegisterBody(inv, true, {}, {FinishedReport{"j-1", 3, 9, 12, ""}}));
  ASSERT_EQ(j["finished"].size(), 1u) << j.dump();
  EXPECT_EQ(j["finished"][0],
            json({{"job", "j-1"}, {"exit_code", 3}, {"signal", 9}, {"output_bytes", 12}}));
  // Protocol 5: how long it ran, where the agent measured it (a record from an older agent's
  // disk has no such figure and sends none).
  FinishedReport timed{"j-2", 0, 0, 0, ""};
  timed.run_ms = 1500;
  j = json::parse(RegisterBody(inv, true, {}, {timed}));
  EXPECT_EQ(j["finished"][0]["run_ms"], 1500) << j.dump();
  EXPECT_EQ(json::parse(HeartbeatBody("host-a", {}, {timed}))["finished"][0]["run_ms"], 1500);
  EXPECT_EQ(j["protocol"], 6);
  // Protocol 6: a job the agent stopped as it was itself stopped says so.
  FinishedReport stopped{"j-3", 143, 0, 0, kStoppedByShutdown};
  EXPECT_EQ(json::parse(HeartbeatBody("host-a", {}, {stopped}))["finished"][0]["stopped_by"],
            "shutdown");

  Result<RegisterReply> r = ParseRegisterReplyFields(R"({"ok": true, "heartbeat_ms": 250})", 1000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->heartbeat_ms, 250);
  EXPECT_EQ(r->epoch, -1);
  EXPECT_EQ(r->partition_stop_ms, 0);
  r = ParseRegisterReplyFields(R"({"ok": true, "epoch": 7, "partition_stop_ms": 30000})", 1000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->heartbeat_ms, 1000);
  EXPECT_EQ(r->epoch, 7);
  EXPECT_EQ(r->partition_stop_ms, 30000);
  for (const char* bad : {R"({"epoch": -2})", R"({"epoch": "7"})", R"({"partition_stop_ms": -1})",
                          R"({"partition_stop_ms": 1.5})"}) {
    EXPECT_FALSE(ParseRegisterReplyFields(bad, 1000).ok()) << bad;
  }
  EXPECT_EQ(ParseHeartbeatReply("{}")->epoch, -1);
  EXPECT_EQ(ParseHeartbeatReply(R"({"epoch": 12})")->epoch, 12);
  EXPECT_FALSE(ParseHeartbeatReply(R"({"epoch": -1})").ok());
  EXPECT_FALSE(ParseHeartbeatReply(R"({"epoch": true})").ok());
}

TEST(AgentProtocol, OutputPathEscapesIds) {
  EXPECT_EQ(OutputPath("j-12", 0), "/v1/agent/jobs/j-12/output?offset=0");
  EXPECT_EQ(OutputPath("a b", 120), "/v1/agent/jobs/a%20b/output?offset=120");
}

TEST(AgentProtocol, OrdersWatchPathEscapesTheNode) {
  EXPECT_EQ(OrdersWatchPath("gpu-01", 7, 25000),
            "/v1/agent/orders?node=gpu-01&after=7&wait_ms=25000");
  EXPECT_EQ(OrdersWatchPath("a&b/\xc3\xa9", 0, 10),
            "/v1/agent/orders?node=a%26b%2F%C3%A9&after=0&wait_ms=10");
}

// Preemption by swapping: the control plane's swap orders (optional), and the agent's word on
// whether a share's memory is off the device.
TEST(AgentProtocol, SwapOrdersAndSwappedReports) {
  Result<HeartbeatReply> r =
      ParseHeartbeatReply(R"({"swap": {"j-1": "out", "j-2": "in", "j-3": "idle"}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->swap,
            (std::map<std::string, std::string>{{"j-1", "out"}, {"j-2", "in"}, {"j-3", "idle"}}));
  r = ParseHeartbeatReply("{}");  // an older server: no orders
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->swap.empty());
  r = ParseHeartbeatReply(R"({"swap": {"j-1": "away"}})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("swap order of job j-1"), std::string::npos)
      << r.status().message();
  EXPECT_FALSE(ParseHeartbeatReply(R"({"swap": ["j-1"]})").ok());
  RunningJob held;
  held.id = "j-1";
  held.pid = 7;
  held.swap_state = "swapped";
  held.swap_ordered = true;
  held.swapped_bytes = 3 << 20;
  RunningJob back = held;
  back.id = "j-2";
  back.swap_state = "resident";
  back.swapped_bytes = 0;
  json j = json::parse(HeartbeatBody("host-a", {held, back}, {}));
  EXPECT_EQ(j["running"][0]["swapped"], true);
  EXPECT_EQ(j["running"][0]["swapped_mib"], 3);
  EXPECT_EQ(j["running"][1]["swapped"], false);
  back.swap_ordered = false;  // no order: a server that gives none may not know the field
  EXPECT_FALSE(json::parse(HeartbeatBody("host-a", {back}, {}))["running"][0].contains("swapped"));
}

}  // namespace
}  // namespace tessera::agent
