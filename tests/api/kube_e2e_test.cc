// One ledger across backends, with real processes: `tessera serve` with a Kubernetes queue (the
// stand-in API server, tests/backends/kube: a real one cannot run here) and an agent queue
// (`tessera agent --simulate`) under one group limit. Kubernetes jobs run, fail with their exit
// code, are reclaimed for a group below its reservation (suspended, the Job keeping its uid) and
// resumed when room returns, are cancelled, and time out unscheduled; nothing is counted twice
// and no labelled Job is left behind.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "../backends/kubernetes/kube_standin.h"
#include "proc.h"
#include "serve_fixture.h"
#include "test_dir.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
using testing::kTessera;
using testing::Proc;

class KubeE2eTest : public testing::ServeFixture {
 protected:
  void SetUp() override {
    dir_ = tessera::testing::FreshTestDir("kube_e2e");
    k_ =
        std::make_unique<testing::KubeStandIn>(dir_ + "/k8s", true, testing::KubeStandIn::kOneNode);
    ASSERT_EQ(k_->error(), "");
    std::ofstream(dir_ + "/config.yaml") << tessera::testing::WithJobAccounts(std::string() + R"(
cluster: lab
heartbeat_timeout: 5s
cycle: 300ms
backend_poll: 200ms
grace: 1s
kubernetes: {kubeconfig: )" + k_->kubeconfig() + R"(}
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: vee, role: user, groups: [vision], token: vision-token-1}
  - {name: sam, role: user, groups: [speech], token: speech-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups:
  - {name: vision, limit: {gpu: 5}}
  - {name: speech, reservation: {gpu: 2}}
profiles:
  - {name: card, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}
queues:
  - {name: k8s, profile: card, groups: [vision, speech], preemptible: true, class: training, backend: kubernetes,
     node_selector: {pool: a100}}
  - {name: k8s-h100, profile: card, groups: [speech], class: training, backend: kubernetes,
     node_selector: {pool: h100}, placement_timeout: 2s}
  - {name: local, profile: card, groups: [vision], class: training}
)");
    StartServer();
    if (HasFatalFailure()) return;
    agent_ = std::make_unique<Proc>(
        std::vector<std::string>{
            kTessera, "agent", "--server", "http://127.0.0.1:" + std::to_string(port_),
            "--token-file", tessera::testing::TokenFile("agent-token-1"), "--node", "a1",
            "--simulate", "2xH100-80GB", "--work", dir_ + "/work", "--cgroup-root", ""},
        dir_ + "/agent.log");
    wait_ms_ = 30000;
  }
  void TearDown() override {
    if (agent_) agent_->KillOnly(SIGTERM);
    agent_.reset();
    server_.reset();
    k_.reset();
  }
  std::string Submit(const std::string& token, const std::string& queue,
                     const std::vector<std::string>& command) {
    return ServeFixture::Submit(token, {{"queue", queue}, {"command", command}});
  }
  Json KubeJob(const std::string& id) {
    return k_->Control("GET", "/apis/batch/v1/namespaces/ml/jobs/tessera-lab-" + id);
  }
  Json Labelled() {
    return k_->Control("GET",
                       "/apis/batch/v1/jobs?labelSelector=tessera.io%2Fcluster%3Dlab")["items"];
  }
  std::string Logs() {
    return server_->Log() + "\n--- agent\n" + agent_->Log() + "\n--- stand-in\n" + k_->Log();
  }
  bool HasEvent(const std::string& id, const std::string& kind) {
    Json ev = Call("GET", "/v1/events?limit=1000&subject=" + id, {}, "admin-token-1");
    if (!ev.is_object()) return false;
    for (const auto& e : ev["events"]) {
      if (e.value("kind", "") == kind) return true;
    }
    return false;
  }

  std::unique_ptr<testing::KubeStandIn> k_;
  std::unique_ptr<Proc> agent_;
};

const std::vector<std::string> kLong = {"sh", "-c", "sleep 600"};

