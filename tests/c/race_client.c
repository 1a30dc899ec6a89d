/* First-use race: N threads simultaneously dlopen the driver, dlsym cuGetProcAddress_v2 (the
 * shim's lazy initialisation runs here), resolve the entry points and do alloc/free pairs.
 * argv[1] = threads (default 16), argv[2] = pairs per thread (default 500). */
#define _GNU_SOURCE
#define VGPU_TEST_WANT_DL
#include "cuda_min.h"
#include <pthread.h>

static int pairs = 500;
static pthread_barrier_t barrier;
static CUcontext g_ctx;
static int ok_pairs[64];
static int errors[64];

static void *worker(void *arg) {
    int id = (int)(intptr_t)arg;
    pthread_barrier_wait(&barrier);
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { errors[id]++; return NULL; }
    PFN_cuGetProcAddress_v2 gpa = (PFN_cuGetProcAddress_v2)dlsym(h, "cuGetProcAddress_v2");
    if (!gpa) { errors[id]++; return NULL; }
    PFN_cuCtxSetCurrent setcur = NULL;
    PFN_cuMemAlloc alloc = NULL;
    PFN_cuMemFree mfree = NULL;
    if (gpa("cuCtxSetCurrent", (void **)&setcur, 4000, 0, NULL) || gpa("cuMemAlloc", (void **)&alloc, 3020, 0, NULL) ||
        gpa("cuMemFree", (void **)&mfree, 3020, 0, NULL)) {
        errors[id]++;
        return NULL;
    }
    if (setcur(g_ctx)) { errors[id]++; return NULL; }
    for (int i = 0; i < pairs; i++) {
        CUdeviceptr d = 0;
        if (alloc(&d, (size_t)(1 + (i % 7)) * MIB) != 0) { errors[id]++; continue; }
        if (mfree(d) != 0) { errors[id]++; continue; }
        ok_pairs[id]++;
    }
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 16;
    if (argc > 2) pairs = atoi(argv[2]);
    if (n < 1 || n > 64) return 2;
    /* The context is created by the driver API directly linked ... no: through a private dlopen so
     * the workers' first dlsym is still a first use for the shim's dlsym path. */
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { kv_str("dlopen_cuda", "fail"); return 2; }
    PFN_cuGetProcAddress_v2 gpa = (PFN_cuGetProcAddress_v2)dlsym(h, "cuGetProcAddress_v2");
    NONNULL("gpa", gpa);
    PFN_cuInit init = NULL;
    PFN_cuDeviceGet devget = NULL;
    PFN_cuDevicePrimaryCtxRetain retain = NULL;
    PFN_cuMemGetInfo meminfo = NULL;
    CHECK("gpa_init", gpa("cuInit", (void **)&init, 2000, 0, NULL));
    CHECK("gpa_devget", gpa("cuDeviceGet", (void **)&devget, 2000, 0, NULL));
    CHECK("gpa_retain", gpa("cuDevicePrimaryCtxRetain", (void **)&retain, 7000, 0, NULL));
    CHECK("gpa_meminfo", gpa("cuMemGetInfo", (void **)&meminfo, 3020, 0, NULL));
    CHECK("init", init(0));
    CUdevice dev;
    CHECK("device_get", devget(&dev, 0));
    CHECK("retain", retain(&g_ctx, dev));
    PFN_cuCtxSetCurrent setcur = NULL;
    CHECK("gpa_setcur", gpa("cuCtxSetCurrent", (void **)&setcur, 4000, 0, NULL));
    CHECK("set_current", setcur(g_ctx));
    size_t free0 = 0, total = 0;
    CHECK("mem_get_info", meminfo(&free0, &total));

    pthread_barrier_init(&barrier, NULL, (unsigned)n);
    pthread_t t[64];
    for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    long ok = 0, err = 0;
    for (int i = 0; i < n; i++) { ok += ok_pairs[i]; err += errors[i]; }
    kv_int("ok_pairs", ok);
    kv_int("errors", err);
    size_t free1 = 0;
    CHECK("mem_get_info2", meminfo(&free1, &total));
    kv_int("free_restored", free1 == free0);
    kv_str("done", "1");
    return err == 0 ? 0 : 1;
}
