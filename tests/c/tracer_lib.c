/* libtracer.so: a tracing/pooling library that reaches "the real" driver functions with
 * dlsym(RTLD_NEXT, ...) (docs/design.md "dlsym(RTLD_NEXT)"). Loaded after the shim (LD_PRELOAD="libvgpu.so libtracer.so")
 * or dlopen'ed by the program. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

typedef int (*alloc_fn)(unsigned long long *, size_t);

/* cuMemAlloc_v2 as found through RTLD_NEXT (NULL: not found), then called. Returns the CUresult,
 * or -1 if the lookup found nothing. */
int tracer_alloc(unsigned long long *p, size_t bytes) {
    alloc_fn f = (alloc_fn)dlsym(RTLD_NEXT, "cuMemAlloc_v2");
    if (!f) return -1;
    return f(p, bytes);
}

/* The object RTLD_NEXT's answer for `name` lives in ("none" if not found). */
const char *tracer_next_obj(const char *name) {
    void *f = dlsym(RTLD_NEXT, name);
    Dl_info info;
    if (!f || !dladdr(f, &info) || !info.dli_fname) return "none";
    const char *s = info.dli_fname, *b = s;
    for (; *s; s++)
        if (*s == '/') b = s + 1;
    return b;
}
