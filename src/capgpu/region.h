// The shared region: one file per allocation (e.g. /dev/shm/tessera-capgpu-<alloc>), created and
// sized by the node agent before the workload starts, mapped by every process of the workload.
// It holds a robust process-shared mutex and the RegionData of accounting.h.
//
// Crash safety: the mutex is PTHREAD_MUTEX_ROBUST, so a process killed while holding it never
// blocks the others: the next locker gets EOWNERDEAD, repairs the totals from the slots, reclaims
// the slots of dead processes and marks the mutex consistent. Slots of processes that die outside
// the lock are reclaimed when found dead (on a refused charge, a memory query, a full region, or
// `tessera-capgpu-region reap`).
//
// The limits are written once at creation; processes of the workload only read them, so none of
// them decides or raises the cap (a hostile process that can write the file can corrupt it: the
// cap is enforcement for cooperating code, like every interposition library).
//
// Thread-safety: a Region may be used from many threads; Lock/Unlock serialise access to data().
// Uses no C++ runtime library (it is linked into the preload library).
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "capgpu/accounting.h"
#include "capgpu/limits.h"

namespace tessera::capgpu {

inline constexpr uint64_t kRegionMagic = 0x31555047'53534554ULL;  // "TESSGPU1"
inline constexpr uint32_t kRegionVersion = 3;  // 2: RegionData::launches; 3: swapping

// The file's layout. Magic and version are written last at creation (and the file only appears
// under its name once complete), so a mapped region is always fully initialised.
struct RegionFile {
  uint64_t magic;
  uint32_t version;
  uint32_t file_bytes;  // sizeof(RegionFile) at creation, checked on open
  pthread_mutex_t mutex;
  RegionData data;
};

// Creates a region file at `path` with `limits` (see InitRegionData). The file is built under a
// temporary name and linked into place, so an opener never sees a half-written region. With
// `replace` false an existing file is left alone and EEXIST returned. Returns 0 or an errno.
int CreateRegionFile(const char* path, const LimitList& limits, mode_t mode, bool replace);

// A mapping of one region. Movable only by hand (no C++ runtime); one per process in the library.
class Region {
 public:
  Region() = default;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region() { Close(); }

  // Maps an existing region file. Returns 0, or an errno (EINVAL: not a region of this version).
  int Open(const char* path);
  // Maps the region file open (read-write) on `fd`, which the caller keeps: for an opener that
  // checks what it opened first (the agent: no symbolic link, the expected owner). As Open.
  int OpenFd(int fd);
  // A region private to this process (no path configured): same rules, nothing shared.
  int OpenPrivate(const LimitList& limits);
  void Close();
  bool is_open() const { return file_ != nullptr; }

  // REQUIRES: is_open(). Returns false only if the mutex is unrecoverable (a bug elsewhere).
  bool Lock();
  // As Lock, giving up after `timeout_ms`: for an operator's tool, which must not hang on a share
  // whose process was stopped (SIGSTOP, a debugger) while it held the lock.
  bool LockFor(int64_t timeout_ms);
  void Unlock();
  // REQUIRES: the lock is held (or the region is private to the caller).
  RegionData& data() { return file_->data; }

 private:
  bool Locked(int rc);  // the result of a lock call: repairs after a dead owner
  RegionFile* file_ = nullptr;
  size_t mapped_bytes_ = 0;
};

// RAII holder of a region's lock.

class RegionLock {
 public:
  explicit RegionLock(Region& region) : region_(region), held_(region.Lock()) {}
  RegionLock(Region& region, int64_t timeout_ms)
      : region_(region), held_(region.LockFor(timeout_ms)) {}
  ~RegionLock() {
    if (held_) region_.Unlock();
  }
  RegionLock(const RegionLock&) = delete;
  RegionLock& operator=(const RegionLock&) = delete;
  bool held() const { return held_; }

 private:
  Region& region_;
  bool held_;
};

// ---- Swapping (the agent's side; swap.h is the process's)
// -----------------------------------------

// Sets the share's swap target and wakes its processes' watchers. False when the region has
// swapping off or its lock is unusable.
bool RequestSwap(Region& region, SwapTarget target);
// Waits until every live process has settled for the current target (kUnswappable counts as
// settled), or `timeout_ms` passes; *summary gets the last state seen. True when settled.
// Dead processes are reaped along the way.
bool WaitSwapSettled(Region& region, int64_t timeout_ms, SwapSummary* summary);

// ---- An observer outside the workload (the node agent) -----------------------------------------
// The workload's processes own the region file, so they can write any bytes into it (the
// mutex's robust-list pointers, which glibc follows when its locker unlocks: a write where the
// job chooses, in the locker) and cut it short (a mapping read past its end is a SIGBUS). An
// observer that must outlive them (root's agent) therefore never maps the file nor takes its
// lock: it reads a copy (pread), in which each field is as a process last wrote it (a sum may
// be mid-update: what it reads is advisory), and writes single aligned fields (pwrite), which
// the processes read with atomic loads.

// A copy of the region open on `fd`. 0, or an errno (EINVAL: cut short, or not a region of this
// version).
int ReadRegionCopy(int fd, RegionFile* copy);
// Sets the share's swap target and bumps swap_seq (the processes' watchers wait on it with a
// timeout of 20 ms, so they see it without a wake). 0, or an errno.
int WriteSwapTarget(int fd, SwapTarget target);
// Sets the host RAM the share's swapped bytes may take (swap_ram_limit). 0, or an errno.
int WriteSwapRamLimit(int fd, uint64_t bytes);

// ---- Processes (system calls; the impure half of liveness) ------------------------------------

// State letter (R, S, Z, ...) and start time in clock ticks since boot of `pid`, from
// /proc/PID/stat. False if it is gone.
bool ReadProcessStat(int32_t pid, char* state, uint64_t* start_time);
// This process.
ProcessId SelfProcess();
// IsAliveFn over the real system: the pid exists (kill(pid, 0) is not ESRCH) and has the same
// start time (a reused pid reads as dead) and is not a zombie. `context` is unused.
bool ProcessIsAlive(ProcessId process, void* context);
// Cheaper IsAliveFn (one kill(pid, 0), no /proc read) for queries that only report: a reused pid
// reads as alive until a charge is refused and the full check runs.
bool ProcessExists(ProcessId process, void* context);

}  // namespace tessera::capgpu
