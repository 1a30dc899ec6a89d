/* First stage of the release artifact libvgpu.so (docs/design.md "Exec cost").
 *
 * /etc/ld.so.preload maps libvgpu.so into every process of a GPU container; most never touch
 * CUDA or NVML. This object is what they pay for: a few pages, no constructor, no TLS, no
 * libdl/libpthread, a handful of relocations. It exports every hooked cu and nvml name as a
 * 32-byte trampoline (tramp.S, generated from the engine's exports by loader/stage1gen.py) and
 * `dlsym`. The full engine (the Rust shim built with feature `engine`) travels inside this file in
 * the non-loaded section `.vgpu_engine`; the first call of a trampoline, or a `dlsym` of a hooked
 * name, copies it into a memfd, `dlopen`s it, hands it glibc's `dlsym` (vgpu_engine_attach) and
 * fills the trampolines' slots with the engine's functions. The engine's own references to its
 * hooks bind to these trampolines (ELF interposition: they are preemptible and this object comes
 * first in the global scope), so the pointers it hands out lie in libvgpu.so, as before.
 *
 * Without libdl (glibc < 2.34 keeps dlopen/dlsym there), `dlopen`, `dlsym` and `dlerror` are
 * found at run time in the objects already loaded (dl_iterate_phdr + their ELF hash tables); if
 * libdl is not loaded, libc's internal loader loads it first, so a failed mapping names its cause.
 *
 * One thread maps the engine; the others wait for it, but at most TAKEOVER_MS: the mapping thread
 * needs glibc's loader lock, which a waiter may hold (a library constructor calling CUDA inside
 * dlopen). A waiter past the bound maps a copy itself; the first copy to be published serves
 * every thread (ensure_engine, map_and_publish).
 *
 * If the engine cannot be mapped (no memfd and no writable temp dir, a corrupt file), one line
 * goes to stderr and every hooked call fails closed (CUDA_ERROR_NOT_INITIALIZED /
 * NVML_ERROR_UNINITIALIZED): a broken shim must never lift the container's limits. */
#define _GNU_SOURCE
#include <dlfcn.h> /* RTLD_* constants only: nothing from libdl is linked */
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "stage1_table.h" /* VGPU_NHOOKS, vgpu_names, vgpu_name_off (generated, sorted) */

#if !defined(__x86_64__) && !defined(__aarch64__)
#error "the first stage's entry points (tramp.S, vgpu_stage1_slow, dlsym) exist for x86_64 and aarch64 only"
#endif

#define HIDDEN __attribute__((visibility("hidden")))
#define TRAMP_SIZE 32
#define CUDA_ERROR_NOT_INITIALIZED 3
#define NVML_ERROR_UNINITIALIZED 1

typedef void *(*dlsym_fn)(void *, const char *);
typedef void *(*dlopen_fn)(const char *, int);
typedef char *(*dlerror_fn)(void);

/* Layout shared with `Stage1Api` in src/dl.rs. */
struct vgpu_stage1_api {
    size_t size;
    uintptr_t real_dlsym;
    void *(*next)(const char *name);
};
typedef int (*attach_fn)(const struct vgpu_stage1_api *);

/* The trampolines' targets, 0 until the engine is mapped (tramp.S reads them). */
HIDDEN void *vgpu_slots[VGPU_NHOOKS];
extern char vgpu_tramp_base[] HIDDEN;

enum { ST_NONE, ST_LOADING, ST_READY, ST_FAILED };
static int state;
static long loader_tid, loader_pid;
/* Threads that stopped waiting for the loader and map a copy themselves (ensure_engine). */
#define MAX_TAKERS 16
static long taker_tids[MAX_TAKERS];
static void *engine_dlsym;
static dlsym_fn real_dlsym_cached;

/* --- small libc-free helpers ------------------------------------------------------------ */

static int str_eq(const char *a, const char *b) {
    while (*a && *a == *b) {
        a++;
        b++;
    }
    return *a == *b;
}

static int str_cmp(const char *a, const char *b) {
    while (*a && *a == *b) {
        a++;
        b++;
    }
    return (unsigned char)*a - (unsigned char)*b;
}

