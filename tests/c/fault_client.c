/* Every thread makes its first CUDA calls at once, then the main thread calls again: each call
 * must return (no thread may wait forever for the shim's process state). Prints, per thread,
 * the result of each step and `done=1` at the end. argv[1] = threads (default 4). */
#define _GNU_SOURCE
#include "cuda_min.h"
#include <pthread.h>

static pthread_barrier_t barrier;
static int rc_init[32], rc_retain[32], rc_alloc[32], rc_info[32], has_ctx[32];

static void steps(int id) {
    CUdevice dev = 0;
    CUcontext ctx = NULL;
    CUdeviceptr p = 0;
    size_t free_b = 0, total_b = 0;
    rc_init[id] = cuInit(0);
    cuDeviceGet(&dev, 0);
    rc_retain[id] = cuDevicePrimaryCtxRetain(&ctx, dev);
    /* The driver may have made the context even where the hook reports an error. */
    if (ctx) has_ctx[id] = cuCtxSetCurrent(ctx) == CUDA_SUCCESS;
    rc_alloc[id] = cuMemAlloc_v2(&p, 64 * MIB);
    rc_info[id] = cuMemGetInfo_v2(&free_b, &total_b);
}

static void *worker(void *arg) {
    pthread_barrier_wait(&barrier);
    steps((int)(intptr_t)arg);
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 4;
    if (n < 1 || n > 31) return 2;
    pthread_t t[32];
    pthread_barrier_init(&barrier, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    steps(n); /* a later call, after the first ones */
    for (int i = 0; i <= n; i++) {
        printf("t%d_init=%d\nt%d_retain=%d\nt%d_ctx=%d\nt%d_alloc=%d\nt%d_info=%d\n", i, rc_init[i], i, rc_retain[i],
               i, has_ctx[i], i, rc_alloc[i], i, rc_info[i]);
    }
    kv_int("done", 1);
    return 0;
}
