// Resource quantities in fixed integer units. Capacity arithmetic never uses floating point.
//
//   GPU compute : milli-GPU   (1000 = one whole device; 250 = a quarter)
//   memory      : MiB         (GPU memory and host memory alike)
//   CPU         : milli-cores (1000 = one core)
//
// Worked example: a node with 2 GPUs, 16 cores and 64 GiB holds
//   Resources{.gpu_milli = 2000, .gpu_memory_mib = 2 * 81920, .cpu_milli = 16000,
//             .memory_mib = 65536}.
// A request for half a GPU, 8 GiB of GPU memory and 500m CPU fits; the remainder is exact.
#pragma once

#include <compare>
#include <cstdint>
#include <string>

namespace tessera {

using MilliGpu = int64_t;
using MiB = int64_t;
using MilliCpu = int64_t;

inline constexpr MilliGpu kWholeGpu = 1000;
inline constexpr MilliCpu kOneCore = 1000;

struct Resources {
  MilliGpu gpu_milli = 0;
  MiB gpu_memory_mib = 0;
  MilliCpu cpu_milli = 0;
  MiB memory_mib = 0;

  Resources& operator+=(const Resources& o) {
    gpu_milli += o.gpu_milli;
    gpu_memory_mib += o.gpu_memory_mib;
    cpu_milli += o.cpu_milli;
    memory_mib += o.memory_mib;
    return *this;
  }
  Resources& operator-=(const Resources& o) {
    gpu_milli -= o.gpu_milli;
    gpu_memory_mib -= o.gpu_memory_mib;
    cpu_milli -= o.cpu_milli;
    memory_mib -= o.memory_mib;
    return *this;
  }
  friend Resources operator+(Resources a, const Resources& b) { return a += b; }
  friend Resources operator-(Resources a, const Resources& b) { return a -= b; }
  friend bool operator==(const Resources&, const Resources&) = default;

  // True when every component of `need` is at most this one's.
  bool Covers(const Resources& need) const {
    return gpu_milli >= need.gpu_milli && gpu_memory_mib >= need.gpu_memory_mib &&
           cpu_milli >= need.cpu_milli && memory_mib >= need.memory_mib;
  }
  bool NonNegative() const {
    return gpu_milli >= 0 && gpu_memory_mib >= 0 && cpu_milli >= 0 && memory_mib >= 0;
  }
  // "gpu=1.500 gpu_mem=8GiB cpu=2 mem=512MiB"
  std::string ToString() const;
};

}  // namespace tessera
