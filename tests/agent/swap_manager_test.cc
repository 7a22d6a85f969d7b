// The agent's swap manager with real processes: two shares whose caps overcommit one card
// (capgpu_swap_probe processes under the cap library, on the stand-in driver with one device
// file shared by both, so the card's memory is really shared). The idle share is swapped out
// when the other grows; it resumes when it runs again; neither job ever sees an error.
#include "agent/swap_manager.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "capgpu/region.h"
#include "capgpu/swap_probe_process.h"
#include "support/wait.h"

namespace tessera::agent {
namespace {

using capgpu::Probe;
constexpr uint64_t kMiB = 1ULL << 20;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class SwapManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/agent-swap-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const char* f : {"/a", "/b", "/device", "/symlink", "/hardlink"})
      unlink((dir_ + f).c_str());
    rmdir(dir_.c_str());
  }
  std::string Region(const std::string& name, uint64_t cap, const std::string& swap_dir = "") {
    std::string path = dir_ + "/" + name;
    capgpu::LimitList l;
    l.count = 1;
    l.bytes[0] = cap;
    EXPECT_EQ(capgpu::CreateRegionFile(path.c_str(), l, 0600, false), 0);
    capgpu::Region r;
    EXPECT_EQ(r.Open(path.c_str()), 0);
    capgpu::RegionLock lock(r);
    EXPECT_TRUE(capgpu::ConfigureSwap(r.data(), capgpu::kNoLimit, swap_dir.c_str()));
    return path;
  }
  std::map<std::string, std::string> Env(const std::string& region) const {
    return {{"LD_PRELOAD", CAPGPU_LIBRARY},
            {"LD_LIBRARY_PATH", CAPGPU_FAKE_DRIVER_DIR},
            {"TESSERA_CAPGPU_REGION", region},
            {"FAKECUDA_DEVICE_FILE", dir_ + "/device"},
            {"FAKECUDA_TOTAL_BYTES", std::to_string(12 * kMiB)}};
  }
  std::string dir_;
};

