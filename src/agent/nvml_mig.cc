#include "agent/nvml_mig.h"

#include <dlfcn.h>

#include <cstring>

namespace tessera::agent {
namespace {

// ---- The NVML declarations used here, written from NVML's public API reference. ----
using NvmlReturn = int;  // nvmlReturn_t; 0 is success
constexpr NvmlReturn kOk = 0;
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

struct NvmlMig::Api {
  void* lib = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*handle_by_uuid)(const char*, Handle*) = nullptr;
  NvmlReturn (*mig_mode)(Handle, unsigned*, unsigned*) = nullptr;
  NvmlReturn (*gi_profile_info)(Handle, unsigned, GpuInstanceProfileInfo*) = nullptr;
  NvmlReturn (*create_gi)(Handle, unsigned, const Placement*, Handle*) = nullptr;
  NvmlReturn (*gi_info)(Handle, GpuInstanceInfo*) = nullptr;
  NvmlReturn (*ci_profile_info)(Handle, unsigned, unsigned, ComputeInstanceProfileInfo*) = nullptr;
  NvmlReturn (*create_ci)(Handle, unsigned, Handle*) = nullptr;
  NvmlReturn (*destroy_ci)(Handle) = nullptr;
  NvmlReturn (*destroy_gi)(Handle) = nullptr;
  NvmlReturn (*max_mig_devices)(Handle, unsigned*) = nullptr;
  NvmlReturn (*mig_device_by_index)(Handle, unsigned, Handle*) = nullptr;
  NvmlReturn (*gi_id_of)(Handle, unsigned*) = nullptr;
  NvmlReturn (*uuid)(Handle, char*, unsigned) = nullptr;

  std::string Error(const std::string& what, NvmlReturn rc) const {
    return what + ": " + (error_string ? error_string(rc) : "error") + " (NVML " +
           std::to_string(rc) + ")";
  }
  ~Api() {
    if (shutdown) shutdown();
    if (lib) dlclose(lib);
  }
};

NvmlMig::NvmlMig(std::unique_ptr<Api> api) : api_(std::move(api)) {}
NvmlMig::~NvmlMig() = default;

Result<std::unique_ptr<NvmlMig>> NvmlMig::Open(const std::string& library) {
  auto api = std::make_unique<Api>();
  api->lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api->lib == nullptr) return Status::FailedPrecondition("cannot load NVML '" + library + "'");
  bool all = true;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(api->lib, name));
    all = all && fn != nullptr;
  };
  sym(api->init, "nvmlInit_v2");
  sym(api->shutdown, "nvmlShutdown");
  sym(api->error_string, "nvmlErrorString");
  sym(api->handle_by_uuid, "nvmlDeviceGetHandleByUUID");
  sym(api->mig_mode, "nvmlDeviceGetMigMode");
  sym(api->gi_profile_info, "nvmlDeviceGetGpuInstanceProfileInfo");
  sym(api->create_gi, "nvmlDeviceCreateGpuInstanceWithPlacement");
  sym(api->gi_info, "nvmlGpuInstanceGetInfo");
  sym(api->ci_profile_info, "nvmlGpuInstanceGetComputeInstanceProfileInfo");
  sym(api->create_ci, "nvmlGpuInstanceCreateComputeInstance");
  sym(api->destroy_ci, "nvmlComputeInstanceDestroy");
  sym(api->destroy_gi, "nvmlGpuInstanceDestroy");
  sym(api->max_mig_devices, "nvmlDeviceGetMaxMigDeviceCount");
  sym(api->mig_device_by_index, "nvmlDeviceGetMigDeviceHandleByIndex");
  sym(api->gi_id_of, "nvmlDeviceGetGpuInstanceId");
  sym(api->uuid, "nvmlDeviceGetUUID");
  if (!all)
    return Status::FailedPrecondition("NVML '" + library +
                                      "' lacks the MIG calls (driver too old?)");
  if (NvmlReturn rc = api->init(); rc != kOk) {
    api->shutdown = nullptr;
    return Status::FailedPrecondition(api->Error("nvmlInit", rc));
  }
  return std::unique_ptr<NvmlMig>(new NvmlMig(std::move(api)));
}

