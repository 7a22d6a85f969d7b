// A stand-in libnvidia-ml for the agent's tests: two devices, "NVIDIA H100 80GB HBM3" (MIG on)
// and "NVIDIA A100-SXM4-40GB" (MIG off), with UUIDs GPU-fake-agent-<i>. FAKE_NVML_INIT_FAIL=1
// makes nvmlInit_v2 fail. MIG on device 0: GPU instances of H100-80GB's profiles (by nvidia-smi
// id) created with placement (overlaps and illegal starts refused as the driver does), one
// compute instance each, MIG devices with UUIDs MIG-fake-<gi>; fake_nvml_instances() lists what
// exists for the tests to check.
// FAKE_NVML_ALL_H100=1: both devices are H100 80GB with MIG off (one model per node, as the
// control plane wants). Health (the interface of NVML's "Event Handling Methods" and
// nvmlDeviceGetTotalEccErrors, as NVIDIA's NVML API reference documents them): FAKE_NVML_HEALTH
// names a file the test writes, read on every call; its lines are "ecc <device> <count>" (the
// device's volatile uncorrected, i.e. double-bit, ECC count) and "xid <device> <xid>" (one
// nvmlEventTypeXidCriticalError event, delivered once, in file order, by nvmlEventSetWait_v2 to a
// set the device is registered in), and the last of each of "retired <device> 0|1"
// (nvmlDeviceGetRetiredPagesPendingStatus), "remap_pending <device> 0|1" and "remap_failed
// <device> 0|1" (nvmlDeviceGetRemappedRows), "thermal <device> <ns>" and "power <device> <ns>"
// (nvmlDeviceGetViolationStatus with NVML_PERF_POLICY_THERMAL or _POWER: the cumulative time
// held back, with the CPU's clock in microseconds as the reference time).
// FAKE_NVML_NO_ECC=1: ECC counters are not supported
// (NVML_ERROR_NOT_SUPPORTED), as on cards without ECC. Thread-safety: none (one test thread; the
// agent calls from its loop only).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#define FAKE_API extern "C" __attribute__((visibility("default")))

namespace {
struct Memory {
  unsigned long long total, free, used;
};
unsigned Index(void* device) {
  return static_cast<unsigned>(reinterpret_cast<uintptr_t>(device) - 1);
}
bool AllH100() {
  const char* all = std::getenv("FAKE_NVML_ALL_H100");
  return all != nullptr && all[0] == '1';
}
void Copy(const char* s, char* out, unsigned length) {
  std::strncpy(out, s, length);
  out[length - 1] = '\0';
}
}  // namespace

FAKE_API int nvmlInit_v2() {
  const char* fail = std::getenv("FAKE_NVML_INIT_FAIL");
  return fail != nullptr && fail[0] == '1' ? 9 /* driver not loaded */ : 0;
}
namespace {
int shutdowns = 0;
}  // namespace
FAKE_API int nvmlShutdown() {
  ++shutdowns;
  return 0;
}
// How many times nvmlShutdown was called in this process.
FAKE_API int fake_nvml_shutdowns() { return shutdowns; }
FAKE_API const char* nvmlErrorString(int rc) {
  return rc == 9 ? "Driver Not Loaded" : "fake error";
}
FAKE_API int nvmlDeviceGetCount_v2(unsigned* count) {
  *count = 2;
  return 0;
}
FAKE_API int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  if (index >= 2) return 2;  // invalid argument
  *device = reinterpret_cast<void*>(static_cast<uintptr_t>(index) + 1);
  return 0;
}
FAKE_API int nvmlDeviceGetName(void* device, char* name, unsigned length) {
  Copy(Index(device) == 0 || AllH100() ? "NVIDIA H100 80GB HBM3" : "NVIDIA A100-SXM4-40GB", name,
       length);
  return 0;
}
FAKE_API int nvmlDeviceGetUUID(void* device, char* uuid, unsigned length) {
  const uintptr_t h = reinterpret_cast<uintptr_t>(device);
  if (h >= 0x3000) {  // a MIG device (see the MIG section)
    Copy(("MIG-fake-" + std::to_string(h - 0x3000 + 1)).c_str(), uuid, length);
    return 0;
  }
  Copy(Index(device) == 0 ? "GPU-fake-agent-0" : "GPU-fake-agent-1", uuid, length);
  return 0;
}
FAKE_API int nvmlDeviceGetMemoryInfo(void* device, Memory* memory) {
  // What the drivers report: a little under the marketing size.
  memory->total = Index(device) == 0 || AllH100() ? 81559ULL << 20 : 40536ULL << 20;
  memory->free = memory->total;
  memory->used = 0;
  return 0;
}
// Telemetry: device 0 is 37% busy with one process (pid FAKE_NVML_PID, default 4242) using
// 3 GiB; device 1 is idle.
struct Utilization {
  unsigned gpu, memory;
};
struct ProcessInfo {
  unsigned pid;
  unsigned long long used;
  unsigned gi, ci;
};
FAKE_API int nvmlDeviceGetUtilizationRates(void* device, Utilization* u) {
  u->gpu = Index(device) == 0 ? 37 : 0;
  u->memory = Index(device) == 0 ? 12 : 0;
  return 0;
}
FAKE_API int nvmlDeviceGetComputeRunningProcesses_v3(void* device, unsigned* count,
                                                     ProcessInfo* infos) {
  if (Index(device) != 0) {
    *count = 0;
    return 0;
  }
  if (*count < 1) {
    *count = 1;
    return 7;  // insufficient size
  }
  const char* pid = std::getenv("FAKE_NVML_PID");
  infos[0] = {pid ? static_cast<unsigned>(std::atoi(pid)) : 4242u, 3ULL << 30, 0xFFFFFFFFu,
              0xFFFFFFFFu};
  *count = 1;
  return 0;
}
FAKE_API int nvmlDeviceGetMigMode(void* device, unsigned* current, unsigned* pending) {
  *current = *pending = Index(device) == 0 && !AllH100() ? 1 : 0;
  return 0;
}

