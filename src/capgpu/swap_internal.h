// Private to the swap implementation (swap.cc: the gate and the watcher; swap_tables.cc: the
// handles and mappings; swap_copy.cc: moving bytes off and back onto the device).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

#include "capgpu/real_driver.h"
#include "capgpu/swap.h"

namespace tessera::capgpu {

struct Swapper::Handle {
  CUmemGenericAllocationHandle user;  // what the process holds (0 for Alloc's own)
  CUmemGenericAllocationHandle real;  // the physical memory now; 0 while swapped out
  uint64_t bytes;
  CUmemAllocationProp prop;
  uint32_t device;
  uint32_t refs;      // the process's references (create, retain); 0: released by the process
  uint32_t mappings;  // live mappings of it
  uint8_t live;
};

struct Swapper::Mapping {
  CUdeviceptr va;
  uint64_t bytes;
  uint64_t offset;
  uint64_t reserved;  // > 0: Alloc's own range of this size, freed with it
  uint32_t handle;    // index into handles_
  uint8_t live;
  uint8_t on_disk;
  void* host;            // pinned copy while swapped (host tier)
  uint64_t file_offset;  // where its bytes are in swap_fd_ (disk tier)
};

namespace swap_internal {

constexpr uint64_t kChunk = 8ULL << 20;  // copy unit; kStreams chunks in flight
constexpr int kStreams = 4;
constexpr int kRecordsPerChunk = 256;
constexpr uint64_t kUserHandleTag = 0xC0DE000000000000ULL;
constexpr int64_t kDrainTimeoutNs = 10'000'000'000;

// The real driver functions the swap uses (looked up once; never the wrappers).
#define TESSERA_SWAP_FN(name, type)                                              \
  inline type name##_fn() {                                                      \
    static constinit std::atomic<void*> cache{nullptr};                          \
    return reinterpret_cast<type>(ResolveHelper(Library::kCuda, #name, &cache)); \
  }
using ReserveFn = CUresult (*)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
using AddressFreeFn = CUresult (*)(CUdeviceptr, size_t);
using CreateFn = CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                              unsigned long long);
using ReleaseFn = CUresult (*)(CUmemGenericAllocationHandle);
using MapFn = CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                           unsigned long long);
using UnmapFn = CUresult (*)(CUdeviceptr, size_t);
using SetAccessFn = CUresult (*)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);
using GranularityFn = CUresult (*)(size_t*, const CUmemAllocationProp*, int);
using HostAllocFn = CUresult (*)(void**, size_t, unsigned int);
using FreeHostFn = CUresult (*)(void*);
using StreamCreateFn = CUresult (*)(CUstream*, unsigned int);
using StreamSyncFn = CUresult (*)(CUstream);
using CtxSyncFn = CUresult (*)();
using CtxGetFn = CUresult (*)(CUcontext*);
using CtxSetFn = CUresult (*)(CUcontext);
using DtoHAsyncFn = CUresult (*)(void*, CUdeviceptr, size_t, CUstream);
using HtoDAsyncFn = CUresult (*)(CUdeviceptr, const void*, size_t, CUstream);
TESSERA_SWAP_FN(cuMemAddressReserve, ReserveFn)
TESSERA_SWAP_FN(cuMemAddressFree, AddressFreeFn)
TESSERA_SWAP_FN(cuMemCreate, CreateFn)
TESSERA_SWAP_FN(cuMemRelease, ReleaseFn)
TESSERA_SWAP_FN(cuMemMap, MapFn)
TESSERA_SWAP_FN(cuMemUnmap, UnmapFn)
TESSERA_SWAP_FN(cuMemSetAccess, SetAccessFn)
TESSERA_SWAP_FN(cuMemGetAllocationGranularity, GranularityFn)
TESSERA_SWAP_FN(cuMemHostAlloc, HostAllocFn)
TESSERA_SWAP_FN(cuMemFreeHost, FreeHostFn)
TESSERA_SWAP_FN(cuStreamCreate, StreamCreateFn)
TESSERA_SWAP_FN(cuStreamSynchronize, StreamSyncFn)
TESSERA_SWAP_FN(cuCtxSynchronize, CtxSyncFn)
TESSERA_SWAP_FN(cuCtxGetCurrent, CtxGetFn)
TESSERA_SWAP_FN(cuCtxSetCurrent, CtxSetFn)
TESSERA_SWAP_FN(cuMemcpyDtoHAsync_v2, DtoHAsyncFn)
TESSERA_SWAP_FN(cuMemcpyHtoDAsync_v2, HtoDAsyncFn)
#undef TESSERA_SWAP_FN

inline int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

inline void FutexWait(uint32_t* word, uint32_t seen, int64_t timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1'000'000'000),
              static_cast<long>(timeout_ns % 1'000'000'000)};
  syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, nullptr, 0);
}

inline void FutexWakeAll(uint32_t* word) {
  syscall(SYS_futex, word, FUTEX_WAKE, 0x7fffffff, nullptr, nullptr, 0);
}

inline CUmemAccessDesc ReadWrite(uint32_t device) {
  CUmemAccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = static_cast<int>(device);
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return d;
}

// The calls that back a virtual range with physical memory (Alloc, the swap-in), looked up
// together; ok() when none is missing.
struct BackingCalls {
  CreateFn create = cuMemCreate_fn();
  ReleaseFn release = cuMemRelease_fn();
  MapFn map = cuMemMap_fn();
  UnmapFn unmap = cuMemUnmap_fn();
  SetAccessFn access = cuMemSetAccess_fn();

  bool ok() const {
    return create != nullptr && release != nullptr && map != nullptr && unmap != nullptr &&
           access != nullptr;
  }

  // Maps `bytes` of `real` (from `offset`) at `va`, readable and writable from `device`;
  // nothing stays mapped when it fails.
  CUresult MapReadWrite(CUdeviceptr va, uint64_t bytes, uint64_t offset,
                        CUmemGenericAllocationHandle real, uint32_t device) const {
    CUresult r = map(va, bytes, offset, real, 0);
    if (r != CUDA_SUCCESS) return r;
    const CUmemAccessDesc desc = ReadWrite(device);
    r = access(va, bytes, &desc, 1);
    if (r != CUDA_SUCCESS) unmap(va, bytes);
    return r;
  }
};

}  // namespace swap_internal
}  // namespace tessera::capgpu
