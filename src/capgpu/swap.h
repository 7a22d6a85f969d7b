// Transparent swap of a share's device memory (this process's half; the agent sets the target in
// the region, accounting.h).
//
// With swapping on (the region says so), device memory is served from virtual address ranges
// this library reserves and backs with physical chunks (the driver's virtual memory management
// API: cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess), so the physical memory can
// go away while the addresses stay:
//   - cuMemAlloc_v2 and cuMemAllocPitch_v2 are served that way (sizes rounded up to the driver's
//     allocation granularity, and charged as such). When the cap allows an allocation but the
//     card has no room (the share's caps overcommit it), the call waits, with the bytes it
//     wants in its slot (room_wanted), for the agent to swap an idle share out, up to
//     TESSERA_CAPGPU_ROOM_WAIT_MS (default 60000), then fails with CUDA_ERROR_OUT_OF_MEMORY;
//   - mappings a framework makes itself (cuMemCreate + cuMemMap) are tracked; the handle it holds
//     keeps working after a swap: the library maps the new physical memory under it. Its
//     cuMemCreate waits for room on a full card as cuMemAlloc_v2 does.
//   - cuMemAllocAsync / cuMemAllocFromPoolAsync (stream-ordered pools), CUDA arrays and managed
//     memory make the process unswappable, with the reason in its slot.
//
// Swap-out (the watcher thread, when the region's target leaves kResident): the gate closes, so
// new driver calls from the process wait; calls already inside the driver are waited for; each
// context is synchronized; every mapping's bytes are copied to pinned host memory (or, once the
// share's swap_ram budget is spent, to an unlinked file under swap_dir through a pinned staging
// pool), in chunks spread over several streams; then the mappings are unmapped and the physical
// memory released. All or nothing: if any copy or host allocation fails, nothing is released.
//
// Swap-in (a driver call at the closed gate when the target is kOut, which brings the whole
// share back; or the watcher when the agent sets kResident, a prefetch): physical memory is
// created again and mapped at the same addresses, the bytes copied back, the gate opens.
// Pointers never change. When the device has no room (cuMemCreate says out of memory), the
// caller waits in state "resuming" and retries; the agent sees it in the slot.
//
// The gate costs a driver call, when no swap is pending, one thread-local store, a compiler
// barrier and one load: the other side uses membarrier(2) (an asymmetric fence) to see which
// threads are inside the driver. Where membarrier is unavailable the fast path uses a full fence.
// Only the outermost hooked call of a thread passes it: the watcher's own driver calls, and the
// calls a driver makes from inside another through the exported symbols, go straight through
// (reentry.h), so the watcher, which holds mu_ while it copies, never waits on its own gate.
//
// A process killed mid-swap: its pinned host memory and its swap file (unlinked at creation) go
// with it; its slot (host bytes included) is reclaimed like any dead process's; the region lock is
// robust.
//
// Thread-safety: all methods are thread-safe. Uses no C++ runtime library.
#pragma once

#include <pthread.h>

#include <cstddef>
#include <cstdint>

#include "capgpu/accounting.h"
#include "capgpu/cuda_abi.h"
#include "capgpu/region.h"

namespace tessera::capgpu {

class Swapper {
 public:
  // One per thread that has called the driver through a hook.
  struct ThreadRecord {
    uint32_t inside;  // 1 while the thread is inside a gated driver call
    uint32_t in_use;  // 0: free for the next new thread
  };

  constexpr Swapper() = default;

  // Turns swapping on for this process (the region has it on): registers the asymmetric fence
  // and starts the watcher thread. REQUIRES: the region stays open for the process's life.
  void Start(Region* region, int slot);
  bool on() const { return on_; }

  // ---- The gate ---------------------------------------------------------------------------------
  ThreadRecord* Enter() {
    if (__builtin_expect(!on_, 1)) return nullptr;
    ThreadRecord* rec = t_record_;
    if (__builtin_expect(rec == nullptr, 0)) rec = Register();
    __atomic_store_n(&rec->inside, 1, __ATOMIC_RELAXED);
    if (full_fence_) {
      __atomic_thread_fence(__ATOMIC_SEQ_CST);
    } else {
      __atomic_signal_fence(__ATOMIC_SEQ_CST);
    }
    if (__builtin_expect(__atomic_load_n(&closed_, __ATOMIC_ACQUIRE) != 0, 0)) {
      return SlowEnter(rec);
    }
    return rec;
  }
  static void Leave(ThreadRecord* rec) {
    if (rec != nullptr) __atomic_store_n(&rec->inside, 0, __ATOMIC_RELEASE);
  }
  // The calling thread's record went back to the pool (its thread-exit destructor).
  static void ForgetThreadRecord() { t_record_ = nullptr; }

