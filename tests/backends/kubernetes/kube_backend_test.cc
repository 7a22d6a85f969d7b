// The Kubernetes backend against the stand-in API server (a real process; a real API server
// cannot run here): jobs created suspended and resumed, exit codes and reasons read back,
// suspension and deletion, and the faults a client meets: 409 conflicts, 429/5xx, dropped
// watches, 410 Expired, the server restarting, TLS with a client certificate, a rotating token.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "backends/backend.h"
#include "kube_standin.h"

namespace tessera::backends {
namespace {

using tessera::testing::KubeStandIn;
using Json = nlohmann::json;

class KubeBackend : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kube-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    k_ = std::make_unique<KubeStandIn>(dir_.string());
    ASSERT_EQ(k_->error(), "");
    b_ = Make("");
  }
  void TearDown() override {
    b_.reset();
    k_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::unique_ptr<Backend> Make(const std::string& context) {
    BackendOptions o;
    o.cluster = "lab";
    o.kubeconfig = k_->kubeconfig();
    o.kube_context = context;
    return MakeKubernetesBackend(o);
  }
  JobRequest Req(const std::string& id, const std::string& script,
                 std::map<std::string, std::string> env = {}) {
    JobRequest r;
    r.id = id;
    r.name = "tessera-lab-" + id;
    r.command = {"/bin/sh", "-c", script};
    r.env = std::move(env);
    r.form = "whole";
    r.gpus = 1;
    r.cpu_milli = 500;
    r.memory_mib = 256;
    r.mapping.kube.node_selector = {{"pool", "a100"}};
    return r;
  }
  std::string Submit(Backend& b, const JobRequest& r) {
    auto m = b.Render(r);
    EXPECT_TRUE(m.ok()) << m.status().message();
    auto id = b.Submit(r, *m);
    EXPECT_TRUE(id.ok()) << id.status().message() << "\n" << k_->Log();
    return id.ok() ? *id : "";
  }
  // Polls until the job's state is `want` (or 20 s); the last state seen.
  ExternalJob WaitFor(Backend& b, const std::string& id, const std::string& want,
                      int timeout_ms = 20000) {
    ExternalJob last;
    tessera::testing::WaitFor(
        [&] {
          auto p = b.Poll({id});
          if (p.ok() && p->count(id)) {
            last = p->at(id);
            return last.state == want;
          }
          if (p.ok() && want == "gone") {
            last.state = "gone";
            return true;
          }
          return false;
        },
        std::chrono::milliseconds(timeout_ms), std::chrono::milliseconds(50));
    return last;
  }

  std::filesystem::path dir_;
  std::unique_ptr<KubeStandIn> k_;
  std::unique_ptr<Backend> b_;
};

TEST_F(KubeBackend, JobsRunToTheirEndAndReportExitCodesAndReasons) {
  const std::string ok = Submit(*b_, Req("j-1", "echo hi; exit 0"));
  EXPECT_EQ(ok, "ml/tessera-lab-j-1");
  const std::string bad = Submit(*b_, Req("j-2", "exit 3"));
  const std::string oom = Submit(*b_, Req("j-3", "sleep 5", {{"STANDIN_OUTCOME", "OOMKilled"}}));
  const std::string evicted = Submit(*b_, Req("j-4", "sleep 5", {{"STANDIN_OUTCOME", "Evicted"}}));
  const std::string refused =
      Submit(*b_, Req("j-17", "sleep 5", {{"STANDIN_OUTCOME", "UnexpectedAdmissionError"}}));
  ExternalJob x = WaitFor(*b_, ok, "succeeded");
  EXPECT_EQ(x.state, "succeeded");
  EXPECT_EQ(x.node, "n1");  // the only ready, schedulable, untainted node of pool a100
  EXPECT_EQ(x.name, "tessera-lab-j-1");
  x = WaitFor(*b_, bad, "failed");
  EXPECT_EQ(x.state, "failed");
  ASSERT_TRUE(x.exit_code.has_value());
  EXPECT_EQ(*x.exit_code, 3);
  x = WaitFor(*b_, oom, "failed");
  EXPECT_EQ(x.reason, "OOMKilled");
  EXPECT_EQ(*x.exit_code, 137);
  x = WaitFor(*b_, evicted, "failed");
  EXPECT_EQ(x.reason, "Evicted");
  x = WaitFor(*b_, refused, "failed");
  EXPECT_EQ(x.reason, "UnexpectedAdmissionError");
  // What Kubernetes holds is what the API says: created suspended, resumed with the pool's
  // selector.
  Json job = k_->Control("GET", "/apis/batch/v1/namespaces/ml/jobs/tessera-lab-j-1");
  EXPECT_EQ(job["metadata"]["labels"]["tessera.io/job"], "j-1");
  EXPECT_EQ(job["metadata"]["labels"]["tessera.io/cluster"], "lab");
  EXPECT_EQ(job["spec"]["suspend"], false);
  EXPECT_EQ(job["spec"]["backoffLimit"], 0);
  EXPECT_EQ(job["spec"]["template"]["spec"]["nodeSelector"]["pool"], "a100");
  // List finds them by name prefix; Forget deletes (Background) and they go.
  auto all = b_->List("tessera-lab-");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 5u);
  for (const std::string& id : {ok, bad, oom, evicted, refused}) ASSERT_TRUE(b_->Forget(id).ok());
  EXPECT_EQ(WaitFor(*b_, ok, "gone").state, "gone");
  EXPECT_TRUE(b_->Cancel(ok).ok());  // already gone: fine
}

