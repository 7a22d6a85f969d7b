// Issue 34: one person is one account from the sign-in to Slurm's accounting. Against the REAL
// OpenID provider (tests/auth/provider, the npm package oidc-provider; not a mock) and the REAL
// single-host Slurm with slurmdbd where it is installed (tests/backends/slurm_up.sh with
// SLURM_UP_ACCOUNTING=1, as SlurmAccountingTest): the person "nora" signs in through the
// provider's own pages (the device code flow), and her ID token submits a job to a `backend:
// slurm` queue of a real `tessera serve`, whose oidc.account_claim (unix_account) maps her to the
// Unix account `nobody`; Slurm runs the job under that account, not root's (the account `tessera
// serve` runs under): squeue while it runs, and sacct (with slurmdbd) or Slurm's job completion
// log (without it) once it ended. Needs root (slurmctld/slurmd) and `npm ci` in
// tests/auth/provider; skipped without root.
#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "../api/serve_fixture.h"
#include "auth/oidc_provider.h"
#include "slurm_env.h"
#include "support/shell.h"

namespace tessera {
namespace {

using testing::ReadFile;
using testing::RunShell;
using testing::TestProvider;

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  while (!s.empty() && s.front() == ' ') s.erase(s.begin());
  return s;
}

class SlurmOidcTest : public testing::ServeFixture {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to run slurmctld/slurmd";
    wait_ms_ = 20000;
    // Short: munged's socket path must fit in sun_path (108 bytes).
    dir_ = ::testing::TempDir() + "/so" + std::to_string(::getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    slurm_ = dir_ + "/slurm";
    started_ = true;
    ::setenv("SLURM_UP_ACCOUNTING", "1", 1);
    const int up = testing::SlurmUp(slurm_, dir_ + "/slurm_up.log");
    ::unsetenv("SLURM_UP_ACCOUNTING");
    ASSERT_EQ(up, 0) << ReadFile(dir_ + "/slurm_up.log");
    idp_ = std::make_unique<TestProvider>(dir_ + "/keys.json");
    ASSERT_TRUE(idp_->Start());
    WriteConfig(R"(
cluster: t1
backend_poll: 200ms
identities:
  - {name: admin, role: admin, token: admin-token-1}
oidc:
  issuer: )" + idp_->issuer() +
                R"(
  client_id: tessera
  account_claim: unix_account
groups:
  - {name: research, limit: {gpu: 2}}
profiles:
  - {name: train, gpus: 1, max_gpus: 2, cpu: 1, memory: 64MiB, forms: [whole]}
queues:
  - {name: training, profile: train, groups: [research], backend: slurm, partition: debug, gpu_type: testgpu}
)");
    StartServer();
  }
  void TearDown() override {
    server_.reset();
    idp_.reset();
    if (started_) testing::SlurmDown(slurm_);
    started_ = false;
  }
  ~SlurmOidcTest() override {
    if (started_) testing::SlurmDown(slurm_);
  }
  std::string Diag(const std::string& id, const std::string& token) {
    return Call("GET", "/v1/jobs/" + id, {}, token).dump() + "\n--- serve.log\n" + server_->Log() +
           "\n--- slurmctld.log (head)\n" + ReadFile(slurm_ + "/log/slurmctld.log").substr(0, 4000);
  }

  std::string slurm_;
  bool started_ = false;
  std::unique_ptr<TestProvider> idp_;
};

TEST_F(SlurmOidcTest, AJobOfAPersonSignedInAtTheProviderRunsUnderHerMappedAccount) {
  const std::string token = idp_->IdToken("nora");
  ASSERT_FALSE(token.empty());
  Json me = Call("GET", "/v1/whoami", {}, token);
  ASSERT_TRUE(me.is_object()) << me.dump();
  EXPECT_EQ(me["name"], "nora");
  EXPECT_EQ(me["groups"], Json::array({"research"}));

  Json sub = Call(
      "POST", "/v1/jobs",
      {{"queue", "training"}, {"command", {"sh", "-c", "echo user=$(id -un); sleep 2"}}}, token);
  ASSERT_TRUE(sub.is_object() && sub.contains("id")) << sub.dump() << server_->Log();
  const std::string id = sub["id"];
  auto state = [&] { return Call("GET", "/v1/jobs/" + id, {}, token).value("state", ""); };
  ASSERT_TRUE(WaitFor([&] { return state() == "running" || state() == "succeeded"; }))
      << Diag(id, token);
  Json job = Call("GET", "/v1/jobs/" + id, {}, token);
  EXPECT_EQ(job["identity"], "nora");
  EXPECT_EQ(job["spec"]["run_as"], "nobody");  // the provider's unix_account claim
  const std::string ext = job["backend"]["external_id"];
  ASSERT_FALSE(ext.empty()) << job.dump();
  const std::string squeue = RunShell("squeue -h -t all -j " + ext + " -o %u 2>&1").out;
  ASSERT_TRUE(WaitFor([&] { return state() == "succeeded"; })) << Diag(id, token);
  auto out =
      client_->Get(("/v1/jobs/" + id + "/output").c_str(), {{"Authorization", "Bearer " + token}});
  ASSERT_TRUE(out);
  EXPECT_EQ(out->body, "user=nobody\n");
  if (!squeue.empty()) {  // empty when it had already left squeue
    EXPECT_EQ(squeue, "nobody\n");
  }

  if (std::filesystem::exists(slurm_ + "/slurmdbd.conf")) {
    std::string acct;
    EXPECT_TRUE(WaitFor([&] {
      return Trim(acct = RunShell("sacct -j " + ext + " -X -o User -n -P 2>&1").out) == "nobody";
    })) << acct;
    std::cout << "sacct -j " << ext << " -X -o User -n -P: " << Trim(acct) << "\n";
  } else {
    // Without slurmdbd, Slurm's job completion log (jobcomp/filetxt) is its record of the job.
    std::string comp;
    ASSERT_TRUE(WaitFor([&] {
      comp = ReadFile(slurm_ + "/log/jobcomp.txt");
      return comp.find("JobId=" + ext + " ") != std::string::npos;
    })) << comp;
    const size_t at = comp.find("JobId=" + ext + " ");
    const std::string line = comp.substr(at, comp.find('\n', at) - at);
    const passwd* pw = ::getpwnam("nobody");
    ASSERT_NE(pw, nullptr);
    EXPECT_NE(line.find(" UserId=nobody(" + std::to_string(pw->pw_uid) + ") "), std::string::npos)
        << line;
    std::cout << "no slurmdbd here (sacct: accounting storage is disabled); jobcomp.txt: " << line
              << "\n";
  }
}

}  // namespace
}  // namespace tessera
