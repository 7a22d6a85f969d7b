// One queue over several backends (issue 39): two Kubernetes clusters (each the stand-in API
// server, tests/backends/kube: a real one cannot run here) and a REAL single-host Slurm
// (tests/backends/slurm_up.sh) behind one queue, `backends: [kube-a, kube-b, hpc]`, through a
// real `tessera serve`. A burst spills in order; a job goes where its forecast start is earliest
// (predicted and actual start side by side); one group limit counts all three; a cluster that
// stops answering gets no new work and, back, keeps the one copy of each job. Needs root (Slurm);
// skipped otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../api/proc.h"
#include "../api/serve_fixture.h"
#include "../support/shell.h"
#include "kubernetes/kube_standin.h"
#include "slurm_env.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
using testing::kTessera;
using testing::ReadFile;
using testing::Sh;

// Each stand-in cluster: one ready node with two GPUs.
constexpr const char* kTwoCards = R"(- metadata: {name: n1, labels: {pool: a100}}
  status: {allocatable: {cpu: "64", memory: 512Gi, nvidia.com/gpu: "2"}, conditions: [{type: Ready, status: "True"}]}
)";

class MultiBackendTest : public testing::ServeFixture {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to run slurmctld/slurmd";
    wait_ms_ = 30000;
    dir_ = ::testing::TempDir() + "/mb" + std::to_string(::getpid());  // short: munged's socket
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    slurm_ = dir_ + "/slurm";
    started_ = true;
    ASSERT_EQ(testing::SlurmUp(slurm_, dir_ + "/slurm_up.log"), 0)
        << ReadFile(dir_ + "/slurm_up.log");
    a_ = std::make_unique<testing::KubeStandIn>(dir_ + "/ka", false, kTwoCards);
    b_ = std::make_unique<testing::KubeStandIn>(dir_ + "/kb", false, kTwoCards);
    ASSERT_EQ(a_->error(), "");
    ASSERT_EQ(b_->error(), "");
    std::ofstream(dir_ + "/config.yaml") << tessera::testing::WithJobAccounts(std::string() + R"(
cluster: multi
cycle: 300ms
backend_poll: 200ms
backends:
  kube-a: {type: kubernetes, kubeconfig: )" + a_->kubeconfig() + R"(}
  kube-b: {type: kubernetes, kubeconfig: )" + b_->kubeconfig() + R"(}
  hpc: {type: slurm}
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
groups:
  - {name: research, limit: {gpu: 5}}
profiles:
  - {name: card, gpus: 1, max_gpus: 2, cpu: 100m, memory: 64MiB, forms: [whole]}
queues:
  - {name: gpu, profile: card, groups: [research], class: training, backends: [kube-a, kube-b, hpc], partition: debug, gpu_type: testgpu, node_selector: {pool: a100}}
)");
    StartServer();
    if (HasFatalFailure()) return;
    // Both clusters' capacity known before anything is submitted (until then a pool is unbounded).
    ASSERT_TRUE(WaitFor([&] {
      return !Events("kind=backend.capacity&subject=kube-a").empty() &&
             !Events("kind=backend.capacity&subject=kube-b").empty();
    })) << Diag();
  }
  void TearDown() override {
    server_.reset();
    a_.reset();
    b_.reset();
    if (started_) testing::SlurmDown(slurm_);
    started_ = false;
  }
  std::string Submit(const Json& extra = Json::object()) {
    Json body = {{"queue", "gpu"}, {"command", {"sh", "-c", "sleep 600"}}};
    body.update(extra);
    Json r = Call("POST", "/v1/jobs", body);
    EXPECT_TRUE(r.is_object() && r.contains("id")) << r.dump();
    return r.is_object() ? r.value("id", "") : "";
  }
  std::string BackendOf(const std::string& id) {
    Json j = Job(id);
    return j.is_object() && j.contains("backend") ? j["backend"].value("name", "") : "";
  }
  std::string Diag() {
    return server_->Log().substr(0, 20000) + "\n--- slurmctld (tail)\n" +
           ReadFile(slurm_ + "/log/slurmctld.log").substr(0, 3000);
  }
  // The Tessera job ids of the live (not ended) Jobs in a stand-in cluster, all namespaces.
  std::vector<std::string> KubeJobs(testing::KubeStandIn& k) {
    std::vector<std::string> ids;
    Json items = k.Control("GET", "/apis/batch/v1/jobs?labelSelector=tessera.io%2Fcluster%3Dmulti");
    for (const auto& x : items.value("items", Json::array())) {
      const std::string name = x["metadata"].value("name", "");
      if (!x["metadata"].contains("deletionTimestamp")) ids.push_back(name.substr(14));
    }
    return ids;
  }
  std::vector<std::string> SlurmJobs() {
    const std::string f = dir_ + "/sq.txt";
    (void)Sh("squeue -h -t pending,running,configuring,completing -o %j > " + f + " 2>/dev/null");
    std::ifstream in(f);
    std::vector<std::string> ids;
    for (std::string line; std::getline(in, line);)
      if (line.rfind("tessera-multi-", 0) == 0) ids.push_back(line.substr(14));
    return ids;
  }
  // Every copy of every job: never more than one per job across the three backends.
  std::map<std::string, int> Copies() {
    std::map<std::string, int> n;
    for (auto* k : {a_.get(), b_.get()})
      for (const std::string& id : KubeJobs(*k)) ++n[id];
    for (const std::string& id : SlurmJobs()) ++n[id];
    return n;
  }
  void CancelAll(const std::vector<std::string>& ids) {
    for (const std::string& id : ids) Call("POST", "/v1/jobs/" + id + "/cancel");
    ASSERT_TRUE(WaitFor([&] {
      for (const std::string& id : ids)
        if (State(id) != "cancelled") return false;
      return Copies().empty();
    })) << Diag();
  }

  std::string slurm_;
  bool started_ = false;
  std::unique_ptr<testing::KubeStandIn> a_, b_;
};

