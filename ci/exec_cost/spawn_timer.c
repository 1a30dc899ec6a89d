/* Per-exec cost of a preloaded library (method of docs/shim-notes.md §6).
 *
 *   spawn_timer ROUNDS WARMUP PROGRAM NAME=PRELOAD [NAME=PRELOAD...]
 *
 * PRELOAD is a path, or "-" for no LD_PRELOAD. Each round posix_spawns PROGRAM once per variant
 * (variants interleaved, so drift hits all of them alike) and waits for it; the wall time of
 * spawn+wait is recorded. Prints one line per variant:
 *   NAME median_us p10_us p90_us
 * Exits non-zero if any child fails (a preload that breaks exec must not look cheap). */
#define _GNU_SOURCE
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s ROUNDS WARMUP PROGRAM NAME=PRELOAD...\n", argv[0]);
        return 2;
    }
    int rounds = atoi(argv[1]), warm = atoi(argv[2]);
    char *prog = argv[3];
    int nv = argc - 4;
    char **names = calloc(nv, sizeof *names);
    char ***envs = calloc(nv, sizeof *envs);
    double **t = calloc(nv, sizeof *t);
    for (int v = 0; v < nv; v++) {
        char *s = strdup(argv[4 + v]);
        char *eq = strchr(s, '=');
        if (!eq) {
            fprintf(stderr, "bad variant %s\n", s);
            return 2;
        }
        *eq = 0;
        names[v] = s;
        envs[v] = make_env(strcmp(eq + 1, "-") == 0 ? NULL : eq + 1);
        t[v] = calloc(rounds, sizeof(double));
    }
    char *args[] = {prog, NULL};
    for (int r = -warm; r < rounds; r++) {
        for (int v = 0; v < nv; v++) {
            /* rotate the order each round so no variant always runs first */
            int vv = (v + (r < 0 ? 0 : r)) % nv;
            pid_t pid;
            double t0 = now_us();
            if (posix_spawn(&pid, prog, NULL, NULL, args, envs[vv]) != 0) {
                perror("posix_spawn");
                return 1;
            }
            int st;
            if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                fprintf(stderr, "variant %s: child failed (status 0x%x)\n", names[vv], st);
                return 1;
            }
            double dt = now_us() - t0;
            if (r >= 0) t[vv][r] = dt;
        }
    }
    for (int v = 0; v < nv; v++) {
        qsort(t[v], rounds, sizeof(double), cmp);
        printf("%s %.1f %.1f %.1f\n", names[v], t[v][rounds / 2], t[v][rounds / 10], t[v][rounds * 9 / 10]);
    }
    return 0;
}
