#include "capgpu/swap.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

#include "capgpu/real_driver.h"

namespace tessera::capgpu {

// Handles the process holds: a value of our own (so a handle the driver recycles after a swap
// cannot alias one the process still holds), translated to the physical memory behind it now.
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

__thread Swapper::ThreadRecord* Swapper::t_record_ = nullptr;

namespace {

constexpr uint64_t kChunk = 8ULL << 20;  // copy unit; kStreams chunks in flight
constexpr int kStreams = 4;
constexpr int kRecordsPerChunk = 256;
constexpr uint64_t kUserHandleTag = 0xC0DE000000000000ULL;
constexpr int64_t kDrainTimeoutNs = 10'000'000'000;

// The real driver functions the swap uses (looked up once; never the wrappers).
#define TESSERA_SWAP_FN(name, type)                                               \
  type name##_fn() {                                                              \
    static constinit std::atomic<void*> cache{nullptr};                           \
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

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void FutexWait(uint32_t* word, uint32_t seen, int64_t timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1'000'000'000),
              static_cast<long>(timeout_ns % 1'000'000'000)};
  syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void FutexWakeAll(uint32_t* word) { syscall(SYS_futex, word, FUTEX_WAKE, 0x7fffffff, nullptr, nullptr, 0); }

CUmemAccessDesc ReadWrite(uint32_t device) {
  CUmemAccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = static_cast<int>(device);
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return d;
}

bool WriteAll(int fd, const void* data, size_t n, uint64_t offset) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t n, uint64_t offset) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return true;
}

void FreeRecord(void* record) {
  auto* rec = static_cast<Swapper::ThreadRecord*>(record);
  __atomic_store_n(&rec->inside, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&rec->in_use, 0, __ATOMIC_RELEASE);
}

}  // namespace

void Swapper::Start(Region* region, int slot) {
  region_ = region;
  slot_ = slot;
  // The asymmetric fence: the gate's fast path then needs only a compiler barrier.
  full_fence_ = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) != 0;
  pthread_key_create(&record_key_, FreeRecord);
  if (cuMemAddressReserve_fn() == nullptr || cuMemMap_fn() == nullptr ||
      cuMemSetAccess_fn() == nullptr) {
    unswappable_ = static_cast<uint32_t>(Unswappable::kNoVmm);
  }
  __atomic_store_n(&on_, true, __ATOMIC_RELEASE);
  pthread_t watcher;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  pthread_create(&watcher, &attr, WatcherMain, this);
  pthread_attr_destroy(&attr);
}

Swapper::ThreadRecord* Swapper::Register() {
  ThreadRecord* found = nullptr;
  for (;;) {
    pthread_mutex_lock(&records_mu_);
    for (uint32_t i = 0; i < records_ && found == nullptr; ++i) {
      ThreadRecord* r = &chunks_[i / kRecordsPerChunk][i % kRecordsPerChunk];
      if (__atomic_load_n(&r->in_use, __ATOMIC_ACQUIRE) == 0) found = r;
    }
    if (found == nullptr && records_ < 64 * kRecordsPerChunk) {
      const uint32_t c = records_ / kRecordsPerChunk;
      if (chunks_[c] == nullptr) {
        chunks_[c] = static_cast<ThreadRecord*>(calloc(kRecordsPerChunk, sizeof(ThreadRecord)));
      }
      if (chunks_[c] != nullptr) found = &chunks_[c][records_++ % kRecordsPerChunk];
    }
    if (found != nullptr) __atomic_store_n(&found->in_use, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&records_mu_);
    if (found != nullptr) break;
    sched_yield();  // every record taken by a live thread: wait for one to exit
  }
  t_record_ = found;
  pthread_setspecific(record_key_, found);
  return found;
}

