/* dlopen(argv[1] = libplugin.so, RTLD_LOCAL) and call its RTLD_DEFAULT / RTLD_NEXT lookups. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
    if (argc < 2) return 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 3;
    }
    int (*call)(void) = (int (*)(void))dlsym(h, "plugin_call");
    int (*call_next)(void) = (int (*)(void))dlsym(h, "plugin_call_next");
    if (!call || !call_next) return 4;
    printf("plugin_default=%d\n", call());
    printf("plugin_next=%d\n", call_next());
    /* From the main program, RTLD_DEFAULT must NOT see the RTLD_LOCAL plugin's dependency. */
    printf("main_default_priv=%d\n", dlsym(RTLD_DEFAULT, "priv_fn") != 0);
    return 0;
}
