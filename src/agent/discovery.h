// Discovery: what a node agent reports about its host.
//
// Four sources, tried in this order by DiscoverInventory():
//   * a declared simulated inventory (`--simulate 2xH100-80GB`), for hosts with no accelerator.
//     Every device and the inventory itself are marked `simulated`, so no view can mistake them
//     for real cards. Models must be in the partition catalog; memory comes from the catalog;
//     UUIDs are `GPU-sim-<node>-<i>`.
//   * NVML, loaded with dlopen("libnvidia-ml.so.1") at run time. There is no link-time
//     dependency, so the agent runs on hosts without the NVIDIA driver; there the answer is a
//     kFailedPrecondition status whose message starts with "no NVML".
//   * AMD SMI (agent/amd_smi.h), loaded with dlopen("libamd_smi.so") the same way, when NVML
//     finds no device: AMD GPUs with their current compute and memory modes.
//   * none of them: a CPU-only node (no devices).
// Host CPU comes from sysconf and the cgroup CPU quota (v2 cpu.max or v1 cfs quota), host memory
// from /proc/meminfo (bounded by a cgroup memory limit when one is set).
//
// Thread-safety: free functions; ParseSimulatedInventory and the parsers are pure. DiscoverNvml
// initialises and shuts NVML down around each call; do not call it from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "model/resources.h"
#include "partition/catalog.h"

namespace tessera::agent {

// One accelerator as the agent reports it at registration.
struct DiscoveredDevice {
  int index = 0;
  std::string model;   // a catalog name when known, else the driver's name
  MiB memory_mib = 0;  // total device memory
  std::string uuid;    // "GPU-..." (NVML) or "GPU-sim-<node>-<i>" (simulated)
  bool simulated = false;
  bool mig_enabled = false;  // NVML: current MIG mode is enabled
  std::string amd_mode{};    // AMD SMI: the modes found, "CPX+NPS4" ("" elsewhere)
  // Health (agent/device_health.h), as of the last check: unhealthy takes no new work.
  bool healthy = true;
  std::string health_reason{};  // why not, when unhealthy
  // The isolation this agent puts between co-resident work on the device (IsolationGrade):
  // "hardware" (MIG on: every grant is an instance of its own), "preload" (shares capped by the
  // cap library alone) or "none" (shares uncapped: the agent has no cap library).
  std::string isolation{};
  // It offers MPS for sm-sharing shares (set by the agent: an MPS control program, and the
  // device NVIDIA and not MIG-partitioned; agent/mps.h). Such a share gets the grade "mps".
  bool mps = false;
};

// The device's isolation grade as this agent enforces it (see DiscoveredDevice::isolation):
// hardware partitions when MIG is on, else the cap library when the agent has one.
std::string IsolationGrade(const DiscoveredDevice& device, bool cap_library);
// Whether `path` is a cap library the agent can preload into shares: an existing, readable ELF
// shared library of this machine's class and architecture (not a program: no interpreter). It is
// not loaded here (its hooks are for jobs). An error naming the path and what is wrong otherwise.
Status CheckCapLibrary(const std::string& path);

struct HostResources {
  MilliCpu cpu_milli = 0;
  MiB memory_mib = 0;
};

struct Inventory {
  std::string node;
  std::string pool;  // the scheduling pool it registers into; "" = the control plane's "default"
  HostResources host;
  std::vector<DiscoveredDevice> devices;
  bool simulated = false;  // true when the devices were declared, not discovered
  std::string source;      // "simulated", "nvml", "amdsmi" or "none"
  std::string note;        // why there are no devices ("no NVML: ...; no AMD SMI: ..."), or empty
  MiB swap_mib = 0;        // host RAM + disk it gives swapped-out share memory (0: none)
};

// Parses a simulated inventory spec: comma-separated `<count>x<model>` items, e.g.
// "2xH100-80GB" or "1xMI300X,4xA100-40GB" (a bare model means one device). Device indexes run in
// the spec's order. Errors (kInvalidArgument) quote the offending item and, for unknown models,
// list the catalog's names. REQUIRES: `node` non-empty (it goes into the UUIDs).
Result<std::vector<DiscoveredDevice>> ParseSimulatedInventory(std::string_view spec,
                                                              std::string_view node,
                                                              const partition::Catalog& catalog);

// Enumerates NVIDIA devices through NVML loaded from `library` (dlopen). When the library
// cannot be loaded or NVML does not initialise, returns kFailedPrecondition "no NVML: <why>".
Result<std::vector<DiscoveredDevice>> DiscoverNvml(
    const partition::Catalog& catalog, const std::string& library = "libnvidia-ml.so.1");

// Device telemetry through NVML, loaded once and kept initialised while the sampler lives.
struct NvmlSample {
  int index = 0;
  int util_pct = -1;               // nvmlDeviceGetUtilizationRates().gpu: SM busy, percent
  int64_t memory_used_bytes = -1;  // nvmlDeviceGetMemoryInfo().used
  // Compute processes on the device (nvmlDeviceGetComputeRunningProcesses_v3; on a MIG-enabled
  // device, what the driver lets this process see) and their device memory.
  std::vector<std::pair<int, int64_t>> processes;  // pid, bytes
};
class NvmlSampler {
 public:
  // kFailedPrecondition when the library does not load or initialise.
  static Result<std::unique_ptr<NvmlSampler>> Open(
      const std::string& library = "libnvidia-ml.so.1");
  ~NvmlSampler();
  NvmlSampler(const NvmlSampler&) = delete;
  NvmlSampler& operator=(const NvmlSampler&) = delete;
  // One sample per device; a device whose calls fail keeps -1 there.
  std::vector<NvmlSample> Sample();

 private:
  NvmlSampler() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Maps a driver name ("NVIDIA H100 80GB HBM3") and its memory to a catalog model name: an exact
// name/alias match first, then the catalog model whose family ("H100") is a word of the name and
// whose memory is closest. Returns "" when nothing matches.
std::string MatchCatalogModel(std::string_view driver_name, MiB memory_mib,
                              const partition::Catalog& catalog);

// Host CPU and memory of this process's view: online CPUs bounded by the cgroup CPU quota,
// MemTotal bounded by the cgroup memory limit.
HostResources DiscoverHost();

// Parsers behind DiscoverHost, pure for tests.
// cgroup v2 cpu.max ("max 100000" or "150000 100000"): milli-CPUs, or 0 when unlimited/garbled.
MilliCpu ParseCgroupCpuMax(std::string_view text);
// /proc/meminfo text: MemTotal in MiB, or 0 when absent.
MiB ParseMemInfoTotal(std::string_view text);

// The whole inventory: simulated when `simulate_spec` is non-empty (errors are returned), else
// NVML's devices, else (NVML absent or without devices) AMD SMI's; the absence of both is
// recorded in `note`, not an error. Plus the host resources.
Result<Inventory> DiscoverInventory(std::string_view node, std::string_view simulate_spec,
                                    const std::string& nvml_library = "libnvidia-ml.so.1",
                                    const std::string& amdsmi_library = "libamd_smi.so");

}  // namespace tessera::agent
