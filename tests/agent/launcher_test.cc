// Real processes through the launcher: output capture, exit codes and signals, cancels with
// grace, the bound environment, exec failures, and cgroup files (against a stand-in tree).
#include "agent/launcher.h"

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "agent/host_files.h"
#include "agent/launcher_internal.h"
#include "capgpu/region.h"
#include "launcher_test_util.h"

namespace tessera::agent {
namespace {

using namespace std::chrono_literals;

// Found by the red team: `tessera up` run by a non-root user ran no job at all ("cannot switch to
// the job's account (errno 1)"): its jobs run as its own account, and the child still called
// setgroups, which only root may. An agent already running as the job's account does not switch.
TEST(LauncherAccount, ANonRootAgentRunsItsOwnAccountsJobsWithoutSwitching) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to become another account first";
  const pid_t pid = fork();
  if (pid == 0) {
    passwd* pw = getpwnam("nobody");
    if (pw == nullptr) _exit(3);
    if (setgroups(0, nullptr) != 0 || setgid(pw->pw_gid) != 0 || setuid(pw->pw_uid) != 0) _exit(4);
    auto a = internal::ResolveAccount("nobody");
    _exit(a.ok() && !a->set && a->name == "nobody" ? 0 : 1);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: it would switch (setgroups: EPERM); 3, 4: no nobody";
}
using testing::Opts;
using testing::ReadAll;
using testing::Sh;
using testing::TempDir;
using testing::WaitFor;
using testing::WriteAll;

JobExit RunToEnd(Launcher& l, const JobSpec& spec, std::chrono::milliseconds timeout = 10s) {
  Status s = l.Start(spec);
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::vector<JobExit> ended = l.WaitAll(timeout);
  EXPECT_EQ(ended.size(), 1u);
  return ended.empty() ? JobExit{} : ended[0];
}

TEST(AgentLauncher, CapturesStdoutAndStderrAndExitZero) {
  TempDir dir;
  Launcher l(Opts(dir));
  JobExit e = RunToEnd(l, Sh("ok", "echo out; echo err 1>&2; exit 0"));
  EXPECT_EQ(e.id, "ok");
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_EQ(e.signal, 0);
  EXPECT_FALSE(e.cancelled);
  EXPECT_EQ(ReadAll(l.OutputPath("ok")), "out\nerr\n");
  EXPECT_EQ(e.output_bytes, 8);
  EXPECT_FALSE(l.IsRunning("ok"));
}

// The red team: output files were 0640 (the account's primary group) in a 0755 work directory:
// where everyone shares a primary group (an LDAP "users"), each could read the others' output.
// A job's output is its account's alone (0600), and the work directory lists nothing (0711).
TEST(AgentLauncher, AJobsOutputIsItsAccountsAlone) {
  TempDir dir;
  Launcher l(Opts(dir));
  JobSpec s = Sh("mine", "echo secret");
  if (geteuid() == 0) s.run_as = "nobody";
  RunToEnd(l, s);
  struct stat st {};
  ASSERT_EQ(stat(l.OutputPath("mine").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(stat((dir.path() + "/out").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0711u);
}

// How long a job ran, by the agent's monotonic clock (the finished report's run_ms): at least as
// long as it slept, and known (0 or more) for a job that exits at once.
TEST(AgentLauncher, MeasuresHowLongTheJobRan) {
  TempDir dir;
  Launcher l(Opts(dir));
  EXPECT_GE(RunToEnd(l, Sh("slept", "sleep 0.3")).run_ms, 300);
  EXPECT_GE(RunToEnd(l, Sh("quick", "true")).run_ms, 0);
  EXPECT_EQ(JobExit{}.run_ms, -1);  // not known until measured
}

// run_as: the job runs under the named account (uid, gid, HOME), checked from /proc while it
// runs; an account the node lacks is refused with its name. Switching accounts needs root (CI
// runs as root); elsewhere the refusal a non-root agent gives is checked instead.
TEST(AgentLauncher, RunsTheJobUnderItsAccount) {
  TempDir dir;
  Launcher l(Opts(dir));
  JobSpec missing = Sh("nouser", "true");
  missing.run_as = "tessera-no-such-account";
  Status s = l.Start(missing);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("'tessera-no-such-account' does not exist"), std::string::npos)
      << s.message();
  passwd* nobody = getpwnam("nobody");
  ASSERT_NE(nobody, nullptr) << "this test needs the account 'nobody'";
  const uid_t uid = nobody->pw_uid;
  JobSpec spec = Sh("asnobody", "id -u; id -g; echo $USER; sleep 30");
  spec.run_as = "nobody";
  spec.gpu_memory_limit_bytes = 1 << 30;  // a share: its region belongs to the job's account too
  if (geteuid() != 0) {
    s = l.Start(spec);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("cannot start jobs as 'nobody'"), std::string::npos) << s.message();
    GTEST_SKIP() << "not root: switching accounts not exercised (CI runs as root)";
  }
  ASSERT_TRUE(l.Start(spec).ok());
  ASSERT_TRUE(WaitFor(
      [&] { return ReadAll(l.OutputPath("asnobody")).find("nobody") != std::string::npos; }, 5s))
      << ReadAll(l.OutputPath("asnobody"));
  const std::vector<RunningJob> running = l.Running();
  ASSERT_EQ(running.size(), 1u);
  const std::string status = ReadAll("/proc/" + std::to_string(running[0].pid) + "/status");
  const std::string want = std::to_string(uid);
  EXPECT_NE(status.find("\nUid:\t" + want + "\t" + want + "\t" + want), std::string::npos)
      << status;
  EXPECT_EQ(ReadAll(l.OutputPath("asnobody")).substr(0, want.size() + 1), want + "\n");
  struct stat st {};
  ASSERT_EQ(stat(l.RegionPath("asnobody").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, uid);
  ASSERT_TRUE(l.Cancel("asnobody", 100ms).ok());
  l.WaitAll(5s);
}

// Share regions live in a directory of the launcher's own: an unpredictable name under
// region_dir (128 random bits), made by the launcher itself (mkdir fails on any existing name),
// owned by the agent's account, mode 0711 (a job's account reaches its own file by name; nobody
// else creates, replaces or lists anything there), and removed when the launcher stops.
TEST(AgentLauncher, RegionsLiveInAPrivateUnpredictableDirectory) {
  TempDir dir;
  std::string dirs[2];
  {
    LauncherOptions second = Opts(dir);
    second.work_dir = dir.path() + "/out2";
    Launcher a(Opts(dir)), b(second);
    const Launcher* launchers[] = {&a, &b};
    for (int i = 0; i < 2; ++i) {
      dirs[i] = launchers[i]->region_dir();
      const std::string prefix = dir.path() + "/tessera-";
      ASSERT_EQ(dirs[i].rfind(prefix, 0), 0u) << dirs[i];
      const std::string name = dirs[i].substr(prefix.size());
      EXPECT_EQ(name.size(), 32u) << dirs[i];
      EXPECT_EQ(name.find_first_not_of("0123456789abcdef"), std::string::npos) << dirs[i];
      struct stat st {};
      ASSERT_EQ(lstat(dirs[i].c_str(), &st), 0) << dirs[i];
      EXPECT_TRUE(S_ISDIR(st.st_mode));
      EXPECT_EQ(st.st_mode & 07777, 0711u);
      EXPECT_EQ(st.st_uid, geteuid());
    }
    EXPECT_NE(dirs[0], dirs[1]);
    // A share's region is there, named for its job, and not under the old shared name.
    JobSpec share = Sh("share", "exec sleep 30");
    share.gpu_memory_limit_bytes = 1 << 30;
    if (geteuid() == 0) share.run_as = "nobody";
    ASSERT_TRUE(a.Start(share).ok());
    EXPECT_EQ(a.RegionPath("share"), dirs[0] + "/tessera-capgpu-share");
    struct stat st {};
    ASSERT_EQ(lstat(a.RegionPath("share").c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    EXPECT_NE(access((dir.path() + "/tessera-capgpu-share").c_str(), F_OK), 0);
    ASSERT_TRUE(a.Cancel("share", 0ms).ok());
    a.WaitAll(5s);
  }
  for (const std::string& d : dirs)
    EXPECT_NE(access(d.c_str(), F_OK), 0) << d << " outlived its launcher";
}

// A launcher holds a lock on its region directory while it lives. The next launcher on the host
// (whatever its work directory) removes the directories of those that died without cleaning up
// (SIGKILL), and leaves those of live launchers, of other accounts, and other names alone.
TEST(AgentLauncher, RegionDirectoriesOfDeadLaunchersAreRemovedByTheNext) {
  TempDir dir;
  LauncherOptions live_options = Opts(dir);
  live_options.work_dir = dir.path() + "/live";
  Launcher live(live_options);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  pid_t dead = fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) {
    LauncherOptions o = Opts(dir);
    o.work_dir = dir.path() + "/dead";
    auto* l = new Launcher(o);  // dies without its destructor
    // A region in it (no job: one between its fork and its exec would hold the lock a moment).
    capgpu::LimitList limits;
    limits.count = 1;
    limits.bytes[0] = 1 << 30;
    bool ok = capgpu::CreateRegionFile(l->RegionPath("share").c_str(), limits, 0600, false) == 0;
    const std::string d = l->region_dir();
    ok = write(pipe_fds[1], d.data(), d.size()) == static_cast<ssize_t>(d.size()) && ok;
    _exit(ok ? 0 : 1);
  }
  close(pipe_fds[1]);
  char buf[4096] = {};
  ASSERT_GT(read(pipe_fds[0], buf, sizeof(buf) - 1), 0);
  close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(dead, &status, 0), dead);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const std::string dead_dir = buf;
  ASSERT_EQ(access((dead_dir + "/tessera-capgpu-share").c_str(), F_OK), 0);
  const std::string other_name = dir.path() + "/tessera-00000000000000000000000000000000";
  const std::string plain = dir.path() + "/tessera-keep-me";
  ASSERT_EQ(mkdir(other_name.c_str(), 0711), 0);
  ASSERT_EQ(mkdir(plain.c_str(), 0711), 0);
  if (geteuid() == 0) {
    ASSERT_EQ(chown(other_name.c_str(), getpwnam("nobody")->pw_uid, 0), 0);
  }

  LauncherOptions next_options = Opts(dir);
  next_options.work_dir = dir.path() + "/next";
  Launcher next(next_options);
  EXPECT_NE(access(dead_dir.c_str(), F_OK), 0) << dead_dir << " outlived its launcher";
  EXPECT_EQ(access(live.region_dir().c_str(), F_OK), 0) << "a live launcher's directory went";
  EXPECT_EQ(access(plain.c_str(), F_OK), 0);
  if (geteuid() == 0) {
    EXPECT_EQ(access(other_name.c_str(), F_OK), 0) << "another account's directory went";
  }
}

// Another local user (a process that is not the agent) pre-creates the names a share's region
// had in the shared directory (a file; a symbolic link to a file of someone else's; the
// temporary names a region was built under, <name>.tmp.<agent pid>). The shares still start,
// each with a region of its own that its job owns, and nothing those names point at changes.
TEST(AgentLauncher, NamesPreCreatedInTheSharedDirectoryNeitherBlockNorRedirectAShare) {
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 01777), 0);  // like /dev/shm
  const std::string target = dir.path() + "/precious";
  WriteAll(target, "precious\n");
  ASSERT_EQ(chmod(target.c_str(), 0644), 0);
  struct stat before {};
  ASSERT_EQ(stat(target.c_str(), &before), 0);
  const bool root = geteuid() == 0;
  passwd* nobody = getpwnam("nobody");
  ASSERT_TRUE(!root || nobody != nullptr) << "this test needs the account 'nobody'";
  const std::string agent_pid = std::to_string(getpid());
  const std::string prefix = dir.path() + "/tessera-capgpu-";
  pid_t other = fork();
  ASSERT_GE(other, 0);
  if (other == 0) {
    if (root && (setgid(nobody->pw_gid) != 0 || setuid(nobody->pw_uid) != 0)) _exit(2);
    int fd = open((prefix + "squatted").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    bool ok = fd >= 0 && write(fd, "x", 1) == 1;
    if (fd >= 0) close(fd);
    fd = open((prefix + "squatted.tmp." + agent_pid).c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    ok = ok && fd >= 0;
    if (fd >= 0) close(fd);
    ok = ok && symlink(target.c_str(), (prefix + "linked").c_str()) == 0;
    ok = ok && symlink(target.c_str(), (prefix + "linked.tmp." + agent_pid).c_str()) == 0;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(other, &status, 0), other);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the squatter could not make its names";

  Launcher l(Opts(dir));
  for (const std::string id : {"squatted", "linked"}) {
    JobSpec s =
        Sh(id,
           "echo \"REG=$TESSERA_CAPGPU_REGION\"; test -O \"$TESSERA_CAPGPU_REGION\" && echo mine; "
           "exec sleep 30");
    s.gpu_memory_limit_bytes = 1 << 30;
    if (root) s.run_as = "nobody";
    Status started = l.Start(s);
    ASSERT_TRUE(started.ok()) << id << ": " << started.ToString();
    ASSERT_TRUE(
        WaitFor([&] { return ReadAll(l.OutputPath(id)).find("mine\n") != std::string::npos; }, 5s))
        << id << ": the job does not own its region: " << ReadAll(l.OutputPath(id));
    const std::string out = ReadAll(l.OutputPath(id));
    const std::string region = out.substr(4, out.find('\n') - 4);
    EXPECT_NE(region, prefix + id);
    EXPECT_EQ(region, l.RegionPath(id));
    capgpu::Region r;
    ASSERT_EQ(r.Open(region.c_str()), 0) << region;
    capgpu::RegionLock lock(r);
    EXPECT_EQ(capgpu::LimitFor(r.data(), 0), uint64_t{1} << 30);
  }
  // The squatter's names are as it left them, and the link's target is untouched.
  EXPECT_EQ(ReadAll(prefix + "squatted"), "x");
  char link[4096] = {};
  ASSERT_GT(readlink((prefix + "linked").c_str(), link, sizeof(link) - 1), 0);
  EXPECT_EQ(std::string(link), target);
  struct stat after {};
  ASSERT_EQ(stat(target.c_str(), &after), 0);
  EXPECT_EQ(ReadAll(target), "precious\n");
  EXPECT_EQ(after.st_uid, before.st_uid);
  EXPECT_EQ(after.st_gid, before.st_gid);
  EXPECT_EQ(after.st_mode, before.st_mode);
  EXPECT_EQ(after.st_ino, before.st_ino);
  ASSERT_TRUE(l.Cancel("squatted", 0ms).ok());
  ASSERT_TRUE(l.Cancel("linked", 0ms).ok());
  l.WaitAll(5s);
  EXPECT_EQ(ReadAll(target), "precious\n");
}

// The agent reads a region only as the file it made: never through a symbolic link, never a
// file with another link to it, never one of another owner. A share whose region was replaced by
// such a name (here pointing at another region, whose launches are counted) reads as having none.
TEST(AgentLauncher, ARegionReplacedByALinkIsNotRead) {
  TempDir dir;
  Launcher l(Opts(dir));
  JobSpec s = Sh("swapped", "exec sleep 30");
  s.gpu_memory_limit_bytes = 1 << 30;
  ASSERT_TRUE(l.Start(s).ok());
  const std::string other = dir.path() + "/other-region";
  capgpu::LimitList limits;
  limits.count = 1;
  limits.bytes[0] = 1 << 30;
  ASSERT_EQ(capgpu::CreateRegionFile(other.c_str(), limits, 0600, false), 0);
  {
    capgpu::Region r;
    ASSERT_EQ(r.Open(other.c_str()), 0);
    __atomic_fetch_add(&r.data().launches, 5, __ATOMIC_RELAXED);
  }
  const std::string path = l.RegionPath("swapped");
  EXPECT_EQ(l.Running(true)[0].gpu_launches, 0);
  ASSERT_EQ(unlink(path.c_str()), 0);
  ASSERT_EQ(symlink(other.c_str(), path.c_str()), 0);
  EXPECT_EQ(l.Running(true)[0].gpu_launches, -1) << "read through a symbolic link";
  EXPECT_EQ(l.Running(true)[0].gpu_memory_used_bytes, -1);
  ASSERT_EQ(unlink(path.c_str()), 0);
  ASSERT_EQ(link(other.c_str(), path.c_str()), 0);
  EXPECT_EQ(l.Running(true)[0].gpu_launches, -1) << "read a file with another name elsewhere";
  if (geteuid() == 0) {
    ASSERT_EQ(unlink(path.c_str()), 0);
    ASSERT_EQ(capgpu::CreateRegionFile(path.c_str(), limits, 0600, false), 0);
    EXPECT_EQ(l.Running(true)[0].gpu_launches, 0);
    ASSERT_EQ(chown(path.c_str(), getpwnam("nobody")->pw_uid, 0), 0);
    EXPECT_EQ(l.Running(true)[0].gpu_launches, -1) << "read a region of another owner";
  }
  ASSERT_TRUE(l.Cancel("swapped", 0ms).ok());
  l.WaitAll(5s);
  EXPECT_EQ(access(other.c_str(), F_OK), 0)
      << "removing the job's region removed what it pointed at";
}

TEST(AgentLauncher, NonZeroExitCode) {
  TempDir dir;
  Launcher l(Opts(dir));
  JobExit e = RunToEnd(l, Sh("bad", "exit 7"));
  EXPECT_EQ(e.exit_code, 7);
  EXPECT_EQ(e.signal, 0);
}

TEST(AgentLauncher, KilledBySignal) {
  TempDir dir;
  Launcher l(Opts(dir));
  JobExit e = RunToEnd(l, Sh("sig", "kill -KILL $$"));
  EXPECT_EQ(e.signal, SIGKILL);
  EXPECT_EQ(e.exit_code, 128 + SIGKILL);
}

// The agent reads /proc/PID/stat of every process when it signals a job's session. A process that
// exits between the file's open and its read fails the read (ESRCH): that read threw out of the
// agent ("basic_filebuf::underflow error reading the file: No such process", a crash seen once in
// CI under load). It reads as nothing now.
TEST(AgentLauncher, AProcFileOfAProcessGoneBeforeItsReadReadsAsNothing) {
  const pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  ASSERT_GT(child, 0);
  std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
  ASSERT_TRUE(stat.is_open());
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  std::string text = "not read";
  EXPECT_NO_THROW(text = internal::ReadRest(stat));
  EXPECT_EQ(text, "");
}

TEST(AgentLauncher, MissingProgramExits127WithTheReasonInItsOutput) {
  TempDir dir;
  Launcher l(Opts(dir));
  JobSpec spec;
  spec.id = "nope";
  spec.command = {"/nonexistent/program", "x"};
  JobExit e = RunToEnd(l, spec);
  EXPECT_EQ(e.exit_code, 127);
  EXPECT_NE(ReadAll(l.OutputPath("nope")).find("cannot execute '/nonexistent/program'"),
            std::string::npos);
  // A reason a person can read, not only a number: an argument past the kernel's 128 KiB each.
  spec.id = "long";
  spec.command = {"/bin/true", std::string(200 * 1024, 'x')};
  e = RunToEnd(l, spec);
  EXPECT_EQ(e.exit_code, 127);
  const std::string out = ReadAll(l.OutputPath("long"));
  EXPECT_NE(out.find("(the arguments or environment are too long)"), std::string::npos) << out;
}

// A bare command is looked up in the job's own PATH (its env), not the agent's: execvpe searches
// the caller's, so a job's `--env PATH=...` tool was not found, and the reasons given for a
// failed lookup spoke of directories the job never named.
TEST(AgentLauncher, ABareCommandIsLookedUpInTheJobsOwnPath) {
  TempDir dir;
  Launcher l(Opts(dir));
  const std::string bin = dir.path() + "/bin";
  ASSERT_EQ(mkdir(bin.c_str(), 0755), 0);
  const std::string tool = bin + "/tessera-test-tool";
  {
    std::ofstream out(tool);
    out << "#!/bin/sh\necho found in the PATH of the job\n";
  }
  ASSERT_EQ(chmod(tool.c_str(), 0755), 0);
  JobSpec spec;
  spec.id = "ownpath";
  spec.command = {"tessera-test-tool"};
  spec.env["PATH"] = bin + ":/usr/bin:/bin";
  JobExit e = RunToEnd(l, spec);
  EXPECT_EQ(e.exit_code, 0) << ReadAll(l.OutputPath("ownpath"));
  EXPECT_NE(ReadAll(l.OutputPath("ownpath")).find("found in the PATH of the job"),
            std::string::npos)
      << ReadAll(l.OutputPath("ownpath"));
}

// A bare command that no PATH directory holds, where one directory is closed to the job's
// account (root's PATH, /root/... in it, for a job run as nobody): execvp says EACCES, and the
// job's output once said "permission denied" for a command that is simply not there.
TEST(AgentLauncher, ACommandNotInPathIsSaidNotFoundWhenADirectoryIsClosed) {
  TempDir dir;
  Launcher l(Opts(dir));
  const std::string closed = dir.path() + "/closed";
  ASSERT_EQ(mkdir(closed.c_str(), 0700), 0);
  JobSpec spec;
  spec.id = "nocmd";
  spec.command = {"tessera-no-such-program", "x"};
  spec.env["PATH"] = closed + ":/usr/bin:/bin";
  if (geteuid() == 0) {
    spec.run_as = "nobody";  // root reads any directory: the job's account does not
  } else {
    ASSERT_EQ(chmod(closed.c_str(), 0), 0);
  }
  JobExit e = RunToEnd(l, spec);
  EXPECT_EQ(e.exit_code, 127);
  const std::string out = ReadAll(l.OutputPath("nocmd"));
  EXPECT_NE(out.find("cannot execute 'tessera-no-such-program': not found in PATH"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("permission denied"), std::string::npos) << out;
  chmod(closed.c_str(), 0700);
}

TEST(AgentLauncher, RefusesBadSpecsAndDuplicates) {
  TempDir dir;
  Launcher l(Opts(dir));
  EXPECT_FALSE(l.Start(Sh("../x", "true")).ok());
  JobSpec empty;
  empty.id = "e";
  EXPECT_FALSE(l.Start(empty).ok());
  ASSERT_TRUE(l.Start(Sh("dup", "sleep 5")).ok());
  Status again = l.Start(Sh("dup", "true"));
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(l.Cancel("dup", 0ms).ok());
  EXPECT_EQ(l.WaitAll(5s).size(), 1u);
  EXPECT_EQ(l.Cancel("dup", 0ms).code(), StatusCode::kNotFound);
}

TEST(AgentLauncher, CancelEndsAJobThatHonoursSigterm) {
  TempDir dir;
  Launcher l(Opts(dir));
  ASSERT_TRUE(l.Start(Sh("polite", "exec sleep 30")).ok());
  ASSERT_TRUE(l.IsRunning("polite"));
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(l.Cancel("polite", 5s).ok());
  std::vector<JobExit> ended = l.WaitAll(5s);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].signal, SIGTERM);
  EXPECT_TRUE(ended[0].cancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);  // did not wait for the grace
}

TEST(AgentLauncher, CancelKillsAJobIgnoringSigtermAfterTheGrace) {
  TempDir dir;
  Launcher l(Opts(dir));
  ASSERT_TRUE(
      l.Start(Sh("stubborn", "trap '' TERM; echo ready; while :; do sleep 0.05; done")).ok());
  ASSERT_TRUE(WaitFor([&] { return ReadAll(l.OutputPath("stubborn")) == "ready\n"; }, 5s));
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(l.Cancel("stubborn", 400ms).ok());
  std::this_thread::sleep_for(150ms);  // into the grace, not past it: time passing is the point
  EXPECT_TRUE(l.Poll().empty());       // still alive inside the grace
  EXPECT_TRUE(l.IsRunning("stubborn"));
  std::vector<JobExit> ended = l.WaitAll(5s);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].signal, SIGKILL);
  EXPECT_TRUE(ended[0].cancelled);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 400ms);
}

