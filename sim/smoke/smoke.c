/* Hand-run smoke test of the simulated GPU (see sim/smoke/run.sh).
 * Loads libcuda.so.1 / libnvidia-ml.so.1 the way real clients do (dlopen + dlsym), checks the
 * cuGetProcAddress table against dlsym, memory accounting across processes (NVML sees a child's
 * memory; it disappears after exit and after SIGKILL), and utilisation of a 50 % duty-cycle child. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef void *CUcontext, *CUstream, *CUevent, *CUmodule, *CUfunction, *CUgraph, *CUgraphExec, *CUgraphNode,
    *CUmemoryPool;
typedef unsigned long long CUdeviceptr;
typedef void *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; unsigned int gi, ci; } nvmlProcessInfo_t;
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; } nvmlProcessInfo_v1_t;
typedef struct { unsigned int pid; unsigned long long timeStamp; unsigned int sm, mem, enc, dec; } nvmlSample_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { char legacy[16]; unsigned domain, bus, device, pciDeviceId, pciSubSystemId; char busId[32]; } nvmlPciInfo_t;

static void *cu, *nv;
static int failures;

#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            failures++;                                                                        \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                    \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fprintf(stderr, "\n");                                                             \
        }                                                                                      \
    } while (0)

static void *sym(void *h, const char *n) {
    void *p = dlsym(h, n);
    if (!p) {
        fprintf(stderr, "missing symbol %s\n", n);
        exit(2);
    }
    return p;
}
#define CU(name, ...) ((CUresult(*)(__VA_ARGS__))sym(cu, #name))
#define NV(name, ...) ((int (*)(__VA_ARGS__))sym(nv, #name))

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static unsigned long long wall_us(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec * 1000000ull + tv.tv_usec;
}

/* ---- child modes ---- */
static int child(const char *mode, int mib, int wfd) {
    CUcontext ctx;
    CUdeviceptr p = 0;
    if (CU(cuInit, unsigned)(0)) return 10;
    if (CU(cuDevicePrimaryCtxRetain, CUcontext *, int)(&ctx, 0)) return 11;
    if (CU(cuCtxSetCurrent, CUcontext)(ctx)) return 12;
    if (mib && CU(cuMemAlloc_v2, CUdeviceptr *, size_t)(&p, (size_t)mib << 20)) return 13;
    if (write(wfd, "r", 1) != 1) return 14;
    if (!strcmp(mode, "hold")) {
        pause();
    } else if (!strcmp(mode, "duty")) { /* 10 ms kernel, sync, 10 ms idle, for ~3 s */
        CUmodule m;
        CUfunction f;
        char img[16] = "fake";
        CU(cuModuleLoadData, CUmodule *, const void *)(&m, img);
        CU(cuModuleGetFunction, CUfunction *, CUmodule, const char *)(&f, m, "k");
        double end = now_s() + 3.0;
        while (now_s() < end) {
            CU(cuLaunchKernel, CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
               CUstream, void **, void **)(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
            CU(cuCtxSynchronize, void)();
            usleep(10000);
        }
    }
    return 0;
}

static pid_t spawn(char **argv0, const char *mode, int mib, const char *extra_env) {
    int fds[2];
    if (pipe(fds)) exit(3);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        char fd[16], m[16];
        snprintf(fd, sizeof fd, "%d", fds[1]);
        snprintf(m, sizeof m, "%d", mib);
        if (extra_env) putenv((char *)extra_env);
        execl(argv0[0], argv0[0], "child", mode, m, fd, (char *)NULL);
        _exit(99);
    }
    close(fds[1]);
    char c;
    CHECK(read(fds[0], &c, 1) == 1, "child %s did not get ready", mode);
    close(fds[0]);
    return pid;
}

/* Find pid in NVML's compute processes of device 0 (v3 API); returns used bytes or 0. */
static unsigned long long nvml_proc_used(nvmlDevice_t d, unsigned pid, unsigned *nproc) {
    nvmlProcessInfo_t infos[64];
    unsigned n = 0;
    int r = NV(nvmlDeviceGetComputeRunningProcesses_v3, nvmlDevice_t, unsigned *, nvmlProcessInfo_t *)(d, &n, NULL);
    CHECK(r == 0 || r == 7, "count query r=%d", r);
    n = 64;
    r = NV(nvmlDeviceGetComputeRunningProcesses_v3, nvmlDevice_t, unsigned *, nvmlProcessInfo_t *)(d, &n, infos);
    CHECK(r == 0, "processes r=%d", r);
    *nproc = n;
    for (unsigned i = 0; i < n; i++)
        if (infos[i].pid == pid) return infos[i].usedGpuMemory;
    return 0;
}

