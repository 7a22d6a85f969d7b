// MIG instances through NVML (libnvidia-ml, opened with dlopen): a GPU instance created at the
// start slice the control plane's cycle chose (nvmlDeviceCreateGpuInstanceWithPlacement), then
// one compute instance spanning it, exposed by the MIG device's UUID ("MIG-..."), and both
// destroyed when the job ends. MIG mode itself is never changed here: a device with MIG off is
// refused with the reason (changing it needs an idle card and a reset, an operator's act).
//
// Tested against the stand-in NVML library of tests/agent (fake_nvml.cc); no GPU is needed.
//
// Thread-safety: none; the agent's loop owns it.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"

namespace tessera::agent {

class NvmlMig {
 public:
  // Loads `library` and initialises NVML. kFailedPrecondition naming the library when it cannot.
  static Result<std::unique_ptr<NvmlMig>> Open(const std::string& library);
  ~NvmlMig();
  NvmlMig(const NvmlMig&) = delete;
  NvmlMig& operator=(const NvmlMig&) = delete;

  // On the GPU `gpu_uuid`: a GPU instance of the profile nvidia-smi numbers `profile_id`, at
  // memory slice `start` spanning `size` slices, and one compute instance over all of it.
  // Returns the MIG device's UUID and a handle for Destroy.
  struct Instance {
    std::string uuid;
    void* gpu_instance = nullptr;
    void* compute_instance = nullptr;
  };
  Result<Instance> Create(const std::string& gpu_uuid, int profile_id, int start, int size);
  // Destroys the compute instance, then the GPU instance; clears each handle as it goes, so
  // that a failed call (the instance still in use) can be made again and goes on from there.
  Status Destroy(Instance& instance);

 private:
  struct Api;
  explicit NvmlMig(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

}  // namespace tessera::agent
