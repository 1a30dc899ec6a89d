/*
 * vgpu_cuda.h -- the subset of the CUDA driver API (cuda.h / cudaTypedefs.h,
 * CUDA 12.9) that libvgpu uses or exports.
 *
 * Hand-written declarations with NVIDIA's exact names, values and layouts.
 * tests/abi_conformance.rs checks every constant, size and offset listed in
 * tests/abi/table.rs, and every prototype below, against NVIDIA's own cuda.h.
 * crates/cuda-types/src/generated.rs is produced from this file by
 * ci/gen-bindings.sh (bindgen; types and constants only).
 *
 * Sections:
 *   - types     (skipped when VGPU_PROTOTYPES_ONLY is defined)
 *   - functions (prototypes + PFN_<symbol> pointer typedefs; skipped when
 *                VGPU_TYPES_ONLY is defined). Each PFN_<name> is named after the
 *                exported symbol (PFN_cuMemAlloc_v2, PFN_cuLaunchKernel_ptsz),
 *                unlike cudaTypedefs.h's PFN_<api>_v<version> names.
 *
 * The prototypes section can be included after NVIDIA's cuda.h (define
 * VGPU_PROTOTYPES_ONLY): any redeclaration that differs is a compile error.
 */
#ifndef VGPU_CUDA_TYPES_SECTION
#ifndef VGPU_PROTOTYPES_ONLY
#define VGPU_CUDA_TYPES_SECTION

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef CUDAAPI
#define CUDAAPI
#endif

/* ------------------------------------------------------------------ */
/* Scalars and opaque handles                                          */
/* ------------------------------------------------------------------ */

typedef uint32_t cuuint32_t;
typedef uint64_t cuuint64_t;

typedef unsigned long long CUdeviceptr_v2;
typedef CUdeviceptr_v2 CUdeviceptr;
typedef int CUdevice_v1;
typedef CUdevice_v1 CUdevice;

typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUlib_st *CUlibrary;
typedef struct CUkern_st *CUkernel;
typedef struct CUarray_st *CUarray;
typedef struct CUmipmappedArray_st *CUmipmappedArray;
typedef struct CUevent_st *CUevent;
typedef struct CUstream_st *CUstream;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUgraphDeviceUpdatableNode_st *CUgraphDeviceNode;
typedef struct CUgreenCtx_st *CUgreenCtx;
typedef struct CUdevResourceDesc_st *CUdevResourceDesc;

typedef unsigned long long CUmemGenericAllocationHandle_v1;
typedef CUmemGenericAllocationHandle_v1 CUmemGenericAllocationHandle;

typedef struct CUuuid_st {
    char bytes[16];
} CUuuid;

/* Stream handles with special meaning (cuda.h). */
#define CU_STREAM_LEGACY     ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

#define CU_DEVICE_CPU     ((CUdevice)-1)
#define CU_DEVICE_INVALID ((CUdevice)-2)

/* cuLaunchKernel `extra` keys. */
#define CU_LAUNCH_PARAM_END_AS_INT            0x00
#define CU_LAUNCH_PARAM_END                   ((void *)CU_LAUNCH_PARAM_END_AS_INT)
#define CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT 0x01
#define CU_LAUNCH_PARAM_BUFFER_POINTER        ((void *)CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT)
#define CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT    0x02
#define CU_LAUNCH_PARAM_BUFFER_SIZE           ((void *)CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT)

/* ------------------------------------------------------------------ */
/* CUresult                                                            */
/* ------------------------------------------------------------------ */

/* An enum (unsigned int sized) as in cuda.h. Rust bindings get plain
 * constants, never a Rust enum: the driver may return values not listed. */
typedef enum cudaError_enum {
    CUDA_SUCCESS                              = 0,
    CUDA_ERROR_INVALID_VALUE                  = 1,
    CUDA_ERROR_OUT_OF_MEMORY                  = 2,
    CUDA_ERROR_NOT_INITIALIZED                = 3,
    CUDA_ERROR_DEINITIALIZED                  = 4,
    CUDA_ERROR_PROFILER_DISABLED              = 5,
    CUDA_ERROR_PROFILER_NOT_INITIALIZED       = 6,
    CUDA_ERROR_PROFILER_ALREADY_STARTED       = 7,
    CUDA_ERROR_PROFILER_ALREADY_STOPPED       = 8,
    CUDA_ERROR_STUB_LIBRARY                   = 34,
    CUDA_ERROR_DEVICE_UNAVAILABLE             = 46,
    CUDA_ERROR_NO_DEVICE                      = 100,
    CUDA_ERROR_INVALID_DEVICE                 = 101,
    CUDA_ERROR_DEVICE_NOT_LICENSED            = 102,
    CUDA_ERROR_INVALID_IMAGE                  = 200,
    CUDA_ERROR_INVALID_CONTEXT                = 201,
    CUDA_ERROR_CONTEXT_ALREADY_CURRENT        = 202,
    CUDA_ERROR_MAP_FAILED                     = 205,
    CUDA_ERROR_UNMAP_FAILED                   = 206,
    CUDA_ERROR_ARRAY_IS_MAPPED                = 207,
    CUDA_ERROR_ALREADY_MAPPED                 = 208,
    CUDA_ERROR_NO_BINARY_FOR_GPU              = 209,
    CUDA_ERROR_ALREADY_ACQUIRED               = 210,
    CUDA_ERROR_NOT_MAPPED                     = 211,
    CUDA_ERROR_NOT_MAPPED_AS_ARRAY            = 212,
    CUDA_ERROR_NOT_MAPPED_AS_POINTER          = 213,
    CUDA_ERROR_ECC_UNCORRECTABLE              = 214,
    CUDA_ERROR_UNSUPPORTED_LIMIT              = 215,
    CUDA_ERROR_CONTEXT_ALREADY_IN_USE         = 216,
    CUDA_ERROR_PEER_ACCESS_UNSUPPORTED        = 217,
    CUDA_ERROR_INVALID_PTX                    = 218,
    CUDA_ERROR_INVALID_GRAPHICS_CONTEXT       = 219,
    CUDA_ERROR_NVLINK_UNCORRECTABLE           = 220,
    CUDA_ERROR_JIT_COMPILER_NOT_FOUND         = 221,
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION        = 222,
    CUDA_ERROR_JIT_COMPILATION_DISABLED       = 223,
    CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY      = 224,
    CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC       = 225,
    CUDA_ERROR_CONTAINED                      = 226,
    CUDA_ERROR_INVALID_SOURCE                 = 300,
    CUDA_ERROR_FILE_NOT_FOUND                 = 301,
    CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND = 302,
    CUDA_ERROR_SHARED_OBJECT_INIT_FAILED      = 303,
    CUDA_ERROR_OPERATING_SYSTEM               = 304,
    CUDA_ERROR_INVALID_HANDLE                 = 400,
    CUDA_ERROR_ILLEGAL_STATE                  = 401,
    CUDA_ERROR_LOSSY_QUERY                    = 402,
    CUDA_ERROR_NOT_FOUND                      = 500,
    CUDA_ERROR_NOT_READY                      = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS                = 700,
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES        = 701,
    CUDA_ERROR_LAUNCH_TIMEOUT                 = 702,
    CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING  = 703,
    CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED    = 704,
    CUDA_ERROR_PEER_ACCESS_NOT_ENABLED        = 705,
    CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE         = 708,
    CUDA_ERROR_CONTEXT_IS_DESTROYED           = 709,
    CUDA_ERROR_ASSERT                         = 710,
    CUDA_ERROR_TOO_MANY_PEERS                 = 711,
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED     = 713,
    CUDA_ERROR_HARDWARE_STACK_ERROR           = 714,
    CUDA_ERROR_ILLEGAL_INSTRUCTION            = 715,
    CUDA_ERROR_MISALIGNED_ADDRESS             = 716,
    CUDA_ERROR_INVALID_ADDRESS_SPACE          = 717,
    CUDA_ERROR_INVALID_PC                     = 718,
    CUDA_ERROR_LAUNCH_FAILED                  = 719,
    CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE   = 720,
    CUDA_ERROR_TENSOR_MEMORY_LEAK             = 721,
    CUDA_ERROR_NOT_PERMITTED                  = 800,
    CUDA_ERROR_NOT_SUPPORTED                  = 801,
    CUDA_ERROR_SYSTEM_NOT_READY               = 802,
    CUDA_ERROR_SYSTEM_DRIVER_MISMATCH         = 803,
    CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804,
    CUDA_ERROR_MPS_CONNECTION_FAILED          = 805,
    CUDA_ERROR_MPS_RPC_FAILURE                = 806,
    CUDA_ERROR_MPS_SERVER_NOT_READY           = 807,
    CUDA_ERROR_MPS_MAX_CLIENTS_REACHED        = 808,
    CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED    = 809,
    CUDA_ERROR_MPS_CLIENT_TERMINATED          = 810,
    CUDA_ERROR_CDP_NOT_SUPPORTED              = 811,
    CUDA_ERROR_CDP_VERSION_MISMATCH           = 812,
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED     = 900,
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED     = 901,
    CUDA_ERROR_STREAM_CAPTURE_MERGE           = 902,
    CUDA_ERROR_STREAM_CAPTURE_UNMATCHED       = 903,
    CUDA_ERROR_STREAM_CAPTURE_UNJOINED        = 904,
    CUDA_ERROR_STREAM_CAPTURE_ISOLATION       = 905,
    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT        = 906,
    CUDA_ERROR_CAPTURED_EVENT                 = 907,
    CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD    = 908,
    CUDA_ERROR_TIMEOUT                        = 909,
    CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE      = 910,
    CUDA_ERROR_EXTERNAL_DEVICE                = 911,
    CUDA_ERROR_INVALID_CLUSTER_SIZE           = 912,
    CUDA_ERROR_FUNCTION_NOT_LOADED            = 913,
    CUDA_ERROR_INVALID_RESOURCE_TYPE          = 914,
    CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION = 915,
    CUDA_ERROR_KEY_ROTATION                   = 916,
    CUDA_ERROR_UNKNOWN                        = 999
} CUresult;