// ---- MIG (device 0 only) ----
namespace {
struct GiProfile {
  unsigned id, slices, memory_slices;
  std::vector<unsigned> starts;
};
// H100-80GB, by NVML profile index: 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, 1g.20gb.
const GiProfile kProfiles[] = {{19, 1, 1, {0, 1, 2, 3, 4, 5, 6}},
                               {14, 2, 2, {0, 2, 4}},
                               {9, 3, 4, {0, 4}},
                               {5, 4, 4, {0}},
                               {0, 7, 8, {0}},
                               {0xFFFF, 0, 0, {}},
                               {0xFFFF, 0, 0, {}},
                               {15, 1, 2, {0, 2, 4, 6}}};
struct Gi {
  unsigned id, profile, start, size;
  bool alive, has_ci;
};
std::vector<Gi> g_gis;
struct GiInfo {
  void* device;
  unsigned id, profileId, start, size;
};
struct GiProfileInfo {
  unsigned id, p2p, sliceCount, instanceCount, sms, ce, dec, enc, jpeg, ofa;
  unsigned long long memoryMB;
};
struct CiProfileInfo {
  unsigned id, sliceCount, instanceCount, sms, ce, dec, enc, jpeg, ofa;
};
constexpr uintptr_t kGiBase = 0x1000, kCiBase = 0x2000, kMigBase = 0x3000;
Gi* GiOf(void* h) {
  uintptr_t i = reinterpret_cast<uintptr_t>(h) - kGiBase;
  return i < g_gis.size() && g_gis[i].alive ? &g_gis[i] : nullptr;
}
}  // namespace

