// This process's side of the cap: joins the allocation's region on first use, charges and credits
// allocations, and answers memory queries.
//
// Configuration (read once per process image, at the first intercepted call):
//   TESSERA_CAPGPU_REGION     path of the region file the agent created (authoritative limits);
//                             if it does not exist and limits are set, it is created from them
//                             (first process wins, atomically), for HAMi-style setups.
//   TESSERA_GPU_MEMORY_LIMIT  "8GiB" or "8GiB,4GiB" per CUDA device (limits.h), or HAMi-core's
//                             CUDA_DEVICE_MEMORY_LIMIT[_i]. Without a region path the cap is
//                             private to the process.
//   TESSERA_CAPGPU_LOG=1      informational messages on stderr (errors are always printed).
// Swapping is on when the region file says so (`tessera-capgpu-region create --swap`): swap.h.
// Nothing configured: every hook passes straight through.
//
// Thread-safety: all methods are thread-safe. Fork: the child re-joins on first use and gets its
// own slot. Uses no C++ runtime library; the one instance is constant-initialised.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>

#include "capgpu/alloc_table.h"
#include "capgpu/reentry.h"
#include "capgpu/region.h"
#include "capgpu/swap.h"

namespace tessera::capgpu {

class Runtime {
 public:
  static Runtime& Get();

  constexpr Runtime() = default;

  // True when a cap applies to this process (joins the region on the first call).
  bool Capped() {
    int s = state_.load(std::memory_order_acquire);
    if (__builtin_expect(s == kUnjoined, 0)) s = Join();
    return s == kCapped;
  }
  // True when a hook is to handle this call: the thread is not inside the library already (a
  // call the driver beneath makes from inside another, reentry.h: it passes straight to the
  // driver) and a cap applies.
  bool Handles() { return !InsideLibrary() && Capped(); }

  // REQUIRES: Capped(). Charges `bytes` on `device`; false when that would pass the cap (dead
  // processes' charges are reclaimed first) or the region is unusable.
  bool Charge(uint32_t device, uint64_t bytes);
  // REQUIRES: Capped().
  void Credit(uint32_t device, uint64_t bytes);
  // REQUIRES: Capped(). Limit and usage of `device`, after reclaiming the charges of processes
  // that no longer exist (the cheap check; see ProcessExists).
  // False when the device is uncapped.
  bool Usage(uint32_t device, uint64_t* limit, uint64_t* used);

  // Counts a kernel launch in the region (no lock, no system call). REQUIRES: Capped().
  void NoteLaunch() { __atomic_fetch_add(&region_.data().launches, 1, __ATOMIC_RELAXED); }

  AllocationTable& allocations() { return allocations_; }
  // The swap side (swap.h); on() only when the region has swapping on.
  Swapper& swapper() { return swapper_; }

  // Hooks for pthread_atfork (child) and process exit.
  void AfterForkInChild();
  void Leave();

 private:
  enum : int { kUnjoined = 0, kUncapped = 1, kCapped = 2 };
  int Join();
  int JoinLocked();

  std::atomic<int> state_{kUnjoined};
  pthread_mutex_t join_mu_ = PTHREAD_MUTEX_INITIALIZER;
  Region region_;  // open while kCapped
  bool private_region_ = false;
  int slot_ = -1;  // -1: no slot (region full): charges are refused
  AllocationTable allocations_;
  Swapper swapper_;
};

// One call a hook handles: the thread is inside the library (reentry.h: the calls the driver
// makes from inside it pass straight through) and holds the swap gate open (a no-op without
// swapping) until it returns.
class GateScope {
 public:
  explicit GateScope(Swapper& swapper) : record_(swapper.Enter()) {}
  ~GateScope() { Swapper::Leave(record_); }
  GateScope(const GateScope&) = delete;
  GateScope& operator=(const GateScope&) = delete;

 private:
  LibraryScope inside_;  // first: inside before the gate (its slow path may call the driver)
  Swapper::ThreadRecord* record_;
};

}  // namespace tessera::capgpu
