// A stand-in libamd_smi.so for the agent's tests (src/agent/amd_smi.h). It follows the AMD SMI C
// library's public interface as amd_smi/amdsmi.h documents it at AMDSMI_LIB_VERSION 24.6
// (ROCm 6.2): amdsmi_init / amdsmi_shut_down, amdsmi_get_socket_handles and
// amdsmi_get_processor_handles (count queries with a null array, as documented), the GPU calls
// amdsmi_get_gpu_asic_info (market_name first), amdsmi_get_gpu_device_uuid (buffer of at least
// AMDSMI_GPU_UUID_SIZE), amdsmi_get_gpu_memory_total (AMDSMI_MEM_TYPE_VRAM, bytes),
// amdsmi_get/set_gpu_compute_partition (strings out, amdsmi_compute_partition_type_t in: CPX 1,
// SPX 2, DPX 3, TPX 4, QPX 5), amdsmi_get/set_gpu_memory_partition (NPS1 1, NPS2 2, NPS4 3,
// NPS8 4), amdsmi_get_gpu_total_ecc_count (amdsmi_error_count_t), amdsmi_get_gpu_kfd_info
// (current_partition_id) and amdsmi_status_code_to_string. Status values are amdsmi_status_t's.
//
// Its state is a file the test writes, named by FAKE_AMDSMI_CONFIG and read on every call; of
// each key the last line wins:
//   device <i> <uuid> <vram MiB> <market name ...>   the GPUs, indexes 0.., one socket each
//   compute <i> <MODE>, memory <i> <MODE>            their current modes ("SPX", "NPS1")
//   ecc <i> <correctable> <uncorrectable>            amdsmi_get_gpu_total_ecc_count
//   busy <i> 0|1                                     set calls answer AMDSMI_STATUS_BUSY
//   fail <call> <status>                             that call answers <status> (0: clears)
//   ignore <call>                                    a set call succeeds and changes nothing
// A set call appends "call <name> <i> <MODE>" (what the test checks) and, when it takes, the new
// state ("compute <i> CPX"). As the driver does on MI300X: a memory mode applies to every device
// (the hive), and a compute mode not legal with NPS4 (SPX, DPX) becomes CPX; a compute mode set
// that is not legal with the current NPS4 answers AMDSMI_STATUS_INVAL. A device in a mode of N
// partitions lists N processors, partition ids 0..N-1 (UUID "<uuid>/<p>" past the first). A
// memory mode set reloads the driver ("reload" in the file): processor handles from before it
// answer AMDSMI_STATUS_INVAL.
// Thread-safety: none (one test thread).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#define FAKE_API extern "C" __attribute__((visibility("default")))

namespace {

constexpr uint32_t kInval = 1, kNotSupported = 2, kBusy = 30, kNotInit = 32, kInsufficient = 41;
const char* const kCompute[] = {"", "CPX", "SPX", "DPX", "TPX", "QPX"};
const char* const kMemory[] = {"", "NPS1", "NPS2", "NPS4", "NPS8"};

struct Device {
  std::string uuid, name, compute = "SPX", memory = "NPS1";
  uint64_t vram_mib = 0, correctable = 0, uncorrectable = 0;
  bool busy = false;
};
struct State {
  std::vector<Device> devices;
  std::map<std::string, uint32_t> fail;
  std::map<std::string, bool> ignore;
  uintptr_t generation = 0;  // driver reloads so far
};
int initialised = 0;

std::string ConfigPath() {
  const char* p = std::getenv("FAKE_AMDSMI_CONFIG");
  return p != nullptr ? p : "";
}

State Load() {
  State s;
  std::ifstream in(ConfigPath());
  std::string line;
  auto device = [&s](size_t i) -> Device& {
    if (s.devices.size() <= i) s.devices.resize(i + 1);
    return s.devices[i];
  };
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string key;
    f >> key;
    size_t i = 0;
    if (key == "device" && f >> i) {
      Device& d = device(i);
      f >> d.uuid >> d.vram_mib;
      std::getline(f >> std::ws, d.name);
    } else if (key == "compute" && f >> i) {
      f >> device(i).compute;
    } else if (key == "memory" && f >> i) {
      f >> device(i).memory;
    } else if (key == "ecc" && f >> i) {
      f >> device(i).correctable >> device(i).uncorrectable;
    } else if (key == "busy" && f >> i) {
      int b = 0;
      f >> b;
      device(i).busy = b != 0;
    } else if (key == "fail") {
      std::string call;
      uint32_t status = 0;
      f >> call >> status;
      s.fail[call] = status;
    } else if (key == "reload") {
      ++s.generation;
    } else if (key == "ignore") {
      std::string call;
      f >> call;
      s.ignore[call] = true;
    }
  }
  return s;
}

