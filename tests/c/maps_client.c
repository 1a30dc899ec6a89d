/* Non-CUDA process that nevertheless uses dlopen/dlsym (through the shim's dlsym when preloaded),
 * then reports what is mapped and how many threads it has. */
#define _GNU_SOURCE
#define VGPU_TEST_WANT_DL
#include "cuda_min.h"
#include <math.h>

int main(void) {
    void *m = dlsym(RTLD_DEFAULT, "malloc");
    void *f = dlsym(RTLD_NEXT, "free");
    kv_int("dlsym_default_malloc", m != NULL);
    kv_int("dlsym_next_free", f != NULL);
    kv_int("malloc_is_libc", m == (void *)malloc);
    void *lm = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
    NONNULL("dlopen_libm", lm);
    double (*c)(double) = (double (*)(double))dlsym(lm, "cos");
    NONNULL("dlsym_cos", c);
    kv_int("cos0", (long long)c(0.0));
    kv_int("maps_vgpu", maps_contains("libvgpu"));
    kv_int("maps_cuda", maps_contains("libcuda"));
    kv_int("maps_nvml", maps_contains("libnvidia-ml") || maps_contains("libnvidia_ml"));
    FILE *st = fopen("/proc/self/status", "r");
    char line[256];
    int threads = -1;
    while (st && fgets(line, sizeof line, st))
        if (sscanf(line, "Threads: %d", &threads) == 1) break;
    if (st) fclose(st);
    kv_int("threads", threads);
    return 0;
}
