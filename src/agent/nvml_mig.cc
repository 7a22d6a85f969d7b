#include "agent/nvml_mig.h"

#include <cstring>

#include "agent/nvml_library.h"

namespace tessera::agent {
namespace {

// ---- The NVML declarations used here, written from NVML's public API reference. ----
using Handle = void*;  // nvmlDevice_t, nvmlGpuInstance_t, nvmlComputeInstance_t: opaque pointers
struct Placement {     // nvmlGpuInstancePlacement_t
  unsigned start, size;
};
struct GpuInstanceProfileInfo {  // nvmlGpuInstanceProfileInfo_t (v1)
  unsigned id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount,
      decoderCount, encoderCount, jpegCount, ofaCount;
  unsigned long long memorySizeMB;
};
struct GpuInstanceInfo {  // nvmlGpuInstanceInfo_t
  Handle device;
  unsigned id, profileId;
  Placement placement;
};
struct ComputeInstanceProfileInfo {  // nvmlComputeInstanceProfileInfo_t (v1)
  unsigned id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount,
      sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
};
// Profile indices NVML enumerates (NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0 ...; the count grows
// with driver versions) and compute-instance profile indices (NVML_COMPUTE_INSTANCE_PROFILE_*).
constexpr unsigned kMaxGpuInstanceProfiles = 16;
constexpr unsigned kMaxComputeInstanceProfiles = 8;
constexpr unsigned kEngineProfileShared = 0;  // NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
constexpr unsigned kStringBuffer = 96;

}  // namespace

// The NVML calls MIG makes: X(member, symbol, required, return type, parameters), the one list the
// members of Api and their binding come from (agent/dynamic_library.h).
#define TESSERA_NVML_MIG_CALLS(X)                                                             \
  X(init, "nvmlInit_v2", true, NvmlReturn, ())                                                \
  X(shutdown, "nvmlShutdown", true, NvmlReturn, ())                                           \
  X(error_string, "nvmlErrorString", true, const char*, (NvmlReturn))                         \
  X(handle_by_uuid, "nvmlDeviceGetHandleByUUID", true, NvmlReturn, (const char*, Handle*))    \
  X(mig_mode, "nvmlDeviceGetMigMode", true, NvmlReturn, (Handle, unsigned*, unsigned*))       \
  X(gi_profile_info, "nvmlDeviceGetGpuInstanceProfileInfo", true, NvmlReturn,                 \
    (Handle, unsigned, GpuInstanceProfileInfo*))                                              \
  X(create_gi, "nvmlDeviceCreateGpuInstanceWithPlacement", true, NvmlReturn,                  \
    (Handle, unsigned, const Placement*, Handle*))                                            \
  X(gi_info, "nvmlGpuInstanceGetInfo", true, NvmlReturn, (Handle, GpuInstanceInfo*))          \
  X(ci_profile_info, "nvmlGpuInstanceGetComputeInstanceProfileInfo", true, NvmlReturn,        \
    (Handle, unsigned, unsigned, ComputeInstanceProfileInfo*))                                \
  X(create_ci, "nvmlGpuInstanceCreateComputeInstance", true, NvmlReturn,                      \
    (Handle, unsigned, Handle*))                                                              \
  X(destroy_ci, "nvmlComputeInstanceDestroy", true, NvmlReturn, (Handle))                     \
  X(destroy_gi, "nvmlGpuInstanceDestroy", true, NvmlReturn, (Handle))                         \
  X(max_mig_devices, "nvmlDeviceGetMaxMigDeviceCount", true, NvmlReturn, (Handle, unsigned*)) \
  X(mig_device_by_index, "nvmlDeviceGetMigDeviceHandleByIndex", true, NvmlReturn,             \
    (Handle, unsigned, Handle*))                                                              \
  X(gi_id_of, "nvmlDeviceGetGpuInstanceId", true, NvmlReturn, (Handle, unsigned*))            \
  X(uuid, "nvmlDeviceGetUUID", true, NvmlReturn, (Handle, char*, unsigned))

struct NvmlMig::Api {
  TESSERA_LIBRARY_API(Api, TESSERA_NVML_MIG_CALLS)

