// A fresh, empty temporary directory for the running test: TempDir/PREFIX_PID_TESTNAME.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace tessera::testing {

inline std::string FreshTestDir(const std::string& prefix) {
  const std::string dir = ::testing::TempDir() + "/" + prefix + "_" + std::to_string(::getpid()) +
                          "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace tessera::testing
