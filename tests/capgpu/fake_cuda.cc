// A stand-in libcuda.so.1 for tests and benchmarks on machines without a GPU: the subset of the
// driver API the cap library and its probes use. Device memory is bookkeeping only: allocations
// get unique fake addresses and count against FAKECUDA_TOTAL_BYTES (default 80 GiB) per process.
//
// Test controls (environment):
//   FAKECUDA_TOTAL_BYTES   device memory the stand-in reports (bytes)
//   FAKECUDA_DEVICE_COUNT  number of devices (default 1)
//   FAKECUDA_BLOCK_BYTES   a cuMemAlloc_v2 of exactly this size prints "fakecuda: blocking" and
//                          never returns (to kill a process in the middle of an allocation)
//
// Thread-safety: all entry points are thread-safe.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>

#include "capgpu/cuda_abi.h"

#define FAKE_API extern "C" __attribute__((visibility("default")))

namespace {

std::mutex g_mu;
std::map<unsigned long long, size_t>* g_allocations = nullptr;  // guarded by g_mu
size_t g_used = 0;                                              // guarded by g_mu
std::atomic<unsigned long long> g_next_address{0x100000000000ULL};
thread_local CUdevice t_device = 0;

uint64_t EnvBytes(const char* name, uint64_t fallback) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0' ? strtoull(v, nullptr, 10) : fallback;
}
uint64_t Total() { return EnvBytes("FAKECUDA_TOTAL_BYTES", 80ULL << 30); }
int DeviceCount() { return static_cast<int>(EnvBytes("FAKECUDA_DEVICE_COUNT", 1)); }

CUresult Allocate(unsigned long long* out, size_t bytes) {
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_allocations == nullptr) g_allocations = new std::map<unsigned long long, size_t>;
  if (bytes > Total() - g_used) return CUDA_ERROR_OUT_OF_MEMORY;
  // Addresses advance by the size rounded to 2 MiB, like a real device's VA space.
  unsigned long long step = (bytes + (2ULL << 20) - 1) & ~((2ULL << 20) - 1);
  *out = g_next_address.fetch_add(step);
  (*g_allocations)[*out] = bytes;
  g_used += bytes;
  return CUDA_SUCCESS;
}

CUresult Release(unsigned long long address) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_allocations == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto it = g_allocations->find(address);
  if (it == g_allocations->end()) return CUDA_ERROR_INVALID_VALUE;
  g_used -= it->second;
  g_allocations->erase(it);
  return CUDA_SUCCESS;
}

}  // namespace

FAKE_API CUresult cuInit(unsigned int) { return CUDA_SUCCESS; }
FAKE_API CUresult cuDriverGetVersion(int* version) {
  *version = 12040;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuDeviceGetCount(int* count) {
  *count = DeviceCount();
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (ordinal < 0 || ordinal >= DeviceCount()) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuCtxCreate_v2(CUcontext* ctx, unsigned int, CUdevice device) {
  if (device < 0 || device >= DeviceCount()) return CUDA_ERROR_INVALID_DEVICE;
  t_device = device;
  *ctx = reinterpret_cast<CUcontext>(static_cast<uintptr_t>(0x1000 + device));
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuCtxGetDevice(CUdevice* device) {
  *device = t_device;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemAlloc(unsigned int* dptr, unsigned int bytes) {  // the pre-3.2 ABI
  unsigned long long p = 0;
  CUresult r = Allocate(&p, bytes);
  if (r == CUDA_SUCCESS) *dptr = static_cast<unsigned int>(p);
  return r;
}
FAKE_API CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  if (bytes == EnvBytes("FAKECUDA_BLOCK_BYTES", 0)) {
    printf("fakecuda: blocking\n");
    fflush(stdout);
    for (;;) pause();
  }
  return Allocate(dptr, bytes);
}
FAKE_API CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                     unsigned int) {
  *pitch = (width + 511) / 512 * 512;
  return Allocate(dptr, *pitch * height);
}
FAKE_API CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int) {
  return Allocate(dptr, bytes);
}
FAKE_API CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream) {
  return Allocate(dptr, bytes);
}
FAKE_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream) {
  return Allocate(dptr, bytes);
}
FAKE_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool, CUstream) {
  return Allocate(dptr, bytes);
}
FAKE_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUmemoryPool,
                                               CUstream) {
  return Allocate(dptr, bytes);
}
FAKE_API CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t bytes,
                              const CUmemAllocationProp*, unsigned long long) {
  return Allocate(handle, bytes);
}
FAKE_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle) { return Release(handle); }
FAKE_API CUresult cuArrayCreate_v2(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* d) {
  unsigned long long p = 0;
  CUresult r = Allocate(&p, d->Width * (d->Height ? d->Height : 1) * d->NumChannels * 4);
  if (r == CUDA_SUCCESS) *array = reinterpret_cast<CUarray>(p);
  return r;
}
FAKE_API CUresult cuArray3DCreate_v2(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  unsigned long long p = 0;
  CUresult r = Allocate(
      &p, d->Width * (d->Height ? d->Height : 1) * (d->Depth ? d->Depth : 1) * d->NumChannels * 4);
  if (r == CUDA_SUCCESS) *array = reinterpret_cast<CUarray>(p);
  return r;
}
FAKE_API CUresult cuArrayDestroy(CUarray array) {
  return Release(reinterpret_cast<unsigned long long>(array));
}
FAKE_API CUresult cuMemFree_v2(CUdeviceptr dptr) { return Release(dptr); }
FAKE_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream) { return Release(dptr); }
FAKE_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream) { return Release(dptr); }