TEST_F(SwapManagerTest, TwoSharesOvercommitOneCardAndNeitherSeesAnError) {
  // Caps of 8 MiB each on a 12 MiB card: overcommitted by a third.
  const std::string a = Region("a", 8 * kMiB), b = Region("b", 8 * kMiB);
  SwapManager m({.device_memory = 12 * kMiB, .idle_ms = 150});
  ASSERT_TRUE(m.Add("a", a, NowMs()).ok());
  ASSERT_TRUE(m.Add("b", b, NowMs()).ok());
  EXPECT_FALSE(m.Add("c", dir_ + "/missing", NowMs()).ok());
  std::atomic<bool> stop{false};
  std::vector<std::string> log;
  std::thread ticker([&] {
    while (!stop) {
      for (auto& line : m.Tick(NowMs())) log.push_back(line);
      // A tick every 10 ms, as the agent's loop: the manager's idle times are real time.
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });

  Probe pa(CAPGPU_SWAP_PROBE, Env(a)), pb(CAPGPU_SWAP_PROBE, Env(b));
  EXPECT_EQ(pa.Ask("alloc x 8MiB"), "alloc x 0");
  EXPECT_EQ(pa.Ask("fill x 1"), "fill x 0");
  EXPECT_EQ(pb.Ask("alloc y 2MiB"), "alloc y 0");
  EXPECT_EQ(pb.Ask("fill y 2"), "fill y 0");
  // b grows past what the card has left: its allocation waits until a (idle) is swapped out.
  EXPECT_EQ(pb.Ask("alloc z 6MiB", 20000), "alloc z 0");
  EXPECT_EQ(pb.Ask("fill z 3"), "fill z 0");
  // a runs again: it waits for room, the manager swaps the now idle b out, a resumes intact.
  EXPECT_EQ(pa.Ask("check x 1", 20000), "check x ok");
  EXPECT_EQ(pa.Ask("kernel x"), "kernel x 0");
  // And b once more, after a goes idle.
  EXPECT_EQ(pb.Ask("check y 2", 20000), "check y ok");
  EXPECT_EQ(pb.Ask("check z 3", 20000), "check z ok");
  stop = true;
  ticker.join();

  int64_t outs_a = 0, outs_b = 0;
  for (const auto& s : m.States()) (s.id == "a" ? outs_a : outs_b) = s.swap_outs;
  EXPECT_GE(outs_a, 2) << "a swapped out for b's growth and again for b's return";
  EXPECT_GE(outs_b, 1) << "b swapped out for a's return";
  bool logged = false;
  for (const auto& line : log) logged = logged || line.rfind("swap-out a: idle", 0) == 0;
  EXPECT_TRUE(logged);
}

// Ahead of need: with no share asking for anything, the least recently active idle share leaves
// until the card has room for its largest cap, so the next wake only copies its own bytes back;
// with `ahead` off nothing moves until a share needs room.
TEST_F(SwapManagerTest, AheadOfNeedKeepsRoomForTheNextWake) {
  const std::string a = Region("a", 8 * kMiB), b = Region("b", 8 * kMiB);
  Probe pa(CAPGPU_SWAP_PROBE, Env(a)), pb(CAPGPU_SWAP_PROBE, Env(b));
  EXPECT_EQ(pa.Ask("alloc x 6MiB"), "alloc x 0");
  EXPECT_EQ(pa.Ask("fill x 4"), "fill x 0");
  EXPECT_EQ(pb.Ask("alloc y 4MiB"), "alloc y 0");
  EXPECT_EQ(pb.Ask("fill y 5"), "fill y 0");

  auto run = [&](SwapManager& m, int64_t for_ms) {
    std::vector<std::string> log;
    const int64_t until = NowMs() + for_ms;
    while (NowMs() < until) {
      for (auto& line : m.Tick(NowMs())) log.push_back(line);
      // A tick every 10 ms, as the agent's loop: the manager's idle times are real time.
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return log;
  };
  auto outs = [](const SwapManager& m, const std::string& id) {
    for (const auto& s : m.States()) {
      if (s.id == id) return s.swap_outs;
    }
    return int64_t{-1};
  };

  {
    SwapManager lazy({.device_memory = 12 * kMiB, .idle_ms = 100, .ahead = false});
    ASSERT_TRUE(lazy.Add("a", a, NowMs()).ok());
    ASSERT_TRUE(lazy.Add("b", b, NowMs()).ok());
    EXPECT_TRUE(run(lazy, 600).empty());
    EXPECT_EQ(outs(lazy, "a") + outs(lazy, "b"), 0) << "2 MiB free, but nobody needs more";
  }

  SwapManager m({.device_memory = 12 * kMiB, .idle_ms = 100});
  ASSERT_TRUE(m.Add("a", a, NowMs()).ok());
  ASSERT_TRUE(m.Add("b", b, NowMs() + 50).ok());  // b counts as the more recently active
  std::vector<std::string> log = run(m, 800);
  EXPECT_EQ(outs(m, "a"), 1) << "a, least recently active, leaves: 8 MiB free";
  EXPECT_EQ(outs(m, "b"), 0) << "one is enough";
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log[0].rfind("swap-out a: idle", 0), 0u) << log[0];
  EXPECT_NE(log[0].find("ahead of need: keeps 8.0 MiB"), std::string::npos) << log[0];
  for (const auto& s : m.States()) {
    EXPECT_EQ(s.state, s.id == "a" ? "swapped" : "resident") << s.id;
  }
  // a wakes to room: its bytes come back and nothing else had to leave first.
  EXPECT_EQ(pa.Ask("check x 4", 20000), "check x ok");
  EXPECT_EQ(outs(m, "b"), 0);
  EXPECT_EQ(pb.Ask("check y 5"), "check y ok");
}

// The node's swap RAM budget is shared by every share: with none of it left, a share asked out
// goes to its disk tier, whatever its own region allowed.
TEST_F(SwapManagerTest, TheNodesHostRamBudgetSendsTheRestToDisk) {
  const std::string a = Region("a", 8 * kMiB, dir_), b = Region("b", 8 * kMiB);
  Probe pa(CAPGPU_SWAP_PROBE, Env(a)), pb(CAPGPU_SWAP_PROBE, Env(b));
  EXPECT_EQ(pa.Ask("alloc x 6MiB"), "alloc x 0");
  EXPECT_EQ(pa.Ask("fill x 4"), "fill x 0");
  EXPECT_EQ(pb.Ask("alloc y 4MiB"), "alloc y 0");
  SwapManager m({.device_memory = 12 * kMiB, .idle_ms = 100});
  ASSERT_TRUE(m.Add("a", a, NowMs()).ok());
  ASSERT_TRUE(m.Add("b", b, NowMs() + 50).ok());
  capgpu::Region ra;
  ASSERT_EQ(ra.Open(a.c_str()), 0);
  capgpu::SwapSummary sa;
  for (int i = 0; i < 200 && sa.swapped == 0; ++i) {
    uint64_t left = 0;  // the node's budget is spent
    m.Tick(NowMs(), &left);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    capgpu::RegionLock lock(ra);
    sa = capgpu::SummarizeSwap(ra.data());
  }
  ASSERT_EQ(sa.swapped, 1u);
  EXPECT_EQ(sa.host_bytes, 0u);
  EXPECT_EQ(sa.disk_bytes, 6 * kMiB);
  uint64_t left = 0;
  m.Tick(NowMs(), &left);  // HostBytes is as of the last tick
  EXPECT_EQ(m.HostBytes(), 0u) << "on disk: nothing taken from the node's RAM";
  EXPECT_EQ(pa.Ask("check x 4", 20000), "check x ok");
}

// A job may cut its region file short (it owns it): the manager drops that share instead of
// touching the mapping past the file's end, which would be a SIGBUS in the agent.
TEST_F(SwapManagerTest, ARegionCutShortIsDroppedNotRead) {
  const std::string a = Region("a", 8 * kMiB), b = Region("b", 8 * kMiB);
  SwapManager m({.device_memory = 12 * kMiB, .idle_ms = 100});
  ASSERT_TRUE(m.Add("a", a, NowMs()).ok());
  ASSERT_TRUE(m.Add("b", b, NowMs()).ok());
  ASSERT_EQ(truncate(a.c_str(), 100), 0);
  std::vector<std::string> log = m.Tick(NowMs());
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log[0], "dropped a: its region file is gone or cut short");
  ASSERT_EQ(m.States().size(), 1u);
  EXPECT_EQ(m.States()[0].id, "b");
}