Swapper::ThreadRecord* Swapper::SlowEnter(ThreadRecord* rec) {
  bool counted = false;
  for (;;) {
    __atomic_store_n(&rec->inside, 0, __ATOMIC_RELEASE);
    pthread_mutex_lock(&mu_);
    if (state_ == static_cast<uint32_t>(SwapState::kSwapped) ||
        state_ == static_cast<uint32_t>(SwapState::kSwappingIn)) {
      RegionData& data = region_->data();
      const uint32_t seq = __atomic_load_n(&data.swap_seq, __ATOMIC_ACQUIRE);
      const auto target = static_cast<SwapTarget>(__atomic_load_n(&data.swap_target, __ATOMIC_ACQUIRE));
      bool wait = target == SwapTarget::kHold;
      if (!counted) {
        counted = true;
        RegionLock lock(*region_);
        if (lock.held() && slot_ >= 0) ++data.slots[slot_].gate_waits;
      }
      if (!wait) {
        if (target == SwapTarget::kOut) {
          // Demand: the whole share comes back (its other processes' watchers follow).
          RegionLock lock(*region_);
          if (lock.held()) {
            SetSwapTarget(data, SwapTarget::kResident);
            ++data.demand_wakes;
          }
          FutexWakeAll(&data.swap_seq);
        }
        wait = SwapInLocked() != CUDA_SUCCESS;  // no room on the device yet: wait, retry
      }
      pthread_mutex_unlock(&mu_);
      if (wait) FutexWait(&data.swap_seq, seq, 20'000'000);
      continue;
    }
    pthread_mutex_unlock(&mu_);
    __atomic_store_n(&rec->inside, 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&closed_, __ATOMIC_ACQUIRE) == 0) return rec;
    sched_yield();  // a swap-out is starting; its lock is taken next round
  }
}

void* Swapper::WatcherMain(void* self) {
  static_cast<Swapper*>(self)->Watch();
  return nullptr;
}

void Swapper::Watch() {
  RegionData& data = region_->data();
  for (;;) {
    const uint32_t seq = __atomic_load_n(&data.swap_seq, __ATOMIC_ACQUIRE);
    const auto target = static_cast<SwapTarget>(__atomic_load_n(&data.swap_target, __ATOMIC_ACQUIRE));
    int64_t wait_ns = 200'000'000;
    pthread_mutex_lock(&mu_);
    const auto state = static_cast<SwapState>(state_);
    if (target != SwapTarget::kResident &&
        (state == SwapState::kResident || state == SwapState::kUnswappable)) {
      // An unswappable process is asked again only when the target changes.
      if (state == SwapState::kResident) SwapOutLocked();
    } else if (target == SwapTarget::kResident &&
               (state == SwapState::kSwapped || state == SwapState::kSwappingIn)) {
      if (SwapInLocked() != CUDA_SUCCESS) wait_ns = 20'000'000;  // prefetch: no room yet
    } else if (target == SwapTarget::kResident && state == SwapState::kUnswappable &&
               unswappable_ == 0) {
      PublishLocked(static_cast<uint32_t>(SwapState::kResident), 0);
    }
    pthread_mutex_unlock(&mu_);
    if (__atomic_load_n(&data.swap_seq, __ATOMIC_ACQUIRE) == seq) FutexWait(&data.swap_seq, seq, wait_ns);
  }
}

void Swapper::PublishLocked(uint32_t state, uint32_t reason) {
  state_ = state;
  RegionLock lock(*region_);
  if (!lock.held() || slot_ < 0) return;
  Slot& s = region_->data().slots[slot_];
  s.swap_state = state;
  s.unswappable = reason;
  uint64_t resident = 0;
  for (uint32_t i = 0; i < handle_count_; ++i) {
    if (handles_[i].live && handles_[i].real != 0) resident += handles_[i].bytes;
  }
  s.resident_bytes = resident;
}

void Swapper::AddResident(int64_t delta) {
  RegionLock lock(*region_);
  if (!lock.held() || slot_ < 0) return;
  Slot& s = region_->data().slots[slot_];
  if (delta < 0 && static_cast<uint64_t>(-delta) > s.resident_bytes) {
    s.resident_bytes = 0;
  } else {
    s.resident_bytes = static_cast<uint64_t>(static_cast<int64_t>(s.resident_bytes) + delta);
  }
}

bool Swapper::Grow(void** array, uint32_t* capacity, size_t element) {
  const uint32_t next = *capacity == 0 ? 64 : *capacity * 2;
  void* p = realloc(*array, static_cast<size_t>(next) * element);
  if (p == nullptr) return false;
  memset(static_cast<char*>(p) + static_cast<size_t>(*capacity) * element, 0,
         static_cast<size_t>(next - *capacity) * element);
  *array = p;
  *capacity = next;
  return true;
}

