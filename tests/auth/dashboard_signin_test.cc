// The dashboard's sign-in through the identity provider (issue 34) in a real headless Chromium
// (driven by tests/api/dashboard_browser.js over the DevTools protocol) against a REAL provider
// (oidc-provider, tests/auth/provider): the page offers "Sign in with your organisation", the
// browser goes to the provider's own login page, signs in as alice, comes back with a code that
// the page exchanges (authorization code with PKCE, a public client), and the dashboard shows
// alice signed in with her role; a wrong token typed in the box gets a sentence, not raw JSON.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "auth/oidc_provider.h"
#include "support/served_engine.h"
#include "support/test_dir.h"

namespace tessera::api {
namespace {

using Json = nlohmann::json;
using tessera::testing::TestProvider;
using tessera::testing::WallMs;

Json Browse(const std::string& dir, const Json& steps) {
  std::string chromium;
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (std::filesystem::exists(c)) chromium = c;
  }
  EXPECT_FALSE(chromium.empty()) << "chromium is not installed: run scripts/setup.sh";
  const std::string in = dir + "/steps.json", out = dir + "/result.json";
  std::ofstream(in) << Json{{"width", 1366}, {"height", 900}, {"steps", steps}}.dump();
  const std::string cmd = "node " TESSERA_SOURCE_DIR "/tests/api/dashboard_browser.js " + chromium +
                          " " + in + " " + out;
  const int rc = std::system(cmd.c_str());
  std::ifstream f(out);
  std::stringstream ss;
  ss << f.rdbuf();
  Json r = Json::parse(ss.str(), nullptr, false);
  EXPECT_FALSE(r.is_discarded()) << cmd << " wrote no result (rc " << rc << ")";
  if (r.is_discarded()) return Json::object();
  EXPECT_EQ(r["error"], "") << r.dump(1);
  return r["results"];
}

TEST(DashboardSignInTest, SignsInThroughTheProviderWithPkce) {
  const std::string dir = tessera::testing::FreshTestDir("dash_oidc");
  TestProvider idp(dir + "/keys.json");
  auto c = ParseConfig(R"(
identities:
  - {name: admin, role: admin, token: admin-token-1}
oidc:
  issuer: )" + idp.issuer() +
                       R"(
  client_id: tessera
  scopes: openid profile groups
roles_note: unused
groups: [{name: research}]
profiles: [{name: train, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}]
queues: [{name: training, profile: train, groups: [research]}]
)");
  ASSERT_FALSE(c.ok());  // an unknown key at the top is named
  EXPECT_NE(c.status().message().find("roles_note"), std::string::npos) << c.status().message();
  const std::string config = R"(
identities:
  - {name: admin, role: admin, token: admin-token-1}
oidc:
  issuer: )" + idp.issuer() +
                             R"(
  client_id: tessera
  scopes: openid profile groups
  roles: {viewer: [tessera-viewers]}
groups: [{name: research}]
profiles: [{name: train, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}]
queues: [{name: training, profile: train, groups: [research]}]
)";
  tessera::testing::ServedEngine served;
  ASSERT_TRUE(served.Start(dir, config));
  const int port = served.port();
  const std::string page = "http://127.0.0.1:" + std::to_string(port) + "/";
  ASSERT_TRUE(idp.Start({"--redirect", page}));

  auto wait = [](const std::string& expr) { return Json{{"wait", expr}, {"timeout_ms", 15000}}; };
  Json results = Browse(
      dir, Json::array(
               {{{"goto", page}},
                // A wrong token first: a sentence, not raw JSON.
                wait("document.getElementById('oidc-sign-in') && "
                     "!document.getElementById('login').hidden"),
                {{"type", "#token"}, {"text", "not-a-token-1"}},
                {{"click", "#login button:not([type=button])"}},
                wait("document.getElementById('login-why').textContent.includes('not accepted')"),
                {{"eval", "document.getElementById('login-why').textContent"}, {"as", "wrong"}},
                // The provider.
                {{"click", "#oidc-sign-in"}},
                wait("document.querySelector('input[name=login]')"),
                {{"type", "input[name=login]"}, {"text", "vera"}},
                {{"type", "input[name=password]"}, {"text", "any-password"}},
                {{"click", "button.login-submit"}},
                wait("document.getElementById('whoami') && "
                     "document.getElementById('whoami').textContent.includes('signed in as vera')"),
                {{"eval", "document.getElementById('whoami').textContent"}, {"as", "whoami"}},
                {{"eval", "location.search"}, {"as", "search"}},
                {{"screenshot", dir + "/signed-in.png"}}}));
  EXPECT_NE(results.value("wrong", "").find("unknown token"), std::string::npos) << results.dump();
  EXPECT_EQ(results.value("wrong", "").find("{\""), std::string::npos) << results.dump();
  EXPECT_NE(results.value("whoami", "").find("signed in as vera (viewer)"), std::string::npos)
      << results.dump();
  EXPECT_EQ(results.value("search", "?"), "");  // the code is gone from the address bar

  // One sign-in event, by the provider's identity.
  httplib::Client admin("127.0.0.1", port);
  ASSERT_TRUE(tessera::testing::WaitFor(
      [&] {
        auto r =
            admin.Get("/v1/events?kind=auth.signin", {{"Authorization", "Bearer admin-token-1"}});
        return r && r->body.find("\"vera\"") != std::string::npos;
      },
      std::chrono::seconds(5)));
}

}  // namespace
}  // namespace tessera::api
