// `tessera login` (issue 34) against a REAL provider (oidc-provider, tests/auth/provider): the
// real CLI runs the device code flow, the test completes the person's side on the provider's own
// pages over HTTP (user_agent.mjs), and the login is kept in a 0600 file that later commands use,
// refreshing the short-lived ID token with the refresh token once it expires.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "auth/jwt.h"
#include "auth/oidc_provider.h"
#include "support/served_engine.h"
#include "support/test_dir.h"

namespace tessera::api {
namespace {

using tessera::testing::Proc;
using tessera::testing::RunShell;
using tessera::testing::TestProvider;
using tessera::testing::WallMs;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(LoginTest, DeviceCodeSignInKeepsA0600LoginAndRefreshesIt) {
  const std::string dir = tessera::testing::FreshTestDir("login");
  // ID tokens of 3 s: the second command finds it expired and refreshes it.
  TestProvider idp(dir + "/keys.json", {"--id-token-ttl", "3"});
  ASSERT_TRUE(idp.Start());
  const std::string config = R"(
identities:
  - {name: admin, role: admin, token: admin-token-1}
oidc:
  issuer: )" + idp.issuer() +
                             R"(
  client_id: tessera
  scopes: openid profile offline_access groups unix
  account_claim: unix_account
  clock_skew: 0s
groups: [{name: research}]
profiles: [{name: train, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}]
queues: [{name: training, profile: train, groups: [research]}]
)";
  tessera::testing::ServedEngine served;
  ASSERT_TRUE(served.Start(dir, config));
  const int port = served.port();
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  const std::string login_file = dir + "/login.json";
  setenv("TESSERA_LOGIN_FILE", login_file.c_str(), 1);
  setenv("TESSERA_LOGIN_POLL_MS", "200", 1);
  unsetenv("TESSERA_TOKEN");
  unsetenv("TESSERA_TOKEN_FILE");

  Proc login({tessera::testing::kTessera, "login", "--url", url}, dir + "/login.log");
  std::smatch m;
  const std::regex shown("open (http://\\S+) and enter the code (\\S+)");
  std::string log;
  ASSERT_TRUE(tessera::testing::WaitFor(
      [&] {
        log = login.Log();
        return std::regex_search(log, m, shown) || !login.Alive();
      },
      std::chrono::seconds(15)))
      << log;
  ASSERT_TRUE(std::regex_search(log, m, shown)) << log;
  // The person's side, on the provider's pages: the code, the login form, the confirmation.
  auto person = RunShell("cd " + tessera::testing::kProviderDir + " && node user_agent.mjs " +
                         m[1].str() + " alice " + m[2].str() + " 2>&1");
  ASSERT_EQ(person.code, 0) << person.out;
  ASSERT_TRUE(login.WaitExited(std::chrono::seconds(15))) << login.Log();
  EXPECT_NE(login.Log().find("Signed in as alice (user, groups [\"research\"])"), std::string::npos)
      << login.Log();

  struct stat st {};
  ASSERT_EQ(stat(login_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto kept = nlohmann::json::parse(Slurp(login_file), nullptr, false);
  ASSERT_TRUE(kept.is_object());
  const std::string first = kept.value("id_token", "");
  EXPECT_FALSE(kept.value("refresh_token", "").empty());

  // A later command uses the login, past the first token's expiry: refreshed, kept, accepted.
  auto jwt = auth::ParseJwt(first);
  ASSERT_TRUE(jwt.ok());
  const int64_t exp_ms = jwt->claims["exp"].get<int64_t>() * 1000;
  std::this_thread::sleep_for(
      std::chrono::milliseconds(std::max<int64_t>(0, exp_ms - WallMs() + 1100)));
  httplib::Client direct("127.0.0.1", port);
  auto old = direct.Get("/v1/whoami", {{"Authorization", "Bearer " + first}});
  ASSERT_TRUE(old);
  EXPECT_EQ(old->status, 401);  // the first token alone is expired now
  auto who = RunShell("TESSERA_URL=" + url + " " + tessera::testing::kTessera + " whoami 2>&1");
  EXPECT_EQ(who.code, 0) << who.out;
  EXPECT_NE(who.out.find("alice"), std::string::npos) << who.out;
  kept = nlohmann::json::parse(Slurp(login_file), nullptr, false);
  EXPECT_NE(kept.value("id_token", ""), first);
  ASSERT_EQ(stat(login_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

}  // namespace
}  // namespace tessera::api
