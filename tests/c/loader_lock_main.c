/* Loader-lock race: thread T1 makes this process's first CUDA call (cuMemGetInfo_v2) while the
 * main thread dlopens argv[1], whose constructor calls cuInit. Prints init=<rc> info=<rc> done=1. */
#define _GNU_SOURCE
#include "cuda_min.h"
#include <dlfcn.h>
#include <pthread.h>

static volatile int go;
static int info_rc = -1;

static void *t1(void *arg) {
    (void)arg;
    while (!__atomic_load_n(&go, __ATOMIC_ACQUIRE)) {
    }
    size_t f = 0, t = 0;
    info_rc = cuMemGetInfo_v2(&f, &t);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    pthread_t t;
    pthread_create(&t, NULL, t1, NULL);
    __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) {
        printf("error=%s\n", dlerror());
        return 1;
    }
    int (*rc)(void) = (int (*)(void))dlsym(h, "ctor_init_rc");
    pthread_join(t, NULL);
    kv_int("init", rc ? rc() : -1);
    kv_int("info", info_rc);
    kv_int("done", 1);
    return 0;
}
