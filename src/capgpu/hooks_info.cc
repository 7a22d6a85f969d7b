// Memory queries: a capped process sees its cap as the device's total and the cap less what the
// whole allocation (all its processes) has charged as free, never more than the card has free.
#include "capgpu/hook_names.h"

extern "C" {

CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  auto real = Real<HookId::cuMemGetInfo_v2>();
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real(free, total);
  Runtime& rt = Runtime::Get();
  if (r != CUDA_SUCCESS || !rt.Handles()) return r;
  uint64_t limit = 0, used = 0;
  const auto device = static_cast<uint32_t>(tessera::capgpu::CurrentDevice());
  if (!rt.Usage(device, &limit, &used)) return r;
  const uint64_t cap_free = used >= limit ? 0 : limit - used;
  if (total != nullptr && limit < *total) *total = limit;
  if (free != nullptr && cap_free < *free) *free = cap_free;
  return r;
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  auto real = Real<HookId::cuDeviceTotalMem_v2>();
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real(bytes, dev);
  Runtime& rt = Runtime::Get();
  if (r != CUDA_SUCCESS || bytes == nullptr || dev < 0 || !rt.Handles()) return r;
  uint64_t limit = 0, used = 0;
  if (rt.Usage(static_cast<uint32_t>(dev), &limit, &used) && limit < *bytes) *bytes = limit;
  return r;
}

}  // extern "C"
