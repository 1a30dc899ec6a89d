/* Price of the first CUDA touch in a fresh process (docs/design.md "Exec cost"): the two-stage release artifact maps
 * its engine there, once per process.
 *
 *   first_cuinit ROUNDS NAME=PRELOAD [NAME=PRELOAD...]
 *
 * Each round spawns this program once per variant (interleaved) as `first_cuinit --child`; the
 * child times dlopen("libcuda.so.1") + dlsym("cuInit") + cuInit(0) and writes the µs to its
 * stdout (a pipe). Prints `NAME median_us` per variant. Exits non-zero if a child fails. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

static int child(void) {
    double t0 = now_us();
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) return 3;
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
    if (!init || init(0) != 0) return 4;
    printf("%.1f\n", now_us() - t0);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--child") == 0) return child();
    if (argc < 3) {
        fprintf(stderr, "usage: %s ROUNDS NAME=PRELOAD...\n", argv[0]);
        return 2;
    }
    int rounds = atoi(argv[1]), nv = argc - 2;
    char **names = calloc(nv, sizeof *names);
    char ***envs = calloc(nv, sizeof *envs);
    double **t = calloc(nv, sizeof *t);
    for (int v = 0; v < nv; v++) {
        char *s = strdup(argv[2 + v]), *eq = strchr(s, '=');
        if (!eq) return 2;
        *eq = 0;
        names[v] = s;
        envs[v] = make_env(strcmp(eq + 1, "-") == 0 ? NULL : eq + 1);
        t[v] = calloc(rounds, sizeof(double));
    }
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return 2;
    self[n] = 0;
    char *args[] = {self, "--child", NULL};
    for (int r = 0; r < rounds; r++) {
        for (int v = 0; v < nv; v++) {
            int vv = (v + r) % nv, fd[2], st;
            if (pipe(fd) != 0) return 1;
            posix_spawn_file_actions_t fa;
            posix_spawn_file_actions_init(&fa);
            posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
            posix_spawn_file_actions_addclose(&fa, fd[0]);
            pid_t pid;
            if (posix_spawn(&pid, self, &fa, NULL, args, envs[vv]) != 0) return 1;
            posix_spawn_file_actions_destroy(&fa);
            close(fd[1]);
            char buf[64] = {0};
            ssize_t got = read(fd[0], buf, sizeof buf - 1);
            close(fd[0]);
            if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || got <= 0) {
                fprintf(stderr, "variant %s: child failed (status 0x%x)\n", names[vv], st);
                return 1;
            }
            t[vv][r] = atof(buf);
        }
    }
    for (int v = 0; v < nv; v++) {
        qsort(t[v], rounds, sizeof(double), cmp);
        printf("%s %.1f\n", names[v], t[v][rounds / 2]);
    }
    return 0;
}
