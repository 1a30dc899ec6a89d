/* fork: the child must get its own slot in the region (and own none of the parent's usage);
 * the parent's slot and usage are untouched; the child's slot goes away when it exits.
 * Reads the region file itself with the contract's byte offsets. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROCS 1856
#define SLOT 1960
#define PROC_NUM 2008896
#define S_USED_TOTAL(d) (8 + 64 * (d) + 32)
#define S_STATUS 1928

typedef int CUresult;
typedef CUresult (*gpa_t)(const char *, void **, int, unsigned long long, int *);
static gpa_t gpa;
static void *get(const char *n, int v) {
    void *p = NULL; int st = 0;
    if (gpa(n, &p, v, 0, &st) || !p) { printf("missing=%s\n", n); exit(2); }
    return p;
}

static unsigned char region[2008952];
static int read_region(void) {
    FILE *f = fopen(getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE"), "rb");
    if (!f) return -1;
    size_t n = fread(region, 1, sizeof region, f);
    fclose(f);
    return n == sizeof region ? 0 : -1;
}
static int32_t i32at(size_t off) { int32_t v; memcpy(&v, region + off, 4); return v; }
static uint64_t u64at(size_t off) { uint64_t v; memcpy(&v, region + off, 8); return v; }
/* usage of pid's live slot, or -1 if it has none */
static long long slot_used(int pid) {
    int n = i32at(PROC_NUM);
    for (int k = 0; k < n; k++) {
        size_t b = PROCS + (size_t)SLOT * k;
        if (i32at(b) == pid && i32at(b + S_STATUS) != 0) return (long long)u64at(b + S_USED_TOTAL(0));
    }
    return -1;
}

int main(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { printf("error=%s\n", dlerror()); return 1; }
    gpa_t first = (gpa_t)dlsym(h, "cuGetProcAddress_v2");
    void *p; int st;
    first("cuGetProcAddress", &p, 12000, 0, &st);
    gpa = (gpa_t)p;
    CUresult (*cuInit)(unsigned) = get("cuInit", 2000);
    CUresult (*retain)(void **, int) = get("cuDevicePrimaryCtxRetain", 7000);
    CUresult (*setcur)(void *) = get("cuCtxSetCurrent", 4000);
    CUresult (*alloc)(unsigned long long *, size_t) = get("cuMemAlloc", 3020);
    void *ctx; unsigned long long d;
    if (cuInit(0) || retain(&ctx, 0) || setcur(ctx) || alloc(&d, 64u << 20)) { printf("error=init\n"); return 1; }
    read_region();
    int parent = getpid();
    printf("parent_proc_num=%d\nparent_used_before=%lld\n", i32at(PROC_NUM), slot_used(parent));
    fflush(stdout);

    int pipefd[2];
    if (pipe(pipefd)) return 1;
    pid_t c = fork();
    if (c == 0) {
        /* The child touches NVML (what a forked worker typically does): that builds its state. */
        void *nv = dlopen("libnvidia-ml.so.1", RTLD_NOW);
        int (*init)(void) = (int (*)(void))dlsym(nv, "nvmlInit_v2");
        int (*byidx)(unsigned, void **) = (int (*)(unsigned, void **))dlsym(nv, "nvmlDeviceGetHandleByIndex_v2");
        int (*meminfo)(void *, unsigned long long *) = (int (*)(void *, unsigned long long *))dlsym(nv, "nvmlDeviceGetMemoryInfo");
        void *dev;
        unsigned long long m[3];
        if (init() || byidx(0, &dev) || meminfo(dev, m)) { printf("child_error=nvml\n"); _exit(1); }
        read_region();
        printf("child_proc_num=%d\nchild_own_used=%lld\nchild_sees_parent_used=%lld\nchild_nvml_used=%llu\n",
               i32at(PROC_NUM), slot_used(getpid()), slot_used(parent), m[2]);
        fflush(stdout);
        exit(0); /* atexit: the child's slot is given back */
    }
    int status;
    waitpid(c, &status, 0);
    read_region();
    printf("child_exit=%d\nafter_proc_num=%d\nparent_used_after=%lld\n", WEXITSTATUS(status), i32at(PROC_NUM), slot_used(parent));
    return 0;
}