// The control plane repeats its cancel order on every heartbeat until the job is gone: each
// repeat sent SIGTERM again, so a job that checkpoints on SIGTERM started its handler over once
// a second for the whole grace. One SIGTERM, then SIGKILL at the first deadline given.
TEST(AgentLauncher, ARepeatedCancelSendsNoSecondSigterm) {
  TempDir dir;
  Launcher l(Opts(dir));
  ASSERT_TRUE(l.Start(Sh("saver",
                         "trap 'echo term' TERM; echo ready; "
                         "while :; do sleep 0.05; done"))
                  .ok());
  ASSERT_TRUE(WaitFor([&] { return ReadAll(l.OutputPath("saver")) == "ready\n"; }, 5s));
  ASSERT_TRUE(l.Cancel("saver", 600ms).ok());
  const auto terms = [&] {  // the lines "term" of its output (sh also says "Terminated")
    std::stringstream out(ReadAll(l.OutputPath("saver")));
    int n = 0;
    for (std::string line; std::getline(out, line);) n += line == "term" ? 1 : 0;
    return n;
  };
  ASSERT_TRUE(WaitFor([&] { return terms() == 1; }, 5s));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(l.Cancel("saver", 5s).ok());  // a later, longer grace moves nothing
    std::this_thread::sleep_for(60ms);
  }
  std::vector<JobExit> ended = l.WaitAll(5s);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].signal, SIGKILL);
  EXPECT_EQ(terms(), 1) << ReadAll(l.OutputPath("saver"));
}