TEST_F(KubeBackend, SuspendKeepsTheJobAndResumeRunsItAgain) {
  const std::string id = Submit(*b_, Req("j-5", "sleep 60"));
  EXPECT_EQ(WaitFor(*b_, id, "running").state, "running");
  const std::string uid =
      k_->Control("GET", "/apis/batch/v1/namespaces/ml/jobs/tessera-lab-j-5")["metadata"]["uid"];
  k_->Control("POST", "/_standin/conflict", R"({"count": 2})");  // two writers get there first
  ASSERT_TRUE(b_->Suspend(id).ok());
  ExternalJob x = WaitFor(*b_, id, "suspended");
  EXPECT_EQ(x.state, "suspended");
  EXPECT_TRUE(x.suspended);
  Json pods = k_->Control("GET", "/api/v1/namespaces/ml/pods?labelSelector=tessera.io%2Fjob%3Dj-5");
  size_t live = 0;
  for (const auto& p : pods["items"]) live += p["metadata"].contains("deletionTimestamp") ? 0 : 1;
  EXPECT_EQ(live, 0u);
  JobRequest r = Req("j-5", "sleep 60");
  r.mapping.kube.node_selector = {{"pool", "t4"}};
  r.mapping.kube.tolerations_json =
      R"([{"key":"gpu","operator":"Equal","value":"reserved","effect":"NoSchedule"}])";
  ASSERT_TRUE(b_->Resume(id, r).ok());
  x = WaitFor(*b_, id, "running");
  EXPECT_EQ(x.state, "running");
  EXPECT_EQ(x.node, "n4");  // the new pool's node, its taint tolerated
  EXPECT_EQ(
      k_->Control("GET", "/apis/batch/v1/namespaces/ml/jobs/tessera-lab-j-5")["metadata"]["uid"],
      uid);
  ASSERT_TRUE(b_->Cancel(id).ok());
  EXPECT_EQ(WaitFor(*b_, id, "gone").state, "gone");
}

TEST_F(KubeBackend, AnUnschedulablePodIsReported) {
  JobRequest r = Req("j-6", "sleep 1");
  r.gpus = 8;  // no node has 8
  const std::string id = Submit(*b_, r);
  ExternalJob x;
  tessera::testing::WaitFor(
      [&] {
        x = WaitFor(*b_, id, "pending", 100);
        return x.unschedulable;
      },
      std::chrono::seconds(30), std::chrono::milliseconds(50));
  EXPECT_TRUE(x.unschedulable);
  EXPECT_NE(x.reason.find("Insufficient nvidia.com/gpu"), std::string::npos) << x.reason;
}

TEST_F(KubeBackend, RetriesThrough429And5xxAndFollowsThroughDroppedAndExpiredWatches) {
  k_->Control("POST", "/_standin/faults",
              R"({"status": 429, "count": 2, "path_prefix": "/apis/batch"})");
  k_->Control("POST", "/_standin/faults",
              R"({"status": 503, "count": 2, "path_prefix": "/apis/batch"})");
  const std::string a = Submit(*b_, Req("j-7", "sleep 1.5"));
  EXPECT_EQ(WaitFor(*b_, a, "running").state, "running");
  // The watches drop, then history is compacted: the next watch from an old version gets the
  // 410 ERROR event and the followers list again; what happens meanwhile is still seen.
  k_->Control("POST", "/_standin/drop-watches");
  k_->Control("POST", "/_standin/compact");
  EXPECT_EQ(WaitFor(*b_, a, "succeeded").state, "succeeded");
  const std::string c = Submit(*b_, Req("j-8", "exit 4"));
  EXPECT_EQ(WaitFor(*b_, c, "failed").exit_code.value_or(-1), 4);
  // Both followers (Jobs, pods) are watching again.
  int watches = 0;
  tessera::testing::WaitFor(
      [&] {
        watches = k_->Control("GET", "/_standin/stats").value("watches", 0);
        return watches >= 2;
      },
      std::chrono::seconds(10), std::chrono::milliseconds(50));
  EXPECT_EQ(watches, 2);
}

