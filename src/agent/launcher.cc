// The launcher: starting, stopping and watching jobs, their output and what they use.
#include "agent/launcher.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <sstream>
#include <thread>

#include "agent/host_files.h"
#include "agent/launcher_internal.h"
#include "capgpu/region.h"
#include "common/text.h"

namespace tessera::agent {
namespace {

using internal::BuildExecArgs;
using internal::ChildSetup;
using internal::ExecArgs;
using internal::ForkJob;
using internal::KillCgroup;
using internal::OpenJobStdio;
using internal::ReadShareRegion;
using internal::ReadSmallFile;
using internal::ResolveAccount;

// Signals the processes of session `sid` outside its leader's process group: a process that
// made a group of its own (setpgid, a shell's job control) left the job's group but not its
// session. Where there are no cgroups this is what finds them; one that started a session of its
// own (setsid) is found only by its cgroup. Only while the leader (alive or a zombie not yet
// reaped) holds the id, so that it cannot be another session's.
void SignalSession(pid_t sid, int sig) {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return;
  while (const dirent* e = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || pid <= 0 || pid == sid) continue;
    bool opened = false;  // a process that exits meanwhile reads as nothing (ESRCH), not a throw
    const std::string stat = ReadSmallFile("/proc/" + std::string(e->d_name) + "/stat", &opened);
    const size_t paren = stat.rfind(')');  // the name may hold spaces and parentheses
    if (paren == std::string::npos) continue;
    std::istringstream fields(stat.substr(paren + 1));
    std::string state;
    long ppid = 0, pgrp = 0, session = 0;
    if (!(fields >> state >> ppid >> pgrp >> session)) continue;
    if (session == sid && pgrp != sid) kill(static_cast<pid_t>(pid), sig);
  }
  closedir(proc);
}

// Signals the process group (the job is a session leader: pgid == pid) and the rest of its
// session; falls back to the pid itself when the child has not reached setsid() yet.
void SignalJob(pid_t pid, int sig) {
  if (kill(-pid, sig) != 0 && errno == ESRCH) kill(pid, sig);
  SignalSession(pid, sig);
}

}  // namespace

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

Launcher::Launcher(LauncherOptions options) : options_(std::move(options)) {
  assert(!options_.work_dir.empty());
  mkdir(options_.work_dir.c_str(), 0711);  // jobs reach their own output by name; none lists
  struct stat wd {};
  // One an earlier agent made 0755: no longer listed nor read by others (kept as tight if so).
  if (stat(options_.work_dir.c_str(), &wd) == 0 && wd.st_uid == geteuid() &&
      (wd.st_mode & (S_IRGRP | S_IWGRP | S_IROTH | S_IWOTH)) != 0)
    chmod(options_.work_dir.c_str(), wd.st_mode & 0711);
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
  if (options_.max_output_bytes > 0)
    cut_note_ = OutputCutNote("tessera-agent", options_.max_output_bytes, "the node's limit");
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
  child.exec_not_in_path = exec.exec_not_in_path.c_str();
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
  job.started = std::chrono::steady_clock::now();
  jobs_.emplace(spec.id, std::move(job));
  WriteRunningList();
  return Status::Ok();
}

Status Launcher::Cancel(const std::string& id, std::chrono::milliseconds grace) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Status::NotFound("job " + id + " is not running here");
  Job& job = it->second;
  auto deadline = std::chrono::steady_clock::now() + grace;
  const bool again = job.cancelled;
  if (!job.cancelled || deadline < job.kill_at) job.kill_at = deadline;
  job.cancelled = true;
  if (grace.count() <= 0) {
    if (!job.kill_sent) SignalJob(job.pid, SIGKILL);
    job.kill_sent = true;
  } else if (!again) {
    // Once: the control plane repeats its order every heartbeat, and a job that checkpoints on
    // SIGTERM would start over each time.
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
    kill(-job.pid, SIGKILL);  // leftovers of the job's process group and session
    SignalSession(job.pid, SIGKILL);
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
    exit.run_ms = std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(now - job.started).count());
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

namespace {

// The most device memory a share may report using, or having swapped out: its cap on each of its
// devices (a share of no cap, at most 1 PiB).
uint64_t ShareBytesAtMost(const JobSpec& spec) {
  constexpr uint64_t kMost = uint64_t{1} << 50;
  if (spec.gpu_memory_limit_bytes <= 0) return kMost;
  const uint64_t devices = std::max<uint64_t>(1, spec.devices.size());
  return std::min(kMost, std::min(kMost, static_cast<uint64_t>(spec.gpu_memory_limit_bytes)) *
                             std::min<uint64_t>(devices, 1024));
}

}  // namespace

std::vector<RunningJob> Launcher::Running(bool usage) const {
  std::vector<RunningJob> out;
  std::map<pid_t, uint64_t> ticks;
  if (usage) ticks = CpuTicksBySession();
  std::unique_ptr<capgpu::RegionFile> copy;  // a share's region, read (never mapped)
  for (const auto& [id, job] : jobs_) {
    RunningJob r;
    r.id = id;
    r.pid = job.pid;
    for (const DeviceBinding& d : job.spec.devices) r.devices.push_back(d.index);
    if (usage) {
      auto t = ticks.find(job.pid);
      if (t != ticks.end()) r.cpu_ticks = t->second;
      if (!job.region_path.empty() && !copy) copy = std::make_unique<capgpu::RegionFile>();
      if (ReadShareRegion(job.region_path, job.region_owner, copy.get())) {
        // The region is the job's own file: its counts are claims, held to what the share may
        // hold (a job wrote 2^62 there; every heartbeat of its node was refused for it, and the
        // node was lost with other users' jobs on it), summed without wrapping.
        const uint64_t most = ShareBytesAtMost(job.spec);
        const auto add = [most](uint64_t a, uint64_t b) {
          return std::min(most, std::min(most, a) + std::min(most, b));
        };
        const capgpu::RegionData& data = copy->data;
        uint64_t used = 0;
        for (uint32_t d = 0; d < capgpu::kMaxDevices; ++d) used = add(used, data.used[d]);
        r.gpu_launches = static_cast<int64_t>(data.launches & INT64_MAX);
        if (data.swap_enabled != 0) {
          const capgpu::SwapSummary m = capgpu::SummarizeSwap(data);
          r.swap_state = capgpu::ShareSwapState(m);
          r.swapped_bytes = static_cast<int64_t>(add(m.host_bytes, m.disk_bytes));
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