TEST(AgentLauncher, BindsTheAllocationIntoTheEnvironment) {
  TempDir dir;
  Launcher l(Opts(dir));
  JobSpec spec = Sh(
      "env-1",
      "echo \"CVD=$CUDA_VISIBLE_DEVICES\"; echo \"JOB=$TESSERA_JOB_ID\"; "
      "echo \"LIM=$TESSERA_GPU_MEMORY_LIMIT\"; echo \"REG=$TESSERA_CAPGPU_REGION\"; echo \"K=$K\"");
  spec.devices = {{0, "GPU-sim-h-0", "", "", "", -1}, {1, "GPU-sim-h-1", "MIG-abc", "", "", -1}};
  spec.gpu_memory_limit_bytes = 1 << 30;
  spec.env = {{"K", "V"}};
  JobExit e = RunToEnd(l, spec);
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_EQ(ReadAll(l.OutputPath("env-1")),
            "CVD=GPU-sim-h-0,MIG-abc\nJOB=env-1\nLIM=1073741824\nREG=" + l.RegionPath("env-1") +
                "\nK=V\n");
}

// A swapping share's region is created with swapping on and the launcher's budgets; a plain
// share's is not.
TEST(AgentLauncher, SwappingSharesGetARegionWithSwapOn) {
  TempDir dir;
  LauncherOptions o = Opts(dir);
  o.swap_ram_bytes = int64_t{6} << 30;
  o.swap_dir = dir.path();
  Launcher l(o);
  for (bool swap : {true, false}) {
    JobSpec s = Sh(swap ? "swapping" : "plain", "exec sleep 30");
    s.devices = {{0, "GPU-sim-h-0", "", "", "", -1}};
    s.gpu_memory_limit_bytes = int64_t{8} << 30;
    s.swap = swap;
    ASSERT_TRUE(l.Start(s).ok());
    capgpu::Region region;
    ASSERT_EQ(region.Open(l.RegionPath(s.id).c_str()), 0);
    capgpu::RegionLock lock(region);
    EXPECT_EQ(region.data().swap_enabled, swap ? 1u : 0u);
    if (swap) {
      EXPECT_EQ(region.data().swap_ram_limit, uint64_t{6} << 30);
      EXPECT_EQ(std::string(region.data().swap_dir), dir.path());
    }
  }
  // Both still sleep: stopping them is part of the test's clean-up.
  EXPECT_TRUE(l.Cancel("swapping", std::chrono::milliseconds(100)).ok());
  EXPECT_TRUE(l.Cancel("plain", std::chrono::milliseconds(100)).ok());
}

