// capgpu_bench: the cost of libtessera_capgpu.so against the stand-in driver (no GPU needed).
//
//   capgpu_bench [--reps N]
//
// Runs itself as worker processes, with and without LD_PRELOAD of the library, and prints:
//   - ns per cuLaunchKernel, and the difference the preload makes (the pass-through hook);
//   - ns per cuMemAlloc_v2 + cuMemFree_v2 pair: no preload, preload without a cap, preload with a
//     cap in a shared region (lock, charge, table insert; table remove, lock, credit);
//   - start-up: 64 processes started at once against one region; each times its first
//     cuMemGetInfo_v2 (which joins the region: open, mmap, lock, claim a slot, resolve the driver)
//     against the same first call without the preload; plus wall time for all 64 processes;
//   - swapping (swap.h): the gate's cost per driver call when no swap is pending (cuLaunchKernel
//     in a region with swapping on, against the same region without), and swap-out / swap-in
//     throughput of --swap-mib MiB (default 1024) to host RAM and to the disk tier, against plain
//     memcpy of the same bytes in the same process (into fresh pages, as the swap's host copy
//     is, and into warm ones). The stand-in's device memory is host memory, so these are the
//     library's own costs (chunking, pipelining, page faults, bookkeeping), not PCIe:
//     tests/gpu/swap_roundtrip.sh measures a real card.
// Each figure is the best of --reps runs (default 5); conditions are printed with it.
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "capgpu/cuda_abi.h"
#include "capgpu/limits.h"
#include "capgpu/region.h"

extern "C" {
CUresult cuInit(unsigned int);
CUresult cuMemAlloc_v2(CUdeviceptr*, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemGetInfo_v2(size_t*, size_t*);
CUresult cuMemsetD8_v2(CUdeviceptr, unsigned char, size_t);
CUresult cuMemcpyDtoH_v2(void*, CUdeviceptr, size_t);
CUresult cuLaunchKernel(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                        unsigned int, unsigned int, unsigned int, CUstream, void**, void**);
}
extern char** environ;

namespace {

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// ---- Workers (run in child processes) ---------------------------------------------------------

int WorkerLaunch(long n) {
  cuInit(0);
  CUresult acc = 0;
  for (long i = 0; i < 1000; ++i)
    acc |= cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
  int64_t t0 = NowNs();
  for (long i = 0; i < n; ++i) {
    acc |= cuLaunchKernel(nullptr, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr);
  }
  int64_t t1 = NowNs();
  printf("%.3f\n", static_cast<double>(t1 - t0) / static_cast<double>(n));
  return acc == CUDA_SUCCESS ? 0 : 1;
}

int WorkerAllocFree(long n) {
  cuInit(0);
  CUdeviceptr p = 0;
  for (long i = 0; i < 1000; ++i) {
    if (cuMemAlloc_v2(&p, 1 << 20) != CUDA_SUCCESS || cuMemFree_v2(p) != CUDA_SUCCESS) return 1;
  }
  int64_t t0 = NowNs();
  for (long i = 0; i < n; ++i) {
    if (cuMemAlloc_v2(&p, 1 << 20) != CUDA_SUCCESS) return 1;
    if (cuMemFree_v2(p) != CUDA_SUCCESS) return 1;
  }
  int64_t t1 = NowNs();
  printf("%.3f\n", static_cast<double>(t1 - t0) / static_cast<double>(n));
  return 0;
}

// Allocates `mib` MiB through the library (swapping on in `region`), fills it, swaps it out and
// back by asking its own region, checks it, and times memcpy of the same bytes. Prints
// "out_us in_us memcpy_fresh_us memcpy_warm_us host_bytes disk_bytes".
int WorkerSwap(long mib, const char* region_path) {
  cuInit(0);
  const size_t bytes = static_cast<size_t>(mib) << 20;
  CUdeviceptr p = 0;
  if (cuMemAlloc_v2(&p, bytes) != CUDA_SUCCESS) return 1;
  if (cuMemsetD8_v2(p, 0x5a, bytes) != CUDA_SUCCESS) return 1;
  tessera::capgpu::Region region;
  if (region.Open(region_path) != 0) return 1;
  tessera::capgpu::SwapSummary s;
  if (!tessera::capgpu::RequestSwap(region, tessera::capgpu::SwapTarget::kHold) ||
      !tessera::capgpu::WaitSwapSettled(region, 600000, &s) || s.swapped != 1) {
    return 1;
  }
  const uint64_t host = s.host_bytes, disk = s.disk_bytes;
  if (!tessera::capgpu::RequestSwap(region, tessera::capgpu::SwapTarget::kResident) ||
      !tessera::capgpu::WaitSwapSettled(region, 600000, &s) || s.resident != 1) {
    return 1;
  }
  uint64_t out_us = 0, in_us = 0;
  {
    tessera::capgpu::RegionLock lock(region);
    for (const auto& slot : region.data().slots) {
      if (slot.pid == getpid()) {
        out_us = slot.last_swap_out_us;
        in_us = slot.last_swap_in_us;
      }
    }
  }
  // Contents: spot-check a page in every MiB.
  char page[4096];
  for (size_t off = 0; off < bytes; off += 1 << 20) {
    if (cuMemcpyDtoH_v2(page, p + off, sizeof(page)) != CUDA_SUCCESS) return 1;
    for (char c : page) {
      if (c != 0x5a) return 1;
    }
  }
  // memcpy of the same bytes: from the device range (host memory here) into newly allocated
  // (populated) pages, as the swap's pinned copy is, then into the same pages again (warm).
  int64_t t0 = NowNs();
  void* dst = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (dst == MAP_FAILED) return 1;
  memcpy(dst, reinterpret_cast<void*>(p), bytes);
  int64_t t1 = NowNs();
  memcpy(dst, reinterpret_cast<void*>(p), bytes);
  int64_t t2 = NowNs();
  munmap(dst, bytes);
  printf("%llu %llu %lld %lld %llu %llu\n", static_cast<unsigned long long>(out_us),
         static_cast<unsigned long long>(in_us), static_cast<long long>((t1 - t0) / 1000),
         static_cast<long long>((t2 - t1) / 1000), static_cast<unsigned long long>(host),
         static_cast<unsigned long long>(disk));
  return cuMemFree_v2(p) == CUDA_SUCCESS ? 0 : 1;
}

int64_t CpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

int WorkerJoin() {
  size_t free = 0, total = 0;
  int64_t c0 = CpuNs();
  int64_t t0 = NowNs();
  CUresult r = cuMemGetInfo_v2(&free, &total);  // first intercepted call: joins the region
  int64_t t1 = NowNs();
  int64_t c1 = CpuNs();
  printf("%lld %lld %zu\n", static_cast<long long>(t1 - t0), static_cast<long long>(c1 - c0),
         total);
  return r == CUDA_SUCCESS ? 0 : 1;
}

// ---- Orchestration ------------------------------------------------------------------------------

struct Child {
  pid_t pid;
  int out;
};

std::vector<std::string> BaseEnv(bool preload, const std::string& region) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    if (kv.rfind("LD_PRELOAD=", 0) == 0 || kv.rfind("LD_LIBRARY_PATH=", 0) == 0 ||
        kv.rfind("TESSERA_", 0) == 0 || kv.rfind("CUDA_DEVICE_MEMORY_LIMIT", 0) == 0) {
      continue;
    }
    env.push_back(kv);
  }
  env.push_back(std::string("LD_LIBRARY_PATH=") + CAPGPU_FAKE_DRIVER_DIR);
  if (preload) env.push_back(std::string("LD_PRELOAD=") + CAPGPU_LIBRARY);
  if (!region.empty()) env.push_back("TESSERA_CAPGPU_REGION=" + region);
  return env;
}

