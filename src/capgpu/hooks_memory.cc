// Allocation family: charge before the driver allocates, credit when it frees. An allocation that
// would pass the cap returns CUDA_ERROR_OUT_OF_MEMORY without reaching the driver; one the driver
// refuses is credited back at once.
//
// With swapping on (swap.h), every call passes the swap gate first; cuMemAlloc and pitch
// allocations are served from the library's own virtual-memory ranges (charged at the driver's
// granularity), frameworks' cuMemCreate handles are tracked, and stream-ordered pools, arrays
// and managed memory make the process unswappable.
#include "capgpu/hook_names.h"
#include "capgpu/sizes.h"

namespace {

// Charges, calls `allocate`, tracks the result under (kind, key_of_result) or credits back.
template <typename Allocate>
CUresult Charged(AllocKind kind, uint32_t device, uint64_t bytes, const unsigned long long* key,
                 Allocate allocate) {
  Runtime& rt = Runtime::Get();
  if (!rt.Charge(device, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = allocate();
  if (r != CUDA_SUCCESS) {
    rt.Credit(device, bytes);
    return r;
  }
  // A table without host memory leaves the charge in place until the process exits: the cap
  // stays safe, only this allocation's free goes uncredited.
  rt.allocations().Insert(kind, *key, bytes, device);
  return r;
}

// Removes the record first (so a concurrent allocation reusing the address cannot be confused
// with this one), frees, and credits on success or restores the record on failure.
template <typename Release>
CUresult Credited(AllocKind kind, uint64_t key, Release release) {
  Runtime& rt = Runtime::Get();
  uint64_t bytes = 0;
  uint32_t device = 0;
  const bool known = rt.allocations().Remove(kind, key, &bytes, &device);
  CUresult r = release();
  if (!known) return r;
  if (r == CUDA_SUCCESS) {
    rt.Credit(device, bytes);
  } else {
    rt.allocations().Insert(kind, key, bytes, device);
  }
  return r;
}

uint32_t Device() { return static_cast<uint32_t>(CurrentDevice()); }

Swapper& Swap() { return Runtime::Get().swapper(); }

// Memory the swap cannot move: the process stays resident from now on.
void Unmovable(Unswappable why) {
  if (Swap().on()) Swap().MarkUnswappable(why);
}

// cuMemAlloc under swapping: a range of the library's own, `bytes` rounded to the granularity.
CUresult SwappableAlloc(CUdeviceptr* dptr, uint64_t bytes) {
  const uint32_t device = Device();
  const uint64_t rounded = Swap().Rounded(bytes, device);
  if (rounded == 0) return bytes == 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
  return Charged(AllocKind::kDevicePointer, device, rounded, dptr,
                 [&] { return Swap().Alloc(dptr, rounded, device); });
}

// A device allocation the swap cannot move (managed memory, stream-ordered pools) through the
// hook `kId`: the process stays resident, and the allocation is charged as cuMemAlloc's is.
template <HookId kId, typename... Rest>
CUresult UnmovableAlloc(Unswappable why, CUdeviceptr* dptr, size_t bytesize, Rest... rest) {
  auto real = Real<kId>();
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!Runtime::Get().Handles() || dptr == nullptr) return real(dptr, bytesize, rest...);
  GateScope gate(Swap());
  Unmovable(why);
  return Charged(AllocKind::kDevicePointer, Device(), bytesize, dptr,
                 [&] { return real(dptr, bytesize, rest...); });
}

uint64_t DescriptorBytes(const CUDA_ARRAY_DESCRIPTOR& desc) {
  return tessera::capgpu::ArrayBytes(desc.Width, desc.Height, 0, desc.Format, desc.NumChannels, 0);
}

uint64_t DescriptorBytes(const CUDA_ARRAY3D_DESCRIPTOR& desc) {
  return tessera::capgpu::ArrayBytes(desc.Width, desc.Height, desc.Depth, desc.Format,
                                     desc.NumChannels, desc.Flags);
}

// An array through the hook `kId`: charged the size its descriptor gives, and unswappable.
template <HookId kId, typename Descriptor>
CUresult CreateArray(CUarray* array, const Descriptor* desc) {
  auto real = Real<kId>();
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!Runtime::Get().Handles() || array == nullptr || desc == nullptr) return real(array, desc);
  GateScope gate(Swap());
  Unmovable(Unswappable::kArray);
  const uint64_t bytes = DescriptorBytes(*desc);
  Runtime& rt = Runtime::Get();
  const uint32_t device = Device();
  if (!rt.Charge(device, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = real(array, desc);
  if (r != CUDA_SUCCESS) {
    rt.Credit(device, bytes);
    return r;
  }
  rt.allocations().Insert(AllocKind::kArray, reinterpret_cast<uint64_t>(*array), bytes, device);
  return r;
}

// A free through the hook `kId` of the allocation (kind, key), credited as Credited says:
// `swap_free(&r)` frees what the swap made (true when it did, with its result in r); anything
// else goes to the driver, called with `args`.
template <HookId kId, typename SwapFree, typename... Args>
CUresult Freed(AllocKind kind, uint64_t key, SwapFree swap_free, Args... args) {
  auto real = Real<kId>();
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!Runtime::Get().Handles()) return real(args...);
  GateScope gate(Swap());
  return Credited(kind, key, [&] {
    CUresult r = CUDA_SUCCESS;
    if (Swap().on() && swap_free(&r)) return r;
    return real(args...);
  });
}

}  // namespace

extern "C" {

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  auto real = Real<HookId::cuMemAlloc_v2>();
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!Runtime::Get().Handles() || dptr == nullptr) return real(dptr, bytesize);
  GateScope gate(Swap());
  if (Swap().on()) return SwappableAlloc(dptr, bytesize);
  return Charged(AllocKind::kDevicePointer, Device(), bytesize, dptr,
                 [&] { return real(dptr, bytesize); });
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  return UnmovableAlloc<HookId::cuMemAllocManaged>(Unswappable::kManaged, dptr, bytesize, flags);
}

CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream stream) {
  return UnmovableAlloc<HookId::cuMemAllocAsync>(Unswappable::kStreamOrderedPool, dptr, bytesize,
                                                 stream);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream stream) {
  return UnmovableAlloc<HookId::cuMemAllocAsync_ptsz>(Unswappable::kStreamOrderedPool, dptr,
                                                      bytesize, stream);
}

// The pool's device is taken to be the current context's (pools are almost always created for
// it); cuMemPoolGetAccess would cost a driver call per allocation.
CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                 CUstream stream) {
  return UnmovableAlloc<HookId::cuMemAllocFromPoolAsync>(Unswappable::kStreamOrderedPool, dptr,
                                                         bytesize, pool, stream);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream stream) {
  return UnmovableAlloc<HookId::cuMemAllocFromPoolAsync_ptsz>(Unswappable::kStreamOrderedPool, dptr,
                                                              bytesize, pool, stream);
}

// The pitch is only known after the call: charge an estimate with the usual 512-byte alignment,
// then settle to pitch x height (refusing, and freeing, if the real size no longer fits).
CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width_bytes, size_t height,
                            unsigned int elem_bytes) {
  auto real = Real<HookId::cuMemAllocPitch_v2>();
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  Runtime& rt = Runtime::Get();
  if (!rt.Handles() || dptr == nullptr || pitch == nullptr) {
    return real(dptr, pitch, width_bytes, height, elem_bytes);
  }
  GateScope gate(Swap());
  if (Swap().on()) {
    // The driver's pitch rule for linear memory: rows aligned to 512 bytes.
    if (width_bytes == 0 || height == 0 || width_bytes > (SIZE_MAX - 511)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    const uint64_t row = (static_cast<uint64_t>(width_bytes) + 511) / 512 * 512;
    if (row > UINT64_MAX / height) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = SwappableAlloc(dptr, row * height);
    if (r == CUDA_SUCCESS) *pitch = static_cast<size_t>(row);
    return r;
  }
  const uint32_t device = Device();
  const uint64_t estimate = tessera::capgpu::PitchedBytesEstimate(width_bytes, height);
  if (!rt.Charge(device, estimate)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = real(dptr, pitch, width_bytes, height, elem_bytes);
  if (r != CUDA_SUCCESS) {
    rt.Credit(device, estimate);
    return r;
  }
  uint64_t actual = static_cast<uint64_t>(*pitch) * height;
  if (actual > estimate) {
    if (!rt.Charge(device, actual - estimate)) {
      rt.Credit(device, estimate);
      auto real_free = Real<HookId::cuMemFree_v2>();
      if (real_free != nullptr) real_free(*dptr);
      *dptr = 0;
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  } else {
    rt.Credit(device, estimate - actual);
  }
  rt.allocations().Insert(AllocKind::kDevicePointer, *dptr, actual, device);
  return r;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags) {
  auto real = Real<HookId::cuMemCreate>();
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  // Only device-resident physical memory counts against a GPU memory cap.
  if (!Runtime::Get().Handles() || handle == nullptr || prop == nullptr ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id < 0) {
    return real(handle, size, prop, flags);
  }
  GateScope gate(Swap());
  return Charged(AllocKind::kMemHandle, static_cast<uint32_t>(prop->location.id), size, handle,
                 [&] {
                   CUresult r = real(handle, size, prop, flags);
                   // Within the cap but the card is full (overcommitted shares): wait for
                   // room, as cuMemAlloc does (a framework's expandable segments come here).
                   if (r == CUDA_ERROR_OUT_OF_MEMORY && Swap().on())
                     r = Swap().WaitForRoom(handle, size, prop);
                   if (r == CUDA_SUCCESS && Swap().on()) {
                     // The process holds a value of the library's; the table keys on it.
                     const CUmemGenericAllocationHandle user = Swap().Track(*handle, size, prop);
                     if (user != 0) *handle = user;
                   }
                   return r;
                 });
}

CUresult cuArrayCreate_v2(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc) {
  return CreateArray<HookId::cuArrayCreate_v2>(array, desc);
}

CUresult cuArray3DCreate_v2(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  return CreateArray<HookId::cuArray3DCreate_v2>(array, desc);
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  return Freed<HookId::cuMemFree_v2>(
      AllocKind::kDevicePointer, dptr, [&](CUresult* r) { return Swap().Free(dptr, r); }, dptr);
}

// Stream-ordered frees are credited when enqueued: the memory returns to the pool when the
// stream reaches the free, and the pool is the driver's, not the workload's, to hand out. A
// library range freed on a stream: the stream is drained first, then it goes at once.
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  return Freed<HookId::cuMemFreeAsync>(
      AllocKind::kDevicePointer, dptr, [&](CUresult* r) { return Swap().Free(dptr, r, &stream); },
      dptr, stream);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  return Freed<HookId::cuMemFreeAsync_ptsz>(
      AllocKind::kDevicePointer, dptr, [&](CUresult* r) { return Swap().Free(dptr, r, &stream); },
      dptr, stream);
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  return Freed<HookId::cuMemRelease>(
      AllocKind::kMemHandle, handle, [&](CUresult* r) { return Swap().Release(handle, r); },
      handle);
}

// Arrays are never the swap's: the driver frees them.
CUresult cuArrayDestroy(CUarray array) {
  return Freed<HookId::cuArrayDestroy>(
      AllocKind::kArray, reinterpret_cast<uint64_t>(array), [](CUresult*) { return false; }, array);
}

// Mappings through handles the library tracks (swap.h); pass-through otherwise.
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  auto real = Real<HookId::cuMemMap>();
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!Runtime::Get().Handles() || !Swap().on()) return real(ptr, size, offset, handle, flags);
  GateScope gate(Swap());
  return Swap().Map(ptr, size, offset, handle, flags);
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  auto real = Real<HookId::cuMemUnmap>();
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!Runtime::Get().Handles() || !Swap().on()) return real(ptr, size);
  GateScope gate(Swap());
  return Swap().Unmap(ptr, size);
}

