#include "agent/discovery.h"

#include <elf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "agent/amd_smi.h"
#include "agent/nvml_library.h"
#include "model/quantity.h"

namespace tessera::agent {
namespace {

// ---- The few NVML declarations the agent uses, written from NVML's public API reference. ----
// Every call returns an nvmlReturn_t (agent/nvml_library.h).
struct NvmlDeviceOpaque;
using NvmlDevice = NvmlDeviceOpaque*;
struct NvmlMemory {  // nvmlMemory_t (v1): bytes
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr unsigned kNvmlMigEnable = 1;  // NVML_DEVICE_MIG_ENABLE
// NVML_DEVICE_NAME_V2_BUFFER_SIZE and NVML_DEVICE_UUID_V2_BUFFER_SIZE are both 96.
constexpr unsigned kNvmlStringBuffer = 96;

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> Words(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == ' ' || c == '-' || c == '_' || c == '(' || c == ')' || c == '/') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

}  // namespace

Result<std::vector<DiscoveredDevice>> ParseSimulatedInventory(std::string_view spec,
                                                              std::string_view node,
                                                              const partition::Catalog& catalog) {
  assert(!node.empty());
  std::vector<DiscoveredDevice> devices;
  if (Trim(spec).empty()) {
    return Status::InvalidArgument("simulated inventory is empty (want e.g. 2xH100-80GB)");
  }
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string_view::npos) comma = spec.size();
    std::string item = Trim(spec.substr(pos, comma - pos));
    pos = comma + 1;
    if (item.empty()) {
      return Status::InvalidArgument("simulated inventory '" + std::string(spec) +
                                     "' has an empty item (want e.g. 1xMI300X,4xA100-40GB)");
    }
    int64_t count = 1;
    std::string model = item;
    size_t x = item.find_first_of("xX");
    // "<digits>x<model>": the count prefix is optional, but a prefix that is not all digits
    // belongs to the model name (e.g. "MI300X" has an 'X' of its own).
    if (x != std::string::npos && x > 0) {
      std::string prefix = item.substr(0, x);
      bool digits = true;
      for (char c : prefix) digits = digits && std::isdigit(static_cast<unsigned char>(c));
      if (digits) {
        Result<int64_t> n = ParseNonNegativeInt(prefix);
        if (!n.ok() || *n == 0 || *n > 64) {
          return Status::InvalidArgument("simulated inventory item '" + item +
                                         "': the count must be 1 to 64");
        }
        count = *n;
        model = Trim(item.substr(x + 1));
      }
    }
    if (model.empty()) {
      return Status::InvalidArgument("simulated inventory item '" + item + "' names no model");
    }
    const partition::GpuModel* m = catalog.Find(model);
    if (m == nullptr) {
      return Status::InvalidArgument("simulated inventory item '" + item +
                                     "': unknown GPU model '" + model +
                                     "' (known: " + catalog.ModelNames() + ")");
    }
    for (int64_t i = 0; i < count; ++i) {
      DiscoveredDevice d;
      d.index = static_cast<int>(devices.size());
      d.model = m->name;
      d.memory_mib = m->memory_mib;
      d.uuid = "GPU-sim-" + std::string(node) + "-" + std::to_string(d.index);
      d.simulated = true;
      devices.push_back(std::move(d));
    }
    if (devices.size() > 64) {
      return Status::InvalidArgument("simulated inventory '" + std::string(spec) +
                                     "' declares more than 64 devices");
    }
    if (comma == spec.size()) break;
  }
  return devices;
}

std::string MatchCatalogModel(std::string_view driver_name, MiB memory_mib,
                              const partition::Catalog& catalog) {
  std::string name = Trim(driver_name);
  if (const partition::GpuModel* m = catalog.Find(name)) return m->name;
  constexpr std::string_view kVendor = "NVIDIA ";
  if (name.size() > kVendor.size() &&
      partition::EqualsIgnoreCase(name.substr(0, kVendor.size()), kVendor)) {
    if (const partition::GpuModel* m = catalog.Find(name.substr(kVendor.size()))) return m->name;
  }
  std::vector<std::string> words = Words(name);
  const partition::GpuModel* best = nullptr;
  MiB best_gap = 0;
  for (const partition::GpuModel& m : catalog.models()) {
    std::vector<std::string> model_words = Words(m.name);
    if (model_words.empty()) continue;
    bool family = false;
    for (const std::string& w : words) family = family || w == model_words[0];
    if (!family) continue;
    MiB gap = memory_mib > m.memory_mib ? memory_mib - m.memory_mib : m.memory_mib - memory_mib;
    if (best == nullptr || gap < best_gap) {
      best = &m;
      best_gap = gap;
    }
  }
  return best != nullptr ? best->name : "";
}

