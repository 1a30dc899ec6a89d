/* Memory-path micro benchmark (ci/bench.sh). The driver is reached through cuGetProcAddress, as
 * libcudart does.
 *   alloc_bench pair ITERS      cuMemAlloc_v2 + cuMemFree_v2 pairs (1 MiB): median_ns p99_ns
 *   alloc_bench async ITERS     cuMemAllocAsync + cuMemFreeAsync pairs (1 MiB, NULL stream)
 *   alloc_bench meminfo ITERS   cuMemGetInfo_v2 calls
 *   alloc_bench ctxdev ITERS    cuCtxGetDevice + cuCtxGetCurrent (the driver queries the shim's
 *                               allocation hook makes; cuMemGetInfo's makes the first only)
 *   alloc_bench storm MS FILE   pairs for MS milliseconds; every 16 pairs adds 16 to the u64 at
 *                               offset 0 of FILE (mmapped: the count survives a SIGKILL)
 *   alloc_bench limit ITERS     near the limit: ITERS allocation attempts of 2-64 MiB (even
 *                               sizes, so the driver's 2 MiB rounding adds nothing), each block
 *                               kept until 64 are held or an attempt is refused, then the oldest
 *                               is freed: with a container limit far below 64 blocks, about every
 *                               other attempt is refused. Prints attempts, ok, oom, rate
 *                               (attempts per second over the measured loop, frees included),
 *                               ok_rate (successful allocations per second), ok_median_ns and
 *                               oom_median_ns (one cuMemAlloc_v2 call each)
 *   alloc_bench stormlimit MS FILE   the same loop for MS milliseconds; FILE counts successful
 *                               allocations as storm counts pairs
 * ITERS pairs are preceded by ITERS/10 warm-up pairs. ALLOC_BENCH_IDLE_THREAD=1 starts one thread
 * first that only sleeps, waking every 250 ms (the shim's process has one such thread).
 * ALLOC_BENCH_NVML=1 loads and initialises NVML after the context, as the shim's process does
 * (the simulated driver's own alloc/free measures ~0.1 µs slower in a process with one more large
 * mapping, such as simulated NVML's own mapping of the state file, shim or not: docs/design.md,
 * "Memory ledger", measuring it).
 * ALLOC_BENCH_CAPTURED=1 first begins and ends a capture on a new stream (after which the shim
 * checks every stream-ordered allocation and free for capture).
 * ALLOC_BENCH_PAIRED=1 (pair, async): alternates, call by call, between the functions that
 * cuGetProcAddress returned (through the shim, when it is loaded) and the driver's own exports
 * (found in libcuda's ELF symbol table, which no dlsym hook sees), and prints both medians:
 * median_ns (returned) and direct_median_ns (the driver itself). Both run in the same process at
 * the same moments, so the machine's drift between runs cancels; without a shim both are the
 * same function and the difference is the method's own noise. */
#define _GNU_SOURCE
#include <pthread.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

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

/* The measured pairs' functions: as cuGetProcAddress returned them (`hooked`), and the driver's
 * own exports (`own`, paired mode). `via` is the set `one` calls. */
struct mem_api {
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*free)(CUdeviceptr);
    CUresult (*alloc_async)(CUdeviceptr *, size_t, void *);
    CUresult (*free_async)(CUdeviceptr, void *);
};
static struct mem_api hooked, own;
static const struct mem_api *via = &hooked;
static CUresult (*cuMemGetInfo)(size_t *, size_t *);
static CUresult (*cuCtxGetDevice)(int *);
static CUresult (*cuCtxGetCurrent)(void **);

/* The driver's own export `name`: its address from libcuda's .dynsym (file on disk) plus the
 * load base, so neither dlsym nor cuGetProcAddress (both hooked by the shim) is asked. */
static const char *lib_name;
static uintptr_t lib_base;
static int find_lib(struct dl_phdr_info *i, size_t sz, void *d) {
    (void)sz; (void)d;
    if (i->dlpi_name && strstr(i->dlpi_name, "libcuda.so")) { lib_name = i->dlpi_name; lib_base = i->dlpi_addr; return 1; }
    return 0;
}
static void *direct(const char *name) {
    if (!lib_name) dl_iterate_phdr(find_lib, NULL);
    int fd = lib_name ? open(lib_name, O_RDONLY) : -1;
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb)) { fprintf(stderr, "cannot open libcuda for %s\n", name); exit(2); }
    const unsigned char *f = mmap(NULL, sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)f;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(f + eh->e_shoff);
    void *found = NULL;
    for (int k = 0; k < eh->e_shnum && !found; k++) {
        if (sh[k].sh_type != SHT_DYNSYM) continue;
        const Elf64_Sym *sym = (const Elf64_Sym *)(f + sh[k].sh_offset);
        const char *str = (const char *)(f + sh[sh[k].sh_link].sh_offset);
        for (size_t j = 0; j < sh[k].sh_size / sizeof(Elf64_Sym); j++)
            if (sym[j].st_value && !strcmp(str + sym[j].st_name, name)) { found = (void *)(lib_base + sym[j].st_value); break; }
    }
    munmap((void *)f, sb.st_size);
    if (!found) { fprintf(stderr, "libcuda exports no %s\n", name); exit(2); }
    return found;
}

