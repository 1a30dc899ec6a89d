/* LD_PRELOADed *before* the shim: logs every dlopen (name, flags, calling object) to stderr as
 * `[spy] dlopen name=<name> flags=0x<hex> caller=<object>` and forwards to libc's dlopen. <object>
 * is the calling object's DT_SONAME, else its file's basename (the release artifact's engine is
 * mapped from a memfd: only its soname, libvgpu-engine.so, says what it is).
 * Lets tests check how the shim opens the driver (e.g. RTLD_NODELETE, docs/shim-notes.md §13). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef void *(*dlopen_fn)(const char *, int);

void *dlopen(const char *name, int flags) {
    static dlopen_fn real;
    if (!real) real = (dlopen_fn)dlvsym(RTLD_NEXT, "dlopen", "GLIBC_2.34");
    if (!real) real = (dlopen_fn)dlvsym(RTLD_NEXT, "dlopen", "GLIBC_2.2.5");
    const void *ra = __builtin_return_address(0);
    Dl_info info;
    const char *caller = "?";
    struct link_map *lm = NULL;
    if (dladdr1(ra, &info, (void **)&lm, RTLD_DL_LINKMAP) && info.dli_fname) {
        const char *s = strrchr(info.dli_fname, '/');
        caller = s ? s + 1 : info.dli_fname;
        const char *strtab = NULL;
        long soname = -1;
        for (const ElfW(Dyn) *d = lm ? lm->l_ld : NULL; d && d->d_tag != DT_NULL; d++) {
            if (d->d_tag == DT_STRTAB) strtab = (const char *)d->d_un.d_ptr; /* relocated by glibc */
            if (d->d_tag == DT_SONAME) soname = (long)d->d_un.d_val;
        }
        if (strtab && soname >= 0) caller = strtab + soname;
    }
    char buf[512];
    int n = snprintf(buf, sizeof buf, "[spy] dlopen name=%s flags=0x%x caller=%s\n", name ? name : "(null)",
                     (unsigned)flags, caller);
    if (n > 0) write(2, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
    return real(name, flags);
}
