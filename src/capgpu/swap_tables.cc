// The swap's tables: the library's own allocations (cuMemAlloc, pitch), the handles and
// mappings a framework makes through the VMM API, and the handle values the process holds.
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capgpu/swap_internal.h"

namespace tessera::capgpu {

using namespace swap_internal;  // NOLINT: the implementation's own helpers

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

// An entry of `array` that is not live, reused, or a new one at its end (grown when full);
// nullptr when there is no memory for more.
template <typename Entry>
Entry* Swapper::FreeSlot(Entry** array, uint32_t* count, uint32_t* capacity) {
  for (uint32_t i = 0; i < *count; ++i) {
    if (!(*array)[i].live) return &(*array)[i];
  }
  if (*count == *capacity && !Grow(reinterpret_cast<void**>(array), capacity, sizeof(Entry))) {
    return nullptr;
  }
  return &(*array)[(*count)++];
}

Swapper::Handle* Swapper::NewHandle() {
  return FreeSlot(&handles_, &handle_count_, &handle_capacity_);
}

Swapper::Mapping* Swapper::NewMapping() {
  return FreeSlot(&mappings_, &mapping_count_, &mapping_capacity_);
}

Swapper::Handle* Swapper::FindHandle(CUmemGenericAllocationHandle user) {
  if (user == 0) return nullptr;  // Alloc's own handles are never the process's
  for (uint32_t i = 0; i < handle_count_; ++i) {
    if (handles_[i].live && handles_[i].user == user) return &handles_[i];
  }
  return nullptr;
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
  const BackingCalls vm;
  if (reserve == nullptr || address_free == nullptr || !vm.ok()) return CUDA_ERROR_NOT_INITIALIZED;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = static_cast<int>(device);
  CUdeviceptr va = 0;
  CUresult r = reserve(&va, rounded, 0, 0, 0);
  if (r != CUDA_SUCCESS) return r;
  CUmemGenericAllocationHandle real = 0;
  r = vm.create(&real, rounded, &prop, 0);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) r = WaitForRoom(&real, rounded, &prop);
  if (r != CUDA_SUCCESS) {
    address_free(va, rounded);
    return r;
  }
  r = vm.MapReadWrite(va, rounded, 0, real, device);
  if (r != CUDA_SUCCESS) {
    vm.release(real);
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
    vm.unmap(va, rounded);
    vm.release(real);
    address_free(va, rounded);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *h = Handle{0, real, rounded, prop, device, 0, 1, 1};
  *m = Mapping{va, rounded, 0, rounded, static_cast<uint32_t>(h - handles_), 1, 0, nullptr, 0};
  AddResidentLocked(static_cast<int64_t>(rounded));
  pthread_mutex_unlock(&mu_);
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
  SetRoomWanted(static_cast<int64_t>(bytes));
  const int64_t deadline =
      NowNs() + (wait_ms > 0 && wait_ms < 100'000'000'000LL ? wait_ms : 60000LL) * 1'000'000;
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  while (r == CUDA_ERROR_OUT_OF_MEMORY && NowNs() < deadline) {
    const uint32_t seq = __atomic_load_n(&data.swap_seq, __ATOMIC_ACQUIRE);
    FutexWait(&data.swap_seq, seq, 10'000'000);
    r = cuMemCreate_fn()(real, bytes, prop, 0);
  }
  SetRoomWanted(-static_cast<int64_t>(bytes));
  return r;
}

bool Swapper::Free(CUdeviceptr dptr, CUresult* result, CUstream* stream) {
  auto ours = [&] {
    for (uint32_t i = 0; i < mapping_count_; ++i) {
      if (mappings_[i].live && mappings_[i].reserved > 0 && mappings_[i].va == dptr)
        return &mappings_[i];
    }
    return static_cast<Mapping*>(nullptr);
  };
  pthread_mutex_lock(&mu_);
  const bool found = ours() != nullptr;
  pthread_mutex_unlock(&mu_);
  if (!found) return false;
  // Unmapping does not wait for kernels and copies still using the range (cuMemFree does):
  // wait for them here, outside the lock.
  auto stream_sync = cuStreamSynchronize_fn();
  auto ctx_sync = cuCtxSynchronize_fn();
  CUresult r = CUDA_SUCCESS;
  if (stream != nullptr) {
    if (stream_sync != nullptr) r = stream_sync(*stream);
  } else if (ctx_sync != nullptr) {
    r = ctx_sync();
  }
  if (r != CUDA_SUCCESS) {
    *result = r;
    return true;
  }
  pthread_mutex_lock(&mu_);
  Mapping* m = ours();  // looked up again: another thread may have freed it meanwhile
  if (m == nullptr) {
    pthread_mutex_unlock(&mu_);
    *result = CUDA_ERROR_INVALID_VALUE;
    return true;
  }
  Handle& h = handles_[m->handle];
  r = cuMemUnmap_fn()(m->va, m->bytes);
  if (r == CUDA_SUCCESS) {
    if (h.real != 0) cuMemRelease_fn()(h.real);
    cuMemAddressFree_fn()(m->va, m->reserved);
    const int64_t freed = h.real != 0 ? static_cast<int64_t>(h.bytes) : 0;
    h.live = 0;
    m->live = 0;
    AddResidentLocked(-freed);
  }
  pthread_mutex_unlock(&mu_);
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
    AddResidentLocked(static_cast<int64_t>(bytes));
  } else {
    unswappable_ = static_cast<uint32_t>(Unswappable::kFailed);
  }
  pthread_mutex_unlock(&mu_);
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
  if (freed != 0) AddResidentLocked(-freed);
  pthread_mutex_unlock(&mu_);
  return r;
}

bool Swapper::Retain(CUdeviceptr addr, CUmemGenericAllocationHandle* handle, CUresult* result) {
  pthread_mutex_lock(&mu_);
  const Mapping* m = nullptr;
  for (uint32_t i = 0; i < mapping_count_ && m == nullptr; ++i) {
    const Mapping& c = mappings_[i];
    if (c.live && addr >= c.va && addr - c.va < c.bytes) m = &c;
  }
  if (m == nullptr) {
    pthread_mutex_unlock(&mu_);
    return false;
  }
  Handle& h = handles_[m->handle];
  if (h.user == 0) {
    *result = CUDA_ERROR_INVALID_VALUE;
  } else {
    ++h.refs;
    *handle = h.user;
    *result = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&mu_);
  return true;
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
  if (freed != 0) AddResidentLocked(-freed);
  pthread_mutex_unlock(&mu_);
  return true;
}

}  // namespace tessera::capgpu
