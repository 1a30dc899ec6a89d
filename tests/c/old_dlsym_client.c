/* Resolves driver entry points with the *old* symbol version dlsym@GLIBC_2.2.5 (what binaries
 * linked against glibc < 2.34 reference); the shim's unversioned dlsym must interpose it too. */
#define _GNU_SOURCE
#define VGPU_TEST_WANT_DL
#include "cuda_min.h"

#if defined(__x86_64__)
void *old_dlsym(void *handle, const char *name);
__asm__(".symver old_dlsym,dlsym@GLIBC_2.2.5");
#define DLSYM old_dlsym
#else
#define DLSYM dlsym
#endif

int main(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (h == NULL) {
        kv_str("dlopen_cuda", "fail");
        return 2;
    }
    PFN_cuInit init = (PFN_cuInit)DLSYM(h, "cuInit");
    PFN_cuDeviceGet devget = (PFN_cuDeviceGet)DLSYM(h, "cuDeviceGet");
    PFN_cuDevicePrimaryCtxRetain retain = (PFN_cuDevicePrimaryCtxRetain)DLSYM(h, "cuDevicePrimaryCtxRetain");
    PFN_cuCtxSetCurrent setcur = (PFN_cuCtxSetCurrent)DLSYM(h, "cuCtxSetCurrent");
    PFN_cuMemAlloc alloc = (PFN_cuMemAlloc)DLSYM(h, "cuMemAlloc_v2");
    PFN_cuMemFree mfree = (PFN_cuMemFree)DLSYM(h, "cuMemFree_v2");
    NONNULL("syms", (init && devget && retain && setcur && alloc && mfree) ? (void *)1 : NULL);
    printf("obj_hooked_cuMemAlloc_v2=%s\n", obj_of((void *)alloc));
    CHECK("init", init(0));
    CUdevice dev = -1;
    CHECK("device_get", devget(&dev, 0));
    CUcontext ctx = NULL;
    CHECK("retain", retain(&ctx, dev));
    CHECK("set_current", setcur(ctx));
    CUdeviceptr d = 0;
    CHECK("alloc", alloc(&d, 4 * MIB));
    CHECK("free", mfree(d));
    kv_str("done", "1");
    return 0;
}
