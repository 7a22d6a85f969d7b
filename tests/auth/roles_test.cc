// The read-only roles and static token expiry over HTTP (issue 34): a viewer sees what a user in
// its groups sees and is refused every POST, PUT and DELETE with a message saying so; a metrics
// identity reads GET /metrics and is refused everything else; a static token past its `expires`
// is refused (401) as expired; every refusal is an audit event. A real engine and server on a
// temporary store, every route of the table (ApiServer::Routes()), so a new route is covered
// without an edit here.
#include <gtest/gtest.h>

#include "api/routes.h"
#include "model/timestamp.h"
#include "support/served_engine.h"
#include "support/test_dir.h"
#include "support/wait.h"

namespace tessera::api {
namespace {

// The engine's clock: 2027-01-15T00:00:00Z (from which old-token expired and new-token did not).
constexpr int64_t kNowMs = 1'799'971'200'000;

const char* kConfig = R"(
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: bob, role: user, groups: [prod], token: bob-token-12}
  - {name: vera, role: viewer, groups: [research], token: viewer-token-1}
  - {name: prom, role: metrics, token: metrics-token-1}
  - {name: old, role: user, groups: [research], token: old-token-1, expires: 2027-01-01}
  - {name: new, role: user, groups: [research], token: new-token-1, expires: "2027-06-30T18:00:00Z"}
  - {name: agent1, role: agent, nodes: [n1], token: agent1-token-1}
groups: [{name: research}, {name: prod}]
profiles: [{name: train, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}]
queues:
  - {name: training, profile: train, groups: [research]}
  - {name: prodq, profile: train, groups: [prod]}
)";

class RolesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        served_.Start(tessera::testing::FreshTestDir("roles"), kConfig, [] { return kNowMs; }));
    const std::string inventory =
        R"({"node":"n1","cpu_milli":64000,"memory_mib":262144,"devices":[{"index":0,)"
        R"("model":"H100-80GB","memory_mib":81920,"uuid":"u0"}]})";
    ASSERT_EQ(Send("POST", "/v1/agent/register", "admin-token-1", inventory), 200);
    ASSERT_EQ(
        Send("POST", "/v1/jobs", "alice-token-1", R"({"queue":"training","command":["true"]})"),
        201);
    research_job_ = nlohmann::json::parse(body_)["id"].get<std::string>();
    ASSERT_EQ(Send("POST", "/v1/jobs", "bob-token-12", R"({"queue":"prodq","command":["true"]})"),
              201);
    prod_job_ = nlohmann::json::parse(body_)["id"].get<std::string>();
  }
  int Send(const std::string& method, const std::string& path, const std::string& token,
           const std::string& body = "") {
    const int status = served_.Send(method, path, token, body,
                                    method == "PUT" ? "text/plain" : "application/json");
    body_ = served_.body();
    return status;
  }
  // The request to route `r` (a job route names alice's research job).
  int Call(const RouteInfo& r, const std::string& token) {
    std::string path = r.openapi_path;
    for (size_t at; (at = path.find('{')) != std::string::npos;) {
      const size_t end = path.find('}', at);
      path.replace(at, end - at + 1,
                   path.find("/nodes/") != std::string::npos ? "n1" : research_job_);
    }
    if (r.openapi_path == "/v1/agent/orders") path += "?node=n1&wait_ms=0";
    std::string body = r.method == "GET" ? "" : "{}";
    if (r.openapi_path == "/v1/jobs" && r.method == "POST")
      body = R"({"queue":"training","command":["true"]})";
    return Send(r.method, path, token, body);
  }
  nlohmann::json Events(const std::string& kind) {
    EXPECT_TRUE(tessera::testing::WaitFor(
        [&] {
          return Send("GET", "/v1/events?kind=" + kind, "admin-token-1") == 200 &&
                 !nlohmann::json::parse(body_)["events"].empty();
        },
        std::chrono::seconds(5)))
        << "no " << kind << " event";
    return nlohmann::json::parse(body_)["events"];
  }

  tessera::testing::ServedEngine served_;
  std::string body_, research_job_, prod_job_;
};