FAKE_API CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  std::lock_guard<std::mutex> lock(g_mu);
  *total = Total();
  *free = Total() - g_used;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice device) {
  if (device < 0 || device >= DeviceCount()) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = Total();
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuLaunchKernel(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                                 unsigned int, unsigned int, unsigned int, CUstream, void**,
                                 void**) {
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuLaunchKernel_ptsz(CUfunction, unsigned int, unsigned int, unsigned int,
                                      unsigned int, unsigned int, unsigned int, unsigned int,
                                      CUstream, void**, void**) {
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags);
FAKE_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                      CUdriverProcAddressQueryResult* status);

namespace {

// cuGetProcAddress's table: base name, version the variant appeared, stream flavour (0 any,
// 1 legacy only, 2 per-thread only), function.
struct Entry {
  const char* base;
  int since;
  int stream;
  void* fn;
};
#define FAKE_ENTRY(base, since, stream, fn) \
  { base, since, stream, reinterpret_cast<void*>(&fn) }
const Entry kEntries[] = {
    FAKE_ENTRY("cuInit", 2000, 0, cuInit),
    FAKE_ENTRY("cuDriverGetVersion", 2020, 0, cuDriverGetVersion),
    FAKE_ENTRY("cuDeviceGet", 2000, 0, cuDeviceGet),
    FAKE_ENTRY("cuDeviceGetCount", 2000, 0, cuDeviceGetCount),
    FAKE_ENTRY("cuCtxCreate", 3020, 0, cuCtxCreate_v2),
    FAKE_ENTRY("cuCtxGetDevice", 2000, 0, cuCtxGetDevice),
    FAKE_ENTRY("cuMemAlloc", 2000, 0, cuMemAlloc),
    FAKE_ENTRY("cuMemAlloc", 3020, 0, cuMemAlloc_v2),
    FAKE_ENTRY("cuMemAllocPitch", 3020, 0, cuMemAllocPitch_v2),
    FAKE_ENTRY("cuMemAllocManaged", 6000, 0, cuMemAllocManaged),
    FAKE_ENTRY("cuMemAllocAsync", 11020, 1, cuMemAllocAsync),
    FAKE_ENTRY("cuMemAllocAsync", 11020, 2, cuMemAllocAsync_ptsz),
    FAKE_ENTRY("cuMemAllocFromPoolAsync", 11020, 1, cuMemAllocFromPoolAsync),
    FAKE_ENTRY("cuMemAllocFromPoolAsync", 11020, 2, cuMemAllocFromPoolAsync_ptsz),
    FAKE_ENTRY("cuMemCreate", 10020, 0, cuMemCreate),
    FAKE_ENTRY("cuMemRelease", 10020, 0, cuMemRelease),
    FAKE_ENTRY("cuArrayCreate", 3020, 0, cuArrayCreate_v2),
    FAKE_ENTRY("cuArray3DCreate", 3020, 0, cuArray3DCreate_v2),
    FAKE_ENTRY("cuArrayDestroy", 2000, 0, cuArrayDestroy),
    FAKE_ENTRY("cuMemFree", 3020, 0, cuMemFree_v2),
    FAKE_ENTRY("cuMemFreeAsync", 11020, 1, cuMemFreeAsync),
    FAKE_ENTRY("cuMemFreeAsync", 11020, 2, cuMemFreeAsync_ptsz),
    FAKE_ENTRY("cuMemGetInfo", 3020, 0, cuMemGetInfo_v2),
    FAKE_ENTRY("cuDeviceTotalMem", 3020, 0, cuDeviceTotalMem_v2),
    FAKE_ENTRY("cuLaunchKernel", 4000, 1, cuLaunchKernel),
    FAKE_ENTRY("cuLaunchKernel", 7000, 2, cuLaunchKernel_ptsz),
    FAKE_ENTRY("cuGetProcAddress", 11030, 0, cuGetProcAddress),
    FAKE_ENTRY("cuGetProcAddress", 12000, 0, cuGetProcAddress_v2),
};

CUresult Lookup(const char* symbol, void** pfn, int version, cuuint64_t flags,
                CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const Entry* best = nullptr;
  bool known = false;
  for (const Entry& e : kEntries) {
    if (strcmp(e.base, symbol) != 0) continue;
    known = true;
    if (e.since > version) continue;
    if ((e.stream == 1 && per_thread) || (e.stream == 2 && !per_thread)) continue;
    if (best == nullptr || e.since > best->since) best = &e;
  }
  *pfn = best != nullptr ? best->fn : nullptr;
  if (status != nullptr) {
    *status = best != nullptr ? CU_GET_PROC_ADDRESS_SUCCESS
              : known         ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                              : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  }
  return best != nullptr ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

}  // namespace

FAKE_API CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return Lookup(symbol, pfn, version, flags, nullptr);
}
FAKE_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                      CUdriverProcAddressQueryResult* status) {
  return Lookup(symbol, pfn, version, flags, status);
}
