// A launcher's leftovers: the jobs of an agent that died without stopping them, stopped by the
// next launcher on its work directory (and only those), with their share regions.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sstream>
#include <thread>
#include <vector>

#include "agent/launcher.h"
#include "capgpu/region.h"
#include "launcher_test_util.h"

namespace tessera::agent {
namespace {

using namespace std::chrono_literals;
using testing::Opts;
using testing::ReadAll;
using testing::Sh;
using testing::TempDir;
using testing::WaitFor;
using testing::WriteAll;

// The pid a launcher on `dir` listed for job `id` in <work_dir>/.running (0 if none).
pid_t ListedPid(const TempDir& dir, const std::string& id) {
  std::istringstream in(ReadAll(dir.path() + "/out/.running"));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string got;
    long pid = 0;
    uint64_t start = 0;
    if (fields >> got >> pid >> start && got == id) return static_cast<pid_t>(pid);
  }
  return 0;
}

// TESSERA_CAPGPU_REGION of the running process `pid` ("" if none).
std::string RegionOf(pid_t pid) {
  const std::string env = ReadAll("/proc/" + std::to_string(pid) + "/environ");
  const std::string key = "TESSERA_CAPGPU_REGION=";
  for (size_t at = 0; at < env.size();) {
    size_t end = env.find('\0', at);
    if (end == std::string::npos) end = env.size();
    if (env.compare(at, key.size(), key) == 0)
      return env.substr(at + key.size(), end - at - key.size());
    at = end + 1;
  }
  return "";
}

// Gone, or a zombie nobody has reaped yet: either way it runs no more.
bool Dead(pid_t pid) {
  char state = 0;
  uint64_t start = 0;
  return !capgpu::ReadProcessStat(pid, &state, &start) || state == 'Z' || state == 'X';
}

// An agent that dies without stopping its jobs (a crash, SIGKILL) leaves them running in their
// own sessions; the next launcher on the same work directory stops them, and only them.
TEST(AgentLauncher, JobsACrashedLauncherLeftAreStoppedByTheNext) {
  TempDir dir;
  pid_t crashed = fork();
  ASSERT_GE(crashed, 0);
  if (crashed == 0) {
    // The launcher of the agent that crashes: starts a job, then dies without its destructor.
    auto* l = new Launcher(Opts(dir));
    JobSpec orphan = Sh("orphan", "exec sleep 300");
    orphan.gpu_memory_limit_bytes = 1 << 30;  // a share: its region is left behind too
    _exit(l->Start(orphan).ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(crashed, &status, 0), crashed);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const pid_t orphan = ListedPid(dir, "orphan");
  ASSERT_GT(orphan, 0) << ReadAll(dir.path() + "/out/.running");
  ASSERT_FALSE(Dead(orphan)) << "the job outlived its agent";
  std::string region;  // once it has exec'd (before, its environment is its launcher's)
  ASSERT_TRUE(WaitFor([&] { return !(region = RegionOf(orphan)).empty(); }, 5s));
  ASSERT_EQ(access(region.c_str(), F_OK), 0) << region;

  Launcher next(Opts(dir));
  EXPECT_TRUE(next.owns_work_dir());
  ASSERT_EQ(next.leftovers(), std::vector<std::string>{"orphan"});
  EXPECT_TRUE(WaitFor([&] { return Dead(orphan); }, 5s)) << "the leftover job was stopped";
  // Its region and the directory the crashed launcher kept regions in are gone.
  EXPECT_NE(access(region.c_str(), F_OK), 0) << region;
  const std::string old_dir = region.substr(0, region.rfind('/'));
  EXPECT_NE(access(old_dir.c_str(), F_OK), 0) << old_dir;
  EXPECT_NE(next.region_dir(), old_dir);
  EXPECT_EQ(ListedPid(dir, "orphan"), 0) << "and is no longer listed";
  // The new launcher's own jobs are listed, and a clean stop leaves the list empty.
  ASSERT_TRUE(next.Start(Sh("mine", "exec sleep 300")).ok());
  EXPECT_GT(ListedPid(dir, "mine"), 0);
  ASSERT_TRUE(next.Cancel("mine", 0ms).ok());
  next.WaitAll(5s);
  EXPECT_EQ(ListedPid(dir, "mine"), 0);
}

// The next launcher returns only once the leftover jobs it killed have died: the agent starts
// jobs the control plane sends right after, on the same devices, and an old process still running
// then would share its device with the new one (the 30-minute soak saw a job run twice for 3 ms
// after an agent's SIGKILL and restart). Several at once, so that a kill that is only sent and
// not yet carried out is caught.
TEST(AgentLauncher, LeftoversAreDeadWhenTheNextLauncherIsReady) {
  TempDir dir;
  constexpr int kJobs = 12;
  pid_t crashed = fork();
  ASSERT_GE(crashed, 0);
  if (crashed == 0) {
    auto* l = new Launcher(Opts(dir));
    for (int i = 0; i < kJobs; ++i) {
      // A job that holds memory it touched: its death takes some tearing down.
      if (!l->Start(Sh("orphan" + std::to_string(i),
                       "exec python3 -c 'import time; b = bytearray(64 << 20); time.sleep(300)'"))
               .ok()) {
        _exit(1);
      }
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(crashed, &status, 0), crashed);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::vector<pid_t> orphans;
  for (int i = 0; i < kJobs; ++i) orphans.push_back(ListedPid(dir, "orphan" + std::to_string(i)));
  for (pid_t p : orphans) ASSERT_GT(p, 0) << ReadAll(dir.path() + "/out/.running");
  // Each has exec'd and holds its memory.
  for (pid_t p : orphans) {
    ASSERT_TRUE(WaitFor(
        [&] {
          return ReadAll("/proc/" + std::to_string(p) + "/cmdline").find("python3") !=
                 std::string::npos;
        },
        10s));
  }
  std::this_thread::sleep_for(500ms);

  Launcher next(Opts(dir));
  ASSERT_EQ(next.leftovers().size(), static_cast<size_t>(kJobs));
  int running = 0;
  for (pid_t p : orphans) running += !Dead(p);
  EXPECT_EQ(running, 0) << "of " << kJobs
                        << " killed leftovers still ran when the launcher was ready";
}

// A list written before a reboot names pids and start times that may now be other processes':
// it is ignored, whatever it says.
TEST(AgentLauncher, AListFromAnotherBootStopsNothing) {
  TempDir dir;
  pid_t stranger = fork();
  ASSERT_GE(stranger, 0);
  if (stranger == 0) {
    execl("/bin/sleep", "sleep", "300", static_cast<char*>(nullptr));
    _exit(127);
  }
  char state = 0;
  uint64_t start = 0;
  ASSERT_TRUE(WaitFor([&] { return capgpu::ReadProcessStat(stranger, &state, &start); }, 5s));
  mkdir((dir.path() + "/out").c_str(), 0755);
  WriteAll(dir.path() + "/out/.running", "boot 00000000-0000-0000-0000-000000000000\nold " +
                                             std::to_string(stranger) + " " +
                                             std::to_string(start) + "\n");
  {
    Launcher next(Opts(dir));
    EXPECT_TRUE(next.leftovers().empty());
  }
  EXPECT_EQ(kill(stranger, 0), 0) << "not ours to stop";
  EXPECT_FALSE(Dead(stranger));
  kill(stranger, SIGKILL);
  waitpid(stranger, nullptr, 0);
}

// Two launchers on one work directory at once (two agents given the same --work): the second
// does not own the list, so it stops nothing of the first's.
TEST(AgentLauncher, ASecondLauncherOnTheSameWorkDirStopsNothing) {
  TempDir dir;
  Launcher first(Opts(dir));
  ASSERT_TRUE(first.Start(Sh("firsts", "exec sleep 300")).ok());
  const pid_t pid = ListedPid(dir, "firsts");
  ASSERT_GT(pid, 0);
  {
    Launcher second(Opts(dir));
    EXPECT_FALSE(second.owns_work_dir());
    EXPECT_TRUE(second.leftovers().empty());
  }
  EXPECT_FALSE(Dead(pid));
  EXPECT_TRUE(first.IsRunning("firsts"));
  ASSERT_TRUE(first.Cancel("firsts", 0ms).ok());
  first.WaitAll(5s);
}

}  // namespace
}  // namespace tessera::agent
