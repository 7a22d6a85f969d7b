// capgpu_swap_probe: a CUDA driver client for the swap tests (swap_test.cc), linked against the
// stand-in driver and run under LD_PRELOAD of the cap library. It reads one command per line on
// stdin and answers each with one line on stdout:
//
//   alloc NAME SIZE            cuMemAlloc_v2                        -> "alloc NAME RC"
//   pitch NAME WIDTH HEIGHT    cuMemAllocPitch_v2                   -> "pitch NAME RC PITCH"
//   vmm NAME SIZE keep|release a framework's own mapping: reserve, cuMemCreate, cuMemMap,
//                              cuMemSetAccess; `release` drops the handle at once (the mapping
//                              keeps the memory), `keep` holds it until `free`
//   async NAME SIZE            cuMemAllocAsync (a stream-ordered pool)
//   fill NAME SEED             cuMemcpyHtoD of a pattern            -> "fill NAME RC"
//   check NAME SEED            cuMemcpyDtoH and compare   -> "check NAME ok" / "check NAME bad AT"
//   kernel NAME                the stand-in kernel adds 1 to every byte (pattern SEED -> SEED+1)
//   addr NAME                  -> "addr NAME 0x..."
//   free NAME                  cuMemFree_v2, or unmap + release + address free for `vmm`
//   ncclfree NAME              a `vmm ... keep` buffer freed as NCCL does: retain the handle
//                              from the address, release it, unmap, release the handle the
//                              address gave, address free -> "ncclfree NAME RC HANDLE_HEX"
//   retain NAME                cuMemRetainAllocationHandle on NAME's address -> "retain NAME RC"
//   afill NAME SEED            fill through cuMemcpyHtoDAsync_v2    -> "afill NAME RC"
//   acheck NAME SEED           check through cuMemcpyDtoHAsync_v2   -> as check
//   freeasync NAME             cuMemFreeAsync                       -> "freeasync NAME RC"
//   launch_ptsz NAME           the kernel through cuLaunchKernel_ptsz (the stand-in runs it only
//                              with FAKECUDA_REENTER, via cuLaunchKernel) -> "launch_ptsz NAME RC"
//   threads N NAME SEED [async] N threads checking NAME in a loop until `stop` (async: through
//                              cuMemcpyDtoHAsync_v2)
//   churn N                    N threads allocating and freeing 1 MiB in a loop until `stop`
//   loops                      -> "loops COUNT" (the threads' finished checks; not a driver call)
//   stop                       -> "stop loops=COUNT errors=COUNT"
//   devused                    the stand-in's device bytes in use (not a driver call; -1 on a
//                              real driver)
//   bw NAME                    pinned copy bandwidth over NAME's bytes: cuMemHostAlloc, then the
//                              best of three cuMemcpyDtoH and cuMemcpyHtoD -> "bw NAME D2H_GBPS
//                              H2D_GBPS"
//   quit
// SIZE: bytes, or with KiB/MiB/GiB. Pattern byte i of SEED: (SEED + 7*i + i/4096) mod 256.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "capgpu/cuda_abi.h"

