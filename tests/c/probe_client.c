/* Probes for CUDA the way frameworks do: dlsym(RTLD_DEFAULT, "cuInit") and dlopen("libcuda.so.1").
 * Must never crash, with or without a driver, with or without the shim. */
#define _GNU_SOURCE
#define VGPU_TEST_WANT_DL
#include "cuda_min.h"

int main(void) {
    PFN_cuInit init = (PFN_cuInit)dlsym(RTLD_DEFAULT, "cuInit");
    kv_int("default_cuInit_found", init != NULL);
    if (init != NULL) {
        kv_int("default_cuInit_rc", init(0));
    }
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    kv_str("dlopen_cuda", h ? "ok" : "fail");
    void *hn = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    kv_str("dlopen_nvml", hn ? "ok" : "fail");
    /* After a plain (RTLD_LOCAL) dlopen, without a shim RTLD_DEFAULT still cannot see cuInit.
     * Informational: reported, not compared. */
    printf("info_default_cuInit_after_local_dlopen=%d\n", dlsym(RTLD_DEFAULT, "cuInit") != NULL);
    if (h != NULL) {
        PFN_cuInit hi = (PFN_cuInit)dlsym(h, "cuInit");
        kv_int("handle_cuInit_rc", hi ? hi(0) : -1);
    }
    kv_str("done", "1");
    return 0;
}
