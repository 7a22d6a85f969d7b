// A fresh, empty temporary directory for the running test: TempDir/PREFIX_PID_TESTNAME. The
// directories a test program made are removed when it exits having passed; a failed program's
// are kept, to look at.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

namespace tessera::testing {

// What FreshTestDir made in this process, removed at its exit if every test passed. Only by the
// process that made them: a forked child that exits (an agent's job, a daemon) removes nothing.
class TestDirs {
 public:
  static TestDirs& Get() {
    static TestDirs dirs;
    return dirs;
  }
  void Add(const std::string& dir) {
    std::lock_guard<std::mutex> lock(mu_);
    dirs_.push_back(dir);
  }
  ~TestDirs() {
    if (::getpid() != owner_ || !::testing::UnitTest::GetInstance()->Passed()) return;
    for (const std::string& dir : dirs_) {
      std::error_code ignored;  // a process it started may still be writing there
      std::filesystem::remove_all(dir, ignored);
    }
  }

 private:
  TestDirs() = default;
  const pid_t owner_ = ::getpid();
  std::mutex mu_;
  std::vector<std::string> dirs_;
};

inline std::string FreshTestDir(const std::string& prefix) {
  std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::replace(name.begin(), name.end(), '/', '_');  // a parameterized test's "Name/0"
  const std::string dir =
      ::testing::TempDir() + "/" + prefix + "_" + std::to_string(::getpid()) + "_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  TestDirs::Get().Add(dir);
  return dir;
}

}  // namespace tessera::testing
