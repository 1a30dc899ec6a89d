/* Control for the RTLD_NEXT/RTLD_DEFAULT regression test: a preload whose dlsym *calls* the real
 * one (the incumbent's approach). glibc then resolves relative to this library, so the tests
 * must observe the breakage (foo != 43, plugin lookup fails). Built with -fno-optimize-sibling-calls
 * so the call is not turned into a tail jump. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
static void *(*real)(void *, const char *);
void *dlsym(void *h, const char *n) {
    if (!real) real = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    return real(h, n);
}
