// Device health through NVML (libnvidia-ml, opened with dlopen like discovery and MIG): critical
// XID events (nvmlEventSetCreate, nvmlDeviceRegisterEvents with nvmlEventTypeXidCriticalError,
// nvmlEventSetWait_v2) and double-bit ECC errors (nvmlDeviceGetTotalEccErrors: uncorrected,
// volatile, i.e. since the driver last loaded), pages and rows waiting for a reset
// (nvmlDeviceGetRetiredPagesPendingStatus, nvmlDeviceGetRemappedRows: pending, or a failed
// remap), and clocks held back by thermal or power violations (nvmlDeviceGetViolationStatus) for
// at least half of the time between two checks. A device that reports any is unhealthy, with the
// reason; it stays so until an operator's word (Reset, from the control plane's health_reset), a
// clean reset (its volatile ECC counters went down), or the agent starts again and finds it clean.
//
// Which XIDs make a device unhealthy: those NVIDIA's XID catalogue lists as device faults rather
// than an application's own errors (see docs/agent.md, "Device health"): 48 (double-bit ECC),
// 62, 64, 74 (NVLink), 79 (fallen off the bus), 92 (high single-bit ECC rate), 94 and 95
// (contained and uncontained ECC errors), 119 and 120 (GSP), 140 (unrecovered ECC), 154 (GPU
// recovery action changed: a reset or reboot is required). Others (13, 31, 43, 45, 68, 109: a
// program's faults; 63: a remap recorded, its pending reset read below) are logged and change
// nothing.
//
// Tested against the stand-in NVML of tests/agent (fake_nvml.cc); no GPU is needed.
//
// Thread-safety: none; the agent's loop owns it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera::agent {

struct DeviceHealth {
  int index = 0;
  bool healthy = true;
  std::string reason;  // why not, when unhealthy ("XID 79: GPU has fallen off the bus")
};

// Whether XID `xid` marks a device unhealthy (the list above), and its catalogue name ("" when
// not one of them).
bool IsCriticalXid(unsigned long long xid);
std::string XidName(unsigned long long xid);

// What the agent's loop reads device health through: NVML (NvmlHealth, below) on NVIDIA
// devices, AMD SMI (AmdSmiHealth, agent/amd_smi.h) on AMD ones.
class HealthSource {
 public:
  virtual ~HealthSource() = default;
  // Every device's health as of now (see NvmlHealth::Check); `log` (may be null) gets one line
  // per change seen.
  virtual std::vector<DeviceHealth> Check(int wait_ms = 0,
                                          std::vector<std::string>* log = nullptr) = 0;
  // An operator's word: device `index` is healthy again, what it reports now is the baseline.
  virtual bool Reset(int index) = 0;
  // What is read, for the agent's start-up log ("XID events registered, ECC counters").
  virtual std::string Reads() const = 0;
};

class NvmlHealth : public HealthSource {
 public:
  // Loads `library`, initialises NVML and registers every device for XID events where the driver
  // supports them. kFailedPrecondition when the library does not load or initialise.
  static Result<std::unique_ptr<NvmlHealth>> Open(const std::string& library);
  ~NvmlHealth() override;
  NvmlHealth(const NvmlHealth&) = delete;
  NvmlHealth& operator=(const NvmlHealth&) = delete;

  // Takes the XID events waiting (waiting at most `wait_ms` for the first) and reads the ECC
  // counters; returns every device's health. `log` (may be null) gets one line per event seen.
  std::vector<DeviceHealth> Check(int wait_ms = 0,
                                  std::vector<std::string>* log = nullptr) override;
  // Whether XID events could be registered (false: the driver supports none; ECC is still read).
  bool events() const;
  // An operator's word (the control plane's `health_reset`): device `index` is healthy again and
  // the next Check takes what it reads as the new baseline (the ECC count, pending retirements
  // and remaps acknowledged); only a new fault makes it unhealthy again. False: no such device.
  bool Reset(int index) override;
  std::string Reads() const override {
    return std::string("XID events ") + (events() ? "registered" : "not supported") +
           ", ECC counters";
  }

 private:
  struct Api;
  explicit NvmlHealth(std::unique_ptr<Api> api);
  void CheckSignals(size_t i, std::vector<std::string>* log);
  std::unique_ptr<Api> api_;
};

}  // namespace tessera::agent
