/* Minimal CUDA driver / NVML declarations for the integration-test clients.
 * Hand-written on purpose: the tests must not depend on include/ (owned by the shim). */
#ifndef VGPU_TEST_CUDA_MIN_H
#define VGPU_TEST_CUDA_MIN_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long cuuint64_t;
typedef int CUdriverProcAddressQueryResult;
typedef struct CUuuid_st { char bytes[16]; } CUuuid;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_NOT_FOUND 500
#define CU_GET_PROC_ADDRESS_DEFAULT 0
#define CU_GET_PROC_ADDRESS_LEGACY_STREAM 1
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 2

/* Kernel image accepted by the simulated driver's cuModuleLoadData and the function name in it.
 * (The simulated driver does not execute kernels; see sim/cuda.) */
#define VGPU_TEST_IMAGE "vgpu-sim-module\nkernel vgpu_test_kernel\n"
#define VGPU_TEST_KERNEL "vgpu_test_kernel"

#define MIB (1024ULL * 1024ULL)

/* Driver API, exact exported (ABI) names. */
CUresult cuInit(unsigned int flags);
CUresult cuDriverGetVersion(int *v);
CUresult cuDeviceGet(CUdevice *dev, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxSynchronize(void);
CUresult cuMemGetInfo_v2(size_t *free, size_t *total);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name);
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shmem, CUstream s, void **params, void **extra);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus);

/* Function pointer types (for dlsym / cuGetProcAddress clients). */
typedef CUresult (*PFN_cuInit)(unsigned int);
typedef CUresult (*PFN_cuDriverGetVersion)(int *);
typedef CUresult (*PFN_cuDeviceGet)(CUdevice *, int);
typedef CUresult (*PFN_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
typedef CUresult (*PFN_cuCtxSetCurrent)(CUcontext);
typedef CUresult (*PFN_cuCtxSynchronize)(void);
typedef CUresult (*PFN_cuMemGetInfo)(size_t *, size_t *);
typedef CUresult (*PFN_cuMemAlloc)(CUdeviceptr *, size_t);
typedef CUresult (*PFN_cuMemFree)(CUdeviceptr);
typedef CUresult (*PFN_cuModuleLoadData)(CUmodule *, const void *);
typedef CUresult (*PFN_cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
typedef CUresult (*PFN_cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                       unsigned, unsigned, CUstream, void **, void **);
typedef CUresult (*PFN_cuGetExportTable)(const void **, const CUuuid *);
typedef CUresult (*PFN_cuGetProcAddress_v1)(const char *, void **, int, cuuint64_t);
typedef CUresult (*PFN_cuGetProcAddress_v2)(const char *, void **, int, cuuint64_t,
                                            CUdriverProcAddressQueryResult *);

/* NVML. */
typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlMemory_st {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *dev);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *mem);

typedef nvmlReturn_t (*PFN_nvmlInit_v2)(void);
typedef nvmlReturn_t (*PFN_nvmlShutdown)(void);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetHandleByIndex_v2)(unsigned int, nvmlDevice_t *);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetMemoryInfo)(nvmlDevice_t, nvmlMemory_t *);

/* ---- output helpers: machine-readable key=value lines on stdout ---- */

/* Print `key=<rc>`; on a non-zero result exit(1) (an unexpected error). */
#define CHECK(key, expr)                                                                           \
    do {                                                                                           \
        int rc_ = (int)(expr);                                                                     \
        printf("%s=%d\n", (key), rc_);                                                             \
        fflush(stdout);                                                                            \
        if (rc_ != 0) {                                                                            \
            fprintf(stderr, "unexpected error: %s -> %d\n", #expr, rc_);                           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Require a non-NULL pointer (resolved symbol); print `key=1` or exit(1). */
#define NONNULL(key, p)                                                                            \
    do {                                                                                           \
        if ((p) == NULL) {                                                                         \
            printf("%s=0\n", (key));                                                               \
            fprintf(stderr, "unexpected NULL: %s\n", #p);                                          \
            exit(1);                                                                               \
        }                                                                                          \
        printf("%s=1\n", (key));                                                                   \
    } while (0)

static inline void kv_u64(const char *key, unsigned long long v) { printf("%s=%llu\n", key, v); }
static inline void kv_int(const char *key, long long v) { printf("%s=%lld\n", key, v); }
static inline void kv_str(const char *key, const char *v) { printf("%s=%s\n", key, v); }

/* 1 if /proc/self/maps contains `needle` in a mapped path. */
static inline int maps_contains(const char *needle) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    char line[4096];
    int found = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, needle)) found = 1;
    fclose(f);
    return found;
}



#ifdef VGPU_TEST_WANT_DL
#include <dlfcn.h>
/* Basename of the object that contains `p` (dladdr), or "none". */
static inline const char *obj_of(const void *p) {
    Dl_info info;
    if (p == NULL || !dladdr(p, &info) || info.dli_fname == NULL) return "none";
    const char *s = strrchr(info.dli_fname, '/');
    return s ? s + 1 : info.dli_fname;
}
#endif /* VGPU_TEST_WANT_DL */

#endif /* VGPU_TEST_CUDA_MIN_H */
