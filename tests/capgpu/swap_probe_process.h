// A capgpu_swap_probe process (swap_probe.cc) with pipes to its stdin and stdout, for tests that
// drive shares line by line (tests/capgpu/swap_test.cc, tests/agent/swap_manager_test.cc).
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

extern char** environ;

namespace tessera::capgpu {

class Probe {
 public:
  Probe(const char* probe_path, const std::map<std::string, std::string>& extra_env) {
    int in[2], out[2];
    EXPECT_EQ(pipe(in), 0);
    EXPECT_EQ(pipe(out), 0);
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
    for (const auto& [k, v] : extra_env) env.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      close(in[1]);
      close(out[0]);
      char* argv[] = {const_cast<char*>(probe_path), nullptr};
      execve(probe_path, argv, envp.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    in_ = in[1];
    out_ = out[0];
  }
  ~Probe() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(in_);
    close(out_);
  }
  void Send(const std::string& line) {
    std::string l = line + "\n";
    ASSERT_EQ(write(in_, l.data(), l.size()), static_cast<ssize_t>(l.size()));
  }
  // The next line of output, or "" after `timeout_ms`.
  std::string Line(int timeout_ms = 10000) {
    for (;;) {
      size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, timeout_ms) <= 0) return "";
      char buf[4096];
      ssize_t n = read(out_, buf, sizeof(buf));
      if (n <= 0) return "";
      buffer_.append(buf, static_cast<size_t>(n));
    }
  }
  std::string Ask(const std::string& line, int timeout_ms = 10000) {
    Send(line);
    return Line(timeout_ms);
  }
  // The threads' finished checks ("loops") once no more finish for `quiet_ms`: a check whose
  // driver calls all returned before the gate closed is counted when its thread next runs, which
  // on a loaded machine may be after the swap-out settled (CI once read "loops 3" and, 300 ms
  // later, "loops 4", with every thread at the gate). As last read after `limit_ms`.
  std::string SettledLoops(int quiet_ms = 200, int limit_ms = 5000) {
    std::string last = Ask("loops");
    for (int waited = 0; waited < limit_ms; waited += quiet_ms) {
      usleep(static_cast<useconds_t>(quiet_ms) * 1000);
      std::string now = Ask("loops");
      if (now == last) return now;
      last = now;
    }
    return last;
  }
  pid_t pid() const { return pid_; }
  void Killed() { pid_ = -1; }

 private:
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
  std::string buffer_;
};

}  // namespace tessera::capgpu
