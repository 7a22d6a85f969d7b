#include "capgpu/real_driver.h"

#include <dlfcn.h>
#include <pthread.h>

namespace tessera::capgpu {
namespace {

std::atomic<DlsymFn> g_dlsym{nullptr};
std::atomic<void*> g_handles[2] = {nullptr, nullptr};
pthread_mutex_t g_open_mu = PTHREAD_MUTEX_INITIALIZER;

const char* LibraryName(Library library) {
  return library == Library::kCuda ? "libcuda.so.1" : "libnvidia-ml.so.1";
}

void* LibraryHandle(Library library) {
  const int i = library == Library::kCuda ? 0 : 1;
  void* h = g_handles[i].load(std::memory_order_acquire);
  if (h != nullptr) return h;
  pthread_mutex_lock(&g_open_mu);
  h = g_handles[i].load(std::memory_order_relaxed);
  if (h == nullptr) {
    // RTLD_LOCAL: the application decides how the driver is exposed to others; if it already
    // loaded it, this only takes a reference.
    h = dlopen(LibraryName(library), RTLD_LAZY | RTLD_LOCAL);
    if (h != nullptr) g_handles[i].store(h, std::memory_order_release);
  }
  pthread_mutex_unlock(&g_open_mu);
  return h;
}

}  // namespace

std::atomic<void*> g_real_functions[kHookCount];

DlsymFn RealDlsym() {
  DlsymFn f = g_dlsym.load(std::memory_order_acquire);
  if (f != nullptr) return f;
  // glibc 2.34 moved dlsym into libc under a new version; older ones have GLIBC_2.2.5.
  void* p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (p == nullptr) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  f = reinterpret_cast<DlsymFn>(p);
  g_dlsym.store(f, std::memory_order_release);
  return f;
}

void* ResolveReal(HookId id) {
  const HookInfo& hook = kHooks[static_cast<int>(id)];
  void* handle = LibraryHandle(hook.library);
  if (handle == nullptr) return nullptr;
  void* p = RealDlsym()(handle, hook.symbol);
  if (p == hook.wrapper) p = nullptr;  // never call ourselves
  if (p != nullptr) g_real_functions[static_cast<int>(id)].store(p, std::memory_order_release);
  return p;
}

void* ResolveHelper(Library library, const char* symbol, std::atomic<void*>* cache) {
  void* p = cache->load(std::memory_order_acquire);
  if (p != nullptr) return p;
  void* handle = LibraryHandle(library);
  if (handle == nullptr) return nullptr;
  p = RealDlsym()(handle, symbol);
  if (p != nullptr) cache->store(p, std::memory_order_release);
  return p;
}

CUdevice CurrentDevice() {
  static constinit std::atomic<void*> cache{nullptr};
  using CtxGetDevice = CUresult (*)(CUdevice*);
  auto f = reinterpret_cast<CtxGetDevice>(ResolveHelper(Library::kCuda, "cuCtxGetDevice", &cache));
  CUdevice dev = 0;
  if (f == nullptr || f(&dev) != CUDA_SUCCESS || dev < 0) return 0;
  return dev;
}

}  // namespace tessera::capgpu
