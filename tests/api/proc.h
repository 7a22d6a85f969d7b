// Real processes for the control-plane integration tests: spawn `tessera serve` / `tessera
// agent`, learn the server's port from its log, kill with any signal.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace tessera::testing {

inline const std::string kTessera = TESSERA_BINARY_DIR "/src/cli/tessera";

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
    for (int waited = 0; waited < timeout_ms; waited += 20) {
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
      if (!Alive()) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  std::string log_;
};

}  // namespace tessera::testing
