/* A small C CUDA client driven by a list of steps.
 *
 * It loads the driver the way libcudart does (docs/driver-loading.md §1.1-1.2): dlopen("libcuda.so.1"),
 * ONE dlsym of "cuGetProcAddress_v2", then every entry point through cuGetProcAddress @ 12000.
 * Self-contained on purpose (no project headers): it stands for "somebody else's program".
 *
 * Usage: limit_client STEP...  — each step prints `s<i>.<key>=<value>` lines on stdout:
 *   info           s<i>.free, s<i>.total           (cuMemGetInfo)
 *   alloc:<MiB>    s<i>.alloc=<CUresult>           (cuMemAlloc; kept until free_all)
 *   alloc:free     allocate exactly what cuMemGetInfo reports free (s<i>.bytes, s<i>.alloc)
 *   managed:<MiB>  s<i>.alloc=<CUresult>           (cuMemAllocManaged, global attach)
 *   free_all       s<i>.freed=<count>, s<i>.rc=<first non-zero result or 0>
 *   launch:<n>     load a module, launch n kernels, synchronize: s<i>.launch=<CUresult>
 *   pid            s<i>.pid=<getpid()>
 *   touch:<path>   create <path> (handshake with the test)
 *   wait:<path>    wait (30 s max, else exit 3) until <path> exists
 *   sleep:<ms>
 * Setup results: init=, ctx=, and `done=1` at the end. Exit 0 unless setup or a handshake fails
 * (a refused allocation is a result, not a failure). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;

typedef CUresult (*gpa_t)(const char *, void **, int, unsigned long long, int *);
typedef CUresult (*init_t)(unsigned);
typedef CUresult (*devget_t)(CUdevice *, int);
typedef CUresult (*retain_t)(CUcontext *, CUdevice);
typedef CUresult (*setcur_t)(CUcontext);
typedef CUresult (*sync_t)(void);
typedef CUresult (*meminfo_t)(size_t *, size_t *);
typedef CUresult (*alloc_t)(CUdeviceptr *, size_t);
typedef CUresult (*managed_t)(CUdeviceptr *, size_t, unsigned);
typedef CUresult (*free_t)(CUdeviceptr);
typedef CUresult (*modload_t)(CUmodule *, const void *);
typedef CUresult (*getfn_t)(CUfunction *, CUmodule, const char *);
typedef CUresult (*launch_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void **, void **);

#define MIB (1024ULL * 1024ULL)
/* Module image accepted by the simulated driver (its content does not matter to the shim). */
static const char IMAGE[] = "vgpu-sim-module\nkernel vgpu_test_kernel\n";

static gpa_t gpa;
static void *look(const char *name) {
    void *p = NULL;
    int st = 0;
    CUresult rc = gpa(name, &p, 12000, 0, &st);
    if (rc != 0 || p == NULL) {
        fprintf(stderr, "limit_client: cuGetProcAddress(%s) = %d\n", name, rc);
        printf("lookup_%s=%d\n", name, rc);
        exit(2);
    }
    return p;
}