  std::string Error(const std::string& what, NvmlReturn rc) const {
    return what + ": " + (error_string ? error_string(rc) : "error") + " (NVML " +
           std::to_string(rc) + ")";
  }
  ~Api() {
    if (shutdown) shutdown();
  }
};

NvmlMig::NvmlMig(std::unique_ptr<Api> api) : api_(std::move(api)) {}
NvmlMig::~NvmlMig() = default;

Result<std::unique_ptr<NvmlMig>> NvmlMig::Open(const std::string& library) {
  auto api = OpenNvml<Api>(library, "the MIG calls (driver too old?)");
  if (!api.ok()) return api.status();
  return std::unique_ptr<NvmlMig>(new NvmlMig(std::move(*api)));
}

Result<NvmlMig::Instance> NvmlMig::Create(const std::string& gpu_uuid, int profile_id, int start,
                                          int size) {
  const Api& a = *api_;
  Handle dev = nullptr;
  if (NvmlReturn rc = a.handle_by_uuid(gpu_uuid.c_str(), &dev); rc != kNvmlSuccess)
    return Status::NotFound(a.Error(gpu_uuid, rc));
  unsigned current = 0, pending = 0;
  if (NvmlReturn rc = a.mig_mode(dev, &current, &pending); rc != kNvmlSuccess || current != 1) {
    return Status::FailedPrecondition(
        gpu_uuid + ": MIG mode is off (enable it on the idle card: nvidia-smi -i " + gpu_uuid +
        " -mig 1)");
  }
  // NVML numbers profiles by index; the catalog by the id nvidia-smi shows: find the index.
  GpuInstanceProfileInfo gip{};
  bool found = false;
  for (unsigned p = 0; p < kMaxGpuInstanceProfiles && !found; ++p) {
    GpuInstanceProfileInfo info{};
    if (a.gi_profile_info(dev, p, &info) == kNvmlSuccess &&
        static_cast<int>(info.id) == profile_id) {
      gip = info;
      found = true;
    }
  }
  if (!found)
    return Status::NotFound(gpu_uuid + ": no GPU instance profile " + std::to_string(profile_id));
  Placement where{static_cast<unsigned>(start), static_cast<unsigned>(size)};
  Instance out;
  if (NvmlReturn rc = a.create_gi(dev, gip.id, &where, &out.gpu_instance); rc != kNvmlSuccess) {
    return Status::FailedPrecondition(a.Error(gpu_uuid + ": GPU instance profile " +
                                                  std::to_string(profile_id) + " at slice " +
                                                  std::to_string(start),
                                              rc));
  }
  auto undo = [&](Status st) {
    if (out.compute_instance) a.destroy_ci(out.compute_instance);
    a.destroy_gi(out.gpu_instance);
    return st;
  };
  // One compute instance over the whole GPU instance.
  ComputeInstanceProfileInfo cip{};
  found = false;
  for (unsigned p = 0; p < kMaxComputeInstanceProfiles && !found; ++p) {
    ComputeInstanceProfileInfo info{};
    if (a.ci_profile_info(out.gpu_instance, p, kEngineProfileShared, &info) == kNvmlSuccess &&
        info.sliceCount == gip.sliceCount) {
      cip = info;
      found = true;
    }
  }
  if (!found)
    return undo(
        Status::NotFound(gpu_uuid + ": no compute instance profile spans the GPU instance"));
  if (NvmlReturn rc = a.create_ci(out.gpu_instance, cip.id, &out.compute_instance);
      rc != kNvmlSuccess) {
    return undo(Status::FailedPrecondition(a.Error(gpu_uuid + ": compute instance", rc)));
  }
  // The MIG device of that GPU instance carries the UUID the job sees.
  GpuInstanceInfo gi{};
  if (NvmlReturn rc = a.gi_info(out.gpu_instance, &gi); rc != kNvmlSuccess)
    return undo(Status::Internal(a.Error("GPU instance info", rc)));
  unsigned count = 0;
  if (NvmlReturn rc = a.max_mig_devices(dev, &count); rc != kNvmlSuccess)
    return undo(Status::Internal(a.Error("MIG devices", rc)));
  for (unsigned i = 0; i < count && out.uuid.empty(); ++i) {
    Handle mig = nullptr;
    unsigned id = 0;
    if (a.mig_device_by_index(dev, i, &mig) != kNvmlSuccess ||
        a.gi_id_of(mig, &id) != kNvmlSuccess || id != gi.id)
      continue;
    char buf[kStringBuffer] = {};
    if (a.uuid(mig, buf, kStringBuffer) == kNvmlSuccess) out.uuid = buf;
  }
  if (out.uuid.rfind("MIG-", 0) != 0)
    return undo(Status::Internal(gpu_uuid + ": the new MIG device has no UUID"));
  return out;
}

Status NvmlMig::Destroy(Instance& instance) {
  const Api& a = *api_;
  if (instance.compute_instance) {
    if (NvmlReturn rc = a.destroy_ci(instance.compute_instance); rc != kNvmlSuccess) {
      return Status::Internal(a.Error(instance.uuid + ": destroying the compute instance", rc));
    }
    instance.compute_instance = nullptr;
  }
  if (instance.gpu_instance) {
    if (NvmlReturn rc = a.destroy_gi(instance.gpu_instance); rc != kNvmlSuccess) {
      return Status::Internal(a.Error(instance.uuid + ": destroying the GPU instance", rc));
    }
    instance.gpu_instance = nullptr;
  }
  return Status::Ok();
}

}  // namespace tessera::agent