void Append(const std::string& line) { std::ofstream(ConfigPath(), std::ios::app) << line << "\n"; }

uint32_t Failing(const State& s, const char* call) {
  auto it = s.fail.find(call);
  return it == s.fail.end() ? 0 : it->second;
}

int Partitions(const std::string& compute) {
  if (compute == "DPX") return 2;
  if (compute == "TPX") return 3;
  if (compute == "QPX") return 4;
  if (compute == "CPX") return 8;
  return 1;
}

// Processor handles: device i, partition p, after `generation` reloads ->
// generation * 0x1000 + i * 16 + p + 1; sockets: kSocketBase + i.
constexpr uintptr_t kSocketBase = 0x10000000;
void* ProcessorHandle(const State& s, size_t i, int p) {
  return reinterpret_cast<void*>(s.generation * 0x1000 + i * 16 + p + 1);
}
bool Resolve(const State& s, void* h, size_t* i, int* p) {
  uintptr_t v = reinterpret_cast<uintptr_t>(h);
  if (v / 0x1000 != s.generation) return false;  // from before a reload
  v %= 0x1000;
  if (v == 0) return false;
  *i = (v - 1) / 16;
  *p = static_cast<int>((v - 1) % 16);
  return *i < s.devices.size() && *p < Partitions(s.devices[*i].compute);
}

// The common prologue of a GPU call: initialised, a known processor, not made to fail.
#define GPU_CALL(handle)                                      \
  if (initialised == 0) return kNotInit;                      \
  State s = Load();                                           \
  size_t i = 0;                                               \
  int p = 0;                                                  \
  if (!Resolve(s, handle, &i, &p)) return kInval;             \
  if (uint32_t rc = Failing(s, __func__); rc != 0) return rc; \
  Device& d = s.devices[i];                                   \
  (void)d;

}  // namespace

