// One config, three ways to run: a queue on Tessera's agents (`tessera agent --simulate`), one in a
// REAL single-host Slurm (tests/backends/slurm_up.sh) and one in Kubernetes (the stand-in API
// server, tests/backends/kube: a real one cannot run here), under one group limit. The limit
// counts every backend once; cancelling ends everything; nothing is left in Slurm or Kubernetes.
// Needs root (Slurm); skipped otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../api/proc.h"
#include "../api/serve_fixture.h"
#include "kubernetes/kube_standin.h"
#include "slurm_env.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
using testing::kTessera;
using testing::Proc;
using testing::ReadFile;

using testing::Sh;

class ThreeBackendsTest : public testing::ServeFixture {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to run slurmctld/slurmd";
    wait_ms_ = 30000;
    dir_ =
        ::testing::TempDir() + "/tb" + std::to_string(::getpid());  // short: munged's socket path
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    slurm_ = dir_ + "/slurm";
    started_ = true;
    ASSERT_EQ(testing::SlurmUp(slurm_, dir_ + "/slurm_up.log"), 0)
        << ReadFile(dir_ + "/slurm_up.log");
    k_ = std::make_unique<testing::KubeStandIn>(dir_ + "/k8s", false,
                                                testing::KubeStandIn::kOneNode);
    ASSERT_EQ(k_->error(), "");
    std::ofstream(dir_ + "/config.yaml") << tessera::testing::WithJobAccounts(std::string() + R"(
cluster: tri
cycle: 300ms
backend_poll: 200ms
kubernetes: {kubeconfig: )" + k_->kubeconfig() + R"(}
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups:
  - {name: research, limit: {gpu: 3}}
profiles:
  - {name: card, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}
queues:
  - {name: local, profile: card, groups: [research], class: training}
  - {name: slurm, profile: card, groups: [research], class: training, backend: slurm, partition: debug, gpu_type: testgpu}
  - {name: k8s, profile: card, groups: [research], class: training, backend: kubernetes, node_selector: {pool: a100}}
)");
    StartServer();
    if (HasFatalFailure()) return;
    agent_ = std::make_unique<Proc>(
        std::vector<std::string>{
            kTessera, "agent", "--server", "http://127.0.0.1:" + std::to_string(port_),
            "--token-file", tessera::testing::TokenFile("agent-token-1"), "--node", "a1",
            "--simulate", "2xH100-80GB", "--work", dir_ + "/work", "--cgroup-root", ""},
        dir_ + "/agent.log");
  }
  void TearDown() override {
    if (agent_) agent_->KillOnly(SIGTERM);
    agent_.reset();
    server_.reset();
    k_.reset();
    if (started_) testing::SlurmDown(slurm_);
    started_ = false;
  }
  std::string Submit(const std::string& queue) {
    Json r = Call("POST", "/v1/jobs", {{"queue", queue}, {"command", {"sh", "-c", "sleep 600"}}});
    EXPECT_TRUE(r.is_object() && r.contains("id")) << r.dump();
    return r.is_object() ? r.value("id", "") : "";
  }
  std::string Diag() {
    return server_->Log().substr(0, 20000) + "\n--- agent\n" + agent_->Log() +
           "\n--- slurmctld (tail)\n" + ReadFile(slurm_ + "/log/slurmctld.log").substr(0, 3000);
  }
  int SlurmJobs() {
    const std::string f = dir_ + "/sq.txt";
    (void)Sh("squeue -h -t pending,running,configuring,completing -o %j > " + f + " 2>/dev/null");
    std::ifstream in(f);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) n += line.rfind("tessera-tri-", 0) == 0;
    return n;
  }

  std::string slurm_;
  bool started_ = false;
  std::unique_ptr<testing::KubeStandIn> k_;
  std::unique_ptr<Proc> agent_;
};

TEST_F(ThreeBackendsTest, OneGroupLimitCountsAgentSlurmAndKubernetesJobsOnce) {
  const std::string l = Submit("local");
  const std::string s = Submit("slurm");
  const std::string k = Submit("k8s");
  ASSERT_TRUE(WaitFor([&] {
    return State(l) == "running" && State(s) == "running" && State(k) == "running";
  })) << Diag();
  // The limit is 3 cards and the three hold one each: a fourth waits, whichever backend it asks
  // for.
  std::vector<std::string> more = {Submit("local"), Submit("slurm"), Submit("k8s")};
  // Cycles pass and none of them starts (a sleep on purpose: nothing may happen meanwhile).
  std::this_thread::sleep_for(std::chrono::seconds(2));
  for (const std::string& id : more) {
    Json j = Job(id);
    EXPECT_EQ(j.value("state", ""), "pending") << j.dump();
    EXPECT_NE(j.value("reason", "").find("group research at its gpu limit"), std::string::npos)
        << j.dump();
  }
  EXPECT_EQ(SlurmJobs(), 1);
  EXPECT_EQ(
      k_->Control("GET", "/apis/batch/v1/jobs?labelSelector=tessera.io%2Fcluster%3Dtri")["items"]
          .size(),
      1u);
  // The Slurm job ends: exactly one waiting job takes its card.
  ASSERT_TRUE(Call("POST", "/v1/jobs/" + s + "/cancel").is_object());
  ASSERT_TRUE(WaitFor([&] { return State(s) == "cancelled"; })) << Diag();
  int running = 0;
  ASSERT_TRUE(WaitFor([&] {
    running = 0;
    for (const std::string& id : more) running += State(id) == "running";
    return running == 1;
  })) << Diag();
  // And it stays one while cycles pass (a sleep on purpose).
  std::this_thread::sleep_for(std::chrono::seconds(1));
  running = 0;
  for (const std::string& id : more) running += State(id) == "running";
  EXPECT_EQ(running, 1);
  // Everything cancelled: nothing is left in Slurm or Kubernetes.
  for (const std::string& id : {l, k, more[0], more[1], more[2]})
    Call("POST", "/v1/jobs/" + id + "/cancel");
  ASSERT_TRUE(WaitFor([&] {
    for (const std::string& id : {l, k, more[0], more[1], more[2]}) {
      if (State(id) != "cancelled") return false;
    }
    return true;
  })) << Diag();
  ASSERT_TRUE(WaitFor([&] {
    return SlurmJobs() == 0 &&
           k_->Control("GET",
                       "/apis/batch/v1/jobs?labelSelector=tessera.io%2Fcluster%3Dtri")["items"]
               .empty();
  })) << Diag();
}

}  // namespace
}  // namespace tessera
