/* Reproduces libcudart's loading pattern (docs/driver-loading.md §1.1-1.3):
 * dlopen("libcuda.so.1"); the ONLY dlsym is "cuGetProcAddress_v2"; probe "", then "cuInit"@2000,
 * "cuGetProcAddress"@11030 and @12000; every other lookup goes through the pointer returned for
 * "cuGetProcAddress"@12000, including cuLaunchKernel with flags 0 and flags 2 (per-thread stream). */
#define _GNU_SOURCE
#define VGPU_TEST_WANT_DL
#include "cuda_min.h"

static PFN_cuGetProcAddress_v2 gpa; /* the pointer returned for "cuGetProcAddress"@12000 */

static void *look(const char *name, int ver, unsigned long long flags, const char *key) {
    void *p = NULL;
    CUdriverProcAddressQueryResult st = -1;
    int rc = gpa(name, &p, ver, flags, &st);
    printf("gpa_%s=%d\n", key, rc);
    printf("gpa_%s_status=%d\n", key, st);
    if (rc != 0 || p == NULL) {
        fprintf(stderr, "cudart_like: lookup %s@%d flags %llu failed: %d\n", name, ver, flags, rc);
        exit(1);
    }
    return p;
}

int main(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (h == NULL) {
        kv_str("dlopen_cuda", "fail");
        fprintf(stderr, "cudart_like: cannot load libcuda.so.1: %s\n", dlerror());
        return 2;
    }
    kv_str("dlopen_cuda", "ok");
    PFN_cuGetProcAddress_v2 gpa_dl = (PFN_cuGetProcAddress_v2)dlsym(h, "cuGetProcAddress_v2");
    NONNULL("sym_cuGetProcAddress_v2", gpa_dl);

    /* 1. empty-name probe: NOT_FOUND expected (not checked for 0). */
    void *p = NULL;
    CUdriverProcAddressQueryResult st = -1;
    int rc = gpa_dl("", &p, 0, 0, &st);
    kv_int("probe_empty", rc);
    kv_int("probe_empty_null", p == NULL);

    /* 2. cuInit@2000, 3. cuGetProcAddress @11030 (v1 ABI) and @12000 (v2 ABI). */
    PFN_cuInit init = NULL;
    CHECK("gpa_cuInit", gpa_dl("cuInit", (void **)&init, 2000, 0, &st));
    kv_int("gpa_cuInit_status", st);
    void *gpa_v1 = NULL, *gpa_v2 = NULL;
    CHECK("gpa_cuGetProcAddress_11030", gpa_dl("cuGetProcAddress", &gpa_v1, 11030, 0, &st));
    CHECK("gpa_cuGetProcAddress_12000", gpa_dl("cuGetProcAddress", &gpa_v2, 12000, 0, &st));
    NONNULL("gpa_v1_nonnull", gpa_v1);
    NONNULL("gpa_v2_nonnull", gpa_v2);
    kv_int("gpa_v1_ne_v2", gpa_v1 != gpa_v2);
    kv_int("gpa_v2_eq_dlsym", gpa_v2 == (void *)gpa_dl);
    gpa = (PFN_cuGetProcAddress_v2)gpa_v2;

    /* 4. Everything else through the @12000 pointer. */
    PFN_cuDeviceGet devget = (PFN_cuDeviceGet)look("cuDeviceGet", 2000, 0, "cuDeviceGet_2000_0");
    PFN_cuDevicePrimaryCtxRetain retain =
        (PFN_cuDevicePrimaryCtxRetain)look("cuDevicePrimaryCtxRetain", 7000, 0, "cuDevicePrimaryCtxRetain_7000_0");
    PFN_cuCtxSetCurrent setcur = (PFN_cuCtxSetCurrent)look("cuCtxSetCurrent", 4000, 0, "cuCtxSetCurrent_4000_0");
    PFN_cuCtxSynchronize sync = (PFN_cuCtxSynchronize)look("cuCtxSynchronize", 2000, 0, "cuCtxSynchronize_2000_0");
    PFN_cuMemGetInfo meminfo = (PFN_cuMemGetInfo)look("cuMemGetInfo", 3020, 0, "cuMemGetInfo_3020_0");
    PFN_cuMemAlloc alloc = (PFN_cuMemAlloc)look("cuMemAlloc", 3020, 0, "cuMemAlloc_3020_0");
    PFN_cuMemFree mfree = (PFN_cuMemFree)look("cuMemFree", 3020, 0, "cuMemFree_3020_0");
    PFN_cuModuleLoadData modload = (PFN_cuModuleLoadData)look("cuModuleLoadData", 2000, 0, "cuModuleLoadData_2000_0");
    PFN_cuModuleGetFunction getfn =
        (PFN_cuModuleGetFunction)look("cuModuleGetFunction", 2000, 0, "cuModuleGetFunction_2000_0");
    PFN_cuLaunchKernel launch0 = (PFN_cuLaunchKernel)look("cuLaunchKernel", 4000, 0, "cuLaunchKernel_4000_0");
    /* The per-thread ABI (PFN_cuLaunchKernel_v7000_ptsz in cudaTypedefs.h) is versioned 7000; a
     * flags=2 lookup at 4000 is answered by the simulated driver with the legacy function (no ptsz
     * ABI exists at <= 4000). Both are looked up; the 7000 one is launched. */
    void *launch2_4000 = look("cuLaunchKernel", 4000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                              "cuLaunchKernel_4000_2");
    PFN_cuLaunchKernel launch2 = (PFN_cuLaunchKernel)look("cuLaunchKernel", 7000,
                                                          CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                                                          "cuLaunchKernel_7000_2");
    PFN_cuGetExportTable exptab = (PFN_cuGetExportTable)look("cuGetExportTable", 3000, 0, "cuGetExportTable_3000_0");
    kv_int("launch_ptsz_distinct", launch0 != launch2);
    kv_int("launch_4000_flags2_is_legacy", launch2_4000 == (void *)launch0);
    /* Where the pointers live. Unhooked ones must stay in the driver; the export-table function must
     * be the driver's own, unwrapped (docs/driver-loading.md §1.6). */
    kv_str("obj_cuDeviceGet", obj_of((void *)devget));
    kv_str("obj_cuGetExportTable", obj_of((void *)exptab));
    kv_str("obj_cuCtxSynchronize", obj_of((void *)sync));
    /* Hooked ones: printed under obj_hooked_* (differ with the shim). */
    printf("obj_hooked_cuMemAlloc=%s\n", obj_of((void *)alloc));
    printf("obj_hooked_cuLaunchKernel=%s\n", obj_of((void *)launch0));
    printf("obj_hooked_cuLaunchKernel_ptsz=%s\n", obj_of((void *)launch2));
    printf("obj_hooked_cuGetProcAddress_12000=%s\n", obj_of(gpa_v2));

    /* Calls. */
    CHECK("init", init(0));
    CUuuid id;
    memset(&id, 0, sizeof id);
    const void *table = NULL;
    kv_int("export_table_zero_uuid", exptab(&table, &id));
    CUdevice dev = -1;
    CHECK("device_get", devget(&dev, 0));
    CUcontext ctx = NULL;
    CHECK("primary_ctx_retain", retain(&ctx, dev));
    CHECK("ctx_set_current", setcur(ctx));
    size_t free0 = 0, total0 = 0;
    CHECK("mem_get_info", meminfo(&free0, &total0));
    kv_u64("mem_total", total0);
    kv_u64("mem_free", free0);
    CUdeviceptr d = 0;
    CHECK("mem_alloc", alloc(&d, 16 * MIB));
    size_t free1 = 0, total1 = 0;
    CHECK("mem_get_info2", meminfo(&free1, &total1));
    kv_u64("mem_free_after_alloc", free1);
    CHECK("mem_free_call", mfree(d));
    CUmodule mod = NULL;
    CHECK("module_load", modload(&mod, VGPU_TEST_IMAGE));
    CUfunction fn = NULL;
    CHECK("module_get_function", getfn(&fn, mod, VGPU_TEST_KERNEL));
    CHECK("launch_legacy", launch0(fn, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    CHECK("launch_ptsz", launch2(fn, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    CHECK("ctx_sync", sync());
    kv_str("done", "1");
    return 0;
}