TEST_F(KubeE2eTest, OneLedgerAcrossAgentsAndKubernetesWithReclaimBySuspension) {
  // vision's limit (5 cards) spans both backends: 2 on the agent, 3 in Kubernetes, the 4th waits.
  const std::string fail = Submit("vision-token-1", "k8s", {"sh", "-c", "sleep 1; exit 3"});
  const std::string k1 = Submit("vision-token-1", "k8s", kLong);
  const std::string k2 = Submit("vision-token-1", "k8s", kLong);
  const std::string l1 = Submit("vision-token-1", "local", kLong);
  const std::string l2 = Submit("vision-token-1", "local", kLong);
  const std::string k3 = Submit("vision-token-1", "k8s", kLong);
  ASSERT_TRUE(WaitFor([&] { return AdminState(l1) == "running" && AdminState(l2) == "running"; }))
      << Logs();
  ASSERT_TRUE(WaitFor([&] { return AdminState(k1) == "running" && AdminState(k2) == "running"; }))
      << Logs();
  // The failing job: its exit code, then its Job deleted; its card goes to k3.
  ASSERT_TRUE(WaitFor([&] { return AdminState(fail) == "failed"; })) << Logs();
  EXPECT_EQ(AdminJob(fail)["exit_code"], 3) << AdminJob(fail).dump();
  ASSERT_TRUE(WaitFor([&] { return KubeJob(fail).value("code", 0) == 404; }))
      << KubeJob(fail).dump();
  ASSERT_TRUE(WaitFor([&] { return AdminState(k3) == "running"; })) << Logs();
  // While fail ran, k3 waited for the group's limit (not counted twice: 2 local + 3 Kubernetes).
  EXPECT_TRUE(HasEvent(k3, "job.placed"));

  // speech (reservation 2) asks for 2 cards; Kubernetes has 4, vision holds 3 there: one fits,
  // the other reclaims one of vision's borrowed Kubernetes jobs, which is suspended, not deleted.
  const std::string s1 = Submit("speech-token-1", "k8s", kLong);
  const std::string s2 = Submit("speech-token-1", "k8s", kLong);
  ASSERT_TRUE(WaitFor([&] { return AdminState(s1) == "running" && AdminState(s2) == "running"; }))
      << Logs();
  std::string victim;
  for (const std::string& id : {k1, k2, k3}) {
    if (AdminState(id) == "pending") victim = id;
  }
  ASSERT_FALSE(victim.empty()) << Logs();
  EXPECT_TRUE(HasEvent(victim, "job.preempted"));
  EXPECT_TRUE(HasEvent(victim, "job.suspended"));
  Json suspended = KubeJob(victim);
  EXPECT_EQ(suspended["spec"]["suspend"], true) << suspended.dump();
  const std::string uid = suspended["metadata"]["uid"];
  EXPECT_EQ(AdminState(l1), "running");  // agent jobs are not in Kubernetes' pool

  // s1 is cancelled: its Job is deleted, and the victim resumes in the same Job.
  ASSERT_TRUE(Call("POST", "/v1/jobs/" + s1 + "/cancel", {}, "speech-token-1").is_object());
  ASSERT_TRUE(WaitFor([&] { return AdminState(s1) == "cancelled"; })) << Logs();
  ASSERT_TRUE(WaitFor([&] { return AdminState(victim) == "running"; })) << Logs();
  Json resumed = KubeJob(victim);
  EXPECT_EQ(resumed["metadata"]["uid"], uid);
  EXPECT_EQ(resumed["spec"]["suspend"], false);

  // A pod no node can take (pool h100): suspended and requeued after placement_timeout.
  const std::string h = Submit("speech-token-1", "k8s-h100", kLong);
  ASSERT_TRUE(WaitFor([&] { return HasEvent(h, "job.requeued"); })) << Logs();
  Json requeued = AdminJob(h);
  bool timed_out = false;
  Json ev = Call("GET", "/v1/events?limit=1000&subject=" + h, {}, "admin-token-1");
  for (const auto& e : ev["events"]) {
    timed_out |= e.value("kind", "") == "job.requeued" &&
                 e.dump().find("did not schedule its pod within 2s") != std::string::npos;
  }
  EXPECT_TRUE(timed_out) << ev.dump();

  // Everything cancelled: no labelled Job is left behind.
  for (const std::string& id : {k1, k2, k3, l1, l2, s2, h}) {
    Call("POST", "/v1/jobs/" + id + "/cancel", {}, "admin-token-1");
  }
  ASSERT_TRUE(WaitFor([&] {
    for (const std::string& id : {k1, k2, k3, l1, l2, s2, h}) {
      if (AdminState(id) != "cancelled") return false;
    }
    return true;
  })) << Logs();
  ASSERT_TRUE(WaitFor([&] { return Labelled().empty(); })) << Labelled().dump();
}

// After a restart of `tessera serve`, its Jobs are adopted by label (the running one keeps
// running in the same Job) and a labelled Job it has no record of is deleted.
TEST_F(KubeE2eTest, AfterARestartItsJobsAreAdoptedAndUnknownLabelledJobsDeleted) {
  const std::string k1 = Submit("vision-token-1", "k8s", kLong);
  ASSERT_TRUE(WaitFor([&] { return AdminState(k1) == "running"; })) << Logs();
  const std::string uid = KubeJob(k1)["metadata"]["uid"];
  // A Job labelled as this cluster's that Tessera never made (e.g. left by a lost database).
  Json made = k_->Control(
      "POST", "/apis/batch/v1/namespaces/ml/jobs",
      Json{{"apiVersion", "batch/v1"},
           {"kind", "Job"},
           {"metadata",
            {{"name", "tessera-lab-j-999"},
             {"labels", {{"tessera.io/cluster", "lab"}, {"tessera.io/job", "j-999"}}},
             {"annotations", {{"tessera.io/name", "tessera-lab-j-999"}}}}},
           {"spec",
            {{"template",
              {{"spec",
                {{"restartPolicy", "Never"},
                 {"containers", {{{"name", "c"}, {"image", "busybox"}, {"command", kLong}}}}}}}}}}}
          .dump());
  ASSERT_EQ(made.value("kind", ""), "Job") << made.dump();
  server_->Kill(SIGKILL);
  StartServer();
  ASSERT_TRUE(WaitFor([&] { return KubeJob("j-999").value("code", 0) == 404; }))
      << KubeJob("j-999").dump() << Logs();
  EXPECT_EQ(AdminState(k1), "running");
  EXPECT_EQ(KubeJob(k1)["metadata"]["uid"], uid);
  Json ev = Call("GET", "/v1/events?limit=1000&kind=backend.orphan_cancelled", {}, "admin-token-1");
  EXPECT_NE(ev.dump().find("j-999"), std::string::npos) << ev.dump();
}

}  // namespace
}  // namespace tessera
