// What a Tessera job becomes in Kubernetes: one batch/v1 Job, created suspended, whose pod asks
// for the job's form by the device plugins' resource names (or, for a queue with devices: dra,
// names the job's resource.k8s.io/v1 ResourceClaim). Also how Job and pod status read back as
// Tessera's states.
//
// Fields Tessera sets are set on the parsed manifest, never pasted into its text, so a value
// (a command argument, an environment value) cannot change the manifest's structure.
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "backends/backend.h"
#include "common/status.h"

namespace tessera::backends::kube {

using Json = nlohmann::json;

// Reading objects from the API without trusting their shape: a missing key, or a value of
// another type than Kubernetes documents, reads as null / "" / 0 (never an exception).
const Json& At(const Json& o, const char* key);
std::string StrAt(const Json& o, const char* key);
int64_t IntAt(const Json& o, const char* key);
// metadata.namespace + "/" + metadata.name, and metadata.resourceVersion.
std::string KeyOf(const Json& obj);
std::string RvOf(const Json& obj);

// The Job manifest used when a queue names no template.
extern const char* kDefaultJobTemplate;

// `text` (YAML or JSON) as JSON: plain scalars that read as integers, booleans or null become
// those; quoted ones stay strings.
Result<Json> YamlToJson(const std::string& text);

// The container resources (requests = limits) for the job's form under its queue's mapping,
// e.g. {"nvidia.com/gpu": "2", "cpu": "8000m", "memory": "65536Mi"}; an error for a form the
// mapping cannot express.
Result<Json> ResourcesFor(const JobRequest& job);

// Dynamic Resource Allocation (the queue's devices: dra): the job's devices as one
// resource.k8s.io/v1 ResourceClaim named as its Job, with one request "gpu":
// - whole cards: device class gpu.nvidia.com (gpu.amd.com for AMD), count = gpus;
// - a MIG instance: class mig.nvidia.com, selected by the NVIDIA driver's `profile` attribute;
// - an AMD partition: class gpu.amd.com, selected by the AMD driver's `partitionProfile`;
// - a share: one card of class gpu.nvidia.com with the driver's GpuConfig in the claim's opaque
//   configuration: MPS (defaultActiveThreadPercentage from the share's compute,
//   defaultPinnedDeviceMemoryLimit from its memory) or TimeSlicing.
// Classes can be renamed per queue (device_classes). Null when the job asks for no device or the
// queue uses extended resources.
Result<Json> ClaimFor(const JobRequest& job, const std::string& cluster, const std::string& ns);
// Whether the queue asks for devices by ResourceClaim (and the job for a device at all).
bool UsesClaim(const JobRequest& job);
// The claim's allocation for people: "driver/pool/device" for each device, comma-separated; ""
// while it is not allocated.
std::string AllocationOf(const Json& claim);

// The scheduling directives of the queue's pool merged with those of the template's pod spec
// (`pod_spec`): {"nodeSelector": {...}, "tolerations": [...]}, each key only when not empty
// (with the MIG product label under the single strategy). A merge patch replaces lists whole,
// so the admission patch carries the template's tolerations too.
Result<Json> SchedulingFor(const JobRequest& job, const Json& pod_spec = Json::object());

// The whole Job (with DRA: the pod's resourceClaims entry "gpu" naming the job's claim, and the
// first container's resources.claims, in place of the GPU resource names): the template (the
// queue's file or kDefaultJobTemplate) with metadata.name, namespace, labels tessera.io/job and
// tessera.io/cluster (also on the pod template), spec.suspend true, backoffLimit 0, the first
// container's command, env and resources, and the scheduling directives (SchedulingFor). A template
// of the wrong shape is an error, never an exception.
Result<Json> RenderJob(const JobRequest& job, const std::string& cluster, const std::string& ns);

// A Job object's state for Tessera, with its pods' details (`pods`: the Job's pods, any order).
ExternalJob ReadJob(const Json& job, const std::vector<const Json*>& pods);

// The name a Job gets: the job's scheduler-side name, lowercased, made a DNS-1123 label.
std::string JobName(const std::string& name);

}  // namespace tessera::backends::kube
