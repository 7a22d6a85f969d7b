// Helpers shared by the fuzz targets: splitting an input into parts, and a scratch directory.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::fuzz {

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

// `text` cut at each NUL byte: the parts of an input that feeds several parsers. At most `max`
// parts; the last one keeps the rest, NULs included.
inline std::vector<std::string> SplitNul(std::string_view text, size_t max) {
  std::vector<std::string> parts;
  while (parts.size() + 1 < max) {
    const size_t nul = text.find('\0');
    if (nul == std::string_view::npos) break;
    parts.emplace_back(text.substr(0, nul));
    text.remove_prefix(nul + 1);
  }
  parts.emplace_back(text);
  return parts;
}

// A fresh directory, in memory where /dev/shm exists (the targets that write files write one per
// input), removed with the object.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix) {
    const char* base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string templ = std::string(base) + "/" + prefix + "-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) abort();
    path_ = templ;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace tessera::fuzz
