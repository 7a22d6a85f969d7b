#include "agent/launcher.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "agent/host_files.h"
#include "capgpu/region.h"

extern char** environ;

namespace tessera::agent {
namespace {

using internal::HasWord;
using internal::KillCgroup;
using internal::ReadSmallFile;
using internal::WriteControl;

constexpr int64_t kCpuPeriodUs = 100000;

bool FileExists(const std::string& path) {
  return !path.empty() && access(path.c_str(), R_OK) == 0;
}

// Async-signal-safe helpers for the child between fork and exec.
void SafeWrite(int fd, const char* s) {
  size_t len = std::strlen(s);
  while (len > 0) {
    ssize_t n = write(fd, s, len);
    if (n <= 0) return;
    s += n;
    len -= static_cast<size_t>(n);
  }
}
// Decimal digits of v into buf (>= 24 bytes), NUL-terminated; returns buf.
char* SafeItoa(long long v, char* buf) {
  char tmp[24];
  int n = 0;
  bool neg = v < 0;
  unsigned long long u =
      neg ? 0ULL - static_cast<unsigned long long>(v) : static_cast<unsigned long long>(v);
  do {
    tmp[n++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0);
  int i = 0;
  if (neg) buf[i++] = '-';
  while (n > 0) buf[i++] = tmp[--n];
  buf[i] = '\0';
  return buf;
}

// Signals the process group (the job is a session leader: pgid == pid); falls back to the pid
// itself when the child has not reached setsid() yet.
void SignalJob(pid_t pid, int sig) {
  if (kill(-pid, sig) != 0 && errno == ESRCH) kill(pid, sig);
}

// argv and envp for execvpe, pointing into the strings held here; filled in place, never moved.
struct ExecArgs {
  std::vector<std::string> env_strings;
  std::vector<char*> envp;
  std::vector<std::string> args;
  std::vector<char*> argv;
  std::string exec_error;  // the prefix the child writes when exec fails
};

void BuildExecArgs(const JobSpec& spec, const LauncherOptions& options, ExecArgs* x) {
  std::vector<std::string> base;
  if (options.inherit_environment) {
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) base.emplace_back(*e);
  }
  x->env_strings = BuildJobEnvironment(spec, base, options);
  for (std::string& s : x->env_strings) x->envp.push_back(s.data());
  x->envp.push_back(nullptr);
  x->args = spec.command;
  for (std::string& s : x->args) x->argv.push_back(s.data());
  x->argv.push_back(nullptr);
  x->exec_error = "tessera-agent: cannot execute '" + x->args[0] + "': errno ";
}

// The job's stdout/stderr file, made anew: `out_fd` for the job, appending (so that what it
// writes after the agent cut the file lands at the cut), and `own_fd`, the agent's descriptor of
// the same file (without O_APPEND, under which pwrite would append too); /dev/null for its stdin.
Status OpenJobStdio(const std::string& out_path, int* out_fd, int* own_fd, int* null_fd) {
  *out_fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_NOFOLLOW | O_CLOEXEC,
                 0640);
  if (*out_fd < 0) return Status::Internal("output file " + out_path + ": " + std::strerror(errno));
  *own_fd = open(out_path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  struct stat a {};
  struct stat b {};
  if (*own_fd < 0 || fstat(*out_fd, &a) != 0 || fstat(*own_fd, &b) != 0 || a.st_ino != b.st_ino ||
      a.st_dev != b.st_dev) {
    const int err = *own_fd < 0 ? errno : EBUSY;
    close(*out_fd);
    if (*own_fd >= 0) close(*own_fd);
    return Status::Internal("output file " + out_path + ": " + std::strerror(err));
  }
  *null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (*null_fd < 0) {
    close(*out_fd);
    close(*own_fd);
    return Status::Internal(std::string("/dev/null: ") + std::strerror(errno));
  }
  return Status::Ok();
}

// The agent creates and sizes the share's region before the workload starts, so no process
// of the workload decides its limit (the cap library only joins it). `path` is in the
// launcher's private directory, where no other account can have put anything. The region then
// belongs to `owner` and `group` (the job's account; uid_t(-1): the agent's own), so that the
// cap library in the job can charge it.
Status CreateShareRegion(const std::string& path, int64_t limit_bytes, bool swap,
                         int64_t swap_ram_bytes, const std::string& swap_dir, uid_t owner,
                         gid_t group) {
  unlink(path.c_str());  // a stale region of an earlier run must not carry charges
  capgpu::LimitList limits;
  limits.count = 1;
  limits.bytes[0] = static_cast<uint64_t>(limit_bytes);
  if (int err = capgpu::CreateRegionFile(path.c_str(), limits, 0600, true); err != 0) {
    return Status::Internal("cannot create the memory-cap region '" + path +
                            "': " + std::strerror(err));
  }
  Result<int> fd = internal::OpenRegionFile(path, geteuid());
  if (!fd.ok()) return fd.status();
  Status s = Status::Ok();
  if (swap) {
    // Before the workload starts: its processes read swap_enabled when they join.
    capgpu::Region region;
    int err = region.OpenFd(*fd);
    if (err == 0) {
      capgpu::RegionLock lock(region);
      const uint64_t ram =
          swap_ram_bytes > 0 ? static_cast<uint64_t>(swap_ram_bytes) : capgpu::kNoLimit;
      if (!lock.held() || !capgpu::ConfigureSwap(region.data(), ram, swap_dir.c_str()))
        err = EINVAL;
    }
    if (err != 0)
      s = Status::Internal("cannot turn swapping on in '" + path + "': " + std::strerror(err));
  }
  if (s.ok() && owner != static_cast<uid_t>(-1) && fchown(*fd, owner, group) != 0) {
    s = Status::Internal("cannot give the memory-cap region '" + path + "' to uid " +
                         std::to_string(owner) + ": " + std::strerror(errno));
  }
  close(*fd);
  return s;
}

// Maps a share's region as the agent made it (no symbolic link, one name, `owner`'s); false
// when there is none such at `path`.
bool OpenShareRegion(const std::string& path, uid_t owner, capgpu::Region* region) {
  if (path.empty()) return false;
  Result<int> fd = internal::OpenRegionFile(path, owner);
  if (!fd.ok()) return false;
  const int rc = region->OpenFd(*fd);
  close(*fd);
  return rc == 0;
}

// A job's Unix account, resolved before fork (getpwnam is not async-signal-safe).
struct Account {
  bool set = false;  // false: the agent's own
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary, the primary included
  std::string name, home;
};

Result<Account> ResolveAccount(const std::string& name) {
  Account a;
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (name.empty()) {  // the agent's own (a non-root agent's): its name and home all the same
    if (getpwuid_r(geteuid(), &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
      a.name = pw.pw_name;
      a.home = pw.pw_dir != nullptr ? pw.pw_dir : "/";
    }
    return a;
  }
  if (getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return Status::FailedPrecondition("run_as: the account '" + name +
                                      "' does not exist on this node");
  }
  a.set = true;
  a.uid = pw.pw_uid;
  a.gid = pw.pw_gid;
  a.name = name;
  a.home = pw.pw_dir != nullptr ? pw.pw_dir : "/";
  int n = 64;
  a.groups.resize(static_cast<size_t>(n));
  if (getgrouplist(name.c_str(), a.gid, a.groups.data(), &n) < 0) {
    a.groups.resize(static_cast<size_t>(n));
    getgrouplist(name.c_str(), a.gid, a.groups.data(), &n);
  }
  a.groups.resize(static_cast<size_t>(std::max(n, 0)));
  if (geteuid() != 0 && a.uid != geteuid()) {
    return Status::FailedPrecondition("run_as: this agent runs as uid " +
                                      std::to_string(geteuid()) + " and cannot start jobs as '" +
                                      name + "' (uid " + std::to_string(a.uid) +
                                      "); run the agent as root to run jobs as their submitters");
  }
  return a;
}

// What the child needs after fork; plain values and pointers only.
struct ChildSetup {
  int out_fd = -1;
  int null_fd = -1;
  int procs_fd = -1;  // the job cgroup's cgroup.procs, or -1
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* exec_error = nullptr;
  const Account* account = nullptr;  // switch to it (uid, gid, groups) before exec
  const char* cwd = "/";             // the account's home (never the agent's directory)
};

// The child between fork and exec: async-signal-safe calls only.
[[noreturn]] void RunJobChild(const ChildSetup& c) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  setsid();
  char num[24];
  if (c.procs_fd >= 0) {
    SafeItoa(getpid(), num);
    if (write(c.procs_fd, num, std::strlen(num)) < 0) {
      SafeWrite(c.out_fd, "tessera-agent: cannot join the job's cgroup\n");
      _exit(126);
    }
  }
  dup2(c.null_fd, 0);
  dup2(c.out_fd, 1);
  dup2(c.out_fd, 2);
  // Groups first, then the gid, then the uid (after which neither could change).
  if (c.account != nullptr && c.account->set &&
      (setgroups(c.account->groups.size(), c.account->groups.data()) != 0 ||
       setgid(c.account->gid) != 0 || setuid(c.account->uid) != 0)) {
    SafeWrite(2, "tessera-agent: cannot switch to the job's account (errno ");
    SafeWrite(2, SafeItoa(errno, num));
    SafeWrite(2, ")\n");
    _exit(126);
  }
  // The job starts in its account's home, else at /: not in the agent's working directory.
  if (chdir(c.cwd) != 0 && chdir("/") != 0) {
    SafeWrite(2, "tessera-agent: cannot enter a working directory\n");
    _exit(126);
  }
  // Close everything else the agent holds (sockets, files) that lacks FD_CLOEXEC.
  if (close_range(3, ~0U, 0) != 0) {
    for (int fd = 3; fd < 4096; ++fd) close(fd);
  }
  execvpe(c.argv[0], c.argv, c.envp);
  int err = errno;
  SafeWrite(2, c.exec_error);
  SafeWrite(2, SafeItoa(err, num));
  SafeWrite(2, err == ENOENT ? " (not found)\n" : err == EACCES ? " (permission denied)\n" : "\n");
  _exit(127);
}

// Forks the job's process; returns its pid, or -1 with the reason in `fork_errno`.
pid_t ForkJob(const ChildSetup& c, int* fork_errno) {
  // Signals stay blocked across fork so the child cannot run the agent's handlers; it resets
  // every disposition to default (ignored ones would survive exec) before unblocking.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  pid_t pid = fork();
  if (pid == 0) RunJobChild(c);
  *fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return pid;
}

}  // namespace

std::string CgroupCpuMax(MilliCpu cpu_milli) {
  // 0, or more than the quota can express: no limit.
  if (cpu_milli <= 0 || cpu_milli > std::numeric_limits<int64_t>::max() / kCpuPeriodUs) {
    return "max " + std::to_string(kCpuPeriodUs);
  }
  // milli-CPU * period / 1000; the kernel's minimum quota is 1000 us.
  int64_t quota = std::max<int64_t>(cpu_milli * kCpuPeriodUs / 1000, 1000);
  return std::to_string(quota) + " " + std::to_string(kCpuPeriodUs);
}

std::string CgroupMemoryMax(MiB memory_mib) {
  if (memory_mib <= 0 || memory_mib > std::numeric_limits<int64_t>::max() / (1024 * 1024))
    return "max";
  return std::to_string(memory_mib * 1024 * 1024);
}

Status ValidateJobId(const std::string& id) {
  if (id.empty() || id.size() > 128)
    return Status::InvalidArgument("job id must be 1-128 characters");
  if (id[0] == '.') return Status::InvalidArgument("job id '" + id + "' must not start with '.'");
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return Status::InvalidArgument("job id '" + id + "' may only hold [A-Za-z0-9._-]");
  }
  return Status::Ok();
}

