// The subset of the CUDA driver API and NVML ABI that the cap library touches, declared here from
// NVIDIA's public API documentation so the library builds without a CUDA toolkit.
//
// Only layouts and values the library reads or writes are declared. Every struct mirrors the
// documented C layout; the static_asserts pin the offsets the library depends on.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

// ---- Driver API -------------------------------------------------------------------------------
typedef int CUresult;  // an enum in cuda.h; the ABI is a C int.
enum : CUresult {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_NOT_FOUND = 500,
};

typedef unsigned long long CUdeviceptr;  // CUdeviceptr_v2 on 64-bit hosts.
typedef int CUdevice;
typedef unsigned long long cuuint64_t;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUfunc_st* CUfunction;
typedef struct CUarray_st* CUarray;
typedef struct CUmemPoolHandle_st* CUmemoryPool;

// cuGetProcAddress flags and (12.0+) query result.
enum : cuuint64_t {
  CU_GET_PROC_ADDRESS_DEFAULT = 0,
  CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1 << 0,
  CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1 << 1,
};
typedef int CUdriverProcAddressQueryResult;
enum : CUdriverProcAddressQueryResult {
  CU_GET_PROC_ADDRESS_SUCCESS = 0,
  CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
  CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
};

// Arrays: the descriptor fields the byte estimate needs.
typedef int CUarray_format;
enum : CUarray_format {
  CU_AD_FORMAT_UNSIGNED_INT8 = 0x01,
  CU_AD_FORMAT_UNSIGNED_INT16 = 0x02,
  CU_AD_FORMAT_UNSIGNED_INT32 = 0x03,
  CU_AD_FORMAT_SIGNED_INT8 = 0x08,
  CU_AD_FORMAT_SIGNED_INT16 = 0x09,
  CU_AD_FORMAT_SIGNED_INT32 = 0x0a,
  CU_AD_FORMAT_HALF = 0x10,
  CU_AD_FORMAT_FLOAT = 0x20,
};
typedef struct CUDA_ARRAY_DESCRIPTOR_st {
  size_t Width;
  size_t Height;
  CUarray_format Format;
  unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;
typedef struct CUDA_ARRAY3D_DESCRIPTOR_st {
  size_t Width;
  size_t Height;
  size_t Depth;
  CUarray_format Format;
  unsigned int NumChannels;
  unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;
enum : unsigned int { CUDA_ARRAY3D_CUBEMAP = 0x04 };

// Virtual memory management (cuMemCreate).
typedef int CUmemLocationType;
enum : CUmemLocationType { CU_MEM_LOCATION_TYPE_DEVICE = 0x1 };
typedef struct CUmemLocation_st {
  CUmemLocationType type;
  int id;
} CUmemLocation;
typedef struct CUmemAllocationProp_st {
  int type;                  // CUmemAllocationType
  int requestedHandleTypes;  // CUmemAllocationHandleType
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
} CUmemAllocationProp;
static_assert(offsetof(CUmemAllocationProp, location) == 8);
static_assert(sizeof(CUmemAllocationProp) == 32);
enum : int { CU_MEM_ALLOCATION_TYPE_PINNED = 0x1 };
enum : int { CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0 };
// cuMemSetAccess.
typedef struct CUmemAccessDesc_st {
  CUmemLocation location;
  int flags;  // CUmemAccess_flags
} CUmemAccessDesc;
enum : int { CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3 };
static_assert(sizeof(CUmemAccessDesc) == 12);
typedef int CUmemAllocationHandleType;
typedef struct CUgraphExec_st* CUgraphExec;
typedef struct CUlaunchConfig_st CUlaunchConfig;  // only passed through

// ---- NVML -------------------------------------------------------------------------------------
typedef int nvmlReturn_t;
enum : nvmlReturn_t {
  NVML_SUCCESS = 0,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
};
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;
typedef struct nvmlMemory_v2_st {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_v2_t;
static_assert(offsetof(nvmlMemory_v2_t, total) == 8);

}  // extern "C"
