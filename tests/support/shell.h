// Runs a shell command line (popen) and returns its exit code and standard output, for tests of
// the real `tessera` command line. Standard error goes where the test's does unless the command
// redirects it (`2>&1`).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace tessera::testing {

struct ShellResult {
  int code = -1;  // the exit code; -1 when it did not exit normally
  std::string out;
};

inline ShellResult RunShell(const std::string& cmd) {
  ShellResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace tessera::testing