Result<NvmlMig::Instance> NvmlMig::Create(const std::string& gpu_uuid, int profile_id, int start,
                                          int size) {
  const Api& a = *api_;
  Handle dev = nullptr;
  if (NvmlReturn rc = a.handle_by_uuid(gpu_uuid.c_str(), &dev); rc != kOk)
    return Status::NotFound(a.Error(gpu_uuid, rc));
  unsigned current = 0, pending = 0;
  if (NvmlReturn rc = a.mig_mode(dev, &current, &pending); rc != kOk || current != 1) {
    return Status::FailedPrecondition(
        gpu_uuid + ": MIG mode is off (enable it on the idle card: nvidia-smi -i " + gpu_uuid +
        " -mig 1)");
  }
  // NVML numbers profiles by index; the catalog by the id nvidia-smi shows: find the index.
  GpuInstanceProfileInfo gip{};
  bool found = false;
  for (unsigned p = 0; p < kMaxGpuInstanceProfiles && !found; ++p) {
    GpuInstanceProfileInfo info{};
    if (a.gi_profile_info(dev, p, &info) == kOk && static_cast<int>(info.id) == profile_id) {
      gip = info;
      found = true;
    }
  }
  if (!found)
    return Status::NotFound(gpu_uuid + ": no GPU instance profile " + std::to_string(profile_id));
  Placement where{static_cast<unsigned>(start), static_cast<unsigned>(size)};
  Instance out;
  if (NvmlReturn rc = a.create_gi(dev, gip.id, &where, &out.gpu_instance); rc != kOk) {
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
    if (a.ci_profile_info(out.gpu_instance, p, kEngineProfileShared, &info) == kOk &&
        info.sliceCount == gip.sliceCount) {
      cip = info;
      found = true;
    }
  }
  if (!found)
    return undo(
        Status::NotFound(gpu_uuid + ": no compute instance profile spans the GPU instance"));
  if (NvmlReturn rc = a.create_ci(out.gpu_instance, cip.id, &out.compute_instance); rc != kOk) {
    return undo(Status::FailedPrecondition(a.Error(gpu_uuid + ": compute instance", rc)));
  }
  // The MIG device of that GPU instance carries the UUID the job sees.
  GpuInstanceInfo gi{};
  if (NvmlReturn rc = a.gi_info(out.gpu_instance, &gi); rc != kOk)
    return undo(Status::Internal(a.Error("GPU instance info", rc)));
  unsigned count = 0;
  if (NvmlReturn rc = a.max_mig_devices(dev, &count); rc != kOk)
    return undo(Status::Internal(a.Error("MIG devices", rc)));
  for (unsigned i = 0; i < count && out.uuid.empty(); ++i) {
    Handle mig = nullptr;
    unsigned id = 0;
    if (a.mig_device_by_index(dev, i, &mig) != kOk || a.gi_id_of(mig, &id) != kOk || id != gi.id)
      continue;
    char buf[kStringBuffer] = {};
    if (a.uuid(mig, buf, kStringBuffer) == kOk) out.uuid = buf;
  }
  if (out.uuid.rfind("MIG-", 0) != 0)
    return undo(Status::Internal(gpu_uuid + ": the new MIG device has no UUID"));
  return out;
}

Status NvmlMig::Destroy(Instance& instance) {
  const Api& a = *api_;
  if (instance.compute_instance) {
    if (NvmlReturn rc = a.destroy_ci(instance.compute_instance); rc != kOk) {
      return Status::Internal(a.Error(instance.uuid + ": destroying the compute instance", rc));
    }
    instance.compute_instance = nullptr;
  }
  if (instance.gpu_instance) {
    if (NvmlReturn rc = a.destroy_gi(instance.gpu_instance); rc != kOk) {
      return Status::Internal(a.Error(instance.uuid + ": destroying the GPU instance", rc));
    }
    instance.gpu_instance = nullptr;
  }
  return Status::Ok();
}

}  // namespace tessera::agent