Swapper::Handle* Swapper::NewHandle() {
  for (uint32_t i = 0; i < handle_count_; ++i) {
    if (!handles_[i].live) return &handles_[i];
  }
  if (handle_count_ == handle_capacity_ &&
      !Grow(reinterpret_cast<void**>(&handles_), &handle_capacity_, sizeof(Handle))) {
    return nullptr;
  }
  return &handles_[handle_count_++];
}

Swapper::Mapping* Swapper::NewMapping() {
  for (uint32_t i = 0; i < mapping_count_; ++i) {
    if (!mappings_[i].live) return &mappings_[i];
  }
  if (mapping_count_ == mapping_capacity_ &&
      !Grow(reinterpret_cast<void**>(&mappings_), &mapping_capacity_, sizeof(Mapping))) {
    return nullptr;
  }
  return &mappings_[mapping_count_++];
}

Swapper::Handle* Swapper::FindHandle(CUmemGenericAllocationHandle user) {
  if (user == 0) return nullptr;  // Alloc's own handles are never the process's
  for (uint32_t i = 0; i < handle_count_; ++i) {
    if (handles_[i].live && handles_[i].user == user) return &handles_[i];
  }
  return nullptr;
}

void Swapper::MarkUnswappable(Unswappable reason) {
  pthread_mutex_lock(&mu_);
  if (unswappable_ == 0) unswappable_ = static_cast<uint32_t>(reason);
  pthread_mutex_unlock(&mu_);
}

uint64_t Swapper::Rounded(uint64_t bytes, uint32_t device) {
  auto granularity = cuMemGetAllocationGranularity_fn();
  if (granularity == nullptr) return 0;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = static_cast<int>(device);
  size_t g = 0;
  if (granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || g == 0) return 0;
  if (bytes == 0 || bytes > UINT64_MAX - g) return 0;
  return (bytes + g - 1) / g * g;
}

CUresult Swapper::Alloc(CUdeviceptr* dptr, uint64_t rounded, uint32_t device) {
  auto reserve = cuMemAddressReserve_fn();
  auto address_free = cuMemAddressFree_fn();
  auto create = cuMemCreate_fn();
  auto release = cuMemRelease_fn();
  auto map = cuMemMap_fn();
  auto unmap = cuMemUnmap_fn();
  auto access = cuMemSetAccess_fn();
  if (reserve == nullptr || address_free == nullptr || create == nullptr || release == nullptr ||
      map == nullptr || unmap == nullptr || access == nullptr) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = static_cast<int>(device);
  CUdeviceptr va = 0;
  CUresult r = reserve(&va, rounded, 0, 0, 0);
  if (r != CUDA_SUCCESS) return r;
  CUmemGenericAllocationHandle real = 0;
  r = create(&real, rounded, &prop, 0);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) r = WaitForRoom(&real, rounded, &prop);
  if (r != CUDA_SUCCESS) {
    address_free(va, rounded);
    return r;
  }
  r = map(va, rounded, 0, real, 0);
  if (r == CUDA_SUCCESS) {
    const CUmemAccessDesc desc = ReadWrite(device);
    r = access(va, rounded, &desc, 1);
    if (r != CUDA_SUCCESS) unmap(va, rounded);
  }
  if (r != CUDA_SUCCESS) {
    release(real);
    address_free(va, rounded);
    return r;
  }
  pthread_mutex_lock(&mu_);
  if (device < kMaxDevices && contexts_[device] == nullptr && cuCtxGetCurrent_fn() != nullptr) {
    cuCtxGetCurrent_fn()(&contexts_[device]);
  }
  Handle* h = NewHandle();
  Mapping* m = h != nullptr ? NewMapping() : nullptr;
  if (m == nullptr) {
    pthread_mutex_unlock(&mu_);
    unmap(va, rounded);
    release(real);
    address_free(va, rounded);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *h = Handle{0, real, rounded, prop, device, 0, 1, 1};
  *m = Mapping{va, rounded, 0, rounded, static_cast<uint32_t>(h - handles_), 1, 0, nullptr, 0};
  pthread_mutex_unlock(&mu_);
  AddResident(static_cast<int64_t>(rounded));
  *dptr = va;
  return CUDA_SUCCESS;
}