Child Spawn(const std::vector<std::string>& args, std::vector<std::string> env) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) exit(2);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    std::vector<char*> argv{const_cast<char*>("/proc/self/exe")};
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    execve("/proc/self/exe", argv.data(), envp.data());
    _exit(127);
  }
  close(out[1]);
  return Child{pid, out[0]};
}

std::string Collect(Child c) {
  std::string s;
  char buf[256];
  ssize_t n;
  while ((n = read(c.out, buf, sizeof(buf))) > 0) s.append(buf, static_cast<size_t>(n));
  close(c.out);
  int status = 0;
  waitpid(c.pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "worker failed: %s\n", s.c_str());
    exit(2);
  }
  return s;
}

double BestOf(int reps, const std::vector<std::string>& args, bool preload,
              const std::string& region) {
  double best = 1e18;
  for (int i = 0; i < reps; ++i) {
    best = std::min(best, atof(Collect(Spawn(args, BaseEnv(preload, region))).c_str()));
  }
  return best;
}

std::string MakeRegion(const char* dir, const char* name, uint64_t bytes) {
  std::string path = std::string(dir) + "/" + name;
  unlink(path.c_str());
  tessera::capgpu::LimitList l;
  l.count = 1;
  l.bytes[0] = bytes;
  if (tessera::capgpu::CreateRegionFile(path.c_str(), l, 0600, false) != 0) {
    fprintf(stderr, "cannot create region %s\n", path.c_str());
    exit(2);
  }
  return path;
}

