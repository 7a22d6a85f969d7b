// capgpu_probe_{direct,dlsym,procaddr}: a small CUDA driver client the integration tests run as a
// real process under LD_PRELOAD. The three builds reach the driver the three ways applications
// do: linked against libcuda.so.1, dlopen + dlsym, or cuGetProcAddress (v1, or v2 when
// PROBE_PROC_V2=1). Arguments are a script of commands run in order, each printing one line:
//
//   alloc SIZE | managed SIZE | async[_ptsz] SIZE | pool[_ptsz] SIZE | pitch W H   -> "<cmd> <rc>"
//   create SIZE | array W H | array3d W H D
//   free | freeasync[_ptsz] | release | destroy     free the newest allocation of that kind
//   info | total | nvml | launch[_ptsz] | ctx DEVICE | allocloop SIZE ("count N": until refused)
//   oldalloc SIZE       cuMemAlloc requested at cudaVersion 2000 (procaddr build only)
//   hold                print "holding", wait until stdin closes
//   fork                the rest of the script runs in a forked child; the parent waits
//   spawn               the rest runs in a fork+exec'd copy of this program; the parent waits
//   exec                the rest runs after exec of this program (same pid)
// SIZE: bytes, or with KiB/MiB/GiB.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "capgpu/cuda_abi.h"

#ifndef PROBE_MODE
#error "PROBE_MODE: 0 direct, 1 dlsym, 2 procaddr"
#endif

