#include "agent/amd_smi.h"

#include <cctype>
#include <cstring>
#include <functional>
#include <span>

#include "agent/dynamic_library.h"

namespace tessera::agent {
namespace {

// ---- The AMD SMI declarations used here, written from amd_smi/amdsmi.h (24.6). ----
using Smi = uint32_t;  // amdsmi_status_t; AMDSMI_STATUS_SUCCESS is 0
constexpr Smi kSuccess = 0;
constexpr Smi kNotSupported = 2;                 // AMDSMI_STATUS_NOT_SUPPORTED
constexpr uint64_t kInitAmdGpus = 1u << 1;       // AMDSMI_INIT_AMD_GPUS
constexpr int kMemTypeVram = 0;                  // AMDSMI_MEM_TYPE_VRAM
constexpr unsigned kUuidSize = 38;               // AMDSMI_GPU_UUID_SIZE
constexpr unsigned kPartitionString = 32;        // the modes are short strings ("CPX")
constexpr uint32_t kNoPartitionId = 0xFFFFFFFF;  // amdsmi_kfd_info_t: not supported
using Handle = void*;                            // amdsmi_socket_handle, amdsmi_processor_handle
// amdsmi_asic_info_t begins with `char market_name[AMDSMI_256_LENGTH]` (24.6; 64 bytes in
// later headers, the fields after it shift): only market_name is read, from a buffer larger
// than either layout's whole struct.
union AsicInfo {
  char market_name[256];
  unsigned char whole[2048];
};
struct ErrorCount {  // amdsmi_error_count_t
  uint64_t correctable_count;
  uint64_t uncorrectable_count;
  uint64_t deferred_count;
  uint64_t reserved[5];
};
struct KfdInfo {  // amdsmi_kfd_info_t (25.x)
  uint64_t kfd_id;
  uint32_t node_id;
  uint32_t current_partition_id;
  uint32_t reserved[12];
};
// amdsmi_compute_partition_type_t and amdsmi_memory_partition_type_t: index = value.
constexpr const char* kComputeModes[] = {"", "CPX", "SPX", "DPX", "TPX", "QPX"};
constexpr const char* kMemoryModes[] = {"", "NPS1", "NPS2", "NPS4", "NPS8"};

std::string Clean(const char* s, size_t max) {
  std::string out(s, strnlen(s, max));
  while (!out.empty() && std::isspace(static_cast<unsigned char>(out.back()))) out.pop_back();
  size_t b = 0;
  while (b < out.size() && std::isspace(static_cast<unsigned char>(out[b]))) ++b;
  out.erase(0, b);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

// The AMD SMI calls made here: X(member, symbol, required, return type, parameters), the one list
// the members of Api and their binding come from (agent/dynamic_library.h).
#define TESSERA_AMD_SMI_CALLS(X)                                                           \
  X(init, "amdsmi_init", true, Smi, (uint64_t))                                            \
  X(shut_down, "amdsmi_shut_down", true, Smi, ())                                          \
  X(sockets, "amdsmi_get_socket_handles", true, Smi, (uint32_t*, Handle*))                 \
  X(processors, "amdsmi_get_processor_handles", true, Smi, (Handle, uint32_t*, Handle*))   \
  X(asic_info, "amdsmi_get_gpu_asic_info", true, Smi, (Handle, AsicInfo*))                 \
  X(uuid, "amdsmi_get_gpu_device_uuid", true, Smi, (Handle, unsigned*, char*))             \
  X(memory_total, "amdsmi_get_gpu_memory_total", true, Smi, (Handle, int, uint64_t*))      \
  X(get_compute, "amdsmi_get_gpu_compute_partition", true, Smi, (Handle, char*, uint32_t)) \
  X(set_compute, "amdsmi_set_gpu_compute_partition", true, Smi, (Handle, int))             \
  X(get_memory, "amdsmi_get_gpu_memory_partition", true, Smi, (Handle, char*, uint32_t))   \
  X(set_memory, "amdsmi_set_gpu_memory_partition", true, Smi, (Handle, int))               \
  X(ecc, "amdsmi_get_gpu_total_ecc_count", false, Smi, (Handle, ErrorCount*))              \
  X(kfd_info, "amdsmi_get_gpu_kfd_info", false, Smi, (Handle, KfdInfo*))                   \
  X(status_string, "amdsmi_status_code_to_string", false, Smi, (Smi, const char**))

struct AmdSmi::Api {
  TESSERA_LIBRARY_API(Api, TESSERA_AMD_SMI_CALLS)
  bool initialised = false;
  std::vector<std::pair<std::string, Handle>> devices;  // by UUID; empty: enumerate again

  std::string Describe(Smi rc) const {
    const char* s = nullptr;
    if (status_string != nullptr && status_string(rc, &s) != kSuccess) s = nullptr;
    return std::string(s != nullptr ? s : "AMD SMI error") + " (status " + std::to_string(rc) + ")";
  }
  std::string Uuid(Handle h) const {
    char buf[kUuidSize + 26] = {};
    unsigned n = sizeof buf;
    if (uuid(h, &n, buf) != kSuccess) return "";
    buf[sizeof buf - 1] = '\0';
    return std::string(buf, strnlen(buf, sizeof buf));
  }
  // The processors AMD SMI lists that are devices of their own, with their UUIDs.
  Status Enumerate() {
    devices.clear();
    uint32_t n = 0;
    if (Smi rc = sockets(&n, nullptr); rc != kSuccess)
      return Status::Internal("AMD SMI amdsmi_get_socket_handles: " + Describe(rc));
    std::vector<Handle> socks(n);
    if (n > 0) {
      if (Smi rc = sockets(&n, socks.data()); rc != kSuccess)
        return Status::Internal("AMD SMI amdsmi_get_socket_handles: " + Describe(rc));
      socks.resize(n);
    }
    for (Handle s : socks) {
      uint32_t m = 0;
      if (Smi rc = processors(s, &m, nullptr); rc != kSuccess)
        return Status::Internal("AMD SMI amdsmi_get_processor_handles: " + Describe(rc));
      std::vector<Handle> procs(m);
      if (m > 0) {
        if (Smi rc = processors(s, &m, procs.data()); rc != kSuccess)
          return Status::Internal("AMD SMI amdsmi_get_processor_handles: " + Describe(rc));
        procs.resize(m);
      }
      for (Handle p : procs) {
        KfdInfo kfd{};
        // A secondary partition of a device in a split compute mode: not a device of its own.
        if (kfd_info != nullptr && kfd_info(p, &kfd) == kSuccess && kfd.current_partition_id != 0 &&
            kfd.current_partition_id != kNoPartitionId)
          continue;
        std::string id = Uuid(p);
        if (id.empty()) return Status::Internal("AMD SMI amdsmi_get_gpu_device_uuid failed");
        devices.push_back({id, p});
      }
    }
    return Status::Ok();
  }
  ~Api() {
    if (initialised && shut_down != nullptr) shut_down();
  }
};

AmdSmi::AmdSmi(std::unique_ptr<Api> api) : api_(std::move(api)) {}
AmdSmi::~AmdSmi() = default;

Result<std::unique_ptr<AmdSmi>> AmdSmi::Open(const std::string& library) {
  auto api = std::make_unique<Api>(library);
  if (!api->lib.loaded())
    return Status::FailedPrecondition("no AMD SMI: cannot load " + library + ": " +
                                      api->lib.error());
  if (!api->BindCalls())
    return Status::FailedPrecondition("no AMD SMI: " + library + " lacks the GPU calls");
  if (Smi rc = api->init(kInitAmdGpus); rc != kSuccess)
    return Status::FailedPrecondition("no AMD SMI: amdsmi_init failed: " + api->Describe(rc));
  api->initialised = true;
  return std::unique_ptr<AmdSmi>(new AmdSmi(std::move(api)));
}

Result<void*> AmdSmi::Find(const std::string& uuid) {
  Api& a = *api_;
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (const auto& [id, h] : a.devices)
      if (id == uuid) return h;
    if (Status st = a.Enumerate(); !st.ok()) return st;  // enumerated anew: look once more
  }
  return Status::NotFound("AMD SMI lists no GPU " + uuid);
}

Result<std::vector<AmdSmiDevice>> AmdSmi::Devices() {
  Api& a = *api_;
  if (Status st = a.Enumerate(); !st.ok()) return st;
  std::vector<AmdSmiDevice> out;
  for (const auto& [id, h] : a.devices) {
    AmdSmiDevice d;
    d.uuid = id;
    AsicInfo info{};
    if (Smi rc = a.asic_info(h, &info); rc != kSuccess)
      return Status::Internal("AMD SMI amdsmi_get_gpu_asic_info on " + id + ": " + a.Describe(rc));
    info.market_name[sizeof info.market_name - 1] = '\0';
    d.market_name = std::string(info.market_name, strnlen(info.market_name, 255));
    if (Smi rc = a.memory_total(h, kMemTypeVram, &d.vram_bytes); rc != kSuccess)
      return Status::Internal("AMD SMI amdsmi_get_gpu_memory_total on " + id + ": " +
                              a.Describe(rc));
    auto modes = Modes(id);
    if (!modes.ok()) return modes.status();
    d.modes = *modes;
    out.push_back(std::move(d));
  }
  return out;
}

Result<uint32_t> AmdSmi::Read(const std::string& uuid, const std::function<uint32_t(void*)>& call) {
  auto h = Find(uuid);
  if (!h.ok()) return h.status();
  const Smi rc = call(*h);
  if (rc == kSuccess || rc == kNotSupported) return rc;
  // The handle may be stale (the driver reloaded, perhaps for another user of the library):
  // once more, with the processors enumerated anew.
  api_->devices.clear();
  h = Find(uuid);
  if (!h.ok()) return h.status();
  return call(*h);
}

Result<partition::AmdPair> AmdSmi::Modes(const std::string& uuid) {
  Api& a = *api_;
  partition::AmdPair pair;
  char buf[kPartitionString] = {};
  auto read = Read(uuid, [&](void* h) { return a.get_compute(h, buf, sizeof buf); });
  if (!read.ok()) return read.status();
  Smi rc = *read;
  if (rc == kSuccess) {
    pair.compute = Clean(buf, sizeof buf);
  } else if (rc != kNotSupported) {
    return Status::Internal("AMD SMI amdsmi_get_gpu_compute_partition on " + uuid + ": " +
                            a.Describe(rc));
  }
  std::memset(buf, 0, sizeof buf);
  read = Read(uuid, [&](void* h) { return a.get_memory(h, buf, sizeof buf); });
  if (!read.ok()) return read.status();
  rc = *read;
  if (rc == kSuccess) {
    pair.memory = Clean(buf, sizeof buf);
  } else if (rc != kNotSupported) {
    return Status::Internal("AMD SMI amdsmi_get_gpu_memory_partition on " + uuid + ": " +
                            a.Describe(rc));
  }
  return pair;
}

Result<uint32_t> AmdSmi::SetMode(const std::string& uuid, const std::string& mode,
                                 std::span<const char* const> modes, const char* kind,
                                 const std::function<uint32_t(void*, int)>& set) {
  int value = 0;
  for (int i = 1; i < static_cast<int>(modes.size()); ++i)
    if (mode == modes[i]) value = i;
  if (value == 0)
    return Status::InvalidArgument("AMD SMI has no " + std::string(kind) + " mode '" + mode + "'");
  api_->devices.clear();  // a handle as of now: another user of the library may have reloaded it
  auto h = Find(uuid);
  if (!h.ok()) return h.status();
  const Smi rc = set(*h, value);
  api_->devices.clear();  // the processors listed change with the mode
  return rc;
}

Status AmdSmi::SetCompute(const std::string& uuid, const std::string& mode) {
  Api& a = *api_;
  auto rc = SetMode(uuid, mode, kComputeModes, "compute",
                    [&](Handle h, int value) { return a.set_compute(h, value); });
  if (!rc.ok()) return rc.status();
  if (*rc != kSuccess)
    return Status::FailedPrecondition("device " + uuid + ": amdsmi_set_gpu_compute_partition(" +
                                      mode + ") failed: " + a.Describe(*rc));
  return Status::Ok();
}

Status AmdSmi::SetMemory(const std::string& uuid, const std::string& mode) {
  Api& a = *api_;
  auto rc = SetMode(uuid, mode, kMemoryModes, "memory",
                    [&](Handle h, int value) { return a.set_memory(h, value); });
  if (!rc.ok()) return rc.status();
  // The driver reloads: the library starts over, with handles enumerated anew.
  a.shut_down();
  a.initialised = false;
  if (Smi again = a.init(kInitAmdGpus); again != kSuccess) {
    return Status::Internal("device " + uuid +
                            ": amdsmi_init after amdsmi_set_gpu_memory_partition(" + mode +
                            ") failed: " + a.Describe(again));
  }
  a.initialised = true;
  if (*rc != kSuccess)
    return Status::FailedPrecondition("device " + uuid + ": amdsmi_set_gpu_memory_partition(" +
                                      mode + ") failed: " + a.Describe(*rc));
  return Status::Ok();
}

Result<AmdSmi::EccCount> AmdSmi::Ecc(const std::string& uuid) {
  Api& a = *api_;
  if (a.ecc == nullptr) return Status::NotFound("AMD SMI has no amdsmi_get_gpu_total_ecc_count");
  ErrorCount ec{};
  auto read = Read(uuid, [&](void* h) { return a.ecc(h, &ec); });
  if (!read.ok()) return read.status();
  const Smi rc = *read;
  if (rc == kNotSupported) return Status::NotFound("device " + uuid + " counts no ECC errors");
  if (rc != kSuccess)
    return Status::Internal("device " + uuid +
                            ": amdsmi_get_gpu_total_ecc_count: " + a.Describe(rc));
  return EccCount{ec.correctable_count, ec.uncorrectable_count};
}

Result<std::vector<DiscoveredDevice>> DiscoverAmdSmi(const partition::Catalog& catalog,
                                                     const std::string& library) {
  auto smi = AmdSmi::Open(library);
  if (!smi.ok()) return smi.status();
  auto found = (*smi)->Devices();
  if (!found.ok()) return found.status();
  std::vector<DiscoveredDevice> devices;
  for (const AmdSmiDevice& f : *found) {
    DiscoveredDevice d;
    d.index = static_cast<int>(devices.size());
    d.memory_mib = static_cast<MiB>(f.vram_bytes / (1024ULL * 1024ULL));
    d.model = MatchCatalogModel(f.market_name, d.memory_mib, catalog);
    if (d.model.empty()) d.model = f.market_name;
    d.uuid = f.uuid;
    if (!f.modes.compute.empty() && !f.modes.memory.empty()) d.amd_mode = f.modes.ToString();
    // In a split compute mode the device's first partition reports its own share of the VRAM:
    // the device has that many times it (partitions get even shares).
    const partition::GpuModel* m = catalog.Find(d.model);
    if (m != nullptr && m->is_amd() && !d.amd_mode.empty()) {
      auto pair = partition::ParsePair(*m, d.amd_mode);
      if (pair.ok()) {
        auto shape = partition::Partition(*m, *pair);
        if (shape.ok()) d.memory_mib *= shape->partitions;
      }
    }
    devices.push_back(std::move(d));
  }
  return devices;
}

// ---- Health ----

AmdSmiHealth::AmdSmiHealth(std::unique_ptr<AmdSmi> smi, std::vector<std::string> uuids)
    : smi_(std::move(smi)), uuids_(std::move(uuids)), seen_(uuids_.size()) {
  for (size_t i = 0; i < uuids_.size(); ++i) health_.push_back({static_cast<int>(i), true, ""});
}

Result<std::unique_ptr<AmdSmiHealth>> AmdSmiHealth::Open(const std::string& library,
                                                         std::vector<std::string> uuids) {
  auto smi = AmdSmi::Open(library);
  if (!smi.ok()) return smi.status();
  return std::unique_ptr<AmdSmiHealth>(new AmdSmiHealth(std::move(*smi), std::move(uuids)));
}

bool AmdSmiHealth::Reset(int index) {
  if (index < 0 || index >= static_cast<int>(health_.size())) return false;
  health_[index].healthy = true;
  health_[index].reason.clear();
  seen_[index].restart = true;
  return true;
}

std::vector<DeviceHealth> AmdSmiHealth::Check(int /*wait_ms*/, std::vector<std::string>* log) {
  for (size_t i = 0; i < uuids_.size(); ++i) {
    auto ecc = smi_->Ecc(uuids_[i]);
    if (!ecc.ok()) continue;  // not supported, or not read this time: nothing learnt
    Seen& s = seen_[i];
    DeviceHealth& h = health_[i];
    const std::string name = "device " + std::to_string(i) + ": ";
    const uint64_t n = ecc->uncorrectable;
    if (n < s.count) {  // the counters went down: the device was reset, cleanly
      s.base = 0;
      if (!h.healthy) {
        h.healthy = true;
        h.reason.clear();
        if (log != nullptr) log->push_back(name + "ECC counters cleared (a reset): healthy again");
      }
    }
    s.count = n;
    if (s.restart) s.base = n;
    s.restart = false;
    if (n > s.base && h.healthy) {
      h.healthy = false;
      h.reason = "uncorrectable ECC errors: " + std::to_string(n) + " (AMD SMI)";
      if (log != nullptr)
        log->push_back(name + std::to_string(n) +
                       " uncorrectable ECC error(s) (the device is unhealthy)");
    }
  }
  return health_;
}

}  // namespace tessera::agent