FAKE_API int nvmlDeviceGetHandleByUUID(const char* uuid, void** device) {
  for (unsigned i = 0; i < 2; ++i) {
    if (std::string(uuid) == "GPU-fake-agent-" + std::to_string(i)) {
      *device = reinterpret_cast<void*>(static_cast<uintptr_t>(i) + 1);
      return 0;
    }
  }
  return 6;  // not found
}
FAKE_API int nvmlDeviceGetGpuInstanceProfileInfo(void* device, unsigned profile,
                                                 GiProfileInfo* info) {
  if (Index(device) != 0) return 3;  // not supported
  if (profile >= sizeof kProfiles / sizeof kProfiles[0] || kProfiles[profile].id == 0xFFFF)
    return 2;
  std::memset(info, 0, sizeof *info);
  info->id = kProfiles[profile].id;
  info->sliceCount = kProfiles[profile].slices;
  info->instanceCount = 7;
  return 0;
}
FAKE_API int nvmlDeviceCreateGpuInstanceWithPlacement(void* device, unsigned profile_id,
                                                      const unsigned* placement, void** gi) {
  if (Index(device) != 0) return 3;
  const GiProfile* p = nullptr;
  for (const GiProfile& x : kProfiles) {
    if (x.id == profile_id && x.slices > 0) p = &x;
  }
  if (p == nullptr) return 2;
  const unsigned start = placement[0], size = placement[1];
  bool legal = size == p->memory_slices;
  bool listed = false;
  for (unsigned s : p->starts) listed = listed || s == start;
  if (!legal || !listed) return 2;  // invalid argument
  for (const Gi& g : g_gis) {
    if (g.alive && start < g.start + g.size && g.start < start + size)
      return 23;  // insufficient resources
  }
  g_gis.push_back({static_cast<unsigned>(g_gis.size()) + 1, profile_id, start, size, true, false});
  *gi = reinterpret_cast<void*>(kGiBase + g_gis.size() - 1);
  return 0;
}
FAKE_API int nvmlGpuInstanceGetInfo(void* gi, GiInfo* info) {
  Gi* g = GiOf(gi);
  if (g == nullptr) return 2;
  *info = {reinterpret_cast<void*>(uintptr_t{1}), g->id, g->profile, g->start, g->size};
  return 0;
}
FAKE_API int nvmlGpuInstanceGetComputeInstanceProfileInfo(void* gi, unsigned profile, unsigned eng,
                                                          CiProfileInfo* info) {
  Gi* g = GiOf(gi);
  if (g == nullptr || eng != 0 || profile > 6) return 2;
  static const unsigned kSlices[] = {1, 2, 3, 4, 7, 8, 6};
  std::memset(info, 0, sizeof *info);
  info->id = profile;
  info->sliceCount = kSlices[profile];
  return 0;
}
FAKE_API int nvmlGpuInstanceCreateComputeInstance(void* gi, unsigned, void** ci) {
  Gi* g = GiOf(gi);
  if (g == nullptr || g->has_ci) return 2;
  g->has_ci = true;
  *ci = reinterpret_cast<void*>(kCiBase + (reinterpret_cast<uintptr_t>(gi) - kGiBase));
  return 0;
}
FAKE_API int nvmlComputeInstanceDestroy(void* ci) {
  Gi* g = GiOf(reinterpret_cast<void*>(kGiBase + (reinterpret_cast<uintptr_t>(ci) - kCiBase)));
  if (g == nullptr || !g->has_ci) return 2;
  // FAKE_NVML_BUSY_DESTROYS=N: the next N destroys find the instance in use (a process of the
  // job still exiting); each one counts the variable down.
  const char* busy = std::getenv("FAKE_NVML_BUSY_DESTROYS");
  if (busy != nullptr && std::atoi(busy) > 0) {
    setenv("FAKE_NVML_BUSY_DESTROYS", std::to_string(std::atoi(busy) - 1).c_str(), 1);
    return 19;
  }
  g->has_ci = false;
  return 0;
}
FAKE_API int nvmlGpuInstanceDestroy(void* gi) {
  Gi* g = GiOf(gi);
  if (g == nullptr) return 2;
  if (g->has_ci) return 19;  // in use
  g->alive = false;
  return 0;
}
FAKE_API int nvmlDeviceGetMaxMigDeviceCount(void* device, unsigned* count) {
  *count = Index(device) == 0 ? 7 : 0;
  return 0;
}
FAKE_API int nvmlDeviceGetMigDeviceHandleByIndex(void* device, unsigned index, void** mig) {
  if (Index(device) != 0) return 3;
  unsigned seen = 0;
  for (size_t i = 0; i < g_gis.size(); ++i) {
    if (!g_gis[i].alive || !g_gis[i].has_ci) continue;
    if (seen++ == index) {
      *mig = reinterpret_cast<void*>(kMigBase + i);
      return 0;
    }
  }
  return 6;
}
FAKE_API int nvmlDeviceGetGpuInstanceId(void* mig, unsigned* id) {
  uintptr_t i = reinterpret_cast<uintptr_t>(mig) - kMigBase;
  if (i >= g_gis.size()) return 2;
  *id = g_gis[i].id;
  return 0;
}
// "19@3 0@0": profile id @ start of every live GPU instance with its compute instance.
FAKE_API void fake_nvml_instances(char* out, unsigned length) {
  std::string s;
  for (const Gi& g : g_gis) {
    if (g.alive)
      s += (s.empty() ? "" : " ") + std::to_string(g.profile) + "@" + std::to_string(g.start) +
           (g.has_ci ? "" : "(no ci)");
  }
  Copy(s.empty() ? "-" : s.c_str(), out, length);
}

// ---- Health: ECC counters and XID events (see the header comment) ----
namespace {
struct HealthLine {
  std::string kind;
  unsigned device;
  unsigned long long value;
};
std::vector<HealthLine> ReadHealth() {
  std::vector<HealthLine> out;
  const char* path = std::getenv("FAKE_NVML_HEALTH");
  if (path == nullptr) return out;
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return out;
  char kind[16];
  unsigned device = 0;
  unsigned long long value = 0;
  while (std::fscanf(f, "%15s %u %llu", kind, &device, &value) == 3)
    out.push_back({kind, device, value});
  std::fclose(f);
  return out;
}
struct EventSet {
  unsigned long long types[2] = {0, 0};  // by device
  size_t delivered = 0;                  // xid lines of the file already delivered
};
struct EventData {  // nvmlEventData_t
  void* device;
  unsigned long long eventType, eventData;
  unsigned gpuInstanceId, computeInstanceId;
};
constexpr unsigned long long kXidCritical = 0x8;  // nvmlEventTypeXidCriticalError
}  // namespace

