/* Walks (name, version, flags) lookups through cuGetProcAddress the way libcudart does: dlopen
 * libcuda.so.1, dlsym("cuGetProcAddress_v2"), then every lookup through the pointer returned for
 * "cuGetProcAddress" @ 12000.
 *
 *   pfn_walk ROWS     ROWS: lines "name version flags"
 *
 * Prints one line per lookup: "name version flags rc library symbol" (the library's file name and
 * the symbol of the returned address by dladdr, "-" when none), after a first line "via library
 * symbol" naming the cuGetProcAddress the walk used. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int (*gpa_v2_t)(const char *, void **, int, unsigned long long, int *);

static void where(void *p, const char **lib, const char **sym) {
    Dl_info di;
    *lib = "-";
    *sym = "-";
    if (p && dladdr(p, &di)) {
        if (di.dli_fname) {
            const char *slash = strrchr(di.dli_fname, '/');
            *lib = slash ? slash + 1 : di.dli_fname;
        }
        if (di.dli_sname && di.dli_saddr == p) *sym = di.dli_sname;
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: pfn_walk ROWS\n");
        return 2;
    }
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    gpa_v2_t gpa = (gpa_v2_t)dlsym(h, "cuGetProcAddress_v2");
    if (!gpa) {
        fprintf(stderr, "no cuGetProcAddress_v2\n");
        return 1;
    }
    void *p = NULL;
    int st = 0;
    if (gpa("cuGetProcAddress", &p, 12000, 0, &st) != 0 || !p) {
        fprintf(stderr, "cuGetProcAddress @ 12000 not found\n");
        return 1;
    }
    gpa = (gpa_v2_t)p;
    const char *lib, *sym;
    where(p, &lib, &sym);
    printf("via %s %s\n", lib, sym);
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    char name[256];
    int ver;
    unsigned long long flags;
    while (fscanf(f, "%255s %d %llu", name, &ver, &flags) == 3) {
        p = NULL;
        st = 0;
        int rc = gpa(name, &p, ver, flags, &st);
        where(rc == 0 ? p : NULL, &lib, &sym);
        printf("%s %d %llu %d %s %s\n", name, ver, flags, rc, lib, sym);
    }
    fclose(f);
    return 0;
}
