#include "capgpu/region.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace tessera::capgpu {
namespace {

int InitMutex(pthread_mutex_t* mutex) {
  pthread_mutexattr_t attr;
  int rc = pthread_mutexattr_init(&attr);
  if (rc != 0) return rc;
  rc = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  if (rc == 0) rc = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  if (rc == 0) rc = pthread_mutex_init(mutex, &attr);
  pthread_mutexattr_destroy(&attr);
  return rc;
}

void InitFile(RegionFile* file, const LimitList& limits) {
  memset(file, 0, sizeof(*file));
  uint64_t all = kNoLimit;
  InitRegionData(file->data, limits.count > 0 ? limits.bytes : &all,
                 limits.count > 0 ? limits.count : 1);
  file->file_bytes = static_cast<uint32_t>(sizeof(RegionFile));
  file->version = kRegionVersion;
}

}  // namespace

int CreateRegionFile(const char* path, const LimitList& limits, mode_t mode, bool replace) {
  char tmp[4096];
  int n = snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, static_cast<int>(getpid()));
  if (n < 0 || static_cast<size_t>(n) >= sizeof(tmp)) return ENAMETOOLONG;
  int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return errno;
  int rc = 0;
  void* map = MAP_FAILED;
  if (fchmod(fd, mode) != 0 || ftruncate(fd, sizeof(RegionFile)) != 0) {
    rc = errno;
  } else {
    map = mmap(nullptr, sizeof(RegionFile), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) rc = errno;
  }
  if (rc == 0) {
    auto* file = static_cast<RegionFile*>(map);
    InitFile(file, limits);
    rc = InitMutex(&file->mutex);
    __atomic_store_n(&file->magic, kRegionMagic, __ATOMIC_RELEASE);
    munmap(map, sizeof(RegionFile));
  }
  close(fd);
  if (rc == 0) {
    if (replace) {
      if (rename(tmp, path) != 0) rc = errno;
    } else if (link(tmp, path) != 0) {
      rc = errno;
    }
  }
  unlink(tmp);  // after rename this fails harmlessly
  return rc;
}

int Region::Open(const char* path) {
  Close();
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return errno;
  int rc = OpenFd(fd);
  close(fd);
  return rc;
}

