/* dlopen the driver, resolve through cuGetProcAddress, allocate, dlclose, dlopen again, resolve
 * again and allocate again (docs/shim-notes.md §13).
 * argv[1] == "stale": additionally call the cuMemAlloc pointer obtained before dlclose, after
 * dlclose (only valid while something keeps the driver mapped, e.g. a shim's RTLD_NODELETE). */
#define _GNU_SOURCE
#define VGPU_TEST_WANT_DL
#include "cuda_min.h"

struct api {
    PFN_cuInit init;
    PFN_cuDeviceGet devget;
    PFN_cuDevicePrimaryCtxRetain retain;
    PFN_cuCtxSetCurrent setcur;
    PFN_cuMemAlloc alloc;
    PFN_cuMemFree mfree;
    PFN_cuMemGetInfo meminfo;
};

static void *resolve(PFN_cuGetProcAddress_v2 gpa, const char *name, int ver) {
    void *p = NULL;
    CUdriverProcAddressQueryResult st = -1;
    int rc = gpa(name, &p, ver, 0, &st);
    if (rc != 0 || p == NULL) {
        fprintf(stderr, "dlclose_reopen: lookup %s@%d failed: %d\n", name, ver, rc);
        exit(1);
    }
    return p;
}

static void *open_and_resolve(struct api *a, const char *round) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (h == NULL) {
        printf("%s_dlopen=fail\n", round);
        fprintf(stderr, "dlclose_reopen: %s\n", dlerror());
        exit(2);
    }
    PFN_cuGetProcAddress_v2 gpa = (PFN_cuGetProcAddress_v2)dlsym(h, "cuGetProcAddress_v2");
    if (gpa == NULL) {
        fprintf(stderr, "dlclose_reopen: no cuGetProcAddress_v2\n");
        exit(1);
    }
    a->init = (PFN_cuInit)resolve(gpa, "cuInit", 2000);
    a->devget = (PFN_cuDeviceGet)resolve(gpa, "cuDeviceGet", 2000);
    a->retain = (PFN_cuDevicePrimaryCtxRetain)resolve(gpa, "cuDevicePrimaryCtxRetain", 7000);
    a->setcur = (PFN_cuCtxSetCurrent)resolve(gpa, "cuCtxSetCurrent", 4000);
    a->alloc = (PFN_cuMemAlloc)resolve(gpa, "cuMemAlloc", 3020);
    a->mfree = (PFN_cuMemFree)resolve(gpa, "cuMemFree", 3020);
    a->meminfo = (PFN_cuMemGetInfo)resolve(gpa, "cuMemGetInfo", 3020);
    return h;
}

static void use(struct api *a, const char *round) {
    char k[64];
    snprintf(k, sizeof k, "%s_init", round);
    CHECK(k, a->init(0));
    CUdevice dev = -1;
    snprintf(k, sizeof k, "%s_device_get", round);
    CHECK(k, a->devget(&dev, 0));
    CUcontext ctx = NULL;
    snprintf(k, sizeof k, "%s_retain", round);
    CHECK(k, a->retain(&ctx, dev));
    snprintf(k, sizeof k, "%s_set_current", round);
    CHECK(k, a->setcur(ctx));
    CUdeviceptr d = 0;
    snprintf(k, sizeof k, "%s_alloc", round);
    CHECK(k, a->alloc(&d, 8 * MIB));
    size_t fr = 0, tot = 0;
    snprintf(k, sizeof k, "%s_mem_get_info", round);
    CHECK(k, a->meminfo(&fr, &tot));
    snprintf(k, sizeof k, "%s_free", round);
    CHECK(k, a->mfree(d));
}

int main(int argc, char **argv) {
    int stale = argc > 1 && strcmp(argv[1], "stale") == 0;
    struct api a1, a2;
    void *h1 = open_and_resolve(&a1, "first");
    use(&a1, "first");
    kv_int("dlclose", dlclose(h1));
    /* Informational: is the driver still mapped after the application's dlclose? */
    printf("info_mapped_after_dlclose=%d\n", maps_contains("libcuda"));
    fflush(stdout);
    if (stale) {
        CUdeviceptr d = 0;
        CHECK("stale_alloc", a1.alloc(&d, 4 * MIB));
        CHECK("stale_free", a1.mfree(d));
    }
    void *h2 = open_and_resolve(&a2, "second");
    use(&a2, "second");
    kv_int("dlclose2", dlclose(h2));
    kv_str("done", "1");
    return 0;
}
