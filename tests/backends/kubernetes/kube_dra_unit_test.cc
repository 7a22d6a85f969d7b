// Unit tests of the Kubernetes backend's dynamic resource allocation (devices: dra): a
// ResourceClaim per form, the pod naming its claim, and the queues' DRA config.
#include <gtest/gtest.h>

#include "api/config.h"
#include "backends/kubernetes/manifest.h"
#include "kube_requests.h"

namespace tessera::backends::kube {
namespace {

JobRequest Dra(const std::string& form, int gpus = 1) {
  JobRequest r = Req(form, gpus);
  r.mapping.kube.devices = "dra";
  r.mapping.kube.share_mode = "mps";
  return r;
}

// The request "gpu" of a claim: its class, count and selector.
const Json& Exactly(const Json& claim) {
  return claim["spec"]["devices"]["requests"][0]["exactly"];
}

TEST(Dra, EachFormIsAClaimForItsDeviceClass) {
  auto whole = ClaimFor(Dra("whole", 2), "lab", "ml");
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  EXPECT_EQ((*whole)["apiVersion"], "resource.k8s.io/v1");
  EXPECT_EQ((*whole)["kind"], "ResourceClaim");
  EXPECT_EQ((*whole)["metadata"]["name"], "tessera-lab-j-7");
  EXPECT_EQ((*whole)["metadata"]["namespace"], "ml");
  EXPECT_EQ((*whole)["metadata"]["labels"]["tessera.io/job"], "j-7");
  EXPECT_EQ((*whole)["metadata"]["labels"]["tessera.io/cluster"], "lab");
  EXPECT_EQ((*whole)["spec"]["devices"]["requests"][0]["name"], "gpu");
  EXPECT_EQ(Exactly(*whole)["deviceClassName"], "gpu.nvidia.com");
  EXPECT_EQ(Exactly(*whole)["allocationMode"], "ExactCount");
  EXPECT_EQ(Exactly(*whole)["count"], 2);

  JobRequest mig = Dra("partition");
  mig.mig_profile = "1g.10gb";
  auto m = ClaimFor(mig, "lab", "ml");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(Exactly(*m)["deviceClassName"], "mig.nvidia.com");
  EXPECT_EQ(Exactly(*m)["count"], 1);
  EXPECT_EQ(Exactly(*m)["selectors"][0]["cel"]["expression"],
            "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'");
  mig.mig_profile = "1g.10gb' || true || '";  // cannot change the expression
  EXPECT_NE(ClaimFor(mig, "lab", "ml").status().message().find("cannot be matched"),
            std::string::npos);

  JobRequest amd = Dra("partition");
  amd.mapping.kube.vendor = "amd";
  amd.mapping.kube.amd_partition = "cpx_nps4";
  auto a = ClaimFor(amd, "lab", "ml");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(Exactly(*a)["deviceClassName"], "gpu.amd.com");
  EXPECT_EQ(Exactly(*a)["selectors"][0]["cel"]["expression"],
            "device.attributes['gpu.amd.com'].partitionProfile == 'cpx_nps4'");
  JobRequest amd_whole = Dra("whole", 3);
  amd_whole.mapping.kube.vendor = "amd";
  EXPECT_EQ(Exactly(*ClaimFor(amd_whole, "lab", "ml"))["deviceClassName"], "gpu.amd.com");

  // Classes renamed by the queue; no claim for a CPU job or an extended-resources queue.
  JobRequest renamed = Dra("whole");
  renamed.mapping.kube.device_classes = {{"whole", "a100.example.com"}};
  EXPECT_EQ(Exactly(*ClaimFor(renamed, "lab", "ml"))["deviceClassName"], "a100.example.com");
  EXPECT_TRUE(ClaimFor(Dra("", 0), "lab", "ml")->is_null());
  EXPECT_TRUE(ClaimFor(Req("whole"), "lab", "ml")->is_null());
}

TEST(Dra, ASharesMpsOrTimeSlicingSettingsAreInItsClaim) {
  JobRequest share = Dra("share");
  share.gpu_memory_mib = 4096;
  share.gpu_milli = 250;
  auto c = ClaimFor(share, "lab", "ml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(Exactly(*c)["deviceClassName"], "gpu.nvidia.com");
  const Json& cfg = (*c)["spec"]["devices"]["config"][0];
  EXPECT_EQ(cfg["requests"], Json::array({"gpu"}));
  EXPECT_EQ(cfg["opaque"]["driver"], "gpu.nvidia.com");
  const Json& p = cfg["opaque"]["parameters"];
  EXPECT_EQ(p["apiVersion"], "resource.nvidia.com/v1beta1");
  EXPECT_EQ(p["kind"], "GpuConfig");
  EXPECT_EQ(p["sharing"]["strategy"], "MPS");
  EXPECT_EQ(p["sharing"]["mpsConfig"]["defaultActiveThreadPercentage"], 25);
  EXPECT_EQ(p["sharing"]["mpsConfig"]["defaultPinnedDeviceMemoryLimit"], "4096Mi");
  share.mapping.kube.share_mode = "timeslice";
  c = ClaimFor(share, "lab", "ml");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(
      (*c)["spec"]["devices"]["config"][0]["opaque"]["parameters"]["sharing"],
      Json::parse(R"({"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Default"}})"));
  JobRequest amd = Dra("share");
  amd.mapping.kube.vendor = "amd";
  EXPECT_NE(ClaimFor(amd, "lab", "ml").status().message().find("AMD partitions"),
            std::string::npos);
}

TEST(Dra, ThePodNamesTheClaimInsteadOfDevicePluginResources) {
  JobRequest mig = Dra("partition");
  mig.mig_profile = "3g.40gb";
  auto job = RenderJob(mig, "lab", "ml");
  ASSERT_TRUE(job.ok()) << job.status().message();
  const Json& spec = (*job)["spec"]["template"]["spec"];
  EXPECT_EQ(spec["resourceClaims"],
            Json::parse(R"([{"name":"gpu","resourceClaimName":"tessera-lab-j-7"}])"));
  const Json& res = spec["containers"][0]["resources"];
  EXPECT_EQ(res["claims"], Json::parse(R"([{"name":"gpu"}])"));
  EXPECT_EQ(res["limits"], Json::parse(R"({"cpu":"4000m","memory":"16384Mi"})"));
  EXPECT_EQ(res["requests"], res["limits"]);
  // Extended resources as before when the queue does not use DRA.
  JobRequest ext = Req("partition");
  ext.mig_profile = "3g.40gb";
  auto e = RenderJob(ext, "lab", "ml");
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE((*e)["spec"]["template"]["spec"].contains("resourceClaims"));
  EXPECT_EQ((*e)["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
                ["nvidia.com/mig-3g.40gb"],
            "1");
  // Allocation text read back from a claim.
  Json claim = Json::parse(R"({"status":{"allocation":{"devices":{"results":[
      {"request":"gpu","driver":"gpu.nvidia.com","pool":"n1","device":"gpu-0-mig-3"},
      {"request":"gpu","driver":"gpu.nvidia.com","pool":"n1","device":"gpu-1"}]}}}})");
  EXPECT_EQ(AllocationOf(claim), "gpu.nvidia.com/n1/gpu-0-mig-3,gpu.nvidia.com/n1/gpu-1");
  EXPECT_EQ(AllocationOf(Json::object()), "");
}

