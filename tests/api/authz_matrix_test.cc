// The authorization matrix over HTTP: every route of the server's route table x every role (no
// token, an unknown token, admin, the job's owner, a member of the owner's group, a user of
// another group, an agent bound to the job's node, an agent bound to other nodes) x ownership (the
// routes naming a job use a fresh job of alice's on n1 for each cell). What each cell gets follows
// from the access level the table declares for the route (ApiServer::Routes()): a role the level
// refuses gets 401 (no known token) or 403, one it admits gets 2xx, unless the cell is one of the
// few that what the request names refuses (another group's job, a node of another agent's), listed
// below. A new route is covered by its declared level without an edit here.
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include "api/routes.h"
#include "api/server.h"
#include "sim/scenario.h"
#include "sim/usage_api.h"
#include "support/test_dir.h"
#include "support/wait.h"

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

// The roles of the matrix (anon: no token; bad: an unknown one) and their tokens.
const std::vector<std::string> kRoles = {"anon",      "bad",   "admin", "owner",
                                         "groupmate", "other", "agent", "agent-other"};
const std::map<std::string, std::string> kTokens = {
    {"bad", "not-a-token-1"},         {"admin", "admin-token-1"}, {"owner", "alice-token-1"},
    {"groupmate", "carol-token-1"},   {"other", "bob-token-12"},  {"agent", "agent1-token-1"},
    {"agent-other", "agent2-token-1"}};

// Who each access level admits, as its definition reads (docs/openapi.json's
// x-tessera-access-levels), written out here rather than taken from the server's code.
std::set<std::string> Admitted(Access access, bool metrics_public) {
  const std::set<std::string> people = {"admin", "owner", "groupmate", "other"};
  const std::set<std::string> agents = {"admin", "agent", "agent-other"};
  std::set<std::string> identities = people;
  identities.insert(agents.begin(), agents.end());
  switch (access) {
    case Access::kPublic:
      return std::set<std::string>(kRoles.begin(), kRoles.end());
    case Access::kIdentity:
      return identities;
    case Access::kUser:
      return people;
    case Access::kAgent:
      return agents;
    case Access::kAdmin:
      return {"admin"};
    case Access::kMetrics:
      if (!metrics_public) return {"admin"};
      identities.insert("anon");  // no token needed; an unknown one is still refused
      return identities;
  }
  return {};
}

// The cells a route's level admits but what the request names refuses: status by
// "METHOD PATTERN as ROLE". (Alice's job is in group research; bob is in prod; agent2 speaks for
// r2-* nodes, and the requests name n1.)
const std::map<std::string, int> kRefusedByWhatIsNamed = {
    {"POST /v1/jobs as other", 403},  // bob may not submit to research's queue
    {"GET /v1/jobs/{id} as other", 404},
    {"POST /v1/jobs/{id}/cancel as groupmate", 403},  // seen, but not hers to cancel
    {"POST /v1/jobs/{id}/cancel as other", 404},
    {"GET /v1/jobs/{id}/output as other", 404},
    {"POST /v1/agent/register as agent-other", 403},
    {"POST /v1/agent/heartbeat as agent-other", 403},
    {"PUT /v1/agent/jobs/{id}/output as agent-other", 403},
    {"GET /v1/agent/orders as agent-other", 403},
};

// What a cell should get: 2 for any 2xx, otherwise the exact code.
int Want(const RouteInfo& r, const std::string& role, bool metrics_public) {
  if (!Admitted(r.access, metrics_public).count(role)) {
    return role == "anon" || role == "bad" ? 401 : 403;
  }
  auto it = kRefusedByWhatIsNamed.find(r.method + " " + r.openapi_path + " as " + role);
  return it == kRefusedByWhatIsNamed.end() ? 2 : it->second;
}

class AuthzMatrixTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(""); }
  // A server on a fresh data directory, its config kConfig plus `more`.
  void Start(const std::string& more) {
    dir_ = tessera::testing::FreshTestDir("authz");
    auto store = store::Store::Open(dir_ + "/t.db");
    ASSERT_TRUE(store.ok());
    auto c = ParseConfig(kConfig + more);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    c->whatif.replay = sim::WhatIfReport;  // as `tessera serve` wires it
    c->whatif.usage = sim::usage::WhatIfUsageReport;
    auto e = Engine::Open(*c, std::move(*store), dir_, [] { return int64_t{1'000'000}; });
    ASSERT_TRUE(e.ok());
    engine_ = std::move(*e);
    server_ = std::make_unique<ApiServer>(engine_.get());
    auto port = server_->Bind("127.0.0.1", 0);
    ASSERT_TRUE(port.ok());
    thread_ = std::thread([this] { server_->Run(50); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", *port);
    ASSERT_TRUE(tessera::testing::WaitFor(
        [&] { return static_cast<bool>(client_->Get("/v1/health")); }, std::chrono::seconds(2)))
        << "the server never answered";
    ASSERT_EQ(Send("POST", "/v1/agent/register", "admin", Inventory()), 200);
  }
  void TearDown() override { Stop(); }
  void Stop() {
    if (!server_) return;
    server_->Stop();
    thread_.join();
    client_.reset();
    server_.reset();
    engine_.reset();
    last_job_.clear();
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
  // The request a cell sends to route `r` as `role`; its status.
  int Call(const RouteInfo& r, const std::string& role) {
    std::string path = r.openapi_path;
    const size_t at = path.find("{id}");
    if (at != std::string::npos) path.replace(at, 4, FreshJob());
    const size_t node = path.find("{node}");  // cordon, drain, uncordon: n1 (back to work last)
    if (node != std::string::npos) path.replace(node, 6, "n1");
    std::string body;
    if (r.openapi_path == "/v1/jobs" && r.method == "POST")
      body = R"({"queue":"training","command":["true"]})";
    if (r.openapi_path == "/v1/agent/register") body = Inventory();
    if (r.openapi_path == "/v1/agent/heartbeat") body = R"({"node":"n1"})";
    if (r.openapi_path == "/v1/whatif/usage")
      body = "workload,timestamp,gpu_util_pct,gpu_memory_bytes\nw,1700000000,50,1073741824\n";
    if (r.openapi_path == "/v1/agent/orders") path += "?node=n1&wait_ms=0";
    if (r.method == "PUT") {
      path += "?offset=0";
      body = "out";
    }
    return Send(r.method, path, role, body);
  }
  // Every cell of the routes `only` admits (all when null) against Want().
  void ExpectMatrix(bool metrics_public, const std::function<bool(const RouteInfo&)>& only) {
    for (const RouteInfo& r : ApiServer::Routes()) {
      if (only && !only(r)) continue;
      for (const std::string& role : kRoles) {
        const int got = Call(r, role);
        const int want = Want(r, role, metrics_public);
        const std::string cell = r.method + " " + r.openapi_path + " as " + role + " (access " +
                                 AccessName(r.access) + ")";
        if (want == 2) {
          EXPECT_EQ(got / 100, 2) << cell << ": " << got;
        } else {
          EXPECT_EQ(got, want) << cell;
        }
        if (want == 403 && !Admitted(r.access, metrics_public).count(role)) {
          // Refused by the server's check of the declared level (which says who the route is
          // for), before the handler runs.
          EXPECT_NE(last_body_.find(" is for "), std::string::npos) << cell << ": " << last_body_;
        }
      }
    }
  }
  int Send(const std::string& method, const std::string& path, const std::string& role,
           const std::string& body) {
    httplib::Headers h;
    if (role != "anon") h.emplace("Authorization", "Bearer " + kTokens.at(role));
    httplib::Result r = method == "GET" ? client_->Get(path.c_str(), h)
                        : method == "POST"
                            ? client_->Post(path.c_str(), h, body, "application/json")
                            : client_->Put(path.c_str(), h, body, "application/octet-stream");
    last_body_ = r ? r->body : "";
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
  std::string last_body_;  // of the last answer
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<ApiServer> server_;
  std::unique_ptr<httplib::Client> client_;
  std::thread thread_;
};

TEST_F(AuthzMatrixTest, EveryRouteByEveryRoleAsItsDeclaredAccessSays) {
  ExpectMatrix(false, nullptr);
  // Every listed exception names a route of the table and a role its level admits.
  for (const auto& [cell, status] : kRefusedByWhatIsNamed) {
    bool found = false;
    for (const RouteInfo& r : ApiServer::Routes()) {
      const std::string prefix = r.method + " " + r.openapi_path + " as ";
      if (cell.rfind(prefix, 0) != 0) continue;
      found = true;
      EXPECT_TRUE(Admitted(r.access, false).count(cell.substr(prefix.size())))
          << cell << ": refused by the route's level already";
    }
    EXPECT_TRUE(found) << cell << ": no such route";
  }
}

// With metrics_public, the routes of that level are anyone's, without a token (an unknown token
// is still refused).
TEST_F(AuthzMatrixTest, MetricsPublicOpensItsRoutesToAnyone) {
  Stop();
  Start("metrics_public: true\n");
  int routes = 0;
  ExpectMatrix(true, [&](const RouteInfo& r) {
    routes += r.access == Access::kMetrics;
    return r.access == Access::kMetrics;
  });
  EXPECT_GT(routes, 0);
}

}  // namespace
}  // namespace tessera::api