TEST_F(KubeBackend, TheServerRestartingLosesNothing) {
  const std::string a = Submit(*b_, Req("j-9", "sleep 2"));
  EXPECT_EQ(WaitFor(*b_, a, "running").state, "running");
  k_->Stop();
  auto down = b_->Poll({a});  // the cache answers while the server is away
  EXPECT_TRUE(down.ok());
  // Calls fail within seconds, then at once for a while: the engine's pass is not held up.
  JobRequest r = Req("j-down", "exit 0");
  auto first = b_->Submit(r, *b_->Render(r));
  ASSERT_FALSE(first.ok());
  const auto t = std::chrono::steady_clock::now();
  auto second = b_->Submit(r, *b_->Render(r));
  ASSERT_FALSE(second.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t, std::chrono::milliseconds(500));
  EXPECT_NE(second.status().message().find("is not answering"), std::string::npos)
      << second.status().message();
  k_->Start();
  ASSERT_EQ(k_->error(), "");
  // Objects were kept (state file); the watch history was not: a relist follows.
  EXPECT_EQ(WaitFor(*b_, a, "succeeded", 30000).state, "succeeded") << k_->Log();
  auto fresh = Make("");  // b_'s calls fail fast for a few more seconds
  const std::string c = Submit(*fresh, Req("j-10", "exit 0"));
  EXPECT_EQ(WaitFor(*fresh, c, "succeeded").state, "succeeded");
}

TEST_F(KubeBackend, ClientCertificatesTlsServerNamesAndRotatingTokens) {
  // The "cert" context: mutual TLS to 127.0.0.1, the certificate checked as kube.internal.
  auto cert = Make("cert");
  const std::string a = Submit(*cert, Req("j-11", "exit 0"));
  EXPECT_EQ(WaitFor(*cert, a, "succeeded").state, "succeeded");
  // The token rotates: the server accepts old and new for a while, then only the new one.
  k_->SetServerTokens("token-one\ntoken-two\n");
  k_->SetClientToken("token-two");
  k_->SetServerTokens("token-two\n");
  const std::string c = Submit(*b_, Req("j-12", "exit 0"));
  EXPECT_EQ(WaitFor(*b_, c, "succeeded").state, "succeeded");
  // A token the server does not know: a clear error, nothing created.
  k_->SetClientToken("stolen");
  auto fresh = Make("");
  auto m = fresh->Render(Req("j-13", "exit 0"));
  auto r = fresh->Submit(Req("j-13", "exit 0"), *m);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("401"), std::string::npos) << r.status().message();
}

TEST_F(KubeBackend, ASecondSubmissionAdoptsTheSameJob) {
  JobRequest r = Req("j-14", "sleep 1");
  const std::string a = Submit(*b_, r);
  const std::string again = Submit(*b_, r);  // an acknowledgement lost, the submission retried
  EXPECT_EQ(a, again);
  JobRequest other = Req("j-15", "sleep 1");
  other.name = r.name;  // the same name, another Tessera job: refused, not adopted
  auto m = b_->Render(other);
  auto x = b_->Submit(other, *m);
  ASSERT_FALSE(x.ok());
  EXPECT_NE(x.status().message().find("is not Tessera job j-15"), std::string::npos)
      << x.status().message();
}

TEST_F(KubeBackend, CapacityIsReadyNodesGpusLessWhatOthersHold) {
  // n1 4 + n4 2 (tainted but schedulable) = 6; n2 is cordoned and n3 not ready.
  auto cap = b_->GpuCapacity();
  ASSERT_TRUE(cap.ok()) << cap.status().message();
  EXPECT_EQ(cap->gpu_milli, 6000) << cap->detail;
  EXPECT_NE(cap->detail.find("4x A100-SXM4-80GB, 2x unlabelled"), std::string::npos) << cap->detail;
  // A pod Tessera does not manage takes 3 cards on n1; Tessera's own pods are in its ledger.
  k_->Control("POST", "/api/v1/namespaces/other/pods", R"({"apiVersion":"v1","kind":"Pod",
    "metadata":{"name":"foreign"},"spec":{"nodeName":"n1","containers":[{"name":"c","image":"x","command":["sleep","60"],
    "resources":{"limits":{"nvidia.com/gpu":"3"}}}]}})");
  const std::string ours = Submit(*b_, Req("j-16", "sleep 5"));
  EXPECT_EQ(WaitFor(*b_, ours, "running").state, "running");
  cap = b_->GpuCapacity();
  ASSERT_TRUE(cap.ok());
  EXPECT_EQ(cap->gpu_milli, 3000) << cap->detail;
  EXPECT_NE(cap->detail.find("3 held by pods Tessera does not manage"), std::string::npos)
      << cap->detail;
}

}  // namespace
}  // namespace tessera::backends

namespace tessera::backends {
namespace {

// More Jobs than one page: the followers list in chunks of 500 (limit/continue) and see all.
TEST_F(KubeBackend, ListsComeInChunksAndMissNothing) {
  const int n = 1203;
  for (int i = 0; i < n; ++i) {
    JobRequest r = Req("c-" + std::to_string(i), "true");
    auto m = b_->Render(r);
    ASSERT_TRUE(m.ok());
    Json doc = Json::parse(*m);
    Json made = k_->Control("POST", "/apis/batch/v1/namespaces/ml/jobs", doc.dump());
    ASSERT_EQ(made.value("kind", ""), "Job") << made.dump();
  }
  auto fresh = Make("");
  auto all = fresh->List("tessera-lab-c-");
  ASSERT_TRUE(all.ok()) << all.status().message();
  EXPECT_EQ(all->size(), static_cast<size_t>(n));
  for (const auto& x : *all) EXPECT_EQ(x.state, "suspended") << x.name;
}

}  // namespace
}  // namespace tessera::backends
