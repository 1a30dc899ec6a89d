/* libwrap.so: an interposer that reaches the next definition of foo with dlsym(RTLD_NEXT).
 * Returns -1 if nothing is found and -2 if RTLD_NEXT wrongly returns this very function (which
 * would otherwise recurse forever). */
#define _GNU_SOURCE
#include <dlfcn.h>
int foo(void) {
    int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "foo");
    if (next == 0) return -1;
    if (next == foo) return -2;
    return next() + 1;
}