namespace {

// The NVML calls the inventory makes: X(member, symbol, required, return type, parameters), the
// one list the members of InventoryNvml and their binding come from (agent/dynamic_library.h).
#define TESSERA_NVML_INVENTORY_CALLS(X)                                                         \
  X(init, "nvmlInit_v2", true, NvmlReturn, ())                                                  \
  X(shutdown, "nvmlShutdown", true, NvmlReturn, ())                                             \
  X(get_count, "nvmlDeviceGetCount_v2", true, NvmlReturn, (unsigned int*))                      \
  X(get_handle, "nvmlDeviceGetHandleByIndex_v2", true, NvmlReturn, (unsigned int, NvmlDevice*)) \
  X(get_name, "nvmlDeviceGetName", true, NvmlReturn, (NvmlDevice, char*, unsigned int))         \
  X(get_uuid, "nvmlDeviceGetUUID", true, NvmlReturn, (NvmlDevice, char*, unsigned int))         \
  X(get_memory, "nvmlDeviceGetMemoryInfo", true, NvmlReturn, (NvmlDevice, NvmlMemory*))         \
  X(get_mig, "nvmlDeviceGetMigMode", false, NvmlReturn,                                         \
    (NvmlDevice, unsigned int*, unsigned int*))                                                 \
  X(error_string, "nvmlErrorString", false, const char*, (NvmlReturn))

struct InventoryNvml {
  TESSERA_LIBRARY_API(InventoryNvml, TESSERA_NVML_INVENTORY_CALLS)
  ~InventoryNvml() {
    if (shutdown) shutdown();
  }
};

}  // namespace

Result<std::vector<DiscoveredDevice>> DiscoverNvml(const partition::Catalog& catalog,
                                                   const std::string& library) {
  auto opened = OpenNvml<InventoryNvml>(library, "the NVML entry points");
  if (!opened.ok()) return opened.status();
  const InventoryNvml& nvml = **opened;
  auto describe = [&](NvmlReturn rc) {
    const char* s = nvml.error_string != nullptr ? nvml.error_string(rc) : nullptr;
    return s != nullptr ? std::string(s) : "NVML error " + std::to_string(rc);
  };
  std::vector<DiscoveredDevice> devices;
  Status failure;
  unsigned int count = 0;
  NvmlReturn rc = nvml.get_count(&count);
  if (rc != kNvmlSuccess) failure = Status::Internal("nvmlDeviceGetCount: " + describe(rc));
  for (unsigned int i = 0; failure.ok() && i < count; ++i) {
    NvmlDevice handle = nullptr;
    char name[kNvmlStringBuffer] = {};
    char uuid[kNvmlStringBuffer] = {};
    NvmlMemory memory{};
    if ((rc = nvml.get_handle(i, &handle)) != kNvmlSuccess ||
        (rc = nvml.get_name(handle, name, kNvmlStringBuffer)) != kNvmlSuccess ||
        (rc = nvml.get_uuid(handle, uuid, kNvmlStringBuffer)) != kNvmlSuccess ||
        (rc = nvml.get_memory(handle, &memory)) != kNvmlSuccess) {
      failure = Status::Internal("NVML device " + std::to_string(i) + ": " + describe(rc));
      break;
    }
    name[kNvmlStringBuffer - 1] = '\0';
    uuid[kNvmlStringBuffer - 1] = '\0';
    DiscoveredDevice d;
    d.index = static_cast<int>(i);
    d.memory_mib = static_cast<MiB>(memory.total / (1024ULL * 1024ULL));
    d.model = MatchCatalogModel(name, d.memory_mib, catalog);
    if (d.model.empty()) d.model = Trim(name);
    d.uuid = uuid;
    unsigned int current = 0, pending = 0;
    // Not there or not supported (pre-Ampere drivers) simply means MIG is off.
    if (nvml.get_mig != nullptr && nvml.get_mig(handle, &current, &pending) == kNvmlSuccess) {
      d.mig_enabled = current == kNvmlMigEnable;
    }
    devices.push_back(std::move(d));
  }
  if (!failure.ok()) return failure;  // NVML shut down as `opened` goes
  return devices;
}

// ---- Telemetry ----

