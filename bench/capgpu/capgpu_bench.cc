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
//     against the same first call without the preload; plus wall time for all 64 processes.
// Each figure is the best of --reps runs (default 5); conditions are printed with it.
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
  int reps = 5;
  if (argc == 3 && strcmp(argv[1], "--reps") == 0) reps = atoi(argv[2]);

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
  unlink(region.c_str());
  unlink((std::string(dir) + "/capgpu-bench-join").c_str());
  unlink((std::string(dir) + "/capgpu-bench-join1").c_str());
  return 0;
}