static const char *base_name(const char *p) {
    const char *b = p;
    for (; *p; p++)
        if (*p == '/') b = p + 1;
    return b;
}

static size_t str_len(const char *s) {
    size_t n = 0;
    while (s[n]) n++;
    return n;
}

static void say(const char *a, const char *b) {
    /* One line on stderr; a failed write is nothing we could report anyway. */
    ssize_t r = write(2, "[libvgpu] ERROR: ", 17);
    r = write(2, a, str_len(a));
    if (b) {
        r = write(2, ": ", 2);
        r = write(2, b, str_len(b));
    }
    r = write(2, "\n", 1);
    (void)r;
}

/* --- symbols of already-loaded objects ----------------------------------------------------- */

static uint32_t gnu_hash(const char *s) {
    uint32_t h = 5381;
    for (; *s; s++) h = h * 33 + (unsigned char)*s;
    return h;
}

static uint32_t sysv_hash(const char *s) {
    uint32_t h = 0, g;
    for (; *s; s++) {
        h = (h << 4) + (unsigned char)*s;
        g = h & 0xf0000000u;
        if (g) h ^= g >> 24;
        h &= ~g;
    }
    return h;
}

static int sym_ok(const ElfW(Sym) *s, const char *strtab, const char *name) {
    /* STT_FUNC only: an IFUNC's value is its resolver (dlopen/dlsym/dlerror are plain functions). */
    return s->st_shndx != SHN_UNDEF && s->st_value != 0 && ELF64_ST_TYPE(s->st_info) == STT_FUNC &&
           str_eq(strtab + s->st_name, name);
}

/* Look NAME up in one loaded object through its dynamic section (any version: the versions of
 * dlopen/dlsym/dlerror in one glibc are the same function). */
static void *object_sym(ElfW(Addr) base, const ElfW(Phdr) *ph, int phnum, const char *name) {
    const ElfW(Dyn) *dyn = 0;
    for (int i = 0; i < phnum; i++)
        if (ph[i].p_type == PT_DYNAMIC) dyn = (const ElfW(Dyn) *)(base + ph[i].p_vaddr);
    if (!dyn) return 0;
    const ElfW(Sym) *symtab = 0;
    const char *strtab = 0;
    const uint32_t *gh = 0, *sh = 0;
    for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
        ElfW(Addr) v = d->d_un.d_ptr;
        /* glibc relocates these entries in place; be correct for a loader that does not. */
        if (v < base) v += base;
        switch (d->d_tag) {
        case DT_SYMTAB: symtab = (const ElfW(Sym) *)v; break;
        case DT_STRTAB: strtab = (const char *)v; break;
        case DT_GNU_HASH: gh = (const uint32_t *)v; break;
        case DT_HASH: sh = (const uint32_t *)v; break;
        }
    }
    if (!symtab || !strtab) return 0;
    if (gh) {
        uint32_t nbuckets = gh[0], symoff = gh[1], bloom_words = gh[2];
        if (nbuckets == 0) return 0;
        const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)(gh + 4) + bloom_words);
        const uint32_t *chain = buckets + nbuckets;
        uint32_t h = gnu_hash(name);
        uint32_t i = buckets[h % nbuckets];
        if (i < symoff) return 0;
        for (;; i++) {
            uint32_t c = chain[i - symoff];
            if ((c | 1) == (h | 1) && sym_ok(&symtab[i], strtab, name))
                return (void *)(base + symtab[i].st_value);
            if (c & 1) return 0;
        }
    }
    if (sh) {
        uint32_t nbucket = sh[0];
        if (nbucket == 0) return 0;
        const uint32_t *bucket = sh + 2, *chain = bucket + nbucket;
        for (uint32_t i = bucket[sysv_hash(name) % nbucket]; i != 0; i = chain[i])
            if (sym_ok(&symtab[i], strtab, name)) return (void *)(base + symtab[i].st_value);
    }
    return 0;
}

struct lookup {
    const char *lib, *name;
    void *found;
};