TEST(KubeConfig, EachQueueChoosesDraOrExtendedResourcesAndBadFieldsAreNamed) {
  const std::string head =
      "identities: [{name: a, role: admin, token: tok-12345678}]\ngroups: [{name: g}]\n"
      "profiles: [{name: p, gpus: 1, gpu_memory: 10GiB, forms: [whole, share, partition]}]\n";
  auto c = api::ParseConfig(head + R"(queues:
  - {name: d, profile: p, groups: [g], backend: kubernetes, devices: dra, mig_model: A100-80GB,
     device_classes: {mig: mig.example.com}}
  - {name: e, profile: p, groups: [g], backend: kubernetes}
)");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->FindRoute("d")->kube.devices, "dra");
  EXPECT_EQ(c->FindRoute("d")->kube.share_mode, "mps");  // DRA's default share
  EXPECT_EQ(c->FindRoute("d")->kube.device_classes.at("mig"), "mig.example.com");
  EXPECT_EQ(c->FindRoute("e")->kube.devices, "extended");
  EXPECT_EQ(c->FindRoute("e")->kube.share_mode, "hami");
  auto bad = [&](const std::string& extra) {
    auto r = api::ParseConfig(head + "queues:\n  - {name: k, profile: p, groups: [g], " +
                              "backend: kubernetes, " + extra + "}\n");
    return r.ok() ? std::string("ok") : r.status().message();
  };
  EXPECT_NE(bad("devices: claims").find("queues[k].devices: 'claims' is not one of extended, dra"),
            std::string::npos)
      << bad("devices: claims");
  EXPECT_NE(bad("devices: dra, share_mode: hami").find("queues[k].share_mode: 'hami' shares"),
            std::string::npos);
  EXPECT_NE(bad("share_mode: mps").find("queues[k].share_mode: 'mps' is set in a ResourceClaim"),
            std::string::npos);
  EXPECT_NE(bad("devices: dra, resources: {whole: nvidia.com/gpu}").find("queues[k].resources:"),
            std::string::npos);
  EXPECT_NE(bad("devices: dra, mig_strategy: single").find("queues[k].mig_strategy:"),
            std::string::npos);
  EXPECT_NE(bad("device_classes: {whole: gpu.nvidia.com}")
                .find("queues[k].device_classes: is for devices: dra"),
            std::string::npos);
  EXPECT_NE(bad("devices: dra, device_classes: {vgpu: x.example.com}")
                .find("queues[k].device_classes: 'vgpu' is not one of whole, mig, share"),
            std::string::npos);
  EXPECT_NE(bad("devices: dra, device_classes: {whole: Not_A_Class}")
                .find("queues[k].device_classes.whole: 'Not_A_Class' is not a DeviceClass name"),
            std::string::npos);
  EXPECT_EQ(bad("devices: dra, share_mode: timeslice"), "ok");
}

}  // namespace
}  // namespace tessera::backends::kube