std::vector<std::string> BuildJobEnvironment(const JobSpec& spec,
                                             const std::vector<std::string>& base,
                                             const LauncherOptions& options) {
  std::map<std::string, std::string> env;
  // From the agent's environment, only what describes the host and its GPU software (an
  // allowlist): never its token or anything else the unit or the operator's shell put there.
  // A job that wants to call the API passes its own token in the job's env.
  const auto allowed = [](const std::string& name) {
    static const char* const kNames[] = {
        "PATH", "LANG", "LANGUAGE", "TZ", "TERM", "LD_LIBRARY_PATH", "TMPDIR"};
    static const char* const kPrefixes[] = {"LC_", "CUDA_", "NVIDIA_", "ROCM_", "HIP_", "HSA_"};
    for (const char* n : kNames) {
      if (name == n) return true;
    }
    for (const char* p : kPrefixes) {
      if (name.rfind(p, 0) == 0) return true;
    }
    return false;
  };
  for (const std::string& kv : base) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0 || !allowed(kv.substr(0, eq))) continue;
    env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  // The agent's own bindings (if it runs under one) never leak into a job.
  for (const char* name : {"CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"}) env.erase(name);
  for (const auto& [k, v] : spec.env) env[k] = v;

  std::string visible, rocr;
  for (const DeviceBinding& d : spec.devices) {
    if (d.amd_index >= 0) {  // an AMD partition: a logical GPU of its own
      rocr += (rocr.empty() ? "" : ",") + std::to_string(d.amd_index);
      continue;
    }
    if (!visible.empty()) visible += ",";
    visible += d.mig.empty() ? d.uuid : d.mig;
  }
  env["CUDA_VISIBLE_DEVICES"] = visible;
  if (!rocr.empty()) env["ROCR_VISIBLE_DEVICES"] = rocr;
  env["TESSERA_JOB_ID"] = spec.id;
  if (spec.gpu_memory_limit_bytes > 0) {
    env["TESSERA_GPU_MEMORY_LIMIT"] = std::to_string(spec.gpu_memory_limit_bytes);
    env["TESSERA_CAPGPU_REGION"] = options.region_dir + "/tessera-capgpu-" + spec.id;
    if (FileExists(options.capgpu_preload)) {
      auto it = env.find("LD_PRELOAD");
      env["LD_PRELOAD"] =
          options.capgpu_preload +
          (it != env.end() && !it->second.empty() ? ":" + it->second : std::string());
    }
  } else {
    env.erase("TESSERA_GPU_MEMORY_LIMIT");
    env.erase("TESSERA_CAPGPU_REGION");
  }
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