extern "C" {
#if PROBE_MODE == 0
CUresult cuInit(unsigned int);
CUresult cuCtxCreate_v2(CUcontext*, unsigned int, CUdevice);
CUresult cuMemAlloc_v2(CUdeviceptr*, size_t);
CUresult cuMemAllocPitch_v2(CUdeviceptr*, size_t*, size_t, size_t, unsigned int);
CUresult cuMemAllocManaged(CUdeviceptr*, size_t, unsigned int);
CUresult cuMemAllocAsync(CUdeviceptr*, size_t, CUstream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr*, size_t, CUstream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
CUresult cuMemCreate(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                     unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuArrayCreate_v2(CUarray*, const CUDA_ARRAY_DESCRIPTOR*);
CUresult cuArray3DCreate_v2(CUarray*, const CUDA_ARRAY3D_DESCRIPTOR*);
CUresult cuArrayDestroy(CUarray);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);
CUresult cuMemGetInfo_v2(size_t*, size_t*);
CUresult cuDeviceTotalMem_v2(size_t*, CUdevice);
CUresult cuLaunchKernel(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                        unsigned int, unsigned int, unsigned int, CUstream, void**, void**);
CUresult cuLaunchKernel_ptsz(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                             unsigned int, unsigned int, unsigned int, CUstream, void**, void**);
#endif
}

namespace {

using Launch = CUresult (*)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                            unsigned int, unsigned int, unsigned int, CUstream, void**, void**);

// The driver as this build reaches it.
struct Driver {
  CUresult (*init)(unsigned int);
  CUresult (*ctx_create)(CUcontext*, unsigned int, CUdevice);
  CUresult (*alloc)(CUdeviceptr*, size_t);
  CUresult (*alloc_v1)(unsigned int*, unsigned int);
  CUresult (*pitch)(CUdeviceptr*, size_t*, size_t, size_t, unsigned int);
  CUresult (*managed)(CUdeviceptr*, size_t, unsigned int);
  CUresult (*async)(CUdeviceptr*, size_t, CUstream);
  CUresult (*async_ptsz)(CUdeviceptr*, size_t, CUstream);
  CUresult (*pool)(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
  CUresult (*pool_ptsz)(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
  CUresult (*create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                     unsigned long long);
  CUresult (*release)(CUmemGenericAllocationHandle);
  CUresult (*array)(CUarray*, const CUDA_ARRAY_DESCRIPTOR*);
  CUresult (*array3d)(CUarray*, const CUDA_ARRAY3D_DESCRIPTOR*);
  CUresult (*destroy)(CUarray);
  CUresult (*free)(CUdeviceptr);
  CUresult (*free_async)(CUdeviceptr, CUstream);
  CUresult (*free_async_ptsz)(CUdeviceptr, CUstream);
  CUresult (*info)(size_t*, size_t*);
  CUresult (*total)(size_t*, CUdevice);
  Launch launch;
  Launch launch_ptsz;
};

template <typename F>
void Set(F* field, void* p, const char* what) {
  if (p == nullptr) {
    fprintf(stderr, "probe: cannot resolve %s\n", what);
    exit(3);
  }
  *field = reinterpret_cast<F>(p);
}

Driver Load() {
  Driver d{};
#if PROBE_MODE == 0
  d = Driver{cuInit,
             cuCtxCreate_v2,
             cuMemAlloc_v2,
             nullptr,
             cuMemAllocPitch_v2,
             cuMemAllocManaged,
             cuMemAllocAsync,
             cuMemAllocAsync_ptsz,
             cuMemAllocFromPoolAsync,
             cuMemAllocFromPoolAsync_ptsz,
             cuMemCreate,
             cuMemRelease,
             cuArrayCreate_v2,
             cuArray3DCreate_v2,
             cuArrayDestroy,
             cuMemFree_v2,
             cuMemFreeAsync,
             cuMemFreeAsync_ptsz,
             cuMemGetInfo_v2,
             cuDeviceTotalMem_v2,
             cuLaunchKernel,
             cuLaunchKernel_ptsz};
#else
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    fprintf(stderr, "probe: %s\n", dlerror());
    exit(3);
  }
#if PROBE_MODE == 1
#define PROBE_GET(field, name, version, flags) Set(&d.field, dlsym(h, name), name)
#else
  const bool v2 = getenv("PROBE_PROC_V2") != nullptr;
  using GetProc1 = CUresult (*)(const char*, void**, int, cuuint64_t);
  using GetProc2 =
      CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  GetProc1 get1 = reinterpret_cast<GetProc1>(dlsym(h, "cuGetProcAddress"));
  GetProc2 get2 = reinterpret_cast<GetProc2>(dlsym(h, "cuGetProcAddress_v2"));
  if (get1 == nullptr || get2 == nullptr) exit(3);
  auto get = [&](const char* base, int version, cuuint64_t flags) -> void* {
    void* p = nullptr;
    CUdriverProcAddressQueryResult status = -1;
    CUresult r = v2 ? get2(base, &p, version, flags, &status) : get1(base, &p, version, flags);
    return r == CUDA_SUCCESS ? p : nullptr;
  };
#define PROBE_GET(field, name, version, flags) Set(&d.field, get(name, version, flags), name)
#endif
  [[maybe_unused]] const int v = 12040;
  [[maybe_unused]] const cuuint64_t pt = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  PROBE_GET(init, "cuInit", v, 0);
  PROBE_GET(launch, "cuLaunchKernel", v, 0);
#if PROBE_MODE == 1
  PROBE_GET(ctx_create, "cuCtxCreate_v2", v, 0);
  PROBE_GET(alloc, "cuMemAlloc_v2", v, 0);
  PROBE_GET(pitch, "cuMemAllocPitch_v2", v, 0);
  PROBE_GET(managed, "cuMemAllocManaged", v, 0);
  PROBE_GET(async, "cuMemAllocAsync", v, 0);
  PROBE_GET(async_ptsz, "cuMemAllocAsync_ptsz", v, pt);
  PROBE_GET(pool, "cuMemAllocFromPoolAsync", v, 0);
  PROBE_GET(pool_ptsz, "cuMemAllocFromPoolAsync_ptsz", v, pt);
  PROBE_GET(create, "cuMemCreate", v, 0);
  PROBE_GET(release, "cuMemRelease", v, 0);
  PROBE_GET(array, "cuArrayCreate_v2", v, 0);
  PROBE_GET(array3d, "cuArray3DCreate_v2", v, 0);
  PROBE_GET(destroy, "cuArrayDestroy", v, 0);
  PROBE_GET(free, "cuMemFree_v2", v, 0);
  PROBE_GET(free_async, "cuMemFreeAsync", v, 0);
  PROBE_GET(free_async_ptsz, "cuMemFreeAsync_ptsz", v, pt);
  PROBE_GET(info, "cuMemGetInfo_v2", v, 0);
  PROBE_GET(total, "cuDeviceTotalMem_v2", v, 0);
  PROBE_GET(launch_ptsz, "cuLaunchKernel_ptsz", v, pt);
#else
  PROBE_GET(ctx_create, "cuCtxCreate", v, 0);
  PROBE_GET(alloc, "cuMemAlloc", v, 0);
  PROBE_GET(alloc_v1, "cuMemAlloc", 2000, 0);
  PROBE_GET(pitch, "cuMemAllocPitch", v, 0);
  PROBE_GET(managed, "cuMemAllocManaged", v, 0);
  PROBE_GET(async, "cuMemAllocAsync", v, 0);
  PROBE_GET(async_ptsz, "cuMemAllocAsync", v, pt);
  PROBE_GET(pool, "cuMemAllocFromPoolAsync", v, 0);
  PROBE_GET(pool_ptsz, "cuMemAllocFromPoolAsync", v, pt);
  PROBE_GET(create, "cuMemCreate", v, 0);
  PROBE_GET(release, "cuMemRelease", v, 0);
  PROBE_GET(array, "cuArrayCreate", v, 0);
  PROBE_GET(array3d, "cuArray3DCreate", v, 0);
  PROBE_GET(destroy, "cuArrayDestroy", v, 0);
  PROBE_GET(free, "cuMemFree", v, 0);
  PROBE_GET(free_async, "cuMemFreeAsync", v, 0);
  PROBE_GET(free_async_ptsz, "cuMemFreeAsync", v, pt);
  PROBE_GET(info, "cuMemGetInfo", v, 0);
  PROBE_GET(total, "cuDeviceTotalMem", v, 0);
  PROBE_GET(launch_ptsz, "cuLaunchKernel", v, pt);
#endif
#undef PROBE_GET
#endif
  return d;
}

unsigned long long Size(const char* text) {
  char* end = nullptr;
  unsigned long long v = strtoull(text, &end, 10);
  if (strcmp(end, "KiB") == 0) return v << 10;
  if (strcmp(end, "MiB") == 0) return v << 20;
  if (strcmp(end, "GiB") == 0) return v << 30;
  return v;
}

void Line(const char* what, CUresult r) {
  printf("%s %d\n", what, r);
  fflush(stdout);
}

template <typename T>
T Pop(std::vector<T>& v) {
  if (v.empty()) {
    fprintf(stderr, "probe: nothing to free\n");
    exit(4);
  }
  T x = v.back();
  v.pop_back();
  return x;
}

int Run(const Driver& d, int argc, char** argv, char* self) {
  std::vector<CUdeviceptr> pointers;
  std::vector<CUmemGenericAllocationHandle> handles;
  std::vector<CUarray> arrays;
  d.init(0);
  for (int i = 0; i < argc; ++i) {
    std::string cmd = argv[i];
    auto arg = [&]() -> char* {
      if (i + 1 >= argc) exit(5);
      return argv[++i];
    };
    CUdeviceptr p = 0;
    CUresult r = 0;
    if (cmd == "alloc" || cmd == "managed" || cmd == "async" || cmd == "async_ptsz" ||
        cmd == "pool" || cmd == "pool_ptsz") {
      unsigned long long n = Size(arg());
      if (cmd == "alloc") r = d.alloc(&p, n);
      if (cmd == "managed") r = d.managed(&p, n, 1);
      if (cmd == "async") r = d.async(&p, n, nullptr);
      if (cmd == "async_ptsz") r = d.async_ptsz(&p, n, nullptr);
      if (cmd == "pool") r = d.pool(&p, n, nullptr, nullptr);
      if (cmd == "pool_ptsz") r = d.pool_ptsz(&p, n, nullptr, nullptr);
      if (r == CUDA_SUCCESS) pointers.push_back(p);
      Line(cmd.c_str(), r);
    } else if (cmd == "oldalloc") {
      unsigned int q = 0;
      r = d.alloc_v1 ? d.alloc_v1(&q, static_cast<unsigned int>(Size(arg()))) : -1;
      Line(cmd.c_str(), r);
    } else if (cmd == "pitch") {
      size_t w = Size(arg()), h = Size(arg()), pitch = 0;
      r = d.pitch(&p, &pitch, w, h, 4);
      if (r == CUDA_SUCCESS) pointers.push_back(p);
      Line(cmd.c_str(), r);
    } else if (cmd == "create") {
      CUmemAllocationProp prop{};
      prop.type = 1;
      prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      prop.location.id = 0;
      CUmemGenericAllocationHandle h = 0;
      r = d.create(&h, Size(arg()), &prop, 0);
      if (r == CUDA_SUCCESS) handles.push_back(h);
      Line(cmd.c_str(), r);
    } else if (cmd == "array" || cmd == "array3d") {
      CUarray a = nullptr;
      if (cmd == "array") {
        CUDA_ARRAY_DESCRIPTOR desc{Size(arg()), 0, CU_AD_FORMAT_FLOAT, 1};
        desc.Height = Size(arg());
        r = d.array(&a, &desc);
      } else {
        CUDA_ARRAY3D_DESCRIPTOR desc{Size(arg()), 0, 0, CU_AD_FORMAT_FLOAT, 1, 0};
        desc.Height = Size(arg());
        desc.Depth = Size(arg());
        r = d.array3d(&a, &desc);
      }
      if (r == CUDA_SUCCESS) arrays.push_back(a);
      Line(cmd.c_str(), r);
    } else if (cmd == "free") {
      Line("free", d.free(Pop(pointers)));
    } else if (cmd == "freeasync") {
      Line("freeasync", d.free_async(Pop(pointers), nullptr));
    } else if (cmd == "freeasync_ptsz") {
      Line("freeasync_ptsz", d.free_async_ptsz(Pop(pointers), nullptr));
    } else if (cmd == "release") {
      Line("release", d.release(Pop(handles)));
    } else if (cmd == "destroy") {
      Line("destroy", d.destroy(Pop(arrays)));
    } else if (cmd == "info") {
      size_t free = 0, total = 0;
      r = d.info(&free, &total);
      printf("info %d free=%zu total=%zu\n", r, free, total);
      fflush(stdout);
    } else if (cmd == "total") {
      size_t total = 0;
      r = d.total(&total, 0);
      printf("total %d %zu\n", r, total);
      fflush(stdout);
    } else if (cmd == "launch" || cmd == "launch_ptsz") {
      Launch l = cmd == "launch" ? d.launch : d.launch_ptsz;
      Line(cmd.c_str(), l(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr));
    } else if (cmd == "ctx") {
      CUcontext ctx = nullptr;
      Line("ctx", d.ctx_create(&ctx, 0, static_cast<CUdevice>(atoi(arg()))));
    } else if (cmd == "allocloop") {
      unsigned long long n = Size(arg());
      int count = 0;
      while (d.alloc(&p, n) == CUDA_SUCCESS) ++count;
      printf("count %d\n", count);
      fflush(stdout);
    } else if (cmd == "nvml") {
      void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
      if (h == nullptr) exit(3);
      auto init = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(h, "nvmlInit_v2"));
      auto get = reinterpret_cast<nvmlReturn_t (*)(unsigned int, nvmlDevice_t*)>(
          dlsym(h, "nvmlDeviceGetHandleByIndex_v2"));
      auto info1 = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)>(
          dlsym(h, "nvmlDeviceGetMemoryInfo"));
      auto info2 = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_v2_t*)>(
          dlsym(h, "nvmlDeviceGetMemoryInfo_v2"));
      nvmlDevice_t dev = nullptr;
      init();
      get(0, &dev);
      nvmlMemory_t m{};
      nvmlMemory_v2_t m2{};
      m2.version = 2;
      info1(dev, &m);
      info2(dev, &m2);
      printf("nvml total=%llu free=%llu used=%llu\n", m.total, m.free, m.used);
      printf("nvml2 total=%llu free=%llu used=%llu\n", m2.total, m2.free, m2.used);
      fflush(stdout);
    } else if (cmd == "hold") {
      printf("holding\n");
      fflush(stdout);
      char c;
      while (read(0, &c, 1) > 0) {
      }
    } else if (cmd == "fork" || cmd == "spawn") {
      pid_t pid = fork();
      if (pid == 0) {
        if (cmd == "fork") return Run(d, argc - i - 1, argv + i + 1, self);
        std::vector<char*> args{self};
        for (int j = i + 1; j < argc; ++j) args.push_back(argv[j]);
        args.push_back(nullptr);
        execv("/proc/self/exe", args.data());
        _exit(6);
      }
      int status = 0;
      waitpid(pid, &status, 0);
      return WIFEXITED(status) ? WEXITSTATUS(status) : 7;
    } else if (cmd == "exec") {
      std::vector<char*> args{self};
      for (int j = i + 1; j < argc; ++j) args.push_back(argv[j]);
      args.push_back(nullptr);
      fflush(stdout);
      execv("/proc/self/exe", args.data());
      return 6;
    } else {
      fprintf(stderr, "probe: unknown command %s\n", cmd.c_str());
      return 5;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Run(Load(), argc - 1, argv + 1, argv[0]); }
