/* Client that loads the driver and NVML with dlopen and resolves every entry point with dlsym
 * (one through RTLD_DEFAULT, one through the v1 cuGetProcAddress). */
#define _GNU_SOURCE
#define VGPU_TEST_WANT_DL
#include "cuda_min.h"

#define SYM(h, T, name) ((T)dlsym((h), (name)))

int main(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (h == NULL) {
        kv_str("dlopen_cuda", "fail");
        fprintf(stderr, "dlsym_client: cannot load libcuda.so.1: %s\n", dlerror());
        return 2;
    }
    kv_str("dlopen_cuda", "ok");

    PFN_cuInit init = SYM(h, PFN_cuInit, "cuInit");
    PFN_cuDeviceGet devget = SYM(h, PFN_cuDeviceGet, "cuDeviceGet");
    PFN_cuDevicePrimaryCtxRetain retain = SYM(h, PFN_cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    PFN_cuCtxSetCurrent setcur = SYM(h, PFN_cuCtxSetCurrent, "cuCtxSetCurrent");
    PFN_cuCtxSynchronize sync = SYM(h, PFN_cuCtxSynchronize, "cuCtxSynchronize");
    PFN_cuMemGetInfo meminfo = SYM(h, PFN_cuMemGetInfo, "cuMemGetInfo_v2");
    PFN_cuMemAlloc alloc = SYM(h, PFN_cuMemAlloc, "cuMemAlloc_v2");
    PFN_cuMemFree mfree_h = SYM(h, PFN_cuMemFree, "cuMemFree_v2");
    PFN_cuMemFree mfree = SYM(RTLD_DEFAULT, PFN_cuMemFree, "cuMemFree_v2");
    PFN_cuModuleLoadData modload = SYM(h, PFN_cuModuleLoadData, "cuModuleLoadData");
    PFN_cuModuleGetFunction getfn = SYM(h, PFN_cuModuleGetFunction, "cuModuleGetFunction");
    PFN_cuLaunchKernel launch = SYM(h, PFN_cuLaunchKernel, "cuLaunchKernel");
    PFN_cuGetProcAddress_v2 gpa2 = SYM(h, PFN_cuGetProcAddress_v2, "cuGetProcAddress_v2");
    PFN_cuGetProcAddress_v1 gpa1 = SYM(h, PFN_cuGetProcAddress_v1, "cuGetProcAddress");
    NONNULL("sym_cuInit", init);
    NONNULL("sym_cuDeviceGet", devget);
    NONNULL("sym_cuDevicePrimaryCtxRetain", retain);
    NONNULL("sym_cuCtxSetCurrent", setcur);
    NONNULL("sym_cuCtxSynchronize", sync);
    NONNULL("sym_cuMemGetInfo_v2", meminfo);
    NONNULL("sym_cuMemAlloc_v2", alloc);
    NONNULL("sym_cuMemFree_v2", mfree_h);
    NONNULL("sym_default_cuMemFree_v2", mfree);
    NONNULL("sym_cuModuleLoadData", modload);
    NONNULL("sym_cuModuleGetFunction", getfn);
    NONNULL("sym_cuLaunchKernel", launch);
    NONNULL("sym_cuGetProcAddress_v2", gpa2);
    NONNULL("sym_cuGetProcAddress", gpa1);
    /* Identity checks that must hold with and without the shim. */
    kv_int("default_eq_handle", mfree == mfree_h);
    void *g = NULL;
    CUdriverProcAddressQueryResult st = -1;
    CHECK("gpa_cuMemAlloc", gpa2("cuMemAlloc", &g, 3020, 0, &st));
    kv_int("gpa_cuMemAlloc_status", st);
    kv_int("gpa_eq_dlsym_cuMemAlloc", g == (void *)alloc);
    void *g1 = NULL;
    CHECK("gpa1_cuMemGetInfo", gpa1("cuMemGetInfo", &g1, 3020, 0));
    kv_int("gpa1_eq_dlsym_cuMemGetInfo", g1 == (void *)meminfo);
    /* Object identity: where an unhooked entry point lives (always the driver). */
    kv_str("obj_cuDeviceGet", obj_of((void *)devget));

    CHECK("init", init(0));
    CUdevice dev = -1;
    CHECK("device_get", devget(&dev, 0));
    CUcontext ctx = NULL;
    CHECK("primary_ctx_retain", retain(&ctx, dev));
    CHECK("ctx_set_current", setcur(ctx));
    size_t free0 = 0, total0 = 0;
    CHECK("mem_get_info", meminfo(&free0, &total0));
    kv_u64("mem_total", total0);
    kv_u64("mem_free", free0);
    CUdeviceptr p = 0;
    CHECK("mem_alloc", alloc(&p, 32 * MIB));
    size_t free1 = 0, total1 = 0;
    CHECK("mem_get_info_v1abi", ((PFN_cuMemGetInfo)g1)(&free1, &total1));
    kv_u64("mem_free_after_alloc", free1);
    CHECK("mem_free_call", mfree(p));
    CUmodule mod = NULL;
    CHECK("module_load", modload(&mod, VGPU_TEST_IMAGE));
    CUfunction fn = NULL;
    CHECK("module_get_function", getfn(&fn, mod, VGPU_TEST_KERNEL));
    CHECK("launch", launch(fn, 2, 2, 1, 64, 1, 1, 0, NULL, NULL, NULL));
    CHECK("ctx_sync", sync());

    void *hn = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (hn == NULL) {
        kv_str("dlopen_nvml", "fail");
        fprintf(stderr, "dlsym_client: cannot load libnvidia-ml.so.1: %s\n", dlerror());
        return 3;
    }
    kv_str("dlopen_nvml", "ok");
    PFN_nvmlInit_v2 ninit = SYM(hn, PFN_nvmlInit_v2, "nvmlInit_v2");
    PFN_nvmlDeviceGetHandleByIndex_v2 nhandle =
        SYM(hn, PFN_nvmlDeviceGetHandleByIndex_v2, "nvmlDeviceGetHandleByIndex_v2");
    PFN_nvmlDeviceGetMemoryInfo nmem = SYM(hn, PFN_nvmlDeviceGetMemoryInfo, "nvmlDeviceGetMemoryInfo");
    PFN_nvmlShutdown nshut = SYM(hn, PFN_nvmlShutdown, "nvmlShutdown");
    NONNULL("sym_nvmlInit_v2", ninit);
    NONNULL("sym_nvmlDeviceGetHandleByIndex_v2", nhandle);
    NONNULL("sym_nvmlDeviceGetMemoryInfo", nmem);
    NONNULL("sym_nvmlShutdown", nshut);
    CHECK("nvml_init", ninit());
    nvmlDevice_t nd = NULL;
    CHECK("nvml_handle", nhandle(0, &nd));
    nvmlMemory_t m;
    memset(&m, 0, sizeof m);
    CHECK("nvml_mem", nmem(nd, &m));
    kv_u64("nvml_total", m.total);
    kv_u64("nvml_used", m.used);
    CHECK("nvml_shutdown", nshut());
    kv_str("done", "1");
    return 0;
}