// nvmlDeviceGetTotalEccErrors(device, errorType, counterType, count): uncorrected (1) volatile
// (0) counts come from the file; the rest are 0.
FAKE_API int nvmlDeviceGetTotalEccErrors(void* device, int error_type, int counter_type,
                                         unsigned long long* count) {
  const char* no = std::getenv("FAKE_NVML_NO_ECC");
  if (no != nullptr && no[0] == '1') return 3;  // not supported
  if (Index(device) >= 2 || count == nullptr) return 2;
  *count = 0;
  if (error_type != 1 || counter_type != 0) return 0;
  for (const HealthLine& l : ReadHealth()) {
    if (l.kind == "ecc" && l.device == Index(device)) *count = l.value;
  }
  return 0;
}
FAKE_API int nvmlEventSetCreate(void** set) {
  *set = new EventSet();
  return 0;
}
FAKE_API int nvmlEventSetFree(void* set) {
  delete static_cast<EventSet*>(set);
  return 0;
}
FAKE_API int nvmlDeviceGetSupportedEventTypes(void* device, unsigned long long* types) {
  if (Index(device) >= 2) return 2;
  *types = 0x1 | 0x2 | 0x8;
  return 0;
}
FAKE_API int nvmlDeviceRegisterEvents(void* device, unsigned long long types, void* set) {
  if (Index(device) >= 2 || set == nullptr) return 2;
  static_cast<EventSet*>(set)->types[Index(device)] |= types;
  return 0;
}
// Delivers the next undelivered xid line for a registered device; NVML_ERROR_TIMEOUT (10) after
// `timeout_ms` without one (the file is read again every 10 ms meanwhile).
FAKE_API int nvmlEventSetWait_v2(void* set_handle, EventData* data, unsigned timeout_ms) {
  EventSet* set = static_cast<EventSet*>(set_handle);
  if (set == nullptr || data == nullptr) return 2;
  for (unsigned waited = 0;; waited += 10) {
    std::vector<HealthLine> lines = ReadHealth();
    size_t seen = 0;
    for (const HealthLine& l : lines) {
      if (l.kind != "xid") continue;
      if (seen++ < set->delivered) continue;
      set->delivered = seen;
      if (l.device >= 2 || (set->types[l.device] & kXidCritical) == 0) continue;
      *data = {reinterpret_cast<void*>(static_cast<uintptr_t>(l.device) + 1), kXidCritical, l.value,
               0xFFFFFFFFu, 0xFFFFFFFFu};
      return 0;
    }
    if (waited >= timeout_ms) return 10;  // timeout
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, nullptr);
  }
}

// The last "<kind> <device> <value>" line of the file for that device (0 when none).
namespace {
unsigned long long LastValue(const char* kind, void* device) {
  unsigned long long v = 0;
  for (const HealthLine& l : ReadHealth()) {
    if (l.kind == kind && l.device == Index(device)) v = l.value;
  }
  return v;
}
struct ViolationTime {  // nvmlViolationTime_t
  unsigned long long referenceTime, violationTime;
};
}  // namespace

// nvmlDeviceGetRetiredPagesPendingStatus(device, nvmlEnableState_t* isPending).
FAKE_API int nvmlDeviceGetRetiredPagesPendingStatus(void* device, int* pending) {
  if (Index(device) >= 2 || pending == nullptr) return 2;
  *pending = LastValue("retired", device) != 0 ? 1 : 0;
  return 0;
}
// nvmlDeviceGetRemappedRows(device, corrRows, uncRows, isPending, failureOccurred).
FAKE_API int nvmlDeviceGetRemappedRows(void* device, unsigned* corrected, unsigned* uncorrected,
                                       unsigned* pending, unsigned* failed) {
  if (Index(device) >= 2) return 2;
  *corrected = *uncorrected = 0;
  *pending = LastValue("remap_pending", device) != 0 ? 1u : 0u;
  *failed = LastValue("remap_failed", device) != 0 ? 1u : 0u;
  return 0;
}
// nvmlDeviceGetViolationStatus(device, perfPolicyType, violTime): 0 power, 1 thermal.
FAKE_API int nvmlDeviceGetViolationStatus(void* device, int policy, ViolationTime* t) {
  if (Index(device) >= 2 || t == nullptr || policy < 0) return 2;
  if (policy > 1) return 3;  // not supported here
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  t->referenceTime = static_cast<unsigned long long>(now.tv_sec) * 1000000ULL +
                     static_cast<unsigned long long>(now.tv_nsec) / 1000ULL;
  t->violationTime = LastValue(policy == 1 ? "thermal" : "power", device);
  return 0;
}
