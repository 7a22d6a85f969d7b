// Execution family. cuLaunchKernel passes through after counting the launch in the share's
// region (a relaxed atomic increment: the agent's activity signal) and passing the swap gate
// (swap.h): no lock, no system call when no swap is pending. It is hooked so that compute
// time-slicing of shares has its place; the benchmark (bench/capgpu) measures what it costs.
#include "capgpu/hook_names.h"

namespace {

// A launch through the hook `kId` (cuLaunchKernel or its per-thread-stream twin): straight to the
// driver when uncapped; capped, counted and passed through the swap gate first.
template <HookId kId, typename... Args>
inline CUresult Launch(Args... args) {
  auto real = Real<kId>();
  if (__builtin_expect(real == nullptr, 0)) return CUDA_ERROR_NOT_INITIALIZED;
  if (!Runtime::Get().Handles()) return real(args...);
  Runtime::Get().NoteLaunch();
  GateScope gate(Runtime::Get().swapper());
  return real(args...);
}

}  // namespace

extern "C" {

CUresult cuLaunchKernel(CUfunction f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                        unsigned int block_x, unsigned int block_y, unsigned int block_z,
                        unsigned int shared_bytes, CUstream stream, void** params, void** extra) {
  return Launch<HookId::cuLaunchKernel>(f, grid_x, grid_y, grid_z, block_x, block_y, block_z,
                                        shared_bytes, stream, params, extra);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int grid_x, unsigned int grid_y,
                             unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                             unsigned int block_z, unsigned int shared_bytes, CUstream stream,
                             void** params, void** extra) {
  return Launch<HookId::cuLaunchKernel_ptsz>(f, grid_x, grid_y, grid_z, block_x, block_y, block_z,
                                             shared_bytes, stream, params, extra);
}

}  // extern "C"
