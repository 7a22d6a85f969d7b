// A stand-in libnvidia-ml for the agent's discovery tests: two devices, "NVIDIA H100 80GB HBM3"
// (MIG on) and "NVIDIA A100-SXM4-40GB", with UUIDs GPU-fake-agent-<i>. FAKE_NVML_INIT_FAIL=1
// makes nvmlInit_v2 fail. Thread-safety: stateless.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#define FAKE_API extern "C" __attribute__((visibility("default")))

namespace {
struct Memory {
  unsigned long long total, free, used;
};
unsigned Index(void* device) { return static_cast<unsigned>(reinterpret_cast<uintptr_t>(device) - 1); }
void Copy(const char* s, char* out, unsigned length) {
  std::strncpy(out, s, length);
  out[length - 1] = '\0';
}
}  // namespace

FAKE_API int nvmlInit_v2() {
  const char* fail = std::getenv("FAKE_NVML_INIT_FAIL");
  return fail != nullptr && fail[0] == '1' ? 9 /* driver not loaded */ : 0;
}
FAKE_API int nvmlShutdown() { return 0; }
FAKE_API const char* nvmlErrorString(int rc) { return rc == 9 ? "Driver Not Loaded" : "fake error"; }
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
  Copy(Index(device) == 0 ? "NVIDIA H100 80GB HBM3" : "NVIDIA A100-SXM4-40GB", name, length);
  return 0;
}
FAKE_API int nvmlDeviceGetUUID(void* device, char* uuid, unsigned length) {
  Copy(Index(device) == 0 ? "GPU-fake-agent-0" : "GPU-fake-agent-1", uuid, length);
  return 0;
}
FAKE_API int nvmlDeviceGetMemoryInfo(void* device, Memory* memory) {
  // What the drivers report: a little under the marketing size.
  memory->total = Index(device) == 0 ? 81559ULL << 20 : 40536ULL << 20;
  memory->free = memory->total;
  memory->used = 0;
  return 0;
}
FAKE_API int nvmlDeviceGetMigMode(void* device, unsigned* current, unsigned* pending) {
  *current = *pending = Index(device) == 0 ? 1 : 0;
  return 0;
}