// Memory exported to another process is mapped there too: it cannot leave the device.
CUresult cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType type, unsigned long long flags) {
  auto real = Real<HookId::cuMemExportToShareableHandle>();
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!Runtime::Get().Handles() || !Swap().on()) return real(shareable, handle, type, flags);
  GateScope gate(Swap());
  Swap().MarkUnswappable(Unswappable::kExported);
  return real(shareable, Swap().RealHandle(handle), type, flags);
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                CUmemGenericAllocationHandle handle) {
  auto real = Real<HookId::cuMemGetAllocationPropertiesFromHandle>();
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!Runtime::Get().Handles() || !Swap().on()) return real(prop, handle);
  GateScope gate(Swap());
  return real(prop, Swap().RealHandle(handle));
}

// A handle retained from an address (NCCL frees its buffers this way) is the library's value
// with one more reference, never the driver's: the driver's may change with a swap.
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  auto real = Real<HookId::cuMemRetainAllocationHandle>();
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!Runtime::Get().Handles() || !Swap().on() || handle == nullptr) return real(handle, addr);
  GateScope gate(Swap());
  CUresult r = CUDA_SUCCESS;
  if (Swap().Retain(reinterpret_cast<CUdeviceptr>(addr), handle, &r)) return r;
  return real(handle, addr);
}

}  // extern "C"
