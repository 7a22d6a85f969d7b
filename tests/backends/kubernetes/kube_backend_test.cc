// The Kubernetes backend against the stand-in API server (a real process; a real API server
// cannot run here): jobs created suspended and resumed, exit codes and reasons read back,
// suspension and deletion, and the faults a client meets: 409 conflicts, 429/5xx, dropped
// watches, 410 Expired, the server restarting, TLS with a client certificate, a rotating token.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "backends/backend.h"
#include "kube_standin.h"
#include "nvidia_dra.h"

namespace tessera::backends {
namespace {

using tessera::testing::DraCounterSet;
using tessera::testing::DraDevice;
using tessera::testing::InstallDraClasses;
using tessera::testing::KubeStandIn;
using tessera::testing::PublishDraSlice;
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
    o.kube.kubeconfig = k_->kubeconfig();
    o.kube.context = context;
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

// A short Job can end between two watch events: the Job's end is seen before any event of its
// pod (here the stand-in holds the pods' watch events back 60 s; lists are not delayed). The
// backend still reads the node, the exit code and the reason from the ended Job's pod, and says
// so when the pod went before it could be read.
TEST_F(KubeBackend, AJobThatEndsBeforeItsPodIsSeenStillReportsNodeAndExitCode) {
  ASSERT_TRUE(b_->Poll({}).ok());  // the watchers start, list, then watch: what follows comes
  tessera::testing::WaitFor(       // by watch only
      [&] { return k_->Control("GET", "/_standin/stats").value("watches", 0) >= 2; },
      std::chrono::seconds(10), std::chrono::milliseconds(50));
  k_->Control("POST", "/_standin/watch-delay", R"({"plural": "pods", "seconds": 60})");
  const std::string ok = Submit(*b_, Req("j-20", "exit 0"));
  const std::string bad = Submit(*b_, Req("j-21", "exit 3"));
  const std::string oom = Submit(*b_, Req("j-22", "sleep 5", {{"STANDIN_OUTCOME", "OOMKilled"}}));
  const std::string gone = Submit(*b_, Req("j-23", "exit 5"));
  ExternalJob x = WaitFor(*b_, ok, "succeeded");
  EXPECT_EQ(x.state, "succeeded");
  EXPECT_EQ(x.node, "n1");
  EXPECT_EQ(x.exit_code.value_or(-1), 0);
  x = WaitFor(*b_, bad, "failed");
  EXPECT_EQ(x.state, "failed");
  EXPECT_EQ(x.node, "n1");
  EXPECT_EQ(x.exit_code.value_or(-1), 3);
  x = WaitFor(*b_, oom, "failed");
  EXPECT_EQ(x.reason, "OOMKilled");
  EXPECT_EQ(x.exit_code.value_or(-1), 137);
  EXPECT_EQ(x.node, "n1");
  // j-23's pod is deleted once its Job has failed, before the backend looks at the job.
  Json job;
  tessera::testing::WaitFor(
      [&] {
        job = k_->Control("GET", "/apis/batch/v1/namespaces/ml/jobs/tessera-lab-j-23");
        for (const auto& c : job["status"].value("conditions", Json::array()))
          if (c.value("type", "") == "Failed" && c.value("status", "") == "True") return true;
        return false;
      },
      std::chrono::seconds(20), std::chrono::milliseconds(50));
  Json pods =
      k_->Control("GET", "/api/v1/namespaces/ml/pods?labelSelector=tessera.io%2Fjob%3Dj-23");
  ASSERT_EQ(pods["items"].size(), 1u) << pods.dump();
  k_->Control("DELETE", "/api/v1/namespaces/ml/pods/" +
                            pods["items"][0]["metadata"]["name"].get<std::string>());
  x = WaitFor(*b_, gone, "failed");
  EXPECT_EQ(x.state, "failed");
  EXPECT_NE(x.reason.find("pod gone before it was read"), std::string::npos) << x.reason;
  EXPECT_FALSE(x.exit_code.has_value());
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
  // Running on the new pool's node, its taint tolerated. The watch's pods may lag its Jobs: under
  // load (CI) the suspended run's pod, not yet seen deleted, read as running on n1 for a poll.
  tessera::testing::WaitFor(
      [&] {
        auto p = b_->Poll({id});
        if (p.ok() && p->count(id)) x = p->at(id);
        return x.state == "running" && x.node == "n4";
      },
      std::chrono::milliseconds(20000), std::chrono::milliseconds(50));
  EXPECT_EQ(x.state, "running");
  EXPECT_EQ(x.node, "n4");
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

// Dynamic Resource Allocation (issue 39): jobs of a queue with devices: dra ask for their devices
// through a resource.k8s.io/v1 ResourceClaim, which the stand-in's allocator (a test double for
// kube-scheduler's, which cannot run here) fills from the NVIDIA DRA driver's ResourceSlices.
namespace tessera::backends {
namespace {

// A job of a devices: dra queue against what the NVIDIA DRA driver publishes (nvidia_dra.h).
class KubeDra : public KubeBackend {
 protected:
  // One partitionable A100 (98 multiprocessors): the whole card, seven 1g.10gb and two 3g.40gb
  // MIG devices, all on one counter set.
  static Json PartitionableA100(const std::string& set, bool with_whole_card = true) {
    Json devs = Json::array();
    if (with_whole_card) devs.push_back(DraDevice("gpu-0", "gpu", "", "", set, 98));
    for (int i = 0; i < 7; ++i) {
      devs.push_back(
          DraDevice("gpu-0-mig-1g.10gb-" + std::to_string(i), "mig", "1g.10gb", "", set, 14));
    }
    for (int i = 0; i < 2; ++i) {
      devs.push_back(
          DraDevice("gpu-0-mig-3g.40gb-" + std::to_string(i), "mig", "3g.40gb", "", set, 42));
    }
    return devs;
  }
  JobRequest DraReq(const std::string& id, const std::string& form) {
    JobRequest r = Req(id, "sleep 30");
    r.form = form;
    r.mapping.kube.devices = "dra";
    r.mapping.kube.share_mode = "mps";
    return r;
  }
};

TEST_F(KubeDra, AMigJobGetsItsDeviceThroughAClaimOfTheMigClassAndTheAllocationReadsBack) {
  InstallDraClasses(*k_);
  PublishDraSlice(*k_, "n1", PartitionableA100("gpu-0-counters"), DraCounterSet("gpu-0-counters"));
  JobRequest r = DraReq("j-mig", "partition");
  r.mig_profile = "3g.40gb";
  const std::string id = Submit(*b_, r);
  ASSERT_EQ(id, "ml/tessera-lab-j-mig");
  ExternalJob x = WaitFor(*b_, id, "running");
  ASSERT_EQ(x.state, "running") << x.reason << "\n" << k_->Log();
  EXPECT_EQ(x.node, "n1");
  EXPECT_EQ(x.gres, "gpu.nvidia.com/n1/gpu-0-mig-3g.40gb-0");  // read back from the claim
  // What Kubernetes holds: the claim asks the MIG class for the profile, is owned by the Job,
  // and is allocated and reserved for the Job's pod.
  Json claim = k_->Control("GET",
                           "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/"
                           "tessera-lab-j-mig");
  const Json& ex = claim["spec"]["devices"]["requests"][0]["exactly"];
  EXPECT_EQ(ex["deviceClassName"], "mig.nvidia.com");
  EXPECT_EQ(ex["selectors"][0]["cel"]["expression"],
            "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'");
  EXPECT_EQ(claim["metadata"]["ownerReferences"][0]["kind"], "Job");
  EXPECT_EQ(claim["metadata"]["labels"]["tessera.io/job"], "j-mig");
  const Json& res = claim["status"]["allocation"]["devices"]["results"][0];
  EXPECT_EQ(res["driver"], "gpu.nvidia.com");
  EXPECT_EQ(res["device"], "gpu-0-mig-3g.40gb-0");
  EXPECT_EQ(claim["status"]["reservedFor"][0]["resource"], "pods");
  Json job = k_->Control("GET", "/apis/batch/v1/namespaces/ml/jobs/tessera-lab-j-mig");
  const Json& ct = job["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(ct["resources"]["claims"][0]["name"], "gpu");
  EXPECT_FALSE(ct["resources"]["limits"].contains("nvidia.com/gpu"));
  // A second 3g.40gb fits the counters (42 + 42 of 98); a third does not and says why.
  JobRequest r2 = DraReq("j-mig2", "partition");
  r2.mig_profile = "3g.40gb";
  const std::string id2 = Submit(*b_, r2);
  EXPECT_EQ(WaitFor(*b_, id2, "running").gres, "gpu.nvidia.com/n1/gpu-0-mig-3g.40gb-1");
  JobRequest whole = DraReq("j-whole", "whole");
  const std::string id3 = Submit(*b_, whole);
  tessera::testing::WaitFor(
      [&] {
        x = WaitFor(*b_, id3, "pending", 100);
        return x.unschedulable;
      },
      std::chrono::seconds(20), std::chrono::milliseconds(50));
  EXPECT_NE(x.reason.find("cannot allocate all claims"), std::string::npos) << x.reason;
  EXPECT_EQ(x.gres, "");
  // Suspending frees the devices (the claim is deallocated); cancelling deletes the claim.
  ASSERT_TRUE(b_->Suspend(id).ok());
  ASSERT_TRUE(b_->Cancel(id2).ok());
  EXPECT_EQ(WaitFor(*b_, id3, "running").gres, "gpu.nvidia.com/n1/gpu-0");
  Json gone = k_->Control("GET",
                          "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/"
                          "tessera-lab-j-mig2");
  EXPECT_EQ(gone.value("code", 0), 404) << gone.dump();
}

// A pod can be seen Running before the claims' watch delivers its claim's allocation (a real
// cluster's watches lag too; here the stand-in holds the claims' watch events back 60 s, gets are
// not delayed). A running job's devices are then read from the claim itself: never empty while
// the claim is allocated.
TEST_F(KubeDra, AJobSeenRunningBeforeItsClaimsAllocationIsWatchedStillReportsItsDevice) {
  InstallDraClasses(*k_);
  PublishDraSlice(*k_, "n1", PartitionableA100("gpu-0-counters"), DraCounterSet("gpu-0-counters"));
  JobRequest r = DraReq("j-mig", "partition");
  r.mig_profile = "3g.40gb";
  const std::string id = Submit(*b_, r);
  EXPECT_EQ(WaitFor(*b_, id, "running").gres, "gpu.nvidia.com/n1/gpu-0-mig-3g.40gb-0");
  tessera::testing::WaitFor(  // jobs, pods and claims are watched: what follows comes by watch
      [&] { return k_->Control("GET", "/_standin/stats").value("watches", 0) >= 3; },
      std::chrono::seconds(10), std::chrono::milliseconds(50));
  k_->Control("POST", "/_standin/watch-delay", R"({"plural": "resourceclaims", "seconds": 60})");
  JobRequest r2 = DraReq("j-mig2", "partition");
  r2.mig_profile = "3g.40gb";
  const std::string id2 = Submit(*b_, r2);
  ExternalJob x = WaitFor(*b_, id2, "running");  // the first time it is seen running
  ASSERT_EQ(x.state, "running") << x.reason;
  EXPECT_EQ(x.gres, "gpu.nvidia.com/n1/gpu-0-mig-3g.40gb-1");
  EXPECT_EQ(x.node, "n1");
  // And it stays so (the watch's late events are older than what was read).
  x = WaitFor(*b_, id2, "running");
  EXPECT_EQ(x.gres, "gpu.nvidia.com/n1/gpu-0-mig-3g.40gb-1");
}

TEST_F(KubeDra, CapacityComesFromResourceSlicesWhenTheClusterExposesOnlyMigDevices) {
  // A cluster whose nodes advertise no GPU resources at all: the GPUs are MIG devices in
  // ResourceSlices. m1: a partitionable A100 exposing only its MIG devices (counters);
  // m2: two cards in a fixed MIG layout (no counters): GPU-a 3g+3g+1g (all 7 slices),
  // GPU-b 3g+3g (6 of 7); m3 is not ready, so its slice counts for nothing.
  b_.reset();
  k_.reset();
  const std::string nodes = R"(- metadata: {name: m1}
  status: {allocatable: {cpu: "64", memory: 512Gi}, conditions: [{type: Ready, status: "True"}]}
- metadata: {name: m2}
  status: {allocatable: {cpu: "64", memory: 512Gi}, conditions: [{type: Ready, status: "True"}]}
- metadata: {name: m3}
  status: {allocatable: {cpu: "64", memory: 512Gi}, conditions: [{type: Ready, status: "False"}]}
)";
  k_ = std::make_unique<KubeStandIn>((dir_ / "mig-only").string(), true, nodes);
  ASSERT_EQ(k_->error(), "");
  b_ = Make("");
  auto cap = b_->GpuCapacity();
  ASSERT_TRUE(cap.ok()) << cap.status().message();
  EXPECT_EQ(cap->gpu_milli, 0) << cap->detail;  // by whole-card counts: nothing
  InstallDraClasses(*k_);
  PublishDraSlice(*k_, "m1", PartitionableA100("m1-gpu-0", false), DraCounterSet("m1-gpu-0"));
  PublishDraSlice(*k_, "m2",
                  Json::array({DraDevice("gpu-a-mig-0", "mig", "3g.40gb", "GPU-a"),
                               DraDevice("gpu-a-mig-1", "mig", "3g.40gb", "GPU-a"),
                               DraDevice("gpu-a-mig-2", "mig", "1g.10gb", "GPU-a"),
                               DraDevice("gpu-b-mig-0", "mig", "3g.40gb", "GPU-b"),
                               DraDevice("gpu-b-mig-1", "mig", "3g.40gb", "GPU-b")}));
  PublishDraSlice(*k_, "m3", PartitionableA100("m3-gpu-0"), DraCounterSet("m3-gpu-0"));
  cap = b_->GpuCapacity();
  ASSERT_TRUE(cap.ok()) << cap.status().message();
  // m1 1000 + GPU-a 7/7 = 1000 + GPU-b 6/7 = 857 (exact integers, rounded down per card).
  EXPECT_EQ(cap->gpu_milli, 2857) << cap->detail;
  EXPECT_NE(cap->detail.find("DRA: 2.857 of 2.857 GPUs from ResourceSlices on 2 ready nodes "
                             "(14 devices, 14 MIG; 0 held by claims Tessera does not manage)"),
            std::string::npos)
      << cap->detail;
  // A pod Tessera does not manage takes a 1g.10gb on m1 through its own claim: 14 of the 98
  // multiprocessors, so m1 offers floor(84/98 * 1000) = 857.
  Json claim = {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceClaim"},
      {"metadata", {{"name", "foreign-mig"}}},
      {"spec",
       {{"devices",
         {{"requests",
           {{{"name", "gpu"},
             {"exactly",
              {{"deviceClassName", "mig.nvidia.com"},
               {"selectors",
                {{{"cel",
                   {{"expression",
                     "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"}}}}}}}}}}}}}}}};
  Json made =
      k_->Control("POST", "/apis/resource.k8s.io/v1/namespaces/other/resourceclaims", claim.dump());
  ASSERT_EQ(made.value("kind", ""), "ResourceClaim") << made.dump();
  Json pod = Json::parse(R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"foreign"},
    "spec":{"nodeSelector":{"kubernetes.io/hostname":"m1"},"containers":[{"name":"c","image":"x",
    "command":["sleep","60"],"resources":{"claims":[{"name":"gpu"}]}}],
    "resourceClaims":[{"name":"gpu","resourceClaimName":"foreign-mig"}]}})");
  pod["spec"].erase("nodeSelector");
  k_->Control("POST", "/api/v1/namespaces/other/pods", pod.dump());
  tessera::testing::WaitFor(
      [&] {
        cap = b_->GpuCapacity();
        return cap.ok() && cap->gpu_milli != 2857;
      },
      std::chrono::seconds(10), std::chrono::milliseconds(100));
  ASSERT_TRUE(cap.ok());
  EXPECT_EQ(cap->gpu_milli, 857 + 1000 + 857) << cap->detail;
  EXPECT_NE(cap->detail.find("1 held by claims Tessera does not manage"), std::string::npos)
      << cap->detail;
}

TEST_F(KubeDra, AShareCarriesItsMpsSettingsInItsClaim) {
  InstallDraClasses(*k_);
  PublishDraSlice(*k_, "n1", Json::array({DraDevice("gpu-0", "gpu"), DraDevice("gpu-1", "gpu")}));
  JobRequest r = DraReq("j-share", "share");
  r.gpu_memory_mib = 4096;
  r.gpu_milli = 250;
  const std::string id = Submit(*b_, r);
  ExternalJob x = WaitFor(*b_, id, "running");
  ASSERT_EQ(x.state, "running") << x.reason;
  EXPECT_EQ(x.gres, "gpu.nvidia.com/n1/gpu-0");
  Json claim = k_->Control("GET",
                           "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/"
                           "tessera-lab-j-share");
  EXPECT_EQ(claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"],
            "gpu.nvidia.com");
  const Json want = Json::parse(R"({"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig",
    "sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":25,
    "defaultPinnedDeviceMemoryLimit":"4096Mi"}}})");
  EXPECT_EQ(claim["spec"]["devices"]["config"][0]["opaque"]["parameters"], want);
  // The allocation carries the claim's configuration to the driver.
  const Json& cfg = claim["status"]["allocation"]["devices"]["config"][0];
  EXPECT_EQ(cfg["source"], "FromClaim");
  EXPECT_EQ(cfg["opaque"]["driver"], "gpu.nvidia.com");
  EXPECT_EQ(cfg["opaque"]["parameters"], want);
  // Job and claim go together; a deletion finishes asynchronously (finalizers, the garbage
  // collector), on a real API server as on the stand-in.
  ASSERT_TRUE(b_->Cancel(id).ok());
  EXPECT_EQ(WaitFor(*b_, id, "gone").state, "gone");
  int code = 0;
  for (int i = 0; i < 100 && code != 404; ++i) {
    code = k_->Control("GET",
                       "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/tessera-lab-j-share")
               .value("code", 0);
    if (code != 404) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(code, 404) << "the claim outlived its job by 10 s";
}

}  // namespace
}  // namespace tessera::backends
