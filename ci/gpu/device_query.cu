// Device query: what the runtime reports about device 0 (under the shim: the container's view).
#include "common.cuh"

int main() {
    int count = 0, drv = 0, rt = 0;
    CK(cudaGetDeviceCount(&count));
    CK(cudaDriverGetVersion(&drv));
    CK(cudaRuntimeGetVersion(&rt));
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    CK(cudaSetDevice(0));
    size_t free = 0, total = 0;
    CK(cudaMemGetInfo(&free, &total));
    std::printf("device_count=%d\ndriver_version=%d\nruntime_version=%d\nname=%s\ncc=%d.%d\n", count, drv, rt, p.name,
                p.major, p.minor);
    std::printf("sm_count=%d\ntotal_global_mem=%zu\nmem_get_info.free=%zu\nmem_get_info.total=%zu\n",
                p.multiProcessorCount, (size_t)p.totalGlobalMem, free, total);
    bool ok = count >= 1 && total > 0 && free <= total && p.multiProcessorCount > 0;
    std::printf("RESULT=%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
