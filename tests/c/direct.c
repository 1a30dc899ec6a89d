/* Client linked directly against libcuda.so.1 / libnvidia-ml.so.1 (DT_NEEDED). */
#include "cuda_min.h"

int main(void) {
    CHECK("init", cuInit(0));
    CUdevice dev = -1;
    CHECK("device_get", cuDeviceGet(&dev, 0));
    kv_int("device", dev);
    CUcontext ctx = NULL;
    CHECK("primary_ctx_retain", cuDevicePrimaryCtxRetain(&ctx, dev));
    NONNULL("ctx_nonnull", ctx);
    CHECK("ctx_set_current", cuCtxSetCurrent(ctx));

    size_t free0 = 0, total0 = 0;
    CHECK("mem_get_info", cuMemGetInfo_v2(&free0, &total0));
    kv_u64("mem_total", total0);
    kv_u64("mem_free", free0);

    CUdeviceptr p = 0;
    CHECK("mem_alloc", cuMemAlloc_v2(&p, 64 * MIB));
    NONNULL("ptr_nonnull", (void *)(uintptr_t)p);
    size_t free1 = 0, total1 = 0;
    CHECK("mem_get_info2", cuMemGetInfo_v2(&free1, &total1));
    kv_u64("mem_free_after_alloc", free1);

    CHECK("nvml_init", nvmlInit_v2());
    nvmlDevice_t nd = NULL;
    CHECK("nvml_handle", nvmlDeviceGetHandleByIndex_v2(0, &nd));
    nvmlMemory_t m;
    memset(&m, 0, sizeof m);
    CHECK("nvml_mem", nvmlDeviceGetMemoryInfo(nd, &m));
    kv_u64("nvml_total", m.total);
    kv_u64("nvml_used", m.used);
    kv_u64("nvml_free", m.free);

    CHECK("mem_free_call", cuMemFree_v2(p));
    size_t free2 = 0, total2 = 0;
    CHECK("mem_get_info3", cuMemGetInfo_v2(&free2, &total2));
    kv_u64("mem_free_after_free", free2);

    CUmodule mod = NULL;
    CHECK("module_load", cuModuleLoadData(&mod, VGPU_TEST_IMAGE));
    CUfunction fn = NULL;
    CHECK("module_get_function", cuModuleGetFunction(&fn, mod, VGPU_TEST_KERNEL));
    CHECK("launch", cuLaunchKernel(fn, 4, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    CHECK("ctx_sync", cuCtxSynchronize());
    CHECK("nvml_shutdown", nvmlShutdown());
    kv_str("done", "1");
    return 0;
}
