/* Latency of cuMemAlloc_v2 + cuMemFree_v2 pairs (driver reached through cuGetProcAddress, as
 * libcudart does). Prints the median and p99 of per-pair time in ns over ITER pairs. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef CUresult (*gpa_t)(const char *, void **, int, unsigned long long, int *);

static gpa_t gpa;
static void *get(const char *n, int v) {
    void *p = NULL; int st = 0;
    if (gpa(n, &p, v, 0, &st) || !p) { fprintf(stderr, "missing %s\n", n); exit(2); }
    return p;
}
static long long ns(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
static int cmp(const void *a, const void *b) { long long x = *(const long long *)a, y = *(const long long *)b; return (x > y) - (x < y); }

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 20000;
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    gpa_t first = (gpa_t)dlsym(h, "cuGetProcAddress_v2");
    void *p; int st;
    first("cuGetProcAddress", &p, 12000, 0, &st);
    gpa = (gpa_t)p;
    CUresult (*cuInit)(unsigned) = get("cuInit", 2000);
    CUresult (*cuRetain)(void **, int) = get("cuDevicePrimaryCtxRetain", 7000);
    CUresult (*cuSetCur)(void *) = get("cuCtxSetCurrent", 4000);
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t) = get("cuMemAlloc", 3020);
    CUresult (*cuMemFree)(CUdeviceptr) = get("cuMemFree", 3020);
    void *ctx;
    if (cuInit(0) || cuRetain(&ctx, 0) || cuSetCur(ctx)) { fprintf(stderr, "init failed\n"); return 1; }
    long long *t = malloc(sizeof(long long) * iters);
    for (int i = 0; i < iters; i++) {
        CUdeviceptr d;
        long long a = ns();
        if (cuMemAlloc(&d, 1 << 20) || cuMemFree(d)) { fprintf(stderr, "alloc/free failed at %d\n", i); return 1; }
        t[i] = ns() - a;
    }
    qsort(t, iters, sizeof(long long), cmp);
    printf("median_ns=%lld p99_ns=%lld\n", t[iters / 2], t[iters * 99 / 100]);
    return 0;
}
