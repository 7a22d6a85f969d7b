// Entry points: however the application finds a driver function, it finds our wrapper.
//   - direct linking: the wrappers are exported, and LD_PRELOAD puts them first;
//   - dlsym(handle, "cuMemAlloc_v2"): the dlsym hook answers with the wrapper for every hooked
//     name the real dlsym resolves;
//   - cuGetProcAddress / cuGetProcAddress_v2 (the CUDA runtime's way since 11.3 / 12.0): the
//     real answer is replaced by the wrapper when it is the real function behind a hook, or
//     when the documented name/version/stream rules select a hooked variant.
//
// Limitation: dlsym(RTLD_NEXT, ...) is resolved relative to this library rather than the caller
// (glibc offers no way to pass the caller on), which differs only for symbols this library
// itself exports.
#include <dlfcn.h>

#include "capgpu/hook_names.h"

namespace {

// The wrapper to hand out instead of `real`, the driver's answer for (symbol, version, flags).
void* Substitute(const char* symbol, void* real, int cuda_version, cuuint64_t flags) {
  if (real == nullptr) return real;
  for (int i = 0; i < kHookCount; ++i) {
    if (kHooks[i].library != Library::kCuda) continue;
    void* known = g_real_functions[i].load(std::memory_order_acquire);
    if (known == nullptr) known = ResolveReal(static_cast<HookId>(i));
    if (known == real) return kHooks[i].wrapper;
  }
  const HookInfo* hook = FindHookForProcAddress(symbol, cuda_version, flags);
  return hook != nullptr ? hook->wrapper : real;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* dlsym(void* handle, const char* symbol) {
  void* p = tessera::capgpu::RealDlsym()(handle, symbol);
  if (p == nullptr) return p;
  const HookInfo* hook = FindHookBySymbol(symbol);
  return hook != nullptr ? hook->wrapper : p;
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) {
  auto real = Real<HookId::cuGetProcAddress>();
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real(symbol, pfn, cuda_version, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = Substitute(symbol, *pfn, cuda_version, flags);
  return r;
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) {
  auto real = Real<HookId::cuGetProcAddress_v2>();
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real(symbol, pfn, cuda_version, flags, status);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = Substitute(symbol, *pfn, cuda_version, flags);
  return r;
}

}  // extern "C"