extern "C" {
CUresult cuInit(unsigned int);
CUresult cuCtxCreate_v2(CUcontext*, unsigned int, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuMemAlloc_v2(CUdeviceptr*, size_t);
CUresult cuMemAllocPitch_v2(CUdeviceptr*, size_t*, size_t, size_t, unsigned int);
CUresult cuMemAllocAsync(CUdeviceptr*, size_t, CUstream);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemCreate(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                     unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle*, void*);
CUresult cuMemAddressReserve(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
CUresult cuMemAddressFree(CUdeviceptr, size_t);
CUresult cuMemMap(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
CUresult cuMemUnmap(CUdeviceptr, size_t);
CUresult cuMemSetAccess(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void*, size_t);
CUresult cuMemcpyDtoH_v2(void*, CUdeviceptr, size_t);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr, const void*, size_t, CUstream);
CUresult cuMemcpyDtoHAsync_v2(void*, CUdeviceptr, size_t, CUstream);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuLaunchKernel_ptsz(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                             unsigned int, unsigned int, unsigned int, CUstream, void**, void**);
CUresult cuLaunchKernel(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                        unsigned int, unsigned int, unsigned int, CUstream, void**, void**);
CUresult cuMemHostAlloc(void**, size_t, unsigned int);
CUresult cuMemFreeHost(void*);
// Only the stand-in driver has it (weak: the probe also runs on a real driver, tests/gpu/).
__attribute__((weak)) unsigned long long fakecudaDeviceUsed();
}

namespace {

struct Buffer {
  CUdeviceptr ptr = 0;
  size_t bytes = 0;  // what the program uses (pitch * height for pitched)
  bool vmm = false;
  bool keep = false;
  size_t reserved = 0;
  CUmemGenericAllocationHandle handle = 0;
};

std::map<std::string, Buffer> g_buffers;
std::atomic<bool> g_stop{false};
std::atomic<long> g_loops{0}, g_errors{0};
std::vector<std::thread> g_threads;

size_t Size(const std::string& text) {
  char* end = nullptr;
  unsigned long long v = strtoull(text.c_str(), &end, 10);
  if (strcmp(end, "KiB") == 0) return v << 10;
  if (strcmp(end, "MiB") == 0) return v << 20;
  if (strcmp(end, "GiB") == 0) return v << 30;
  return v;
}

unsigned char Pattern(unsigned seed, size_t i) {
  return static_cast<unsigned char>(seed + 7 * i + i / 4096);
}

// The pattern of `bytes` into `out`, a 4 KiB block at a time: block k is (SEED + 7*j + k) mod 256
// for j in 0..4095 (7 * 4096 * k is a multiple of 256), so 256 distinct blocks cover any size and
// gigabytes are written or compared at memcpy speed.
class PatternBlocks {
 public:
  explicit PatternBlocks(unsigned seed) : blocks_(256 * 4096) {
    for (size_t k = 0; k < 256; ++k) {
      for (size_t j = 0; j < 4096; ++j) blocks_[k * 4096 + j] = Pattern(seed, k * 4096 + j);
    }
  }
  const unsigned char* Block(size_t k) const { return &blocks_[(k % 256) * 4096]; }

 private:
  std::vector<unsigned char> blocks_;
};

// Host memory left uninitialised (the copy fills it): zeroing gigabytes first costs seconds.
std::unique_ptr<unsigned char[]> HostBuffer(size_t bytes) {
  return std::unique_ptr<unsigned char[]>(new unsigned char[bytes]);
}

void Fill(unsigned char* host, size_t bytes, unsigned seed) {
  const PatternBlocks pattern(seed);
  for (size_t at = 0, k = 0; at < bytes; at += 4096, ++k) {
    memcpy(host + at, pattern.Block(k), std::min<size_t>(4096, bytes - at));
  }
}

constexpr long kCopyFailed = -2;

// Offset of the first wrong byte, -1 if all are right, or kCopyFailed. `async`: the copy through
// cuMemcpyDtoHAsync_v2 (on the legacy stream, which the stand-in completes at once).
long Check(const Buffer& b, unsigned seed, bool async = false) {
  auto host = HostBuffer(b.bytes);
  const CUresult r = async ? cuMemcpyDtoHAsync_v2(host.get(), b.ptr, b.bytes, nullptr)
                           : cuMemcpyDtoH_v2(host.get(), b.ptr, b.bytes);
  if (r != CUDA_SUCCESS) return kCopyFailed;
  const PatternBlocks pattern(seed);
  for (size_t at = 0, k = 0; at < b.bytes; at += 4096, ++k) {
    const size_t n = std::min<size_t>(4096, b.bytes - at);
    if (memcmp(host.get() + at, pattern.Block(k), n) == 0) continue;
    for (size_t i = at; i < at + n; ++i) {
      if (host[i] != Pattern(seed, i)) return static_cast<long>(i);
    }
  }
  return -1;
}

void Say(const std::string& line) {
  printf("%s\n", line.c_str());
  fflush(stdout);
}

}  // namespace

int main() {
  CUcontext ctx = nullptr;
  if (CUresult r = cuInit(0); r != CUDA_SUCCESS) {
    fprintf(stderr, "capgpu_swap_probe: cuInit failed (%d)\n", static_cast<int>(r));
    return 1;
  }
  if (CUresult r = cuCtxCreate_v2(&ctx, 0, 0); r != CUDA_SUCCESS) {
    fprintf(stderr, "capgpu_swap_probe: cuCtxCreate failed (%d)\n", static_cast<int>(r));
    return 1;
  }
  char raw[512];
  while (fgets(raw, sizeof(raw), stdin) != nullptr) {
    std::istringstream in(raw);
    std::string cmd, name;
    in >> cmd >> name;
    if (cmd.empty()) continue;
    Buffer& b = g_buffers[name];
    if (cmd == "alloc") {
      std::string size;
      in >> size;
      b.bytes = Size(size);
      Say("alloc " + name + " " + std::to_string(cuMemAlloc_v2(&b.ptr, b.bytes)));
    } else if (cmd == "pitch") {
      std::string w, h;
      in >> w >> h;
      size_t pitch = 0;
      CUresult r = cuMemAllocPitch_v2(&b.ptr, &pitch, Size(w), Size(h), 4);
      b.bytes = pitch * Size(h);
      Say("pitch " + name + " " + std::to_string(r) + " " + std::to_string(pitch));
    } else if (cmd == "async") {
      std::string size;
      in >> size;
      b.bytes = Size(size);
      Say("async " + name + " " + std::to_string(cuMemAllocAsync(&b.ptr, b.bytes, nullptr)));
    } else if (cmd == "vmm") {
      std::string size, mode;
      in >> size >> mode;
      b.bytes = Size(size);
      b.vmm = true;
      b.keep = mode == "keep";
      b.reserved = (b.bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
      CUmemAllocationProp prop{};
      prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
      prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      prop.location.id = 0;
      CUmemAccessDesc access{};
      access.location = prop.location;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      CUresult r = cuMemAddressReserve(&b.ptr, b.reserved, 0, 0, 0);
      if (r == CUDA_SUCCESS) r = cuMemCreate(&b.handle, b.reserved, &prop, 0);
      if (r == CUDA_SUCCESS) r = cuMemMap(b.ptr, b.reserved, 0, b.handle, 0);
      if (r == CUDA_SUCCESS) r = cuMemSetAccess(b.ptr, b.reserved, &access, 1);
      if (r == CUDA_SUCCESS && !b.keep) r = cuMemRelease(b.handle);
      Say("vmm " + name + " " + std::to_string(r));
    } else if (cmd == "fill" || cmd == "afill") {
      unsigned seed = 0;
      in >> seed;
      auto host = HostBuffer(b.bytes);
      Fill(host.get(), b.bytes, seed);
      const CUresult r = cmd == "afill" ? cuMemcpyHtoDAsync_v2(b.ptr, host.get(), b.bytes, nullptr)
                                        : cuMemcpyHtoD_v2(b.ptr, host.get(), b.bytes);
      Say(cmd + " " + name + " " + std::to_string(r));
    } else if (cmd == "check" || cmd == "acheck") {
      unsigned seed = 0;
      in >> seed;
      const long bad = Check(b, seed, cmd == "acheck");
      Say(cmd + " " + name +
          (bad == -1            ? std::string(" ok")
           : bad == kCopyFailed ? std::string(" error: the copy to the host failed")
                                : " bad " + std::to_string(bad)));
    } else if (cmd == "kernel") {
      void* params[2] = {&b.ptr, &b.bytes};
      CUresult r = cuLaunchKernel(reinterpret_cast<CUfunction>(0xF00D), 1, 1, 1, 1, 1, 1, 0,
                                  nullptr, params, nullptr);
      Say("kernel " + name + " " + std::to_string(r));
    } else if (cmd == "launch_ptsz") {
      void* params[2] = {&b.ptr, &b.bytes};
      CUresult r = cuLaunchKernel_ptsz(reinterpret_cast<CUfunction>(0xF00D), 1, 1, 1, 1, 1, 1, 0,
                                       nullptr, params, nullptr);
      Say("launch_ptsz " + name + " " + std::to_string(r));
    } else if (cmd == "freeasync") {
      Say("freeasync " + name + " " + std::to_string(cuMemFreeAsync(b.ptr, nullptr)));
      g_buffers.erase(name);
    } else if (cmd == "addr") {
      char hex[32];
      snprintf(hex, sizeof(hex), "0x%llx", b.ptr);
      Say("addr " + name + " " + hex);
    } else if (cmd == "free") {
      CUresult r;
      if (b.vmm) {
        r = cuMemUnmap(b.ptr, b.reserved);
        if (r == CUDA_SUCCESS && b.keep) r = cuMemRelease(b.handle);
        if (r == CUDA_SUCCESS) r = cuMemAddressFree(b.ptr, b.reserved);
      } else {
        r = cuMemFree_v2(b.ptr);
      }
      Say("free " + name + " " + std::to_string(r));
      g_buffers.erase(name);
    } else if (cmd == "ncclfree") {
      CUmemGenericAllocationHandle h = 0;
      CUresult r = cuMemRetainAllocationHandle(&h, reinterpret_cast<void*>(b.ptr));
      if (r == CUDA_SUCCESS) r = cuMemRelease(h);
      if (r == CUDA_SUCCESS) r = cuMemUnmap(b.ptr, b.reserved);
      if (r == CUDA_SUCCESS) r = cuMemRelease(h);
      if (r == CUDA_SUCCESS) r = cuMemAddressFree(b.ptr, b.reserved);
      char hex[32];
      snprintf(hex, sizeof(hex), "0x%llx", h);
      Say("ncclfree " + name + " " + std::to_string(r) + " " + hex);
      g_buffers.erase(name);
    } else if (cmd == "retain") {
      CUmemGenericAllocationHandle h = 0;
      Say("retain " + name + " " +
          std::to_string(cuMemRetainAllocationHandle(&h, reinterpret_cast<void*>(b.ptr))));
    } else if (cmd == "threads") {
      int n = 0;
      std::string target;
      unsigned seed = 0;
      n = atoi(name.c_str());
      std::string mode;
      in >> target >> seed >> mode;
      const Buffer watched = g_buffers[target];
      const bool async = mode == "async";
      for (int t = 0; t < n; ++t) {
        g_threads.emplace_back([watched, seed, async] {
          while (!g_stop.load()) {
            if (Check(watched, seed, async) != -1) g_errors.fetch_add(1);
            g_loops.fetch_add(1);
          }
        });
      }
      g_buffers.erase(name);
      Say("threads " + std::to_string(n));
    } else if (cmd == "churn") {
      // churn N: N threads allocating and freeing 1 MiB in a loop (each call may meet a swap).
      const int n = atoi(name.c_str());
      for (int t = 0; t < n; ++t) {
        g_threads.emplace_back([ctx] {
          cuCtxSetCurrent(ctx);
          while (!g_stop.load()) {
            CUdeviceptr p = 0;
            if (cuMemAlloc_v2(&p, 1 << 20) != CUDA_SUCCESS || cuMemFree_v2(p) != CUDA_SUCCESS) {
              g_errors.fetch_add(1);
            }
            g_loops.fetch_add(1);
          }
        });
      }
      g_buffers.erase(name);
      Say("churn " + std::to_string(n));
    } else if (cmd == "loops") {
      g_buffers.erase(name);
      Say("loops " + std::to_string(g_loops.load()));
    } else if (cmd == "stop") {
      g_buffers.erase(name);
      g_stop = true;
      for (auto& t : g_threads) t.join();
      g_threads.clear();
      Say("stop loops=" + std::to_string(g_loops.load()) +
          " errors=" + std::to_string(g_errors.load()));
    } else if (cmd == "devused") {
      g_buffers.erase(name);
      Say("devused " + (fakecudaDeviceUsed != nullptr ? std::to_string(fakecudaDeviceUsed())
                                                      : std::string("-1")));
    } else if (cmd == "bw") {
      void* host = nullptr;
      if (cuMemHostAlloc(&host, b.bytes, 0) != CUDA_SUCCESS) {
        Say("bw " + name + " failed");
        continue;
      }
      auto now = [] {
        timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
      };
      // The best of three of each direction (the first also warms the pages and the link).
      double d2h = 1e30, h2d = 1e30;
      CUresult r = CUDA_SUCCESS;
      for (int rep = 0; rep < 3 && r == CUDA_SUCCESS; ++rep) {
        const double t0 = now();
        r = cuMemcpyDtoH_v2(host, b.ptr, b.bytes);
        const double t1 = now();
        r = r != CUDA_SUCCESS ? r : cuMemcpyHtoD_v2(b.ptr, host, b.bytes);
        const double t2 = now();
        d2h = t1 - t0 < d2h ? t1 - t0 : d2h;
        h2d = t2 - t1 < h2d ? t2 - t1 : h2d;
      }
      const double t0 = 0, t1 = d2h, t2 = d2h + h2d;
      cuMemFreeHost(host);
      char line[160];
      snprintf(line, sizeof(line), "bw %s %.2f %.2f", name.c_str(),
               static_cast<double>(b.bytes) / 1e9 / (t1 - t0),
               static_cast<double>(b.bytes) / 1e9 / (t2 - t1));
      Say(r == CUDA_SUCCESS ? line : "bw " + name + " failed");
    } else if (cmd == "quit") {
      break;
    } else {
      Say("unknown " + cmd);
    }
  }
  return 0;
}
