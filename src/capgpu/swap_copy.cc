// Moving a process's device memory off the device (SwapOutLocked) and back (SwapInLocked):
// chunked, pipelined copies over several streams, to pinned host memory or through a pinned
// staging pool to the disk tier.
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capgpu/reentry.h"
#include "capgpu/swap_internal.h"

namespace tessera::capgpu {

using namespace swap_internal;  // NOLINT: the implementation's own helpers

namespace {

// All `n` bytes at `offset` through `io` (pread or pwrite), again after an interruption; false
// on an error or at the end of the file.
template <typename Char, typename Io>
bool TransferAll(int fd, Char* p, size_t n, uint64_t offset, Io io) {
  while (n > 0) {
    ssize_t done = io(fd, p, n, static_cast<off_t>(offset));
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) return false;
    p += done;
    n -= static_cast<size_t>(done);
    offset += static_cast<uint64_t>(done);
  }
  return true;
}

bool WriteAll(int fd, const void* data, size_t n, uint64_t offset) {
  return TransferAll(fd, static_cast<const char*>(data), n, offset,
                     [](int f, const char* p, size_t k, off_t at) { return pwrite(f, p, k, at); });
}

bool ReadAll(int fd, void* data, size_t n, uint64_t offset) {
  return TransferAll(fd, static_cast<char*>(data), n, offset,
                     [](int f, char* p, size_t k, off_t at) { return pread(f, p, k, at); });
}

}  // namespace

bool Swapper::EnsureStreams(uint32_t device) {
  if (device >= kMaxDevices) return false;
  if (contexts_[device] != nullptr && cuCtxSetCurrent_fn() != nullptr) {
    cuCtxSetCurrent_fn()(contexts_[device]);
  }
  for (int k = 0; k < kStreams; ++k) {
    if (streams_[device][k] == nullptr &&
        (cuStreamCreate_fn() == nullptr ||
         cuStreamCreate_fn()(&streams_[device][k], 1 /* CU_STREAM_NON_BLOCKING */) !=
             CUDA_SUCCESS)) {
      return false;
    }
  }
  return true;
}

uint32_t Swapper::SwapOut() {
  LibraryScope inside;  // a caller outside any hook: the driver's nested calls pass straight
  pthread_mutex_lock(&mu_);
  const uint32_t r = state_ == static_cast<uint32_t>(SwapState::kResident) ? SwapOutLocked() : 0;
  pthread_mutex_unlock(&mu_);
  return r;
}

CUresult Swapper::SwapIn() {
  LibraryScope inside;
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
  // The threads already inside the driver may be about to take mu_ (an allocation, a free, a
  // mapping): they are waited for with it released. New calls wait at the closed gate, and no
  // other transition starts meanwhile (the state is "swapping out").
  pthread_mutex_unlock(&mu_);
  const bool drained = Drain();
  pthread_mutex_lock(&mu_);
  if (!drained) return fail(Unswappable::kBusy);
  if (unswappable_ != 0) return fail(static_cast<Unswappable>(unswappable_));  // a call just now
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
  const BackingCalls vm;
  auto h2d = cuMemcpyHtoDAsync_v2_fn();
  auto sync = cuStreamSynchronize_fn();
  auto free_host = cuMemFreeHost_fn();
  // Every function the swap-in calls, checked once: none may be missing halfway.
  if (!vm.ok() || h2d == nullptr || sync == nullptr || free_host == nullptr) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  PublishLocked(static_cast<uint32_t>(SwapState::kSwappingIn), 0);
  // Physical memory first, all of it, so a device without room leaves nothing half-mapped.
  CUresult r = CUDA_SUCCESS;
  uint32_t created = 0;
  for (; created < handle_count_; ++created) {
    Handle& h = handles_[created];
    if (!h.live || h.real != 0 || h.mappings == 0) continue;
    if (h.device < kMaxDevices && contexts_[h.device] != nullptr &&
        cuCtxSetCurrent_fn() != nullptr) {
      cuCtxSetCurrent_fn()(contexts_[h.device]);
    }
    r = vm.create(&h.real, h.bytes, &h.prop, 0);
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
      r = vm.MapReadWrite(m.va, m.bytes, m.offset, h.real, h.device);
      if (r != CUDA_SUCCESS) break;
    }
  }
  if (r != CUDA_SUCCESS) {
    for (uint32_t i = 0; i < mapped; ++i) {
      Mapping& m = mappings_[i];
      if (m.live && (m.host != nullptr || m.on_disk)) vm.unmap(m.va, m.bytes);
    }
    for (uint32_t i = 0; i < created; ++i) {
      Handle& h = handles_[i];
      if (h.live && h.real != 0 && h.mappings > 0) {
        // Only those made in this attempt: every mapped handle was swapped out.
        vm.release(h.real);
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
      if (stale_count_ < sizeof(stale_host_) / sizeof(stale_host_[0])) {
        stale_host_[stale_count_++] = m.host;  // the watcher unpins it once the gate is open
      } else {
        free_host(m.host);
      }
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
  if (stale_count_ > 0) FutexWakeAll(&region_->data().swap_seq);  // the watcher unpins them
  return CUDA_SUCCESS;
}

}  // namespace tessera::capgpu
