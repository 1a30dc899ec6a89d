/* libplugin.so (DT_NEEDED libpriv.so), loaded RTLD_LOCAL: finds its own dependency's function
 * with dlsym(RTLD_DEFAULT), which glibc resolves in the *caller's* scope. */
#define _GNU_SOURCE
#include <dlfcn.h>
int plugin_call(void) {
    int (*f)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "priv_fn");
    return f ? f() : -1;
}
/* The same through RTLD_NEXT from inside the plugin: libpriv follows the plugin in its scope. */
int plugin_call_next(void) {
    int (*f)(void) = (int (*)(void))dlsym(RTLD_NEXT, "priv_fn");
    return f ? f() : -1;
}