TEST_F(MultiBackendTest, ABurstSpillsToTheSecondClusterThenToSlurmWithinOneGroupLimit) {
  std::vector<std::string> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(Submit());
  // Two cards in kube-a, two in kube-b, then Slurm; the sixth is past the group's 5 cards.
  ASSERT_TRUE(WaitFor([&] {
    for (int i = 0; i < 5; ++i)
      if (State(ids[i]) != "running") return false;
    return true;
  })) << Diag();
  EXPECT_EQ(BackendOf(ids[0]), "kube-a");
  EXPECT_EQ(BackendOf(ids[1]), "kube-a");
  EXPECT_EQ(BackendOf(ids[2]), "kube-b");
  EXPECT_EQ(BackendOf(ids[3]), "kube-b");
  EXPECT_EQ(BackendOf(ids[4]), "hpc");
  Json third = Job(ids[2]);
  EXPECT_EQ(third["dispatch"]["forecasts"][0]["predicted_start_ms"], Json(nullptr))
      << "kube-a is full, and its jobs declared no end: " << third.dump();
  EXPECT_EQ(third["dispatch"]["forecasts"][0].value("note", ""), "0 of 2 GPU free");
  // Cycles pass and the sixth stays waiting on the limit (a sleep on purpose).
  std::this_thread::sleep_for(std::chrono::seconds(2));
  Json sixth = Job(ids[5]);
  EXPECT_EQ(sixth.value("state", ""), "pending");
  EXPECT_NE(sixth.value("reason", "").find("group research at its gpu limit"), std::string::npos)
      << sixth.dump();
  EXPECT_EQ(KubeJobs(*a_).size(), 2u);
  EXPECT_EQ(KubeJobs(*b_).size(), 2u);
  EXPECT_EQ(SlurmJobs().size(), 1u);
  // A kube-b job ends: the sixth takes its card there (kube-a full, kube-b before Slurm).
  ASSERT_TRUE(Call("POST", "/v1/jobs/" + ids[2] + "/cancel").is_object());
  ASSERT_TRUE(WaitFor([&] { return State(ids[5]) == "running"; })) << Diag();
  EXPECT_EQ(BackendOf(ids[5]), "kube-b");
  for (const auto& [id, n] : Copies()) EXPECT_EQ(n, 1) << id;
  CancelAll(ids);
}

TEST_F(MultiBackendTest, AJobGoesToTheSecondClusterWhenTheFirstWouldStartItLater) {
  // kube-a holds a one-card job for ten minutes: a card is free there, but a two-card job would
  // start there only when it ends; kube-b starts it now.
  const std::string shorter = Submit({{"walltime", "10m"}});
  ASSERT_TRUE(WaitFor([&] { return State(shorter) == "running"; })) << Diag();
  ASSERT_EQ(BackendOf(shorter), "kube-a");
  const std::string pair = Submit({{"gpus", 2}});
  ASSERT_TRUE(WaitFor([&] { return State(pair) == "running"; })) << Diag();
  Json j = Job(pair);
  ASSERT_EQ(BackendOf(pair), "kube-b") << j.dump();
  const Json& d = j["dispatch"];
  const int64_t decided = d.value("decided_ms", int64_t{0});
  const int64_t at_a = d["forecasts"][0].value("predicted_start_ms", int64_t{0});
  const int64_t at_b = d["forecasts"][1].value("predicted_start_ms", int64_t{0});
  const int64_t started = d.value("started_ms", int64_t{0});
  EXPECT_EQ(d["forecasts"][0].value("note", ""), "1 of 2 GPU free") << d.dump();
  EXPECT_GE(at_a, decided + 590 * 1000) << "kube-a: when the ten-minute job ends";
  EXPECT_EQ(at_b, decided) << "kube-b: now";
  EXPECT_GE(started, decided);
  EXPECT_LT(started, decided + 30 * 1000) << "it started about when predicted: " << d.dump();
  // kube-b and Slurm both start it now: the first of them in the queue's order.
  EXPECT_NE(
      d.value("reason", "").find("the first in the queue's order that starts it now (kube-a in "),
      std::string::npos)
      << d.dump();
  EXPECT_NE(d.value("reason", "").find("s (1 of 2 GPU free), kube-b now, hpc now)"),
            std::string::npos)
      << d.dump();
  // `tessera job` says where it went and why, and the predicted and actual start side by side.
  testing::ShellResult shown = testing::RunShell(
      std::string(kTessera) + " job " + pair + " --url http://127.0.0.1:" + std::to_string(port_) +
      " --token-file " + testing::TokenFile("alice-token-1") + " 2>&1");
  const std::string& text = shown.out;
  EXPECT_NE(text.find("backend: kube-b, the first in the queue's order"), std::string::npos)
      << text;
  EXPECT_NE(text.find("kube-a: predicted start "), std::string::npos) << text;
  EXPECT_NE(text.find("(1 of 2 GPU free)"), std::string::npos) << text;
  EXPECT_NE(text.find("  started: "), std::string::npos) << text;
  CancelAll({shorter, pair});
}

