// End-to-end tests of libtessera_capgpu.so: probe processes run under LD_PRELOAD against the
// stand-in driver (fake_cuda.cc), reaching it by direct linking, dlsym and cuGetProcAddress.
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "capgpu/region.h"

extern char** environ;

namespace tessera::capgpu {
namespace {

constexpr uint64_t kGiB = 1ULL << 30;
const std::string kFourGiB = std::to_string(4 * kGiB);

using Env = std::map<std::string, std::string>;

// A running probe with pipes to its stdin and stdout.
struct Proc {
  pid_t pid = -1;
  int in = -1;
  int out = -1;
  std::string output;
};

int64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

class PreloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/capgpu-preload-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    region_ = dir_ + "/region";
  }
  void TearDown() override {
    unlink(region_.c_str());
    rmdir(dir_.c_str());
  }

  void CreateRegion(uint64_t bytes) {
    LimitList l;
    l.count = 1;
    l.bytes[0] = bytes;
    ASSERT_EQ(CreateRegionFile(region_.c_str(), l, 0600, false), 0);
  }

  // The probe's environment: ours without any cap settings, then the preload and `extra`.
  std::vector<std::string> Environment(const Env& extra, bool preload) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string kv = *e;
      std::string key = kv.substr(0, kv.find('='));
      if (key == "LD_PRELOAD" || key == "LD_LIBRARY_PATH" || key.rfind("TESSERA_", 0) == 0 ||
          key.rfind("CUDA_", 0) == 0 || key.rfind("FAKECUDA_", 0) == 0) {
        continue;
      }
      env.push_back(kv);
    }
    if (preload) env.push_back(std::string("LD_PRELOAD=") + CAPGPU_LIBRARY);
    env.push_back(std::string("LD_LIBRARY_PATH=") + CAPGPU_FAKE_DRIVER_DIR);
    for (const auto& [k, v] : extra) env.push_back(k + "=" + v);
    return env;
  }

  Env Capped() { return {{"TESSERA_CAPGPU_REGION", region_}}; }

  Proc Start(const std::string& mode, const std::vector<std::string>& args, const Env& extra,
             bool preload = true) {
    std::string path = std::string(CAPGPU_PROBE_DIR) + "/capgpu_probe_" + mode;
    std::vector<std::string> env = Environment(extra, preload);
    int in[2], out[2];
    EXPECT_EQ(pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
    Proc p;
    p.pid = fork();
    if (p.pid == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      std::vector<char*> argv{path.data()};
      std::vector<std::string> copy = args;
      for (auto& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      std::vector<char*> envp;
      for (auto& e : env) envp.push_back(e.data());
      envp.push_back(nullptr);
      execve(path.c_str(), argv.data(), envp.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    p.in = in[1];
    p.out = out[0];
    return p;
  }

  // Reads until `needle` appears in the output (true) or the process closes stdout / 10 s pass.
  bool ReadUntil(Proc& p, const std::string& needle) {
    const int64_t deadline = NowMs() + 10000;
    while (p.output.find(needle) == std::string::npos) {
      int64_t left = deadline - NowMs();
      if (left <= 0) return false;
      pollfd pfd{p.out, POLLIN, 0};
      if (poll(&pfd, 1, static_cast<int>(left)) <= 0) continue;
      char buf[4096];
      ssize_t n = read(p.out, buf, sizeof(buf));
      if (n <= 0) return p.output.find(needle) != std::string::npos;
      p.output.append(buf, static_cast<size_t>(n));
    }
    return true;
  }

  // Closes stdin, reads all output and waits; the exit status, or -1 after a 10 s timeout.
  int Finish(Proc& p) {
    if (p.in >= 0) close(p.in);
    p.in = -1;
    ReadUntil(p, std::string("\x01never"));
    close(p.out);
    const int64_t deadline = NowMs() + 10000;
    int status = 0;
    while (waitpid(p.pid, &status, WNOHANG) == 0) {
      if (NowMs() > deadline) {
        kill(p.pid, SIGKILL);
        waitpid(p.pid, &status, 0);
        return -1;
      }
      usleep(1000);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  // Runs a probe to completion; returns its output.
  std::string Run(const std::string& mode, const std::vector<std::string>& args, const Env& extra,
                  bool preload = true) {
    Proc p = Start(mode, args, extra, preload);
    int status = Finish(p);
    EXPECT_EQ(status, 0) << p.output;
    return p.output;
  }

  std::string dir_, region_;
};

std::string Info(uint64_t free, uint64_t total) {
  return "info 0 free=" + std::to_string(free) + " total=" + std::to_string(total) + "\n";
}

// ---- Each way of reaching the driver --------------------------------------------------------

class EveryPath : public PreloadTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(EveryPath, RefusesPastTheCapAndReportsTheCap) {
  CreateRegion(4 * kGiB);
  Env env = Capped();
  if (GetParam() == "procaddr_v2") env["PROBE_PROC_V2"] = "1";
  std::string mode = GetParam() == "procaddr_v2" ? "procaddr" : GetParam();
  std::string out = Run(mode,
                        {"alloc", "3GiB", "alloc", "2GiB", "info", "total", "free", "alloc", "2GiB",
                         "launch", "launch_ptsz"},
                        env);
  EXPECT_EQ(out, "alloc 0\nalloc 2\n" + Info(kGiB, 4 * kGiB) + "total 0 " +
                     std::to_string(4 * kGiB) + "\nfree 0\nalloc 0\nlaunch 0\nlaunch_ptsz 0\n");
}

INSTANTIATE_TEST_SUITE_P(Paths, EveryPath,
                         ::testing::Values("direct", "dlsym", "procaddr", "procaddr_v2"));

// Every allocation kind is charged and its free credited, through every path.
struct KindCase {
  std::vector<std::string> alloc;  // allocates 768 MiB (or near)
  std::string free;
};

class EveryKind : public PreloadTest,
                  public ::testing::WithParamInterface<std::tuple<std::string, int>> {};

TEST_P(EveryKind, ChargedAndCredited) {
  const KindCase kinds[] = {
      {{"alloc", "768MiB"}, "free"},
      {{"managed", "768MiB"}, "free"},
      {{"async", "768MiB"}, "freeasync"},
      {{"async_ptsz", "768MiB"}, "freeasync_ptsz"},
      {{"pool", "768MiB"}, "freeasync"},
      {{"pool_ptsz", "768MiB"}, "free"},
      {{"pitch", "1000", "786432"}, "free"},  // pitch 1024 x 768Ki rows = 768 MiB
      {{"create", "768MiB"}, "release"},
      {{"array", "16384", "12288"}, "destroy"},         // float: 16Ki x 12Ki x 4 B = 768 MiB
      {{"array3d", "1024", "1024", "192"}, "destroy"},  // 1Ki x 1Ki x 192 x 4 B = 768 MiB
  };
  const auto& [mode, index] = GetParam();
  const KindCase& k = kinds[index];
  CreateRegion(kGiB);
  std::vector<std::string> args = k.alloc;
  for (std::string s : {"alloc", "512MiB", k.free.c_str(), "alloc", "512MiB", "info"}) {
    args.push_back(s);
  }
  std::string out = Run(mode, args, Capped());
  EXPECT_EQ(out, k.alloc[0] + " 0\nalloc 2\n" + k.free + " 0\nalloc 0\n" + Info(kGiB / 2, kGiB))
      << "kind " << k.alloc[0];
}

INSTANTIATE_TEST_SUITE_P(Kinds, EveryKind,
                         ::testing::Combine(::testing::Values("direct", "dlsym", "procaddr"),
                                            ::testing::Range(0, 10)));

TEST_F(PreloadTest, OldAbiVariantFromProcAddressIsNotMistakenForTheHook) {
  CreateRegion(kGiB);
  // cuMemAlloc at cudaVersion 2000 is the 32-bit ABI; the library must not hand out the _v2
  // wrapper for it (it passes through uncharged).
  std::string out = Run("procaddr", {"oldalloc", "1024", "info"}, Capped());
  EXPECT_EQ(out, "oldalloc 0\n" + Info(kGiB, kGiB));
}

// ---- Configuration --------------------------------------------------------------------------

TEST_F(PreloadTest, UncappedProcessSeesTheCardUnchanged) {
  std::string out = Run("direct", {"info", "alloc", "20GiB", "info"}, {});
  EXPECT_EQ(out, Info(80 * kGiB, 80 * kGiB) + "alloc 0\n" + Info(60 * kGiB, 80 * kGiB));
}

TEST_F(PreloadTest, WithoutThePreloadNothingChanges) {
  CreateRegion(kGiB);
  std::string out = Run("direct", {"alloc", "2GiB", "info"}, Capped(), /*preload=*/false);
  EXPECT_EQ(out, "alloc 0\n" + Info(78 * kGiB, 80 * kGiB));
}

TEST_F(PreloadTest, RegionLimitIsAuthoritativeOverTheEnvironment) {
  CreateRegion(4 * kGiB);
  Env env = Capped();
  env["TESSERA_GPU_MEMORY_LIMIT"] = "100GiB";
  env["CUDA_DEVICE_MEMORY_LIMIT"] = "100g";
  EXPECT_EQ(Run("direct", {"alloc", "5GiB", "info"}, env), "alloc 2\n" + Info(4 * kGiB, 4 * kGiB));
}

TEST_F(PreloadTest, HamiVariableCapsAProcessWithoutARegion) {
  std::string out = Run("dlsym", {"alloc", "3GiB", "info"}, {{"CUDA_DEVICE_MEMORY_LIMIT", "2g"}});
  EXPECT_EQ(out, "alloc 2\n" + Info(2 * kGiB, 2 * kGiB));
}

TEST_F(PreloadTest, MissingRegionIsCreatedFromTheLimitByTheFirstProcess) {
  Env env = Capped();
  env["TESSERA_GPU_MEMORY_LIMIT"] = "2GiB";
  EXPECT_EQ(Run("direct", {"alloc", "1GiB", "hold"}, env).substr(0, 8), "alloc 0\n");
  Region r;
  ASSERT_EQ(r.Open(region_.c_str()), 0);
  RegionLock lock(r);
  EXPECT_EQ(LimitFor(r.data(), 0), 2 * kGiB);
  EXPECT_EQ(r.data().used[0], 0u);  // the process left at exit
}

TEST_F(PreloadTest, PerDeviceLimitsFollowTheCurrentContext) {
  LimitList l;
  l.count = 2;
  l.bytes[0] = 4 * kGiB;
  l.bytes[1] = kGiB;
  ASSERT_EQ(CreateRegionFile(region_.c_str(), l, 0600, false), 0);
  Env env = Capped();
  env["FAKECUDA_DEVICE_COUNT"] = "2";
  std::string out = Run(
      "direct", {"ctx", "1", "alloc", "2GiB", "info", "ctx", "0", "alloc", "2GiB", "info"}, env);
  EXPECT_EQ(out,
            "ctx 0\nalloc 2\n" + Info(kGiB, kGiB) + "ctx 0\nalloc 0\n" + Info(2 * kGiB, 4 * kGiB));
}

TEST_F(PreloadTest, NvmlReportsTheCap) {
  CreateRegion(4 * kGiB);
  std::string out = Run("dlsym", {"alloc", "1GiB", "nvml"}, Capped());
  const std::string t = std::to_string(4 * kGiB), f = std::to_string(3 * kGiB),
                    u = std::to_string(kGiB);
  EXPECT_EQ(out, "alloc 0\nnvml total=" + t + " free=" + f + " used=" + u + "\nnvml2 total=" + t +
                     " free=" + f + " used=" + u + "\n");
  // A device CUDA does not see is left alone.
  Env hidden = Capped();
  hidden["CUDA_VISIBLE_DEVICES"] = "GPU-fake-3";
  const std::string card = std::to_string(80 * kGiB);
  EXPECT_EQ(Run("dlsym", {"nvml"}, hidden), "nvml total=" + card + " free=" + card +
                                                " used=0\nnvml2 total=" + card + " free=" + card +
                                                " used=0\n");
  Env visible = Capped();
  visible["CUDA_VISIBLE_DEVICES"] = "GPU-fake-0";
  EXPECT_EQ(Run("dlsym", {"nvml"}, visible).substr(0, 17 + t.size()), "nvml total=" + t + " free=");
}

// ---- Processes sharing one cap --------------------------------------------------------------

TEST_F(PreloadTest, TwoProcessesShareOneCap) {
  CreateRegion(4 * kGiB);
  Proc a = Start("direct", {"alloc", "3GiB", "hold"}, Capped());
  ASSERT_TRUE(ReadUntil(a, "holding")) << a.output;
  EXPECT_EQ(Run("dlsym", {"alloc", "2GiB", "alloc", "1GiB", "info"}, Capped()),
            "alloc 2\nalloc 0\n" + Info(0, 4 * kGiB));
  EXPECT_EQ(Finish(a), 0);
  // a exited: its 3 GiB are back.
  EXPECT_EQ(Run("procaddr", {"alloc", "4GiB"}, Capped()), "alloc 0\n");
}

// Kernel launches are counted in the share's region (the agent's activity signal), by every
// process of the share, through both launch entry points.
TEST_F(PreloadTest, KernelLaunchesAreCountedInTheRegion) {
  CreateRegion(4 * kGiB);
  EXPECT_EQ(Run("direct", {"launch", "launch_ptsz", "launch"}, Capped()),
            "launch 0\nlaunch_ptsz 0\nlaunch 0\n");
  EXPECT_EQ(Run("dlsym", {"launch"}, Capped()), "launch 0\n");
  Region region;
  ASSERT_EQ(region.Open(region_.c_str()), 0);
  EXPECT_EQ(__atomic_load_n(&region.data().launches, __ATOMIC_RELAXED), 4u);
  // Uncapped, nothing is counted anywhere and the launch still goes through.
  EXPECT_EQ(Run("direct", {"launch"}, {}), "launch 0\n");
  EXPECT_EQ(__atomic_load_n(&region.data().launches, __ATOMIC_RELAXED), 4u);
}

TEST_F(PreloadTest, ForkedChildSharesTheCapWithItsOwnSlot) {
  CreateRegion(4 * kGiB);
  EXPECT_EQ(
      Run("direct", {"alloc", "3GiB", "fork", "alloc", "2GiB", "alloc", "1GiB", "info"}, Capped()),
      "alloc 0\nalloc 2\nalloc 0\n" + Info(0, 4 * kGiB));
}

TEST_F(PreloadTest, SpawnedChildSharesTheCap) {
  CreateRegion(4 * kGiB);
  EXPECT_EQ(Run("dlsym", {"alloc", "3GiB", "spawn", "alloc", "2GiB", "info"}, Capped()),
            "alloc 0\nalloc 2\n" + Info(kGiB, 4 * kGiB));
}

TEST_F(PreloadTest, ExecDropsThePreExecImagesCharges) {
  CreateRegion(4 * kGiB);
  // The driver frees an image's memory at exec; its slot is taken over, charges dropped.
  EXPECT_EQ(Run("direct", {"alloc", "3GiB", "exec", "alloc", "3GiB", "info"}, Capped()),
            "alloc 0\nalloc 0\n" + Info(kGiB, 4 * kGiB));
}

TEST_F(PreloadTest, ProcessKilledMidAllocationGivesItsChargeBack) {
  CreateRegion(4 * kGiB);
  Env env = Capped();
  env["FAKECUDA_BLOCK_BYTES"] = std::to_string(kGiB);
  Proc a = Start("direct", {"alloc", "2GiB", "alloc", "1GiB"}, env);
  ASSERT_TRUE(ReadUntil(a, "fakecuda: blocking")) << a.output;
  // a holds 3 GiB (2 allocated, 1 charged and inside the driver).
  EXPECT_EQ(Run("direct", {"alloc", "2GiB"}, Capped()), "alloc 2\n");
  kill(a.pid, SIGKILL);
  EXPECT_EQ(Finish(a), 128 + SIGKILL);
  EXPECT_EQ(Run("direct", {"alloc", "4GiB", "info"}, Capped()), "alloc 0\n" + Info(0, 4 * kGiB));
}

TEST_F(PreloadTest, ProcessKilledHoldingTheLockBlocksNobody) {
  CreateRegion(4 * kGiB);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t holder = fork();
  if (holder == 0) {
    // Joins like the library does, charges 3 GiB, then dies inside the lock.
    Region r;
    if (r.Open(region_.c_str()) != 0) _exit(1);
    r.Lock();
    int slot = ClaimSlot(r.data(), SelfProcess());
    TryCharge(r.data(), slot, 0, 3 * kGiB);
    if (write(ready[1], "x", 1) != 1) _exit(1);
    for (;;) pause();
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  kill(holder, SIGKILL);
  int status;
  waitpid(holder, &status, 0);
  EXPECT_EQ(Run("dlsym", {"alloc", "4GiB", "info"}, Capped()), "alloc 0\n" + Info(0, 4 * kGiB));
  close(ready[0]);
  close(ready[1]);
}

TEST_F(PreloadTest, ManyProcessesAtOnceNeverPassTheCap) {
  constexpr int kProcesses = 32;
  CreateRegion(8 * kGiB);
  std::vector<Proc> procs;
  const char* modes[] = {"direct", "dlsym", "procaddr"};
  for (int i = 0; i < kProcesses; ++i) {
    procs.push_back(Start(modes[i % 3], {"allocloop", "64MiB", "hold"}, Capped()));
  }
  int total = 0;
  for (Proc& p : procs) {
    ASSERT_TRUE(ReadUntil(p, "holding")) << p.output;
    total += atoi(p.output.substr(p.output.find("count ") + 6).c_str());
  }
  EXPECT_EQ(total, 8 * 1024 / 64);  // exactly the cap, split among them
  for (Proc& p : procs) EXPECT_EQ(Finish(p), 0);
  Region r;
  ASSERT_EQ(r.Open(region_.c_str()), 0);
  RegionLock lock(r);
  EXPECT_EQ(r.data().used[0], 0u);
  EXPECT_EQ(r.data().slots_in_use, 0u);
}

// ---- The agent's tool and the library's linkage ---------------------------------------------

std::string Shell(const std::string& command, int* status) {
  FILE* f = popen(command.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  int s = pclose(f);
  *status = WIFEXITED(s) ? WEXITSTATUS(s) : -1;
  return out;
}

TEST_F(PreloadTest, RegionToolCreatesShowsAndReaps) {
  const std::string tool = CAPGPU_REGION_TOOL;
  int status = 0;
  Shell(tool + " create " + region_ + " --limit 4GiB", &status);
  EXPECT_EQ(status, 0);
  Shell(tool + " create " + region_ + " --limit 8GiB 2>/dev/null", &status);
  EXPECT_EQ(status, 2);  // exists: the limit stays
  Shell(tool + " create " + region_ + " --limit lots 2>/dev/null", &status);
  EXPECT_EQ(status, 1);
  Env env = Capped();
  env["FAKECUDA_BLOCK_BYTES"] = std::to_string(kGiB);
  Proc a = Start("direct", {"alloc", "1GiB"}, env);
  ASSERT_TRUE(ReadUntil(a, "fakecuda: blocking"));
  std::string shown = Shell(tool + " show " + region_, &status);
  EXPECT_EQ(status, 0);
  EXPECT_NE(shown.find("device 0: limit 4294967296 (4.00 GiB)  used 1073741824"), std::string::npos)
      << shown;
  EXPECT_NE(shown.find("pid " + std::to_string(a.pid) + "  device 0: 1073741824"),
            std::string::npos)
      << shown;
  kill(a.pid, SIGKILL);
  Finish(a);
  EXPECT_EQ(Shell(tool + " reap " + region_, &status), "reaped 1 dead process\n");
  shown = Shell(tool + " show " + region_, &status);
  EXPECT_NE(shown.find("processes: 0  reaped so far: 1"), std::string::npos) << shown;
}

TEST(Linkage, PreloadLibraryNeedsOnlyLibc) {
  int status = 0;
  std::string needed =
      Shell(std::string("readelf -d ") + CAPGPU_LIBRARY + " | grep NEEDED", &status);
  EXPECT_EQ(needed.find("libstdc++"), std::string::npos) << needed;
  EXPECT_EQ(needed.find("libgcc_s"), std::string::npos) << needed;
  EXPECT_NE(needed.find("libc.so.6"), std::string::npos) << needed;
}

}  // namespace
}  // namespace tessera::capgpu