// What the agent's telemetry reads: the CPU time of the job's whole process tree, and for a share
// its region's charged memory and kernel launches.
TEST(AgentLauncher, RunningReportsCpuTimeAndTheShareRegion) {
  TempDir dir;
  Launcher l(Opts(dir));
  JobSpec busy = Sh("busy", "i=0; while [ $i -lt 2000000 ]; do i=$((i+1)); done; sleep 30");
  busy.devices = {{0, "GPU-sim-h-0", "", "", "", -1}};
  busy.gpu_memory_limit_bytes = 1 << 30;
  ASSERT_TRUE(l.Start(busy).ok());
  ASSERT_TRUE(l.Start(Sh("idle", "exec sleep 30")).ok());
  std::vector<RunningJob> r;
  ASSERT_TRUE(WaitFor(
      [&] {
        r = l.Running(true);
        return r.size() == 2 && r[0].cpu_ticks > 10;  // ordered by id: busy, idle
      },
      10s));
  EXPECT_EQ(r[0].id, "busy");
  EXPECT_EQ(r[0].devices, std::vector<int>{0});
  EXPECT_EQ(r[0].gpu_memory_used_bytes, 0);  // a region, nothing charged yet
  EXPECT_EQ(r[0].gpu_launches, 0);
  EXPECT_LE(r[1].cpu_ticks, 2u);  // sleeping since it started (a tick for exec on a loaded machine)
  EXPECT_EQ(r[1].gpu_launches, -1);  // no region: not a share
  {
    capgpu::Region region;
    ASSERT_EQ(region.Open(l.RegionPath("busy").c_str()), 0);
    __atomic_fetch_add(&region.data().launches, 5, __ATOMIC_RELAXED);
  }
  EXPECT_EQ(l.Running(true)[0].gpu_launches, 5);
  ASSERT_TRUE(l.Cancel("busy", 100ms).ok());
  ASSERT_TRUE(l.Cancel("idle", 100ms).ok());
  l.WaitAll(5s);
}