static void wait_for(const char *path) {
    for (int i = 0; i < 3000; i++) {
        if (access(path, F_OK) == 0) return;
        usleep(10000);
    }
    fprintf(stderr, "limit_client: timed out waiting for %s\n", path);
    exit(3);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (h == NULL) {
        fprintf(stderr, "limit_client: %s\n", dlerror());
        printf("dlopen=fail\n");
        return 2;
    }
    gpa = (gpa_t)dlsym(h, "cuGetProcAddress_v2");
    if (gpa == NULL) {
        printf("dlsym=fail\n");
        return 2;
    }
    init_t cuInit = (init_t)look("cuInit");
    devget_t cuDeviceGet = (devget_t)look("cuDeviceGet");
    retain_t cuDevicePrimaryCtxRetain = (retain_t)look("cuDevicePrimaryCtxRetain");
    setcur_t cuCtxSetCurrent = (setcur_t)look("cuCtxSetCurrent");
    sync_t cuCtxSynchronize = (sync_t)look("cuCtxSynchronize");
    meminfo_t cuMemGetInfo = (meminfo_t)look("cuMemGetInfo");
    alloc_t cuMemAlloc = (alloc_t)look("cuMemAlloc");
    managed_t cuMemAllocManaged = (managed_t)look("cuMemAllocManaged");
    free_t cuMemFree = (free_t)look("cuMemFree");
    modload_t cuModuleLoadData = (modload_t)look("cuModuleLoadData");
    getfn_t cuModuleGetFunction = (getfn_t)look("cuModuleGetFunction");
    launch_t cuLaunchKernel = (launch_t)look("cuLaunchKernel");

    CUresult rc = cuInit(0);
    printf("init=%d\n", rc);
    if (rc != 0) return 1;
    CUdevice dev = 0;
    CUcontext ctx = NULL;
    rc = cuDeviceGet(&dev, 0);
    if (rc == 0) rc = cuDevicePrimaryCtxRetain(&ctx, dev);
    if (rc == 0) rc = cuCtxSetCurrent(ctx);
    printf("ctx=%d\n", rc);
    if (rc != 0) return 1;
    printf("pid=%d\n", (int)getpid());

    static CUdeviceptr held[4096];
    int nheld = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        int k = i - 1;
        if (strcmp(s, "info") == 0) {
            size_t f = 0, t = 0;
            rc = cuMemGetInfo(&f, &t);
            printf("s%d.rc=%d\ns%d.free=%zu\ns%d.total=%zu\n", k, rc, k, f, k, t);
        } else if (strcmp(s, "alloc:free") == 0) {
            size_t f = 0, t = 0;
            cuMemGetInfo(&f, &t);
            CUdeviceptr p = 0;
            rc = cuMemAlloc(&p, f);
            printf("s%d.bytes=%zu\ns%d.alloc=%d\n", k, f, k, rc);
            if (rc == 0 && nheld < 4096) held[nheld++] = p;
        } else if (strncmp(s, "alloc:", 6) == 0 || strncmp(s, "managed:", 8) == 0) {
            int managed = s[0] == 'm';
            unsigned long long mib = strtoull(strchr(s, ':') + 1, NULL, 10);
            CUdeviceptr p = 0;
            rc = managed ? cuMemAllocManaged(&p, mib * MIB, 1 /* CU_MEM_ATTACH_GLOBAL */)
                         : cuMemAlloc(&p, mib * MIB);
            printf("s%d.alloc=%d\n", k, rc);
            if (rc == 0 && nheld < 4096) held[nheld++] = p;
        } else if (strcmp(s, "free_all") == 0) {
            CUresult first = 0;
            for (int j = 0; j < nheld; j++) {
                CUresult r = cuMemFree(held[j]);
                if (r != 0 && first == 0) first = r;
            }
            printf("s%d.freed=%d\ns%d.rc=%d\n", k, nheld, k, first);
            nheld = 0;
        } else if (strncmp(s, "launch:", 7) == 0) {
            int n = atoi(s + 7);
            CUmodule m = NULL;
            CUfunction fn = NULL;
            rc = cuModuleLoadData(&m, IMAGE);
            if (rc == 0) rc = cuModuleGetFunction(&fn, m, "vgpu_test_kernel");
            for (int j = 0; rc == 0 && j < n; j++)
                rc = cuLaunchKernel(fn, 4, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
            if (rc == 0) rc = cuCtxSynchronize();
            printf("s%d.launch=%d\n", k, rc);
        } else if (strcmp(s, "pid") == 0) {
            printf("s%d.pid=%d\n", k, (int)getpid());
        } else if (strncmp(s, "touch:", 6) == 0) {
            int fd = open(s + 6, O_CREAT | O_WRONLY, 0644);
            if (fd < 0) {
                fprintf(stderr, "limit_client: touch %s: %s\n", s + 6, strerror(errno));
                return 3;
            }
            close(fd);
        } else if (strncmp(s, "wait:", 5) == 0) {
            wait_for(s + 5);
        } else if (strncmp(s, "sleep:", 6) == 0) {
            usleep((useconds_t)atoi(s + 6) * 1000);
        } else {
            fprintf(stderr, "limit_client: unknown step %s\n", s);
            return 4;
        }
    }
    printf("done=1\n");
    return 0;
}
