/* The README's main job: a CUDA driver-API client that loads the driver the way libcudart does
 * (dlopen + cuGetProcAddress_v2 only) and shows what it sees under libvgpu: the memory view,
 * allocations up to the limit, the refusal past it, and its share of GPU time under an SM limit. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream, *CUevent;
typedef CUresult (*gpa_t)(const char *, void **, int, unsigned long long, int *);

static gpa_t gpa;
static void *get(const char *name, int version) {
    void *p = NULL;
    int status = 0;
    if (gpa(name, &p, version, 0, &status) != 0 || !p) {
        fprintf(stderr, "demo: %s not found\n", name);
        exit(2);
    }
    return p;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { fprintf(stderr, "demo: %s\n", dlerror()); return 1; }
    gpa_t first = (gpa_t)dlsym(h, "cuGetProcAddress_v2");
    void *p = NULL; int st = 0;
    first("cuGetProcAddress", &p, 12000, 0, &st);
    gpa = (gpa_t)p;

    CUresult (*cuInit)(unsigned) = get("cuInit", 2000);
    CUresult (*cuDeviceGet)(int *, int) = get("cuDeviceGet", 2000);
    CUresult (*cuRetain)(CUcontext *, int) = get("cuDevicePrimaryCtxRetain", 7000);
    CUresult (*cuSetCur)(CUcontext) = get("cuCtxSetCurrent", 4000);
    CUresult (*cuMemGetInfo)(size_t *, size_t *) = get("cuMemGetInfo", 3020);
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t) = get("cuMemAlloc", 3020);
    CUresult (*cuMemFree)(CUdeviceptr) = get("cuMemFree", 3020);
    CUresult (*cuModuleLoadData)(CUmodule *, const void *) = get("cuModuleLoadData", 2000);
    CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *) = get("cuModuleGetFunction", 2000);
    CUresult (*cuLaunch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         CUstream, void **, void **) = get("cuLaunchKernel", 4000);
    CUresult (*cuCtxSync)(void) = get("cuCtxSynchronize", 2000);

    int dev; CUcontext ctx;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuRetain(&ctx, dev) || cuSetCur(ctx)) { fprintf(stderr, "demo: init failed\n"); return 1; }

    size_t fr, tot;
    cuMemGetInfo(&fr, &tot);
    printf("cuMemGetInfo: total=%zu MiB free=%zu MiB\n", tot >> 20, fr >> 20);

    CUdeviceptr bufs[4096];
    int n = 0;
    CUresult r = 0;
    const size_t chunk = 256u << 20;
    while (n < 4096 && (r = cuMemAlloc(&bufs[n], chunk)) == 0) n++;
    printf("allocated %d x 256 MiB = %d MiB, next allocation -> CUresult %d%s\n", n, n * 256, r,
           r == 2 ? " (CUDA_ERROR_OUT_OF_MEMORY)" : "");
    cuMemGetInfo(&fr, &tot);
    printf("cuMemGetInfo: total=%zu MiB free=%zu MiB\n", tot >> 20, fr >> 20);
    for (int i = 0; i < n; i++) cuMemFree(bufs[i]);
    cuMemGetInfo(&fr, &tot);
    printf("after freeing: free=%zu MiB\n", fr >> 20);

    CUmodule mod; CUfunction fn;
    static const char image[] = "demo-kernel";
    cuModuleLoadData(&mod, image);
    cuModuleGetFunction(&fn, mod, "spin");
    /* 1000 blocks = 1 ms of simulated GPU time per launch (VGPU_SIM_NS_PER_BLOCK=1000). */
    double t0 = now_s(), busy = 0;
    int launches = 0;
    while (now_s() - t0 < 3.0) {
        cuLaunch(fn, 1000, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL);
        busy += 1e-3;
        launches++;
    }
    cuCtxSync();
    double wall = now_s() - t0;
    printf("launched %d kernels of 1 ms in %.2f s: GPU busy %.0f%% of the time\n", launches, wall, 100.0 * busy / wall);
    return 0;
}