CUresult Swapper::WaitForRoom(CUmemGenericAllocationHandle* real, uint64_t bytes,
                              const CUmemAllocationProp* prop) {
  // The cap allows it but the card is full (its caps are overcommitted): say so in the slot, so
  // the agent swaps an idle share out, and retry until there is room or the wait runs out.
  static const int64_t wait_ms = [] {
    const char* v = getenv("TESSERA_CAPGPU_ROOM_WAIT_MS");
    return v != nullptr && *v != '\0' ? atoll(v) : 60000LL;
  }();
  RegionData& data = region_->data();
  auto want = [&](uint64_t b) {
    RegionLock lock(*region_);
    if (lock.held() && slot_ >= 0) data.slots[slot_].room_wanted = b;
  };
  want(bytes);
  const int64_t deadline = NowNs() + wait_ms * 1'000'000;
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  while (r == CUDA_ERROR_OUT_OF_MEMORY && NowNs() < deadline) {
    const uint32_t seq = __atomic_load_n(&data.swap_seq, __ATOMIC_ACQUIRE);
    FutexWait(&data.swap_seq, seq, 10'000'000);
    r = cuMemCreate_fn()(real, bytes, prop, 0);
  }
  want(0);
  return r;
}

bool Swapper::Free(CUdeviceptr dptr, CUresult* result) {
  pthread_mutex_lock(&mu_);
  Mapping* m = nullptr;
  for (uint32_t i = 0; i < mapping_count_ && m == nullptr; ++i) {
    if (mappings_[i].live && mappings_[i].reserved > 0 && mappings_[i].va == dptr) m = &mappings_[i];
  }
  if (m == nullptr) {
    pthread_mutex_unlock(&mu_);
    return false;
  }
  Handle& h = handles_[m->handle];
  CUresult r = cuMemUnmap_fn()(m->va, m->bytes);
  if (r == CUDA_SUCCESS) {
    if (h.real != 0) cuMemRelease_fn()(h.real);
    cuMemAddressFree_fn()(m->va, m->reserved);
    const int64_t freed = h.real != 0 ? static_cast<int64_t>(h.bytes) : 0;
    h.live = 0;
    m->live = 0;
    pthread_mutex_unlock(&mu_);
    AddResident(-freed);
  } else {
    pthread_mutex_unlock(&mu_);
  }
  *result = r;
  return true;
}

CUmemGenericAllocationHandle Swapper::Track(CUmemGenericAllocationHandle real, uint64_t bytes,
                                            const CUmemAllocationProp* prop) {
  pthread_mutex_lock(&mu_);
  const uint32_t device = static_cast<uint32_t>(prop->location.id);
  if (device < kMaxDevices && contexts_[device] == nullptr && cuCtxGetCurrent_fn() != nullptr) {
    cuCtxGetCurrent_fn()(&contexts_[device]);
  }
  Handle* h = NewHandle();
  CUmemGenericAllocationHandle user = 0;
  if (h != nullptr) {
    user = kUserHandleTag | next_user_++;
    *h = Handle{user, real, bytes, *prop, device, 1, 0, 1};
  } else {
    unswappable_ = static_cast<uint32_t>(Unswappable::kFailed);
  }
  pthread_mutex_unlock(&mu_);
  if (h != nullptr) AddResident(static_cast<int64_t>(bytes));
  return user;
}

CUmemGenericAllocationHandle Swapper::RealHandle(CUmemGenericAllocationHandle user) {
  pthread_mutex_lock(&mu_);
  Handle* h = user != 0 ? FindHandle(user) : nullptr;
  const CUmemGenericAllocationHandle real = h != nullptr ? h->real : user;
  pthread_mutex_unlock(&mu_);
  return real;
}

CUresult Swapper::Map(CUdeviceptr ptr, size_t size, size_t offset,
                      CUmemGenericAllocationHandle handle, unsigned long long flags) {
  pthread_mutex_lock(&mu_);
  Handle* h = FindHandle(handle);
  if (h == nullptr) {
    pthread_mutex_unlock(&mu_);
    return cuMemMap_fn()(ptr, size, offset, handle, flags);
  }
  CUresult r = cuMemMap_fn()(ptr, size, offset, h->real, flags);
  if (r == CUDA_SUCCESS) {
    Mapping* m = NewMapping();
    if (m != nullptr) {
      *m = Mapping{ptr, size, offset, 0, static_cast<uint32_t>(h - handles_), 1, 0, nullptr, 0};
      ++h->mappings;
    } else {
      unswappable_ = static_cast<uint32_t>(Unswappable::kFailed);  // untracked: cannot move it
    }
  }
  pthread_mutex_unlock(&mu_);
  return r;
}

