#include "agent/mps.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "partition/catalog.h"

extern char** environ;

namespace tessera::agent {
namespace {

constexpr int kCommandTimeoutMs = 5000;

// Writes `data` to a pipe whose reader may have gone (a program that failed at once): EPIPE, not
// a SIGPIPE that would end the agent (the signal is blocked here and a pending one taken).
void WriteQuietly(int fd, const std::string& data) {
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  (void)!write(fd, data.data(), data.size());
  const timespec zero{0, 0};
  while (sigtimedwait(&pipe_set, nullptr, &zero) > 0) {
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

struct Ran {
  int exit_code = -1;
  std::string out;
};

// Runs `argv` with this process's environment plus `env`, `input` on its standard input; its
// standard output (and error) read until it exits or kCommandTimeoutMs pass (then killed).
Result<Ran> Run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                const std::string& input) {
  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    if (env.count(key) == 0) envs.push_back(kv);
  }
  for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : envs) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) return Status::Internal(std::string("pipe: ") + strerror(errno));
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]), close(in[1]);
    return Status::Internal(std::string("pipe: ") + strerror(errno));
  }
  const pid_t pid = fork();
  if (pid < 0) return Status::Internal(std::string("fork: ") + strerror(errno));
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(out[1], 2);
    execvpe(args[0], args.data(), envp.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  WriteQuietly(in[1], input);
  close(in[1]);
  Ran r;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kCommandTimeoutMs);
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) break;
    pollfd p{out[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) break;
    const ssize_t n = read(out[0], buf, sizeof buf);
    if (n <= 0) break;  // end of output: every writer (a daemon's too) closed it
    r.out.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  int status = 0;
  if (waitpid(pid, &status, WNOHANG) == 0) {
    // Still running past the deadline, or its output closed: give it the rest of the time.
    for (int i = 0; i < 50 && waitpid(pid, &status, WNOHANG) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (kill(pid, 0) == 0 && waitpid(pid, &status, WNOHANG) == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return Status::Internal("'" + argv[0] + "' did not finish within " +
                              std::to_string(kCommandTimeoutMs / 1000) + " s");
    }
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  while (!r.out.empty() && (r.out.back() == '\n' || r.out.back() == '\r')) r.out.pop_back();
  return r;
}

}  // namespace

MpsDaemons::MpsDaemons(MpsOptions options) : options_(std::move(options)) {}

MpsDaemons::~MpsDaemons() {
  for (const auto& [index, uuid] : uuids_) Quit(index);
}

std::string MpsDaemons::Dir(int index, const char* leaf) const {
  return options_.root + "/" + std::to_string(index) + "/" + leaf;
}

int MpsDaemons::Pid(int index) const {
  std::ifstream in(Dir(index, "pipe") + "/nvidia-cuda-mps-control.pid");
  long long pid = 0;
  if (!(in >> pid) || pid <= 1) return 0;
  // A daemon that died may linger as a zombie until its parent (init, or a subreaper such as
  // this process) reaps it: dead all the same.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line) || line.rfind(')') == std::string::npos) return 0;
  const size_t at = line.rfind(')') + 2;
  if (at >= line.size() || line[at] == 'Z' || line[at] == 'X') {
    waitpid(static_cast<pid_t>(pid), nullptr, WNOHANG);  // reaped when it is this process's
    return 0;
  }
  return static_cast<int>(pid);
}

bool MpsDaemons::Running(int index) const { return Pid(index) > 0; }

Status MpsDaemons::Ensure(int index, const std::string& uuid) {
  const std::string device = "device " + std::to_string(index);
  if (index < 0) return Status::InvalidArgument("MPS: " + device + " is not a device index");
  if (options_.root.empty()) return Status::InvalidArgument("MPS: no directory for its pipes");
  if (Running(index)) return Status::Ok();
  std::error_code ec;
  for (const char* leaf : {"pipe", "log"}) {
    std::filesystem::create_directories(Dir(index, leaf), ec);
    if (ec || chmod(Dir(index, leaf).c_str(), 0700) != 0)
      return Status::Internal("MPS: cannot make " + Dir(index, leaf));
  }
  std::filesystem::remove(Dir(index, "pipe") + "/nvidia-cuda-mps-control.pid", ec);
  Result<Ran> r = Run({options_.control, "-d"},
                      {{"CUDA_VISIBLE_DEVICES", uuid},
                       {"CUDA_MPS_PIPE_DIRECTORY", Dir(index, "pipe")},
                       {"CUDA_MPS_LOG_DIRECTORY", Dir(index, "log")}},
                      "");
  if (!r.ok()) return Status::Internal("MPS for " + device + ": " + r.status().message());
  if (r->exit_code != 0)
    return Status::FailedPrecondition("MPS for " + device + ": '" + options_.control +
                                      " -d' exited " + std::to_string(r->exit_code) +
                                      (r->out.empty() ? "" : ": " + r->out));
  // -d returns once the daemon forked; it writes its pid file as it starts.
  for (int i = 0; i < 100 && !Running(index); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!Running(index))
    return Status::FailedPrecondition("MPS for " + device + ": the control daemon did not start");
  uuids_[index] = uuid;
  return Status::Ok();
}

Result<std::string> MpsDaemons::Command(int index, const std::string& line) {
  if (line.find('\n') != std::string::npos)
    return Status::InvalidArgument("MPS command is one line");
  Result<Ran> r = Run({options_.control},
                      {{"CUDA_MPS_PIPE_DIRECTORY", Dir(index, "pipe")},
                       {"CUDA_MPS_LOG_DIRECTORY", Dir(index, "log")}},
                      line + "\n");
  if (!r.ok()) return r.status();
  if (r->exit_code != 0)
    return Status::FailedPrecondition("MPS for device " + std::to_string(index) + ": '" + line +
                                      "' failed (exit " + std::to_string(r->exit_code) + ")" +
                                      (r->out.empty() ? "" : ": " + r->out));
  return r->out;
}

Status MpsDaemons::SetDefaultActiveThreadPercentage(int index, int percent) {
  if (percent < 1 || percent > 100)
    return Status::InvalidArgument("MPS active-thread percentage must be 1 to 100, not " +
                                   std::to_string(percent));
  Result<std::string> r =
      Command(index, "set_default_active_thread_percentage " + std::to_string(percent));
  return r.ok() ? Status::Ok() : r.status();
}

Result<std::map<std::string, std::string>> MpsDaemons::ClientEnv(int index, int percent,
                                                                 long long memory_mib) const {
  if (percent < 1 || percent > 100)
    return Status::InvalidArgument("MPS active-thread percentage must be 1 to 100, not " +
                                   std::to_string(percent));
  std::map<std::string, std::string> env = {
      {"CUDA_MPS_PIPE_DIRECTORY", Dir(index, "pipe")},
      {"CUDA_MPS_LOG_DIRECTORY", Dir(index, "log")},
      {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", std::to_string(percent)}};
  // The client sees its one device as CUDA device 0.
  if (memory_mib > 0)
    env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=" + std::to_string(memory_mib) + "M";
  return env;
}

std::string FindMpsControl(const std::string& control) {
  if (control.empty()) return "";
  if (control.find('/') != std::string::npos)
    return access(control.c_str(), X_OK) == 0 ? control : "";
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  for (size_t at = 0; at <= dirs.size();) {
    size_t colon = dirs.find(':', at);
    if (colon == std::string::npos) colon = dirs.size();
    const std::string dir = dirs.substr(at, colon - at);
    const std::string full = (dir.empty() ? "." : dir) + "/" + control;
    struct stat st {};
    if (stat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(full.c_str(), X_OK) == 0)
      return full;
    at = colon + 1;
  }
  return "";
}

bool OffersMps(const std::string& model, bool mig_enabled) {
  if (mig_enabled) return false;
  const partition::GpuModel* m = partition::Catalog::BuiltIn().Find(model);
  return m == nullptr || !m->is_amd();
}

Status BindMpsClient(MpsDaemons* mps, JobSpec* spec) {
  if (spec->sm_percent <= 0) return Status::Ok();
  if (spec->devices.size() != 1)
    return Status::FailedPrecondition("MPS: an sm-sharing share is on one device, not " +
                                      std::to_string(spec->devices.size()));
  const DeviceBinding& d = spec->devices[0];
  if (mps == nullptr)
    return Status::FailedPrecondition("MPS for device " + std::to_string(d.index) +
                                      ": this agent has no MPS control program (--mps-control)");
  if (Status st = mps->Ensure(d.index, d.uuid); !st.ok()) return st;
  auto env = mps->ClientEnv(d.index, spec->sm_percent, spec->gpu_memory_limit_bytes >> 20);
  if (!env.ok())
    return Status::FailedPrecondition("MPS for device " + std::to_string(d.index) + ": " +
                                      env.status().message());
  for (const auto& [k, v] : *env) spec->env[k] = v;
  return Status::Ok();
}

void MpsDaemons::Quit(int index) {
  const int pid = Pid(index);
  if (pid == 0) return;
  (void)Command(index, "quit");
  for (int i = 0; i < 100 && Pid(index) == pid; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

}  // namespace tessera::agent
