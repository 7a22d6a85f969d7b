// A stand-in libnvidia-ml.so.1: the NVML calls the cap library and its probes use. Reports
// FAKECUDA_TOTAL_BYTES (default 80 GiB) per device, none of it used; UUIDs are "GPU-fake-<i>".
// Thread-safety: all entry points are thread-safe (stateless).
#include <stdio.h>
#include <stdlib.h>

#include <cstdint>

#include "capgpu/cuda_abi.h"

#define FAKE_API extern "C" __attribute__((visibility("default")))

namespace {
uint64_t Total() {
  const char* v = getenv("FAKECUDA_TOTAL_BYTES");
  return v != nullptr && *v != '\0' ? strtoull(v, nullptr, 10) : 80ULL << 30;
}
unsigned int Index(nvmlDevice_t d) {
  return static_cast<unsigned int>(reinterpret_cast<uintptr_t>(d) - 1);
}
}  // namespace

FAKE_API nvmlReturn_t nvmlInit_v2() { return NVML_SUCCESS; }
FAKE_API nvmlReturn_t nvmlShutdown() { return NVML_SUCCESS; }
FAKE_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  *device = reinterpret_cast<nvmlDevice_t>(static_cast<uintptr_t>(index) + 1);
  return NVML_SUCCESS;
}
FAKE_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  *index = Index(device);
  return NVML_SUCCESS;
}
FAKE_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  snprintf(uuid, length, "GPU-fake-%u", Index(device));
  return NVML_SUCCESS;
}
FAKE_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t* memory) {
  memory->total = Total();
  memory->free = Total();
  memory->used = 0;
  return NVML_SUCCESS;
}
FAKE_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t, nvmlMemory_v2_t* memory) {
  memory->total = Total();
  memory->reserved = 0;
  memory->free = Total();
  memory->used = 0;
  return NVML_SUCCESS;
}