int Region::OpenFd(int fd) {
  Close();
  struct stat st;
  if (fstat(fd, &st) != 0) return errno;
  if (static_cast<size_t>(st.st_size) < sizeof(RegionFile)) return EINVAL;
  // MAP_POPULATE: take the page faults here rather than inside the lock on first use.
  void* map =
      mmap(nullptr, sizeof(RegionFile), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (map == MAP_FAILED) return errno;
  auto* file = static_cast<RegionFile*>(map);
  if (__atomic_load_n(&file->magic, __ATOMIC_ACQUIRE) != kRegionMagic ||
      file->version != kRegionVersion || file->file_bytes != sizeof(RegionFile)) {
    munmap(map, sizeof(RegionFile));
    return EINVAL;
  }
  file_ = file;
  mapped_bytes_ = sizeof(RegionFile);
  return 0;
}

int Region::OpenPrivate(const LimitList& limits) {
  Close();
  void* map =
      mmap(nullptr, sizeof(RegionFile), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return errno;
  auto* file = static_cast<RegionFile*>(map);
  InitFile(file, limits);
  int rc = InitMutex(&file->mutex);
  if (rc != 0) {
    munmap(map, sizeof(RegionFile));
    return rc;
  }
  file->magic = kRegionMagic;
  file_ = file;
  mapped_bytes_ = sizeof(RegionFile);
  return 0;
}

void Region::Close() {
  if (file_ != nullptr) munmap(file_, mapped_bytes_);
  file_ = nullptr;
  mapped_bytes_ = 0;
}

bool Region::Lock() { return Locked(pthread_mutex_lock(&file_->mutex)); }

bool Region::LockFor(int64_t timeout_ms) {
  timespec until;
  clock_gettime(CLOCK_REALTIME, &until);  // the clock pthread_mutex_timedlock measures against
  until.tv_sec += static_cast<time_t>(timeout_ms / 1000);
  until.tv_nsec += static_cast<long>(timeout_ms % 1000) * 1'000'000;
  if (until.tv_nsec >= 1'000'000'000) {
    until.tv_sec += 1;
    until.tv_nsec -= 1'000'000'000;
  }
  return Locked(pthread_mutex_timedlock(&file_->mutex, &until));
}

bool Region::Locked(int rc) {
  if (rc == EOWNERDEAD) {
    // The previous owner died inside the critical section: its writes may be half done.
    Repair(file_->data);
    ReapDead(file_->data, ProcessIsAlive, nullptr);
    pthread_mutex_consistent(&file_->mutex);
    return true;
  }
  return rc == 0;
}

void Region::Unlock() { pthread_mutex_unlock(&file_->mutex); }

bool RequestSwap(Region& region, SwapTarget target) {
  {
    RegionLock lock(region, 1000);  // the agent's call: not forever on a stopped process's lock
    if (!lock.held() || region.data().swap_enabled == 0) return false;
    SetSwapTarget(region.data(), target);
  }
  syscall(SYS_futex, &region.data().swap_seq, FUTEX_WAKE, 0x7fffffff, nullptr, nullptr, 0);
  return true;
}

namespace {

// Writes `bytes` at `offset` of the file in one call. 0 or an errno.
int WriteAt(int fd, const void* bytes, size_t n, size_t offset) {
  const ssize_t w = pwrite(fd, bytes, n, static_cast<off_t>(offset));
  if (w < 0) return errno;
  return static_cast<size_t>(w) == n ? 0 : EIO;
}

constexpr size_t kDataAt = offsetof(RegionFile, data);

}  // namespace

int ReadRegionCopy(int fd, RegionFile* copy) {
  size_t done = 0;
  auto* out = reinterpret_cast<char*>(copy);
  while (done < sizeof(RegionFile)) {
    const ssize_t n = pread(fd, out + done, sizeof(RegionFile) - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EINVAL;  // cut short
    done += static_cast<size_t>(n);
  }
  if (copy->magic != kRegionMagic || copy->version != kRegionVersion ||
      copy->file_bytes != sizeof(RegionFile))
    return EINVAL;
  return 0;
}

int WriteSwapTarget(int fd, SwapTarget target) {
  const uint32_t value = static_cast<uint32_t>(target);
  if (int rc = WriteAt(fd, &value, sizeof(value), kDataAt + offsetof(RegionData, swap_target)))
    return rc;
  uint32_t seq = 0;
  const size_t seq_at = kDataAt + offsetof(RegionData, swap_seq);
  if (pread(fd, &seq, sizeof(seq), static_cast<off_t>(seq_at)) != sizeof(seq)) return EIO;
  ++seq;
  return WriteAt(fd, &seq, sizeof(seq), seq_at);
}

int WriteSwapRamLimit(int fd, uint64_t bytes) {
  return WriteAt(fd, &bytes, sizeof(bytes), kDataAt + offsetof(RegionData, swap_ram_limit));
}

bool WaitSwapSettled(Region& region, int64_t timeout_ms, SwapSummary* summary) {
  timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    SwapTarget target;
    {
      RegionLock lock(region);
      if (!lock.held()) return false;
      ReapDead(region.data(), ProcessIsAlive, nullptr);
      *summary = SummarizeSwap(region.data());
      target = static_cast<SwapTarget>(region.data().swap_target);
    }
    if (summary->SettledFor(target)) return true;
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    const int64_t elapsed =
        (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
    if (elapsed >= timeout_ms) return false;
    timespec pause{0, 2'000'000};
    nanosleep(&pause, nullptr);
  }
}

bool ReadProcessStat(int32_t pid, char* state, uint64_t* start_time) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
  const char* p = strrchr(buf, ')');
  if (p == nullptr) return false;
  ++p;
  while (*p == ' ') ++p;
  *state = *p;  // field 3
  // starttime is field 22: skip 19 more fields.
  for (int field = 3; field < 22; ++field) {
    while (*p == ' ') ++p;
    while (*p != ' ' && *p != '\0') ++p;
    if (*p == '\0') return false;
  }
  while (*p == ' ') ++p;
  uint64_t v = 0;
  if (*p < '0' || *p > '9') return false;
  while (*p >= '0' && *p <= '9') v = v * 10 + static_cast<uint64_t>(*p++ - '0');
  *start_time = v;
  return true;
}

ProcessId SelfProcess() {
  ProcessId self;
  self.pid = static_cast<int32_t>(getpid());
  char state = 0;
  if (!ReadProcessStat(self.pid, &state, &self.start_time)) self.start_time = 0;
  return self;
}

bool ProcessIsAlive(ProcessId process, void*) {
  if (process.pid <= 0) return false;
  if (kill(process.pid, 0) != 0 && errno == ESRCH) return false;
  uint64_t start = 0;
  char state = 0;
  if (!ReadProcessStat(process.pid, &state, &start)) return false;
  // A zombie (Z) or dying (X) process has already released its device memory.
  return start == process.start_time && state != 'Z' && state != 'X';
}

bool ProcessExists(ProcessId process, void*) {
  return process.pid > 0 && (kill(process.pid, 0) == 0 || errno != ESRCH);
}

}  // namespace tessera::capgpu
