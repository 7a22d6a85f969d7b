// Execution family. cuLaunchKernel passes straight through: one cached pointer load and a tail
// call, no lock, no system call. It is hooked so that compute time-slicing of shares has its
// place; the benchmark (bench/capgpu) measures what the hook costs today.
#include "capgpu/hook_table.h"
#include "capgpu/real_driver.h"

using tessera::capgpu::HookId;
using tessera::capgpu::Real;

extern "C" {

CUresult cuLaunchKernel(CUfunction f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                        unsigned int block_x, unsigned int block_y, unsigned int block_z,
                        unsigned int shared_bytes, CUstream stream, void** params, void** extra) {
  auto real = Real<HookId::cuLaunchKernel>();
  if (__builtin_expect(real == nullptr, 0)) return CUDA_ERROR_NOT_INITIALIZED;
  return real(f, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream, params,
              extra);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int grid_x, unsigned int grid_y,
                             unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                             unsigned int block_z, unsigned int shared_bytes, CUstream stream,
                             void** params, void** extra) {
  auto real = Real<HookId::cuLaunchKernel_ptsz>();
  if (__builtin_expect(real == nullptr, 0)) return CUDA_ERROR_NOT_INITIALIZED;
  return real(f, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream, params,
              extra);
}

}  // extern "C"