struct JoinFigures {
  double p50_us, p95_us, max_us, cpu_p50_us, wall_ms;
};

JoinFigures Join(int processes, bool preload, const std::string& region) {
  std::vector<Child> children;
  int64_t t0 = NowNs();
  for (int i = 0; i < processes; ++i) {
    children.push_back(Spawn({"--worker-join"}, BaseEnv(preload, region)));
  }
  std::vector<double> us, cpu_us;
  for (Child& c : children) {
    std::string out = Collect(c);
    char* end = nullptr;
    us.push_back(strtod(out.c_str(), &end) / 1000.0);
    cpu_us.push_back(strtod(end, nullptr) / 1000.0);
  }
  int64_t t1 = NowNs();
  std::sort(us.begin(), us.end());
  std::sort(cpu_us.begin(), cpu_us.end());
  auto at = [](const std::vector<double>& v, double q) {
    return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
  };
  return JoinFigures{at(us, 0.5), at(us, 0.95), us.back(), at(cpu_us, 0.5),
                     static_cast<double>(t1 - t0) / 1e6};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "--worker-launch") == 0) return WorkerLaunch(atol(argv[2]));
  if (argc >= 2 && strcmp(argv[1], "--worker-allocfree") == 0)
    return WorkerAllocFree(atol(argv[2]));
  if (argc >= 2 && strcmp(argv[1], "--worker-join") == 0) return WorkerJoin();
  if (argc >= 4 && strcmp(argv[1], "--worker-swap") == 0) return WorkerSwap(atol(argv[2]), argv[3]);
  int reps = 5;
  long swap_mib = 1024;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--swap-mib") == 0 && i + 1 < argc) {
      swap_mib = atol(argv[++i]);
    } else {
      fprintf(stderr, "usage: capgpu_bench [--reps N] [--swap-mib MIB]\n");
      return 2;
    }
  }
  if (reps < 1 || swap_mib < 1) {
    fprintf(stderr, "capgpu_bench: --reps and --swap-mib must be positive\n");
    return 2;
  }

  const char* dir = getenv("TMPDIR") != nullptr ? getenv("TMPDIR") : "/tmp";
  if (access("/dev/shm", W_OK) == 0) dir = "/dev/shm";
  const std::string region = MakeRegion(dir, "capgpu-bench-region", 64ULL << 30);

  printf("capgpu_bench: libtessera_capgpu.so against the stand-in driver\n");
  printf("conditions: %ld online CPUs, region in %s, best of %d runs, each in a fresh process\n\n",
         sysconf(_SC_NPROCESSORS_ONLN), dir, reps);

  const long kLaunches = 20000000;
  double launch_base = BestOf(reps, {"--worker-launch", std::to_string(kLaunches)}, false, "");
  double launch_hook = BestOf(reps, {"--worker-launch", std::to_string(kLaunches)}, true, region);
  printf("kernel launch (cuLaunchKernel, %ld calls, capped process)\n", kLaunches);
  printf("  without preload   %8.2f ns/call\n", launch_base);
  printf("  with preload      %8.2f ns/call\n", launch_hook);
  printf("  added             %8.2f ns/call   (target <= 20 ns)\n\n", launch_hook - launch_base);

  const long kPairs = 1000000;
  double pair_base = BestOf(reps, {"--worker-allocfree", std::to_string(kPairs)}, false, "");
  double pair_uncapped = BestOf(reps, {"--worker-allocfree", std::to_string(kPairs)}, true, "");
  double pair_capped = BestOf(reps, {"--worker-allocfree", std::to_string(kPairs)}, true, region);
  printf("allocation/free pair (cuMemAlloc_v2 1 MiB + cuMemFree_v2, %ld pairs, one thread)\n",
         kPairs);
  printf("  without preload          %8.2f ns/pair\n", pair_base);
  printf("  preload, no cap set      %8.2f ns/pair   (added %.2f)\n", pair_uncapped,
         pair_uncapped - pair_base);
  printf("  preload, shared region   %8.2f ns/pair   (added %.2f, target <= 200 ns)\n\n",
         pair_capped, pair_capped - pair_base);

  const int kProcesses = 64;
  JoinFigures best_base{1e18, 1e18, 1e18, 1e18, 1e18}, best_join{1e18, 1e18, 1e18, 1e18, 1e18};
  JoinFigures single{1e18, 1e18, 1e18, 1e18, 1e18};
  for (int i = 0; i < reps; ++i) {
    const std::string r = MakeRegion(dir, "capgpu-bench-join", 64ULL << 30);
    JoinFigures b = Join(kProcesses, false, "");
    JoinFigures j = Join(kProcesses, true, r);
    JoinFigures s = Join(1, true, MakeRegion(dir, "capgpu-bench-join1", 64ULL << 30));
    if (j.p50_us < best_join.p50_us) best_join = j;
    if (b.p50_us < best_base.p50_us) best_base = b;
    if (s.p50_us < single.p50_us) single = s;
  }
  printf("start-up: %d processes started at once, one region (first cuMemGetInfo_v2 call)\n",
         kProcesses);
  printf("  without preload   p50 %8.1f us  p95 %8.1f us  max %8.1f us\n", best_base.p50_us,
         best_base.p95_us, best_base.max_us);
  printf("  joining region    p50 %8.1f us  p95 %8.1f us  max %8.1f us   (target < 1000 us)\n",
         best_join.p50_us, best_join.p95_us, best_join.max_us);
  printf("  one process alone     %8.1f us\n", single.p50_us);
  printf(
      "  wall time, all %d processes: %.1f ms without preload, %.1f ms with (%.3f ms/process "
      "added)\n",
      kProcesses, best_base.wall_ms, best_join.wall_ms,
      (best_join.wall_ms - best_base.wall_ms) / kProcesses);

  // ---- Swapping --------------------------------------------------------------------------------
  auto swap_region = [&](const char* name, uint64_t ram, const char* swap_dir) {
    std::string path = MakeRegion(dir, name, 64ULL << 30);
    tessera::capgpu::Region r;
    if (r.Open(path.c_str()) != 0) exit(2);
    tessera::capgpu::RegionLock lock(r);
    if (!lock.held() || !tessera::capgpu::ConfigureSwap(r.data(), ram, swap_dir)) exit(2);
    return path;
  };
  const std::string gate_region = swap_region("capgpu-bench-swap", tessera::capgpu::kNoLimit, "");
  double launch_gate =
      BestOf(reps, {"--worker-launch", std::to_string(kLaunches)}, true, gate_region);
  printf("\nswap gate (cuLaunchKernel, %ld calls, region with swapping on, no swap pending)\n",
         kLaunches);
  printf("  capped, swapping off  %8.2f ns/call\n", launch_hook);
  printf("  capped, swapping on   %8.2f ns/call\n", launch_gate);
  printf("  gate                  %8.2f ns/call   (target < 20 ns)\n", launch_gate - launch_hook);

  const char* tmp = getenv("TMPDIR") != nullptr ? getenv("TMPDIR") : "/tmp";
  for (int tier = 0; tier < 2; ++tier) {
    double best_out = 1e18, best_in = 1e18, best_fresh = 1e18, best_warm = 1e18;
    unsigned long long host = 0, disk = 0;
    for (int i = 0; i < reps; ++i) {
      const std::string r = tier == 0
                                ? swap_region("capgpu-bench-swap", tessera::capgpu::kNoLimit, "")
                                : swap_region("capgpu-bench-swap", 0, tmp);
      std::string out =
          Collect(Spawn({"--worker-swap", std::to_string(swap_mib), r}, BaseEnv(true, r)));
      double o = 0, in = 0, fresh = 0, warm = 0;
      if (sscanf(out.c_str(), "%lf %lf %lf %lf %llu %llu", &o, &in, &fresh, &warm, &host, &disk) !=
          6) {
        fprintf(stderr, "swap worker: %s\n", out.c_str());
        return 2;
      }
      best_out = std::min(best_out, o);
      best_in = std::min(best_in, in);
      best_fresh = std::min(best_fresh, fresh);
      best_warm = std::min(best_warm, warm);
    }
    const double gb = static_cast<double>(swap_mib) * 1048576.0 / 1e9;
    printf("\nswap of %ld MiB (one cuMemAlloc_v2), %s (host %llu bytes, disk %llu bytes)\n",
           swap_mib,
           tier == 0 ? "host RAM tier" : "disk tier (swap_ram 0, files under TMPDIR or /tmp)", host,
           disk);
    printf("  swap-out   %9.1f ms  %6.2f GB/s\n", best_out / 1e3, gb / (best_out / 1e6));
    printf("  swap-in    %9.1f ms  %6.2f GB/s\n", best_in / 1e3, gb / (best_in / 1e6));
    printf("  allocate + memcpy    %9.1f ms  %6.2f GB/s   (the same bytes, same process)\n",
           best_fresh / 1e3, gb / (best_fresh / 1e6));
    printf("  memcpy, warm pages   %9.1f ms  %6.2f GB/s\n", best_warm / 1e3,
           gb / (best_warm / 1e6));
  }
  unlink(gate_region.c_str());
  unlink(region.c_str());
  unlink((std::string(dir) + "/capgpu-bench-join").c_str());
  unlink((std::string(dir) + "/capgpu-bench-join1").c_str());
  return 0;
}
