/* Interactive memory-test client (tests/memory_*.rs).
 *
 * Linked directly against libcuda.so.1 / libnvidia-ml.so.1 (the shim, when preloaded, interposes
 * the exported symbols). Reads one command per line on stdin and answers each with exactly one
 * line on stdout: space-separated `key=value` tokens (values never contain spaces). The test
 * drives it step by step and reads the region file between steps, so no sleeps are needed.
 *
 * Objects created by a command get an `id` (index into a table) used by later commands.
 * Commands (arguments are decimal unless noted):
 *   pid                                  -> pid
 *   init                                 cuInit(0)
 *   ctx ORD                              primary retain + cuCtxSetCurrent
 *   ctx_release ORD | ctx_reset ORD      cuDevicePrimaryCtxRelease_v2 / Reset_v2
 *   ctx_create ORD                       cuCtxCreate_v2 (becomes current) -> id
 *   ctx_destroy ID
 *   ctx_create_at ORD VER                cuCtxCreate as cuGetProcAddress_v2 answers it at VER
 *                                        (2000: the v1 ABI) -> id
 *   ctx_destroy_at ID VER                cuCtxDestroy as answered at VER
 *   alloc BYTES                          cuMemAlloc_v2 -> id ptr
 *   pitch W H ELEM                       cuMemAllocPitch_v2 -> id pitch
 *   managed BYTES FLAGS                  cuMemAllocManaged
 *   free ID | free_ptr HEX               cuMemFree_v2
 *   async BYTES                          cuMemAllocAsync (NULL stream)
 *   pool_create ORD                      cuMemPoolCreate (device location) -> pool kept
 *   pool_async BYTES                     cuMemAllocFromPoolAsync (that pool, NULL stream)
 *   free_async ID                        cuMemFreeAsync (NULL stream)
 *   free_async_thread ID                 cuMemFreeAsync on a new stream from another thread
 *   sync                                 cuCtxSynchronize
 *   vmm BYTES ORD LOCTYPE                cuMemCreate (location type 1 = device, 2 = host)
 *   vmm_map ID | vmm_unmap ID            reserve+map / unmap+address free
 *   vmm_release ID                       cuMemRelease
 *   array W H FMT CH                     cuArrayCreate_v2
 *   array3d W H D FMT CH FLAGS           cuArray3DCreate_v2
 *   mipmap W H D FMT CH FLAGS LEVELS     cuMipmappedArrayCreate
 *   array_destroy ID | mipmap_destroy ID
 *   host_alloc BYTES                     cuMemAllocHost_v2
 *   host_alloc_flags BYTES FLAGS         cuMemHostAlloc
 *   host_register BYTES                  malloc + cuMemHostRegister_v2
 *   host_free ID                         cuMemFreeHost / cuMemHostUnregister + free
 *   meminfo                              cuMemGetInfo_v2 -> free total
 *   totalmem ORD                         cuDeviceTotalMem_v2 -> bytes
 *   cuda_uuid ORD                        -> uuid (GPU-... form)
 *   nvml_init
 *   nvml_uuid IDX                        -> uuid
 *   nvml_mem IDX                         v1 and v2 memory info
 *   nvml_procs IDX VER                   VER 1/2/3 -> count procs=pid:used,...
 *   storm SEED ITERS MINB MAXB MAXHELD   random cuMemAlloc_v2/Managed/AllocAsync + free mix; keeps
 *                                        what it holds at the end -> ok oom err held nheld ...
 *   storm_ms SEED MS MINB MAXB MAXHELD   the same for MS milliseconds of work
 *   freeall                              frees everything the storm holds
 *   exit                                 return from main (exit handlers run)
 *   (and the commands of mem13_cmds.c)
 */
#include "cuda_min.h"
#include <pthread.h>
#include <time.h>
#include <unistd.h>

typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUarray_st *CUarray;
typedef struct CUmipmappedArray_st *CUmipmappedArray;

typedef struct {
    int type;
    int id;
} MemLocation;

typedef struct {
    int type;
    int requestedHandleTypes;
    MemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} MemAllocationProp;

typedef struct {
    int allocType;
    int handleTypes;
    MemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
} MemPoolProps;

typedef struct {
    size_t Width;
    size_t Height;
    int Format;
    unsigned int NumChannels;
} ArrayDesc;