/* ---- CUDA_VISIBLE_DEVICES: `smoke visible <physical list>` checks that CUDA ordinal i is physical
 * (NVML) device list[i], in and out of every device-taking entry point; NVML ignores the variable. */
static void uuid_str(const unsigned char *u, char *s) {
    sprintf(s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3], u[4],
            u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

static int visible_test(const char *list) {
    int phys[8], nvis = 0;
    for (const char *p = list; *p; p++)
        if (*p >= '0' && *p <= '9') phys[nvis++] = *p - '0';
    CHECK(NV(nvmlInit_v2, void)() == 0, "nvmlInit");
    unsigned nnv = 0;
    CHECK(NV(nvmlDeviceGetCount_v2, unsigned *)(&nnv) == 0 && nnv == 2, "NVML ignores CUDA_VISIBLE_DEVICES: %u", nnv);
    if (nvis == 0) {
        int n = -1;
        CHECK(CU(cuInit, unsigned)(0) == 100, "no visible device -> CUDA_ERROR_NO_DEVICE");
        CHECK(CU(cuDeviceGetCount, int *)(&n) == 3, "count without init");
        goto done;
    }
    CHECK(CU(cuInit, unsigned)(0) == 0, "cuInit");
    int n = -1, dev = -1, v = 0;
    CHECK(CU(cuDeviceGetCount, int *)(&n) == 0 && n == nvis, "count %d, expected %d", n, nvis);
    CHECK(CU(cuDeviceGet, int *, int)(&dev, nvis) == 101, "ordinal %d invalid", nvis);
    CHECK(CU(cuDeviceGetAttribute, int *, int, int)(&v, 16, nvis) == 101, "attribute of ordinal %d", nvis);
    unsigned me = getpid(), np;
    for (int o = 0; o < nvis; o++) {
        nvmlDevice_t nd;
        CHECK(NV(nvmlDeviceGetHandleByIndex_v2, unsigned, nvmlDevice_t *)(phys[o], &nd) == 0, "nvml handle %d", phys[o]);
        char nuuid[96], cuuid[96], bus[32];
        unsigned char u[16];
        NV(nvmlDeviceGetUUID, nvmlDevice_t, char *, unsigned)(nd, nuuid, sizeof nuuid);
        CHECK(CU(cuDeviceGet, int *, int)(&dev, o) == 0 && dev == o, "cuDeviceGet %d -> %d", o, dev);
        CHECK(CU(cuDeviceGetUuid, void *, int)(u, o) == 0, "uuid v1");
        uuid_str(u, cuuid);
        CHECK(!strcasecmp(cuuid, nuuid), "ordinal %d uuid v1 %s, NVML %d %s", o, cuuid, phys[o], nuuid);
        CHECK(CU(cuDeviceGetUuid_v2, void *, int)(u, o) == 0, "uuid v2");
        uuid_str(u, cuuid);
        CHECK(!strcasecmp(cuuid, nuuid), "ordinal %d uuid v2 %s, NVML %d %s", o, cuuid, phys[o], nuuid);
        nvmlPciInfo_t pci;
        NV(nvmlDeviceGetPciInfo_v3, nvmlDevice_t, nvmlPciInfo_t *)(nd, &pci);
        CHECK(CU(cuDeviceGetPCIBusId, char *, int, int)(bus, sizeof bus, o) == 0 && !strcasecmp(bus, pci.legacy),
              "ordinal %d bus %s, NVML %s", o, bus, pci.legacy);
        CHECK(CU(cuDeviceGetAttribute, int *, int, int)(&v, 33, o) == 0 && (unsigned)v == pci.bus, "PCI_BUS_ID attr %d", v);
        CHECK(CU(cuDeviceGetByPCIBusId, int *, const char *)(&dev, bus) == 0 && dev == o, "by bus id %s -> %d", bus, dev);
        nvmlMemory_t mem;
        size_t tot = 0;
        NV(nvmlDeviceGetMemoryInfo, nvmlDevice_t, nvmlMemory_t *)(nd, &mem);
        CHECK(CU(cuDeviceTotalMem_v2, size_t *, int)(&tot, o) == 0 && tot == mem.total, "total %zu vs %llu", tot, mem.total);

        CUcontext ctx;
        CHECK(CU(cuDevicePrimaryCtxRetain, CUcontext *, int)(&ctx, o) == 0, "retain %d", o);
        CHECK(CU(cuCtxSetCurrent, CUcontext)(ctx) == 0, "set current");
        CHECK(CU(cuCtxGetDevice, int *)(&dev) == 0 && dev == o, "cuCtxGetDevice %d, expected %d", dev, o);
        unsigned long long base = nvml_proc_used(nd, me, &np);
        CHECK(base == 256ull << 20, "context on ordinal %d charged to NVML %d: %llu", o, phys[o], base);
        CUdeviceptr a = 0;
        CHECK(CU(cuMemAlloc_v2, CUdeviceptr *, size_t)(&a, 10 << 20) == 0, "alloc");
        CHECK(nvml_proc_used(nd, me, &np) == base + (10 << 20), "alloc on ordinal %d shows on NVML %d", o, phys[o]);
        CHECK(CU(cuPointerGetAttribute, void *, int, CUdeviceptr)(&dev, 9, a) == 0 && dev == o, "pointer ordinal %d", dev);
        CU(cuMemFree_v2, CUdeviceptr)(a);
        CUmemoryPool pool;
        CHECK(CU(cuDeviceGetDefaultMemPool, CUmemoryPool *, int)(&pool, o) == 0, "default pool");
        CHECK(CU(cuMemAllocFromPoolAsync, CUdeviceptr *, size_t, CUmemoryPool, CUstream)(&a, 2 << 20, pool, NULL) == 0, "pool alloc");
        CHECK(nvml_proc_used(nd, me, &np) == base + (2 << 20), "default pool of ordinal %d on NVML %d", o, phys[o]);
        CU(cuMemFreeAsync, CUdeviceptr, CUstream)(a, NULL);
        CU(cuStreamSynchronize, CUstream)(NULL);
        struct { int atype, htypes, ltype, lid; void *w; size_t max; unsigned short usage; unsigned char r[54]; } pp = {1, 0, 1, o};
        CHECK(CU(cuMemPoolCreate, CUmemoryPool *, void *)(&pool, &pp) == 0, "pool create at ordinal %d", o);
        CHECK(CU(cuMemAllocFromPoolAsync, CUdeviceptr *, size_t, CUmemoryPool, CUstream)(&a, 2 << 20, pool, NULL) == 0, "pool alloc");
        CHECK(nvml_proc_used(nd, me, &np) == base + (2 << 20), "created pool of ordinal %d on NVML %d", o, phys[o]);
        CU(cuMemFreeAsync, CUdeviceptr, CUstream)(a, NULL);
        CU(cuStreamSynchronize, CUstream)(NULL);
        CHECK(CU(cuMemPoolDestroy, CUmemoryPool)(pool) == 0, "pool destroy");
        struct { int type, htypes, ltype, lid; void *w; unsigned char c, g; unsigned short u; unsigned char r[4]; } prop = {1, 0, 1, o};
        size_t gran = 0;
        CHECK(CU(cuMemGetAllocationGranularity, size_t *, void *, int)(&gran, &prop, 0) == 0, "granularity %d", o);
        unsigned long long vh;
        CHECK(CU(cuMemCreate, unsigned long long *, size_t, void *, unsigned long long)(&vh, 4 << 20, &prop, 0) == 0, "cuMemCreate");
        CHECK(nvml_proc_used(nd, me, &np) == base + (4 << 20), "cuMemCreate at ordinal %d on NVML %d", o, phys[o]);
        CU(cuMemRelease, unsigned long long)(vh);
        prop.lid = nvis;
        CHECK(CU(cuMemGetAllocationGranularity, size_t *, void *, int)(&gran, &prop, 0) != 0, "granularity, id %d", nvis);
        CHECK(CU(cuDevicePrimaryCtxRelease_v2, int)(o) == 0, "release");
        CHECK(CU(cuCtxGetDevice, int *)(&dev) != 0, "cuCtxGetDevice after the release must fail");
        CHECK(nvml_proc_used(nd, me, &np) == 0, "all released on NVML %d", phys[o]);
        /* a created context too */
        CHECK(CU(cuCtxCreate_v2, CUcontext *, unsigned, int)(&ctx, 0, o) == 0, "cuCtxCreate");
        CHECK(CU(cuCtxGetDevice, int *)(&dev) == 0 && dev == o, "cuCtxGetDevice (created) %d", dev);
        CHECK(nvml_proc_used(nd, me, &np) == 256ull << 20, "created context on NVML %d", phys[o]);
        CHECK(CU(cuCtxDestroy_v2, CUcontext)(ctx) == 0, "destroy");
        CHECK(CU(cuCtxGetDevice, int *)(&dev) != 0, "cuCtxGetDevice after the destroy must fail");
    }
done:
    printf("CUDA_VISIBLE_DEVICES=%s: %s: %d failure(s)\n", getenv("CUDA_VISIBLE_DEVICES"), failures ? "FAILED" : "OK", failures);
    return failures != 0;
}

int main(int argc, char **argv) {
    cu = dlopen("libcuda.so.1", RTLD_NOW);
    nv = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!cu || !nv) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    if (argc >= 5 && !strcmp(argv[1], "child")) return child(argv[2], atoi(argv[3]), atoi(argv[4]));
    if (argc >= 3 && !strcmp(argv[1], "visible")) return visible_test(argv[2]);

    typedef CUresult (*gpa2_t)(const char *, void **, int, unsigned long long, int *);
    typedef CUresult (*gpa1_t)(const char *, void **, int, unsigned long long);
    gpa2_t gpa = (gpa2_t)sym(cu, "cuGetProcAddress_v2");
    void *p = NULL;
    int st = -1;

    /* ---- cuGetProcAddress before cuInit ---- */
    CHECK(gpa("", &p, 0, 0, &st) == 500 && st == 1, "empty name");
    CHECK(gpa("cuNoSuchThing", &p, 12000, 0, &st) == 500 && st == 1 && !p, "unknown");
    CHECK(gpa("cuMemAlloc", &p, 12000, 0, &st) == 0 && st == 0 && p == dlsym(cu, "cuMemAlloc_v2"), "cuMemAlloc@12000");
    CHECK(gpa("cuMemAlloc", &p, 3020, 0, &st) == 0 && p == dlsym(cu, "cuMemAlloc_v2"), "cuMemAlloc@3020");
    CHECK(gpa("cuMemAlloc", &p, 3000, 0, &st) == 500 && st == 2, "cuMemAlloc@3000 -> version not sufficient (st=%d)", st);
    CHECK(gpa("cuLaunchKernel", &p, 12090, 2, &st) == 0 && p == dlsym(cu, "cuLaunchKernel_ptsz"), "ptsz");
    CHECK(gpa("cuLaunchKernel", &p, 12090, 0, &st) == 0 && p == dlsym(cu, "cuLaunchKernel"), "legacy");
    CHECK(gpa("cuMemcpyHtoD", &p, 12090, 2, &st) == 0 && p == dlsym(cu, "cuMemcpyHtoD_v2_ptds"), "ptds");
    CHECK(gpa("cuCtxCreate", &p, 12090, 2, &st) == 0 && p == dlsym(cu, "cuCtxCreate_v4"), "no ptds variant -> normal");
    CHECK(gpa("cuCtxCreate", &p, 11040, 0, &st) == 0 && p == dlsym(cu, "cuCtxCreate_v3"), "v3");
    CHECK(gpa("cuGetProcAddress", &p, 11030, 0, &st) == 0 && p == dlsym(cu, "cuGetProcAddress"), "gpa v1");
    CHECK(gpa("cuGetProcAddress", &p, 12000, 0, &st) == 0 && p == dlsym(cu, "cuGetProcAddress_v2"), "gpa v2");
    CHECK(gpa("cuEventElapsedTime", &p, 12090, 0, &st) == 0 && p == dlsym(cu, "cuEventElapsedTime_v2"), "elapsed v2");
    CHECK(gpa("cuGraphInstantiate", &p, 12000, 0, &st) == 0 && p == dlsym(cu, "cuGraphInstantiateWithFlags"), "alias");
    CHECK(gpa("cuGraphInstantiate", &p, 11040, 0, &st) == 0 && p == dlsym(cu, "cuGraphInstantiate_v2"), "instantiate v2");
    gpa1_t gpa1 = (gpa1_t)sym(cu, "cuGetProcAddress");
    CHECK(gpa1("cuStreamSynchronize", &p, 12000, 2) == 0 && p == dlsym(cu, "cuStreamSynchronize_ptsz"), "v1 abi ptsz");
    CHECK(CU(cuGetExportTable, const void **, const void *)((const void **)&p, "0123456789abcdef") == 801, "export table");
    int n = -1;
    CHECK(CU(cuDeviceGetCount, int *)(&n) == 3, "before cuInit");
    int ver = 0;
    CHECK(CU(cuDriverGetVersion, int *)(&ver) == 0 && ver == 12090, "driver version %d", ver);

    /* ---- init, devices ---- */
    CHECK(CU(cuInit, unsigned)(0) == 0, "cuInit");
    CHECK(CU(cuDeviceGetCount, int *)(&n) == 0 && n >= 1, "count");
    char name[128], bus[32];
    CHECK(CU(cuDeviceGetName, char *, int, int)(name, sizeof name, 0) == 0, "name");
    for (int a = 1; a <= 143; a++) {
        int v;
        CHECK(CU(cuDeviceGetAttribute, int *, int, int)(&v, a, 0) == 0, "attr %d", a);
    }
    int sms = 0;
    CU(cuDeviceGetAttribute, int *, int, int)(&sms, 16, 0);
    CHECK(sms == 132, "SM count %d", sms);
    CHECK(CU(cuDeviceGetAttribute, int *, int, int)(&sms, 144, 0) == 1, "attr 144 invalid");
    CHECK(CU(cuDeviceGetPCIBusId, char *, int, int)(bus, sizeof bus, 0) == 0, "bus id");
    int dev = -1;
    CHECK(CU(cuDeviceGetByPCIBusId, int *, const char *)(&dev, bus) == 0 && dev == 0, "by bus id %s", bus);
    unsigned char uuid[16];
    CHECK(CU(cuDeviceGetUuid_v2, void *, int)(uuid, 0) == 0 && uuid[6] == 0x40 && uuid[8] == 0x80, "uuid");
    CHECK(CU(cuDeviceGetAttribute, int *, int, int)(NULL, 1, 0) == 1, "NULL out-param");

    /* ---- contexts ---- */
    CUcontext ctx = NULL, ctx2 = NULL;
    size_t fr0, tot;
    CHECK(CU(cuMemGetInfo_v2, size_t *, size_t *)(&fr0, &tot) == 201, "no context -> INVALID_CONTEXT");
    CHECK(CU(cuDevicePrimaryCtxRetain, CUcontext *, int)(&ctx, 0) == 0, "retain");
    CHECK(CU(cuDevicePrimaryCtxRelease_v2, int)(0) == 0, "release");
    CHECK(CU(cuCtxSetCurrent, CUcontext)(ctx) == 0, "set current before retain");
    CHECK(CU(cuDevicePrimaryCtxRetain, CUcontext *, int)(&ctx2, 0) == 0 && ctx2 == ctx, "retain again");
    unsigned flags;
    int active;
    CHECK(CU(cuDevicePrimaryCtxGetState, int, unsigned *, int *)(0, &flags, &active) == 0 && active == 1, "state");

    /* ---- NVML ---- */
    CHECK(NV(nvmlInit_v2, void)() == 0, "nvmlInit");
    nvmlDevice_t d;
    CHECK(NV(nvmlDeviceGetHandleByIndex_v2, unsigned, nvmlDevice_t *)(0, &d) == 0, "handle");
    char nuuid[96];
    CHECK(NV(nvmlDeviceGetUUID, nvmlDevice_t, char *, unsigned)(d, nuuid, sizeof nuuid) == 0, "uuid");
    CHECK(!strcmp(nuuid, "GPU-00000000-0000-4000-8000-000000000000"), "uuid %s", nuuid);
    nvmlPciInfo_t pci;
    CHECK(NV(nvmlDeviceGetPciInfo_v3, nvmlDevice_t, nvmlPciInfo_t *)(d, &pci) == 0 && strcasecmp(pci.legacy, bus) == 0,
          "pci %s vs %s", pci.legacy, bus);
    nvmlDevice_t d2;
    CHECK(NV(nvmlDeviceGetHandleByUUID, const char *, nvmlDevice_t *)(nuuid, &d2) == 0 && d2 == d, "by uuid");
    CHECK(NV(nvmlDeviceGetHandleByPciBusId_v2, const char *, nvmlDevice_t *)(pci.busId, &d2) == 0 && d2 == d, "by pci");
    unsigned me = getpid(), np;
    unsigned long long mine = nvml_proc_used(d, me, &np);
    CHECK(mine == 256ull << 20, "own context memory %llu", mine);

    /* ---- memory ---- */
    CUdeviceptr a = 0, b = 0;
    size_t fr1;
    CHECK(CU(cuMemAlloc_v2, CUdeviceptr *, size_t)(&a, (1ull << 30) + 1) == 0, "alloc 1G+1");
    CU(cuMemGetInfo_v2, size_t *, size_t *)(&fr1, &tot);
    CU(cuMemGetInfo_v2, size_t *, size_t *)(&fr0, &tot);
    mine = nvml_proc_used(d, me, &np);
    CHECK(mine == (256ull << 20) + (1ull << 30) + (2 << 20), "2 MiB granularity: %llu", mine);
    nvmlMemory_t mem;
    NV(nvmlDeviceGetMemoryInfo, nvmlDevice_t, nvmlMemory_t *)(d, &mem);
    CHECK(mem.total - mem.used == fr0 && mem.total == tot, "nvml free %llu vs cuMemGetInfo %zu", mem.total - mem.used, fr0);
    nvmlMemory_v2_t m2 = {.version = sizeof(nvmlMemory_v2_t) | (2 << 24)};
    CHECK(NV(nvmlDeviceGetMemoryInfo_v2, nvmlDevice_t, nvmlMemory_v2_t *)(d, &m2) == 0 && m2.used == mem.used, "v2");
    m2.version = 1;
    CHECK(NV(nvmlDeviceGetMemoryInfo_v2, nvmlDevice_t, nvmlMemory_v2_t *)(d, &m2) == 25, "v2 version mismatch");
    char host[4096], back[4096];
    for (int i = 0; i < 4096; i++) host[i] = (char)i;
    CHECK(CU(cuMemcpyHtoD_v2, CUdeviceptr, const void *, size_t)(a + 100, host, 4096) == 0, "HtoD");
    CHECK(CU(cuMemcpyDtoH_v2, void *, CUdeviceptr, size_t)(back, a + 100, 4096) == 0 && !memcmp(host, back, 4096), "DtoH");
    CHECK(CU(cuMemcpy, CUdeviceptr, CUdeviceptr, size_t)((CUdeviceptr)back, a + 100, 16) == 0, "unified memcpy");
    CHECK(CU(cuMemcpyHtoD_v2, CUdeviceptr, const void *, size_t)(a + (1ull << 30) - 10, host, 100) == 1, "overrun");
    CHECK(CU(cuMemsetD8_v2, CUdeviceptr, unsigned char, size_t)(0, 1, 10) == 1, "memset NULL");
    CHECK(CU(cuMemsetD32_v2, CUdeviceptr, unsigned, size_t)(a, 0xdeadbeef, 4) == 0, "memset32");
    CHECK(CU(cuMemFree_v2, CUdeviceptr)(a + 8) == 1, "free interior pointer");
    CHECK(CU(cuMemFree_v2, CUdeviceptr)(a) == 0, "free");
    CHECK(CU(cuMemFree_v2, CUdeviceptr)(a) == 1, "double free");
    size_t pitch;
    CHECK(CU(cuMemAllocPitch_v2, CUdeviceptr *, size_t *, size_t, size_t, unsigned)(&b, &pitch, 1000, 10, 4) == 0 && pitch == 1024, "pitch");
    CU(cuMemFree_v2, CUdeviceptr)(b);
    CHECK(CU(cuMemAlloc_v2, CUdeviceptr *, size_t)(&a, 64ull << 30) == 2, "OOM");

    /* ---- pools ---- */
    CUmemoryPool pool;
    CHECK(CU(cuDeviceGetDefaultMemPool, CUmemoryPool *, int)(&pool, 0) == 0, "default pool");
    CHECK(CU(cuMemAllocAsync, CUdeviceptr *, size_t, CUstream)(&a, 3 << 20, NULL) == 0, "alloc async");
    unsigned long long resv = 0;
    CU(cuMemPoolGetAttribute, CUmemoryPool, int, void *)(pool, 5, &resv);
    CHECK(resv == 4 << 20, "reserved %llu", resv);
    CHECK(CU(cuMemFreeAsync, CUdeviceptr, CUstream)(a, NULL) == 0, "free async");
    CU(cuMemPoolGetAttribute, CUmemoryPool, int, void *)(pool, 5, &resv);
    CHECK(resv == 4 << 20, "reserved kept until sync %llu", resv);
    CU(cuStreamSynchronize, CUstream)(NULL);
    CU(cuMemPoolGetAttribute, CUmemoryPool, int, void *)(pool, 5, &resv);
    CHECK(resv == 0, "trimmed at sync %llu", resv);

    /* ---- launches, events, graphs ---- */
    CUmodule mod;
    CUfunction f, f2;
    CHECK(CU(cuModuleLoadData, CUmodule *, const void *)(&mod, "x") == 0, "module");
    CHECK(CU(cuModuleGetFunction, CUfunction *, CUmodule, const char *)(&f, mod, "k") == 0, "func");
    CU(cuModuleGetFunction, CUfunction *, CUmodule, const char *)(&f2, mod, "k");
    CHECK(f == f2, "stable function handle");
    CUdeviceptr g1, g2;
    size_t gsz;
    CHECK(CU(cuModuleGetGlobal_v2, CUdeviceptr *, size_t *, CUmodule, const char *)(&g1, &gsz, mod, "var") == 0, "global");
    CU(cuModuleGetGlobal_v2, CUdeviceptr *, size_t *, CUmodule, const char *)(&g2, NULL, mod, "var");
    CHECK(g1 == g2 && CU(cuMemsetD8_v2, CUdeviceptr, unsigned char, size_t)(g1, 0, gsz) == 0, "global stable & tracked");
    CUstream s;
    CUevent e0, e1;
    CU(cuStreamCreate, CUstream *, unsigned)(&s, 0);
    CU(cuEventCreate, CUevent *, unsigned)(&e0, 0);
    CU(cuEventCreate, CUevent *, unsigned)(&e1, 0);
    typedef CUresult (*launch_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **);
    launch_t launch = (launch_t)sym(cu, "cuLaunchKernel");
    CU(cuEventRecord, CUevent, CUstream)(e0, s);
    for (int i = 0; i < 10; i++) CHECK(launch(f, 100, 1, 1, 128, 1, 1, 0, s, NULL, NULL) == 0, "launch"); /* 100 us each */
    CU(cuEventRecord, CUevent, CUstream)(e1, s);
    CHECK(CU(cuStreamQuery, CUstream)(s) == 600, "stream busy");
    CHECK(CU(cuEventQuery, CUevent)(e1) == 600, "event not ready");
    float ms = 0;
    CHECK(CU(cuEventElapsedTime, float *, CUevent, CUevent)(&ms, e0, e1) == 600, "elapsed before done");
    CU(cuEventSynchronize, CUevent)(e1);
    CHECK(CU(cuEventElapsedTime, float *, CUevent, CUevent)(&ms, e0, e1) == 0 && ms > 0.99 && ms < 1.2, "elapsed %f", ms);
    CHECK(launch((CUfunction)0x1234, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL) == 400, "bad function");
    CHECK(launch(f, 1, 1, 1, 2048, 1, 1, 0, s, NULL, NULL) == 1, "too many threads");
    /* capture */
    CHECK(CU(cuStreamBeginCapture_v2, CUstream, int)(s, 0) == 0, "begin capture");
    int cst = 0;
    CU(cuStreamIsCapturing, CUstream, int *)(s, &cst);
    CHECK(cst == 1, "capturing");
    for (int i = 0; i < 3; i++) launch(f, 1000, 1, 1, 128, 1, 1, 0, s, NULL, NULL);
    CUgraph graph;
    CHECK(CU(cuStreamEndCapture, CUstream, CUgraph *)(s, &graph) == 0, "end capture");
    size_t nn = 0;
    CU(cuGraphGetNodes, CUgraph, CUgraphNode *, size_t *)(graph, NULL, &nn);
    CHECK(nn == 3, "captured nodes %zu", nn);
    CUgraphExec ge;
    CHECK(CU(cuGraphInstantiateWithFlags, CUgraphExec *, CUgraph, unsigned long long)(&ge, graph, 0) == 0, "instantiate");
    double t0 = now_s();
    CHECK(CU(cuGraphLaunch, CUgraphExec, CUstream)(ge, s) == 0, "graph launch");
    CU(cuStreamSynchronize, CUstream)(s);
    double dt = now_s() - t0;
    CHECK(dt > 0.0029 && dt < 0.02, "graph took %f s (3 ms expected)", dt);

    /* back-pressure: 100 x 1 ms kernels, at most 20 ms queued -> the loop takes >= ~80 ms */
    t0 = now_s();
    for (int i = 0; i < 100; i++) launch(f, 1000, 1, 1, 128, 1, 1, 0, s, NULL, NULL);
    dt = now_s() - t0;
    CHECK(dt > 0.075 && dt < 0.1, "back-pressure: launch loop took %f s", dt);
    CU(cuStreamSynchronize, CUstream)(s);
    /* per-thread default stream is distinct from the legacy one */
    launch_t launch_ptsz = (launch_t)sym(cu, "cuLaunchKernel_ptsz");
    launch_ptsz(f, 5000, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL); /* 5 ms on the per-thread stream */
    CHECK(CU(cuStreamQuery, CUstream)(NULL) == 0, "legacy stream idle");
    CHECK(CU(cuStreamQuery_ptsz, CUstream)(NULL) == 600, "per-thread stream busy");
    CHECK(CU(cuStreamQuery, CUstream)((CUstream)2) == 600, "CU_STREAM_PER_THREAD busy");
    CU(cuCtxSynchronize, void)();
    CHECK(CU(cuStreamQuery_ptsz, CUstream)(NULL) == 0, "ctx sync waited for it");

    /* ---- VMM and arrays ---- */
    struct { int type, htypes, ltype, lid; void *w; unsigned char c, g; unsigned short u; unsigned char r[4]; } prop = {1, 0, 1, 0};
    size_t gran = 0;
    CHECK(CU(cuMemGetAllocationGranularity, size_t *, void *, int)(&gran, &prop, 0) == 0 && gran == 2 << 20, "granularity");
    unsigned long long vh;
    CUdeviceptr va;
    unsigned long long before = nvml_proc_used(d, me, &np);
    CHECK(CU(cuMemCreate, unsigned long long *, size_t, void *, unsigned long long)(&vh, 4 << 20, &prop, 0) == 0, "cuMemCreate");
    CHECK(nvml_proc_used(d, me, &np) == before + (4 << 20), "VMM charged at create");
    CHECK(CU(cuMemAddressReserve, CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long)(&va, 8 << 20, 0, 0, 0) == 0, "reserve");
    CHECK(CU(cuMemMap, CUdeviceptr, size_t, size_t, unsigned long long, unsigned long long)(va, 4 << 20, 0, vh, 0) == 0, "map");
    struct { int ltype, lid; unsigned flags; } acc = {1, 0, 3};
    CHECK(CU(cuMemSetAccess, CUdeviceptr, size_t, void *, size_t)(va, 4 << 20, &acc, 1) == 0, "set access");
    CHECK(CU(cuMemSetAccess, CUdeviceptr, size_t, void *, size_t)(va, 8 << 20, &acc, 1) == 1, "set access beyond mapping");
    CHECK(CU(cuMemsetD8_v2, CUdeviceptr, unsigned char, size_t)(va, 7, 4 << 20) == 0, "memset VMM");
    CHECK(CU(cuMemRelease, unsigned long long)(vh) == 0, "release while mapped");
    CHECK(nvml_proc_used(d, me, &np) == before + (4 << 20), "still charged while mapped");
    CHECK(CU(cuMemUnmap, CUdeviceptr, size_t)(va, 4 << 20) == 0, "unmap");
    CHECK(nvml_proc_used(d, me, &np) == before, "released after unmap");
    CHECK(CU(cuMemAddressFree, CUdeviceptr, size_t)(va, 8 << 20) == 0, "address free");
    struct { size_t w, h; unsigned fmt, ch; } ad = {1024, 1024, 0x20, 4}, ad2;
    void *arr;
    CHECK(CU(cuArrayCreate_v2, void **, void *)(&arr, &ad) == 0, "array");
    CHECK(nvml_proc_used(d, me, &np) == before + (16 << 20), "array charged");
    CHECK(CU(cuArrayGetDescriptor_v2, void *, void *)(&ad2, arr) == 0 && ad2.w == 1024 && ad2.ch == 4, "array desc");
    CHECK(CU(cuArrayDestroy, void *)(arr) == 0 && nvml_proc_used(d, me, &np) == before, "array freed");

    /* ---- another process: memory visible, gone after exit / SIGKILL ---- */
    pid_t c = spawn(argv, "hold", 1000, NULL);
    unsigned long long used = nvml_proc_used(d, c, &np);
    CHECK(used == (256ull + 1000) << 20, "child memory %llu", used);
    nvmlMemory_t mem2;
    NV(nvmlDeviceGetMemoryInfo, nvmlDevice_t, nvmlMemory_t *)(d, &mem2);
    CHECK(mem2.used >= used, "device used includes child");
    kill(c, SIGKILL);
    usleep(50000); /* zombie until reaped */
    CHECK(nvml_proc_used(d, c, &np) == 0, "SIGKILLed child (zombie) reclaimed");
    waitpid(c, NULL, 0);
    c = spawn(argv, "exit", 500, NULL);
    waitpid(c, NULL, 0);
    CHECK(nvml_proc_used(d, c, &np) == 0, "exited child reclaimed");
    NV(nvmlDeviceGetMemoryInfo, nvmlDevice_t, nvmlMemory_t *)(d, &mem2);
    CHECK(mem2.used == nvml_proc_used(d, me, &np), "only this process left: %llu", mem2.used);

    /* ---- 50 % duty cycle ---- */
    c = spawn(argv, "duty", 0, "VGPU_SIM_KERNEL_NS=10000000");
    usleep(1500000);
    unsigned long long since = wall_us() - 1000000;
    nvmlSample_t smp[64];
    unsigned cnt = 0;
    int r = NV(nvmlDeviceGetProcessUtilization, nvmlDevice_t, nvmlSample_t *, unsigned *, unsigned long long)(d, NULL, &cnt, since);
    CHECK(r == 7 && cnt >= 1, "util count r=%d cnt=%u", r, cnt);
    cnt = 64;
    r = NV(nvmlDeviceGetProcessUtilization, nvmlDevice_t, nvmlSample_t *, unsigned *, unsigned long long)(d, smp, &cnt, since);
    unsigned sm = 0;
    for (unsigned i = 0; i < cnt; i++)
        if (smp[i].pid == (unsigned)c) sm = smp[i].sm;
    CHECK(r == 0 && sm >= 40 && sm <= 55, "duty-cycle child smUtil %u (r=%d)", sm, r);
    nvmlUtilization_t u;
    NV(nvmlDeviceGetUtilizationRates, nvmlDevice_t, nvmlUtilization_t *)(d, &u);
    CHECK(u.gpu >= 40 && u.gpu <= 55, "device util %u", u.gpu);
    printf("duty-cycle child: smUtil %u%%, device %u%%\n", sm, u.gpu);
    waitpid(c, NULL, 0);

    CHECK(CU(cuDevicePrimaryCtxRelease_v2, int)(0) == 0, "final release");
    mine = nvml_proc_used(d, me, &np);
    CHECK(mine == 0, "all released: %llu", mine);
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "OK", failures);
    return failures != 0;
}
