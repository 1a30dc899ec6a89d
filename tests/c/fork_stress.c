/* fork while other threads launch and allocate (docs/design.md "Fork").
 *
 *   fork_stress FORKS THREADS
 *
 * Parent: cuInit, retain the primary context, allocate 300 MiB, start THREADS workers that launch
 * kernels, allocate/free, synchronise and query NVML in a loop; then fork FORKS times, one child at
 * a time, at random moments. Each child does what a forked worker does with CUDA: cuInit,
 * cuDevicePrimaryCtxRetain, cuMemAlloc (+ a launch, NVML, free) and exits 0 through exit() (so
 * atexit handlers inherited from the parent run too). A child that does not finish within 10 s is
 * killed and counted as hung (after 3 hung children the run stops).
 * A deadlock of the parent's own threads shows as the run never ending (the test's timeout).
 * Output: forks= ok= hung= failed= signaled= first_bad= (the step a failed child stopped at). */
#define _GNU_SOURCE
#include "cuda_min.h"
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);

static CUcontext g_ctx;
static CUfunction g_fn;
static volatile int g_stop;
static volatile unsigned long long g_work;

static void *worker(void *arg) {
    long id = (long)arg;
    cuCtxSetCurrent(g_ctx);
    unsigned seed = (unsigned)(id * 7919 + 1);
    nvmlDevice_t dev = NULL;
    nvmlDeviceGetHandleByIndex_v2(0, &dev);
    while (!g_stop) {
        CUdeviceptr p = 0;
        switch (rand_r(&seed) % 4) {
        case 0:
        case 1:
            cuLaunchKernel(g_fn, 4, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
            break;
        case 2:
            if (cuMemAlloc_v2(&p, (1 + rand_r(&seed) % 8) * MIB) == CUDA_SUCCESS) cuMemFree_v2(p);
            break;
        default: {
            nvmlMemory_t m;
            if (dev) nvmlDeviceGetMemoryInfo(dev, &m);
            size_t fr, to;
            cuMemGetInfo_v2(&fr, &to);
            if (rand_r(&seed) % 8 == 0) cuCtxSynchronize();
        }
        }
        __atomic_add_fetch(&g_work, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

/* The child's CUDA sequence; returns 0 or the number of the step that failed. */
static int child_main(void) {
    CUdevice d = -1;
    CUcontext c = NULL;
    CUdeviceptr p = 0;
    if (cuInit(0)) return 10;
    if (cuDeviceGet(&d, 0)) return 11;
    if (cuDevicePrimaryCtxRetain(&c, d)) return 12;
    if (cuCtxSetCurrent(c)) return 13;
    if (cuMemAlloc_v2(&p, 16 * MIB)) return 14;
    CUmodule m;
    CUfunction f;
    if (cuModuleLoadData(&m, VGPU_TEST_IMAGE) || cuModuleGetFunction(&f, m, VGPU_TEST_KERNEL)) return 15;
    if (cuLaunchKernel(f, 4, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL)) return 16;
    if (cuCtxSynchronize()) return 17;
    nvmlDevice_t nd;
    nvmlMemory_t mi;
    if (nvmlInit_v2() || nvmlDeviceGetHandleByIndex_v2(0, &nd) || nvmlDeviceGetMemoryInfo(nd, &mi)) return 18;
    if (cuMemFree_v2(p)) return 19;
    cuDevicePrimaryCtxRelease_v2(d);
    return 0;
}

static unsigned long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000ULL + ts.tv_nsec / 1000000;
}

int main(int argc, char **argv) {
    int forks = argc > 1 ? atoi(argv[1]) : 50;
    int nthreads = argc > 2 ? atoi(argv[2]) : 3;
    setvbuf(stdout, NULL, _IOLBF, 0);
    CUdevice d;
    CUdeviceptr big;
    CUmodule m;
    if (cuInit(0) || cuDeviceGet(&d, 0) || cuDevicePrimaryCtxRetain(&g_ctx, d) || cuCtxSetCurrent(g_ctx)) {
        printf("error=init\n");
        return 1;
    }
    if (cuMemAlloc_v2(&big, 300 * MIB)) {
        printf("error=alloc300\n");
        return 1;
    }
    if (cuModuleLoadData(&m, VGPU_TEST_IMAGE) || cuModuleGetFunction(&g_fn, m, VGPU_TEST_KERNEL)) {
        printf("error=module\n");
        return 1;
    }
    if (nvmlInit_v2()) {
        printf("error=nvml\n");
        return 1;
    }
    pthread_t th[64];
    if (nthreads > 64) nthreads = 64;
    for (long i = 0; i < nthreads; i++) pthread_create(&th[i], NULL, worker, (void *)i);

    int ok = 0, hung = 0, failed = 0, signaled = 0, first_bad = 0;
    unsigned seed = (unsigned)getpid();
    for (int i = 0; i < forks; i++) {
        /* Let the workers get going, then fork at a random instant. */
        struct timespec ts = {0, (long)(200000 + rand_r(&seed) % 3000000)};
        nanosleep(&ts, NULL);
        fflush(stdout);
        pid_t c = fork();
        if (c < 0) {
            printf("error=fork errno=%d\n", errno);
            return 1;
        }
        if (c == 0) exit(child_main());
        unsigned long long deadline = now_ms() + 10000;
        int st = 0;
        pid_t r;
        while ((r = waitpid(c, &st, WNOHANG)) == 0 && now_ms() < deadline) {
            struct timespec w = {0, 2000000};
            nanosleep(&w, NULL);
        }
        if (r == 0) {
            kill(c, SIGKILL);
            waitpid(c, &st, 0);
            hung++;
            if (!first_bad) first_bad = -1;
            printf("hung_child=%d iteration=%d\n", (int)c, i);
            if (hung >= 3) break; /* enough evidence; do not wait out every child */
        } else if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
            ok++;
        } else if (WIFSIGNALED(st)) {
            signaled++;
            if (!first_bad) first_bad = 1000 + WTERMSIG(st);
            printf("signaled_child=%d sig=%d iteration=%d\n", (int)c, WTERMSIG(st), i);
        } else {
            failed++;
            if (!first_bad) first_bad = WEXITSTATUS(st);
            printf("failed_child=%d step=%d iteration=%d\n", (int)c, WEXITSTATUS(st), i);
        }
    }
    g_stop = 1;
    for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
    cuMemFree_v2(big);
    printf("forks=%d\nok=%d\nhung=%d\nfailed=%d\nsignaled=%d\nfirst_bad=%d\nwork=%llu\n", forks, ok, hung, failed, signaled,
           first_bad, g_work);
    return 0;
}
