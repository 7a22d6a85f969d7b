// The structured logs of real `tessera serve` and `tessera agent` processes with
// --log-format json: every line is a JSON object; a user request leaves one request-log line
// (method, path, status; never the token); agents' heartbeats leave none at info.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "proc.h"
#include "serve_fixture.h"
#include "test_dir.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
using testing::kTessera;
using testing::Proc;

const char* kConfig = R"(
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups: [{name: research}]
profiles: [{name: nb, gpus: 1, gpu_memory: 8GiB, cpu: 100m, memory: 64MiB, forms: [share]}]
queues: [{name: notebooks, profile: nb, groups: [research]}]
)";

// Every line of `log` parsed; a line that is not a JSON object fails the test.
std::vector<Json> JsonLines(const std::string& log) {
  std::vector<Json> out;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    Json j = Json::parse(line, nullptr, false);
    EXPECT_TRUE(j.is_object()) << "not a JSON object: " << line;
    if (j.is_object()) out.push_back(j);
  }
  return out;
}

class ServeLogTest : public testing::ServeFixture {
 protected:
  void TearDown() override {
    agent_.reset();
    server_.reset();
  }
  std::unique_ptr<Proc> agent_;
};

TEST_F(ServeLogTest, JsonLinesWithARequestLogForUserRequests) {
  dir_ = tessera::testing::FreshTestDir("serve_log");
  std::ofstream(dir_ + "/config.yaml") << tessera::testing::WithJobAccounts(kConfig);
  server_ = std::make_unique<Proc>(
      std::vector<std::string>{kTessera, "serve", "--config", dir_ + "/config.yaml", "--data",
                               dir_ + "/data", "--listen", "127.0.0.1:0", "--log-format", "json"},
      dir_ + "/serve.log");
  port_ = server_->WaitForPort();
  ASSERT_GT(port_, 0) << server_->Log();
  client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
  agent_ = std::make_unique<Proc>(
      std::vector<std::string>{kTessera, "agent", "--server",
                               "http://127.0.0.1:" + std::to_string(port_), "--token-file",
                               tessera::testing::TokenFile("agent-token-1"), "--node", "n1",
                               "--simulate", "1xH100-80GB", "--work", dir_ + "/work",
                               "--cgroup-root", "", "--log-format", "json"},
      dir_ + "/agent.log");
  int64_t registered_ms = 0;
  ASSERT_TRUE(WaitFor([&] {
    Json j = Call("GET", "/v1/nodes", {}, "admin-token-1");
    if (!(j.is_object() && j["nodes"].size() == 1 && j["nodes"][0]["state"] == "ready"))
      return false;
    registered_ms = j["nodes"][0].value("last_heartbeat_ms", int64_t{0});
    return true;
  })) << agent_->Log();
  // A heartbeat after the registration (its log line, were there one, is written by then).
  ASSERT_TRUE(WaitFor([&] {
    Json j = Call("GET", "/v1/nodes", {}, "admin-token-1");
    return j.is_object() && j["nodes"].size() == 1 &&
           j["nodes"][0].value("last_heartbeat_ms", int64_t{0}) > registered_ms;
  })) << agent_->Log();

  Json who = Call("GET", "/v1/whoami?probe=1");
  ASSERT_TRUE(who.is_object()) << who.dump();
  EXPECT_EQ(who["name"], "alice");
  // The line is written once the response is: wait for it.
  const Json* line = nullptr;
  std::vector<Json> lines;
  ASSERT_TRUE(WaitFor(
      [&] {
        lines = JsonLines(server_->Log());
        for (const Json& j : lines) {
          if (j.value("component", "") == "http" && j.value("path", "") == "/v1/whoami") line = &j;
        }
        return line != nullptr;
      },
      5000))
      << server_->Log();
  EXPECT_EQ((*line)["level"], "info");
  EXPECT_EQ((*line)["message"], "request");
  EXPECT_EQ((*line)["method"], "GET");
  EXPECT_EQ((*line)["status"], 200);
  EXPECT_TRUE((*line)["duration_us"].is_number_integer());
  EXPECT_TRUE((*line).contains("peer"));
  EXPECT_TRUE((*line).contains("time"));

  const std::string serve_log = server_->Log();
  EXPECT_EQ(serve_log.find("alice-token-1"), std::string::npos) << serve_log;
  EXPECT_EQ(serve_log.find("agent-token-1"), std::string::npos) << serve_log;
  EXPECT_EQ(serve_log.find("probe"), std::string::npos) << "the query string is not logged";
  EXPECT_EQ(serve_log.find("/v1/agent/heartbeat"), std::string::npos)
      << "heartbeats log at debug, not info";
  bool listening = false;
  for (const Json& j : lines) {
    listening |=
        j.value("component", "") == "serve" &&
        j.value("message", "").rfind("listening on http://127.0.0.1:" + std::to_string(port_), 0) ==
            0;
  }
  EXPECT_TRUE(listening) << serve_log;

  bool registered = false;
  for (const Json& j : JsonLines(agent_->Log())) {
    registered |=
        j.value("component", "") == "agent" &&
        j.value("message", "").find("registered with the control plane") != std::string::npos &&
        j.value("node", "") == "n1";
  }
  EXPECT_TRUE(registered) << agent_->Log();
}

}  // namespace
}  // namespace tessera