static int lookup_cb(struct dl_phdr_info *info, size_t size, void *data) {
    struct lookup *l = data;
    (void)size;
    if (!info->dlpi_name || !str_eq(base_name(info->dlpi_name), l->lib)) return 0;
    l->found = object_sym(info->dlpi_addr, info->dlpi_phdr, info->dlpi_phnum, l->name);
    return l->found != 0;
}

/* NAME in the loaded object whose file name is LIB ("libc.so.6"), or 0. */
static void *lib_sym(const char *lib, const char *name) {
    struct lookup l = {lib, name, 0};
    dl_iterate_phdr(lookup_cb, &l);
    return l.found;
}

/* glibc >= 2.34 has them in libc, older ones in libdl (loaded by whoever calls dlsym, and by the
 * engine). Without libdl, libc's own loader (__libc_dlopen_mode, what it loads NSS modules with)
 * loads it first: only libdl's dlopen leaves a message for dlerror, so a failure names its cause. */
static dlopen_fn find_dlopen(void) {
    void *p = lib_sym("libc.so.6", "dlopen");
    if (!p) p = lib_sym("libdl.so.2", "dlopen");
    if (!p) {
        dlopen_fn internal = (dlopen_fn)lib_sym("libc.so.6", "__libc_dlopen_mode");
        if (internal && internal("libdl.so.2", RTLD_NOW | RTLD_LOCAL)) p = lib_sym("libdl.so.2", "dlopen");
        if (!p) p = (void *)internal;
    }
    return (dlopen_fn)p;
}

static dlsym_fn real_dlsym(void) {
    dlsym_fn f = __atomic_load_n(&real_dlsym_cached, __ATOMIC_ACQUIRE);
    if (f) return f;
    f = (dlsym_fn)lib_sym("libc.so.6", "dlsym");
    if (!f) f = (dlsym_fn)lib_sym("libdl.so.2", "dlsym");
    if (!f) {
        /* glibc < 2.34 and nobody loaded libdl yet (we were reached without it). */
        dlopen_fn o = find_dlopen();
        if (o && o("libdl.so.2", RTLD_NOW | RTLD_LOCAL)) f = (dlsym_fn)lib_sym("libdl.so.2", "dlsym");
    }
    if (f) __atomic_store_n(&real_dlsym_cached, f, __ATOMIC_RELEASE);
    return f;
}

static const char *last_dlerror(void) {
    dlerror_fn e = (dlerror_fn)lib_sym("libc.so.6", "dlerror");
    if (!e) e = (dlerror_fn)lib_sym("libdl.so.2", "dlerror");
    const char *m = e ? e() : 0;
    return m ? m : "unknown error";
}

/* `dlsym(RTLD_NEXT, name)` made from this object's code: "after the preloaded object" is what the
 * engine means by RTLD_NEXT, and glibc resolves it from the caller's address. */
static __attribute__((noinline)) void *stage1_next(const char *name) {
    dlsym_fn f = real_dlsym();
    void *r = f ? f(RTLD_NEXT, name) : 0;
    __asm__ volatile("" : "+r"(r)); /* keep the call a call: no tail jump, our return address */
    return r;
}

/* --- the hook names --------------------------------------------------------------------------- */

static const char *hook_name(int i) { return vgpu_names + vgpu_name_off[i]; }

/* Index of NAME in the sorted table, or -1. Allocation- and lock-free. */
static int hook_index(const char *name) {
    int lo = 0, hi = VGPU_NHOOKS - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = str_cmp(name, hook_name(mid));
        if (c == 0) return mid;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return -1;
}

static int fail_cuda(void) { return CUDA_ERROR_NOT_INITIALIZED; }
static int fail_nvml(void) { return NVML_ERROR_UNINITIALIZED; }

static void *fail_stub(int i) {
    return hook_name(i)[0] == 'n' ? (void *)fail_nvml : (void *)fail_cuda;
}

/* --- mapping the engine --------------------------------------------------------------------- */

static int self_cb(struct dl_phdr_info *info, size_t size, void *data) {
    uintptr_t me = (uintptr_t)&self_cb;
    (void)size;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *p = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + p->p_vaddr;
        if (p->p_type == PT_LOAD && me >= lo && me < lo + p->p_memsz) {
            *(const char **)data = info->dlpi_name;
            return 1;
        }
    }
    return 0;
}

