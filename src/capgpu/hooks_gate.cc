// Calls that touch device memory pass the swap gate (swap.h) on their way to the driver: while a
// share is swapped out they wait (or bring it back), so no copy, fill, launch or synchronization
// ever meets an unmapped address. Without swapping the gate is one branch on a constant.
//
// Gated here: the cuMemcpy / cuMemset families (legacy and per-thread stream variants), graph
// launches, cuLaunchKernelEx and stream/context synchronization; cuLaunchKernel in
// hooks_exec.cc, allocations in hooks_memory.cc. Not gated (so an application calling them
// during a swap is not protected): 2D/3D and peer copies, cuLaunchCooperativeKernel, host
// functions and callbacks, texture/surface objects; they are listed in docs/capgpu.md.
#include "capgpu/hook_names.h"

// The body of a gated pass-through: the real function, behind the gate when capped.
#define TESSERA_GATED(id, ...)                                                 \
  auto real = Real<HookId::id>();                                              \
  if (__builtin_expect(real == nullptr, 0)) return CUDA_ERROR_NOT_INITIALIZED; \
  if (!Runtime::Get().Handles()) return real(__VA_ARGS__);                     \
  GateScope gate(Runtime::Get().swapper());                                    \
  return real(__VA_ARGS__);

extern "C" {

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src,
                  size_t n){TESSERA_GATED(cuMemcpy, dst, src, n)} CUresult
    cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src,
                  size_t n){TESSERA_GATED(cuMemcpy_ptds, dst, src, n)} CUresult
    cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n,
                  CUstream s){TESSERA_GATED(cuMemcpyAsync, dst, src, n, s)} CUresult
    cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n,
                       CUstream s){TESSERA_GATED(cuMemcpyAsync_ptsz, dst, src, n, s)} CUresult
    cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src,
                    size_t n){TESSERA_GATED(cuMemcpyHtoD_v2, dst, src, n)} CUresult
    cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src,
                         size_t n){TESSERA_GATED(cuMemcpyHtoD_v2_ptds, dst, src, n)} CUresult
    cuMemcpyDtoH_v2(void* dst, CUdeviceptr src,
                    size_t n){TESSERA_GATED(cuMemcpyDtoH_v2, dst, src, n)} CUresult
    cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src,
                         size_t n){TESSERA_GATED(cuMemcpyDtoH_v2_ptds, dst, src, n)} CUresult
    cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src,
                    size_t n){TESSERA_GATED(cuMemcpyDtoD_v2, dst, src, n)} CUresult
    cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src,
                         size_t n){TESSERA_GATED(cuMemcpyDtoD_v2_ptds, dst, src, n)} CUresult
    cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n,
                         CUstream s){TESSERA_GATED(cuMemcpyHtoDAsync_v2, dst, src, n, s)} CUresult
    cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n, CUstream s){
        TESSERA_GATED(cuMemcpyHtoDAsync_v2_ptsz, dst, src, n, s)} CUresult
    cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n,
                         CUstream s){TESSERA_GATED(cuMemcpyDtoHAsync_v2, dst, src, n, s)} CUresult
    cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t n, CUstream s){
        TESSERA_GATED(cuMemcpyDtoHAsync_v2_ptsz, dst, src, n, s)} CUresult
    cuMemsetD8_v2(CUdeviceptr dst, unsigned char v,
                  size_t n){TESSERA_GATED(cuMemsetD8_v2, dst, v, n)} CUresult
    cuMemsetD8_v2_ptds(CUdeviceptr dst, unsigned char v,
                       size_t n){TESSERA_GATED(cuMemsetD8_v2_ptds, dst, v, n)} CUresult
    cuMemsetD32_v2(CUdeviceptr dst, unsigned int v,
                   size_t n){TESSERA_GATED(cuMemsetD32_v2, dst, v, n)} CUresult
    cuMemsetD32_v2_ptds(CUdeviceptr dst, unsigned int v,
                        size_t n){TESSERA_GATED(cuMemsetD32_v2_ptds, dst, v, n)} CUresult
    cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n,
                    CUstream s){TESSERA_GATED(cuMemsetD8Async, dst, v, n, s)} CUresult
    cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char v, size_t n,
                         CUstream s){TESSERA_GATED(cuMemsetD8Async_ptsz, dst, v, n, s)} CUresult
    cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n,
                     CUstream s){TESSERA_GATED(cuMemsetD32Async, dst, v, n, s)} CUresult
    cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned int v, size_t n,
                          CUstream s){TESSERA_GATED(cuMemsetD32Async_ptsz, dst, v, n, s)} CUresult
    cuGraphLaunch(CUgraphExec g, CUstream s){TESSERA_GATED(cuGraphLaunch, g, s)} CUresult
    cuGraphLaunch_ptsz(CUgraphExec g, CUstream s){TESSERA_GATED(cuGraphLaunch_ptsz, g, s)} CUresult
    cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction f, void** params,
                     void** extra){TESSERA_GATED(cuLaunchKernelEx, c, f, params, extra)} CUresult
    cuLaunchKernelEx_ptsz(const CUlaunchConfig* c, CUfunction f, void** params, void** extra){
        TESSERA_GATED(cuLaunchKernelEx_ptsz, c, f, params, extra)} CUresult
    cuStreamSynchronize(CUstream s){TESSERA_GATED(cuStreamSynchronize, s)} CUresult
    cuStreamSynchronize_ptsz(CUstream s){TESSERA_GATED(cuStreamSynchronize_ptsz, s)} CUresult
    cuCtxSynchronize() {
  TESSERA_GATED(cuCtxSynchronize)
}

}  // extern "C"
