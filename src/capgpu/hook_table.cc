#include "capgpu/hook_table.h"

#include <string.h>

namespace tessera::capgpu {

const HookInfo kHooks[kHookCount] = {
#define TESSERA_CAPGPU_ROW(lib, sym, base, since, stream, ret, params) \
  {Library::lib, #sym, base, since, StreamFlavour::stream, reinterpret_cast<void*>(&::sym)},
    TESSERA_CAPGPU_HOOKS(TESSERA_CAPGPU_ROW)
#undef TESSERA_CAPGPU_ROW
};

const HookInfo* FindHookBySymbol(const char* symbol) {
  if (symbol == nullptr) return nullptr;
  // Cheap filter: dlsym is called for thousands of unrelated names at start-up.
  if (!((symbol[0] == 'c' && symbol[1] == 'u') || (symbol[0] == 'n' && symbol[1] == 'v'))) {
    return nullptr;
  }
  for (const HookInfo& h : kHooks) {
    if (strcmp(h.symbol, symbol) == 0) return &h;
  }
  return nullptr;
}

const HookInfo* FindHookForProcAddress(const char* base_name, int cuda_version,
                                       unsigned long long flags) {
  if (base_name == nullptr) return nullptr;
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const HookInfo* best = nullptr;
  for (const HookInfo& h : kHooks) {
    if (h.base_name == nullptr || strcmp(h.base_name, base_name) != 0) continue;
    if (h.since_version > cuda_version) continue;
    if (h.stream == StreamFlavour::kPerThread && !per_thread) continue;
    if (h.stream == StreamFlavour::kLegacy && per_thread) continue;
    if (best == nullptr || h.since_version > best->since_version) best = &h;
  }
  return best;
}

}  // namespace tessera::capgpu
