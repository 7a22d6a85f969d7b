// The launcher's job process: its environment and arguments, its account and output file, and
// the child between fork and exec.
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "agent/launcher.h"
#include "agent/launcher_internal.h"

extern char** environ;

namespace tessera::agent {
namespace {

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

// Whether a file named argv[0] stands in a directory of the job's PATH (as execvp searches it:
// an empty entry is the working directory; no PATH, /bin:/usr/bin), as the job's account sees
// them. Async-signal-safe: a fixed buffer and access(2).
bool InSomePathDirectory(const internal::ChildSetup& c) {
  const char* path = "/bin:/usr/bin";
  for (char* const* e = c.envp; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "PATH=", 5) == 0) path = *e + 5;
  }
  const size_t name = std::strlen(c.argv[0]);
  char buf[4096];
  for (const char* p = path;; ++p) {
    const char* end = std::strchr(p, ':');
    if (end == nullptr) end = p + std::strlen(p);
    const auto dir = static_cast<size_t>(end - p);
    if (dir + 2 + name < sizeof buf) {
      size_t n = dir;
      if (dir == 0) {
        buf[n++] = '.';
      } else {
        std::memcpy(buf, p, dir);
      }
      buf[n++] = '/';
      std::memcpy(buf + n, c.argv[0], name + 1);
      if (access(buf, F_OK) == 0) return true;
    }
    if (*end == '\0') return false;
    p = end;
  }
}

}  // namespace

namespace internal {

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
  x->exec_not_in_path = "tessera-agent: cannot execute '" + x->args[0] +
                        "': not found in PATH (some of its directories are closed to the job's "
                        "account)\n";
}

Status OpenJobStdio(const std::string& out_path, int* out_fd, int* own_fd, int* null_fd) {
  // The account's alone: 0640 let a primary group everyone shares (an LDAP "users") read it.
  *out_fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_NOFOLLOW | O_CLOEXEC,
                 0600);
  if (*out_fd < 0) return Status::Internal("output file " + out_path + ": " + std::strerror(errno));
  (void)fchmod(*out_fd, 0600);  // one left by an earlier run keeps its mode through O_CREAT
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
  a.uid = pw.pw_uid;
  a.gid = pw.pw_gid;
  a.name = name;
  a.home = pw.pw_dir != nullptr ? pw.pw_dir : "/";
  // A non-root agent already runs as the account: nothing to switch (setgroups is root's alone,
  // and failed every job of `tessera up` run by a user as that user).
  if (geteuid() != 0 && a.uid == geteuid()) return a;
  a.set = true;
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
  // execvpe looks a bare command up in the caller's PATH (getenv), not in envp's: the job's
  // environment becomes this process's first, so its own PATH is the one searched.
  environ = const_cast<char**>(c.envp);
  execvpe(c.argv[0], c.argv, c.envp);
  int err = errno;
  if (err == EACCES && std::strchr(c.argv[0], '/') == nullptr && !InSomePathDirectory(c)) {
    SafeWrite(2, c.exec_not_in_path);
    _exit(127);
  }
  SafeWrite(2, c.exec_error);
  SafeWrite(2, SafeItoa(err, num));
  SafeWrite(2, err == ENOENT    ? " (not found)\n"
               : err == EACCES  ? " (permission denied)\n"
               : err == E2BIG   ? " (the arguments or environment are too long)\n"
               : err == ENOEXEC ? " (not an executable format)\n"
               : err == ETXTBSY ? " (the file is open for writing)\n"
                                : "\n");
  _exit(127);
}

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

}  // namespace internal

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

}  // namespace tessera::agent