FAKE_API uint32_t amdsmi_init(uint64_t flags) {
  if ((flags & 2u) == 0) return kInval;  // AMDSMI_INIT_AMD_GPUS
  if (uint32_t rc = Failing(Load(), "amdsmi_init"); rc != 0) return rc;
  ++initialised;
  return 0;
}
FAKE_API uint32_t amdsmi_shut_down() {
  if (initialised > 0) --initialised;
  return 0;
}
FAKE_API uint32_t amdsmi_status_code_to_string(uint32_t status, const char** out) {
  switch (status) {
    case 0:
      *out = "Success";
      return 0;
    case kInval:
      *out = "Invalid parameters";
      return 0;
    case kNotSupported:
      *out = "Command not supported";
      return 0;
    case 10:
      *out = "Permission Denied";
      return 0;
    case kBusy:
      *out = "Device busy";
      return 0;
    case kNotInit:
      *out = "Device not initialized";
      return 0;
    default:
      *out = "An unknown error occurred";
      return 0;
  }
}
FAKE_API uint32_t amdsmi_get_socket_handles(uint32_t* count, void** sockets) {
  if (initialised == 0) return kNotInit;
  if (count == nullptr) return kInval;
  State s = Load();
  const uint32_t n = static_cast<uint32_t>(s.devices.size());
  if (sockets == nullptr) {
    *count = n;
    return 0;
  }
  if (*count < n) return kInsufficient;
  for (uint32_t i = 0; i < n; ++i) sockets[i] = reinterpret_cast<void*>(kSocketBase + i);
  *count = n;
  return 0;
}
FAKE_API uint32_t amdsmi_get_processor_handles(void* socket, uint32_t* count, void** handles) {
  if (initialised == 0) return kNotInit;
  State s = Load();
  const uintptr_t v = reinterpret_cast<uintptr_t>(socket);
  if (count == nullptr || v < kSocketBase || v - kSocketBase >= s.devices.size()) return kInval;
  const size_t i = v - kSocketBase;
  const uint32_t n = static_cast<uint32_t>(Partitions(s.devices[i].compute));
  if (handles == nullptr) {
    *count = n;
    return 0;
  }
  if (*count < n) return kInsufficient;
  for (uint32_t p = 0; p < n; ++p) handles[p] = ProcessorHandle(s, i, static_cast<int>(p));
  *count = n;
  return 0;
}
FAKE_API uint32_t amdsmi_get_gpu_asic_info(void* h, char* info) {
  GPU_CALL(h);
  std::memset(info, 0, 256);  // market_name[AMDSMI_256_LENGTH] leads the struct
  std::strncpy(info, d.name.c_str(), 255);
  return 0;
}
FAKE_API uint32_t amdsmi_get_gpu_device_uuid(void* h, unsigned* length, char* uuid) {
  GPU_CALL(h);
  if (length == nullptr || uuid == nullptr || *length < 38) return kInval;
  const std::string id = p == 0 ? d.uuid : d.uuid + "/" + std::to_string(p);
  if (id.size() + 1 > *length) return kInsufficient;
  std::memcpy(uuid, id.c_str(), id.size() + 1);
  *length = static_cast<unsigned>(id.size());
  return 0;
}
FAKE_API uint32_t amdsmi_get_gpu_memory_total(void* h, int type, uint64_t* total) {
  GPU_CALL(h);
  if (type != 0 || total == nullptr) return kInval;  // AMDSMI_MEM_TYPE_VRAM
  *total = (d.vram_mib << 20) / static_cast<uint64_t>(Partitions(d.compute));
  return 0;
}
FAKE_API uint32_t amdsmi_get_gpu_compute_partition(void* h, char* out, uint32_t len) {
  GPU_CALL(h);
  if (out == nullptr || len < d.compute.size() + 1) return kInval;
  std::memcpy(out, d.compute.c_str(), d.compute.size() + 1);
  return 0;
}
FAKE_API uint32_t amdsmi_get_gpu_memory_partition(void* h, char* out, uint32_t len) {
  GPU_CALL(h);
  if (out == nullptr || len < d.memory.size() + 1) return kInval;
  std::memcpy(out, d.memory.c_str(), d.memory.size() + 1);
  return 0;
}
FAKE_API uint32_t amdsmi_set_gpu_compute_partition(void* h, int mode) {
  GPU_CALL(h);
  if (mode < 1 || mode > 5 || p != 0) return kInval;
  const std::string want = kCompute[mode];
  Append("call amdsmi_set_gpu_compute_partition " + std::to_string(i) + " " + want);
  if (d.busy) return kBusy;
  if (d.memory == "NPS4" && (want == "SPX" || want == "DPX")) return kInval;
  if (!s.ignore.count(__func__)) Append("compute " + std::to_string(i) + " " + want);
  return 0;
}
FAKE_API uint32_t amdsmi_set_gpu_memory_partition(void* h, int mode) {
  GPU_CALL(h);
  if (mode < 1 || mode > 4 || p != 0) return kInval;
  const std::string want = kMemory[mode];
  Append("call amdsmi_set_gpu_memory_partition " + std::to_string(i) + " " + want);
  for (const Device& o : s.devices)
    if (o.busy) return kBusy;
  if (s.ignore.count(__func__)) return 0;
  Append("reload");
  for (size_t k = 0; k < s.devices.size(); ++k) {
    Append("memory " + std::to_string(k) + " " + want);
    if (want == "NPS4" && (s.devices[k].compute == "SPX" || s.devices[k].compute == "DPX"))
      Append("compute " + std::to_string(k) + " CPX");
  }
  return 0;
}
struct ErrorCount {  // amdsmi_error_count_t
  uint64_t correctable_count, uncorrectable_count, deferred_count, reserved[5];
};
FAKE_API uint32_t amdsmi_get_gpu_total_ecc_count(void* h, ErrorCount* ec) {
  GPU_CALL(h);
  if (ec == nullptr) return kInval;
  *ec = ErrorCount{d.correctable, d.uncorrectable, 0, {}};
  return 0;
}
struct KfdInfo {  // amdsmi_kfd_info_t
  uint64_t kfd_id;
  uint32_t node_id, current_partition_id, reserved[12];
};
FAKE_API uint32_t amdsmi_get_gpu_kfd_info(void* h, KfdInfo* info) {
  GPU_CALL(h);
  if (info == nullptr) return kInval;
  *info = KfdInfo{i * 16 + static_cast<uint64_t>(p),
                  static_cast<uint32_t>(i * 16 + p),
                  static_cast<uint32_t>(p),
                  {}};
  return 0;
}
