// HTTPS with real `tessera serve` and `tessera agent` processes: a certificate made by
// net::WriteSelfSigned (what `tessera up` uses); the agent reads its token from a file (never
// on its command line) and verifies the server; clients that do not trust the certificate, or
// speak plain HTTP, get nothing; with a client CA, a client without a certificate is refused.
#include "net/tls.h"

#include <gtest/gtest.h>
#include <httplib.h>

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
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: agent, role: agent, nodes: [n1], token: agent-token-1}
groups: [{name: research}]
profiles: [{name: nb, gpus: 1, gpu_memory: 8GiB, cpu: 100m, memory: 64MiB, forms: [share]}]
queues: [{name: notebooks, profile: nb, groups: [research]}]
)";

class TlsTest : public testing::ServeFixture {
 protected:
  void SetUp() override {
    dir_ = tessera::testing::FreshTestDir("tls");
    std::ofstream(dir_ + "/config.yaml") << tessera::testing::WithJobAccounts(kConfig);
    cert_ = dir_ + "/cert.pem";
    key_ = dir_ + "/key.pem";
    other_cert_ = dir_ + "/other-cert.pem";
    other_key_ = dir_ + "/other-key.pem";
    ASSERT_TRUE(net::WriteSelfSigned(cert_, key_, {"localhost", "127.0.0.1"}).ok());
    ASSERT_TRUE(net::WriteSelfSigned(other_cert_, other_key_, {"localhost", "127.0.0.1"}).ok());
  }
  void TearDown() override {
    agent_.reset();
    server_.reset();
  }
  void Serve(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {
        kTessera,     "serve",        "--config",  dir_ + "/config.yaml",
        "--data",     dir_ + "/data", "--listen",  "127.0.0.1:0",
        "--tls-cert", cert_,          "--tls-key", key_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    server_ = std::make_unique<Proc>(argv, dir_ + "/serve.log");
    port_ = server_->WaitForPort();
    ASSERT_GT(port_, 0) << server_->Log();
  }
  std::unique_ptr<httplib::Client> Https(const std::string& ca) {
    auto c = std::make_unique<httplib::Client>("https://127.0.0.1:" + std::to_string(port_));
    if (!ca.empty()) c->set_ca_cert_path(ca.c_str());
    c->enable_server_certificate_verification(true);
    c->set_connection_timeout(5);
    return c;
  }
  std::string cert_, key_, other_cert_, other_key_;
  std::unique_ptr<Proc> agent_;
};

TEST_F(TlsTest, AgentsAndUsersSpeakHttpsAndUntrustedClientsGetNothing) {
  Serve();
  EXPECT_NE(server_->Log().find("listening on https://"), std::string::npos) << server_->Log();
  std::ofstream(dir_ + "/agent.token") << "agent-token-1\n";
  agent_ = std::make_unique<Proc>(
      std::vector<std::string>{kTessera, "agent", "--server",
                               "https://127.0.0.1:" + std::to_string(port_), "--token-file",
                               dir_ + "/agent.token", "--ca", cert_, "--node", "n1", "--simulate",
                               "1xH100-80GB", "--work", dir_ + "/work", "--cgroup-root", ""},
      dir_ + "/agent.log");
  // The token is in no process's command line.
  std::ifstream cmdline("/proc/" + std::to_string(agent_->pid()) + "/cmdline");
  std::stringstream args;
  args << cmdline.rdbuf();
  EXPECT_EQ(args.str().find("agent-token-1"), std::string::npos);

  auto c = Https(cert_);
  const httplib::Headers alice = {{"Authorization", "Bearer alice-token-1"}};
  auto r = c->Post("/v1/jobs", alice,
                   Json{{"queue", "notebooks"}, {"command", {"echo", "over tls"}}}.dump(),
                   "application/json");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  ASSERT_EQ(r->status, 201) << r->body;
  const std::string id = Json::parse(r->body)["id"];
  ASSERT_TRUE(WaitFor([&] {
    auto j = c->Get(("/v1/jobs/" + id).c_str(), alice);
    return j && j->status == 200 && Json::parse(j->body)["state"] == "succeeded";
  })) << agent_->Log()
      << server_->Log();
  auto out = c->Get(("/v1/jobs/" + id + "/output").c_str(), alice);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->body, "over tls\n");