/* ------------------------------------------------------------------ */
/* cuGetProcAddress                                                    */
/* ------------------------------------------------------------------ */

typedef enum CUdriverProcAddress_flags_enum {
    CU_GET_PROC_ADDRESS_DEFAULT                   = 0,
    CU_GET_PROC_ADDRESS_LEGACY_STREAM             = 1 << 0,
    CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1 << 1
} CUdriverProcAddress_flags;

typedef enum CUdriverProcAddressQueryResult_enum {
    CU_GET_PROC_ADDRESS_SUCCESS                = 0,
    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND       = 1,
    CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2
} CUdriverProcAddressQueryResult;

/* ------------------------------------------------------------------ */
/* Devices and contexts                                                */
/* ------------------------------------------------------------------ */

/* Subset of CUdevice_attribute (the enum has ~150 entries). */
typedef enum CUdevice_attribute_enum {
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK               = 1,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X                     = 2,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y                     = 3,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z                     = 4,
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X                      = 5,
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y                      = 6,
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z                      = 7,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK         = 8,
    CU_DEVICE_ATTRIBUTE_WARP_SIZE                           = 10,
    CU_DEVICE_ATTRIBUTE_CLOCK_RATE                          = 13,
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT                = 16,
    CU_DEVICE_ATTRIBUTE_INTEGRATED                          = 18,
    CU_DEVICE_ATTRIBUTE_COMPUTE_MODE                        = 20,
    CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS                  = 31,
    CU_DEVICE_ATTRIBUTE_PCI_BUS_ID                          = 33,
    CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID                       = 34,
    CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE                   = 36,
    CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH             = 37,
    CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE                       = 38,
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR      = 39,
    CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT                  = 40,
    CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING                  = 41,
    CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID                       = 50,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR            = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR            = 76,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81,
    CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR    = 82,
    CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY                      = 83,
    CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS           = 89,
    CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH                  = 95,
    CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH     = 96,
    CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR       = 106,
    CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED              = 115,
    CU_DEVICE_ATTRIBUTE_MPS_ENABLED                         = 133
} CUdevice_attribute;

typedef enum CUctx_flags_enum {
    CU_CTX_SCHED_AUTO          = 0x00,
    CU_CTX_SCHED_SPIN          = 0x01,
    CU_CTX_SCHED_YIELD         = 0x02,
    CU_CTX_SCHED_BLOCKING_SYNC = 0x04,
    CU_CTX_BLOCKING_SYNC       = 0x04,
    CU_CTX_SCHED_MASK          = 0x07,
    CU_CTX_MAP_HOST            = 0x08,
    CU_CTX_LMEM_RESIZE_TO_MAX  = 0x10,
    CU_CTX_COREDUMP_ENABLE     = 0x20,
    CU_CTX_USER_COREDUMP_ENABLE = 0x40,
    CU_CTX_SYNC_MEMOPS         = 0x80,
    CU_CTX_FLAGS_MASK          = 0xFF
} CUctx_flags;

typedef enum CUexecAffinityType_enum {
    CU_EXEC_AFFINITY_TYPE_SM_COUNT = 0,
    CU_EXEC_AFFINITY_TYPE_MAX
} CUexecAffinityType;

typedef struct CUexecAffinitySmCount_st {
    unsigned int val;
} CUexecAffinitySmCount_v1;
typedef CUexecAffinitySmCount_v1 CUexecAffinitySmCount;

typedef struct CUexecAffinityParam_st {
    CUexecAffinityType type;
    union {
        CUexecAffinitySmCount smCount;
    } param;
} CUexecAffinityParam_v1;
typedef CUexecAffinityParam_v1 CUexecAffinityParam;

typedef enum CUcigDataType_enum {
    CIG_DATA_TYPE_D3D12_COMMAND_QUEUE = 0x1,
    CIG_DATA_TYPE_NV_BLOB             = 0x2
} CUcigDataType;

typedef struct CUctxCigParam_st {
    CUcigDataType sharedDataType;
    void *sharedData;
} CUctxCigParam;

