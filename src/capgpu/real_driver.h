// The real functions behind the hooks: libcuda.so.1 and libnvidia-ml.so.1 opened with dlopen, and
// their symbols looked up with libc's own dlsym (found through dlvsym, so the library's dlsym hook
// is not re-entered). Each pointer is looked up once and cached; Real<id>() on the hot path is
// one acquire load (a plain load on x86) and a predicted branch: no lock, no system call.
//
// Thread-safety: all functions are thread-safe. Uses no C++ runtime library.
#pragma once

#include <atomic>

#include "capgpu/hook_table.h"

namespace tessera::capgpu {

using DlsymFn = void* (*)(void* handle, const char* symbol);

// libc's dlsym. Never null on glibc.
DlsymFn RealDlsym();

// Cached real pointers, indexed by HookId. nullptr: not looked up yet (or absent).
extern std::atomic<void*> g_real_functions[kHookCount];

// Slow path of Real<id>(): opens the library and looks the symbol up. nullptr when the real
// library or symbol is missing.
void* ResolveReal(HookId id);

// A real function that is not hooked (cuCtxGetDevice, nvmlDeviceGetIndex, ...), cached in *cache.
void* ResolveHelper(Library library, const char* symbol, std::atomic<void*>* cache);

template <HookId id>
struct FnOf;
#define TESSERA_CAPGPU_FNOF(lib, sym, base, since, stream, ret, params) \
  template <>                                                           \
  struct FnOf<HookId::sym> {                                            \
    using type = fn::sym;                                               \
  };
TESSERA_CAPGPU_HOOKS(TESSERA_CAPGPU_FNOF)
#undef TESSERA_CAPGPU_FNOF

// The real function behind hook `id`, typed; nullptr when the driver lacks it.
template <HookId id>
inline typename FnOf<id>::type Real() {
  void* p = g_real_functions[static_cast<int>(id)].load(std::memory_order_acquire);
  if (__builtin_expect(p == nullptr, 0)) p = ResolveReal(id);
  return reinterpret_cast<typename FnOf<id>::type>(p);
}

// The current context's device ordinal (cuCtxGetDevice), or 0 when there is none.
CUdevice CurrentDevice();

}  // namespace tessera::capgpu