typedef struct {
    size_t Width;
    size_t Height;
    size_t Depth;
    int Format;
    unsigned int NumChannels;
    unsigned int Flags;
} Array3DDesc;

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev);
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxDestroy_v2(CUcontext ctx);
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t w, size_t h, unsigned int elem);
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags);
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream s);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream s);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s);
CUresult cuMemPoolCreate(CUmemoryPool *pool, const MemPoolProps *props);
CUresult cuStreamCreate(CUstream *s, unsigned int flags);
CUresult cuStreamSynchronize(CUstream s);
CUresult cuStreamDestroy_v2(CUstream s);
CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const MemAllocationProp *prop,
                     unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle h);
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                             unsigned long long flags);
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size);
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                  unsigned long long flags);
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);
CUresult cuArrayCreate_v2(CUarray *h, const ArrayDesc *d);
CUresult cuArray3DCreate_v2(CUarray *h, const Array3DDesc *d);
CUresult cuArrayDestroy(CUarray h);
CUresult cuMipmappedArrayCreate(CUmipmappedArray *h, const Array3DDesc *d, unsigned int levels);
CUresult cuMipmappedArrayDestroy(CUmipmappedArray h);
CUresult cuMemAllocHost_v2(void **pp, size_t bytes);
CUresult cuMemHostAlloc(void **pp, size_t bytes, unsigned int flags);
CUresult cuMemFreeHost(void *p);
CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned int flags);
CUresult cuMemHostUnregister(void *p);

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} NvmlMemoryV2;
typedef struct {
    unsigned int pid;
    unsigned long long used;
} NvmlProcV1;
typedef struct {
    unsigned int pid;
    unsigned long long used;
    unsigned int gi, ci;
} NvmlProcV2;
#define NVML_MEMORY_V2_VERSION ((unsigned int)(sizeof(NvmlMemoryV2) | (2u << 24)))

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, NvmlMemoryV2 *m);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *buf, unsigned int len);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t dev, unsigned int *n, NvmlProcV1 *p);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t dev, unsigned int *n, NvmlProcV2 *p);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned int *n, NvmlProcV2 *p);

/* ---- object table ---- */

enum Kind { K_FREE = 0, K_PTR, K_ASYNC, K_VMM, K_ARRAY, K_MIPMAP, K_CTX, K_HOST, K_HOSTREG };
typedef struct {
    enum Kind kind;
    unsigned long long v; /* pointer / handle */
    size_t size;
    CUdeviceptr va; /* vmm mapping */
} Obj;

#define MAXOBJ 65536
static Obj objs[MAXOBJ];
static int nobj;
static CUcontext cur_ctx;
static CUmemoryPool pool;

static int add_obj(enum Kind k, unsigned long long v, size_t size) {
    if (nobj >= MAXOBJ) {
        fprintf(stderr, "object table full\n");
        exit(3);
    }
    objs[nobj].kind = k;
    objs[nobj].v = v;
    objs[nobj].size = size;
    objs[nobj].va = 0;
    return nobj++;
}

static Obj *get_obj(int id) {
    if (id < 0 || id >= nobj) {
        fprintf(stderr, "bad id %d\n", id);
        exit(3);
    }
    return &objs[id];
}

