/* Helper library: its constructor (run by dlopen, under glibc's loader lock) sleeps CTOR_DELAY_MS
 * milliseconds (default 20) and calls cuInit. ctor_init_rc() returns what cuInit answered. */
#define _GNU_SOURCE
#include "cuda_min.h"
#include <time.h>

static int init_rc = -1;

__attribute__((constructor)) static void ctor(void) {
    const char *ms = getenv("CTOR_DELAY_MS");
    long d = ms ? atol(ms) : 20;
    struct timespec t = {d / 1000, (d % 1000) * 1000000L};
    nanosleep(&t, NULL);
    init_rc = cuInit(0);
}

int ctor_init_rc(void) { return init_rc; }