namespace {
struct NvmlUtilization {  // nvmlUtilization_t: percent over the driver's last sample period
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlProcessInfo {  // nvmlProcessInfo_t (v2, as the _v3 query fills it)
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
constexpr NvmlReturn kNvmlInsufficientSize = 7;  // NVML_ERROR_INSUFFICIENT_SIZE

// The NVML calls telemetry makes: X(member, symbol, required, return type, parameters), the one
// list the members of NvmlSampler::Impl and their binding come from (agent/dynamic_library.h).
#define TESSERA_NVML_TELEMETRY_CALLS(X)                                                         \
  X(init, "nvmlInit_v2", true, NvmlReturn, ())                                                  \
  X(shutdown, "nvmlShutdown", true, NvmlReturn, ())                                             \
  X(get_count, "nvmlDeviceGetCount_v2", true, NvmlReturn, (unsigned int*))                      \
  X(get_handle, "nvmlDeviceGetHandleByIndex_v2", true, NvmlReturn, (unsigned int, NvmlDevice*)) \
  X(get_memory, "nvmlDeviceGetMemoryInfo", true, NvmlReturn, (NvmlDevice, NvmlMemory*))         \
  X(get_utilization, "nvmlDeviceGetUtilizationRates", true, NvmlReturn,                         \
    (NvmlDevice, NvmlUtilization*))                                                             \
  X(get_processes, "nvmlDeviceGetComputeRunningProcesses_v3", false, NvmlReturn,                \
    (NvmlDevice, unsigned int*, NvmlProcessInfo*))
}  // namespace

struct NvmlSampler::Impl {
  TESSERA_LIBRARY_API(Impl, TESSERA_NVML_TELEMETRY_CALLS)
  ~Impl() {
    if (shutdown) shutdown();
  }
};

Result<std::unique_ptr<NvmlSampler>> NvmlSampler::Open(const std::string& library) {
  auto impl = OpenNvml<Impl>(library, "the telemetry calls");
  if (!impl.ok()) return impl.status();
  std::unique_ptr<NvmlSampler> s(new NvmlSampler());
  s->impl_ = std::move(*impl);
  return s;
}

NvmlSampler::~NvmlSampler() = default;

std::vector<NvmlSample> NvmlSampler::Sample() {
  Impl& m = *impl_;
  std::vector<NvmlSample> out;
  unsigned int count = 0;
  if (m.get_count(&count) != kNvmlSuccess) return out;
  for (unsigned int i = 0; i < count; ++i) {
    NvmlSample s;
    s.index = static_cast<int>(i);
    NvmlDevice handle = nullptr;
    if (m.get_handle(i, &handle) == kNvmlSuccess) {
      NvmlUtilization u{};
      if (m.get_utilization(handle, &u) == kNvmlSuccess)
        s.util_pct = static_cast<int>(std::min(100u, u.gpu));
      NvmlMemory mem{};
      if (m.get_memory(handle, &mem) == kNvmlSuccess)
        s.memory_used_bytes = static_cast<int64_t>(mem.used);
      if (m.get_processes != nullptr) {
        std::vector<NvmlProcessInfo> procs(16);
        unsigned int n = static_cast<unsigned int>(procs.size());
        NvmlReturn rc = m.get_processes(handle, &n, procs.data());
        if (rc == kNvmlInsufficientSize && n > procs.size() && n < 100000) {
          procs.resize(n);
          rc = m.get_processes(handle, &n, procs.data());
        }
        if (rc == kNvmlSuccess) {
          for (unsigned int k = 0; k < n && k < procs.size(); ++k) {
            s.processes.push_back(
                {static_cast<int>(procs[k].pid), static_cast<int64_t>(procs[k].used_gpu_memory)});
          }
        }
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string IsolationGrade(const DiscoveredDevice& device, bool cap_library) {
  if (device.mig_enabled) return "hardware";
  return cap_library ? "preload" : "none";
}

Status CheckCapLibrary(const std::string& path) {
  const std::string name = "cap library '" + path + "' ";
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return Status::FailedPrecondition(name + "does not exist");
  if (!S_ISREG(st.st_mode)) return Status::FailedPrecondition(name + "is not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::FailedPrecondition(name + "cannot be read");
  Elf64_Ehdr eh{};
  const Status not_elf = Status::FailedPrecondition(name + "is not an ELF shared library");
  if (!in.read(reinterpret_cast<char*>(&eh), sizeof eh) ||
      std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_type != ET_DYN)
    return not_elf;
#if defined(__x86_64__)
  constexpr int kMachine = EM_X86_64;
#elif defined(__aarch64__)
  constexpr int kMachine = EM_AARCH64;
#else
  constexpr int kMachine = -1;
#endif
  if (kMachine >= 0 && eh.e_machine != kMachine)
    return Status::FailedPrecondition(name + "is for another architecture");
  // A position-independent program is ET_DYN too: it names an interpreter, a library does not.
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph{};
    in.seekg(static_cast<std::streamoff>(eh.e_phoff + uint64_t{i} * eh.e_phentsize));
    if (!in.read(reinterpret_cast<char*>(&ph), sizeof ph)) return not_elf;
    if (ph.p_type == PT_INTERP)
      return Status::FailedPrecondition(name + "is a program, not a shared library");
  }
  return Status::Ok();
}

MilliCpu ParseCgroupCpuMax(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return 0;
  char* end = nullptr;
  long long q = std::strtoll(quota.c_str(), &end, 10);
  if (end == quota.c_str() || *end != '\0' || q <= 0) return 0;
  return static_cast<MilliCpu>((q * 1000 + period - 1) / period);
}

MiB ParseMemInfoTotal(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemTotal:", 0) != 0) continue;
    std::istringstream fields(line.substr(9));
    long long kib = 0;
    if (fields >> kib && kib > 0) return static_cast<MiB>(kib / 1024);
  }
  return 0;
}

HostResources DiscoverHost() {
  HostResources h;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  h.cpu_milli = cpus > 0 ? static_cast<MilliCpu>(cpus) * kOneCore : kOneCore;
  MilliCpu quota = ParseCgroupCpuMax(ReadFile("/sys/fs/cgroup/cpu.max"));
  if (quota == 0) {  // cgroup v1
    std::string q = Trim(ReadFile("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"));
    std::string p = Trim(ReadFile("/sys/fs/cgroup/cpu/cpu.cfs_period_us"));
    if (!q.empty() && !p.empty()) quota = ParseCgroupCpuMax(q + " " + p);
  }
  if (quota > 0 && quota < h.cpu_milli) h.cpu_milli = quota;

  h.memory_mib = ParseMemInfoTotal(ReadFile("/proc/meminfo"));
  for (const char* path :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::string v = Trim(ReadFile(path));
    if (v.empty() || v == "max") continue;
    char* end = nullptr;
    unsigned long long bytes = std::strtoull(v.c_str(), &end, 10);
    if (end == v.c_str() || *end != '\0') continue;
    MiB limit = static_cast<MiB>(bytes / (1024ULL * 1024ULL));
    if (limit > 0 && (h.memory_mib == 0 || limit < h.memory_mib)) h.memory_mib = limit;
  }
  return h;
}

Result<Inventory> DiscoverInventory(std::string_view node, std::string_view simulate_spec,
                                    const std::string& nvml_library,
                                    const std::string& amdsmi_library) {
  Inventory inv;
  inv.node = std::string(node);
  inv.host = DiscoverHost();
  const partition::Catalog& catalog = partition::Catalog::BuiltIn();
  if (!simulate_spec.empty()) {
    Result<std::vector<DiscoveredDevice>> devices =
        ParseSimulatedInventory(simulate_spec, node, catalog);
    if (!devices.ok()) return devices.status();
    inv.devices = std::move(devices).value();
    inv.simulated = true;
    inv.source = "simulated";
    return inv;
  }
  Result<std::vector<DiscoveredDevice>> devices = DiscoverNvml(catalog, nvml_library);
  if (devices.ok() && !devices->empty()) {
    inv.devices = std::move(devices).value();
    inv.source = "nvml";
    return inv;
  }
  if (!devices.ok() && devices.status().code() != StatusCode::kFailedPrecondition)
    return devices.status();
  // No NVIDIA device: AMD's, if any.
  Result<std::vector<DiscoveredDevice>> amd = DiscoverAmdSmi(catalog, amdsmi_library);
  if (amd.ok() && !amd->empty()) {
    inv.devices = std::move(amd).value();
    inv.source = "amdsmi";
    return inv;
  }
  if (!amd.ok() && amd.status().code() != StatusCode::kFailedPrecondition) return amd.status();
  if (devices.ok()) {
    inv.source = "nvml";  // NVML answers, with no device
    return inv;
  }
  inv.source = "none";
  inv.note = devices.status().message();
  if (!amd.ok()) inv.note += "; " + amd.status().message();
  return inv;
}

}  // namespace tessera::agent