TEST(AgentLauncher, LeftoversOfTheProcessGroupAreKilledWhenTheJobEnds) {
  TempDir dir;
  Launcher l(Opts(dir));
  std::string pidfile = dir.path() + "/bg.pid";
  JobExit e = RunToEnd(l, Sh("bg", "sleep 30 & echo $! > " + pidfile + "; exit 0"));
  EXPECT_EQ(e.exit_code, 0);
  pid_t bg = std::stoi(ReadAll(pidfile));
  // Gone, or a zombie waiting for its new parent to reap it.
  EXPECT_TRUE(WaitFor(
      [&] {
        std::string stat = ReadAll("/proc/" + std::to_string(bg) + "/stat");
        return stat.empty() || stat.find(") Z ") != std::string::npos;
      },
      3s));
}

// A process that left the job's process group (its own group, as a shell with job control or
// setpgid makes) but not its session outlived the job's end and its cancel, where there are no
// cgroups, and kept its device. The job's session is swept too.
TEST(AgentLauncher, LeftoversInAnotherProcessGroupOfTheSessionAreKilled) {
  TempDir dir;
  Launcher l(Opts(dir));
  const auto gone = [](pid_t pid) {  // or a zombie waiting for its new parent to reap it
    std::string stat = ReadAll("/proc/" + std::to_string(pid) + "/stat");
    return stat.empty() || stat.find(") Z ") != std::string::npos;
  };
  const std::string kOwnGroup =
      "python3 -c 'import os, time; os.setpgid(0, 0); time.sleep(30)'";  // a group of its own
  const std::string ended = dir.path() + "/ended.pid";
  JobExit e =
      RunToEnd(l, Sh("grouped", kOwnGroup + " & p=$!; sleep 1; echo $p > " + ended + "; exit 0"));
  EXPECT_EQ(e.exit_code, 0);
  const pid_t after_end = std::stoi(ReadAll(ended));
  EXPECT_TRUE(WaitFor([&] { return gone(after_end); }, 3s)) << "left running after the job ended";
  const std::string cancelled = dir.path() + "/cancelled.pid";
  ASSERT_TRUE(l.Start(Sh("stays", kOwnGroup + " & p=$!; sleep 1; echo $p > " + cancelled +
                                      "; trap '' TERM; wait"))
                  .ok());
  ASSERT_TRUE(WaitFor([&] { return !ReadAll(cancelled).empty(); }, 5s));
  const pid_t on_cancel = std::stoi(ReadAll(cancelled));
  ASSERT_TRUE(l.Cancel("stays", 200ms).ok());
  l.WaitAll(5s);
  EXPECT_TRUE(WaitFor([&] { return gone(on_cancel); }, 3s)) << "left running after a cancel";
  kill(after_end, SIGKILL);
  kill(on_cancel, SIGKILL);
}