/* cuCtxCreate_v4 parameters. */
typedef struct CUctxCreateParams_st {
    CUexecAffinityParam *execAffinityParams;
    int                  numExecAffinityParams;
    CUctxCigParam       *cigParams;
} CUctxCreateParams;

/* ------------------------------------------------------------------ */
/* Memory                                                              */
/* ------------------------------------------------------------------ */

typedef enum CUmemorytype_enum {
    CU_MEMORYTYPE_HOST    = 0x01,
    CU_MEMORYTYPE_DEVICE  = 0x02,
    CU_MEMORYTYPE_ARRAY   = 0x03,
    CU_MEMORYTYPE_UNIFIED = 0x04
} CUmemorytype;

typedef enum CUmemAttach_flags_enum {
    CU_MEM_ATTACH_GLOBAL = 0x1,
    CU_MEM_ATTACH_HOST   = 0x2,
    CU_MEM_ATTACH_SINGLE = 0x4
} CUmemAttach_flags;

/* Subset of CUpointer_attribute. */
typedef enum CUpointer_attribute_enum {
    CU_POINTER_ATTRIBUTE_CONTEXT           = 1,
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE       = 2,
    CU_POINTER_ATTRIBUTE_DEVICE_POINTER    = 3,
    CU_POINTER_ATTRIBUTE_HOST_POINTER      = 4,
    CU_POINTER_ATTRIBUTE_SYNC_MEMOPS       = 6,
    CU_POINTER_ATTRIBUTE_BUFFER_ID         = 7,
    CU_POINTER_ATTRIBUTE_IS_MANAGED        = 8,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL    = 9,
    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR  = 11,
    CU_POINTER_ATTRIBUTE_RANGE_SIZE        = 12,
    CU_POINTER_ATTRIBUTE_MAPPED            = 13,
    CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE    = 17,
    CU_POINTER_ATTRIBUTE_MAPPING_SIZE      = 18,
    CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR = 19,
    CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID   = 20
} CUpointer_attribute;

typedef enum CUmemAllocationHandleType_enum {
    CU_MEM_HANDLE_TYPE_NONE                  = 0x0,
    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 0x1,
    CU_MEM_HANDLE_TYPE_WIN32                 = 0x2,
    CU_MEM_HANDLE_TYPE_WIN32_KMT             = 0x4,
    CU_MEM_HANDLE_TYPE_FABRIC                = 0x8,
    CU_MEM_HANDLE_TYPE_MAX                   = 0x7FFFFFFF
} CUmemAllocationHandleType;

typedef enum CUmemLocationType_enum {
    CU_MEM_LOCATION_TYPE_INVALID           = 0x0,
    CU_MEM_LOCATION_TYPE_DEVICE            = 0x1,
    CU_MEM_LOCATION_TYPE_HOST              = 0x2,
    CU_MEM_LOCATION_TYPE_HOST_NUMA         = 0x3,
    CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT = 0x4,
    CU_MEM_LOCATION_TYPE_MAX               = 0x7FFFFFFF
} CUmemLocationType;

typedef enum CUmemAllocationType_enum {
    CU_MEM_ALLOCATION_TYPE_INVALID = 0x0,
    CU_MEM_ALLOCATION_TYPE_PINNED  = 0x1,
    CU_MEM_ALLOCATION_TYPE_MAX     = 0x7FFFFFFF
} CUmemAllocationType;

typedef enum CUmemAllocationCompType_enum {
    CU_MEM_ALLOCATION_COMP_NONE    = 0x0,
    CU_MEM_ALLOCATION_COMP_GENERIC = 0x1
} CUmemAllocationCompType;

typedef struct CUmemLocation_st {
    CUmemLocationType type;
    int id;
} CUmemLocation_v1;
typedef CUmemLocation_v1 CUmemLocation;

