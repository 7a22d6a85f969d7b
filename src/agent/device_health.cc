#include "agent/device_health.h"

#include <algorithm>

#include "agent/nvml_library.h"

namespace tessera::agent {
namespace {

// ---- The NVML declarations used here, written from NVML's public API reference. ----
constexpr NvmlReturn kTimeout = 10;  // NVML_ERROR_TIMEOUT
using Handle = void*;                // nvmlDevice_t, nvmlEventSet_t: opaque pointers
struct EventData {                   // nvmlEventData_t
  Handle device;
  unsigned long long eventType;
  unsigned long long eventData;  // the XID, for nvmlEventTypeXidCriticalError
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
constexpr unsigned long long kEventXidCritical = 0x8;  // nvmlEventTypeXidCriticalError
constexpr int kUncorrected = 1;                        // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
constexpr int kVolatile = 0;                           // NVML_VOLATILE_ECC
constexpr int kMaxEventsPerCheck = 256;
struct ViolationTime {               // nvmlViolationTime_t
  unsigned long long referenceTime;  // a CPU timestamp, microseconds
  unsigned long long violationTime;  // nanoseconds held back, cumulative
};
constexpr int kPolicyPower = 0;    // NVML_PERF_POLICY_POWER
constexpr int kPolicyThermal = 1;  // NVML_PERF_POLICY_THERMAL
// Clocks held back (thermal or power) for at least this share of the time between two checks
// make the device unhealthy: a short cap now and then is normal, most of the time is not.
constexpr unsigned long long kViolationPct = 50;

struct Xid {
  unsigned long long id;
  const char* name;
};
// NVIDIA's XID catalogue: the device faults (see the header).
constexpr Xid kCritical[] = {
    {48, "double-bit ECC error"},
    {62, "internal micro-controller halt"},
    {64, "ECC page retirement or row remapping failure"},
    {74, "NVLink error"},
    {79, "GPU has fallen off the bus"},
    {92, "high single-bit ECC error rate"},
    {94, "contained ECC error"},
    {95, "uncontained ECC error"},
    {119, "GSP RPC timeout"},
    {120, "GSP error"},
    {140, "unrecovered ECC error"},
    // r550 and later: the driver's recovery action for the GPU changed from none (a GPU reset
    // or a node reboot is required).
    {154, "GPU recovery action changed: it needs a reset or a reboot"},
};

}  // namespace

bool IsCriticalXid(unsigned long long xid) { return !XidName(xid).empty(); }

std::string XidName(unsigned long long xid) {
  for (const Xid& x : kCritical) {
    if (x.id == xid) return x.name;
  }
  return "";
}

// The NVML calls health checks make: X(member, symbol, required, return type, parameters), the one
// list the members of Api and their binding come from (agent/dynamic_library.h).
#define TESSERA_NVML_HEALTH_CALLS(X)                                                             \
  X(init, "nvmlInit_v2", true, NvmlReturn, ())                                                   \
  X(shutdown, "nvmlShutdown", true, NvmlReturn, ())                                              \
  X(count, "nvmlDeviceGetCount_v2", true, NvmlReturn, (unsigned*))                               \
  X(handle, "nvmlDeviceGetHandleByIndex_v2", true, NvmlReturn, (unsigned, Handle*))              \
  X(ecc, "nvmlDeviceGetTotalEccErrors", false, NvmlReturn,                                       \
    (Handle, int, int, unsigned long long*))                                                     \
  X(set_create, "nvmlEventSetCreate", false, NvmlReturn, (Handle*))                              \
  X(set_free, "nvmlEventSetFree", false, NvmlReturn, (Handle))                                   \
  X(register_events, "nvmlDeviceRegisterEvents", false, NvmlReturn,                              \
    (Handle, unsigned long long, Handle))                                                        \
  X(set_wait, "nvmlEventSetWait_v2", false, NvmlReturn, (Handle, EventData*, unsigned))          \
  X(violation, "nvmlDeviceGetViolationStatus", false, NvmlReturn, (Handle, int, ViolationTime*)) \
  X(retired_pending, "nvmlDeviceGetRetiredPagesPendingStatus", false, NvmlReturn,                \
    (Handle, int*)) /* nvmlEnableState_t */                                                      \
  X(remapped, "nvmlDeviceGetRemappedRows", false, NvmlReturn,                                    \
    (Handle, unsigned*, unsigned*, unsigned*, unsigned*))

struct NvmlHealth::Api {
  TESSERA_LIBRARY_API(Api, TESSERA_NVML_HEALTH_CALLS)
  Handle set = nullptr;
  std::vector<Handle> devices;
  std::vector<DeviceHealth> health;
  // What each device said before: the baselines of counters and the signals an operator's word
  // (Reset) acknowledged.
  struct Seen {
    unsigned long long ecc = 0, ecc_base = 0;
    ViolationTime viol[2] = {{0, 0}, {0, 0}};  // by policy; referenceTime 0: not read yet
    bool retired_ack = false, remap_pending_ack = false, remap_failed_ack = false;
    bool restart = false;  // Reset: take what the next check reads as the new baseline
  };
  std::vector<Seen> seen;
  ~Api() {
    if (set != nullptr && set_free != nullptr) set_free(set);
    if (shutdown) shutdown();
  }
};

NvmlHealth::NvmlHealth(std::unique_ptr<Api> api) : api_(std::move(api)) {}
NvmlHealth::~NvmlHealth() = default;

Result<std::unique_ptr<NvmlHealth>> NvmlHealth::Open(const std::string& library) {
  auto opened = OpenNvml<Api>(library, "the device calls");
  if (!opened.ok()) return opened.status();
  std::unique_ptr<Api> api = std::move(*opened);
  unsigned n = 0;
  if (api->count(&n) != kNvmlSuccess) n = 0;
  for (unsigned i = 0; i < n; ++i) {
    Handle h = nullptr;
    if (api->handle(i, &h) != kNvmlSuccess) h = nullptr;
    api->devices.push_back(h);
    api->health.push_back({static_cast<int>(i), true, ""});
    api->seen.emplace_back();
  }
  if (api->set_create && api->set_free && api->register_events && api->set_wait &&
      api->set_create(&api->set) == kNvmlSuccess) {
    bool any = false;
    for (Handle h : api->devices) {
      // A device that supports no XID events (old or virtual GPUs) is read for ECC only.
      any =
          (h != nullptr && api->register_events(h, kEventXidCritical, api->set) == kNvmlSuccess) ||
          any;
    }
    if (!any) {
      api->set_free(api->set);
      api->set = nullptr;
    }
  }
  return std::unique_ptr<NvmlHealth>(new NvmlHealth(std::move(api)));
}

bool NvmlHealth::events() const { return api_->set != nullptr; }

bool NvmlHealth::Reset(int index) {
  Api& a = *api_;
  if (index < 0 || index >= static_cast<int>(a.health.size())) return false;
  a.health[index].healthy = true;
  a.health[index].reason.clear();
  a.seen[index].restart = true;
  return true;
}

// Device i's counters and states (each read only where the driver supports it): ECC, pages and
// rows waiting for a reset, thermal and power violations.
void NvmlHealth::CheckSignals(size_t i, std::vector<std::string>* log) {
  Api& a = *api_;
  Api::Seen& s = a.seen[i];
  const Handle dev = a.devices[i];
  const std::string name = "device " + std::to_string(i) + ": ";
  auto mark = [&](const std::string& reason, const std::string& said = "") {
    if (!a.health[i].healthy) return;
    if (log != nullptr)
      log->push_back(name + (said.empty() ? reason : said) + " (the device is unhealthy)");
    a.health[i].healthy = false;
    a.health[i].reason = reason;
  };
  const bool restart = s.restart;
  s.restart = false;
  unsigned long long errors = 0;
  // Not supported (a card without ECC, or ECC off): nothing to read.
  if (a.ecc != nullptr && a.ecc(dev, kUncorrected, kVolatile, &errors) == kNvmlSuccess) {
    if (errors < s.ecc) {
      // The volatile counters went down: the GPU was reset or the driver reloaded, cleanly.
      s.ecc_base = 0;
      if (!a.health[i].healthy) {
        a.health[i].healthy = true;
        a.health[i].reason.clear();
        if (log != nullptr) log->push_back(name + "ECC counters cleared (a reset): healthy again");
      }
    }
    s.ecc = errors;
    if (restart) s.ecc_base = errors;
    if (errors > s.ecc_base)
      mark("double-bit ECC errors: " + std::to_string(errors) + " since the driver loaded",
           std::to_string(errors) + " double-bit ECC error(s)");
  }
  // A state the operator acknowledged (Reset) marks again only once it cleared and came back.
  auto state = [&](bool on, bool& ack, const std::string& reason) {
    if (restart) ack = on;
    if (!on) ack = false;
    if (on && !ack) mark(reason);
  };
  int pending = 0;
  if (a.retired_pending != nullptr && a.retired_pending(dev, &pending) == kNvmlSuccess)
    state(pending == 1, s.retired_ack, "retired pages pending: the device needs a reset");
  unsigned corrected = 0, uncorrected = 0, remap_pending = 0, remap_failed = 0;
  if (a.remapped != nullptr &&
      a.remapped(dev, &corrected, &uncorrected, &remap_pending, &remap_failed) == kNvmlSuccess) {
    state(remap_pending != 0, s.remap_pending_ack,
          "row remapping pending: the device needs a reset");
    state(remap_failed != 0, s.remap_failed_ack, "row remapping failed");
  }
  for (int policy : {kPolicyThermal, kPolicyPower}) {
    ViolationTime now{0, 0};
    if (a.violation == nullptr || a.violation(dev, policy, &now) != kNvmlSuccess) continue;
    ViolationTime& before = s.viol[policy];
    // Cumulative since boot: the first read is a starting point; a counter that went back (a
    // reset) starts over.
    if (before.referenceTime != 0 && now.referenceTime > before.referenceTime &&
        now.violationTime >= before.violationTime && !restart) {
      const unsigned long long span_us = now.referenceTime - before.referenceTime;
      const unsigned long long held_ns = now.violationTime - before.violationTime;
      // held_ns / (span_us * 1000) as a percentage, exactly, at most 100.
      const unsigned long long pct = std::min<unsigned long long>(100, held_ns / (span_us * 10));
      if (pct >= kViolationPct)
        mark(std::string(policy == kPolicyThermal ? "thermal" : "power") +
             " violation: clocks held back " + std::to_string(pct) + "% of the last " +
             std::to_string((span_us + 999) / 1000) + " ms");
    }
    before = now;
  }
}

std::vector<DeviceHealth> NvmlHealth::Check(int wait_ms, std::vector<std::string>* log) {
  Api& a = *api_;
  auto mark = [&](size_t i, const std::string& reason) {
    if (!a.health[i].healthy) return;
    a.health[i].healthy = false;
    a.health[i].reason = reason;
  };
  if (a.set != nullptr) {
    for (int k = 0; k < kMaxEventsPerCheck; ++k) {
      EventData e{};
      const NvmlReturn rc = a.set_wait(a.set, &e, k == 0 ? static_cast<unsigned>(wait_ms) : 0);
      if (rc == kTimeout || rc != kNvmlSuccess) break;
      if ((e.eventType & kEventXidCritical) == 0) continue;
      size_t i = 0;
      while (i < a.devices.size() && a.devices[i] != e.device) ++i;
      const std::string name = XidName(e.eventData);
      const std::string line =
          "XID " + std::to_string(e.eventData) + (name.empty() ? "" : ": ") + name;
      if (log != nullptr)
        log->push_back("device " + (i < a.devices.size() ? std::to_string(i) : "?") + ": " + line +
                       (name.empty() ? " (an application's error: the device stays healthy)"
                                     : " (the device is unhealthy)"));
      if (i < a.devices.size() && !name.empty()) mark(i, line);
    }
  }
  for (size_t i = 0; i < a.devices.size(); ++i) {
    if (a.devices[i] != nullptr) CheckSignals(i, log);
  }
  return a.health;
}

}  // namespace tessera::agent