  // ---- Allocations (REQUIRES: on(), inside the gate) --------------------------------------------
  // The size an allocation of `bytes` takes (rounded to the granularity); 0 if unknown.
  uint64_t Rounded(uint64_t bytes, uint32_t device);
  // Reserves, creates, maps and opens a range of `rounded` bytes on `device` (the charge is the
  // caller's). CUDA_SUCCESS with *dptr set, or the driver's error with nothing left behind.
  CUresult Alloc(CUdeviceptr* dptr, uint64_t rounded, uint32_t device);
  // Frees a range Alloc made: true with *result set; false when `dptr` is not one of ours. The
  // work that may still use it is waited for first, as cuMemFree would: `stream` for a
  // stream-ordered free, the context otherwise (nullptr).
  bool Free(CUdeviceptr dptr, CUresult* result, CUstream* stream = nullptr);
  // A framework's own physical allocation, after the real cuMemCreate made `real`: returns the
  // handle value the process gets instead (0 when the table has no room: the caller then hands
  // out `real` and the process becomes unswappable).
  CUmemGenericAllocationHandle Track(CUmemGenericAllocationHandle real, uint64_t bytes,
                                     const CUmemAllocationProp* prop);
  // The handle the driver knows for a value the process holds (itself when not ours).
  CUmemGenericAllocationHandle RealHandle(CUmemGenericAllocationHandle user);
  // cuMemMap / cuMemUnmap / cuMemRelease through the handle table (the handle a framework holds
  // may stand for physical memory created again after a swap).
  CUresult Map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
               unsigned long long flags);
  CUresult Unmap(CUdeviceptr ptr, size_t size);
  // False when the handle is not tracked (the caller releases it itself).
  bool Release(CUmemGenericAllocationHandle handle, CUresult* result);
  // cuMemRetainAllocationHandle for an address in a tracked mapping: true with *result set and,
  // on success, *handle the process's value with one more reference (a cuMemAlloc_v2 range has
  // none to give: CUDA_ERROR_INVALID_VALUE, as for memory not made through the VMM API). False
  // when the address is not the library's.
  bool Retain(CUdeviceptr addr, CUmemGenericAllocationHandle* handle, CUresult* result);
  // After the driver said out of memory for an allocation the cap allows: waits, with the bytes
  // in the slot (room_wanted), for the agent to make room, retrying cuMemCreate (flags 0, as the
  // driver requires), up to TESSERA_CAPGPU_ROOM_WAIT_MS. The driver's last answer.
  CUresult WaitForRoom(CUmemGenericAllocationHandle* real, uint64_t bytes,
                       const CUmemAllocationProp* prop);
  // Memory the library cannot move: the process stays resident, and says why.
  void MarkUnswappable(Unswappable reason);

  // ---- Swapping (the watcher calls these; tests and the benchmark may too)
  // ----------------------- Moves every tracked mapping off the device. 0, or an Unswappable reason
  // (nothing moved).
  uint32_t SwapOut();
  // Brings it back. CUDA_SUCCESS, or the driver's error (CUDA_ERROR_OUT_OF_MEMORY: no room yet;
  // nothing stays half-mapped).
  CUresult SwapIn();

  // Fork: the child has none of the parent's device memory, threads or gate.
  void AfterForkInChild();

 private:
  struct Handle;
  struct Mapping;
  ThreadRecord* Register();
  ThreadRecord* SlowEnter(ThreadRecord* rec);
  static void* WatcherMain(void* self);
  void Watch();
  uint32_t SwapOutLocked();
  CUresult SwapInLocked();
  bool Drain();  // waits for threads inside the driver (mu_ released); false on timeout
  void PublishLocked(uint32_t state, uint32_t reason);
  void AddResidentLocked(int64_t delta);  // REQUIRES: mu_, so PublishLocked's sum agrees
  void SetRoomWanted(int64_t delta);      // adds to the slot's room_wanted (several threads wait)
  void FreeStaleLocked();                 // pinned copies a swap-in left for the watcher
  bool EnsureStreams(uint32_t device);
  Handle* FindHandle(CUmemGenericAllocationHandle user);
  Handle* NewHandle();
  Mapping* NewMapping();
  template <typename Entry>
  Entry* FreeSlot(Entry** array, uint32_t* count, uint32_t* capacity);
  bool Grow(void** array, uint32_t* capacity, size_t element);

  static __thread ThreadRecord* t_record_ __attribute__((tls_model("initial-exec")));

  bool on_ = false;
  bool full_fence_ = false;
  uint32_t closed_ = 0;  // 1 while swapping out, swapped, or swapping in
  Region* region_ = nullptr;
  int slot_ = -1;
  pthread_mutex_t mu_ = PTHREAD_MUTEX_INITIALIZER;  // guards everything below and transitions
  uint32_t state_ = 0;                              // SwapState
  uint32_t unswappable_ = 0;                        // sticky reasons (pools, arrays, managed)
  int64_t last_failure_ns_ = 0;                     // the last swap-out that failed, passing
  uint64_t next_user_ = 1;                          // for Track's handle values
  // Thread records, in chunks that are never freed (records are reused through in_use).
  pthread_mutex_t records_mu_ = PTHREAD_MUTEX_INITIALIZER;
  ThreadRecord* chunks_[64] = {};
  uint32_t records_ = 0;
  pthread_key_t record_key_ = 0;
  // Handles and mappings (libc memory).
  Handle* handles_ = nullptr;
  uint32_t handle_count_ = 0, handle_capacity_ = 0;
  Mapping* mappings_ = nullptr;
  uint32_t mapping_count_ = 0, mapping_capacity_ = 0;
  // Per device: a context to make current on the watcher, streams for pipelined copies.
  CUcontext contexts_[kMaxDevices] = {};
  CUstream streams_[kMaxDevices][4] = {};
  void* staging_[4] = {};  // pinned staging buffers for the disk tier
  int swap_fd_ = -1;       // the disk tier's unlinked file while swapped
  // Pinned copies a swap-in no longer needs: freed by the watcher after the gate has opened, so
  // unpinning is not part of a resume (and of its time). Freed at once when the list is full.
  void* stale_host_[64] = {};
  uint32_t stale_count_ = 0;
};

}  // namespace tessera::capgpu