TEST(AgentLauncher, WritesCgroupLimitsWhenTheHierarchyAllowsIt) {
  // A stand-in cgroup tree: plain files where cgroupfs would create control files.
  TempDir dir;
  std::string root = dir.path() + "/cg";
  std::filesystem::create_directories(root + "/tessera/cg-job");
  WriteAll(root + "/cgroup.controllers", "cpuset cpu io memory pids\n");
  WriteAll(root + "/cgroup.subtree_control", "");
  WriteAll(root + "/tessera/cgroup.subtree_control", "");
  for (const char* f : {"cpu.max", "memory.max", "cgroup.procs"})
    WriteAll(root + "/tessera/cg-job/" + f, "");
  LauncherOptions o = Opts(dir);
  o.cgroup_root = root;
  Launcher l(o);
  ASSERT_TRUE(l.cgroups_available()) << l.cgroups_status();
  EXPECT_EQ(l.cgroups_status(), "cgroups v2: " + root + "/tessera");
  EXPECT_EQ(ReadAll(root + "/cgroup.subtree_control"), "+cpu +memory");
  JobSpec spec = Sh("cg-job", "echo $$");
  spec.cpu_milli = 1500;
  spec.memory_mib = 512;
  JobExit e = RunToEnd(l, spec);
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_EQ(ReadAll(root + "/tessera/cg-job/cpu.max"), "150000 100000");
  EXPECT_EQ(ReadAll(root + "/tessera/cg-job/memory.max"), "536870912");
  // The child put itself in before exec: its pid is the one the shell printed.
  std::string pid = ReadAll(l.OutputPath("cg-job"));
  EXPECT_EQ(ReadAll(root + "/tessera/cg-job/cgroup.procs") + "\n", pid);
}

TEST(AgentLauncher, RunsWithoutCgroupsWhenTheHostHasNone) {
  TempDir dir;
  LauncherOptions o = Opts(dir);
  o.cgroup_root = dir.path() + "/no-cgroup-here";
  Launcher l(o);
  EXPECT_FALSE(l.cgroups_available());
  EXPECT_EQ(l.cgroups_status().rfind("cgroups: unavailable (", 0), 0u) << l.cgroups_status();
  JobSpec spec = Sh("plain", "exit 0");
  spec.cpu_milli = 1000;
  spec.memory_mib = 100;
  EXPECT_EQ(RunToEnd(l, spec).exit_code, 0);
}

}  // namespace
}  // namespace tessera::agent