static int one(int mode) {
    CUdeviceptr d;
    size_t f, t;
    switch (mode) {
    case 0: return via->alloc(&d, 1 << 20) || via->free(d);
    case 1: return via->alloc_async(&d, 1 << 20, NULL) || via->free_async(d, NULL);
    case 2: return cuMemGetInfo(&f, &t);
    default: { int dev; void *c; return cuCtxGetDevice(&dev) || cuCtxGetCurrent(&c); }
    }
}

/* Wakes every 250 ms like the shim's housekeeping thread: a thread that ran lately on another CPU
 * makes the simulated driver's munmap (one per free) pay a TLB shootdown, whichever thread it is. */
static void *idle(void *a) { for (;;) usleep(250000); return a; }

/* The near-limit loop's state: a ring of held blocks and a size generator of our own. */
#define HELD_MAX 64
static CUdeviceptr held[HELD_MAX];
static int held_first, held_n;
static unsigned long long rng;
static size_t next_size(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (size_t)(1 + rng % 32) * 2 * (1 << 20);
}
static int free_oldest(void) {
    if (!held_n) return 0;
    CUdeviceptr d = held[held_first];
    held_first = (held_first + 1) % HELD_MAX;
    held_n--;
    return via->free(d);
}
/* One attempt: allocate; keep the block (freeing the oldest at 64 held) or, refused, free the
 * oldest. Returns the allocation's result (2: refused), -1 on any other failure; *dt its time. */
static int limit_step(long long *dt) {
    CUdeviceptr d = 0;
    size_t sz = next_size();
    long long t0 = ns();
    int rc = via->alloc(&d, sz);
    *dt = ns() - t0;
    if (rc == 0) {
        if (held_n == HELD_MAX && free_oldest()) return -1;
        held[(held_first + held_n++) % HELD_MAX] = d;
        return 0;
    }
    if (rc != 2) return -1;
    return free_oldest() ? -1 : 2;
}

