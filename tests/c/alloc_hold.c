/* alloc_hold MIB [WAITFILE]: cuInit, primary context, one cuMemAlloc of MIB MiB; prints
 * rc=<CUresult> total=<cuMemGetInfo total> used=<total - free>, then (if WAITFILE is given)
 * keeps the allocation until WAITFILE exists (at most 60 s). For multi-process tests driven from
 * a shell (e.g. inside a PID namespace, where the test harness cannot talk to the process).
 * With ALLOC_HOLD_START=<file> it prints `ready` after cuInit and waits for that file (at most
 * 60 s) before the context: processes released together create their contexts together. */
#define _GNU_SOURCE
#include "cuda_min.h"
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    CUdevice d;
    CUcontext c;
    if (cuInit(0) || cuDeviceGet(&d, 0)) {
        printf("error=init\n");
        return 1;
    }
    const char *start = getenv("ALLOC_HOLD_START");
    if (start && *start) {
        printf("ready\n");
        fflush(stdout);
        for (int i = 0; i < 60000 && access(start, F_OK) != 0; i++) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    if (cuDevicePrimaryCtxRetain(&c, d) || cuCtxSetCurrent(c)) {
        printf("error=init\n");
        return 1;
    }
    CUdeviceptr p = 0;
    int rc = cuMemAlloc_v2(&p, strtoull(argv[1], NULL, 10) * MIB);
    size_t fr = 0, to = 0;
    cuMemGetInfo_v2(&fr, &to);
    printf("rc=%d total=%zu used=%zu\n", rc, to, to - fr);
    fflush(stdout);
    if (argc > 2) {
        for (int i = 0; i < 6000 && access(argv[2], F_OK) != 0; i++) {
            struct timespec ts = {0, 10000000};
            nanosleep(&ts, NULL);
        }
    }
    if (rc == 0) cuMemFree_v2(p);
    return 0;
}
