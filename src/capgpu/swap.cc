// The swap's gate (thread records, the slow path that waits or brings the share back), the
// watcher thread that follows the region's target, and the process's state in its slot.
// The tables are in swap_tables.cc, the copies in swap_copy.cc.
#include "capgpu/swap.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capgpu/reentry.h"
#include "capgpu/swap_internal.h"

namespace tessera::capgpu {

using namespace swap_internal;  // NOLINT: the implementation's own helpers

__thread Swapper::ThreadRecord* Swapper::t_record_ = nullptr;

namespace {

void FreeRecord(void* record) {
  auto* rec = static_cast<Swapper::ThreadRecord*>(record);
  __atomic_store_n(&rec->inside, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&rec->in_use, 0, __ATOMIC_RELEASE);
  // A later destructor of this thread that calls the driver registers afresh instead of using a
  // record another thread may have taken.
  Swapper::ForgetThreadRecord();
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
  pthread_attr_setstacksize(&attr, 2 * 1024 * 1024);  // the driver's calls run on it
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
      const auto target =
          static_cast<SwapTarget>(__atomic_load_n(&data.swap_target, __ATOMIC_ACQUIRE));
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
        // On the application's thread: the swap-in makes each device's context current; the
        // thread's own is put back.
        CUcontext current = nullptr;
        if (cuCtxGetCurrent_fn() != nullptr) cuCtxGetCurrent_fn()(&current);
        wait = SwapInLocked() != CUDA_SUCCESS;  // no room on the device yet: wait, retry
        if (cuCtxSetCurrent_fn() != nullptr) cuCtxSetCurrent_fn()(current);
      }
      pthread_mutex_unlock(&mu_);
      if (wait) FutexWait(&data.swap_seq, seq, 20'000'000);
      continue;
    }
    pthread_mutex_unlock(&mu_);
    if (__atomic_load_n(&closed_, __ATOMIC_ACQUIRE) != 0) {
      // A swap-out is starting (it waits for the threads inside the driver): wait outside, so it
      // does not wait for this one, until it has finished or given up.
      const uint32_t seq = __atomic_load_n(&region_->data().swap_seq, __ATOMIC_ACQUIRE);
      FutexWait(&region_->data().swap_seq, seq, 1'000'000);
      continue;
    }
    __atomic_store_n(&rec->inside, 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&closed_, __ATOMIC_ACQUIRE) == 0) return rec;
  }
}

void* Swapper::WatcherMain(void* self) {
  static_cast<Swapper*>(self)->Watch();
  return nullptr;
}

void Swapper::Watch() {
  // The library's own thread: the driver calls it makes, and the ones the driver makes from inside
  // them through the exported symbols, never meet the gate it closes (reentry.h).
  LibraryScope inside;
  RegionData& data = region_->data();
  for (;;) {
    const uint32_t seq = __atomic_load_n(&data.swap_seq, __ATOMIC_ACQUIRE);
    const auto target =
        static_cast<SwapTarget>(__atomic_load_n(&data.swap_target, __ATOMIC_ACQUIRE));
    int64_t wait_ns = 200'000'000;
    pthread_mutex_lock(&mu_);
    FreeStaleLocked();
    const auto state = static_cast<SwapState>(state_);
    if (target != SwapTarget::kResident &&
        (state == SwapState::kResident || state == SwapState::kUnswappable)) {
      // A process unswappable for good is asked again only when the target changes; one whose
      // last try failed for a passing reason (a driver call that did not return in time, a
      // failed copy or host allocation) is tried again a second later.
      if (state == SwapState::kResident ||
          (unswappable_ == 0 && NowNs() - last_failure_ns_ >= 1'000'000'000)) {
        if (SwapOutLocked() != 0) {
          last_failure_ns_ = NowNs();
          wait_ns = 1'000'000'000;
        }
      } else if (unswappable_ == 0) {
        wait_ns = 1'000'000'000;
      }
    } else if (target == SwapTarget::kResident &&
               (state == SwapState::kSwapped || state == SwapState::kSwappingIn)) {
      if (SwapInLocked() != CUDA_SUCCESS) wait_ns = 20'000'000;  // prefetch: no room yet
    } else if (target == SwapTarget::kResident && state == SwapState::kUnswappable &&
               unswappable_ == 0) {
      PublishLocked(static_cast<uint32_t>(SwapState::kResident), 0);
    }
    pthread_mutex_unlock(&mu_);
    if (__atomic_load_n(&data.swap_seq, __ATOMIC_ACQUIRE) == seq)
      FutexWait(&data.swap_seq, seq, wait_ns);
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

void Swapper::AddResidentLocked(int64_t delta) {
  RegionLock lock(*region_);
  if (!lock.held() || slot_ < 0) return;
  Slot& s = region_->data().slots[slot_];
  if (delta < 0 && static_cast<uint64_t>(-delta) > s.resident_bytes) {
    s.resident_bytes = 0;
  } else {
    s.resident_bytes = static_cast<uint64_t>(static_cast<int64_t>(s.resident_bytes) + delta);
  }
}

bool Swapper::Drain() {
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

void Swapper::SetRoomWanted(int64_t delta) {
  RegionLock lock(*region_);
  if (!lock.held() || slot_ < 0) return;
  uint64_t& wanted = region_->data().slots[slot_].room_wanted;
  wanted = delta < 0 && static_cast<uint64_t>(-delta) > wanted
               ? 0
               : static_cast<uint64_t>(static_cast<int64_t>(wanted) + delta);
}

void Swapper::FreeStaleLocked() {
  auto free_host = cuMemFreeHost_fn();
  for (uint32_t i = 0; i < stale_count_; ++i) {
    if (free_host != nullptr) free_host(stale_host_[i]);
    stale_host_[i] = nullptr;
  }
  stale_count_ = 0;
}

void Swapper::MarkUnswappable(Unswappable reason) {
  pthread_mutex_lock(&mu_);
  if (unswappable_ == 0) unswappable_ = static_cast<uint32_t>(reason);
  pthread_mutex_unlock(&mu_);
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
  for (auto& s : stale_host_) s = nullptr;
  stale_count_ = 0;
  last_failure_ns_ = 0;
  if (swap_fd_ >= 0) close(swap_fd_);
  swap_fd_ = -1;
}

}  // namespace tessera::capgpu
