// A stand-in libcuda.so.1 for tests and benchmarks on machines without a GPU: the subset of the
// driver API the cap library and its probes use.
//
// Two kinds of device memory:
//   - cuMemAlloc*, pitch and array allocations are bookkeeping only: unique fake addresses that
//     count against FAKECUDA_TOTAL_BYTES (default 80 GiB).
//   - The virtual memory management API is real memory on the host: cuMemAddressReserve reserves
//     address space (mmap PROT_NONE), cuMemCreate makes a memfd of the size (the "physical"
//     memory), cuMemMap maps it at the reserved address, cuMemSetAccess makes it readable and
//     writable, cuMemUnmap returns the range to a reservation. So a device pointer from the VMM
//     API is a host address: cuMemcpy*, cuMemset* and the stand-in kernel (below) read and write
//     it, and touching a range that is not mapped is a segmentation fault, as a kernel touching it
//     would be a device fault. Physical memory is freed when its handle is released and its last
//     mapping unmapped, as the driver documents.
//   - cuLaunchKernel with f == kFakeKernelIncrement (0xF00D) is a kernel: params[0] points at a
//     CUdeviceptr, params[1] at a size_t; it adds 1 to each of those bytes. Any other f is a no-op.
//
// Test controls (environment):
//   FAKECUDA_TOTAL_BYTES   device memory the stand-in reports (bytes)
//   FAKECUDA_DEVICE_COUNT  number of devices (default 1)
//   FAKECUDA_BLOCK_BYTES   a cuMemAlloc_v2 of exactly this size prints "fakecuda: blocking" and
//                          never returns (to kill a process in the middle of an allocation)
//   FAKECUDA_DEVICE_FILE   a file holding the device's used bytes, shared by every process that
//                          names it (several processes on one card); created if missing
//   FAKECUDA_COPY_US       each cuMemcpy*/cuMemset* call sleeps this long first (to kill a process
//                          in the middle of a swap)
//   FAKECUDA_REENTER=1     a driver that calls its own public entry points from inside others,
//                          through their exported symbols (dlsym(RTLD_DEFAULT): under LD_PRELOAD,
//                          the preloaded library's wrappers), as some drivers and interposers
//                          beneath an application do: the asynchronous copies call the
//                          synchronous ones, cuStreamSynchronize calls cuCtxSynchronize,
//                          stream-ordered and managed allocations call cuMemAlloc_v2,
//                          stream-ordered frees call cuMemFree_v2, cuLaunchKernel_ptsz calls
//                          cuLaunchKernel
//
// Extra export for tests: fakecudaDeviceUsed() returns the device bytes in use (shared ones when
// FAKECUDA_DEVICE_FILE is set).
//
// Thread-safety: all entry points are thread-safe.
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>

#include "capgpu/cuda_abi.h"

#define FAKE_API extern "C" __attribute__((visibility("default")))

namespace {

constexpr size_t kGranularity = 2ULL << 20;  // what cuMemGetAllocationGranularity reports
constexpr uintptr_t kFakeKernelIncrement = 0xF00D;

std::mutex g_mu;
std::map<unsigned long long, size_t>* g_allocations = nullptr;  // guarded by g_mu
uint64_t g_local_used = 0;
uint64_t* g_used = nullptr;  // &g_local_used or the shared device file's word; guarded by g_mu
std::atomic<unsigned long long> g_next_address{0x100000000000ULL};
thread_local CUdevice t_device = 0;
thread_local CUcontext t_context = nullptr;

// VMM state, guarded by g_mu.
struct Physical {
  int fd;
  size_t bytes;
  int mappings;
  int refs;  // the handle's references: cuMemCreate's, and each cuMemRetainAllocationHandle's
};
struct Mapping {
  size_t bytes;
  unsigned long long handle;
};
std::map<unsigned long long, Physical>* g_physical = nullptr;
std::map<uintptr_t, size_t>* g_reservations = nullptr;
std::map<uintptr_t, Mapping>* g_mappings = nullptr;
std::map<void*, size_t>* g_host = nullptr;
unsigned long long g_next_handle = 1;

uint64_t EnvBytes(const char* name, uint64_t fallback) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0' ? strtoull(v, nullptr, 10) : fallback;
}
uint64_t Total() { return EnvBytes("FAKECUDA_TOTAL_BYTES", 80ULL << 30); }
int DeviceCount() { return static_cast<int>(EnvBytes("FAKECUDA_DEVICE_COUNT", 1)); }