  // A client trusting another certificate does not talk to this server; nor does plain HTTP.
  auto untrusted = Https(other_cert_)->Get("/v1/health");
  ASSERT_FALSE(untrusted);
  EXPECT_EQ(untrusted.error(), httplib::Error::SSLServerVerification);
  httplib::Client plain("127.0.0.1", port_);
  plain.set_read_timeout(5);
  auto p = plain.Get("/v1/health");
  EXPECT_TRUE(!p || p->status != 200);

  // The CLI: verified with TESSERA_CA, refused (with the reason) without it.
  const std::string url = "https://127.0.0.1:" + std::to_string(port_);
  std::ofstream(dir_ + "/alice.token") << "alice-token-1\n";
  const std::string base = "TESSERA_URL=" + url + " TESSERA_TOKEN_FILE=" + dir_ + "/alice.token ";
  EXPECT_EQ(std::system(
                (base + "TESSERA_CA=" + cert_ + " " + kTessera + " jobs >/dev/null 2>&1").c_str()),
            0);
  EXPECT_NE(std::system((base + kTessera + " jobs > " + dir_ + "/cli.err 2>&1").c_str()), 0);
  EXPECT_NE(testing::ReadFile(dir_ + "/cli.err").find("TESSERA_CA"), std::string::npos)
      << testing::ReadFile(dir_ + "/cli.err");
}

TEST_F(TlsTest, WithAClientCaEveryClientNeedsACertificate) {
  Serve({"--tls-client-ca", other_cert_});
  auto bare = Https(cert_)->Get("/v1/health");
  EXPECT_FALSE(bare && bare->status == 200) << "answered a client without a certificate";
  httplib::Client with("https://127.0.0.1:" + std::to_string(port_), other_cert_, other_key_);
  with.set_ca_cert_path(cert_.c_str());
  auto r = with.Get("/v1/health");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  // The CLI presents a client certificate too (--tls-cert/--tls-key), and is refused without.
  const std::string url = "https://127.0.0.1:" + std::to_string(port_);
  const std::string token = tessera::testing::TokenFile("alice-token-1");
  Proc cli({kTessera, "whoami", "--url", url, "--ca", cert_, "--token-file", token, "--tls-cert",
            other_cert_, "--tls-key", other_key_},
           dir_ + "/cli.log");
  ASSERT_TRUE(WaitFor([&] { return !cli.Alive(); }));
  EXPECT_NE(cli.Log().find("alice (user)"), std::string::npos) << cli.Log();
  Proc bare_cli({kTessera, "whoami", "--url", url, "--ca", cert_, "--token-file", token},
                dir_ + "/cli-bare.log");
  ASSERT_TRUE(WaitFor([&] { return !bare_cli.Alive(); }));
  EXPECT_EQ(bare_cli.Log().find("alice (user)"), std::string::npos) << bare_cli.Log();
}

TEST_F(TlsTest, UnusableCertificateFilesAreNamed) {
  std::ofstream(dir_ + "/bad.pem") << "not a certificate\n";
  server_ = std::make_unique<Proc>(
      std::vector<std::string>{kTessera, "serve", "--config", dir_ + "/config.yaml", "--data",
                               dir_ + "/data", "--listen", "127.0.0.1:0", "--tls-cert",
                               dir_ + "/bad.pem", "--tls-key", key_},
      dir_ + "/serve.log");
  EXPECT_EQ(server_->WaitForPort(5000), -1);
  EXPECT_NE(server_->Log().find("bad.pem"), std::string::npos) << server_->Log();
}

}  // namespace
}  // namespace tessera