typedef struct CUmemAllocationProp_st {
    CUmemAllocationType type;
    CUmemAllocationHandleType requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp_v1;
typedef CUmemAllocationProp_v1 CUmemAllocationProp;

typedef struct CUmemPoolProps_st {
    CUmemAllocationType allocType;
    CUmemAllocationHandleType handleTypes;
    CUmemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
} CUmemPoolProps_v1;
typedef CUmemPoolProps_v1 CUmemPoolProps;

typedef enum CUmemPool_attribute_enum {
    CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES = 1,
    CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC,
    CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
    CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
    CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
    CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
    CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
    CU_MEMPOOL_ATTR_USED_MEM_HIGH
} CUmemPool_attribute;

typedef enum CUmem_advise_enum {
    CU_MEM_ADVISE_SET_READ_MOSTLY          = 1,
    CU_MEM_ADVISE_UNSET_READ_MOSTLY        = 2,
    CU_MEM_ADVISE_SET_PREFERRED_LOCATION   = 3,
    CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION = 4,
    CU_MEM_ADVISE_SET_ACCESSED_BY          = 5,
    CU_MEM_ADVISE_UNSET_ACCESSED_BY        = 6
} CUmem_advise;

/* ------------------------------------------------------------------ */
/* Arrays                                                              */
/* ------------------------------------------------------------------ */

typedef enum CUarray_format_enum {
    CU_AD_FORMAT_UNSIGNED_INT8  = 0x01,
    CU_AD_FORMAT_UNSIGNED_INT16 = 0x02,
    CU_AD_FORMAT_UNSIGNED_INT32 = 0x03,
    CU_AD_FORMAT_SIGNED_INT8    = 0x08,
    CU_AD_FORMAT_SIGNED_INT16   = 0x09,
    CU_AD_FORMAT_SIGNED_INT32   = 0x0a,
    CU_AD_FORMAT_HALF           = 0x10,
    CU_AD_FORMAT_FLOAT          = 0x20,
    CU_AD_FORMAT_NV12           = 0xb0,
    CU_AD_FORMAT_UNORM_INT8X1   = 0xc0,
    CU_AD_FORMAT_UNORM_INT8X2   = 0xc1,
    CU_AD_FORMAT_UNORM_INT8X4   = 0xc2,
    CU_AD_FORMAT_UNORM_INT16X1  = 0xc3,
    CU_AD_FORMAT_UNORM_INT16X2  = 0xc4,
    CU_AD_FORMAT_UNORM_INT16X4  = 0xc5,
    CU_AD_FORMAT_SNORM_INT8X1   = 0xc6,
    CU_AD_FORMAT_SNORM_INT8X2   = 0xc7,
    CU_AD_FORMAT_SNORM_INT8X4   = 0xc8,
    CU_AD_FORMAT_SNORM_INT16X1  = 0xc9,
    CU_AD_FORMAT_SNORM_INT16X2  = 0xca,
    CU_AD_FORMAT_SNORM_INT16X4  = 0xcb,
    CU_AD_FORMAT_BC1_UNORM      = 0x91,
    CU_AD_FORMAT_BC1_UNORM_SRGB = 0x92,
    CU_AD_FORMAT_BC2_UNORM      = 0x93,
    CU_AD_FORMAT_BC2_UNORM_SRGB = 0x94,
    CU_AD_FORMAT_BC3_UNORM      = 0x95,
    CU_AD_FORMAT_BC3_UNORM_SRGB = 0x96,
    CU_AD_FORMAT_BC4_UNORM      = 0x97,
    CU_AD_FORMAT_BC4_SNORM      = 0x98,
    CU_AD_FORMAT_BC5_UNORM      = 0x99,
    CU_AD_FORMAT_BC5_SNORM      = 0x9a,
    CU_AD_FORMAT_BC6H_UF16      = 0x9b,
    CU_AD_FORMAT_BC6H_SF16      = 0x9c,
    CU_AD_FORMAT_BC7_UNORM      = 0x9d,
    CU_AD_FORMAT_BC7_UNORM_SRGB = 0x9e,
    CU_AD_FORMAT_P010           = 0x9f,
    CU_AD_FORMAT_P016           = 0xa1,
    CU_AD_FORMAT_NV16           = 0xa2,
    CU_AD_FORMAT_P210           = 0xa3,
    CU_AD_FORMAT_P216           = 0xa4,
    CU_AD_FORMAT_YUY2           = 0xa5,
    CU_AD_FORMAT_Y210           = 0xa6,
    CU_AD_FORMAT_Y216           = 0xa7,
    CU_AD_FORMAT_AYUV           = 0xa8,
    CU_AD_FORMAT_Y410           = 0xa9,
    CU_AD_FORMAT_Y416           = 0xb1,
    CU_AD_FORMAT_Y444_PLANAR8   = 0xb2,
    CU_AD_FORMAT_Y444_PLANAR10  = 0xb3,
    CU_AD_FORMAT_YUV444_8bit_SemiPlanar  = 0xb4,
    CU_AD_FORMAT_YUV444_16bit_SemiPlanar = 0xb5,
    CU_AD_FORMAT_UNORM_INT_101010_2 = 0x50,
    CU_AD_FORMAT_MAX            = 0x7FFFFFFF
} CUarray_format;

typedef struct CUDA_ARRAY_DESCRIPTOR_st {
    size_t Width;
    size_t Height;
    CUarray_format Format;
    unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR_v2;
typedef CUDA_ARRAY_DESCRIPTOR_v2 CUDA_ARRAY_DESCRIPTOR;

typedef struct CUDA_ARRAY3D_DESCRIPTOR_st {
    size_t Width;
    size_t Height;
    size_t Depth;
    CUarray_format Format;
    unsigned int NumChannels;
    unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR_v2;
typedef CUDA_ARRAY3D_DESCRIPTOR_v2 CUDA_ARRAY3D_DESCRIPTOR;

#define CUDA_ARRAY3D_LAYERED             0x01
#define CUDA_ARRAY3D_2DARRAY             0x01
#define CUDA_ARRAY3D_SURFACE_LDST        0x02
#define CUDA_ARRAY3D_CUBEMAP             0x04
#define CUDA_ARRAY3D_TEXTURE_GATHER      0x08
#define CUDA_ARRAY3D_DEPTH_TEXTURE       0x10
#define CUDA_ARRAY3D_COLOR_ATTACHMENT    0x20
#define CUDA_ARRAY3D_SPARSE              0x40
#define CUDA_ARRAY3D_DEFERRED_MAPPING    0x80
#define CUDA_ARRAY3D_VIDEO_ENCODE_DECODE 0x100

/* ------------------------------------------------------------------ */
/* Streams and events                                                  */
/* ------------------------------------------------------------------ */

typedef enum CUstream_flags_enum {
    CU_STREAM_DEFAULT      = 0x0,
    CU_STREAM_NON_BLOCKING = 0x1
} CUstream_flags;

typedef enum CUevent_flags_enum {
    CU_EVENT_DEFAULT        = 0x0,
    CU_EVENT_BLOCKING_SYNC  = 0x1,
    CU_EVENT_DISABLE_TIMING = 0x2,
    CU_EVENT_INTERPROCESS   = 0x4
} CUevent_flags;

typedef enum CUstreamCaptureStatus_enum {
    CU_STREAM_CAPTURE_STATUS_NONE        = 0,
    CU_STREAM_CAPTURE_STATUS_ACTIVE      = 1,
    CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2
} CUstreamCaptureStatus;

typedef enum CUstreamCaptureMode_enum {
    CU_STREAM_CAPTURE_MODE_GLOBAL       = 0,
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
    CU_STREAM_CAPTURE_MODE_RELAXED      = 2
} CUstreamCaptureMode;

/* Checkpointing (12.8). */
typedef enum CUprocessState_enum {
    CU_PROCESS_STATE_RUNNING      = 0,
    CU_PROCESS_STATE_LOCKED       = 1,
    CU_PROCESS_STATE_CHECKPOINTED = 2,
    CU_PROCESS_STATE_FAILED       = 3
} CUprocessState;

/* ------------------------------------------------------------------ */
/* Launch                                                              */
/* ------------------------------------------------------------------ */

typedef enum CUaccessProperty_enum {
    CU_ACCESS_PROPERTY_NORMAL     = 0,
    CU_ACCESS_PROPERTY_STREAMING  = 1,
    CU_ACCESS_PROPERTY_PERSISTING = 2
} CUaccessProperty;

typedef struct CUaccessPolicyWindow_st {
    void *base_ptr;
    size_t num_bytes;
    float hitRatio;
    CUaccessProperty hitProp;
    CUaccessProperty missProp;
} CUaccessPolicyWindow_v1;
typedef CUaccessPolicyWindow_v1 CUaccessPolicyWindow;

typedef enum CUsynchronizationPolicy_enum {
    CU_SYNC_POLICY_AUTO          = 1,
    CU_SYNC_POLICY_SPIN          = 2,
    CU_SYNC_POLICY_YIELD         = 3,
    CU_SYNC_POLICY_BLOCKING_SYNC = 4
} CUsynchronizationPolicy;

typedef enum CUclusterSchedulingPolicy_enum {
    CU_CLUSTER_SCHEDULING_POLICY_DEFAULT        = 0,
    CU_CLUSTER_SCHEDULING_POLICY_SPREAD         = 1,
    CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING = 2
} CUclusterSchedulingPolicy;

typedef struct CUlaunchMemSyncDomainMap_st {
    unsigned char default_;
    unsigned char remote;
} CUlaunchMemSyncDomainMap;

typedef enum CUlaunchMemSyncDomain_enum {
    CU_LAUNCH_MEM_SYNC_DOMAIN_DEFAULT = 0,
    CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE  = 1
} CUlaunchMemSyncDomain;

typedef enum CUlaunchAttributeID_enum {
    CU_LAUNCH_ATTRIBUTE_IGNORE                                = 0,
    CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW                  = 1,
    CU_LAUNCH_ATTRIBUTE_COOPERATIVE                           = 2,
    CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY                = 3,
    CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION                     = 4,
    CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE  = 5,
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION     = 6,
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT                    = 7,
    CU_LAUNCH_ATTRIBUTE_PRIORITY                              = 8,
    CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP                   = 9,
    CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN                       = 10,
    CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION           = 11,
    CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT               = 12,
    CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE          = 13,
    CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT      = 14
} CUlaunchAttributeID;

/* 64 bytes, 8-byte aligned. */
typedef union CUlaunchAttributeValue_union {
    char pad[64];
    CUaccessPolicyWindow accessPolicyWindow;
    int cooperative;
    CUsynchronizationPolicy syncPolicy;
    struct {
        unsigned int x;
        unsigned int y;
        unsigned int z;
    } clusterDim;
    CUclusterSchedulingPolicy clusterSchedulingPolicyPreference;
    int programmaticStreamSerializationAllowed;
    struct {
        CUevent event;
        int flags;
        int triggerAtBlockStart;
    } programmaticEvent;
    struct {
        CUevent event;
        int flags;
    } launchCompletionEvent;
    int priority;
    CUlaunchMemSyncDomainMap memSyncDomainMap;
    CUlaunchMemSyncDomain memSyncDomain;
    struct {
        unsigned int x;
        unsigned int y;
        unsigned int z;
    } preferredClusterDim;
    struct {
        int deviceUpdatable;
        CUgraphDeviceNode devNode;
    } deviceUpdatableKernelNode;
    unsigned int sharedMemCarveout;
} CUlaunchAttributeValue;

typedef struct CUlaunchAttribute_st {
    CUlaunchAttributeID id;
    char pad[8 - sizeof(CUlaunchAttributeID)];
    CUlaunchAttributeValue value;
} CUlaunchAttribute;

typedef struct CUlaunchConfig_st {
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

typedef struct CUDA_LAUNCH_PARAMS_st {
    CUfunction function;
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    void **kernelParams;
} CUDA_LAUNCH_PARAMS_v1;
typedef CUDA_LAUNCH_PARAMS_v1 CUDA_LAUNCH_PARAMS;

/* ------------------------------------------------------------------ */
/* Graphs                                                              */
/* ------------------------------------------------------------------ */

typedef enum CUgraphNodeType_enum {
    CU_GRAPH_NODE_TYPE_KERNEL           = 0,
    CU_GRAPH_NODE_TYPE_MEMCPY           = 1,
    CU_GRAPH_NODE_TYPE_MEMSET           = 2,
    CU_GRAPH_NODE_TYPE_HOST             = 3,
    CU_GRAPH_NODE_TYPE_GRAPH            = 4,
    CU_GRAPH_NODE_TYPE_EMPTY            = 5,
    CU_GRAPH_NODE_TYPE_WAIT_EVENT       = 6,
    CU_GRAPH_NODE_TYPE_EVENT_RECORD     = 7,
    CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL = 8,
    CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT   = 9,
    CU_GRAPH_NODE_TYPE_MEM_ALLOC        = 10,
    CU_GRAPH_NODE_TYPE_MEM_FREE         = 11,
    CU_GRAPH_NODE_TYPE_BATCH_MEM_OP     = 12,
    CU_GRAPH_NODE_TYPE_CONDITIONAL      = 13
} CUgraphNodeType;

typedef enum CUgraphInstantiate_flags_enum {
    CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH = 1,
    CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD              = 2,
    CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH       = 4,
    CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY   = 8
} CUgraphInstantiate_flags;

typedef struct CUDA_KERNEL_NODE_PARAMS_v2_st {
    CUfunction func;
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    void **kernelParams;
    void **extra;
    CUkernel kern;
    CUcontext ctx;
} CUDA_KERNEL_NODE_PARAMS_v2;
typedef CUDA_KERNEL_NODE_PARAMS_v2 CUDA_KERNEL_NODE_PARAMS;

/* Driver-held memory: module loads, context limits, graph memory (docs/design.md "Driver-held memory"). */
typedef enum CUjit_option_enum {
    CU_JIT_MAX_REGISTERS = 0
} CUjit_option;

typedef enum CUlibraryOption_enum {
    CU_LIBRARY_HOST_UNIVERSAL_FUNCTION_AND_DATA_TABLE = 0
} CUlibraryOption;

typedef enum CUlimit_enum {
    CU_LIMIT_STACK_SIZE = 0x00,
    CU_LIMIT_PRINTF_FIFO_SIZE = 0x01,
    CU_LIMIT_MALLOC_HEAP_SIZE = 0x02
} CUlimit;

typedef enum CUgraphMem_attribute_enum {
    CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT = 0,
    CU_GRAPH_MEM_ATTR_USED_MEM_HIGH = 1,
    CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT = 2,
    CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH = 3
} CUgraphMem_attribute;

typedef struct CUDA_MEM_ALLOC_NODE_PARAMS_v1_st {
    CUmemPoolProps poolProps;
    const struct CUmemAccessDesc_st *accessDescs;
    size_t accessDescCount;
    size_t bytesize;
    CUdeviceptr dptr;
} CUDA_MEM_ALLOC_NODE_PARAMS_v1;
typedef CUDA_MEM_ALLOC_NODE_PARAMS_v1 CUDA_MEM_ALLOC_NODE_PARAMS;

/* Edge data of cuGraphAddNode_v2/_v3: passed through, never read. */
typedef struct CUgraphEdgeData_st {
    unsigned char from_port;
    unsigned char to_port;
    unsigned char type;
    unsigned char reserved[5];
} CUgraphEdgeData;

/* cuGraphAddNode's tagged parameters. The union of per-type members is kept opaque here (its
 * padding member, reserved1, spans it); its memory-allocation member `alloc` sits at the union's
 * start and has the layout of CUDA_MEM_ALLOC_NODE_PARAMS_v1 (cuda.h: ..._v2, the same fields). */
typedef struct CUgraphNodeParams_st {
    CUgraphNodeType type;
    int reserved0[3];
    long long reserved1[29];
    long long reserved2;
} CUgraphNodeParams;

typedef enum CUgraphInstantiateResult_enum {
    CUDA_GRAPH_INSTANTIATE_SUCCESS                        = 0,
    CUDA_GRAPH_INSTANTIATE_ERROR                          = 1,
    CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE              = 2,
    CUDA_GRAPH_INSTANTIATE_NODE_OPERATION_NOT_SUPPORTED   = 3,
    CUDA_GRAPH_INSTANTIATE_MULTIPLE_CTXS_NOT_SUPPORTED    = 4,
    CUDA_GRAPH_INSTANTIATE_CONDITIONAL_HANDLE_UNUSED      = 5
} CUgraphInstantiateResult;

typedef struct CUDA_GRAPH_INSTANTIATE_PARAMS_st {
    cuuint64_t flags;
    CUstream hUploadStream;
    CUgraphNode hErrNode_out;
    CUgraphInstantiateResult result_out;
} CUDA_GRAPH_INSTANTIATE_PARAMS;

#ifdef __cplusplus
}
#endif

#endif /* !VGPU_PROTOTYPES_ONLY */
#endif /* VGPU_CUDA_TYPES_SECTION */

/* ================================================================== */
/* Functions: prototypes and PFN_<exported symbol> typedefs            */
/* ================================================================== */
#ifndef VGPU_CUDA_PROTOTYPES_SECTION
#ifndef VGPU_TYPES_ONLY
#define VGPU_CUDA_PROTOTYPES_SECTION

#ifndef CUDAAPI
#define CUDAAPI
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Exported by libvgpu (hooks) ---- */
CUresult CUDAAPI cuInit(unsigned int Flags);
typedef CUresult (CUDAAPI *PFN_cuInit)(unsigned int Flags);

CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
typedef CUresult (CUDAAPI *PFN_cuGetProcAddress)(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus);
typedef CUresult (CUDAAPI *PFN_cuGetProcAddress_v2)(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus);

CUresult CUDAAPI cuMemGetInfo_v2(size_t *free, size_t *total);
typedef CUresult (CUDAAPI *PFN_cuMemGetInfo_v2)(size_t *free, size_t *total);

CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
typedef CUresult (CUDAAPI *PFN_cuDeviceTotalMem_v2)(size_t *bytes, CUdevice dev);

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
typedef CUresult (CUDAAPI *PFN_cuMemAlloc_v2)(CUdeviceptr *dptr, size_t bytesize);

CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height, unsigned int ElementSizeBytes);
typedef CUresult (CUDAAPI *PFN_cuMemAllocPitch_v2)(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height, unsigned int ElementSizeBytes);

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
typedef CUresult (CUDAAPI *PFN_cuMemAllocManaged)(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr);
typedef CUresult (CUDAAPI *PFN_cuMemFree_v2)(CUdeviceptr dptr);

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop, unsigned long long flags);
typedef CUresult (CUDAAPI *PFN_cuMemCreate)(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop, unsigned long long flags);

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle);
typedef CUresult (CUDAAPI *PFN_cuMemRelease)(CUmemGenericAllocationHandle handle);

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags);
typedef CUresult (CUDAAPI *PFN_cuMemMap)(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags);

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size);
typedef CUresult (CUDAAPI *PFN_cuMemUnmap)(CUdeviceptr ptr, size_t size);

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
typedef CUresult (CUDAAPI *PFN_cuMemAllocAsync)(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);

CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
typedef CUresult (CUDAAPI *PFN_cuMemAllocAsync_ptsz)(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);

CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);
typedef CUresult (CUDAAPI *PFN_cuMemAllocFromPoolAsync)(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);

CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);
typedef CUresult (CUDAAPI *PFN_cuMemAllocFromPoolAsync_ptsz)(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream);
typedef CUresult (CUDAAPI *PFN_cuMemFreeAsync)(CUdeviceptr dptr, CUstream hStream);

CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
typedef CUresult (CUDAAPI *PFN_cuMemFreeAsync_ptsz)(CUdeviceptr dptr, CUstream hStream);

CUresult CUDAAPI cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray);
typedef CUresult (CUDAAPI *PFN_cuArrayCreate_v2)(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray);

CUresult CUDAAPI cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray);
typedef CUresult (CUDAAPI *PFN_cuArray3DCreate_v2)(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray);

CUresult CUDAAPI cuArrayDestroy(CUarray hArray);
typedef CUresult (CUDAAPI *PFN_cuArrayDestroy)(CUarray hArray);

CUresult CUDAAPI cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc, unsigned int numMipmapLevels);
typedef CUresult (CUDAAPI *PFN_cuMipmappedArrayCreate)(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc, unsigned int numMipmapLevels);

CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray);
typedef CUresult (CUDAAPI *PFN_cuMipmappedArrayDestroy)(CUmipmappedArray hMipmappedArray);

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
typedef CUresult (CUDAAPI *PFN_cuDevicePrimaryCtxRetain)(CUcontext *pctx, CUdevice dev);

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev);
typedef CUresult (CUDAAPI *PFN_cuDevicePrimaryCtxRelease)(CUdevice dev);

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev);
typedef CUresult (CUDAAPI *PFN_cuDevicePrimaryCtxRelease_v2)(CUdevice dev);

CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev);
typedef CUresult (CUDAAPI *PFN_cuDevicePrimaryCtxReset)(CUdevice dev);

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev);
typedef CUresult (CUDAAPI *PFN_cuDevicePrimaryCtxReset_v2)(CUdevice dev);

CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev);
typedef CUresult (CUDAAPI *PFN_cuCtxCreate)(CUcontext *pctx, unsigned int flags, CUdevice dev);

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
typedef CUresult (CUDAAPI *PFN_cuCtxCreate_v2)(CUcontext *pctx, unsigned int flags, CUdevice dev);

CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags, CUdevice dev);
typedef CUresult (CUDAAPI *PFN_cuCtxCreate_v3)(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags, CUdevice dev);

CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags, CUdevice dev);
typedef CUresult (CUDAAPI *PFN_cuCtxCreate_v4)(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags, CUdevice dev);

CUresult CUDAAPI cuCtxDestroy(CUcontext ctx);
typedef CUresult (CUDAAPI *PFN_cuCtxDestroy)(CUcontext ctx);

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx);
typedef CUresult (CUDAAPI *PFN_cuCtxDestroy_v2)(CUcontext ctx);

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx);
typedef CUresult (CUDAAPI *PFN_cuCtxSetCurrent)(CUcontext ctx);

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);
typedef CUresult (CUDAAPI *PFN_cuLaunchKernel)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);
typedef CUresult (CUDAAPI *PFN_cuLaunchKernel_ptsz)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra);
typedef CUresult (CUDAAPI *PFN_cuLaunchKernelEx)(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra);

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra);
typedef CUresult (CUDAAPI *PFN_cuLaunchKernelEx_ptsz)(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra);

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream, void **kernelParams);
typedef CUresult (CUDAAPI *PFN_cuLaunchCooperativeKernel)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream, void **kernelParams);

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream, void **kernelParams);
typedef CUresult (CUDAAPI *PFN_cuLaunchCooperativeKernel_ptsz)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream, void **kernelParams);

CUresult CUDAAPI cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *launchParamsList, unsigned int numDevices, unsigned int flags);
typedef CUresult (CUDAAPI *PFN_cuLaunchCooperativeKernelMultiDevice)(CUDA_LAUNCH_PARAMS *launchParamsList, unsigned int numDevices, unsigned int flags);

CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraph, CUstream hStream);
typedef CUresult (CUDAAPI *PFN_cuGraphLaunch)(CUgraphExec hGraph, CUstream hStream);

CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
typedef CUresult (CUDAAPI *PFN_cuGraphLaunch_ptsz)(CUgraphExec hGraphExec, CUstream hStream);

/* ---- Driver-held memory (src/driver_costs.rs) ---- */
CUresult CUDAAPI cuModuleLoad(CUmodule *module, const char *fname);
typedef CUresult (CUDAAPI *PFN_cuModuleLoad)(CUmodule *module, const char *fname);

CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image);
typedef CUresult (CUDAAPI *PFN_cuModuleLoadData)(CUmodule *module, const void *image);

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions, CUjit_option *options, void **optionValues);
typedef CUresult (CUDAAPI *PFN_cuModuleLoadDataEx)(CUmodule *module, const void *image, unsigned int numOptions, CUjit_option *options, void **optionValues);

CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin);
typedef CUresult (CUDAAPI *PFN_cuModuleLoadFatBinary)(CUmodule *module, const void *fatCubin);

CUresult CUDAAPI cuModuleUnload(CUmodule hmod);
typedef CUresult (CUDAAPI *PFN_cuModuleUnload)(CUmodule hmod);