TEST_F(MultiBackendTest, AClusterNotAnsweringGetsNoNewWorkAndBackKeepsOneCopyOfEachJob) {
  const std::string kept = Submit();
  const std::string cancelled = Submit();
  ASSERT_TRUE(WaitFor([&] { return State(kept) == "running" && State(cancelled) == "running"; }))
      << Diag();
  ASSERT_EQ(BackendOf(kept), "kube-a");
  ASSERT_EQ(BackendOf(cancelled), "kube-a");
  // kube-a stops answering Tessera's requests (every API path but the namespace `default`,
  // which the test itself uses below): 503 until the faults are lifted.
  for (const char* prefix :
       {"/api/", "/apis/batch/v1/jobs", "/apis/batch/v1/namespaces/ml", "/apis/resource.k8s.io"}) {
    a_->Control("POST", "/_standin/faults",
                Json({{"status", 503}, {"count", 1000000}, {"path_prefix", prefix}}).dump());
  }
  ASSERT_TRUE(WaitFor([&] { return !Events("kind=backend.not_answering&subject=kube-a").empty(); }))
      << Diag();
  // New work goes elsewhere; what kube-a runs stays Tessera's there (not started anew).
  const std::string fresh = Submit();
  ASSERT_TRUE(WaitFor([&] { return State(fresh) == "running"; })) << Diag();
  Json f = Job(fresh);
  EXPECT_EQ(BackendOf(fresh), "kube-b") << f.dump();
  EXPECT_EQ(f["dispatch"]["forecasts"][0].value("note", ""), "not answering") << f.dump();
  EXPECT_EQ(State(kept), "running");
  EXPECT_EQ(BackendOf(kept), "kube-a");
  // While it is away: one job is cancelled (its Job cannot be deleted yet), and a Job named for
  // `fresh` appears in kube-a, as a creation whose answer was lost would leave it (the stand-in
  // cannot lose an answer after acting, so the test creates that object).
  ASSERT_TRUE(Call("POST", "/v1/jobs/" + cancelled + "/cancel").is_object());
  const std::string stray = "tessera-multi-" + fresh;
  Json made = a_->Control(
      "POST", "/apis/batch/v1/namespaces/default/jobs",
      Json({{"apiVersion", "batch/v1"},
            {"kind", "Job"},
            {"metadata",
             {{"name", stray},
              {"labels", {{"tessera.io/cluster", "multi"}, {"tessera.io/job", fresh}}}}},
            {"spec",
             {{"template",
               {{"spec",
                 {{"restartPolicy", "Never"},
                  {"containers",
                   {{{"name", "job"}, {"image", "busybox"}, {"command", {"sleep", "600"}}}}}}}}}}}})
          .dump());
  ASSERT_EQ(made.value("kind", ""), "Job") << made.dump();
  std::this_thread::sleep_for(std::chrono::seconds(1));  // passes go by with kube-a away
  EXPECT_NE(State(cancelled), "cancelled") << "its Job cannot be deleted while kube-a is away";
  EXPECT_EQ(State(kept), "running");
  // Back: the kept job is adopted (still running there, once), the cancelled one's Job and the
  // stray copy of `fresh` (which runs in kube-b) are removed.
  a_->Control("DELETE", "/_standin/faults");
  ASSERT_TRUE(WaitFor([&] {
    return !Events("kind=backend.answering&subject=kube-a").empty() &&
           State(cancelled) == "cancelled" && KubeJobs(*a_) == std::vector<std::string>{kept};
  })) << Diag();
  EXPECT_FALSE(Events("kind=backend.orphan_cancelled&subject=" + fresh).empty());
  EXPECT_EQ(State(kept), "running");
  EXPECT_EQ(BackendOf(kept), "kube-a");
  EXPECT_EQ(State(fresh), "running");
  EXPECT_EQ(BackendOf(fresh), "kube-b");
  for (const auto& [id, n] : Copies()) EXPECT_EQ(n, 1) << id;
  // And new work goes to kube-a again (first in the order, with a card free).
  const std::string after = Submit();
  ASSERT_TRUE(WaitFor([&] { return State(after) == "running"; })) << Diag();
  EXPECT_EQ(BackendOf(after), "kube-a");
  CancelAll({kept, fresh, after});
}

}  // namespace
}  // namespace tessera
