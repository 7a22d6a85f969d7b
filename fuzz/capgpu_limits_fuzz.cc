// The cap library's limit parsing (capgpu/limits.h) and its size arithmetic (capgpu/sizes.h).
//
// The input is read as an environment: lines "NAME=VALUE" that LimitsFromEnvironment sees
// through its injected getenv (TESSERA_GPU_MEMORY_LIMIT, CUDA_DEVICE_MEMORY_LIMIT[_i]); each
// value is also parsed on its own as one quantity and as a list, in both unit styles. The first
// 36 bytes double as the operands of ArrayBytes and PitchedBytesEstimate.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <string_view>

#include "capgpu/limits.h"
#include "capgpu/sizes.h"
#include "fuzz_util.h"

namespace {

using namespace tessera::capgpu;

void Require(bool ok) {
  if (!ok) __builtin_trap();
}

std::map<std::string, std::string>* g_env = nullptr;

const char* FakeGetenv(const char* name) {
  auto it = g_env->find(name);
  return it == g_env->end() ? nullptr : it->second.c_str();
}

void ParseValue(const std::string& value) {
  for (UnitStyle style : {UnitStyle::kTessera, UnitStyle::kHami}) {
    uint64_t bytes = 0;
    if (ParseBytes(value.c_str(), style, &bytes)) {
      // A parsed quantity, written back in plain bytes, reads as the same number.
      uint64_t again = 0;
      Require(ParseBytes(std::to_string(bytes).c_str(), style, &again) && again == bytes);
    }
    LimitList list;
    if (ParseLimitList(value.c_str(), style, &list))
      Require(list.count >= 1 && list.count <= kMaxDevices);
  }
}

uint64_t Read64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::map<std::string, std::string> env;
  std::string_view text = tessera::fuzz::AsText(data, size);
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string line(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    line = line.substr(0, line.find('\0'));  // what a C string would hold
    const size_t eq = line.find('=');
    const std::string value = eq == std::string::npos ? line : line.substr(eq + 1);
    ParseValue(value);
    if (eq != std::string::npos) env[line.substr(0, eq)] = value;
  }
  g_env = &env;
  bool malformed = false;
  const LimitList limits = LimitsFromEnvironment(FakeGetenv, &malformed);
  g_env = nullptr;
  Require(limits.count <= kMaxDevices);
  if (env.empty()) Require(limits.count == 0 && !malformed);

  if (size >= 36) {
    const uint64_t w = Read64(data), h = Read64(data + 8), d = Read64(data + 16);
    unsigned int format_and_channels, flags;
    std::memcpy(&format_and_channels, data + 24, 4);
    std::memcpy(&flags, data + 28, 4);
    const auto format = static_cast<CUarray_format>(format_and_channels & 0xff);
    const unsigned int channels = format_and_channels >> 8;
    const uint64_t bytes = ArrayBytes(w, h, d, format, channels, flags);
    Require(bytes >= w);  // saturates, never wraps
    const uint64_t pitched = PitchedBytesEstimate(w, Read64(data + 28));
    Require(Read64(data + 28) == 0 || pitched >= w);
  }
  return 0;
}
