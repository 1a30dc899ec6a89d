/* Allocates through libtracer.so (which resolves cuMemAlloc_v2 with dlsym(RTLD_NEXT)).
 *   tracer_client preload|dlopen|dlopen_local MIB COUNT
 * preload: libtracer.so is already loaded (LD_PRELOAD after the shim); dlopen[_local]: loaded here
 * with dlopen(RTLD_NOW | RTLD_GLOBAL [RTLD_LOCAL]) from the directory of this program.
 * Prints next_alloc=<object RTLD_NEXT answers for cuMemAlloc_v2> next_devget=<same for the
 * unhooked cuDeviceGet>, then rc_<i>= for each allocation, ok= oom=. Not linked with libcuda:
 * the tracer is (NEEDED), so the driver comes after the tracer in the search order. */
#define _GNU_SOURCE
#include "cuda_min.h"
#include <dlfcn.h>

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    void *h = RTLD_DEFAULT;
    if (!strncmp(argv[1], "dlopen", 6)) {
        char path[4096];
        snprintf(path, sizeof path, "%s", argv[0]);
        char *slash = strrchr(path, '/');
        snprintf(slash ? slash + 1 : path, sizeof path - (slash ? (size_t)(slash + 1 - path) : 0), "libtracer.so");
        h = dlopen(path, RTLD_NOW | (strcmp(argv[1], "dlopen_local") ? RTLD_GLOBAL : RTLD_LOCAL));
        if (!h) {
            printf("error=dlopen %s\n", dlerror());
            return 1;
        }
    }
    int (*tracer_alloc)(unsigned long long *, size_t) = (int (*)(unsigned long long *, size_t))dlsym(h, "tracer_alloc");
    const char *(*next_obj)(const char *) = (const char *(*)(const char *))dlsym(h, "tracer_next_obj");
    if (!tracer_alloc || !next_obj) {
        printf("error=tracer_not_loaded\n");
        return 1;
    }
    PFN_cuInit init = (PFN_cuInit)dlsym(h, "cuInit");
    PFN_cuDeviceGet get = (PFN_cuDeviceGet)dlsym(h, "cuDeviceGet");
    PFN_cuDevicePrimaryCtxRetain retain = (PFN_cuDevicePrimaryCtxRetain)dlsym(h, "cuDevicePrimaryCtxRetain");
    PFN_cuCtxSetCurrent setcur = (PFN_cuCtxSetCurrent)dlsym(h, "cuCtxSetCurrent");
    CUdevice d;
    CUcontext c;
    if (!init || !get || !retain || !setcur || init(0) || get(&d, 0) || retain(&c, d) || setcur(c)) {
        printf("error=init\n");
        return 1;
    }
    printf("next_alloc=%s\nnext_devget=%s\n", next_obj("cuMemAlloc_v2"), next_obj("cuDeviceGet"));
    size_t mib = strtoull(argv[2], NULL, 10);
    int n = atoi(argv[3]), ok = 0, oom = 0;
    for (int i = 0; i < n; i++) {
        unsigned long long p = 0;
        int rc = tracer_alloc(&p, mib * MIB);
        printf("rc_%d=%d\n", i, rc);
        if (rc == 0) ok++;
        else if (rc == 2) oom++;
    }
    printf("ok=%d\noom=%d\n", ok, oom);
    return 0;
}