static void fmt_uuid(const CUuuid *u, char *out) {
    const unsigned char *b = (const unsigned char *)u->bytes;
    sprintf(out, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
            b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

static void reply_rc(int rc) { printf("rc=%d\n", rc); }

/* ---- free from another thread on its own stream ---- */

struct free_job {
    CUdeviceptr p;
    int rc_ctx, rc_stream, rc_free, rc_sync;
};

static void *free_thread(void *arg) {
    struct free_job *j = arg;
    CUstream s = NULL;
    j->rc_ctx = cuCtxSetCurrent(cur_ctx);
    j->rc_stream = cuStreamCreate(&s, 0);
    j->rc_free = cuMemFreeAsync(j->p, s);
    j->rc_sync = cuStreamSynchronize(s);
    cuStreamDestroy_v2(s);
    return NULL;
}

/* ---- storm ---- */

static unsigned long long rng_state;
static unsigned long long rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

typedef struct {
    CUdeviceptr p;
    size_t size;
    int how; /* 0 alloc, 1 managed, 2 async */
} Held;
static Held held[4096];
static int nheld;

static int free_held(int i) {
    Held h = held[i];
    int rc = h.how == 2 ? cuMemFreeAsync(h.p, NULL) : cuMemFree_v2(h.p);
    held[i] = held[--nheld];
    return rc;
}

static long long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000LL + t.tv_nsec / 1000000;
}

/* `iters` operations, or (iters == 0) as many as fit in `ms` milliseconds of work. */
static void storm(unsigned long long seed, long iters, long long ms, size_t minb, size_t maxb, int maxheld) {
    rng_state = seed * 2654435761ULL + 88172645463325252ULL;
    long ok = 0, oom = 0, err = 0, frees = 0, free_err = 0;
    int last_err = 0;
    long long end = now_ms() + ms;
    if (maxheld > 4096) maxheld = 4096;
    if (maxb < minb) maxb = minb;
    for (long i = 0; iters ? i < iters : (i % 64 != 0 || now_ms() < end); i++) {
        if (nheld > 0 && (nheld >= maxheld || rnd() % 2 == 0)) {
            int rc = free_held((int)(rnd() % (unsigned)nheld));
            frees++;
            if (rc) free_err++;
            continue;
        }
        size_t sz = minb + (size_t)(rnd() % (maxb - minb + 1));
        int how = (int)(rnd() % 3);
        CUdeviceptr p = 0;
        int rc = how == 0 ? cuMemAlloc_v2(&p, sz) : how == 1 ? cuMemAllocManaged(&p, sz, 1) : cuMemAllocAsync(&p, sz, NULL);
        if (rc == 0) {
            ok++;
            held[nheld].p = p;
            held[nheld].size = sz;
            held[nheld].how = how;
            nheld++;
        } else if (rc == 2) {
            oom++;
        } else {
            err++;
            last_err = rc;
        }
    }
    unsigned long long bytes = 0;
    for (int i = 0; i < nheld; i++) bytes += held[i].size;
    printf("ok=%ld oom=%ld err=%ld last_err=%d frees=%ld free_err=%ld held=%llu nheld=%d\n", ok, oom, err, last_err,
           frees, free_err, bytes, nheld);
}

/* ---- NVML helpers ---- */

static nvmlDevice_t nvml_dev(unsigned idx, int *rc) {
    nvmlDevice_t d = NULL;
    *rc = nvmlDeviceGetHandleByIndex_v2(idx, &d);
    return d;
}

static void nvml_procs(unsigned idx, int ver) {
    int rc;
    nvmlDevice_t d = nvml_dev(idx, &rc);
    if (rc) {
        printf("rc=%d\n", rc);
        return;
    }
    static NvmlProcV1 p1[1100];
    static NvmlProcV2 p2[1100];
    unsigned int n = 1100;
    if (ver == 1)
        rc = nvmlDeviceGetComputeRunningProcesses(d, &n, p1);
    else if (ver == 2)
        rc = nvmlDeviceGetComputeRunningProcesses_v2(d, &n, p2);
    else
        rc = nvmlDeviceGetComputeRunningProcesses_v3(d, &n, p2);
    /* The two-call protocol: a zero-capacity query must report the count. */
    unsigned int n0 = 0;
    int rc0 = ver == 1   ? nvmlDeviceGetComputeRunningProcesses(d, &n0, NULL)
              : ver == 2 ? nvmlDeviceGetComputeRunningProcesses_v2(d, &n0, NULL)
                         : nvmlDeviceGetComputeRunningProcesses_v3(d, &n0, NULL);
    printf("rc=%d count=%u rc0=%d count0=%u procs=", rc, n, rc0, n0);
    if (rc == 0) {
        for (unsigned i = 0; i < n; i++) {
            unsigned pid = ver == 1 ? p1[i].pid : p2[i].pid;
            unsigned long long used = ver == 1 ? p1[i].used : p2[i].used;
            printf("%s%u:%llu", i ? "," : "", pid, used);
        }
    }
    printf("\n");
}

/* Commands of the CUDA 12.4-13.x memory paths (mem13_cmds.c). */
int mem13_command(const char *cmd, const char *line);

/* ---- main loop ---- */

int main(void) {
    char line[512];
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready=1 pid=%d\n", (int)getpid());
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        char cmd[64] = {0};
        unsigned long long a = 0, b = 0, c = 0, d = 0, e = 0, f = 0, g = 0;
        int n = sscanf(line, "%63s %llu %llu %llu %llu %llu %llu %llu", cmd, &a, &b, &c, &d, &e, &f, &g);
        if (n < 1) continue;
        if (!strcmp(cmd, "pid")) {
            printf("pid=%d\n", (int)getpid());
        } else if (!strcmp(cmd, "init")) {
            reply_rc(cuInit(0));
        } else if (!strcmp(cmd, "ctx")) {
            CUdevice dev = -1;
            int rc = cuDeviceGet(&dev, (int)a);
            if (!rc) rc = cuDevicePrimaryCtxRetain(&cur_ctx, dev);
            if (!rc) rc = cuCtxSetCurrent(cur_ctx);
            reply_rc(rc);
        } else if (!strcmp(cmd, "ctx_release")) {
            reply_rc(cuDevicePrimaryCtxRelease_v2((int)a));
        } else if (!strcmp(cmd, "ctx_reset")) {
            reply_rc(cuDevicePrimaryCtxReset_v2((int)a));
        } else if (!strcmp(cmd, "ctx_create")) {
            CUcontext cx = NULL;
            int rc = cuCtxCreate_v2(&cx, 0, (int)a);
            if (!rc) cur_ctx = cx;
            printf("rc=%d id=%d\n", rc, rc ? -1 : add_obj(K_CTX, (unsigned long long)(uintptr_t)cx, 0));
        } else if (!strcmp(cmd, "ctx_create_at")) {
            void *f = NULL;
            CUcontext cx = NULL;
            int rc = cuGetProcAddress_v2("cuCtxCreate", &f, (int)b, 0, NULL);
            if (!rc && !f) rc = 500; /* CUDA_ERROR_NOT_FOUND */
            if (!rc) rc = ((CUresult (*)(CUcontext *, unsigned int, CUdevice))f)(&cx, 0, (int)a);
            if (!rc) cur_ctx = cx;
            printf("rc=%d id=%d\n", rc, rc ? -1 : add_obj(K_CTX, (unsigned long long)(uintptr_t)cx, 0));
        } else if (!strcmp(cmd, "ctx_destroy_at")) {
            void *f = NULL;
            Obj *o = get_obj((int)a);
            int rc = cuGetProcAddress_v2("cuCtxDestroy", &f, (int)b, 0, NULL);
            if (!rc && !f) rc = 500;
            if (!rc) rc = ((CUresult (*)(CUcontext))f)((CUcontext)(uintptr_t)o->v);
            reply_rc(rc);
        } else if (!strcmp(cmd, "ctx_destroy")) {
            Obj *o = get_obj((int)a);
            reply_rc(cuCtxDestroy_v2((CUcontext)(uintptr_t)o->v));
        } else if (!strcmp(cmd, "alloc")) {
            CUdeviceptr p = 0;
            int rc = cuMemAlloc_v2(&p, (size_t)a);
            printf("rc=%d id=%d ptr=%llx\n", rc, rc ? -1 : add_obj(K_PTR, p, a), p);
        } else if (!strcmp(cmd, "pitch")) {
            CUdeviceptr p = 0;
            size_t pitch = 0;
            int rc = cuMemAllocPitch_v2(&p, &pitch, (size_t)a, (size_t)b, (unsigned)c);
            printf("rc=%d id=%d pitch=%zu\n", rc, rc ? -1 : add_obj(K_PTR, p, pitch * b), pitch);
        } else if (!strcmp(cmd, "managed")) {
            CUdeviceptr p = 0;
            int rc = cuMemAllocManaged(&p, (size_t)a, (unsigned)b);
            printf("rc=%d id=%d\n", rc, rc ? -1 : add_obj(K_PTR, p, a));
        } else if (!strcmp(cmd, "free")) {
            Obj *o = get_obj((int)a);
            reply_rc(cuMemFree_v2(o->v));
        } else if (!strcmp(cmd, "free_ptr")) {
            unsigned long long p = strtoull(line + strlen("free_ptr"), NULL, 16);
            reply_rc(cuMemFree_v2(p));
        } else if (!strcmp(cmd, "async")) {
            CUdeviceptr p = 0;
            int rc = cuMemAllocAsync(&p, (size_t)a, NULL);
            printf("rc=%d id=%d\n", rc, rc ? -1 : add_obj(K_ASYNC, p, a));
        } else if (!strcmp(cmd, "pool_create")) {
            MemPoolProps pp;
            memset(&pp, 0, sizeof pp);
            pp.allocType = 1; /* pinned */
            pp.location.type = 1;
            pp.location.id = (int)a;
            reply_rc(cuMemPoolCreate(&pool, &pp));
        } else if (!strcmp(cmd, "pool_async")) {
            CUdeviceptr p = 0;
            int rc = cuMemAllocFromPoolAsync(&p, (size_t)a, pool, NULL);
            printf("rc=%d id=%d\n", rc, rc ? -1 : add_obj(K_ASYNC, p, a));
        } else if (!strcmp(cmd, "free_async")) {
            Obj *o = get_obj((int)a);
            reply_rc(cuMemFreeAsync(o->v, NULL));
        } else if (!strcmp(cmd, "free_async_thread")) {
            Obj *o = get_obj((int)a);
            struct free_job j = {o->v, -1, -1, -1, -1};
            pthread_t t;
            if (pthread_create(&t, NULL, free_thread, &j) != 0) {
                printf("rc=-1\n");
            } else {
                pthread_join(t, NULL);
                printf("rc=%d rc_ctx=%d rc_stream=%d rc_sync=%d\n", j.rc_free, j.rc_ctx, j.rc_stream, j.rc_sync);
            }
        } else if (!strcmp(cmd, "sync")) {
            reply_rc(cuCtxSynchronize());
        } else if (!strcmp(cmd, "vmm")) {
            MemAllocationProp pr;
            memset(&pr, 0, sizeof pr);
            pr.type = 1;
            pr.location.type = (int)c;
            pr.location.id = (int)b;
            CUmemGenericAllocationHandle h = 0;
            int rc = cuMemCreate(&h, (size_t)a, &pr, 0);
            printf("rc=%d id=%d\n", rc, rc ? -1 : add_obj(K_VMM, h, a));
        } else if (!strcmp(cmd, "vmm_map")) {
            Obj *o = get_obj((int)a);
            CUdeviceptr va = 0;
            int rc = cuMemAddressReserve(&va, o->size, 0, 0, 0);
            if (!rc) rc = cuMemMap(va, o->size, 0, o->v, 0);
            if (!rc) o->va = va;
            reply_rc(rc);
        } else if (!strcmp(cmd, "vmm_unmap")) {
            Obj *o = get_obj((int)a);
            int rc = cuMemUnmap(o->va, o->size);
            if (!rc) rc = cuMemAddressFree(o->va, o->size);
            reply_rc(rc);
        } else if (!strcmp(cmd, "vmm_release")) {
            Obj *o = get_obj((int)a);
            reply_rc(cuMemRelease(o->v));
        } else if (!strcmp(cmd, "array")) {
            ArrayDesc ad = {(size_t)a, (size_t)b, (int)c, (unsigned)d};
            CUarray h = NULL;
            int rc = cuArrayCreate_v2(&h, &ad);
            printf("rc=%d id=%d\n", rc, rc ? -1 : add_obj(K_ARRAY, (unsigned long long)(uintptr_t)h, 0));
        } else if (!strcmp(cmd, "array3d")) {
            Array3DDesc ad = {(size_t)a, (size_t)b, (size_t)c, (int)d, (unsigned)e, (unsigned)f};
            CUarray h = NULL;
            int rc = cuArray3DCreate_v2(&h, &ad);
            printf("rc=%d id=%d\n", rc, rc ? -1 : add_obj(K_ARRAY, (unsigned long long)(uintptr_t)h, 0));
        } else if (!strcmp(cmd, "mipmap")) {
            Array3DDesc ad = {(size_t)a, (size_t)b, (size_t)c, (int)d, (unsigned)e, (unsigned)f};
            CUmipmappedArray h = NULL;
            int rc = cuMipmappedArrayCreate(&h, &ad, (unsigned)g);
            printf("rc=%d id=%d\n", rc, rc ? -1 : add_obj(K_MIPMAP, (unsigned long long)(uintptr_t)h, 0));
        } else if (!strcmp(cmd, "array_destroy")) {
            reply_rc(cuArrayDestroy((CUarray)(uintptr_t)get_obj((int)a)->v));
        } else if (!strcmp(cmd, "mipmap_destroy")) {
            reply_rc(cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)get_obj((int)a)->v));
        } else if (!strcmp(cmd, "host_alloc")) {
            void *p = NULL;
            int rc = cuMemAllocHost_v2(&p, (size_t)a);
            printf("rc=%d id=%d\n", rc, rc ? -1 : add_obj(K_HOST, (unsigned long long)(uintptr_t)p, a));
        } else if (!strcmp(cmd, "host_alloc_flags")) {
            void *p = NULL;
            int rc = cuMemHostAlloc(&p, (size_t)a, (unsigned)b);
            printf("rc=%d id=%d\n", rc, rc ? -1 : add_obj(K_HOST, (unsigned long long)(uintptr_t)p, a));
        } else if (!strcmp(cmd, "host_register")) {
            void *p = NULL;
            if (posix_memalign(&p, 4096, (size_t)a)) {
                printf("rc=-1\n");
            } else {
                int rc = cuMemHostRegister_v2(p, (size_t)a, 0);
                printf("rc=%d id=%d\n", rc, add_obj(K_HOSTREG, (unsigned long long)(uintptr_t)p, a));
            }
        } else if (!strcmp(cmd, "host_free")) {
            Obj *o = get_obj((int)a);
            void *p = (void *)(uintptr_t)o->v;
            if (o->kind == K_HOST) {
                reply_rc(cuMemFreeHost(p));
            } else {
                int rc = cuMemHostUnregister(p);
                free(p);
                reply_rc(rc);
            }
        } else if (!strcmp(cmd, "meminfo")) {
            size_t fr = 0, to = 0;
            int rc = cuMemGetInfo_v2(&fr, &to);
            printf("rc=%d free=%zu total=%zu\n", rc, fr, to);
        } else if (!strcmp(cmd, "totalmem")) {
            size_t by = 0;
            int rc = cuDeviceTotalMem_v2(&by, (int)a);
            printf("rc=%d bytes=%zu\n", rc, by);
        } else if (!strcmp(cmd, "cuda_uuid")) {
            CUuuid u;
            char s[64];
            memset(&u, 0, sizeof u);
            int rc = cuDeviceGetUuid(&u, (int)a);
            fmt_uuid(&u, s);
            printf("rc=%d uuid=%s\n", rc, s);
        } else if (!strcmp(cmd, "nvml_init")) {
            reply_rc(nvmlInit_v2());
        } else if (!strcmp(cmd, "nvml_uuid")) {
            int rc;
            char s[96] = {0};
            nvmlDevice_t dv = nvml_dev((unsigned)a, &rc);
            if (!rc) rc = nvmlDeviceGetUUID(dv, s, sizeof s);
            printf("rc=%d uuid=%s\n", rc, s[0] ? s : "-");
        } else if (!strcmp(cmd, "nvml_mem")) {
            int rc;
            nvmlDevice_t dv = nvml_dev((unsigned)a, &rc);
            nvmlMemory_t m1;
            NvmlMemoryV2 m2;
            memset(&m1, 0, sizeof m1);
            memset(&m2, 0, sizeof m2);
            m2.version = NVML_MEMORY_V2_VERSION;
            int rc1 = rc ? rc : nvmlDeviceGetMemoryInfo(dv, &m1);
            int rc2 = rc ? rc : nvmlDeviceGetMemoryInfo_v2(dv, &m2);
            printf("rc=%d rc1=%d total1=%llu free1=%llu used1=%llu rc2=%d total2=%llu reserved2=%llu free2=%llu used2=%llu\n",
                   rc1 | rc2, rc1, m1.total, m1.free, m1.used, rc2, m2.total, m2.reserved, m2.free, m2.used);
        } else if (!strcmp(cmd, "nvml_procs")) {
            nvml_procs((unsigned)a, (int)b);
        } else if (!strcmp(cmd, "storm")) {
            storm(a, (long)b, 0, (size_t)c, (size_t)d, (int)e);
        } else if (!strcmp(cmd, "storm_ms")) {
            storm(a, 0, (long long)b, (size_t)c, (size_t)d, (int)e);
        } else if (!strcmp(cmd, "freeall")) {
            int errs = 0;
            while (nheld > 0)
                if (free_held(nheld - 1)) errs++;
            printf("rc=%d\n", errs);
        } else if (!strcmp(cmd, "exit")) {
            printf("bye=1\n");
            fflush(stdout);
            return 0;
        } else if (mem13_command(cmd, line)) {
        } else {
            printf("error=unknown_command\n");
        }
        fflush(stdout);
    }
    return 0;
}
