// A fresh, empty temporary directory for the running test: TempDir/PREFIX_PID_TESTNAME. The
// directories a test program made are removed when it exits having passed; a failed program's
// are kept, to look at.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "remove_at_exit.h"

namespace tessera::testing {

// What FreshTestDir made in this process, removed at its exit if every test passed.
inline RemoveAtExit& TestDirs() {
  static RemoveAtExit dirs([] { return ::testing::UnitTest::GetInstance()->Passed(); });
  return dirs;
}

inline std::string FreshTestDir(const std::string& prefix) {
  std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::replace(name.begin(), name.end(), '/', '_');  // a parameterized test's "Name/0"
  const std::string dir =
      ::testing::TempDir() + "/" + prefix + "_" + std::to_string(::getpid()) + "_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  TestDirs().Add(dir);
  return dir;
}

}  // namespace tessera::testing