static int full_pread(int fd, void *buf, size_t n, off_t off) {
    char *b = buf;
    while (n > 0) {
        ssize_t r = pread(fd, b, n, off);
        if (r <= 0) return -1;
        b += r;
        off += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Offset and size of section `.vgpu_engine` in our own file. */
static int find_engine(int fd, off_t *off, size_t *len) {
    ElfW(Ehdr) eh;
    ElfW(Shdr) sh[128];
    char names[2048];
    if (full_pread(fd, &eh, sizeof eh, 0) != 0) return -1;
    if (eh.e_ident[EI_MAG0] != ELFMAG0 || eh.e_ident[EI_MAG1] != ELFMAG1 || eh.e_ident[EI_MAG2] != ELFMAG2 ||
        eh.e_ident[EI_MAG3] != ELFMAG3 || eh.e_shentsize != sizeof(ElfW(Shdr)) || eh.e_shnum == 0 ||
        eh.e_shnum > 128 || eh.e_shstrndx >= eh.e_shnum)
        return -1;
    if (full_pread(fd, sh, eh.e_shnum * sizeof(ElfW(Shdr)), (off_t)eh.e_shoff) != 0) return -1;
    size_t n = sh[eh.e_shstrndx].sh_size;
    if (n >= sizeof names) n = sizeof names - 1;
    if (full_pread(fd, names, n, (off_t)sh[eh.e_shstrndx].sh_offset) != 0) return -1;
    names[n] = 0;
    for (int i = 0; i < eh.e_shnum; i++) {
        if (sh[i].sh_name < n && str_eq(names + sh[i].sh_name, ".vgpu_engine") && sh[i].sh_type == SHT_PROGBITS &&
            sh[i].sh_size > sizeof(ElfW(Ehdr))) {
            *off = (off_t)sh[i].sh_offset;
            *len = sh[i].sh_size;
            return 0;
        }
    }
    return -1;
}

/* Copy LEN bytes at OFF of FROM to the end of TO. The kernel copies what it can (sendfile: one
 * call instead of two per 16 KiB, no bounce through user memory; the first CUDA call of every
 * process waits for this copy); pread/write finish what it cannot. */
static int copy_range(int from, off_t off, size_t len, int to) {
#ifdef SYS_sendfile
    while (len > 0) {
        off_t at = off;
        long r = syscall(SYS_sendfile, to, from, &at, len);
        if (r <= 0) break;
        off += (off_t)r;
        len -= (size_t)r;
    }
#endif
    char buf[16384];
    while (len > 0) {
        size_t n = len < sizeof buf ? len : sizeof buf;
        if (full_pread(from, buf, n, off) != 0) return -1;
        for (size_t done = 0; done < n;) {
            ssize_t w = write(to, buf + done, n - done);
            if (w <= 0) return -1;
            done += (size_t)w;
        }
        off += (off_t)n;
        len -= n;
    }
    return 0;
}

static char *put_num(char *p, unsigned long v) {
    char tmp[24];
    int n = 0;
    do tmp[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    while (n > 0) *p++ = tmp[--n];
    return p;
}

static char *put_str(char *p, const char *s) {
    while (*s) *p++ = *s++;
    return p;
}

/* dlopen a copy of the engine written to FD (then closed), through PATH. */
static void *open_copy(dlopen_fn dlo, int self, off_t off, size_t len, int fd, const char *path) {
    void *h = 0;
    if (copy_range(self, off, len, fd) == 0) h = dlo(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    close(fd);
    return h;
}

/* dlopen the engine from a copy in a memfd, else from a named temporary file (no /proc, a kernel
 * without memfd_create, vm.memfd_noexec=2) that is removed again at once. */
static void *open_engine(dlopen_fn dlo, int self, off_t off, size_t len) {
    char path[4096], *p;
    void *h;
    int fd;
#ifdef SYS_memfd_create
    /* MFD_CLOEXEC | MFD_EXEC (Linux 6.3+: executable even under vm.memfd_noexec=1); older
     * kernels reject MFD_EXEC with EINVAL. */
    fd = (int)syscall(SYS_memfd_create, "libvgpu-engine.so", 0x1u | 0x10u);
    if (fd < 0) fd = (int)syscall(SYS_memfd_create, "libvgpu-engine.so", 0x1u);
    if (fd >= 0) {
        p = put_num(put_str(path, "/proc/self/fd/"), (unsigned long)fd);
        *p = 0;
        if ((h = open_copy(dlo, self, off, len, fd, path))) return h;
    }
#endif
    const char *dirs[] = {getenv("TMPDIR"), "/dev/shm", "/tmp", "/var/tmp"};
    for (unsigned i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        if (!dirs[i] || !*dirs[i] || str_len(dirs[i]) > 3000) continue;
        p = put_str(path, dirs[i]);
        p = put_str(p, "/.libvgpu-engine.");
        p = put_num(p, (unsigned long)syscall(SYS_getpid));
        p = put_str(p, ".so");
        *p = 0;
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0500);
        if (fd < 0) continue;
        h = open_copy(dlo, self, off, len, fd, path);
        unlink(path);
        if (h) return h;
    }
    return 0;
}

static unsigned long parse_hex(const char **p) {
    unsigned long v = 0;
    for (;; (*p)++) {
        char c = **p;
        if (c >= '0' && c <= '9') v = v * 16 + (unsigned long)(c - '0');
        else if (c >= 'a' && c <= 'f') v = v * 16 + (unsigned long)(c - 'a' + 10);
        else return v;
    }
}

/* Our file by the kernel's name for the mapping that contains our code (the loader's name may be
 * relative to a directory the process has left). Returns an fd or -1. */
static int open_self_from_maps(void) {
    char buf[4096];
    uintptr_t me = (uintptr_t)&self_cb;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC), found = -1;
    size_t have = 0;
    if (fd < 0) return -1;
    for (;;) {
        ssize_t r = read(fd, buf + have, sizeof buf - 1 - have);
        if (r <= 0) break;
        have += (size_t)r;
        buf[have] = 0;
        char *line = buf, *nl;
        for (;;) {
            nl = line;
            while (nl < buf + have && *nl != '\n') nl++;
            if (nl == buf + have) break;
            *nl = 0;
            const char *p = line;
            unsigned long lo = parse_hex(&p);
            if (*p == '-') {
                p++;
                unsigned long hi = parse_hex(&p);
                if (me >= lo && me < hi) {
                    const char *path = line;
                    while (*path && *path != '/') path++;
                    if (*path) found = open(path, O_RDONLY | O_CLOEXEC);
                    close(fd);
                    return found;
                }
            }
            line = nl + 1;
        }
        have -= (size_t)(line - buf);
        for (size_t i = 0; i < have; i++) buf[i] = line[i];
        if (have == sizeof buf - 1) have = 0; /* a line longer than the buffer: drop it */
    }
    close(fd);
    return -1;
}

/* Map a copy of the engine and resolve every hook in it into SLOTS and *EDLSYM; 1 on success.
 * Publishes nothing: the caller decides which copy the trampolines use. */
static int load_engine(void **slots, void **edlsym) {
    const char *self_path = 0;
    dl_iterate_phdr(self_cb, &self_path);
    dlopen_fn dlo = find_dlopen();
    if (!dlo) {
        say("cannot map the engine", "no dlopen in libc.so.6 or libdl.so.2");
        return 0;
    }
    int self = self_path && *self_path == '/' ? open(self_path, O_RDONLY | O_CLOEXEC) : -1;
    if (self < 0) self = open_self_from_maps();
    if (self < 0 && self_path && *self_path) self = open(self_path, O_RDONLY | O_CLOEXEC);
    if (self < 0) {
        say("cannot map the engine: cannot open this library", self_path ? self_path : "(no name)");
        return 0;
    }
    off_t off;
    size_t len;
    void *h = 0;
    if (find_engine(self, &off, &len) != 0)
        say("cannot map the engine: no .vgpu_engine section in", self_path);
    else if (!(h = open_engine(dlo, self, off, len)))
        say("cannot map the engine: dlopen failed", last_dlerror());
    close(self);
    if (!h) return 0;
    dlsym_fn ds = real_dlsym();
    attach_fn attach = ds ? (attach_fn)ds(h, "vgpu_engine_attach") : 0;
    struct vgpu_stage1_api api = {sizeof api, (uintptr_t)ds, stage1_next};
    *edlsym = ds ? ds(h, "dlsym") : 0;
    if (!attach || !*edlsym || attach(&api) != 0) {
        say("cannot map the engine", "vgpu_engine_attach missing or refused");
        return 0;
    }
    for (int i = 0; i < VGPU_NHOOKS; i++) {
        void *f = ds(h, hook_name(i));
        slots[i] = f ? f : fail_stub(i);
    }
    return 1;
}

/* Which copy of the engine the trampolines use: 0 undecided, 1 one is published, 2 none can be. */
static int decided;

/* Map a copy and publish it unless another thread's copy was published first (that copy then
 * serves; ours stays mapped, unused). Everything that can wait for glibc's loader lock (dlopen,
 * dlsym) happens before the decision; publishing only stores pointers, so a thread that waits
 * for a publication never waits for a thread that waits for the loader lock. A failure is
 * published (every hook fails closed from then on) only by the first loader (OWNER); a thread
 * that took over fails just its own call and leaves the verdict to the loader. */
static int map_and_publish(int owner) {
    void *slots[VGPU_NHOOKS];
    void *edlsym = 0;
    int ok = load_engine(slots, &edlsym), expect = 0;
    if (!ok && !owner) return 0;
    if (__atomic_compare_exchange_n(&decided, &expect, ok ? 1 : 2, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        for (int i = 0; i < VGPU_NHOOKS; i++)
            __atomic_store_n(&vgpu_slots[i], ok ? slots[i] : fail_stub(i), __ATOMIC_RELEASE);
        if (ok) __atomic_store_n(&engine_dlsym, edlsym, __ATOMIC_RELEASE);
        __atomic_store_n(&state, ok ? ST_READY : ST_FAILED, __ATOMIC_RELEASE);
        return ok;
    }
    for (;;) {
        int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
        if (s == ST_READY || s == ST_FAILED) return s == ST_READY;
        syscall(SYS_sched_yield);
    }
}

static long now_ms(void) {
    struct timespec t = {0, 0};
    /* The system call, not clock_gettime: that symbol would raise this object's glibc floor. */
    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &t);
    return (long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* How long a thread waits for another thread's mapping before mapping a copy itself. The other
 * thread may be waiting for glibc's loader lock, which the waiter can hold (a constructor run by
 * dlopen calling CUDA): waiting longer could be waiting forever. */
#define TAKEOVER_MS 200

/* 1 when the engine is mapped; 0 when it cannot be (or this thread is mapping it right now). */
static int ensure_engine(void) {
    long since = -1;
    for (;;) {
        int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
        if (s == ST_READY) return 1;
        if (s == ST_FAILED) return 0;
        long me = syscall(SYS_gettid);
        if (s == ST_NONE) {
            int expect = ST_NONE;
            if (!__atomic_compare_exchange_n(&state, &expect, ST_LOADING, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                continue;
            __atomic_store_n(&loader_pid, syscall(SYS_getpid), __ATOMIC_RELAXED);
            __atomic_store_n(&loader_tid, me, __ATOMIC_RELAXED);
            return map_and_publish(1);
        }
        /* ST_LOADING by someone else (or by this thread, from inside the mapping). */
        long pid = __atomic_load_n(&loader_pid, __ATOMIC_RELAXED);
        if (pid != 0 && pid != syscall(SYS_getpid)) {
            /* Forked while another thread was mapping it: that thread does not exist here. */
            int expect = ST_LOADING;
            if (__atomic_compare_exchange_n(&state, &expect, ST_NONE, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                __atomic_store_n(&loader_pid, 0, __ATOMIC_RELAXED);
                __atomic_store_n(&decided, 0, __ATOMIC_RELEASE);
            }
            continue;
        }
        if (__atomic_load_n(&loader_tid, __ATOMIC_RELAXED) == me) return 0;
        for (int i = 0; i < MAX_TAKERS; i++)
            if (__atomic_load_n(&taker_tids[i], __ATOMIC_RELAXED) == me) return 0;
        if (since < 0) since = now_ms();
        if (now_ms() - since >= TAKEOVER_MS) {
            /* Every thread that waited this long maps its own copy: the one holding the loader
             * lock, whichever it is, never waits for another. */
            int slot = -1;
            for (int i = 0; i < MAX_TAKERS && slot < 0; i++) {
                long none = 0;
                if (__atomic_compare_exchange_n(&taker_tids[i], &none, me, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                    slot = i;
            }
            int ok = map_and_publish(0);
            if (slot >= 0) __atomic_store_n(&taker_tids[slot], 0, __ATOMIC_RELEASE);
            return ok;
        }
        struct timespec pause = {0, 100000};
        nanosleep(&pause, 0);
    }
}

/* Slow path of trampoline I (tramp.S): the target to jump to. */
HIDDEN void *vgpu_stage1_resolve(unsigned i) {
    if (i >= VGPU_NHOOKS) return (void *)fail_cuda;
    ensure_engine();
    void *f = __atomic_load_n(&vgpu_slots[i], __ATOMIC_ACQUIRE);
    return f ? f : fail_stub((int)i);
}

/* `dlsym` after a failed engine mapping: hooked names get our (failing) trampolines. */
static void *failed_dlsym(void *handle, const char *name) {
    (void)handle;
    int i = hook_index(name);
    return i >= 0 ? (void *)(vgpu_tramp_base + TRAMP_SIZE * i) : 0;
}

/* Our `dlsym` (stub below): which function answers. Non-hooked names, the overwhelmingly common
 * case, go to glibc's dlsym with the caller's return address intact. */
HIDDEN void *vgpu_stage1_dlsym_target(void *handle, const char *name) {
    (void)handle;
    if (name && (name[0] == 'c' || name[0] == 'n') && hook_index(name) >= 0)
        return ensure_engine() ? __atomic_load_n(&engine_dlsym, __ATOMIC_ACQUIRE) : (void *)failed_dlsym;
    dlsym_fn f = real_dlsym();
    if (!f) {
        say("cannot find glibc's dlsym; aborting", 0);
        abort();
    }
    return (void *)f;
}

/* Entry points. The trampolines (tramp.S) jump to vgpu_stage1_slow with their index in a scratch
 * register (r11 / x17). Every argument register is preserved around the call to
 * vgpu_stage1_resolve, which picks the target; the stack stays aligned to 16. dlsym asks
 * vgpu_stage1_dlsym_target, then tail-jumps with the application's return address intact
 * (glibc resolves RTLD_NEXT relative to it): on the stack on x86_64, in x30 on aarch64. */
#if defined(__x86_64__)
__asm__(".text\n"
        ".globl vgpu_stage1_slow\n"
        ".hidden vgpu_stage1_slow\n"
        ".type vgpu_stage1_slow,@function\n"
        "vgpu_stage1_slow:\n"
        "  push %rbp\n"
        "  mov %rsp, %rbp\n"
        "  sub $192, %rsp\n"
        "  mov %rdi, 0(%rsp)\n"
        "  mov %rsi, 8(%rsp)\n"
        "  mov %rdx, 16(%rsp)\n"
        "  mov %rcx, 24(%rsp)\n"
        "  mov %r8, 32(%rsp)\n"
        "  mov %r9, 40(%rsp)\n"
        "  mov %rax, 48(%rsp)\n"
        "  movdqu %xmm0, 64(%rsp)\n"
        "  movdqu %xmm1, 80(%rsp)\n"
        "  movdqu %xmm2, 96(%rsp)\n"
        "  movdqu %xmm3, 112(%rsp)\n"
        "  movdqu %xmm4, 128(%rsp)\n"
        "  movdqu %xmm5, 144(%rsp)\n"
        "  movdqu %xmm6, 160(%rsp)\n"
        "  movdqu %xmm7, 176(%rsp)\n"
        "  mov %r11d, %edi\n"
        "  call vgpu_stage1_resolve\n"
        "  mov %rax, %r11\n"
        "  mov 0(%rsp), %rdi\n"
        "  mov 8(%rsp), %rsi\n"
        "  mov 16(%rsp), %rdx\n"
        "  mov 24(%rsp), %rcx\n"
        "  mov 32(%rsp), %r8\n"
        "  mov 40(%rsp), %r9\n"
        "  mov 48(%rsp), %rax\n"
        "  movdqu 64(%rsp), %xmm0\n"
        "  movdqu 80(%rsp), %xmm1\n"
        "  movdqu 96(%rsp), %xmm2\n"
        "  movdqu 112(%rsp), %xmm3\n"
        "  movdqu 128(%rsp), %xmm4\n"
        "  movdqu 144(%rsp), %xmm5\n"
        "  movdqu 160(%rsp), %xmm6\n"
        "  movdqu 176(%rsp), %xmm7\n"
        "  leave\n"
        "  jmp *%r11\n"
        ".size vgpu_stage1_slow, .-vgpu_stage1_slow\n"
        /* dlsym: ask vgpu_stage1_dlsym_target, then tail-jump with the application's return
         * address still on the stack (glibc resolves RTLD_NEXT relative to it). */
        ".globl dlsym\n"
        ".type dlsym,@function\n"
        "dlsym:\n"
        "  push %rdi\n"
        "  push %rsi\n"
        "  sub $8, %rsp\n"
        "  call vgpu_stage1_dlsym_target\n"
        "  add $8, %rsp\n"
        "  pop %rsi\n"
        "  pop %rdi\n"
        "  jmp *%rax\n"
        ".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
/* Arguments: x0-x7, x8 (indirect result), q0-q7. x29/x30 form the frame record. */
__asm__(".text\n"
        ".globl vgpu_stage1_slow\n"
        ".hidden vgpu_stage1_slow\n"
        ".type vgpu_stage1_slow,%function\n"
        "vgpu_stage1_slow:\n"
        "  stp x29, x30, [sp, #-224]!\n"
        "  mov x29, sp\n"
        "  stp x0, x1, [sp, #16]\n"
        "  stp x2, x3, [sp, #32]\n"
        "  stp x4, x5, [sp, #48]\n"
        "  stp x6, x7, [sp, #64]\n"
        "  str x8, [sp, #80]\n"
        "  stp q0, q1, [sp, #96]\n"
        "  stp q2, q3, [sp, #128]\n"
        "  stp q4, q5, [sp, #160]\n"
        "  stp q6, q7, [sp, #192]\n"
        "  mov w0, w17\n"
        "  bl vgpu_stage1_resolve\n"
        "  mov x16, x0\n"
        "  ldp x0, x1, [sp, #16]\n"
        "  ldp x2, x3, [sp, #32]\n"
        "  ldp x4, x5, [sp, #48]\n"
        "  ldp x6, x7, [sp, #64]\n"
        "  ldr x8, [sp, #80]\n"
        "  ldp q0, q1, [sp, #96]\n"
        "  ldp q2, q3, [sp, #128]\n"
        "  ldp q4, q5, [sp, #160]\n"
        "  ldp q6, q7, [sp, #192]\n"
        "  ldp x29, x30, [sp], #224\n"
        "  br x16\n"
        ".size vgpu_stage1_slow, .-vgpu_stage1_slow\n"
        ".globl dlsym\n"
        ".type dlsym,%function\n"
        "dlsym:\n"
        "  stp x29, x30, [sp, #-32]!\n"
        "  mov x29, sp\n"
        "  stp x0, x1, [sp, #16]\n"
        "  bl vgpu_stage1_dlsym_target\n"
        "  mov x16, x0\n"
        "  ldp x0, x1, [sp, #16]\n"
        "  ldp x29, x30, [sp], #32\n"
        "  br x16\n"
        ".size dlsym, .-dlsym\n");
#endif
