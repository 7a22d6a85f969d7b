// The authorization matrix over HTTP: every route the server has x every role (no token, an
// unknown token, admin, the job's owner, a member of the owner's group, a user of another
// group, an agent bound to the job's node, an agent bound to other nodes) x ownership (the
// routes naming a job use a fresh job of alice's on n1 for each cell). Each cell is a status
// class; a route missing from the table fails the test, so new routes must be placed in it.
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "api/server.h"
#include "sim/scenario.h"

namespace tessera::api {
namespace {

const char* kConfig = R"(
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: carol, role: user, groups: [research], token: carol-token-1}
  - {name: bob, role: user, groups: [prod], token: bob-token-12}
  - {name: agent1, role: agent, nodes: [n1], token: agent1-token-1}
  - {name: agent2, role: agent, nodes: [r2-*], token: agent2-token-1}
groups: [{name: research}, {name: prod}]
profiles: [{name: train, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}]
queues:
  - {name: training, profile: train, groups: [research]}
  - {name: prodq, profile: train, groups: [prod]}
)";

// Columns, in this order.
const std::vector<std::string> kRoles = {"anon",      "bad",   "admin", "owner",
                                         "groupmate", "other", "agent", "agent-other"};
const std::map<std::string, std::string> kTokens = {
    {"bad", "not-a-token-1"},         {"admin", "admin-token-1"}, {"owner", "alice-token-1"},
    {"groupmate", "carol-token-1"},   {"other", "bob-token-12"},  {"agent", "agent1-token-1"},
    {"agent-other", "agent2-token-1"}};

// Expected status per route and role: 2 = 2xx, otherwise the exact code.
struct Row {
  std::string method, path;
  std::vector<int> want;  // per kRoles
};
// anon bad admin owner groupmate other agent agent-other
const std::vector<Row> kMatrix = {
    {"GET", "/v1/health", {2, 2, 2, 2, 2, 2, 2, 2}},
    {"GET", "/", {2, 2, 2, 2, 2, 2, 2, 2}},
    {"GET", "/v1/whoami", {401, 401, 2, 2, 2, 2, 2, 2}},
    {"POST", "/v1/jobs", {401, 401, 2, 2, 2, 403, 403, 403}},
    {"GET", "/v1/jobs", {401, 401, 2, 2, 2, 2, 403, 403}},
    {"GET", "/v1/jobs/{id}", {401, 401, 2, 2, 2, 404, 403, 403}},
    {"POST", "/v1/jobs/{id}/cancel", {401, 401, 2, 2, 403, 404, 403, 403}},
    {"GET", "/v1/jobs/{id}/output", {401, 401, 2, 2, 2, 404, 403, 403}},
    {"GET", "/v1/queues", {401, 401, 2, 2, 2, 2, 403, 403}},
    {"GET", "/v1/groups", {401, 401, 2, 2, 2, 2, 403, 403}},
    {"GET", "/v1/nodes", {401, 401, 2, 2, 2, 2, 403, 403}},
    {"GET", "/v1/summary", {401, 401, 2, 2, 2, 2, 403, 403}},
    {"GET", "/v1/events", {401, 401, 2, 2, 2, 2, 403, 403}},
    {"GET", "/v1/utilization", {401, 401, 2, 2, 2, 2, 403, 403}},
    {"GET", "/v1/usage", {401, 401, 2, 2, 2, 2, 403, 403}},
    {"GET", "/v1/whatif/scenario", {401, 401, 2, 403, 403, 403, 403, 403}},
    {"GET", "/v1/whatif", {401, 401, 2, 403, 403, 403, 403, 403}},
    {"POST", "/v1/agent/register", {401, 401, 2, 403, 403, 403, 2, 403}},
    {"POST", "/v1/agent/heartbeat", {401, 401, 2, 403, 403, 403, 2, 403}},
    {"PUT", "/v1/agent/jobs/{id}/output", {401, 401, 2, 403, 403, 403, 2, 403}},
    {"GET", "/v1/agent/orders", {401, 401, 2, 403, 403, 403, 2, 403}},
    {"GET", "/metrics", {401, 401, 2, 403, 403, 403, 403, 403}},  // without metrics_public
};

class AuthzMatrixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/authz_" + std::to_string(::getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    auto store = store::Store::Open(dir_ + "/t.db");
    ASSERT_TRUE(store.ok());
    auto c = ParseConfig(kConfig);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    c->whatif_replay = sim::WhatIfReport;  // as `tessera serve` wires it
    auto e = Engine::Open(*c, std::move(*store), dir_, [] { return int64_t{1'000'000}; });
    ASSERT_TRUE(e.ok());
    engine_ = std::move(*e);
    server_ = std::make_unique<ApiServer>(engine_.get());
    auto port = server_->Bind("127.0.0.1", 0);
    ASSERT_TRUE(port.ok());
    thread_ = std::thread([this] { server_->Run(50); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", *port);
    for (int i = 0; i < 100 && !client_->Get("/v1/health"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(Send("POST", "/v1/agent/register", "admin", Inventory()), 200);
  }
  void TearDown() override {
    server_->Stop();
    thread_.join();
  }
  static std::string Inventory() {
    // Eight cards: a cancelled job that an agent was told to start holds its card until the
    // agent reports it ended, and the next cell's fresh job must still be placed.
    std::string devices;
    for (int i = 0; i < 8; ++i) {
      devices += std::string(i ? "," : "") + R"({"index":)" + std::to_string(i) +
                 R"(,"model":"H100-80GB","memory_mib":81920,"uuid":"u)" + std::to_string(i) + "\"}";
    }
    return R"({"node":"n1","cpu_milli":64000,"memory_mib":262144,"devices":[)" + devices + "]}";
  }
  int Send(const std::string& method, const std::string& path, const std::string& role,
           const std::string& body) {
    httplib::Headers h;
    if (role != "anon") h.emplace("Authorization", "Bearer " + kTokens.at(role));
    httplib::Result r = method == "GET" ? client_->Get(path.c_str(), h)
                        : method == "POST"
                            ? client_->Post(path.c_str(), h, body, "application/json")
                            : client_->Put(path.c_str(), h, body, "application/octet-stream");
    return r ? r->status : 0;
  }
  // A fresh job of alice's, placed on n1 (the earlier one cancelled, so that n1's card is free).
  std::string FreshJob() {
    if (!last_job_.empty()) Send("POST", "/v1/jobs/" + last_job_ + "/cancel", "admin", "");
    auto r = client_->Post("/v1/jobs", {{"Authorization", "Bearer alice-token-1"}},
                           R"({"queue":"training","command":["true"]})", "application/json");
    EXPECT_TRUE(r && r->status == 201);
    last_job_ = r ? nlohmann::json::parse(r->body)["id"].get<std::string>() : "";
    return last_job_;
  }

  std::string dir_;
  std::string last_job_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<ApiServer> server_;
  std::unique_ptr<httplib::Client> client_;
  std::thread thread_;
};

TEST_F(AuthzMatrixTest, EveryRouteByEveryRoleAndOwnership) {
  std::set<std::string> covered;
  for (const Row& row : kMatrix) {
    covered.insert(row.method + " " + row.path);
    ASSERT_EQ(row.want.size(), kRoles.size()) << row.path;
    for (size_t i = 0; i < kRoles.size(); ++i) {
      std::string path = row.path;
      const size_t at = path.find("{id}");
      if (at != std::string::npos) path.replace(at, 4, FreshJob());
      std::string body;
      if (row.path == "/v1/jobs" && row.method == "POST")
        body = R"({"queue":"training","command":["true"]})";
      if (row.path == "/v1/agent/register") body = Inventory();
      if (row.path == "/v1/agent/heartbeat") body = R"({"node":"n1"})";
      if (row.path == "/v1/agent/orders") path += "?node=n1&wait_ms=0";
      if (row.method == "PUT") {
        path += "?offset=0";
        body = "out";
      }
      const int got = Send(row.method, path, kRoles[i], body);
      const int want = row.want[i];
      if (want == 2) {
        EXPECT_EQ(got / 100, 2) << row.method << " " << row.path << " as " << kRoles[i] << ": "
                                << got;
      } else {
        EXPECT_EQ(got, want) << row.method << " " << row.path << " as " << kRoles[i];
      }
    }
  }
  for (const RouteInfo& r : ApiServer::Routes()) {
    EXPECT_TRUE(covered.count(r.method + " " + r.openapi_path))
        << r.method << " " << r.openapi_path << " is not in the matrix";
  }
}

}  // namespace
}  // namespace tessera::api
