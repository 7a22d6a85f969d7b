// What the NVIDIA DRA driver publishes, written into the stand-in API server (kube_standin.h) for
// the tests of devices: dra queues (kube_backend_test.cc, kube_dra_serve_test.cc): its two
// DeviceClasses (as its Helm chart installs them) and per node a ResourceSlice; devices carry the
// driver's attributes (type, productName, profile, parentUUID) and, when partitionable, consume
// counters of their card's counter set.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "kube_standin.h"

namespace tessera::testing {

// The DeviceClasses gpu.nvidia.com and mig.nvidia.com.
inline void InstallDraClasses(KubeStandIn& k) {
  using Json = nlohmann::json;
  for (const char* type : {"gpu", "mig"}) {
    Json dc = {{"apiVersion", "resource.k8s.io/v1"},
               {"kind", "DeviceClass"},
               {"metadata", {{"name", std::string(type) + ".nvidia.com"}}},
               {"spec",
                {{"selectors",
                  {{{"cel",
                     {{"expression",
                       "device.driver == 'gpu.nvidia.com' && "
                       "device.attributes['gpu.nvidia.com'].type == '" +
                           std::string(type) + "'"}}}}}}}}};
    Json made = k.Control("POST", "/apis/resource.k8s.io/v1/deviceclasses", dc.dump());
    ASSERT_EQ(made.value("kind", ""), "DeviceClass") << made.dump();
  }
}

// A device of an A100 of `type` (gpu, mig), consuming `multiprocessors` of `counter_set` when
// one is named.
inline nlohmann::json DraDevice(const std::string& name, const std::string& type,
                                const std::string& profile = "", const std::string& parent = "",
                                const std::string& counter_set = "", int multiprocessors = 0) {
  nlohmann::json d = {
      {"name", name},
      {"attributes",
       {{"type", {{"string", type}}}, {"productName", {{"string", "NVIDIA A100-SXM4-80GB"}}}}}};
  if (!profile.empty()) d["attributes"]["profile"] = {{"string", profile}};
  if (!parent.empty()) d["attributes"]["parentUUID"] = {{"string", parent}};
  if (!counter_set.empty()) {
    d["consumesCounters"] = nlohmann::json::array(
        {{{"counterSet", counter_set},
          {"counters", {{"multiprocessors", {{"value", std::to_string(multiprocessors)}}}}}}});
  }
  return d;
}

// The ResourceSlice of `node`: its `devices` and the `counter_sets` they consume.
inline void PublishDraSlice(KubeStandIn& k, const std::string& node, const nlohmann::json& devices,
                            const nlohmann::json& counter_sets = nlohmann::json::array()) {
  nlohmann::json s = {{"apiVersion", "resource.k8s.io/v1"},
                      {"kind", "ResourceSlice"},
                      {"metadata", {{"name", node + "-gpu.nvidia.com"}}},
                      {"spec",
                       {{"driver", "gpu.nvidia.com"},
                        {"nodeName", node},
                        {"pool", {{"name", node}, {"generation", 1}, {"resourceSliceCount", 1}}},
                        {"devices", devices}}}};
  if (!counter_sets.empty()) s["spec"]["sharedCounters"] = counter_sets;
  nlohmann::json made = k.Control("POST", "/apis/resource.k8s.io/v1/resourceslices", s.dump());
  ASSERT_EQ(made.value("kind", ""), "ResourceSlice") << made.dump();
}

// An A100's counter set: its 98 multiprocessors.
inline nlohmann::json DraCounterSet(const std::string& set) {
  return nlohmann::json::array(
      {{{"name", set}, {"counters", {{"multiprocessors", {{"value", "98"}}}}}}});
}

}  // namespace tessera::testing
