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
//     call), kPerThread (its _ptsz twin, handed out for
//     CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM).
#pragma once

#include <cstddef>

#include "capgpu/cuda_abi.h"

#define TESSERA_CAPGPU_HOOKS(X)                                                                    \
  /* allocation family: hooks_memory.cc */                                                         \
  X(kCuda, cuMemAlloc_v2, "cuMemAlloc", 3020, kAny, CUresult,                                      \
    (CUdeviceptr * dptr, size_t bytesize))                                                         \
  X(kCuda, cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, kAny, CUresult,                            \
    (CUdeviceptr * dptr, size_t * pitch, size_t width_bytes, size_t height,                        \
     unsigned int elem_bytes))                                                                     \
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
    (CUmemGenericAllocationHandle * handle, size_t size, const CUmemAllocationProp* prop,          \
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
  X(kCuda, cuMemMap, "cuMemMap", 10020, kAny, CUresult,                                            \
    (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,             \
     unsigned long long flags))                                                                    \
  X(kCuda, cuMemUnmap, "cuMemUnmap", 10020, kAny, CUresult, (CUdeviceptr ptr, size_t size))        \
  X(kCuda, cuMemExportToShareableHandle, "cuMemExportToShareableHandle", 10020, kAny, CUresult,    \
    (void* shareable, CUmemGenericAllocationHandle handle, CUmemAllocationHandleType type,         \
     unsigned long long flags))                                                                    \
  X(kCuda, cuMemGetAllocationPropertiesFromHandle, "cuMemGetAllocationPropertiesFromHandle",       \
    10020, kAny, CUresult, (CUmemAllocationProp * prop, CUmemGenericAllocationHandle handle))      \
  X(kCuda, cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle", 11000, kAny, CUresult,      \
    (CUmemGenericAllocationHandle * handle, void* addr))                                           \
  /* gated calls that touch device memory (the swap gate, swap.h): hooks_gate.cc */                \
  X(kCuda, cuMemcpy, "cuMemcpy", 4000, kLegacy, CUresult,                                          \
    (CUdeviceptr dst, CUdeviceptr src, size_t n))                                                  \
  X(kCuda, cuMemcpy_ptds, "cuMemcpy", 7000, kPerThread, CUresult,                                  \
    (CUdeviceptr dst, CUdeviceptr src, size_t n))                                                  \
  X(kCuda, cuMemcpyAsync, "cuMemcpyAsync", 4000, kLegacy, CUresult,                                \
    (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream))                                 \
  X(kCuda, cuMemcpyAsync_ptsz, "cuMemcpyAsync", 7000, kPerThread, CUresult,                        \
    (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream))                                 \
  X(kCuda, cuMemcpyHtoD_v2, "cuMemcpyHtoD", 3020, kLegacy, CUresult,                               \
    (CUdeviceptr dst, const void* src, size_t n))                                                  \
  X(kCuda, cuMemcpyHtoD_v2_ptds, "cuMemcpyHtoD", 7000, kPerThread, CUresult,                       \
    (CUdeviceptr dst, const void* src, size_t n))                                                  \
  X(kCuda, cuMemcpyDtoH_v2, "cuMemcpyDtoH", 3020, kLegacy, CUresult,                               \
    (void* dst, CUdeviceptr src, size_t n))                                                        \
  X(kCuda, cuMemcpyDtoH_v2_ptds, "cuMemcpyDtoH", 7000, kPerThread, CUresult,                       \
    (void* dst, CUdeviceptr src, size_t n))                                                        \
  X(kCuda, cuMemcpyDtoD_v2, "cuMemcpyDtoD", 3020, kLegacy, CUresult,                               \
    (CUdeviceptr dst, CUdeviceptr src, size_t n))                                                  \
  X(kCuda, cuMemcpyDtoD_v2_ptds, "cuMemcpyDtoD", 7000, kPerThread, CUresult,                       \
    (CUdeviceptr dst, CUdeviceptr src, size_t n))                                                  \
  X(kCuda, cuMemcpyHtoDAsync_v2, "cuMemcpyHtoDAsync", 3020, kLegacy, CUresult,                     \
    (CUdeviceptr dst, const void* src, size_t n, CUstream stream))                                 \
  X(kCuda, cuMemcpyHtoDAsync_v2_ptsz, "cuMemcpyHtoDAsync", 7000, kPerThread, CUresult,             \
    (CUdeviceptr dst, const void* src, size_t n, CUstream stream))                                 \
  X(kCuda, cuMemcpyDtoHAsync_v2, "cuMemcpyDtoHAsync", 3020, kLegacy, CUresult,                     \
    (void* dst, CUdeviceptr src, size_t n, CUstream stream))                                       \
  X(kCuda, cuMemcpyDtoHAsync_v2_ptsz, "cuMemcpyDtoHAsync", 7000, kPerThread, CUresult,             \
    (void* dst, CUdeviceptr src, size_t n, CUstream stream))                                       \
  X(kCuda, cuMemsetD8_v2, "cuMemsetD8", 3020, kLegacy, CUresult,                                   \
    (CUdeviceptr dst, unsigned char value, size_t n))                                              \
  X(kCuda, cuMemsetD8_v2_ptds, "cuMemsetD8", 7000, kPerThread, CUresult,                           \
    (CUdeviceptr dst, unsigned char value, size_t n))                                              \
  X(kCuda, cuMemsetD32_v2, "cuMemsetD32", 3020, kLegacy, CUresult,                                 \
    (CUdeviceptr dst, unsigned int value, size_t n))                                               \
  X(kCuda, cuMemsetD32_v2_ptds, "cuMemsetD32", 7000, kPerThread, CUresult,                         \
    (CUdeviceptr dst, unsigned int value, size_t n))                                               \
  X(kCuda, cuMemsetD8Async, "cuMemsetD8Async", 3020, kLegacy, CUresult,                            \
    (CUdeviceptr dst, unsigned char value, size_t n, CUstream stream))                             \
  X(kCuda, cuMemsetD8Async_ptsz, "cuMemsetD8Async", 7000, kPerThread, CUresult,                    \
    (CUdeviceptr dst, unsigned char value, size_t n, CUstream stream))                             \
  X(kCuda, cuMemsetD32Async, "cuMemsetD32Async", 3020, kLegacy, CUresult,                          \
    (CUdeviceptr dst, unsigned int value, size_t n, CUstream stream))                              \
  X(kCuda, cuMemsetD32Async_ptsz, "cuMemsetD32Async", 7000, kPerThread, CUresult,                  \
    (CUdeviceptr dst, unsigned int value, size_t n, CUstream stream))                              \
  X(kCuda, cuGraphLaunch, "cuGraphLaunch", 10000, kLegacy, CUresult,                               \
    (CUgraphExec graph, CUstream stream))                                                          \
  X(kCuda, cuGraphLaunch_ptsz, "cuGraphLaunch", 10000, kPerThread, CUresult,                       \
    (CUgraphExec graph, CUstream stream))                                                          \
  X(kCuda, cuLaunchKernelEx, "cuLaunchKernelEx", 11060, kLegacy, CUresult,                         \
    (const CUlaunchConfig* config, CUfunction f, void** params, void** extra))                     \
  X(kCuda, cuLaunchKernelEx_ptsz, "cuLaunchKernelEx", 11060, kPerThread, CUresult,                 \
    (const CUlaunchConfig* config, CUfunction f, void** params, void** extra))                     \
  X(kCuda, cuStreamSynchronize, "cuStreamSynchronize", 2000, kLegacy, CUresult, (CUstream stream)) \
  X(kCuda, cuStreamSynchronize_ptsz, "cuStreamSynchronize", 7000, kPerThread, CUresult,            \
    (CUstream stream))                                                                             \
  X(kCuda, cuCtxSynchronize, "cuCtxSynchronize", 2000, kAny, CUresult, ())                         \
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
    (const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,                           \
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
  void* wrapper;  // our exported function
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