int main(int argc, char **argv) {
    if (getenv("ALLOC_BENCH_IDLE_THREAD")) { pthread_t t; pthread_create(&t, NULL, idle, NULL); }
    const char *what = argc > 1 ? argv[1] : "pair";
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    gpa_t first = (gpa_t)dlsym(h, "cuGetProcAddress_v2");
    void *p; int st;
    first("cuGetProcAddress", &p, 12000, 0, &st);
    gpa = (gpa_t)p;
    CUresult (*cuInit)(unsigned) = get("cuInit", 2000);
    CUresult (*cuRetain)(void **, int) = get("cuDevicePrimaryCtxRetain", 7000);
    CUresult (*cuSetCur)(void *) = get("cuCtxSetCurrent", 4000);
    hooked.alloc = get("cuMemAlloc", 3020);
    hooked.free = get("cuMemFree", 3020);
    hooked.alloc_async = get("cuMemAllocAsync", 11020);
    hooked.free_async = get("cuMemFreeAsync", 11020);
    cuMemGetInfo = get("cuMemGetInfo", 3020);
    cuCtxGetDevice = get("cuCtxGetDevice", 2000);
    cuCtxGetCurrent = get("cuCtxGetCurrent", 4000);
    void *ctx;
    if (cuInit(0) || cuRetain(&ctx, 0) || cuSetCur(ctx)) { fprintf(stderr, "init failed\n"); return 1; }
    if (getenv("ALLOC_BENCH_NVML")) {
        void *nv = dlopen("libnvidia-ml.so.1", RTLD_NOW);
        int (*nvml_init)(void) = nv ? (int (*)(void))dlsym(nv, "nvmlInit_v2") : NULL;
        if (!nvml_init || nvml_init()) { fprintf(stderr, "NVML init failed\n"); return 1; }
    }
    if (getenv("ALLOC_BENCH_CAPTURED")) {
        CUresult (*create)(void **, unsigned) = get("cuStreamCreate", 2000);
        CUresult (*begin)(void *, int) = get("cuStreamBeginCapture", 10010);
        CUresult (*end)(void *, void **) = get("cuStreamEndCapture", 10000);
        void *s = NULL, *g = NULL;
        if (create(&s, 1) || begin(s, 2) || end(s, &g)) { fprintf(stderr, "capture failed\n"); return 1; }
    }
    rng = 0x9e3779b97f4a7c15ULL ^ ((unsigned long long)getpid() << 20);
    if (!strcmp(what, "limit")) {
        int iters = argc > 2 ? atoi(argv[2]) : 20000;
        long long *tok = malloc(sizeof(long long) * iters), *toom = malloc(sizeof(long long) * iters), dt;
        int nok = 0, noom = 0;
        for (int i = 0; i < iters / 10 + HELD_MAX; i++)
            if (limit_step(&dt) < 0) { fprintf(stderr, "limit: failed in warm-up\n"); return 1; }
        long long t0 = ns();
        for (int i = 0; i < iters; i++) {
            int rc = limit_step(&dt);
            if (rc < 0) { fprintf(stderr, "limit: failed at %d\n", i); return 1; }
            if (rc == 0) tok[nok++] = dt; else toom[noom++] = dt;
        }
        long long wall = ns() - t0;
        qsort(tok, nok, sizeof(long long), cmp);
        qsort(toom, noom, sizeof(long long), cmp);
        printf("attempts=%d ok=%d oom=%d rate=%lld ok_rate=%lld ok_median_ns=%lld oom_median_ns=%lld\n", iters, nok,
               noom, wall > 0 ? (long long)iters * 1000000000LL / wall : 0,
               wall > 0 ? (long long)nok * 1000000000LL / wall : 0, nok ? tok[nok / 2] : 0, noom ? toom[noom / 2] : 0);
        return 0;
    }
    if (!strcmp(what, "storm") || !strcmp(what, "stormlimit")) {
        int at_limit = !strcmp(what, "stormlimit");
        long long ms = argc > 2 ? atoll(argv[2]) : 1000;
        int fd = argc > 3 ? open(argv[3], O_RDWR) : -1;
        unsigned long long *ctr = fd >= 0 ? mmap(NULL, 8, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : NULL;
        if (!ctr || ctr == MAP_FAILED) { fprintf(stderr, "counter file\n"); return 1; }
        long long end = ns() + ms * 1000000LL;
        long long dt;
        for (unsigned n = 1;; n++) {
            /* At the limit only successful allocations count (a refusal is not progress). */
            int rc = at_limit ? limit_step(&dt) : one(0);
            if (rc < 0 || (!at_limit && rc)) { fprintf(stderr, "alloc/free failed\n"); return 1; }
            if (at_limit && rc) { n--; continue; }
            if (n % 16 == 0) {
                __atomic_fetch_add(ctr, 16, __ATOMIC_RELAXED);
                if (ns() >= end) break;
            }
        }
        return 0;
    }
    int iters = argc > 2 ? atoi(argv[2]) : 20000;
    int mode = !strcmp(what, "pair") ? 0 : !strcmp(what, "async") ? 1 : !strcmp(what, "meminfo") ? 2 : 3;
    if (getenv("ALLOC_BENCH_PAIRED") && mode <= 1) {
        own.alloc = direct("cuMemAlloc_v2");
        own.free = direct("cuMemFree_v2");
        own.alloc_async = direct("cuMemAllocAsync");
        own.free_async = direct("cuMemFreeAsync");
        long long *th = malloc(sizeof(long long) * iters), *td = malloc(sizeof(long long) * iters);
        for (int i = -iters / 10; i < iters; i++) {
            for (int k = 0; k < 2; k++) {
                /* Alternate which goes first, so neither always follows the other. */
                int use_own = k ^ (i & 1);
                via = use_own ? &own : &hooked;
                long long t0 = ns();
                if (one(mode)) { fprintf(stderr, "%s failed at %d\n", what, i); return 1; }
                if (i >= 0) (use_own ? td : th)[i] = ns() - t0;
            }
        }
        qsort(th, iters, sizeof(long long), cmp);
        qsort(td, iters, sizeof(long long), cmp);
        printf("median_ns=%lld p99_ns=%lld direct_median_ns=%lld\n", th[iters / 2], th[iters * 99 / 100], td[iters / 2]);
        return 0;
    }
    for (int i = 0; i < iters / 10; i++)
        if (one(mode)) { fprintf(stderr, "%s failed in warm-up\n", what); return 1; }
    long long *t = malloc(sizeof(long long) * iters);
    for (int i = 0; i < iters; i++) {
        long long a = ns();
        if (one(mode)) { fprintf(stderr, "%s failed at %d\n", what, i); return 1; }
        t[i] = ns() - a;
    }
    qsort(t, iters, sizeof(long long), cmp);
    printf("median_ns=%lld p99_ns=%lld\n", t[iters / 2], t[iters * 99 / 100]);
    return 0;
}
