/* First-use race of the context charge (tests/memory_context_race.rs): THREADS threads make their
 * first CUDA calls at the same moment, as a runtime does per thread (cuInit, cuDeviceGet,
 * cuDevicePrimaryCtxRetain, cuCtxSetCurrent), then one cuMemAlloc_v2 of MIB MiB each.
 *   ctx_race THREADS MIB
 * Prints `ok=N oom=M err=E` once every thread is done, then one reply per stdin line:
 *   free    frees every allocation that succeeded -> freed=N rc=R
 *   exit    releases every thread's primary-context reference -> bye=1, and exits */
#define _GNU_SOURCE
#include "cuda_min.h"
#include <pthread.h>

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);

#define MAXT 64
static pthread_barrier_t start;
static size_t bytes;
static CUdeviceptr ptrs[MAXT];
static int rcs[MAXT];
static CUcontext ctx_of[MAXT];

static void *worker(void *arg) {
    int id = (int)(intptr_t)arg;
    CUdevice d = -1;
    CUcontext c = NULL;
    pthread_barrier_wait(&start);
    int rc = cuInit(0);
    if (!rc) rc = cuDeviceGet(&d, 0);
    if (!rc) rc = cuDevicePrimaryCtxRetain(&c, d);
    if (!rc) rc = cuCtxSetCurrent(c);
    if (!rc) rc = cuMemAlloc_v2(&ptrs[id], bytes);
    ctx_of[id] = c;
    rcs[id] = rc;
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 32;
    bytes = (size_t)(argc > 2 ? atoll(argv[2]) : 40) * MIB;
    if (n < 1 || n > MAXT) return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    pthread_t t[MAXT];
    pthread_barrier_init(&start, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    int ok = 0, oom = 0, err = 0, first_err = 0;
    for (int i = 0; i < n; i++) {
        if (rcs[i] == 0) ok++;
        else if (rcs[i] == 2 && ctx_of[i]) oom++; /* CUDA_ERROR_OUT_OF_MEMORY from the allocation */
        else if (!err++) first_err = rcs[i];
    }
    printf("ok=%d oom=%d err=%d first_err=%d\n", ok, oom, err, first_err);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "free", 4)) {
            int freed = 0, rc = 0;
            for (int i = 0; i < n; i++) {
                if (rcs[i] || !ptrs[i]) continue;
                if (!rc) rc = cuCtxSetCurrent(ctx_of[i]);
                if (!rc) rc = cuMemFree_v2(ptrs[i]);
                if (!rc) freed++;
                ptrs[i] = 0;
            }
            printf("freed=%d rc=%d\n", freed, rc);
        } else if (!strncmp(line, "exit", 4)) {
            for (int i = 0; i < n; i++)
                if (ctx_of[i]) cuDevicePrimaryCtxRelease_v2(0);
            printf("bye=1\n");
            return 0;
        }
    }
    return 0;
}
