/*
 * vgpu_nvml.h -- the subset of NVML (nvml.h, CUDA 12.9 / NVML API 12) that
 * libvgpu uses or exports.
 *
 * Hand-written declarations with NVIDIA's exact names, values and layouts.
 * tests/abi_conformance.rs checks them against NVIDIA's nvml.h (compiled with
 * NVML_NO_UNVERSIONED_FUNC_DEFS, so the unversioned v1 entry points such as
 * nvmlInit and nvmlDeviceGetComputeRunningProcesses keep their own names).
 * This header never renames functions: every name is the exported symbol.
 *
 * Sections: types (skipped with VGPU_PROTOTYPES_ONLY), functions
 * (prototypes + PFN_<symbol> typedefs; skipped with VGPU_TYPES_ONLY).
 */
#ifndef VGPU_NVML_TYPES_SECTION
#ifndef VGPU_PROTOTYPES_ONLY
#define VGPU_NVML_TYPES_SECTION

#ifdef __cplusplus
extern "C" {
#endif

#define NVML_API_VERSION 12

/* Versioned-struct tag: size | version << 24 (nvml.h). */
#define NVML_STRUCT_VERSION(data, ver) (unsigned int)(sizeof(nvml ## data ## _v ## ver ## _t) | \
                                                      (ver << 24U))

#define NVML_VALUE_NOT_AVAILABLE (-1)

typedef struct nvmlDevice_st *nvmlDevice_t;

typedef enum nvmlReturn_enum {
    NVML_SUCCESS                         = 0,
    NVML_ERROR_UNINITIALIZED             = 1,
    NVML_ERROR_INVALID_ARGUMENT          = 2,
    NVML_ERROR_NOT_SUPPORTED             = 3,
    NVML_ERROR_NO_PERMISSION             = 4,
    NVML_ERROR_ALREADY_INITIALIZED       = 5,
    NVML_ERROR_NOT_FOUND                 = 6,
    NVML_ERROR_INSUFFICIENT_SIZE         = 7,
    NVML_ERROR_INSUFFICIENT_POWER        = 8,
    NVML_ERROR_DRIVER_NOT_LOADED         = 9,
    NVML_ERROR_TIMEOUT                   = 10,
    NVML_ERROR_IRQ_ISSUE                 = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND         = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND        = 13,
    NVML_ERROR_CORRUPTED_INFOROM         = 14,
    NVML_ERROR_GPU_IS_LOST               = 15,
    NVML_ERROR_RESET_REQUIRED            = 16,
    NVML_ERROR_OPERATING_SYSTEM          = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH   = 18,
    NVML_ERROR_IN_USE                    = 19,
    NVML_ERROR_MEMORY                    = 20,
    NVML_ERROR_NO_DATA                   = 21,
    NVML_ERROR_VGPU_ECC_NOT_SUPPORTED    = 22,
    NVML_ERROR_INSUFFICIENT_RESOURCES    = 23,
    NVML_ERROR_FREQ_NOT_SUPPORTED        = 24,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_DEPRECATED                = 26,
    NVML_ERROR_NOT_READY                 = 27,
    NVML_ERROR_GPU_NOT_FOUND             = 28,
    NVML_ERROR_INVALID_STATE             = 29,
    NVML_ERROR_UNKNOWN                   = 999
} nvmlReturn_t;

/* nvmlInitWithFlags flags. */
#define NVML_INIT_FLAG_NO_GPUS   1
#define NVML_INIT_FLAG_NO_ATTACH 2

/* Buffer sizes. */
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE     32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE  16
#define NVML_DEVICE_UUID_ASCII_LEN             41
#define NVML_DEVICE_UUID_BINARY_LEN            16
#define NVML_DEVICE_UUID_BUFFER_SIZE           80
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE        96
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE   80
#define NVML_DEVICE_NAME_BUFFER_SIZE           64
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE        96

typedef struct nvmlPciInfo_st {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

typedef struct nvmlUtilization_st {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

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

/* = 0x02000028 on LP64. */
#define nvmlMemory_v2 NVML_STRUCT_VERSION(Memory, 2)

/* nvmlDeviceGetComputeRunningProcesses (v1): 16 bytes. */
typedef struct nvmlProcessInfo_v1_st {
    unsigned int       pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

/* _v2 and _v3 both use this 24-byte layout (nvmlProcessInfo_t). */
typedef struct nvmlProcessInfo_v2_st {
    unsigned int       pid;
    unsigned long long usedGpuMemory;
    unsigned int       gpuInstanceId;
    unsigned int       computeInstanceId;
} nvmlProcessInfo_v2_t, nvmlProcessInfo_t;

typedef struct nvmlProcessUtilizationSample_st {
    unsigned int       pid;
    unsigned long long timeStamp;
    unsigned int       smUtil;
    unsigned int       memUtil;
    unsigned int       encUtil;
    unsigned int       decUtil;
} nvmlProcessUtilizationSample_t;

#ifdef __cplusplus
}
#endif

#endif /* !VGPU_PROTOTYPES_ONLY */
#endif /* VGPU_NVML_TYPES_SECTION */

/* ================================================================== */
/* Functions: prototypes and PFN_<exported symbol> typedefs            */
/* ================================================================== */
#ifndef VGPU_NVML_PROTOTYPES_SECTION
#ifndef VGPU_TYPES_ONLY
#define VGPU_NVML_PROTOTYPES_SECTION

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Exported by libvgpu (hooks) ---- */
nvmlReturn_t nvmlInit(void);
typedef nvmlReturn_t (*PFN_nvmlInit)(void);

nvmlReturn_t nvmlInit_v2(void);
typedef nvmlReturn_t (*PFN_nvmlInit_v2)(void);

nvmlReturn_t nvmlInitWithFlags(unsigned int flags);
typedef nvmlReturn_t (*PFN_nvmlInitWithFlags)(unsigned int flags);

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetMemoryInfo)(nvmlDevice_t device, nvmlMemory_t *memory);

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetMemoryInfo_v2)(nvmlDevice_t device, nvmlMemory_v2_t *memory);

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v1_t *infos);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetComputeRunningProcesses)(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v1_t *infos);

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v2_t *infos);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetComputeRunningProcesses_v2)(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v2_t *infos);

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetComputeRunningProcesses_v3)(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos);

/* ---- Called by libvgpu (resolved from the real NVML) ---- */
nvmlReturn_t nvmlShutdown(void);
typedef nvmlReturn_t (*PFN_nvmlShutdown)(void);

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetCount_v2)(unsigned int *deviceCount);

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetHandleByIndex_v2)(unsigned int index, nvmlDevice_t *device);

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetIndex)(nvmlDevice_t device, unsigned int *index);

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetUUID)(nvmlDevice_t device, char *uuid, unsigned int length);

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetPciInfo_v3)(nvmlDevice_t device, nvmlPciInfo_t *pci);

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization, unsigned int *processSamplesCount, unsigned long long lastSeenTimeStamp);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetProcessUtilization)(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization, unsigned int *processSamplesCount, unsigned long long lastSeenTimeStamp);

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetUtilizationRates)(nvmlDevice_t device, nvmlUtilization_t *utilization);

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length);
typedef nvmlReturn_t (*PFN_nvmlSystemGetDriverVersion)(char *version, unsigned int length);

const char *nvmlErrorString(nvmlReturn_t result);
typedef const char *(*PFN_nvmlErrorString)(nvmlReturn_t result);

#ifdef __cplusplus
}
#endif

#endif /* !VGPU_TYPES_ONLY */
#endif /* VGPU_NVML_PROTOTYPES_SECTION */