CUresult CUDAAPI cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions, void **jitOptionsValues, unsigned int numJitOptions, CUlibraryOption *libraryOptions, void **libraryOptionValues, unsigned int numLibraryOptions);
typedef CUresult (CUDAAPI *PFN_cuLibraryLoadData)(CUlibrary *library, const void *code, CUjit_option *jitOptions, void **jitOptionsValues, unsigned int numJitOptions, CUlibraryOption *libraryOptions, void **libraryOptionValues, unsigned int numLibraryOptions);

CUresult CUDAAPI cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions, void **jitOptionsValues, unsigned int numJitOptions, CUlibraryOption *libraryOptions, void **libraryOptionValues, unsigned int numLibraryOptions);
typedef CUresult (CUDAAPI *PFN_cuLibraryLoadFromFile)(CUlibrary *library, const char *fileName, CUjit_option *jitOptions, void **jitOptionsValues, unsigned int numJitOptions, CUlibraryOption *libraryOptions, void **libraryOptionValues, unsigned int numLibraryOptions);

CUresult CUDAAPI cuLibraryUnload(CUlibrary library);
typedef CUresult (CUDAAPI *PFN_cuLibraryUnload)(CUlibrary library);

CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value);
typedef CUresult (CUDAAPI *PFN_cuCtxSetLimit)(CUlimit limit, size_t value);
CUresult CUDAAPI cuCtxGetLimit(size_t *pvalue, CUlimit limit);
typedef CUresult (CUDAAPI *PFN_cuCtxGetLimit)(size_t *pvalue, CUlimit limit);

CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams);
typedef CUresult (CUDAAPI *PFN_cuGraphAddMemAllocNode)(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams);

CUresult CUDAAPI cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies, CUgraphNodeParams *nodeParams);
typedef CUresult (CUDAAPI *PFN_cuGraphAddNode)(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies, CUgraphNodeParams *nodeParams);

CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData, size_t numDependencies, CUgraphNodeParams *nodeParams);
typedef CUresult (CUDAAPI *PFN_cuGraphAddNode_v2)(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData, size_t numDependencies, CUgraphNodeParams *nodeParams);

CUresult CUDAAPI cuGraphAddNode_v3(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData, size_t numDependencies, CUgraphNodeParams *nodeParams);
typedef CUresult (CUDAAPI *PFN_cuGraphAddNode_v3)(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData, size_t numDependencies, CUgraphNodeParams *nodeParams);

CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize);
typedef CUresult (CUDAAPI *PFN_cuGraphInstantiate)(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize);

CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize);
typedef CUresult (CUDAAPI *PFN_cuGraphInstantiate_v2)(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize);

CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams);
typedef CUresult (CUDAAPI *PFN_cuGraphInstantiateWithParams)(CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams);

CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams);
typedef CUresult (CUDAAPI *PFN_cuGraphInstantiateWithParams_ptsz)(CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams);

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec);
typedef CUresult (CUDAAPI *PFN_cuGraphExecDestroy)(CUgraphExec hGraphExec);

CUresult CUDAAPI cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream);
typedef CUresult (CUDAAPI *PFN_cuGraphUpload)(CUgraphExec hGraphExec, CUstream hStream);

CUresult CUDAAPI cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream);
typedef CUresult (CUDAAPI *PFN_cuGraphUpload_ptsz)(CUgraphExec hGraphExec, CUstream hStream);

CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice device);
typedef CUresult (CUDAAPI *PFN_cuDeviceGraphMemTrim)(CUdevice device);

CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps);
typedef CUresult (CUDAAPI *PFN_cuMemPoolCreate)(CUmemoryPool *pool, const CUmemPoolProps *poolProps);

CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool);
typedef CUresult (CUDAAPI *PFN_cuMemPoolDestroy)(CUmemoryPool pool);

/* ---- Green contexts and a device's current pool (src/green.rs, src/pool_place.rs) ---- */
CUresult CUDAAPI cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags);
typedef CUresult (CUDAAPI *PFN_cuGreenCtxCreate)(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags);

CUresult CUDAAPI cuGreenCtxDestroy(CUgreenCtx hCtx);
typedef CUresult (CUDAAPI *PFN_cuGreenCtxDestroy)(CUgreenCtx hCtx);

CUresult CUDAAPI cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool);
typedef CUresult (CUDAAPI *PFN_cuDeviceSetMemPool)(CUdevice dev, CUmemoryPool pool);

CUresult CUDAAPI cuMemSetMemPool(CUmemLocation *location, CUmemAllocationType type, CUmemoryPool pool);
typedef CUresult (CUDAAPI *PFN_cuMemSetMemPool)(CUmemLocation *location, CUmemAllocationType type, CUmemoryPool pool);

/* ---- Called by libvgpu (resolved from the real driver) ---- */
CUresult CUDAAPI cuCtxFromGreenCtx(CUcontext *pContext, CUgreenCtx hCtx);
typedef CUresult (CUDAAPI *PFN_cuCtxFromGreenCtx)(CUcontext *pContext, CUgreenCtx hCtx);

CUresult CUDAAPI cuCheckpointProcessGetState(int pid, CUprocessState *state);
typedef CUresult (CUDAAPI *PFN_cuCheckpointProcessGetState)(int pid, CUprocessState *state);

CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev);
typedef CUresult (CUDAAPI *PFN_cuDeviceGetMemPool)(CUmemoryPool *pool, CUdevice dev);

CUresult CUDAAPI cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value);
typedef CUresult (CUDAAPI *PFN_cuDeviceGetGraphMemAttribute)(CUdevice device, CUgraphMem_attribute attr, void *value);

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion);
typedef CUresult (CUDAAPI *PFN_cuDriverGetVersion)(int *driverVersion);

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal);
typedef CUresult (CUDAAPI *PFN_cuDeviceGet)(CUdevice *device, int ordinal);

CUresult CUDAAPI cuDeviceGetCount(int *count);
typedef CUresult (CUDAAPI *PFN_cuDeviceGetCount)(int *count);

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev);
typedef CUresult (CUDAAPI *PFN_cuDeviceGetAttribute)(int *pi, CUdevice_attribute attrib, CUdevice dev);

CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
typedef CUresult (CUDAAPI *PFN_cuDeviceGetUuid)(CUuuid *uuid, CUdevice dev);

CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev);
typedef CUresult (CUDAAPI *PFN_cuDeviceGetUuid_v2)(CUuuid *uuid, CUdevice dev);

CUresult CUDAAPI cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev);
typedef CUresult (CUDAAPI *PFN_cuDeviceGetPCIBusId)(char *pciBusId, int len, CUdevice dev);

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx);
typedef CUresult (CUDAAPI *PFN_cuCtxGetCurrent)(CUcontext *pctx);

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device);
typedef CUresult (CUDAAPI *PFN_cuCtxGetDevice)(CUdevice *device);

CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx);
typedef CUresult (CUDAAPI *PFN_cuCtxPushCurrent_v2)(CUcontext ctx);

CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx);
typedef CUresult (CUDAAPI *PFN_cuCtxPopCurrent_v2)(CUcontext *pctx);

