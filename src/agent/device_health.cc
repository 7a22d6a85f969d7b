#include "agent/device_health.h"

#include <dlfcn.h>

#include <type_traits>

namespace tessera::agent {
namespace {

// ---- The NVML declarations used here, written from NVML's public API reference. ----
using NvmlReturn = int;  // nvmlReturn_t; 0 is success
constexpr NvmlReturn kOk = 0;
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
};

}  // namespace

bool IsCriticalXid(unsigned long long xid) { return !XidName(xid).empty(); }

std::string XidName(unsigned long long xid) {
  for (const Xid& x : kCritical) {
    if (x.id == xid) return x.name;
  }
  return "";
}

struct NvmlHealth::Api {
  void* lib = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*count)(unsigned*) = nullptr;
  NvmlReturn (*handle)(unsigned, Handle*) = nullptr;
  NvmlReturn (*ecc)(Handle, int, int, unsigned long long*) = nullptr;  // optional
  NvmlReturn (*set_create)(Handle*) = nullptr;                         // the event calls: optional
  NvmlReturn (*set_free)(Handle) = nullptr;
  NvmlReturn (*register_events)(Handle, unsigned long long, Handle) = nullptr;
  NvmlReturn (*set_wait)(Handle, EventData*, unsigned) = nullptr;
  Handle set = nullptr;
  std::vector<Handle> devices;
  std::vector<DeviceHealth> health;
  ~Api() {
    if (set != nullptr && set_free != nullptr) set_free(set);
    if (shutdown) shutdown();
    if (lib) dlclose(lib);
  }
};

NvmlHealth::NvmlHealth(std::unique_ptr<Api> api) : api_(std::move(api)) {}
NvmlHealth::~NvmlHealth() = default;

Result<std::unique_ptr<NvmlHealth>> NvmlHealth::Open(const std::string& library) {
  auto api = std::make_unique<Api>();
  api->lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api->lib == nullptr) return Status::FailedPrecondition("cannot load NVML '" + library + "'");
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(api->lib, name));
  };
  sym(api->init, "nvmlInit_v2");
  sym(api->shutdown, "nvmlShutdown");
  sym(api->count, "nvmlDeviceGetCount_v2");
  sym(api->handle, "nvmlDeviceGetHandleByIndex_v2");
  sym(api->ecc, "nvmlDeviceGetTotalEccErrors");
  sym(api->set_create, "nvmlEventSetCreate");
  sym(api->set_free, "nvmlEventSetFree");
  sym(api->register_events, "nvmlDeviceRegisterEvents");
  sym(api->set_wait, "nvmlEventSetWait_v2");
  if (!api->init || !api->shutdown || !api->count || !api->handle)
    return Status::FailedPrecondition("NVML '" + library + "' lacks the device calls");
  if (api->init() != kOk) {
    api->shutdown = nullptr;
    return Status::FailedPrecondition("NVML '" + library + "': nvmlInit failed");
  }
  unsigned n = 0;
  if (api->count(&n) != kOk) n = 0;
  for (unsigned i = 0; i < n; ++i) {
    Handle h = nullptr;
    if (api->handle(i, &h) != kOk) h = nullptr;
    api->devices.push_back(h);
    api->health.push_back({static_cast<int>(i), true, ""});
  }
  if (api->set_create && api->set_free && api->register_events && api->set_wait &&
      api->set_create(&api->set) == kOk) {
    bool any = false;
    for (Handle h : api->devices) {
      // A device that supports no XID events (old or virtual GPUs) is read for ECC only.
      any = (h != nullptr && api->register_events(h, kEventXidCritical, api->set) == kOk) || any;
    }
    if (!any) {
      api->set_free(api->set);
      api->set = nullptr;
    }
  }
  return std::unique_ptr<NvmlHealth>(new NvmlHealth(std::move(api)));
}

bool NvmlHealth::events() const { return api_->set != nullptr; }

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
      if (rc == kTimeout || rc != kOk) break;
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
  if (a.ecc != nullptr) {
    for (size_t i = 0; i < a.devices.size(); ++i) {
      unsigned long long errors = 0;
      // Not supported (a card without ECC, or ECC off): nothing to read.
      if (a.devices[i] == nullptr || a.ecc(a.devices[i], kUncorrected, kVolatile, &errors) != kOk ||
          errors == 0)
        continue;
      if (a.health[i].healthy && log != nullptr)
        log->push_back("device " + std::to_string(i) + ": " + std::to_string(errors) +
                       " double-bit ECC error(s) (the device is unhealthy)");
      mark(i, "double-bit ECC errors: " + std::to_string(errors) + " since the driver loaded");
    }
  }
  return a.health;
}

}  // namespace tessera::agent
