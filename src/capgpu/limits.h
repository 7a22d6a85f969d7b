// Parsing of memory limits from the environment. Pure functions; thread-safe.
//
// Two spellings, because two families of tools set these variables:
//   kTessera  (TESSERA_GPU_MEMORY_LIMIT, the region tool): the project's quantity rules.
//             "8GiB" "512Mi" (binary), "8GB" "8G" (decimal), "4294967296" (bytes).
//   kHami     (HAMi-core's CUDA_DEVICE_MEMORY_LIMIT[_i]): single letters are binary, any case,
//             as HAMi-core reads them: "4g" == "4G" == 4 GiB, "3000m" == 3000 MiB; no unit = bytes.
// A list "8GiB,4GiB" gives one limit per device in CUDA ordinal order.
#pragma once

#include <cstdint>

#include "capgpu/accounting.h"

namespace tessera::capgpu {

enum class UnitStyle { kTessera, kHami };

// Parses one quantity. Returns false (and leaves *bytes alone) on malformed text, overflow or
// a fraction of a byte. Decimal fractions are allowed with a unit ("1.5GiB").
bool ParseBytes(const char* text, UnitStyle style, uint64_t* bytes);

// A parsed list of limits, one per device, or one for all devices.
struct LimitList {
  uint32_t count = 0;  // 0: no limit configured
  uint64_t bytes[kMaxDevices] = {};
};

// Parses "8GiB" or "8GiB,4GiB". Returns false on any malformed element or more than kMaxDevices.
bool ParseLimitList(const char* text, UnitStyle style, LimitList* out);

// The limits the environment asks for, by precedence: TESSERA_GPU_MEMORY_LIMIT; else HAMi-core's
// CUDA_DEVICE_MEMORY_LIMIT for every device with CUDA_DEVICE_MEMORY_LIMIT_<i> overriding device
// i. `getenv_fn` is injected so tests need not touch the process environment. A malformed value
// is reported through *malformed and ignored.
using GetEnvFn = const char* (*)(const char* name);
LimitList LimitsFromEnvironment(GetEnvFn getenv_fn, bool* malformed);

}  // namespace tessera::capgpu
