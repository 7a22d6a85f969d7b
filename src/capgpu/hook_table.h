// The one list of symbols the cap library intercepts. Everything that must agree on it is
// generated from TESSERA_CAPGPU_HOOKS: the exported wrapper declarations, their function-pointer
// types, the HookId enum, the name table the dlsym hook consults, and the entry table the
// cuGetProcAddress hook consults. Adding a hook is one line here plus its wrapper body in the
// file of its API family (hooks_*.cc); the compiler rejects a body whose signature drifts.
//
// Columns: X(library, symbol, base name for cuGetProcAddress, CUDA version that introduced this
// variant, stream flavour, return type, parameter list).
//   - "base name" and "version" follow cuGetProcAddress: cuMemAlloc at cudaVersion >= 3020 is
//     cuMemAlloc_v2. NVML rows leave them empty: NVML has no entry-point query.
//   - Stream flavour: kAny (no stream argument), kLegacy (the default symbol of a stream-ordered
//     call), kPerThread (its _ptsz twin, handed out for CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM).
#pragma once

#include <cstddef>

#include "capgpu/cuda_abi.h"

#define TESSERA_CAPGPU_HOOKS(X)                                                                    \
  /* allocation family: hooks_memory.cc */                                                         \
  X(kCuda, cuMemAlloc_v2, "cuMemAlloc", 3020, kAny, CUresult, (CUdeviceptr * dptr, size_t bytesize)) \
  X(kCuda, cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, kAny, CUresult,                            \
    (CUdeviceptr * dptr, size_t * pitch, size_t width_bytes, size_t height, unsigned int elem_bytes)) \
  X(kCuda, cuMemAllocManaged, "cuMemAllocManaged", 6000, kAny, CUresult,                           \
    (CUdeviceptr * dptr, size_t bytesize, unsigned int flags))                                     \
  X(kCuda, cuMemAllocAsync, "cuMemAllocAsync", 11020, kLegacy, CUresult,                           \
    (CUdeviceptr * dptr, size_t bytesize, CUstream stream))                                        \
  X(kCuda, cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020, kPerThread, CUresult,                   \
    (CUdeviceptr * dptr, size_t bytesize, CUstream stream))                                        \
  X(kCuda, cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, kLegacy, CUresult,           \
    (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool pool, CUstream stream))                     \
  X(kCuda, cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 11020, kPerThread, CUresult,   \
    (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool pool, CUstream stream))                     \
  X(kCuda, cuMemCreate, "cuMemCreate", 10020, kAny, CUresult,                                      \
    (CUmemGenericAllocationHandle * handle, size_t size, const CUmemAllocationProp* prop,         \
     unsigned long long flags))                                                                    \
  X(kCuda, cuArrayCreate_v2, "cuArrayCreate", 3020, kAny, CUresult,                                \
    (CUarray * array, const CUDA_ARRAY_DESCRIPTOR* desc))                                          \
  X(kCuda, cuArray3DCreate_v2, "cuArray3DCreate", 3020, kAny, CUresult,                            \
    (CUarray * array, const CUDA_ARRAY3D_DESCRIPTOR* desc))                                        \
  X(kCuda, cuMemFree_v2, "cuMemFree", 3020, kAny, CUresult, (CUdeviceptr dptr))                    \
  X(kCuda, cuMemFreeAsync, "cuMemFreeAsync", 11020, kLegacy, CUresult,                             \
    (CUdeviceptr dptr, CUstream stream))                                                           \
  X(kCuda, cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020, kPerThread, CUresult,                     \
    (CUdeviceptr dptr, CUstream stream))                                                           \
  X(kCuda, cuMemRelease, "cuMemRelease", 10020, kAny, CUresult,                                    \
    (CUmemGenericAllocationHandle handle))                                                         \
  X(kCuda, cuArrayDestroy, "cuArrayDestroy", 2000, kAny, CUresult, (CUarray array))                \
  /* memory queries: hooks_info.cc */                                                              \
  X(kCuda, cuMemGetInfo_v2, "cuMemGetInfo", 3020, kAny, CUresult, (size_t * free, size_t * total)) \
  X(kCuda, cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020, kAny, CUresult,                          \
    (size_t * bytes, CUdevice dev))                                                                \
  /* execution: hooks_exec.cc (a pass-through today; the hook point for compute time-slicing) */   \
  X(kCuda, cuLaunchKernel, "cuLaunchKernel", 4000, kLegacy, CUresult,                              \
    (CUfunction f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,                  \
     unsigned int block_x, unsigned int block_y, unsigned int block_z, unsigned int shared_bytes,  \
     CUstream stream, void** params, void** extra))                                                \
  X(kCuda, cuLaunchKernel_ptsz, "cuLaunchKernel", 7000, kPerThread, CUresult,                      \
    (CUfunction f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,                  \
     unsigned int block_x, unsigned int block_y, unsigned int block_z, unsigned int shared_bytes,  \
     CUstream stream, void** params, void** extra))                                                \
  /* entry points: hooks_entry.cc */                                                               \
  X(kCuda, cuGetProcAddress, "cuGetProcAddress", 11030, kAny, CUresult,                            \
    (const char* symbol, void** pfn, int cuda_version, cuuint64_t flags))                          \
  X(kCuda, cuGetProcAddress_v2, "cuGetProcAddress", 12000, kAny, CUresult,                         \
    (const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,                          \
     CUdriverProcAddressQueryResult* status))                                                      \
  /* NVML memory queries: hooks_nvml.cc */                                                         \
  X(kNvml, nvmlDeviceGetMemoryInfo, nullptr, 0, kAny, nvmlReturn_t,                                \
    (nvmlDevice_t device, nvmlMemory_t * memory))                                                  \
  X(kNvml, nvmlDeviceGetMemoryInfo_v2, nullptr, 0, kAny, nvmlReturn_t,                             \
    (nvmlDevice_t device, nvmlMemory_v2_t * memory))