CUresult Swapper::Unmap(CUdeviceptr ptr, size_t size) {
  pthread_mutex_lock(&mu_);
  Mapping* m = nullptr;
  for (uint32_t i = 0; i < mapping_count_ && m == nullptr; ++i) {
    if (mappings_[i].live && mappings_[i].reserved == 0 && mappings_[i].va == ptr &&
        mappings_[i].bytes == size) {
      m = &mappings_[i];
    }
  }
  CUresult r = cuMemUnmap_fn()(ptr, size);
  int64_t freed = 0;
  if (r == CUDA_SUCCESS && m != nullptr) {
    m->live = 0;
    Handle& h = handles_[m->handle];
    if (--h.mappings == 0 && h.refs == 0) {
      if (h.real != 0) {
        cuMemRelease_fn()(h.real);
        freed = static_cast<int64_t>(h.bytes);
      }
      h.live = 0;
    }
  }
  pthread_mutex_unlock(&mu_);
  if (freed != 0) AddResident(-freed);
  return r;
}

bool Swapper::Release(CUmemGenericAllocationHandle handle, CUresult* result) {
  pthread_mutex_lock(&mu_);
  Handle* h = FindHandle(handle);
  if (h == nullptr || h->refs == 0) {
    pthread_mutex_unlock(&mu_);
    if (h != nullptr) *result = CUDA_ERROR_INVALID_VALUE;  // released twice
    return h != nullptr;
  }
  int64_t freed = 0;
  *result = CUDA_SUCCESS;
  if (--h->refs == 0 && h->mappings == 0) {
    if (h->real != 0) {
      *result = cuMemRelease_fn()(h->real);
      freed = static_cast<int64_t>(h->bytes);
    }
    h->live = 0;
  }
  pthread_mutex_unlock(&mu_);
  if (freed != 0) AddResident(-freed);
  return true;
}

bool Swapper::DrainLocked() {
  if (full_fence_) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
  } else {
    syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  }
  const int64_t deadline = NowNs() + kDrainTimeoutNs;
  pthread_mutex_lock(&records_mu_);
  const uint32_t n = records_;
  pthread_mutex_unlock(&records_mu_);
  for (uint32_t i = 0; i < n; ++i) {
    ThreadRecord* r = &chunks_[i / kRecordsPerChunk][i % kRecordsPerChunk];
    while (__atomic_load_n(&r->inside, __ATOMIC_ACQUIRE) != 0) {
      if (NowNs() > deadline) return false;
      sched_yield();
    }
  }
  return true;
}

bool Swapper::EnsureStreams(uint32_t device) {
  if (device >= kMaxDevices) return false;
  if (contexts_[device] != nullptr && cuCtxSetCurrent_fn() != nullptr) {
    cuCtxSetCurrent_fn()(contexts_[device]);
  }
  for (int k = 0; k < kStreams; ++k) {
    if (streams_[device][k] == nullptr &&
        (cuStreamCreate_fn() == nullptr ||
         cuStreamCreate_fn()(&streams_[device][k], 1 /* CU_STREAM_NON_BLOCKING */) != CUDA_SUCCESS)) {
      return false;
    }
  }
  return true;
}

uint32_t Swapper::SwapOut() {
  pthread_mutex_lock(&mu_);
  const uint32_t r = state_ == static_cast<uint32_t>(SwapState::kResident) ? SwapOutLocked() : 0;
  pthread_mutex_unlock(&mu_);
  return r;
}

CUresult Swapper::SwapIn() {
  pthread_mutex_lock(&mu_);
  const CUresult r = state_ == static_cast<uint32_t>(SwapState::kSwapped) ||
                             state_ == static_cast<uint32_t>(SwapState::kSwappingIn)
                         ? SwapInLocked()
                         : CUDA_SUCCESS;
  pthread_mutex_unlock(&mu_);
  return r;
}

