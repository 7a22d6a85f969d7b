// Real processes for the control-plane integration tests: spawn `tessera serve` / `tessera
// agent`, learn the server's port from its log, kill with any signal.
#pragma once

#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../support/remove_at_exit.h"
#include "../support/wait.h"

namespace tessera::testing {

inline const std::string kTessera = TESSERA_BINARY_DIR "/src/cli/tessera";

// The Unix account the test's jobs run under: jobs never run as root, so a root agent (CI) runs
// them as the unprivileged `nobody`, and any other agent as the user running the test (the only
// account it can switch to: its own).
inline std::string JobAccount() {
  if (geteuid() == 0) return "nobody";
  const passwd* pw = getpwuid(geteuid());
  return pw != nullptr ? pw->pw_name : "nobody";
}

// `config` with `run_as: JobAccount()` given to every user and admin identity without one.
inline std::string WithJobAccounts(const std::string& config) {
  std::string out;
  std::istringstream in(config);
  std::string line;
  while (std::getline(in, line)) {
    for (const char* role : {"role: user,", "role: admin,", "role: user}", "role: admin}"}) {
      const size_t at = line.find(role);
      if (at == std::string::npos || line.find("run_as") != std::string::npos) continue;
      const size_t end = at + std::string(role).size() - 1;  // before ',' or '}'
      line.insert(end, ", run_as: " + JobAccount());
      break;
    }
    out += line + "\n";
  }
  return out;
}

// The token files this process wrote, removed when it exits.
inline RemoveAtExit& TokenFiles() {
  static RemoveAtExit files([] { return true; });
  return files;
}

// A file holding `token` (mode 0600), for --token-file: tokens never go on a command line.
inline std::string TokenFile(const std::string& token) {
  // Named by a hash: a token in the file's name would be on the command line after all.
  const std::string path = "/tmp/tessera-test-token-" + std::to_string(getpid()) + "-" +
                           std::to_string(std::hash<std::string>{}(token) % 1000000007);
  // Written beside it and renamed over it: an agent started a moment ago may be reading it.
  const std::string tmp =
      path + ".new" + std::to_string(std::hash<std::string>{}(std::to_string(rand())));
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd >= 0) {
    const std::string line = token + "\n";
    const bool written = write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
    close(fd);
    if (!written || rename(tmp.c_str(), path.c_str()) != 0) unlink(tmp.c_str());
  }
  TokenFiles().Add(path);
  return path;
}

class Proc {
 public:
  // Starts argv with stdout+stderr written to `log` (truncated first).
  Proc(const std::vector<std::string>& argv, const std::string& log) : log_(log) {
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~Proc() { Kill(SIGKILL); }
  Proc(const Proc&) = delete;
  Proc& operator=(const Proc&) = delete;

  void Kill(int sig) {
    if (pid_ <= 0) return;
    ::kill(-pid_, sig);  // the whole process group (an agent's jobs too)
    ::kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  // Sends `sig` to the process only (not its group) and reaps it.
  void KillOnly(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  // Sends `sig` to the process only; reaps nothing (WaitExited does).
  void Signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  // Waits up to `timeout` for the process to exit and reaps it; whether it did. Its group (what
  // it started) is killed then, as Kill would.
  bool WaitExited(std::chrono::milliseconds timeout) {
    if (pid_ <= 0) return true;
    if (!WaitFor([&] { return waitpid(pid_, nullptr, WNOHANG) == pid_; }, timeout)) return false;
    ::kill(-pid_, SIGKILL);
    pid_ = -1;
    return true;
  }
  pid_t pid() const { return pid_; }
  bool Alive() const { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }
  std::string Log() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // Waits for "listening on http(s)://HOST:PORT" in the log; returns the port or -1.
  int WaitForPort(int timeout_ms = 15000) const {
    int port = -1;
    WaitFor(
        [&] {
          port = PortInLog();
          return port > 0 || !Alive();
        },
        std::chrono::milliseconds(timeout_ms), std::chrono::milliseconds(20));
    return port;
  }

 private:
  // The port of the last "listening on http(s)://HOST:PORT" in the log, or -1.
  int PortInLog() const {
    std::string log = Log();
    size_t at = log.rfind("listening on http");
    if (at != std::string::npos) at = log.find("://", at);
    if (at != std::string::npos) {
      size_t colon = log.find(':', at + 3);
      size_t end = log.find_first_not_of("0123456789", colon + 1);
      if (colon != std::string::npos && end != std::string::npos && end > colon + 1) {
        return std::stoi(log.substr(colon + 1, end - colon - 1));
      }
    }
    return -1;
  }

  pid_t pid_ = -1;
  std::string log_;
};

}  // namespace tessera::testing
