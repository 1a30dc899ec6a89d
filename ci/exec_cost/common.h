/* Helpers shared by the exec-cost probes (spawn_timer.c, first_cuinit.c): a monotonic clock in
 * µs, a comparator for qsort of doubles, and a child environment with a chosen LD_PRELOAD. */
#ifndef VGPU_EXEC_COST_COMMON_H
#define VGPU_EXEC_COST_COMMON_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern char **environ;

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* environ without LD_PRELOAD, plus `LD_PRELOAD=<p>` unless p is NULL. */
static char **make_env(const char *p) {
    size_t n = 0;
    while (environ[n]) n++;
    char **e = calloc(n + 2, sizeof *e);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0) e[k++] = environ[i];
    if (p) {
        char *v = malloc(strlen(p) + 12);
        sprintf(v, "LD_PRELOAD=%s", p);
        e[k++] = v;
    }
    e[k] = NULL;
    return e;
}
#endif
