// A base fixture for tests against a real `tessera serve` process: write DIR/config.yaml (from a
// ConfigBuilder's YAML, run_as filled in), start the server over it (restarts keep the port), start
// `tessera agent --simulate` processes for it, call the API with a bearer token, read a job's
// state and output, nodes and events, and wait for a condition (WaitFor, tests/support/wait.h).
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../support/wait.h"
#include "proc.h"

namespace tessera::testing {

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ServeFixture : public ::testing::Test {
 protected:
  using Json = nlohmann::json;

  // Writes dir_/config.yaml: `yaml` with WithJobAccounts's run_as.
  void WriteConfig(const std::string& yaml) {
    std::ofstream(dir_ + "/config.yaml") << WithJobAccounts(yaml);
  }
  // Starts `tessera serve` with dir_/config.yaml and dir_/data, on port_ once it has one; `env`
  // ("NAME=value") is set for it on top of this process's environment.
  void StartServer(const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv;
    if (!env.empty()) {
      argv.push_back("/usr/bin/env");
      argv.insert(argv.end(), env.begin(), env.end());
    }
    for (const std::string& a : {kTessera, std::string("serve"), std::string("--config"),
                                 dir_ + "/config.yaml", std::string("--data"), dir_ + "/data",
                                 std::string("--listen"), "127.0.0.1:" + std::to_string(port_)}) {
      argv.push_back(a);
    }
    server_ = std::make_unique<Proc>(argv, dir_ + "/serve.log");
    port_ = server_->WaitForPort();
    ASSERT_GT(port_, 0) << server_->Log();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
  }
  // The parsed JSON reply (its body as a string when not JSON; null when there was no answer).
  Json Call(const std::string& method, const std::string& path, const Json& body = Json::object(),
            const std::string& token = "alice-token-1") {
    httplib::Headers h = {{"Authorization", "Bearer " + token}};
    auto r = method == "POST" ? client_->Post(path.c_str(), h, body.dump(), "application/json")
                              : client_->Get(path.c_str(), h);
    if (!r) return Json();
    Json j = Json::parse(r->body, nullptr, false);
    return j.is_discarded() ? Json(r->body) : j;
  }
  Json Job(const std::string& id) { return Call("GET", "/v1/jobs/" + id); }
  std::string State(const std::string& id) {
    Json j = Job(id);
    return j.is_object() ? j.value("state", "") : "";
  }
  std::string Output(const std::string& id) {
    auto out = client_->Get(("/v1/jobs/" + id + "/output").c_str(),
                            {{"Authorization", "Bearer alice-token-1"}});
    return out ? out->body : "";
  }
  // POST /v1/jobs with `body` as `token`: the new job's id ("" and a failure when refused).
  std::string Submit(const std::string& token, const Json& body) {
    Json r = Call("POST", "/v1/jobs", body, token);
    EXPECT_TRUE(r.is_object() && r.contains("id")) << r.dump();
    return r.is_object() ? r.value("id", "") : "";
  }
  // A job, its state and its output as the admin sees them.
  Json AdminJob(const std::string& id) {
    return Call("GET", "/v1/jobs/" + id, {}, "admin-token-1");
  }
  std::string AdminState(const std::string& id) {
    Json j = AdminJob(id);
    return j.is_object() ? j.value("state", "") : "";
  }
  std::string AdminOutput(const std::string& id) {
    auto out = client_->Get(("/v1/jobs/" + id + "/output").c_str(),
                            {{"Authorization", "Bearer admin-token-1"}});
    return out ? out->body : "";
  }
  // Starts `tessera agent --simulate SIMULATE` for `node` against the server (agent-token-1),
  // logging to dir_/agent-NODE.log; it is agents_.back().
  void StartAgent(const std::string& node, const std::string& simulate = "1xH100-80GB") {
    agents_.push_back(std::make_unique<Proc>(
        std::vector<std::string>{kTessera, "agent", "--server",
                                 "http://127.0.0.1:" + std::to_string(port_), "--token-file",
                                 TokenFile("agent-token-1"), "--node", node, "--simulate", simulate,
                                 "--work", dir_ + "/work-" + node, "--cgroup-root", ""},
        dir_ + "/agent-" + node + ".log"));
  }
  // SIGTERM to every agent at once (an agent stops its jobs, each in a session of its own, and
  // leaves), each waited for up to 5 s; then each Proc kills what is left of its group.
  void StopAgents() {
    for (const auto& a : agents_) a->Signal(SIGTERM);
    for (const auto& a : agents_) a->WaitExited(std::chrono::seconds(5));
    agents_.clear();
  }
  // The server's log, then each agent's, for a failure's message.
  std::string Logs() {
    std::string s = server_ ? server_->Log() : "";
    for (const auto& a : agents_) s += "\n--- agent\n" + a->Log();
    return s;
  }
  // The nodes as the admin sees them (null when the server did not answer).
  Json Nodes() {
    Json j = Call("GET", "/v1/nodes", {}, "admin-token-1");
    return j.is_object() ? j["nodes"] : Json();
  }
  // A node's state ("" when it is not known).
  std::string NodeState(const std::string& name) {
    for (const auto& n : Nodes())
      if (n["name"] == name) return n.value("state", "");
    return "";
  }
  // Nodes registered and not lost.
  int ReadyNodes() {
    int ready = 0;
    for (const auto& n : Nodes()) ready += n["state"] == "ready";
    return ready;
  }
  // The events matching `query` ("kind=job.running&subject=j-1"), at most 1000, as the admin.
  Json Events(const std::string& query) {
    Json j = Call("GET", "/v1/events?limit=1000&" + query, {}, "admin-token-1");
    return j.is_object() ? j["events"] : Json::array();
  }
  // Polls f every 50 ms until it holds or timeout_ms (default wait_ms_) passes.
  template <typename F>
  bool WaitFor(F f, int timeout_ms = 0) {
    return tessera::testing::WaitFor(
        f, std::chrono::milliseconds(timeout_ms > 0 ? timeout_ms : wait_ms_),
        std::chrono::milliseconds(50));
  }

  std::string dir_;
  int port_ = 0;
  int wait_ms_ = 15000;
  std::unique_ptr<Proc> server_;
  std::unique_ptr<httplib::Client> client_;
  std::vector<std::unique_ptr<Proc>> agents_;
};

}  // namespace tessera::testing
