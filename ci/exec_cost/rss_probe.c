/* Resident memory of a process that does nothing (docs/design.md "Exec cost"): prints this process's VmRSS in KiB,
 * with whatever LD_PRELOAD the caller set, so ci/exec_cost.sh can compare preloads. */
#include <stdio.h>
#include <string.h>

int main(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    if (!f) return 1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "VmRSS:", 6) == 0) {
            long kib = 0;
            sscanf(line + 6, "%ld", &kib);
            printf("%ld\n", kib);
            return 0;
        }
    }
    return 1;
}