CUresult CUDAAPI cuCtxSynchronize(void);
typedef CUresult (CUDAAPI *PFN_cuCtxSynchronize)(void);

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active);
typedef CUresult (CUDAAPI *PFN_cuDevicePrimaryCtxGetState)(CUdevice dev, unsigned int *flags, int *active);

CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr);
typedef CUresult (CUDAAPI *PFN_cuPointerGetAttribute)(void *data, CUpointer_attribute attribute, CUdeviceptr ptr);

CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr);
typedef CUresult (CUDAAPI *PFN_cuMemGetAddressRange_v2)(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr);

CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle);
typedef CUresult (CUDAAPI *PFN_cuMemGetAllocationPropertiesFromHandle)(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle);

CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
typedef CUresult (CUDAAPI *PFN_cuMemPoolGetAttribute)(CUmemoryPool pool, CUmemPool_attribute attr, void *value);

CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev);
typedef CUresult (CUDAAPI *PFN_cuDeviceGetDefaultMemPool)(CUmemoryPool *pool_out, CUdevice dev);

CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep);
typedef CUresult (CUDAAPI *PFN_cuMemPoolTrimTo)(CUmemoryPool pool, size_t minBytesToKeep);

CUresult CUDAAPI cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *pArrayDescriptor, CUarray hArray);
typedef CUresult (CUDAAPI *PFN_cuArrayGetDescriptor_v2)(CUDA_ARRAY_DESCRIPTOR *pArrayDescriptor, CUarray hArray);

CUresult CUDAAPI cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *pArrayDescriptor, CUarray hArray);
typedef CUresult (CUDAAPI *PFN_cuArray3DGetDescriptor_v2)(CUDA_ARRAY3D_DESCRIPTOR *pArrayDescriptor, CUarray hArray);

CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus);
typedef CUresult (CUDAAPI *PFN_cuStreamIsCapturing)(CUstream hStream, CUstreamCaptureStatus *captureStatus);

CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus);
typedef CUresult (CUDAAPI *PFN_cuStreamIsCapturing_ptsz)(CUstream hStream, CUstreamCaptureStatus *captureStatus);

CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream);
typedef CUresult (CUDAAPI *PFN_cuStreamBeginCapture)(CUstream hStream);

CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream hStream);
typedef CUresult (CUDAAPI *PFN_cuStreamBeginCapture_ptsz)(CUstream hStream);

CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode);
typedef CUresult (CUDAAPI *PFN_cuStreamBeginCapture_v2)(CUstream hStream, CUstreamCaptureMode mode);

CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode);
typedef CUresult (CUDAAPI *PFN_cuStreamBeginCapture_v2_ptsz)(CUstream hStream, CUstreamCaptureMode mode);

CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out, CUgraph *graph_out, const CUgraphNode **dependencies_out, size_t *numDependencies_out);
typedef CUresult (CUDAAPI *PFN_cuStreamGetCaptureInfo_v2)(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out, CUgraph *graph_out, const CUgraphNode **dependencies_out, size_t *numDependencies_out);

CUresult CUDAAPI cuStreamQuery(CUstream hStream);
typedef CUresult (CUDAAPI *PFN_cuStreamQuery)(CUstream hStream);

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream);
typedef CUresult (CUDAAPI *PFN_cuStreamSynchronize)(CUstream hStream);

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags);
typedef CUresult (CUDAAPI *PFN_cuEventCreate)(CUevent *phEvent, unsigned int Flags);

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream);
typedef CUresult (CUDAAPI *PFN_cuEventRecord)(CUevent hEvent, CUstream hStream);

CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream);
typedef CUresult (CUDAAPI *PFN_cuEventRecord_ptsz)(CUevent hEvent, CUstream hStream);

CUresult CUDAAPI cuEventQuery(CUevent hEvent);
typedef CUresult (CUDAAPI *PFN_cuEventQuery)(CUevent hEvent);

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent);
typedef CUresult (CUDAAPI *PFN_cuEventSynchronize)(CUevent hEvent);

CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
typedef CUresult (CUDAAPI *PFN_cuEventElapsedTime)(float *pMilliseconds, CUevent hStart, CUevent hEnd);

CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent);
typedef CUresult (CUDAAPI *PFN_cuEventDestroy_v2)(CUevent hEvent);

CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes);
typedef CUresult (CUDAAPI *PFN_cuGraphGetNodes)(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes);

CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type);
typedef CUresult (CUDAAPI *PFN_cuGraphNodeGetType)(CUgraphNode hNode, CUgraphNodeType *type);

CUresult CUDAAPI cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS *nodeParams);
typedef CUresult (CUDAAPI *PFN_cuGraphKernelNodeGetParams_v2)(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS *nodeParams);

CUresult CUDAAPI cuGraphExecGetFlags(CUgraphExec hGraphExec, cuuint64_t *flags);
typedef CUresult (CUDAAPI *PFN_cuGraphExecGetFlags)(CUgraphExec hGraphExec, cuuint64_t *flags);

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags);
typedef CUresult (CUDAAPI *PFN_cuGraphInstantiateWithFlags)(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags);

CUresult CUDAAPI cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId);
typedef CUresult (CUDAAPI *PFN_cuGetExportTable)(const void **ppExportTable, const CUuuid *pExportTableId);

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr);
typedef CUresult (CUDAAPI *PFN_cuGetErrorName)(CUresult error, const char **pStr);

CUresult CUDAAPI cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out, CUgraph *graph_out, const CUgraphNode **dependencies_out, size_t *numDependencies_out);
typedef CUresult (CUDAAPI *PFN_cuStreamGetCaptureInfo_v2_ptsz)(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out, CUgraph *graph_out, const CUgraphNode **dependencies_out, size_t *numDependencies_out);

CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream);
typedef CUresult (CUDAAPI *PFN_cuStreamQuery_ptsz)(CUstream hStream);

CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream);
typedef CUresult (CUDAAPI *PFN_cuStreamSynchronize_ptsz)(CUstream hStream);

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr);
typedef CUresult (CUDAAPI *PFN_cuGetErrorString)(CUresult error, const char **pStr);

CUresult CUDAAPI cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device);
typedef CUresult (CUDAAPI *PFN_cuMemAdvise)(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device);

CUresult CUDAAPI cuStreamGetCtx(CUstream hStream, CUcontext *pctx);
typedef CUresult (CUDAAPI *PFN_cuStreamGetCtx)(CUstream hStream, CUcontext *pctx);

CUresult CUDAAPI cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx);
typedef CUresult (CUDAAPI *PFN_cuStreamGetCtx_ptsz)(CUstream hStream, CUcontext *pctx);

CUresult CUDAAPI cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd);
typedef CUresult (CUDAAPI *PFN_cuEventElapsedTime_v2)(float *pMilliseconds, CUevent hStart, CUevent hEnd);

CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode);
typedef CUresult (CUDAAPI *PFN_cuThreadExchangeStreamCaptureMode)(CUstreamCaptureMode *mode);

#ifdef __cplusplus
}
#endif

#endif /* !VGPU_TYPES_ONLY */
#endif /* VGPU_CUDA_PROTOTYPES_SECTION */
