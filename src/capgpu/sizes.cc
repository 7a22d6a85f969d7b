#include "capgpu/sizes.h"

namespace tessera::capgpu {
namespace {

uint64_t SaturatingMul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

}  // namespace

uint64_t ArrayFormatBytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4;
    default:
      return 4;
  }
}

uint64_t ArrayBytes(uint64_t width, uint64_t height, uint64_t depth, CUarray_format format,
                    unsigned int channels, unsigned int flags) {
  if ((flags & CUDA_ARRAY3D_CUBEMAP) != 0 && depth == 0) depth = 6;
  uint64_t bytes = SaturatingMul(width, height == 0 ? 1 : height);
  bytes = SaturatingMul(bytes, depth == 0 ? 1 : depth);
  bytes = SaturatingMul(bytes, channels == 0 ? 1 : channels);
  return SaturatingMul(bytes, ArrayFormatBytes(format));
}

uint64_t PitchedBytesEstimate(uint64_t width_bytes, uint64_t height) {
  if (width_bytes > UINT64_MAX - (kPitchAlignment - 1)) return UINT64_MAX;
  uint64_t pitch = (width_bytes + kPitchAlignment - 1) / kPitchAlignment * kPitchAlignment;
  return SaturatingMul(pitch, height);
}

}  // namespace tessera::capgpu
