// NVML memory queries, for tools and frameworks that read memory through NVML rather than the
// driver. NVML numbers devices physically while the cap is per CUDA ordinal, so the NVML device
// is mapped through CUDA_VISIBLE_DEVICES (indices or GPU-/MIG- UUIDs); a device the process
// cannot see through CUDA is reported unchanged.
#include <stdlib.h>
#include <string.h>

#include "capgpu/hook_names.h"

namespace {

// The CUDA ordinal of an NVML device, or -1 when CUDA does not see it.
int CudaOrdinal(nvmlDevice_t device) {
  static constinit std::atomic<void*> index_cache{nullptr};
  static constinit std::atomic<void*> uuid_cache{nullptr};
  using GetIndex = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*);
  using GetUuid = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);
  auto get_index =
      reinterpret_cast<GetIndex>(ResolveHelper(Library::kNvml, "nvmlDeviceGetIndex", &index_cache));
  unsigned int index = 0;
  if (get_index == nullptr || get_index(device, &index) != NVML_SUCCESS) return -1;
  const char* visible = getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr) return static_cast<int>(index);
  char uuid[96] = {0};
  bool have_uuid = false;
  int ordinal = 0;
  for (const char* p = visible; *p != '\0'; ++ordinal) {
    const char* end = strchr(p, ',');
    size_t len = end ? static_cast<size_t>(end - p) : strlen(p);
    if (len > 0 && p[0] >= '0' && p[0] <= '9') {
      // CUDA stops at the first invalid index; indices are compared numerically.
      unsigned long v = strtoul(p, nullptr, 10);
      if (v == index) return ordinal;
    } else if (len > 0) {
      if (!have_uuid) {
        auto get_uuid = reinterpret_cast<GetUuid>(
            ResolveHelper(Library::kNvml, "nvmlDeviceGetUUID", &uuid_cache));
        have_uuid = get_uuid != nullptr && get_uuid(device, uuid, sizeof(uuid)) == NVML_SUCCESS;
        if (!have_uuid) return -1;
      }
      // CUDA accepts a unique prefix of the UUID.
      if (len <= strlen(uuid) && strncmp(uuid, p, len) == 0) return ordinal;
    }
    if (end == nullptr) break;
    p = end + 1;
  }
  return -1;
}

// Applies the cap to an NVML reading. Returns false when no cap applies.
bool Capped(nvmlDevice_t device, unsigned long long reserved, unsigned long long* total,
            unsigned long long* free, unsigned long long* used) {
  Runtime& rt = Runtime::Get();
  if (!rt.Handles()) return false;
  const int ordinal = CudaOrdinal(device);
  uint64_t limit = 0, charged = 0;
  if (ordinal < 0 || !rt.Usage(static_cast<uint32_t>(ordinal), &limit, &charged)) return false;
  if (limit < *total) *total = limit;
  if (reserved > *total) reserved = *total;
  uint64_t cap_free = charged + reserved >= *total ? 0 : *total - charged - reserved;
  if (cap_free < *free) *free = cap_free;
  *used = *total - reserved - *free;
  return true;
}

}  // namespace

extern "C" {

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  auto real = Real<HookId::nvmlDeviceGetMemoryInfo>();
  if (real == nullptr) return NVML_ERROR_LIBRARY_NOT_FOUND;
  nvmlReturn_t r = real(device, memory);
  if (r == NVML_SUCCESS && memory != nullptr) {
    Capped(device, 0, &memory->total, &memory->free, &memory->used);
  }
  return r;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  auto real = Real<HookId::nvmlDeviceGetMemoryInfo_v2>();
  if (real == nullptr) return NVML_ERROR_LIBRARY_NOT_FOUND;
  nvmlReturn_t r = real(device, memory);
  if (r == NVML_SUCCESS && memory != nullptr) {
    unsigned long long reserved = memory->reserved;
    if (reserved > memory->total) reserved = 0;
    Capped(device, reserved, &memory->total, &memory->free, &memory->used);
  }
  return r;
}

}  // extern "C"
