// Paths removed when the process that listed them exits, if `when` still says so then: a test
// program's scratch folders (once it passed), the token files it wrote. A forked child that exits
// without exec removes nothing. Needs no GoogleTest (a benchmark uses it too).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <system_error>
#include <utility>

namespace tessera::testing {

class RemoveAtExit {
 public:
  explicit RemoveAtExit(std::function<bool()> when) : when_(std::move(when)) {}
  RemoveAtExit(const RemoveAtExit&) = delete;
  RemoveAtExit& operator=(const RemoveAtExit&) = delete;
  void Add(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    paths_.insert(path);
  }
  ~RemoveAtExit() {
    if (::getpid() != owner_ || !when_()) return;
    for (const std::string& path : paths_) {
      std::error_code ignored;  // a process it started may still be writing there
      std::filesystem::remove_all(path, ignored);
    }
  }

 private:
  const pid_t owner_ = ::getpid();
  std::function<bool()> when_;
  std::mutex mu_;
  std::set<std::string> paths_;
};

}  // namespace tessera::testing