// The red team: the region belongs to the job's account, so a job can write anything into it
// and cut it short at will. The agent (root) once mapped it and took its process-shared robust
// mutex every tick: a job rewriting the mutex's robust-list pointers while the agent held it
// made glibc's unlock write where the job chose (SIGSEGV, 3 crashes in 7 s), and one cutting the
// file short between the agent's size check and its reads killed it with SIGBUS (13 in 20 s),
// each crash restarting every job on the node. The agent now only copies the file (pread) and
// writes single fields (pwrite): whatever the job does, the manager keeps running, and orders
// still reach a region put right again.
TEST_F(SwapManagerTest, AJobThatRewritesOrCutsItsRegionNeverReachesTheAgent) {
  const std::string a = Region("a", 8 * kMiB);
  const int fd = open(a.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const size_t size = sizeof(capgpu::RegionFile);
  std::vector<char> whole(size);  // the region as the agent made it
  ASSERT_EQ(pread(fd, whole.data(), size, 0), static_cast<ssize_t>(size));
  auto* map = static_cast<char*>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(map, MAP_FAILED);
  // Runs `job` on a thread while the agent's side ticks, orders, and (dropped) adds the share
  // again, for 1.5 s.
  auto against = [&](const std::function<void(uint64_t)>& job) {
    SwapManager m({.device_memory = 12 * kMiB, .idle_ms = 100});
    std::atomic<bool> stop{false};
    std::thread t([&] {
      for (uint64_t i = 0; !stop; ++i) job(i);
    });
    const int64_t until = NowMs() + 1500;
    int rounds = 0;
    while (NowMs() < until) {
      if (m.States().empty()) (void)m.Add("a", a, NowMs());
      m.Tick(NowMs());
      (void)m.Order("a", rounds % 2 == 0 ? "out" : "in");
      ++rounds;
    }
    stop = true;
    t.join();
    EXPECT_GT(rounds, 100);
  };
  // The mutex's robust list (prev, next), at offsets 40 and 48 of the file, rewritten without
  // pause.
  against([&](uint64_t i) {
    const uint64_t bad = 0x4141414141414140ULL;
    __atomic_store_n(reinterpret_cast<uint64_t*>(map + 40), bad + 64 * i, __ATOMIC_RELAXED);
    __atomic_store_n(reinterpret_cast<uint64_t*>(map + 48), bad - 64 * i, __ATOMIC_RELAXED);
  });
  // The file cut to nothing and grown back, its header written again, without pause.
  against([&](uint64_t) {
    if (ftruncate(fd, 0) != 0 || ftruncate(fd, static_cast<off_t>(size)) != 0 ||
        pwrite(fd, whole.data(), 64, 0) != 64)
      ADD_FAILURE() << "the job's own writes: " << strerror(errno);
  });
  munmap(map, size);
  // Put right, the share takes orders again.
  ASSERT_EQ(pwrite(fd, whole.data(), size, 0), static_cast<ssize_t>(size));
  close(fd);
  SwapManager again({.device_memory = 12 * kMiB, .idle_ms = 100});
  ASSERT_TRUE(again.Add("a", a, NowMs()).ok());
  (void)again.Order("a", "in");
  ASSERT_TRUE(*again.Order("a", "out"));
  capgpu::Region r;
  ASSERT_EQ(r.Open(a.c_str()), 0);
  EXPECT_EQ(r.data().swap_target, static_cast<uint32_t>(capgpu::SwapTarget::kHold));
}

// The manager opens a region only as the file the agent made: never through a symbolic link,
// never a file with a second name, never one of another owner than the job's.
TEST_F(SwapManagerTest, ARegionIsNeverOpenedThroughALinkOrOfAnotherOwner) {
  const std::string a = Region("a", 8 * kMiB);
  ASSERT_EQ(symlink(a.c_str(), (dir_ + "/symlink").c_str()), 0);
  SwapManager m({.device_memory = 12 * kMiB, .idle_ms = 100});
  EXPECT_FALSE(m.Add("s", dir_ + "/symlink", NowMs()).ok());
  EXPECT_FALSE(m.Add("o", a, NowMs(), geteuid() + 1).ok());
  ASSERT_EQ(link(a.c_str(), (dir_ + "/hardlink").c_str()), 0);
  EXPECT_FALSE(m.Add("h", dir_ + "/hardlink", NowMs()).ok());
  ASSERT_EQ(unlink((dir_ + "/hardlink").c_str()), 0);
  EXPECT_TRUE(m.Add("a", a, NowMs(), geteuid()).ok());
  EXPECT_EQ(m.States().size(), 1u);
}

// Slicing: two shares that both stay active cannot both fit. Without slicing the second one's
// allocation waits for the first to go idle, which it never does; with a slice, the share that
// has held the device longest is swapped out while active, held at the gate until the other has
// the room, and comes back in turn: both keep running, neither sees an error, and their bytes
// survive every round.
TEST_F(SwapManagerTest, SlicingTakesTurnsBetweenActiveShares) {
  const std::string a = Region("a", 8 * kMiB), b = Region("b", 8 * kMiB);
  Probe pa(CAPGPU_SWAP_PROBE, Env(a)), pb(CAPGPU_SWAP_PROBE, Env(b));
  EXPECT_EQ(pa.Ask("alloc x 6MiB"), "alloc x 0");
  EXPECT_EQ(pa.Ask("fill x 1"), "fill x 0");
  EXPECT_EQ(pa.Ask("alloc k 1MiB"), "alloc k 0");

  // Each share launches kernels on its own small buffer `k` until told to stop.
  std::atomic<bool> stop_kernels{false};
  std::atomic<int> kernels_a{0}, kernels_b{0};
  std::vector<std::string> errors;
  std::mutex mu;  // errors, the manager and its log
  auto kernels = [&](Probe& p, std::atomic<int>& count) {
    while (!stop_kernels) {
      const std::string reply = p.Ask("kernel k", 30000);
      if (reply != "kernel k 0") {
        std::lock_guard<std::mutex> lock(mu);
        errors.push_back(reply);
        return;
      }
      ++count;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  };
  std::thread run_a(kernels, std::ref(pa), std::ref(kernels_a));

  std::atomic<bool> stop_ticks{false};
  std::vector<std::string> log;
  auto tick = [&](SwapManager& m) {
    while (!stop_ticks) {
      {
        std::lock_guard<std::mutex> lock(mu);
        for (auto& line : m.Tick(NowMs())) log.push_back(line);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  auto state = [&](const SwapManager& m, const std::string& id) {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& s : m.States()) {
      if (s.id == id) return s;
    }
    return SwapManager::ShareState{};
  };
  // idle_ms 2000: a share launching a kernel every few ms never looks idle, even on a loaded
  // machine, so whatever leaves the card here leaves by slicing.
  constexpr int64_t kIdleMs = 2000;

  // No slicing: b's allocation needs room that only the active a holds, and it waits.
  {
    SwapManager m({.device_memory = 12 * kMiB, .idle_ms = kIdleMs});
    ASSERT_TRUE(m.Add("a", a, NowMs()).ok());
    ASSERT_TRUE(m.Add("b", b, NowMs()).ok());
    std::thread ticker([&] { tick(m); });
    pb.Send("alloc y 6MiB");
    EXPECT_EQ(pb.Line(1500), "") << "b waits while a stays active";
    stop_ticks = true;
    ticker.join();
    EXPECT_EQ(state(m, "a").swap_outs, 0);
    int waiting = 0;
    for (const auto& line : log) waiting += line.rfind("waiting: b need", 0) == 0 ? 1 : 0;
    EXPECT_EQ(waiting, 1) << "said once, not at every tick";
    EXPECT_GT(kernels_a.load(), 10) << "a kept running";
  }

  // A slice of 300 ms: a is asked out while active, b's allocation goes through, and from then
  // on the two take turns, at most one round per 2 s.
  log.clear();
  stop_ticks = false;
  SwapManager m({.device_memory = 12 * kMiB, .idle_ms = kIdleMs, .slice_ms = 300});
  ASSERT_TRUE(m.Add("a", a, NowMs() - 1000).ok());
  ASSERT_TRUE(m.Add("b", b, NowMs()).ok());
  std::thread ticker([&] { tick(m); });
  EXPECT_EQ(pb.Line(20000), "alloc y 0");
  EXPECT_EQ(pb.Ask("fill y 2", 20000), "fill y 0");
  EXPECT_EQ(pb.Ask("alloc k 1MiB", 20000), "alloc k 0");
  std::thread run_b(kernels, std::ref(pb), std::ref(kernels_b));
  const int a_before = kernels_a.load();
  // Until b has been sliced for a's return and a once more for b's: a few rounds of 2 s.
  tessera::testing::WaitFor(
      [&] {
        return state(m, "a").sliced >= 2 && state(m, "b").sliced >= 1 &&
               kernels_a.load() > a_before;
      },
      std::chrono::seconds(30), std::chrono::milliseconds(100));
  stop_kernels = true;
  run_a.join();
  run_b.join();
  // Both idle now: whichever is out comes back when it next runs, its bytes intact.
  EXPECT_EQ(pa.Ask("check x 1", 20000), "check x ok");
  EXPECT_EQ(pb.Ask("check y 2", 20000), "check y ok");
  stop_ticks = true;
  ticker.join();

  EXPECT_TRUE(errors.empty()) << errors.front();
  EXPECT_GT(kernels_a.load(), a_before) << "a came back and ran again";
  EXPECT_GT(kernels_b.load(), 0);
  EXPECT_GE(state(m, "a").sliced, 2) << "for b's allocation, and again for b's turn to end";
  EXPECT_GE(state(m, "b").sliced, 1) << "for a's return";
  int sliced_a = 0, released = 0;
  for (const auto& line : log) {
    sliced_a += line.rfind("swap-out a: active, held the device", 0) == 0 ? 1 : 0;
    released += line.rfind("release ", 0) == 0 ? 1 : 0;
  }
  EXPECT_GE(sliced_a, 2);
  EXPECT_GE(released, 2) << "each share held out is let go once the other has the room";
}

// Preemption by swapping: the control plane orders a share out ("out"): its memory leaves the
// card and its next driver call waits at the gate, with no error, until it is ordered in; its
// data is intact. The manager's own rules leave it alone meanwhile. "idle" moves it off the card
// once; its next driver call brings it back.
TEST_F(SwapManagerTest, AServerOrderHoldsAShareOutUntilOrderedIn) {
  const std::string a = Region("a", 8 * kMiB);
  SwapManager m({.device_memory = 12 * kMiB, .idle_ms = 150});
  ASSERT_TRUE(m.Add("a", a, NowMs()).ok());
  Probe pa(CAPGPU_SWAP_PROBE, Env(a));
  EXPECT_EQ(pa.Ask("alloc x 4MiB"), "alloc x 0");
  EXPECT_EQ(pa.Ask("fill x 5"), "fill x 0");
  EXPECT_FALSE(m.Order("nobody", "out").ok());
  EXPECT_FALSE(m.Order("a", "away").ok());
  ASSERT_TRUE(*m.Order("a", "out"));
  EXPECT_FALSE(*m.Order("a", "out")) << "ordered again (every heartbeat): nothing changes";
  auto state = [&] {
    m.Tick(NowMs());
    return m.States()[0];
  };
  for (int i = 0; i < 500 && state().state != "swapped"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(state().state, "swapped");
  EXPECT_EQ(state().resident_bytes, 0u);
  // Held: its next driver call waits, however long, and the manager does not release it.
  pa.Send("check x 5");
  for (int i = 0; i < 30; ++i) {
    m.Tick(NowMs());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(pa.Line(300), "") << "a held share's driver call waits";
  ASSERT_TRUE(*m.Order("a", "in"));
  EXPECT_EQ(pa.Line(20000), "check x ok");
  EXPECT_EQ(pa.Ask("kernel x"), "kernel x 0");
  EXPECT_EQ(pa.Ask("check x 6"), "check x ok");
  // "idle": off the card once; its next use brings it back, and the same order again does not
  // push it out while it lasts.
  ASSERT_TRUE(*m.Order("a", "idle"));
  for (int i = 0; i < 500 && state().state != "swapped"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(state().state, "swapped");
  EXPECT_EQ(pa.Ask("check x 6", 20000), "check x ok");
  m.OrdersNow({{"a", "idle"}});
  EXPECT_FALSE(*m.Order("a", "idle"));
  m.OrdersNow({});  // no longer ordered: a later idle order is carried out again
  EXPECT_TRUE(*m.Order("a", "idle"));
}

}  // namespace
}  // namespace tessera::agent