// The device's used-bytes word: shared through FAKECUDA_DEVICE_FILE, else this process's own.
// REQUIRES: g_mu held. Cross-process updates take an flock on the file.
struct DeviceLock {
  int fd = -1;
  DeviceLock() {
    static int shared_fd = -2;
    if (shared_fd == -2) {
      shared_fd = -1;
      const char* path = getenv("FAKECUDA_DEVICE_FILE");
      if (path != nullptr && *path != '\0') {
        int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (f >= 0 && ftruncate(f, 4096) == 0) {
          void* m = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
          if (m != MAP_FAILED) {
            g_used = static_cast<uint64_t*>(m);
            shared_fd = f;
          }
        }
      }
      if (g_used == nullptr) g_used = &g_local_used;
    }
    fd = shared_fd;
    if (fd >= 0) flock(fd, LOCK_EX);
  }
  ~DeviceLock() {
    if (fd >= 0) flock(fd, LOCK_UN);
  }
};

bool TakeDevice(uint64_t bytes) {
  DeviceLock device;
  if (bytes > Total() || *g_used > Total() - bytes) return false;
  *g_used += bytes;
  return true;
}
void GiveDevice(uint64_t bytes) {
  DeviceLock device;
  *g_used -= bytes < *g_used ? bytes : *g_used;
}

CUresult Allocate(unsigned long long* out, size_t bytes) {
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_allocations == nullptr) g_allocations = new std::map<unsigned long long, size_t>;
  if (!TakeDevice(bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  // Addresses advance by the size rounded to 2 MiB, like a real device's VA space.
  unsigned long long step = (bytes + (2ULL << 20) - 1) & ~((2ULL << 20) - 1);
  *out = g_next_address.fetch_add(step);
  (*g_allocations)[*out] = bytes;
  return CUDA_SUCCESS;
}

CUresult Release(unsigned long long address) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_allocations == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto it = g_allocations->find(address);
  if (it == g_allocations->end()) return CUDA_ERROR_INVALID_VALUE;
  GiveDevice(it->second);
  g_allocations->erase(it);
  return CUDA_SUCCESS;
}

void InitVmmLocked() {
  if (g_physical != nullptr) return;
  g_physical = new std::map<unsigned long long, Physical>;
  g_reservations = new std::map<uintptr_t, size_t>;
  g_mappings = new std::map<uintptr_t, Mapping>;
  g_host = new std::map<void*, size_t>;
}

// REQUIRES: g_mu. Frees a physical allocation once released and unmapped everywhere.
void MaybeFreePhysicalLocked(std::map<unsigned long long, Physical>::iterator it) {
  if (it->second.refs > 0 || it->second.mappings > 0) return;
  close(it->second.fd);
  GiveDevice(it->second.bytes);
  g_physical->erase(it);
}

// True when [p, p+n) lies inside one reservation. REQUIRES: g_mu.
bool InReservationLocked(uintptr_t p, size_t n) {
  auto it = g_reservations->upper_bound(p);
  if (it == g_reservations->begin()) return false;
  --it;
  return p >= it->first && p + n <= it->first + it->second && p + n >= p;
}

// FAKECUDA_REENTER: the entry point `name` as a caller outside the driver finds it, or nullptr
// when the mode is off (the call is then served inside, as a real driver's internal calls are).
template <typename Fn>
Fn Exported(Fn, const char* name) {
  static const bool on = EnvBytes("FAKECUDA_REENTER", 0) != 0;
  return on ? reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name)) : nullptr;
}
#define FAKE_EXPORTED(fn) Exported(&fn, #fn)

void CopyDelay() {
  static const uint64_t us = EnvBytes("FAKECUDA_COPY_US", 0);
  if (us > 0) usleep(static_cast<useconds_t>(us));
}

}  // namespace

