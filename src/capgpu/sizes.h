// Byte sizes charged for allocations whose size the driver does not state up front. Pure
// functions; thread-safe.
#pragma once

#include <cstdint>

#include "capgpu/cuda_abi.h"

namespace tessera::capgpu {

// Bytes of one channel of an array format; 4 for a format this table does not know (no current
// format has wider channels; block-compressed formats are smaller, so this over-charges them).
uint64_t ArrayFormatBytes(CUarray_format format);

// Estimated device bytes of an array: width x max(height,1) x max(depth,1) x channels x format
// size (x6 for a cube map whose depth is 0). Saturates at UINT64_MAX instead of wrapping.
uint64_t ArrayBytes(uint64_t width, uint64_t height, uint64_t depth, CUarray_format format,
                    unsigned int channels, unsigned int flags);

// Pitch alignment assumed before cuMemAllocPitch answers; the charge is corrected to
// pitch x height afterwards.
inline constexpr uint64_t kPitchAlignment = 512;
// Bytes charged up front for a pitched allocation. Saturates at UINT64_MAX.
uint64_t PitchedBytesEstimate(uint64_t width_bytes, uint64_t height);

}  // namespace tessera::capgpu