Launcher::Launcher(LauncherOptions options) : options_(std::move(options)) {
  assert(!options_.work_dir.empty());
  mkdir(options_.work_dir.c_str(), 0755);
  ProbeCgroups();
  // Share regions go in a directory of this launcher's own, under a name nobody can guess, so
  // that no other local account can take or redirect a region's name (region_dir is shared:
  // /dev/shm). Without it, jobs run and shares are refused with the reason.
  // Those of launchers that died without removing theirs (SIGKILL) go first, whatever their
  // work directory.
  internal::RemoveAbandonedPrivateDirs(options_.region_dir, kRegionDirPrefix);
  Result<std::string> regions =
      internal::MakePrivateDir(options_.region_dir, kRegionDirPrefix, &regions_lock_fd_);
  if (regions.ok()) {
    regions_ = *regions;
  } else {
    regions_error_ = regions.status().message();
  }
  if (options_.max_output_bytes > 0) {
    const std::string note = "\ntessera-agent: output cut at " +
                             std::to_string(options_.max_output_bytes) +
                             " bytes (the node's limit); the rest was dropped\n";
    // A limit too small to hold the note as well is a plain cut.
    if (static_cast<int64_t>(note.size()) * 4 <= options_.max_output_bytes) cut_note_ = note;
  }
  // One launcher per work directory keeps its list of running jobs: a second one at once (two
  // agents given the same --work) neither reads nor writes it, so that it never stops the
  // first one's jobs as left over.
  lock_fd_ = open((options_.work_dir + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  // (A job of a launcher that just died may hold the lock for a moment, between its fork and its
  // exec, which closes it: a second of retries.)
  for (int i = 0; i < 50 && lock_fd_ >= 0 && !owns_list_; ++i) {
    owns_list_ = flock(lock_fd_, LOCK_EX | LOCK_NB) == 0;
    if (!owns_list_) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (owns_list_) StopLeftovers();
  WriteRunningList();  // names regions_ for the next launcher, should this one die
}

Launcher::~Launcher() {
  for (auto& [id, job] : jobs_) SignalJob(job.pid, SIGKILL);
  for (auto& [id, job] : jobs_) {
    int st = 0;
    while (waitpid(job.pid, &st, 0) < 0 && errno == EINTR) {
    }
    Cleanup(job);
  }
  jobs_.clear();
  WriteRunningList();
  if (!regions_.empty()) internal::RemovePrivateDir(regions_);
  if (regions_lock_fd_ >= 0) close(regions_lock_fd_);
  if (lock_fd_ >= 0) close(lock_fd_);
  // Cgroups whose last processes were still exiting: a second to go.
  for (int i = 0; i < 100 && !stale_cgroups_.empty(); ++i) {
    std::erase_if(stale_cgroups_,
                  [](const std::string& d) { return rmdir(d.c_str()) == 0 || errno == ENOENT; });
    if (!stale_cgroups_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void Launcher::ProbeCgroups() {
  auto unavailable = [this](const std::string& why) {
    cgroups_available_ = false;
    cgroups_status_ = "cgroups: unavailable (" + why + ")";
  };
  const std::string& root = options_.cgroup_root;
  if (root.empty()) return unavailable("disabled");
  bool ok = false;
  std::string controllers = ReadSmallFile(root + "/cgroup.controllers", &ok);
  if (!ok) return unavailable("no cgroup v2 hierarchy at " + root);
  if (!HasWord(controllers, "cpu") || !HasWord(controllers, "memory")) {
    return unavailable("cpu and memory controllers not offered at " + root);
  }
  if (access((root + "/cgroup.subtree_control").c_str(), W_OK) != 0) {
    return unavailable(root + " is not writable");
  }
  std::string parent = root + "/" + options_.cgroup_parent;
  if (mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) {
    return unavailable("mkdir " + parent + ": " + std::strerror(errno));
  }
  for (const std::string& dir : {root, parent}) {
    std::string enabled = ReadSmallFile(dir + "/cgroup.subtree_control", &ok);
    if (HasWord(enabled, "cpu") && HasWord(enabled, "memory")) continue;
    std::string err = WriteControl(dir + "/cgroup.subtree_control", "+cpu +memory");
    if (!err.empty()) return unavailable("enabling cpu and memory: " + err);
  }
  cgroup_parent_dir_ = parent;
  cgroups_available_ = true;
  cgroups_status_ = "cgroups v2: " + parent;
}

Status Launcher::PrepareCgroup(const JobSpec& spec, std::string* dir, int* procs_fd) {
  *dir = cgroup_parent_dir_ + "/" + spec.id;
  if (mkdir(dir->c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::Internal("cgroup " + *dir + ": " + std::strerror(errno));
  }
  std::string err = WriteControl(*dir + "/cpu.max", CgroupCpuMax(spec.cpu_milli));
  if (err.empty()) err = WriteControl(*dir + "/memory.max", CgroupMemoryMax(spec.memory_mib));
  if (!err.empty()) {
    rmdir(dir->c_str());
    return Status::Internal("cgroup limits for job " + spec.id + ": " + err);
  }
  *procs_fd = open((*dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  if (*procs_fd < 0) {
    Status s = Status::Internal("cgroup " + *dir + "/cgroup.procs: " + std::strerror(errno));
    rmdir(dir->c_str());
    return s;
  }
  return Status::Ok();
}

Status Launcher::PrepareLimits(const JobSpec& spec, Job* job, int* procs_fd, uid_t owner,
                               gid_t group) {
  if (cgroups_available_) {
    if (Status s = PrepareCgroup(spec, &job->cgroup_dir, procs_fd); !s.ok()) return s;
  }
  if (spec.gpu_memory_limit_bytes > 0) {
    if (regions_.empty()) {
      return Status::FailedPrecondition("no directory for memory-cap regions under '" +
                                        options_.region_dir + "': " + regions_error_);
    }
    job->region_path = RegionPath(spec.id);
    job->region_owner = owner == static_cast<uid_t>(-1) ? geteuid() : owner;
    if (Status s = CreateShareRegion(job->region_path, spec.gpu_memory_limit_bytes, spec.swap,
                                     options_.swap_ram_bytes, options_.swap_dir, owner, group);
        !s.ok()) {
      return s;
    }
  }
  return Status::Ok();
}

Status Launcher::Start(const JobSpec& spec) {
  if (Status s = ValidateJobId(spec.id); !s.ok()) return s;
  if (spec.command.empty()) return Status::InvalidArgument("job " + spec.id + " has no command");
  if (jobs_.count(spec.id) != 0)
    return Status::FailedPrecondition("job " + spec.id + " is already running");

  // Everything the child needs is built before fork: after fork it may only call
  // async-signal-safe functions (the agent has other threads, e.g. HTTP clients).
  auto account = ResolveAccount(spec.run_as);
  if (!account.ok()) return account.status();
  JobSpec as = spec;
  if (!account->name.empty()) {
    as.env["HOME"] = account->home;
    as.env["USER"] = as.env["LOGNAME"] = account->name;
  }
  ExecArgs exec;
  LauncherOptions bound = options_;
  bound.region_dir = regions_;  // the job's TESSERA_CAPGPU_REGION is RegionPath()
  BuildExecArgs(as, bound, &exec);
  ChildSetup child;
  child.account = &*account;
  const std::string cwd = account->home.empty() ? "/" : account->home;
  child.cwd = cwd.c_str();
  child.argv = exec.argv.data();
  child.envp = exec.envp.data();
  child.exec_error = exec.exec_error.c_str();
  Job job;
  job.spec = spec;
  if (Status s = OpenJobStdio(OutputPath(spec.id), &child.out_fd, &job.out_fd, &child.null_fd);
      !s.ok())
    return s;

  // The job's own files: its output (written through the inherited descriptor) and its share's
  // region (which the cap library in the job opens) belong to its account.
  const uid_t owner = account->set ? account->uid : static_cast<uid_t>(-1);
  const gid_t group = account->set ? account->gid : static_cast<gid_t>(-1);
  Status prepared = PrepareLimits(spec, &job, &child.procs_fd, owner, group);
  if (prepared.ok() && account->set && fchown(child.out_fd, account->uid, account->gid) != 0) {
    prepared = Status::Internal("cannot give job " + spec.id + "'s output to '" + account->name +
                                "': " + std::strerror(errno));
  }
  if (!prepared.ok()) {
    close(child.out_fd);
    close(child.null_fd);
    if (child.procs_fd >= 0) close(child.procs_fd);
    Cleanup(job);
    return prepared;
  }
  int fork_errno = 0;
  pid_t pid = ForkJob(child, &fork_errno);
  close(child.out_fd);
  close(child.null_fd);
  if (child.procs_fd >= 0) close(child.procs_fd);
  if (pid < 0) {
    Cleanup(job);
    return Status::Internal(std::string("fork: ") + std::strerror(fork_errno));
  }
  job.pid = pid;
  jobs_.emplace(spec.id, std::move(job));
  WriteRunningList();
  return Status::Ok();
}

Status Launcher::Cancel(const std::string& id, std::chrono::milliseconds grace) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Status::NotFound("job " + id + " is not running here");
  Job& job = it->second;
  auto deadline = std::chrono::steady_clock::now() + grace;
  if (!job.cancelled || deadline < job.kill_at) job.kill_at = deadline;
  job.cancelled = true;
  if (grace.count() <= 0) {
    SignalJob(job.pid, SIGKILL);
    job.kill_sent = true;
  } else {
    SignalJob(job.pid, SIGTERM);
  }
  return Status::Ok();
}

std::vector<JobExit> Launcher::Poll() {
  std::vector<JobExit> ended;
  bool listed_changed = false;
  auto now = std::chrono::steady_clock::now();
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    Job& job = it->second;
    // Peek first (WNOWAIT): while the zombie exists its pid cannot be reused, so the group
    // kill below cannot hit a stranger.
    siginfo_t info{};
    int rc = waitid(P_PID, static_cast<id_t>(job.pid), &info, WEXITED | WNOHANG | WNOWAIT);
    bool gone = rc == 0 && info.si_pid == job.pid;
    if (rc != 0 && errno == ECHILD) gone = true;  // reaped elsewhere: report what we can
    CapOutput(job);
    if (!gone) {
      if (job.cancelled && !job.kill_sent && now >= job.kill_at) {
        SignalJob(job.pid, SIGKILL);
        KillCgroup(options_.cgroup_root, job.cgroup_dir);
        job.kill_sent = true;
      }
      ++it;
      continue;
    }
    kill(-job.pid, SIGKILL);  // leftovers of the job's process group
    JobExit exit;
    exit.id = it->first;
    exit.cancelled = job.cancelled;
    int status = 0;
    pid_t r;
    while ((r = waitpid(job.pid, &status, 0)) < 0 && errno == EINTR) {
    }
    if (r == job.pid && WIFEXITED(status)) {
      exit.exit_code = WEXITSTATUS(status);
    } else if (r == job.pid && WIFSIGNALED(status)) {
      exit.signal = WTERMSIG(status);
      exit.exit_code = 128 + exit.signal;
    } else {
      exit.exit_code = 255;  // lost track of it
    }
    CapOutput(job);  // what it wrote since the last call
    struct stat st {};
    if (fstat(job.out_fd, &st) == 0) exit.output_bytes = st.st_size;
    exit.output_cut = job.output_cut;
    Cleanup(job);
    ended.push_back(std::move(exit));
    it = jobs_.erase(it);
    listed_changed = true;
  }
  if (listed_changed) WriteRunningList();
  for (auto it = stale_cgroups_.begin(); it != stale_cgroups_.end();) {
    if (rmdir(it->c_str()) == 0 || errno == ENOENT) {
      it = stale_cgroups_.erase(it);
    } else {
      ++it;
    }
  }
  return ended;
}

std::vector<JobExit> Launcher::WaitAll(std::chrono::milliseconds timeout) {
  std::vector<JobExit> all;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    std::vector<JobExit> some = Poll();
    all.insert(all.end(), some.begin(), some.end());
    if (jobs_.empty() || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return all;
}

void Launcher::Cleanup(Job& job) {
  if (!job.cgroup_dir.empty()) {
    KillCgroup(options_.cgroup_root, job.cgroup_dir);  // whatever escaped the process group
    if (rmdir(job.cgroup_dir.c_str()) != 0 && errno != ENOENT)
      stale_cgroups_.push_back(job.cgroup_dir);
    job.cgroup_dir.clear();
  }
  if (!job.region_path.empty()) {
    unlink(job.region_path.c_str());
    job.region_path.clear();
  }
  if (job.out_fd >= 0) close(job.out_fd);
  job.out_fd = -1;
}

// The job's output past max_output_bytes: the file keeps its first bytes and ends with the note
// (at the same place every time); what the job writes after lands past it (its descriptor
// appends) and goes at the next call. A job that turned O_APPEND off writes past the end
// instead, leaving a hole that takes no space, and is cut the same way.
void Launcher::CapOutput(Job& job) {
  const int64_t cap = options_.max_output_bytes;
  struct stat st {};
  if (cap <= 0 || job.out_fd < 0 || fstat(job.out_fd, &st) != 0 || st.st_size <= cap) return;
  const int64_t keep = cap - static_cast<int64_t>(cut_note_.size());
  if (ftruncate(job.out_fd, keep) != 0) return;
  if (!cut_note_.empty() && pwrite(job.out_fd, cut_note_.data(), cut_note_.size(), keep) < 0)
    return;
  job.output_cut = true;
}

void Launcher::CapOutputs() {
  for (auto& [id, job] : jobs_) CapOutput(job);
}

int64_t Launcher::UploadableBytes(const std::string& id) const {
  if (options_.max_output_bytes <= 0) return std::numeric_limits<int64_t>::max();
  // While it runs, the note may yet go at the end: the bytes up to it do not change.
  if (jobs_.count(id) != 0)
    return options_.max_output_bytes - static_cast<int64_t>(cut_note_.size());
  return options_.max_output_bytes;
}

bool Launcher::IsRunning(const std::string& id) const { return jobs_.count(id) != 0; }

std::map<pid_t, uint64_t> CpuTicksBySession(const std::string& proc) {
  std::map<pid_t, uint64_t> out;
  DIR* dir = opendir(proc.c_str());
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    std::ifstream in(proc + "/" + e->d_name + "/stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    const size_t close = line.rfind(')');  // the command may hold spaces and parentheses
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    // Fields 3.. : state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
    // stime cutime cstime.
    std::string state;
    long long ppid = 0, pgrp = 0, session = 0, skip = 0;
    unsigned long long utime = 0, stime = 0;
    long long cutime = 0, cstime = 0;
    rest >> state >> ppid >> pgrp >> session;
    for (int i = 0; i < 7; ++i) rest >> skip;
    rest >> utime >> stime >> cutime >> cstime;
    if (!rest || session <= 0) continue;
    out[static_cast<pid_t>(session)] +=
        utime + stime + static_cast<uint64_t>(std::max(0LL, cutime) + std::max(0LL, cstime));
  }
  closedir(dir);
  return out;
}

std::vector<RunningJob> Launcher::Running(bool usage) const {
  std::vector<RunningJob> out;
  std::map<pid_t, uint64_t> ticks;
  if (usage) ticks = CpuTicksBySession();
  for (const auto& [id, job] : jobs_) {
    RunningJob r;
    r.id = id;
    r.pid = job.pid;
    for (const DeviceBinding& d : job.spec.devices) r.devices.push_back(d.index);
    if (usage) {
      auto t = ticks.find(job.pid);
      if (t != ticks.end()) r.cpu_ticks = t->second;
      capgpu::Region region;
      if (OpenShareRegion(job.region_path, job.region_owner, &region)) {
        capgpu::RegionLock lock(region, capgpu::kObserverLockMs);
        uint64_t used = 0;
        if (lock.held()) {
          for (uint32_t d = 0; d < capgpu::kMaxDevices; ++d) used += region.data().used[d];
          r.gpu_launches =
              static_cast<int64_t>(__atomic_load_n(&region.data().launches, __ATOMIC_RELAXED));
          if (region.data().swap_enabled != 0) {
            const capgpu::SwapSummary m = capgpu::SummarizeSwap(region.data());
            r.swap_state = capgpu::ShareSwapState(m);
            r.swapped_bytes = static_cast<int64_t>(m.host_bytes + m.disk_bytes);
          }
        }
        r.gpu_memory_used_bytes = static_cast<int64_t>(used);
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::string Launcher::OutputPath(const std::string& id) const {
  return options_.work_dir + "/" + id + ".out";
}

std::string Launcher::RegionPath(const std::string& id) const {
  return regions_ + "/tessera-capgpu-" + id;
}

bool Launcher::ShareRegion(const std::string& id, std::string* path, uid_t* owner) const {
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second.region_path.empty()) return false;
  *path = it->second.region_path;
  *owner = it->second.region_owner;
  return true;
}

}  // namespace tessera::agent