TEST_F(RolesTest, ViewerSeesWhatItsGroupsSeeAndCannotAct) {
  int reads = 0, refused_writes = 0;
  for (const RouteInfo& r : ApiServer::Routes()) {
    const std::string cell = r.method + " " + r.openapi_path;
    const int got = Call(r, "viewer-token-1");
    const bool people_read =
        r.access == Access::kUser || r.access == Access::kIdentity || r.access == Access::kPublic;
    if (r.method != "GET") {
      ++refused_writes;
      EXPECT_EQ(got, 403) << cell;
      EXPECT_NE(body_.find("'vera' is a viewer: a viewer may read but not change anything"),
                std::string::npos)
          << cell << ": " << body_;
    } else if (people_read) {
      ++reads;
      EXPECT_EQ(got / 100, 2) << cell << ": " << got << " " << body_;
    } else {
      EXPECT_EQ(got, 403) << cell;
    }
  }
  EXPECT_GE(reads, 8);
  EXPECT_GE(refused_writes, 4);
  // What a user of research sees: research's job, and not prod's.
  EXPECT_EQ(Send("GET", "/v1/jobs/" + research_job_, "viewer-token-1"), 200);
  EXPECT_EQ(Send("GET", "/v1/jobs/" + prod_job_, "viewer-token-1"), 404);
  EXPECT_EQ(Send("GET", "/v1/jobs", "viewer-token-1"), 200);
  EXPECT_NE(body_.find(research_job_), std::string::npos);
  EXPECT_EQ(body_.find(prod_job_), std::string::npos);
  EXPECT_EQ(Send("GET", "/v1/whoami", "viewer-token-1"), 200);
  EXPECT_EQ(nlohmann::json::parse(body_)["role"], "viewer");
  // The job is still alice's to cancel, and not the viewer's.
  EXPECT_EQ(Send("POST", "/v1/jobs/" + research_job_ + "/cancel", "viewer-token-1"), 403);
  EXPECT_EQ(Send("GET", "/v1/jobs/" + research_job_, "admin-token-1"), 200);
  EXPECT_NE(nlohmann::json::parse(body_)["state"], "cancelled");
}

TEST_F(RolesTest, MetricsIdentityScrapesMetricsAndNothingElse) {
  for (const RouteInfo& r : ApiServer::Routes()) {
    const std::string cell = r.method + " " + r.openapi_path;
    const int got = Call(r, "metrics-token-1");
    if (r.openapi_path == "/metrics") {
      EXPECT_EQ(got, 200) << body_;
      EXPECT_NE(body_.find("tessera_http_connections "), std::string::npos);
    } else if (r.access == Access::kPublic) {
      EXPECT_EQ(got / 100, 2) << cell;
    } else {
      EXPECT_EQ(got, 403) << cell;
      EXPECT_NE(body_.find("'prom' is a metrics identity: it may read GET /metrics only"),
                std::string::npos)
          << cell << ": " << body_;
    }
  }
}

TEST_F(RolesTest, StaticTokenPastItsExpiryIsRefusedAsExpired) {
  EXPECT_EQ(Send("GET", "/v1/whoami", "old-token-1"), 401);
  EXPECT_NE(body_.find("the token of 'old' expired at 2027-01-01T00:00:00Z"), std::string::npos)
      << body_;
  EXPECT_EQ(Send("GET", "/v1/whoami", "new-token-1"), 200);
  const auto ev = Events("auth.failed");
  bool found = false;
  for (const auto& e : ev) found = found || e.dump().find("expired") != std::string::npos;
  EXPECT_TRUE(found) << ev.dump();
}

TEST_F(RolesTest, EveryRefusalIsAnAuditEvent) {
  EXPECT_EQ(Send("POST", "/v1/jobs/" + research_job_ + "/cancel", "viewer-token-1"), 403);
  EXPECT_EQ(Send("GET", "/v1/jobs", "metrics-token-1"), 403);
  // Both are written (asynchronously, to the store): wait for the second.
  std::string all;
  EXPECT_TRUE(tessera::testing::WaitFor(
      [&] {
        all = Events("auth.refused").dump();
        return all.find("prom") != std::string::npos;
      },
      std::chrono::seconds(5)))
      << all;
  EXPECT_NE(all.find("'vera' is a viewer"), std::string::npos) << all;
  EXPECT_NE(all.find("'prom' is a metrics identity"), std::string::npos) << all;
}

TEST(RolesConfigTest, BadRoleAndExpiryAreNamed) {
  const std::string tail =
      "groups: [{name: g}]\nprofiles: [{name: p, gpus: 1, forms: [whole]}]\n"
      "queues: [{name: q, profile: p, groups: [g]}]\n";
  auto c = ParseConfig("identities: [{name: a, role: reader, token: aaaaaaaa1}]\n" + tail);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find(
                "identities[0].role: unknown role 'reader' (admin, user, agent, viewer, metrics)"),
            std::string::npos)
      << c.status().message();
  c = ParseConfig("identities: [{name: a, token: aaaaaaaa1, expires: next-week}]\n" + tail);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("identities[0].expires: 'next-week' is not a date"),
            std::string::npos)
      << c.status().message();
  EXPECT_EQ(*ParseTimestampMs("1970-01-02"), 86'400'000);
  EXPECT_EQ(*ParseTimestampMs("2027-01-15T00:00:00Z"), kNowMs);
  EXPECT_EQ(*ParseTimestampMs("1970-01-01T02:00:00+02:00"), 0);
}

}  // namespace
}  // namespace tessera::api