// What FAKECUDA_REENTER calls through the exported symbols.
FAKE_API CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes);
FAKE_API CUresult cuMemFree_v2(CUdeviceptr dptr);
FAKE_API CUresult cuCtxSynchronize();
FAKE_API CUresult cuLaunchKernel(CUfunction f, unsigned int, unsigned int, unsigned int,
                                 unsigned int, unsigned int, unsigned int, unsigned int, CUstream,
                                 void** params, void**);

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
  t_context = *ctx;
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
// Managed and stream-ordered allocations: the plain allocator's memory (through its exported
// symbol with FAKECUDA_REENTER).
static CUresult AllocateOther(CUdeviceptr* dptr, size_t bytes) {
  if (auto plain = FAKE_EXPORTED(cuMemAlloc_v2)) return plain(dptr, bytes);
  return Allocate(dptr, bytes);
}
FAKE_API CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int) {
  return AllocateOther(dptr, bytes);
}
FAKE_API CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream) {
  return AllocateOther(dptr, bytes);
}
FAKE_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream) {
  return AllocateOther(dptr, bytes);
}
FAKE_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool, CUstream) {
  return AllocateOther(dptr, bytes);
}
FAKE_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUmemoryPool,
                                               CUstream) {
  return AllocateOther(dptr, bytes);
}
FAKE_API CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t bytes,
                              const CUmemAllocationProp*, unsigned long long) {
  if (handle == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mu);
  InitVmmLocked();
  if (!TakeDevice(bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  int fd = memfd_create("fakecuda-physical", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    if (fd >= 0) close(fd);
    GiveDevice(bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *handle = g_next_handle++;
  (*g_physical)[*handle] = Physical{fd, bytes, 0, 1};
  return CUDA_SUCCESS;
}
// The handle of the physical memory mapped at `addr`, with one more reference.
FAKE_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mu);
  InitVmmLocked();
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  auto it = g_mappings->upper_bound(a);
  if (it == g_mappings->begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (a >= it->first + it->second.bytes) return CUDA_ERROR_INVALID_VALUE;
  auto phys = g_physical->find(it->second.handle);
  if (phys == g_physical->end()) return CUDA_ERROR_INVALID_VALUE;
  ++phys->second.refs;
  *handle = it->second.handle;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  std::lock_guard<std::mutex> lock(g_mu);
  InitVmmLocked();
  auto it = g_physical->find(handle);
  if (it == g_physical->end() || it->second.refs == 0) return CUDA_ERROR_INVALID_VALUE;
  --it->second.refs;
  MaybeFreePhysicalLocked(it);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp*,
                                                int) {
  if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr,
                                      unsigned long long) {
  if (ptr == nullptr || size == 0 || size % kGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  const size_t align = alignment > kGranularity ? alignment : kGranularity;
  void* m =
      mmap(nullptr, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  uintptr_t start = (reinterpret_cast<uintptr_t>(m) + align - 1) & ~(uintptr_t{align} - 1);
  // Trim the slack on both sides so the reservation is exactly [start, start + size).
  if (start > reinterpret_cast<uintptr_t>(m)) munmap(m, start - reinterpret_cast<uintptr_t>(m));
  uintptr_t end = reinterpret_cast<uintptr_t>(m) + size + align;
  if (end > start + size) munmap(reinterpret_cast<void*>(start + size), end - start - size);
  std::lock_guard<std::mutex> lock(g_mu);
  InitVmmLocked();
  (*g_reservations)[start] = size;
  *ptr = start;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  std::lock_guard<std::mutex> lock(g_mu);
  InitVmmLocked();
  auto it = g_reservations->find(ptr);
  if (it == g_reservations->end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  // The driver refuses to free a range that still has mappings.
  auto m = g_mappings->lower_bound(ptr);
  if (m != g_mappings->end() && m->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(ptr), size);
  g_reservations->erase(it);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                           CUmemGenericAllocationHandle handle, unsigned long long) {
  std::lock_guard<std::mutex> lock(g_mu);
  InitVmmLocked();
  auto it = g_physical->find(handle);
  if (it == g_physical->end() || it->second.refs == 0 || size == 0 ||
      offset + size > it->second.bytes || !InReservationLocked(ptr, size) ||
      g_mappings->count(ptr) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  void* m = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED,
                 it->second.fd, static_cast<off_t>(offset));
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  ++it->second.mappings;
  (*g_mappings)[ptr] = Mapping{size, handle};
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  std::lock_guard<std::mutex> lock(g_mu);
  InitVmmLocked();
  auto it = g_mappings->find(ptr);
  if (it == g_mappings->end() || it->second.bytes != size) return CUDA_ERROR_INVALID_VALUE;
  mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  auto phys = g_physical->find(it->second.handle);
  g_mappings->erase(it);
  if (phys != g_physical->end()) {
    --phys->second.mappings;
    MaybeFreePhysicalLocked(phys);
  }
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const void*, size_t count) {
  if (count == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mu);
  InitVmmLocked();
  // Every byte of the range must be mapped.
  for (uintptr_t p = ptr; p < ptr + size;) {
    auto it = g_mappings->upper_bound(p);
    if (it == g_mappings->begin()) return CUDA_ERROR_INVALID_VALUE;
    --it;
    if (p >= it->first + it->second.bytes) return CUDA_ERROR_INVALID_VALUE;
    p = it->first + it->second.bytes;
  }
  if (mprotect(reinterpret_cast<void*>(ptr), size, PROT_READ | PROT_WRITE) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Populated at once: device memory is present once mapped, as a driver's is (kernels older
  // than 5.14 lack the advice and fault pages in on first touch instead).
#ifdef MADV_POPULATE_WRITE
  madvise(reinterpret_cast<void*>(ptr), size, MADV_POPULATE_WRITE);
#endif
  return CUDA_SUCCESS;
}

// Copies and fills: the VMM device pointers are host addresses. The exported functions call each
// other only with FAKECUDA_REENTER (under LD_PRELOAD such a call lands in the preloaded library's
// wrapper, which a real driver's internal calls do not).
static CUresult CopyIn(CUdeviceptr dst, const void* src, size_t n) {
  CopyDelay();
  memcpy(reinterpret_cast<void*>(dst), src, n);
  return CUDA_SUCCESS;
}
static CUresult CopyOut(void* dst, CUdeviceptr src, size_t n) {
  CopyDelay();
  memcpy(dst, reinterpret_cast<const void*>(src), n);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return CopyIn(dst, src, n);
}
FAKE_API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  return CopyOut(dst, src, n);
}
FAKE_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  CopyDelay();
  memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream) {
  if (auto sync = FAKE_EXPORTED(cuMemcpyHtoD_v2)) return sync(dst, src, n);
  return CopyIn(dst, src, n);
}
FAKE_API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream) {
  if (auto sync = FAKE_EXPORTED(cuMemcpyDtoH_v2)) return sync(dst, src, n);
  return CopyOut(dst, src, n);
}
FAKE_API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n) {
  CopyDelay();
  memset(reinterpret_cast<void*>(dst), value, n);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemHostAlloc(void** p, size_t bytes, unsigned int) {
  if (p == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  // Pinned memory is resident from the start: populated at allocation.
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                 -1, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(g_mu);
  InitVmmLocked();
  (*g_host)[m] = bytes;
  *p = m;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemFreeHost(void* p) {
  std::lock_guard<std::mutex> lock(g_mu);
  InitVmmLocked();
  auto it = g_host->find(p);
  if (it == g_host->end()) return CUDA_ERROR_INVALID_VALUE;
  munmap(p, it->second);
  g_host->erase(it);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuStreamCreate(CUstream* stream, unsigned int) {
  static std::atomic<uintptr_t> next{0x5000};
  *stream = reinterpret_cast<CUstream>(next.fetch_add(1));
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuStreamDestroy_v2(CUstream) { return CUDA_SUCCESS; }
FAKE_API CUresult cuStreamSynchronize(CUstream) {
  if (auto sync = FAKE_EXPORTED(cuCtxSynchronize)) return sync();
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuCtxSynchronize() { return CUDA_SUCCESS; }
FAKE_API CUresult cuCtxGetCurrent(CUcontext* ctx) {
  *ctx = t_context;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuCtxSetCurrent(CUcontext ctx) {
  t_context = ctx;
  if (ctx != nullptr) t_device = static_cast<CUdevice>(reinterpret_cast<uintptr_t>(ctx) - 0x1000);
  return CUDA_SUCCESS;
}
FAKE_API unsigned long long fakecudaDeviceUsed() {
  std::lock_guard<std::mutex> lock(g_mu);
  DeviceLock device;
  return *g_used;
}
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
static CUresult ReleaseOther(CUdeviceptr dptr) {
  if (auto plain = FAKE_EXPORTED(cuMemFree_v2)) return plain(dptr);
  return Release(dptr);
}
FAKE_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream) { return ReleaseOther(dptr); }
FAKE_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream) { return ReleaseOther(dptr); }

FAKE_API CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  std::lock_guard<std::mutex> lock(g_mu);
  DeviceLock device;
  *total = Total();
  *free = Total() - *g_used;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice device) {
  if (device < 0 || device >= DeviceCount()) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = Total();
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuLaunchKernel(CUfunction f, unsigned int, unsigned int, unsigned int,
                                 unsigned int, unsigned int, unsigned int, unsigned int, CUstream,
                                 void** params, void**) {
  if (reinterpret_cast<uintptr_t>(f) == kFakeKernelIncrement && params != nullptr) {
    auto* bytes = reinterpret_cast<unsigned char*>(*static_cast<CUdeviceptr*>(params[0]));
    const size_t n = *static_cast<size_t*>(params[1]);
    for (size_t i = 0; i < n; ++i) ++bytes[i];
  }
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                      unsigned int gz, unsigned int bx, unsigned int by,
                                      unsigned int bz, unsigned int shared, CUstream s,
                                      void** params, void** extra) {
  if (auto legacy = FAKE_EXPORTED(cuLaunchKernel)) {
    return legacy(f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
  }
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
    FAKE_ENTRY("cuMemRetainAllocationHandle", 11000, 0, cuMemRetainAllocationHandle),
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
    FAKE_ENTRY("cuMemGetAllocationGranularity", 10020, 0, cuMemGetAllocationGranularity),
    FAKE_ENTRY("cuMemAddressReserve", 10020, 0, cuMemAddressReserve),
    FAKE_ENTRY("cuMemAddressFree", 10020, 0, cuMemAddressFree),
    FAKE_ENTRY("cuMemMap", 10020, 0, cuMemMap),
    FAKE_ENTRY("cuMemUnmap", 10020, 0, cuMemUnmap),
    FAKE_ENTRY("cuMemSetAccess", 10020, 0, cuMemSetAccess),
    FAKE_ENTRY("cuMemcpyHtoD", 3020, 0, cuMemcpyHtoD_v2),
    FAKE_ENTRY("cuMemcpyDtoH", 3020, 0, cuMemcpyDtoH_v2),
    FAKE_ENTRY("cuMemcpyDtoD", 3020, 0, cuMemcpyDtoD_v2),
    FAKE_ENTRY("cuMemcpyHtoDAsync", 3020, 1, cuMemcpyHtoDAsync_v2),
    FAKE_ENTRY("cuMemcpyDtoHAsync", 3020, 1, cuMemcpyDtoHAsync_v2),
    FAKE_ENTRY("cuMemsetD8", 3020, 0, cuMemsetD8_v2),
    FAKE_ENTRY("cuMemHostAlloc", 2020, 0, cuMemHostAlloc),
    FAKE_ENTRY("cuMemFreeHost", 2000, 0, cuMemFreeHost),
    FAKE_ENTRY("cuStreamCreate", 2000, 0, cuStreamCreate),
    FAKE_ENTRY("cuStreamDestroy", 4000, 0, cuStreamDestroy_v2),
    FAKE_ENTRY("cuStreamSynchronize", 2000, 1, cuStreamSynchronize),
    FAKE_ENTRY("cuCtxSynchronize", 2000, 0, cuCtxSynchronize),
    FAKE_ENTRY("cuCtxGetCurrent", 4000, 0, cuCtxGetCurrent),
    FAKE_ENTRY("cuCtxSetCurrent", 4000, 0, cuCtxSetCurrent),
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
