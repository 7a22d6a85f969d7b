#include "capgpu/runtime.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

namespace tessera::capgpu {

__thread uint32_t t_library_depth = 0;

namespace {

// The one instance, never destroyed: hooks may still run on other threads while the process
// exits, so its memory must outlive every static destructor.
union RuntimeStorage {
  constexpr RuntimeStorage() : runtime() {}
  ~RuntimeStorage() {}
  Runtime runtime;
};
constinit RuntimeStorage g_storage;

void Log(bool error, const char* format, ...) {
  if (!error) {
    const char* v = getenv("TESSERA_CAPGPU_LOG");
    if (v == nullptr || v[0] != '1') return;
  }
  char buf[512];
  int n = snprintf(buf, sizeof(buf), "tessera-capgpu[%d]: ", static_cast<int>(getpid()));
  va_list args;
  va_start(args, format);
  int m = vsnprintf(buf + n, sizeof(buf) - static_cast<size_t>(n) - 1, format, args);
  va_end(args);
  size_t len = static_cast<size_t>(n) + (m < 0 ? 0 : static_cast<size_t>(m));
  if (len > sizeof(buf) - 2) len = sizeof(buf) - 2;
  buf[len++] = '\n';
  ssize_t ignored = write(2, buf, len);
  (void)ignored;
}

const char* GetEnv(const char* name) { return getenv(name); }

}  // namespace

Runtime& Runtime::Get() { return g_storage.runtime; }

int Runtime::Join() {
  pthread_mutex_lock(&join_mu_);
  int s = state_.load(std::memory_order_relaxed);
  if (s == kUnjoined) {
    s = JoinLocked();
    state_.store(s, std::memory_order_release);
  }
  pthread_mutex_unlock(&join_mu_);
  return s;
}

int Runtime::JoinLocked() {
  bool malformed = false;
  const LimitList limits = LimitsFromEnvironment(GetEnv, &malformed);
  if (malformed) Log(true, "ignoring a malformed memory limit in the environment");
  const char* path = getenv("TESSERA_CAPGPU_REGION");
  if (path != nullptr && path[0] == '\0') path = nullptr;

  if (!region_.is_open()) {
    int rc = ENOENT;
    if (path != nullptr) {
      rc = region_.Open(path);
      if (rc == ENOENT && limits.count > 0) {
        int created = CreateRegionFile(path, limits, 0600, /*replace=*/false);
        if (created != 0 && created != EEXIST) {
          Log(true, "cannot create region %s: %s", path, strerror(created));
        }
        rc = region_.Open(path);
      }
      if (rc != 0) Log(true, "cannot open region %s: %s", path, strerror(rc));
    }
    if (rc != 0) {
      if (limits.count == 0) return kUncapped;
      rc = region_.OpenPrivate(limits);
      if (rc != 0) {
        Log(true, "cannot map a private region: %s", strerror(rc));
        return kUncapped;
      }
      private_region_ = true;
    }
  }

  const ProcessId self = SelfProcess();
  RegionLock lock(region_);
  if (!lock.held()) {
    Log(true, "region lock unusable; allocations will be refused");
    slot_ = -1;
    return kCapped;
  }
  RegionData& data = region_.data();
  slot_ = ClaimSlot(data, self);
  if (slot_ < 0 && ReapDead(data, ProcessIsAlive, nullptr) > 0) slot_ = ClaimSlot(data, self);
  if (slot_ < 0) Log(true, "region full (%u processes); allocations will be refused", kMaxSlots);
  if (slot_ >= 0 && !private_region_ && data.swap_enabled != 0) {
    swapper_.Start(&region_, slot_);
    Log(false, "swapping on (host RAM budget %llu, disk tier %s)",
        static_cast<unsigned long long>(data.swap_ram_limit),
        data.swap_dir[0] != '\0' ? data.swap_dir : "none");
  }
  Log(false, "joined %s as slot %d, device 0 limit %llu", private_region_ ? "(private)" : path,
      slot_, static_cast<unsigned long long>(data.limit[0]));
  return kCapped;
}

bool Runtime::Charge(uint32_t device, uint64_t bytes) {
  RegionLock lock(region_);
  if (!lock.held()) return false;
  RegionData& data = region_.data();
  ChargeResult r = TryCharge(data, slot_, device, bytes);
  if (r == ChargeResult::kOverCap && ReapDead(data, ProcessIsAlive, nullptr, slot_) > 0) {
    r = TryCharge(data, slot_, device, bytes);
  }
  if (r == ChargeResult::kBadArgument) {
    // A device beyond kMaxDevices is not capped; having no slot is (fail closed).
    return slot_ >= 0 && device >= kMaxDevices;
  }
  return r == ChargeResult::kCharged;
}

void Runtime::Credit(uint32_t device, uint64_t bytes) {
  RegionLock lock(region_);
  if (!lock.held()) return;
  capgpu::Credit(region_.data(), slot_, device, bytes);
}

bool Runtime::Usage(uint32_t device, uint64_t* limit, uint64_t* used) {
  RegionLock lock(region_);
  if (!lock.held()) return false;
  RegionData& data = region_.data();
  if (LimitFor(data, device) == kNoLimit) return false;
  ReapDead(data, ProcessExists, nullptr, slot_);
  *limit = LimitFor(data, device);
  *used = data.used[device];
  return true;
}

void Runtime::AfterForkInChild() {
  // Only this thread exists now; nothing here may wait for another.
  join_mu_ = PTHREAD_MUTEX_INITIALIZER;
  allocations_.ResetAfterFork();
  swapper_.AfterForkInChild();
  if (private_region_) {
    // A private region is a copy of the parent's: the child starts its own.
    region_.Close();
    private_region_ = false;
  }
  slot_ = -1;
  state_.store(kUnjoined, std::memory_order_release);
}

void Runtime::Leave() {
  if (state_.load(std::memory_order_acquire) != kCapped || slot_ < 0) return;
  RegionLock lock(region_);
  if (!lock.held()) return;
  ReleaseSlot(region_.data(), slot_);
  // Allocations from threads still running during exit pass uncharged; the driver frees all of
  // this process's memory moments later.
  slot_ = -1;
  state_.store(kUncapped, std::memory_order_release);
}

namespace {

void ChildAfterFork() { Runtime::Get().AfterForkInChild(); }

__attribute__((constructor)) void OnLoad() { pthread_atfork(nullptr, nullptr, ChildAfterFork); }
__attribute__((destructor)) void OnUnload() { Runtime::Get().Leave(); }

}  // namespace
}  // namespace tessera::capgpu
