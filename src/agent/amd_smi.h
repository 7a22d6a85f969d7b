// AMD Instinct devices through AMD SMI (libamd_smi.so, opened with dlopen at run time like NVML:
// no link-time dependency, so the agent runs on hosts without ROCm).
//
// The interface followed is the AMD SMI C library's public header, amd_smi/amdsmi.h, as of
// AMDSMI_LIB_VERSION 24.6 (ROCm 6.2), whose calls and leading struct fields are unchanged in the
// 25.x headers. Only the calls and fields used are declared (amd_smi.cc), handles as void*:
//   * inventory: amdsmi_init(AMDSMI_INIT_AMD_GPUS), amdsmi_get_socket_handles,
//     amdsmi_get_processor_handles, amdsmi_get_gpu_asic_info (its leading market_name),
//     amdsmi_get_gpu_device_uuid, amdsmi_get_gpu_memory_total(AMDSMI_MEM_TYPE_VRAM), and the
//     modes amdsmi_get_gpu_compute_partition ("SPX", "DPX", "TPX", "QPX", "CPX") and
//     amdsmi_get_gpu_memory_partition ("NPS1", "NPS2", "NPS4", "NPS8");
//   * changes: amdsmi_set_gpu_compute_partition and amdsmi_set_gpu_memory_partition;
//   * health: amdsmi_get_gpu_total_ecc_count (amdsmi_error_count_t's uncorrectable_count);
//   * optional: amdsmi_get_gpu_kfd_info (current_partition_id: in a split compute mode AMD SMI
//     lists each partition as a processor; those with a partition id other than 0 belong to the
//     device before them and are not devices of their own), amdsmi_status_code_to_string.
// A device is named by its UUID: handles are enumerated anew before a mode change and after one
// (a compute mode change changes the processors listed; a memory mode change reloads the driver,
// so the library is shut down and initialised again), and when a read fails on a handle (one
// from before a reload another user of the library made).
//
// Tested against the stand-in library of tests/agent (fake_amdsmi.cc); no GPU is needed.
//
// Thread-safety: none; one owner at a time (discovery, the agent loop's partitions or health).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "agent/device_health.h"
#include "agent/discovery.h"
#include "common/status.h"
#include "partition/amd.h"
#include "partition/catalog.h"

namespace tessera::agent {

// One AMD GPU as AMD SMI reports it.
struct AmdSmiDevice {
  std::string market_name;  // "AMD Instinct MI300X"
  std::string uuid;
  uint64_t vram_bytes = 0;
  partition::AmdPair modes;  // {"", ""} where the device reports none (not partitionable)
};

class AmdSmi {
 public:
  // Loads `library` and initialises AMD SMI for AMD GPUs. kFailedPrecondition starting
  // "no AMD SMI: " when it cannot.
  static Result<std::unique_ptr<AmdSmi>> Open(const std::string& library);
  ~AmdSmi();
  AmdSmi(const AmdSmi&) = delete;
  AmdSmi& operator=(const AmdSmi&) = delete;

  // Every GPU (one per physical device), in AMD SMI's order.
  Result<std::vector<AmdSmiDevice>> Devices();
  // The current compute and memory modes of the GPU `uuid`, read anew.
  Result<partition::AmdPair> Modes(const std::string& uuid);
  // amdsmi_set_gpu_compute_partition / amdsmi_set_gpu_memory_partition on the GPU `uuid`; an
  // error names the device, the call and AMD SMI's status. They do not check that it took.
  Status SetCompute(const std::string& uuid, const std::string& mode);
  Status SetMemory(const std::string& uuid, const std::string& mode);
  struct EccCount {
    uint64_t correctable = 0;
    uint64_t uncorrectable = 0;
  };
  // amdsmi_get_gpu_total_ecc_count; kNotFound where the library or device has no such count.
  Result<EccCount> Ecc(const std::string& uuid);

 private:
  struct Api;
  explicit AmdSmi(std::unique_ptr<Api> api);
  Result<void*> Find(const std::string& uuid);
  // `call` on the GPU's handle (an amdsmi_status_t), made once more with the handles enumerated
  // anew when it fails otherwise than "not supported" (a handle from before a driver reload).
  Result<uint32_t> Read(const std::string& uuid, const std::function<uint32_t(void*)>& call);
  // `set` (amdsmi_set_gpu_compute_partition or _memory_partition) on the GPU's handle as of now,
  // with the value of `mode` among `modes` (AMD SMI's values, by index); the handles are listed
  // anew after. kInvalidArgument naming the `kind` of mode where `modes` lacks it; else `set`'s
  // status (an amdsmi_status_t).
  Result<uint32_t> SetMode(const std::string& uuid, const std::string& mode,
                           std::span<const char* const> modes, const char* kind,
                           const std::function<uint32_t(void*, int)>& set);
  std::unique_ptr<Api> api_;
};

// Enumerates AMD GPUs through AMD SMI loaded from `library`: the market name mapped to the
// catalog's model (MatchCatalogModel), the UUID, the VRAM, and the current modes (amd_mode,
// "CPX+NPS4"). kFailedPrecondition "no AMD SMI: <why>" when the library does not load or
// initialise.
Result<std::vector<DiscoveredDevice>> DiscoverAmdSmi(const partition::Catalog& catalog,
                                                     const std::string& library = "libamd_smi.so");

// Device health through AMD SMI: a device whose uncorrectable ECC count (since the driver
// loaded) is above its baseline is unhealthy, with the count as the reason. The baseline is 0,
// the count an operator's word acknowledged (Reset), or 0 again after a clean reset (the count
// went down). Devices are the inventory's, by UUID, in its order.
class AmdSmiHealth : public HealthSource {
 public:
  static Result<std::unique_ptr<AmdSmiHealth>> Open(const std::string& library,
                                                    std::vector<std::string> uuids);
  std::vector<DeviceHealth> Check(int wait_ms = 0,
                                  std::vector<std::string>* log = nullptr) override;
  bool Reset(int index) override;
  std::string Reads() const override { return "uncorrectable ECC counts (AMD SMI)"; }

 private:
  AmdSmiHealth(std::unique_ptr<AmdSmi> smi, std::vector<std::string> uuids);
  std::unique_ptr<AmdSmi> smi_;
  std::vector<std::string> uuids_;
  std::vector<DeviceHealth> health_;
  struct Seen {
    uint64_t count = 0, base = 0;
    bool restart = false;
  };
  std::vector<Seen> seen_;
};

}  // namespace tessera::agent
