/* Dry-run stand-in for sm_burn.cu and launch_bench.cu on the simulated GPU (driver API, loaded
 * the libcudart way: dlopen + cuGetProcAddress).
 *   sim_kernels burn SECONDS WARMUP   kernels (duration from VGPU_SIM_KERNEL_NS) in batches of 5
 *                                     with a sync after each; prints kernels_per_s
 *   sim_kernels launch N              N tiny launches + one sync, best of 3; prints us_per_launch */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef CUresult (*gpa_t)(const char *, void **, int, unsigned long long, int *);
typedef CUresult (*init_t)(unsigned);
typedef CUresult (*devget_t)(int *, int);
typedef CUresult (*retain_t)(void **, int);
typedef CUresult (*setcur_t)(void *);
typedef CUresult (*sync_t)(void);
typedef CUresult (*modload_t)(void **, const void *);
typedef CUresult (*getfn_t)(void **, void *, const char *);
typedef CUresult (*launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                             void **, void **);

static gpa_t gpa;
static void *look(const char *n) {
    void *p = NULL;
    int st = 0;
    if (gpa(n, &p, 12000, 0, &st) != 0 || !p) {
        printf("RESULT=FAIL\nerror=lookup %s\n", n);
        exit(1);
    }
    return p;
}
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
#define CK(x)                                                                                      \
    do {                                                                                           \
        CUresult r_ = (x);                                                                         \
        if (r_) {                                                                                  \
            printf("RESULT=FAIL\nerror=%s -> %d\n", #x, r_);                                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        printf("RESULT=FAIL\nerror=%s\n", dlerror());
        return 1;
    }
    gpa = (gpa_t)dlsym(h, "cuGetProcAddress_v2");
    init_t init = (init_t)look("cuInit");
    devget_t devget = (devget_t)look("cuDeviceGet");
    retain_t retain = (retain_t)look("cuDevicePrimaryCtxRetain");
    setcur_t setcur = (setcur_t)look("cuCtxSetCurrent");
    sync_t sync = (sync_t)look("cuCtxSynchronize");
    modload_t modload = (modload_t)look("cuModuleLoadData");
    getfn_t getfn = (getfn_t)look("cuModuleGetFunction");
    launch_t launch = (launch_t)look("cuLaunchKernel");
    int dev;
    void *ctx, *mod, *fn;
    CK(init(0));
    CK(devget(&dev, 0));
    CK(retain(&ctx, dev));
    CK(setcur(ctx));
    CK(modload(&mod, "vgpu-sim-module\nkernel k\n"));
    CK(getfn(&fn, mod, "k"));
    if (strcmp(argv[1], "burn") == 0) {
        double secs = atof(argv[2]), warm = argc > 3 ? atof(argv[3]) : 1;
        double t0 = now_s(), start = -1, end = t0 + warm + secs;
        long done = 0;
        for (;;) {
            for (int b = 0; b < 5; b++) CK(launch(fn, 132, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL));
            CK(sync());
            double t = now_s();
            if (start < 0 && t >= t0 + warm) {
                start = t;
                done = 0;
                continue;
            }
            if (start >= 0) done += 5;
            if (t >= end) break;
        }
        double w = now_s() - start;
        printf("kernels=%ld\nwindow_s=%.3f\nkernels_per_s=%.2f\nRESULT=PASS\n", done, w, done / w);
    } else {
        int n = atoi(argv[2]);
        double best = 1e9;
        for (int r = 0; r < 3; r++) {
            double t0 = now_s();
            for (int i = 0; i < n; i++) CK(launch(fn, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
            CK(sync());
            double us = (now_s() - t0) * 1e6 / n;
            if (us < best) best = us;
        }
        printf("launches=%d\nus_per_launch=%.3f\nRESULT=PASS\n", n, best);
    }
    return 0;
}