uint32_t Swapper::SwapOutLocked() {
  if (unswappable_ != 0) {
    PublishLocked(static_cast<uint32_t>(SwapState::kUnswappable), unswappable_);
    return unswappable_;
  }
  const int64_t started = NowNs();
  PublishLocked(static_cast<uint32_t>(SwapState::kSwappingOut), 0);
  __atomic_store_n(&closed_, 1, __ATOMIC_SEQ_CST);
  auto fail = [&](Unswappable why) {
    __atomic_store_n(&closed_, 0, __ATOMIC_RELEASE);
    PublishLocked(static_cast<uint32_t>(SwapState::kUnswappable), static_cast<uint32_t>(why));
    return static_cast<uint32_t>(why);
  };
  if (!DrainLocked()) return fail(Unswappable::kBusy);
  auto d2h = cuMemcpyDtoHAsync_v2_fn();
  auto sync = cuStreamSynchronize_fn();
  auto host_alloc = cuMemHostAlloc_fn();
  auto free_host = cuMemFreeHost_fn();
  if (d2h == nullptr || sync == nullptr || host_alloc == nullptr || free_host == nullptr) {
    return fail(Unswappable::kNoVmm);
  }
  for (uint32_t d = 0; d < kMaxDevices; ++d) {
    if (contexts_[d] != nullptr && cuCtxSetCurrent_fn() != nullptr) {
      cuCtxSetCurrent_fn()(contexts_[d]);
      if (cuCtxSynchronize_fn() != nullptr) cuCtxSynchronize_fn()();
    }
  }
  RegionData& data = region_->data();
  uint64_t file_end = 0, host_total = 0;
  bool ok = true;
  // Copy phase: nothing is released until every byte has a copy.
  for (uint32_t i = 0; i < mapping_count_ && ok; ++i) {
    Mapping& m = mappings_[i];
    const Handle& h = handles_[m.handle];
    if (!m.live || h.real == 0) continue;
    ok = EnsureStreams(h.device);
    if (!ok) break;
    CUstream* streams = streams_[h.device];
    bool in_ram = false;
    {
      RegionLock lock(*region_);
      in_ram = lock.held() && ChargeHost(data, slot_, m.bytes);
    }
    if (in_ram && host_alloc(&m.host, m.bytes, 0) != CUDA_SUCCESS) {
      m.host = nullptr;
      RegionLock lock(*region_);
      CreditHost(data, slot_, m.bytes);
      in_ram = false;
    }
    if (in_ram) {
      host_total += m.bytes;
      int k = 0;
      for (uint64_t off = 0; off < m.bytes && ok; off += kChunk, k = (k + 1) % kStreams) {
        const uint64_t n = m.bytes - off < kChunk ? m.bytes - off : kChunk;
        ok = d2h(static_cast<char*>(m.host) + off, m.va + off, n, streams[k]) == CUDA_SUCCESS;
      }
      for (int s = 0; s < kStreams; ++s) ok = sync(streams[s]) == CUDA_SUCCESS && ok;
      continue;
    }
    // Disk tier: through kStreams pinned staging buffers, each written once its copy is done.
    if (swap_fd_ < 0 && data.swap_dir[0] != '\0') {
      swap_fd_ = open(data.swap_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
      if (swap_fd_ < 0) {
        char path[300];
        snprintf(path, sizeof(path), "%s/tessera-swap-XXXXXX", data.swap_dir);
        swap_fd_ = mkostemp(path, O_CLOEXEC);
        if (swap_fd_ >= 0) unlink(path);
      }
    }
    for (int s = 0; s < kStreams && ok; ++s) {
      if (staging_[s] == nullptr && host_alloc(&staging_[s], kChunk, 0) != CUDA_SUCCESS) {
        staging_[s] = nullptr;
        ok = false;
      }
    }
    if (swap_fd_ < 0 || !ok) {
      ok = false;
      break;
    }
    m.on_disk = 1;
    m.file_offset = file_end;
    uint64_t pending_off[kStreams], pending_n[kStreams] = {};
    int k = 0;
    for (uint64_t off = 0; off < m.bytes && ok; off += kChunk, k = (k + 1) % kStreams) {
      if (pending_n[k] > 0) {
        ok = sync(streams[k]) == CUDA_SUCCESS &&
             WriteAll(swap_fd_, staging_[k], pending_n[k], m.file_offset + pending_off[k]);
        pending_n[k] = 0;
      }
      const uint64_t n = m.bytes - off < kChunk ? m.bytes - off : kChunk;
      ok = ok && d2h(staging_[k], m.va + off, n, streams[k]) == CUDA_SUCCESS;
      pending_off[k] = off;
      pending_n[k] = n;
    }
    for (int s = 0; s < kStreams; ++s) {
      if (pending_n[s] == 0) continue;
      ok = sync(streams[s]) == CUDA_SUCCESS &&
           WriteAll(swap_fd_, staging_[s], pending_n[s], m.file_offset + pending_off[s]) && ok;
    }
    file_end += m.bytes;
  }
  if (!ok) {
    // Roll back: every copy goes, the device memory stays.
    for (uint32_t i = 0; i < mapping_count_; ++i) {
      Mapping& m = mappings_[i];
      if (m.host != nullptr) {
        free_host(m.host);
        m.host = nullptr;
      }
      m.on_disk = 0;
    }
    {
      RegionLock lock(*region_);
      if (lock.held()) CreditHost(data, slot_, host_total);
    }
    if (swap_fd_ >= 0) close(swap_fd_);
    swap_fd_ = -1;
    return fail(Unswappable::kFailed);
  }
  // Release phase: the mappings go, then the physical memory.
  for (uint32_t i = 0; i < mapping_count_; ++i) {
    Mapping& m = mappings_[i];
    if (m.live && handles_[m.handle].real != 0) cuMemUnmap_fn()(m.va, m.bytes);
  }
  for (uint32_t i = 0; i < handle_count_; ++i) {
    Handle& h = handles_[i];
    if (h.live && h.real != 0 && h.mappings > 0) {
      cuMemRelease_fn()(h.real);
      h.real = 0;
    }
  }
  {
    RegionLock lock(*region_);
    if (lock.held() && slot_ >= 0) {
      Slot& s = data.slots[slot_];
      s.disk_bytes = file_end;
      ++s.swap_outs;
      s.last_swap_out_us = static_cast<uint64_t>((NowNs() - started) / 1000);
    }
  }
  PublishLocked(static_cast<uint32_t>(SwapState::kSwapped), 0);
  return 0;
}

CUresult Swapper::SwapInLocked() {
  const int64_t started = NowNs();
  auto create = cuMemCreate_fn();
  auto release = cuMemRelease_fn();
  auto map = cuMemMap_fn();
  auto unmap = cuMemUnmap_fn();
  auto access = cuMemSetAccess_fn();
  auto h2d = cuMemcpyHtoDAsync_v2_fn();
  auto sync = cuStreamSynchronize_fn();
  auto free_host = cuMemFreeHost_fn();
  if (create == nullptr || h2d == nullptr || sync == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  PublishLocked(static_cast<uint32_t>(SwapState::kSwappingIn), 0);
  // Physical memory first, all of it, so a device without room leaves nothing half-mapped.
  CUresult r = CUDA_SUCCESS;
  uint32_t created = 0;
  for (; created < handle_count_; ++created) {
    Handle& h = handles_[created];
    if (!h.live || h.real != 0 || h.mappings == 0) continue;
    if (h.device < kMaxDevices && contexts_[h.device] != nullptr && cuCtxSetCurrent_fn() != nullptr) {
      cuCtxSetCurrent_fn()(contexts_[h.device]);
    }
    r = create(&h.real, h.bytes, &h.prop, 0);
    if (r != CUDA_SUCCESS) {
      h.real = 0;
      break;
    }
  }
  uint32_t mapped = 0;
  if (r == CUDA_SUCCESS) {
    for (; mapped < mapping_count_; ++mapped) {
      Mapping& m = mappings_[mapped];
      if (!m.live || (m.host == nullptr && !m.on_disk)) continue;
      const Handle& h = handles_[m.handle];
      r = map(m.va, m.bytes, m.offset, h.real, 0);
      if (r != CUDA_SUCCESS) break;
      const CUmemAccessDesc desc = ReadWrite(h.device);
      r = access(m.va, m.bytes, &desc, 1);
      if (r != CUDA_SUCCESS) {
        unmap(m.va, m.bytes);
        break;
      }
    }
  }
  if (r != CUDA_SUCCESS) {
    for (uint32_t i = 0; i < mapped; ++i) {
      Mapping& m = mappings_[i];
      if (m.live && (m.host != nullptr || m.on_disk)) unmap(m.va, m.bytes);
    }
    for (uint32_t i = 0; i < created; ++i) {
      Handle& h = handles_[i];
      if (h.live && h.real != 0 && h.mappings > 0) {
        // Only those made in this attempt: every mapped handle was swapped out.
        release(h.real);
        h.real = 0;
      }
    }
    // Still out, and wanting back in: "resuming" until the device has room.
    PublishLocked(static_cast<uint32_t>(SwapState::kSwappingIn), 0);
    return r;
  }
  // Bytes back, pipelined over the streams; then the copies go.
  bool ok = true;
  uint64_t host_total = 0;
  for (uint32_t i = 0; i < mapping_count_; ++i) {
    Mapping& m = mappings_[i];
    if (!m.live || (m.host == nullptr && !m.on_disk)) continue;
    const Handle& h = handles_[m.handle];
    ok = EnsureStreams(h.device) && ok;
    CUstream* streams = streams_[h.device];
    int k = 0;
    if (m.host != nullptr) {
      for (uint64_t off = 0; off < m.bytes; off += kChunk, k = (k + 1) % kStreams) {
        const uint64_t n = m.bytes - off < kChunk ? m.bytes - off : kChunk;
        ok = h2d(m.va + off, static_cast<char*>(m.host) + off, n, streams[k]) == CUDA_SUCCESS && ok;
      }
      for (int s = 0; s < kStreams; ++s) ok = sync(streams[s]) == CUDA_SUCCESS && ok;
      host_total += m.bytes;
      free_host(m.host);
      m.host = nullptr;
      continue;
    }
    bool busy[kStreams] = {};
    for (uint64_t off = 0; off < m.bytes; off += kChunk, k = (k + 1) % kStreams) {
      const uint64_t n = m.bytes - off < kChunk ? m.bytes - off : kChunk;
      if (busy[k]) ok = sync(streams[k]) == CUDA_SUCCESS && ok;
      ok = ReadAll(swap_fd_, staging_[k], n, m.file_offset + off) && ok;
      ok = h2d(m.va + off, staging_[k], n, streams[k]) == CUDA_SUCCESS && ok;
      busy[k] = true;
    }
    for (int s = 0; s < kStreams; ++s) ok = sync(streams[s]) == CUDA_SUCCESS && ok;
    m.on_disk = 0;
  }
  if (swap_fd_ >= 0) close(swap_fd_);
  swap_fd_ = -1;
  {
    RegionLock lock(*region_);
    if (lock.held() && slot_ >= 0) {
      RegionData& data = region_->data();
      CreditHost(data, slot_, host_total);
      Slot& s = data.slots[slot_];
      s.disk_bytes = 0;
      ++s.swap_ins;
      s.last_swap_in_us = static_cast<uint64_t>((NowNs() - started) / 1000);
    }
  }
  // A failed copy back cannot be undone (the copies are gone); it is reported, not hidden.
  if (!ok) fprintf(stderr, "tessera-capgpu[%d]: a copy back to the device failed\n", getpid());
  __atomic_store_n(&closed_, 0, __ATOMIC_RELEASE);
  PublishLocked(static_cast<uint32_t>(SwapState::kResident), 0);
  return CUDA_SUCCESS;
}

void Swapper::AfterForkInChild() {
  mu_ = PTHREAD_MUTEX_INITIALIZER;
  records_mu_ = PTHREAD_MUTEX_INITIALIZER;
  on_ = false;
  closed_ = 0;
  state_ = 0;
  unswappable_ = 0;
  handle_count_ = 0;
  next_user_ = 1;
  mapping_count_ = 0;
  for (uint32_t i = 0; i < records_; ++i) {
    chunks_[i / kRecordsPerChunk][i % kRecordsPerChunk] = ThreadRecord{0, 0};
  }
  t_record_ = nullptr;
  for (auto& per_device : streams_) {
    for (auto& s : per_device) s = nullptr;
  }
  for (auto& c : contexts_) c = nullptr;
  for (auto& s : staging_) s = nullptr;
  if (swap_fd_ >= 0) close(swap_fd_);
  swap_fd_ = -1;
}

}  // namespace tessera::capgpu