// The exported wrappers (defined in hooks_*.cc with default visibility).
extern "C" {
#define TESSERA_CAPGPU_DECLARE(lib, sym, base, since, stream, ret, params) \
  __attribute__((visibility("default"))) ret sym params;
TESSERA_CAPGPU_HOOKS(TESSERA_CAPGPU_DECLARE)
#undef TESSERA_CAPGPU_DECLARE
}

namespace tessera::capgpu {

enum class HookId : int {
#define TESSERA_CAPGPU_ID(lib, sym, base, since, stream, ret, params) sym,
  TESSERA_CAPGPU_HOOKS(TESSERA_CAPGPU_ID)
#undef TESSERA_CAPGPU_ID
      kCount
};
inline constexpr int kHookCount = static_cast<int>(HookId::kCount);

// Function-pointer types, one per hook: fn::cuMemAlloc_v2 is CUresult (*)(CUdeviceptr*, size_t).
namespace fn {
#define TESSERA_CAPGPU_TYPE(lib, sym, base, since, stream, ret, params) using sym = ret(*) params;
TESSERA_CAPGPU_HOOKS(TESSERA_CAPGPU_TYPE)
#undef TESSERA_CAPGPU_TYPE
}  // namespace fn

enum class Library { kCuda, kNvml };
enum class StreamFlavour { kAny, kLegacy, kPerThread };

// One row of the table. Immutable; safe to read from any thread.
struct HookInfo {
  Library library;
  const char* symbol;     // exported name, e.g. "cuMemAlloc_v2"
  const char* base_name;  // cuGetProcAddress name, e.g. "cuMemAlloc"; nullptr for NVML
  int since_version;      // cudaVersion from which base_name means this symbol
  StreamFlavour stream;
  void* wrapper;          // our exported function
};

// All hooks in HookId order.
extern const HookInfo kHooks[kHookCount];

// The hook exported under `symbol` ("cuMemAlloc_v2"), or nullptr. Pure, allocation-free.
const HookInfo* FindHookBySymbol(const char* symbol);

// The hook that cuGetProcAddress(base_name, cuda_version, flags) selects, following the
// documented rules: the newest variant whose since_version <= cuda_version, and the _ptsz twin
// when flags ask for the per-thread default stream. nullptr when no hooked variant applies.
const HookInfo* FindHookForProcAddress(const char* base_name, int cuda_version,
                                       unsigned long long flags);

}  // namespace tessera::capgpu
