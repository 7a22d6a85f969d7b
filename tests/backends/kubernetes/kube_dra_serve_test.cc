// A `devices: dra` queue end to end through `tessera serve` (issue 39): the cluster is the stand-in
// API server (tests/backends/kube; a real one cannot run here) with the NVIDIA DRA driver's
// DeviceClasses and a ResourceSlice of one partitionable A100, whose allocator stands in for
// kube-scheduler's. The server reads its capacity from the slice, a MIG job asks for its instance
// through a ResourceClaim of the MIG class, and the device the claim was given is the job's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../../api/proc.h"
#include "../../api/serve_fixture.h"
#include "kube_standin.h"
#include "nvidia_dra.h"

namespace tessera {
namespace {

using Json = nlohmann::json;

class KubeDraServeTest : public testing::ServeFixture {
 protected:
  void SetUp() override {
    wait_ms_ = 30000;
    dir_ = ::testing::TempDir() + "/kds" + std::to_string(::getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    k_ = std::make_unique<testing::KubeStandIn>(dir_ + "/k8s", false,
                                                testing::KubeStandIn::kOneNode);
    ASSERT_EQ(k_->error(), "");
    ASSERT_NO_FATAL_FAILURE(testing::InstallDraClasses(*k_));
    // n1's A100 (98 multiprocessors on one counter set): the whole card and two 3g.40gb.
    ASSERT_NO_FATAL_FAILURE(testing::PublishDraSlice(
        *k_, "n1",
        Json::array(
            {testing::DraDevice("gpu-0", "gpu", "", "", "gpu-0-counters", 98),
             testing::DraDevice("gpu-0-mig-3g.40gb-0", "mig", "3g.40gb", "", "gpu-0-counters", 42),
             testing::DraDevice("gpu-0-mig-3g.40gb-1", "mig", "3g.40gb", "", "gpu-0-counters",
                                42)}),
        testing::DraCounterSet("gpu-0-counters")));
    std::ofstream(dir_ + "/config.yaml") << tessera::testing::WithJobAccounts(std::string() + R"(
cluster: dra
cycle: 300ms
backend_poll: 200ms
kubernetes: {kubeconfig: )" + k_->kubeconfig() + R"(}
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
groups:
  - {name: research}
profiles:
  - {name: mig, gpus: 1, gpu_fraction: 0.4, gpu_memory: 20GiB, cpu: 100m, memory: 64MiB, forms: [partition]}
queues:
  - {name: dra, profile: mig, groups: [research], class: inference, backend: kubernetes, devices: dra, mig_model: A100-80GB}
)");
    StartServer();
  }
  void TearDown() override {
    server_.reset();
    k_.reset();
  }
  std::unique_ptr<testing::KubeStandIn> k_;
};

TEST_F(KubeDraServeTest, AMigJobOfADraQueueRunsOnTheInstanceItsClaimWasGiven) {
  // The capacity comes from the ResourceSlice (the node's extended resources say 4 cards).
  ASSERT_TRUE(WaitFor([&] {
    for (const auto& ev : Events("kind=backend.capacity&subject=kubernetes"))
      if (ev.value("reason", "").find("from ResourceSlices") != std::string::npos) return true;
    return false;
  })) << server_->Log();
  Json r = Call("POST", "/v1/jobs", {{"queue", "dra"}, {"command", {"sh", "-c", "sleep 600"}}});
  ASSERT_TRUE(r.is_object() && r.contains("id")) << r.dump();
  const std::string id = r["id"];
  ASSERT_TRUE(WaitFor([&] { return State(id) == "running"; })) << Job(id).dump() << server_->Log();
  Json j = Job(id);
  EXPECT_EQ(j["backend"].value("gres", ""), "gpu.nvidia.com/n1/gpu-0-mig-3g.40gb-0") << j.dump();
  EXPECT_EQ(j["backend"].value("node", ""), "n1");
  EXPECT_EQ(j["spec"].value("mig_profile", ""), "3g.40gb") << "the smallest with 0.4 and 20GiB";
  Json claim = k_->Control("GET",
                           "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/"
                           "tessera-dra-" +
                               id);
  EXPECT_EQ(claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"], "mig.nvidia.com")
      << claim.dump();
  EXPECT_EQ(claim["status"]["allocation"]["devices"]["results"][0]["device"],
            "gpu-0-mig-3g.40gb-0");
  // Cancelled: the Job and its claim are gone.
  ASSERT_TRUE(Call("POST", "/v1/jobs/" + id + "/cancel").is_object());
  ASSERT_TRUE(WaitFor([&] {
    return State(id) == "cancelled" &&
           k_->Control("GET",
                       "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/"
                       "tessera-dra-" +
                           id)
                   .value("code", 0) == 404;
  })) << server_->Log();
}

}  // namespace
}  // namespace tessera
