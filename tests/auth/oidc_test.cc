// The API accepts an OpenID Connect provider's tokens (issue 34), against a REAL provider (the npm
// package oidc-provider, tests/auth/provider/provider.mjs, started here; not a mock): users sign
// in through the provider's own pages (the device code flow, driven over HTTP), and the ID tokens
// it signs are given to a real engine and API server. Covered: group claims to Tessera groups and
// roles (admin, user, viewer, metrics by the config's oidc.roles) and the account claim to the
// job's run_as; a token past its expiry refused; a token from another issuer or for another
// audience refused; the provider rotating its signing key picked up without a restart; a sign-in
// is one audit event.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "auth/jwt.h"
#include "auth/oidc_provider.h"
#include "support/served_engine.h"
#include "support/test_dir.h"

namespace tessera::api {
namespace {

using tessera::testing::TestProvider;
using tessera::testing::WallMs;

class OidcTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = tessera::testing::FreshTestDir("oidc"); }
  // An engine and server that accept `issuer`'s tokens for client "tessera".
  void StartServer(const std::string& issuer) {
    const std::string config = R"(
identities:
  - {name: admin, role: admin, token: admin-token-1}
oidc:
  issuer: )" + issuer + R"(
  client_id: tessera
  account_claim: unix_account
  clock_skew: 0s
  roles: {admin: [tessera-admins], viewer: [tessera-viewers], metrics: [tessera-metrics]}
groups: [{name: research}, {name: prod}]
profiles: [{name: train, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}]
queues:
  - {name: training, profile: train, groups: [research]}
  - {name: prodq, profile: train, groups: [prod]}
)";
    ASSERT_TRUE(served_.Start(dir_, config));
  }
  int Send(const std::string& method, const std::string& path, const std::string& token,
           const std::string& body = "") {
    const int status = served_.Send(method, path, token, body);
    body_ = served_.body();
    return status;
  }
  nlohmann::json WhoAmI(const std::string& token) {
    EXPECT_EQ(Send("GET", "/v1/whoami", token), 200) << body_;
    return nlohmann::json::parse(body_, nullptr, false);
  }
  std::string Kid(const std::string& token) {
    auto jwt = auth::ParseJwt(token);
    return jwt.ok() ? jwt->header.value("kid", "") : "";
  }

  tessera::testing::ServedEngine served_;
  std::string dir_, body_;
};

TEST_F(OidcTest, GroupClaimsBecomeGroupsRolesAndTheAccount) {
  TestProvider idp(dir_ + "/keys.json");
  ASSERT_TRUE(idp.Start());
  StartServer(idp.issuer());

  const std::string alice = idp.IdToken("alice");
  auto me = WhoAmI(alice);
  EXPECT_EQ(me["name"], "alice");
  EXPECT_EQ(me["role"], "user");
  // The provider says [research, staff]: staff is no Tessera group.
  EXPECT_EQ(me["groups"], nlohmann::json::array({"research"}));
  ASSERT_EQ(Send("POST", "/v1/jobs", alice, R"({"queue":"training","command":["true"]})"), 201)
      << body_;
  const std::string job = nlohmann::json::parse(body_)["id"];
  ASSERT_EQ(Send("GET", "/v1/jobs/" + job, alice), 200);
  auto j = nlohmann::json::parse(body_);
  EXPECT_EQ(j["identity"], "alice");
  EXPECT_EQ(j["spec"]["run_as"], "alice");  // the unix_account claim
  EXPECT_EQ(Send("POST", "/v1/jobs", alice, R"({"queue":"prodq","command":["true"]})"), 403);

  const std::string bob = idp.IdToken("bob");
  EXPECT_EQ(WhoAmI(bob)["groups"], nlohmann::json::array({"prod"}));
  EXPECT_EQ(Send("GET", "/v1/jobs/" + job, bob), 404);  // another group's job

  const std::string vera = idp.IdToken("vera");
  EXPECT_EQ(WhoAmI(vera)["role"], "viewer");
  EXPECT_EQ(Send("GET", "/v1/jobs/" + job, vera), 200);
  EXPECT_EQ(Send("POST", "/v1/jobs/" + job + "/cancel", vera), 403);
  EXPECT_NE(body_.find("a viewer may read but not change anything"), std::string::npos) << body_;

  const std::string prom = idp.IdToken("prom");
  EXPECT_EQ(Send("GET", "/metrics", prom), 200);
  EXPECT_EQ(Send("GET", "/v1/jobs", prom), 403);

  const std::string root1 = idp.IdToken("root1");
  EXPECT_EQ(WhoAmI(root1)["role"], "admin");
  EXPECT_EQ(Send("POST", "/v1/jobs/" + job + "/cancel", root1), 200) << body_;

  // One sign-in event per person, however many requests: alice made four.
  nlohmann::json signins;
  ASSERT_TRUE(tessera::testing::WaitFor(
      [&] {
        if (Send("GET", "/v1/events?kind=auth.signin", "admin-token-1") != 200) return false;
        signins = nlohmann::json::parse(body_)["events"];
        return signins.size() >= 5;
      },
      std::chrono::seconds(5)))
      << body_;
  int alices = 0;
  for (const auto& e : signins) alices += e["actor"] == "alice";
  EXPECT_EQ(alices, 1) << signins.dump();
  EXPECT_EQ(signins.size(), 5u) << signins.dump();
}

