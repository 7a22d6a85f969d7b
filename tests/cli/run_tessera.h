// Runs the built `tessera` binary as a real process (no shell: fork/exec) and captures its exit
// code, stdout and stderr; `env` ("NAME=value") is set for it on top of this process's own.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tessera::testing {

struct ProcessResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline ProcessResult Tessera(const std::vector<std::string>& args,
                             const std::vector<std::string>& env = {}) {
  static int calls = 0;
  const std::string base = ::testing::TempDir() + "/tessera_cli_" + std::to_string(getpid()) + "_" +
                           std::to_string(++calls);
  const std::string out_path = base + ".out", err_path = base + ".err";
  std::vector<std::string> argv_s = {TESSERA_BINARY_DIR "/src/cli/tessera"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen(out_path.c_str(), "w", stdout) || !freopen(err_path.c_str(), "w", stderr)) {
      _exit(127);
    }
    for (const std::string& kv : env) putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  ProcessResult r;
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadWholeFile(out_path);
  r.err = ReadWholeFile(err_path);
  std::remove(out_path.c_str());
  std::remove(err_path.c_str());
  return r;
}

}  // namespace tessera::testing