TEST_F(OidcTest, ExpiredTokenIsRefused) {
  TestProvider idp(dir_ + "/keys.json", {"--id-token-ttl", "2"});
  ASSERT_TRUE(idp.Start());
  StartServer(idp.issuer());
  const std::string alice = idp.IdToken("alice");
  EXPECT_EQ(Send("GET", "/v1/whoami", alice), 200) << body_;
  auto jwt = auth::ParseJwt(alice);
  ASSERT_TRUE(jwt.ok());
  const int64_t exp_ms = jwt->claims["exp"].get<int64_t>() * 1000;
  std::this_thread::sleep_for(std::chrono::milliseconds(exp_ms - WallMs() + 1100));
  EXPECT_EQ(Send("GET", "/v1/whoami", alice), 401);
  EXPECT_NE(body_.find("token expired at " + auth::FormatUtc(exp_ms) + ": sign in again"),
            std::string::npos)
      << body_;
}

TEST_F(OidcTest, TokenOfAnotherIssuerOrAudienceIsRefused) {
  TestProvider idp(dir_ + "/keys.json");
  TestProvider other(dir_ + "/other-keys.json");
  ASSERT_TRUE(idp.Start());
  ASSERT_TRUE(other.Start());
  StartServer(idp.issuer());
  EXPECT_EQ(Send("GET", "/v1/whoami", idp.IdToken("alice")), 200) << body_;
  EXPECT_EQ(Send("GET", "/v1/whoami", other.IdToken("alice")), 401);
  EXPECT_NE(body_.find("token issued by '" + other.issuer() + "', not by '" + idp.issuer() + "'"),
            std::string::npos)
      << body_;
  EXPECT_EQ(Send("GET", "/v1/whoami", idp.IdToken("alice", "other-app")), 401);
  EXPECT_NE(body_.find("token is for audience 'other-app', not 'tessera'"), std::string::npos)
      << body_;
  // A token whose payload was changed after signing (alice made admin).
  std::string forged = idp.IdToken("alice");
  auto jwt = auth::ParseJwt(forged);
  ASSERT_TRUE(jwt.ok());
  jwt->claims["groups"] = {"research", "tessera-admins"};
  const size_t a = forged.find('.'), b = forged.rfind('.');
  forged = forged.substr(0, a + 1) + auth::Base64UrlEncode(jwt->claims.dump()) + forged.substr(b);
  EXPECT_EQ(Send("GET", "/v1/whoami", forged), 401);
  EXPECT_NE(body_.find("signature does not verify"), std::string::npos) << body_;
  // Each refusal is an auth.failed event.
  ASSERT_EQ(Send("GET", "/v1/events?kind=auth.failed", "admin-token-1"), 200);
  EXPECT_NE(body_.find("not by '" + idp.issuer()), std::string::npos) << body_;
}

TEST_F(OidcTest, KeyRotationAtTheProviderIsPickedUp) {
  TestProvider idp(dir_ + "/keys.json");
  ASSERT_TRUE(idp.Start());
  StartServer(idp.issuer());
  const std::string before = idp.IdToken("alice");
  const auto fetched = std::chrono::steady_clock::now();
  EXPECT_EQ(Send("GET", "/v1/whoami", before), 200) << body_;
  // The provider rotates: a new signing key, the old one still published.
  idp.Stop();
  ASSERT_TRUE(idp.Start({"--rotate"}));
  const std::string after = idp.IdToken("alice");
  ASSERT_NE(Kid(after), Kid(before));
  // Keys are fetched again for an unknown key at most once per kMinRefetchMs: the new key is
  // shown once that has passed since the first fetch (on a fast machine the rotation takes less).
  std::this_thread::sleep_until(fetched +
                                std::chrono::milliseconds(auth::OidcVerifier::kMinRefetchMs + 200));
  EXPECT_EQ(Send("GET", "/v1/whoami", after), 200) << body_;
  EXPECT_EQ(Send("GET", "/v1/whoami", before), 200) << body_;
  EXPECT_EQ(served_.engine().config().oidc_verifier->key_fetches(), 2);
}

TEST_F(OidcTest, Es256KeysVerifyToo) {
  TestProvider idp(dir_ + "/keys.json", {"--alg", "ES256"});
  ASSERT_TRUE(idp.Start());
  StartServer(idp.issuer());
  const std::string vera = idp.IdToken("vera");
  auto jwt = auth::ParseJwt(vera);
  ASSERT_TRUE(jwt.ok());
  EXPECT_EQ(jwt->header["alg"], "ES256");
  EXPECT_EQ(WhoAmI(vera)["role"], "viewer");
}

}  // namespace
}  // namespace tessera::api
