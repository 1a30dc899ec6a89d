/* Commands of the interactive memory client (mem_client.c) for the memory paths CUDA 12.4-13.x
 * added: pools by location, a device's current pool, green contexts. Same protocol: one reply
 * line of `key=value` tokens per command.
 *
 *   pool13_default LOC ID ATYPE     cuMemGetDefaultMemPool({LOC, ID}, ATYPE) -> pool13 kept
 *   pool13_create LOC ID ATYPE      cuMemPoolCreate at {LOC, ID} for ATYPE -> pool13 kept
 *   pool13_destroy                  cuMemPoolDestroy(pool13)
 *   pool13_async BYTES              cuMemAllocFromPoolAsync(pool13, NULL stream) -> ptr
 *   pool13_set ORD                  cuMemSetMemPool({DEVICE, ORD}, PINNED, pool13)
 *   pool13_device_set ORD           cuDeviceSetMemPool(ORD, pool13)
 *   async13 BYTES                   cuMemAllocAsync(NULL stream) -> ptr
 *   free_async13 HEX                cuMemFreeAsync(ptr, NULL stream)
 *   green_create ORD SMS            SM resource of ORD, split into one group of SMS, descriptor,
 *                                   cuGreenCtxCreate(CU_GREEN_CTX_DEFAULT_STREAM) -> gid
 *   green_current GID               cuCtxFromGreenCtx + cuCtxSetCurrent -> ctx
 *   green_destroy GID               cuGreenCtxDestroy
 *   alloc13 BYTES                   cuMemAlloc_v2 -> ptr
 *   free13 HEX                      cuMemFree_v2
 */
#include "cuda_min.h"

typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUgreenCtx_st *CUgreenCtx;
typedef struct CUdevResourceDesc_st *CUdevResourceDesc;

typedef struct {
    int type;
    int id;
} Loc13;

typedef struct {
    int allocType;
    int handleTypes;
    Loc13 location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
} PoolProps13;

/* CUdevResource: 144 bytes in 12.x and 13.x; type at 0, sm.smCount at 96. */
typedef struct {
    unsigned char bytes[144];
} DevResource;

CUresult cuMemGetDefaultMemPool(CUmemoryPool *pool, Loc13 *loc, int type);
CUresult cuMemSetMemPool(Loc13 *loc, int type, CUmemoryPool pool);
CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool);
CUresult cuMemPoolCreate(CUmemoryPool *pool, const PoolProps13 *props);
CUresult cuMemPoolDestroy(CUmemoryPool pool);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream s);
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream s);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s);
CUresult cuDeviceGetDevResource(CUdevice dev, DevResource *res, int type);
CUresult cuDevSmResourceSplitByCount(DevResource *result, unsigned int *nbGroups, const DevResource *input,
                                     DevResource *remaining, unsigned int flags, unsigned int minCount);
CUresult cuDevResourceGenerateDesc(CUdevResourceDesc *desc, DevResource *res, unsigned int n);
CUresult cuGreenCtxCreate(CUgreenCtx *g, CUdevResourceDesc desc, CUdevice dev, unsigned int flags);
CUresult cuGreenCtxDestroy(CUgreenCtx g);
CUresult cuCtxFromGreenCtx(CUcontext *ctx, CUgreenCtx g);

static CUmemoryPool pool13;
static CUgreenCtx greens[64];
static int ngreens;

static void reply_ptr(int rc, CUdeviceptr p) { printf("rc=%d ptr=%llx\n", rc, rc ? 0ULL : (unsigned long long)p); }

static int green_create(int ord, unsigned sms, int *gid) {
    DevResource all, group, rest;
    unsigned int n = 1;
    CUdevResourceDesc desc = NULL;
    CUgreenCtx g = NULL;
    memset(&all, 0, sizeof all);
    int rc = cuDeviceGetDevResource(ord, &all, 1 /* CU_DEV_RESOURCE_TYPE_SM */);
    if (!rc) rc = cuDevSmResourceSplitByCount(&group, &n, &all, &rest, 0, sms);
    if (!rc && n != 1) rc = -2;
    if (!rc) rc = cuDevResourceGenerateDesc(&desc, &group, 1);
    if (!rc) rc = cuGreenCtxCreate(&g, desc, ord, 1 /* CU_GREEN_CTX_DEFAULT_STREAM */);
    if (!rc) {
        if (ngreens >= 64) return -3;
        greens[ngreens] = g;
        *gid = ngreens++;
    }
    return rc;
}

static CUgreenCtx green_of(unsigned long long gid) {
    if (gid >= (unsigned long long)ngreens) {
        fprintf(stderr, "bad green id %llu\n", gid);
        exit(3);
    }
    return greens[gid];
}

/* 1 if `cmd` is one of these commands (its reply printed), else 0. */
int mem13_command(const char *cmd, const char *line) {
    long long a = 0, b = 0, c = 0;
    sscanf(line, "%*s %lld %lld %lld", &a, &b, &c);
    CUdeviceptr p = 0;
    if (!strcmp(cmd, "pool13_default")) {
        Loc13 l = {(int)a, (int)b};
        printf("rc=%d\n", cuMemGetDefaultMemPool(&pool13, &l, (int)c));
    } else if (!strcmp(cmd, "pool13_create")) {
        PoolProps13 pp;
        memset(&pp, 0, sizeof pp);
        pp.allocType = (int)c;
        pp.location.type = (int)a;
        pp.location.id = (int)b;
        printf("rc=%d\n", cuMemPoolCreate(&pool13, &pp));
    } else if (!strcmp(cmd, "pool13_destroy")) {
        printf("rc=%d\n", cuMemPoolDestroy(pool13));
    } else if (!strcmp(cmd, "pool13_async")) {
        int rc = cuMemAllocFromPoolAsync(&p, (size_t)a, pool13, NULL);
        reply_ptr(rc, p);
    } else if (!strcmp(cmd, "pool13_set")) {
        Loc13 l = {1 /* DEVICE */, (int)a};
        printf("rc=%d\n", cuMemSetMemPool(&l, 1 /* PINNED */, pool13));
    } else if (!strcmp(cmd, "pool13_device_set")) {
        printf("rc=%d\n", cuDeviceSetMemPool((int)a, pool13));
    } else if (!strcmp(cmd, "async13")) {
        int rc = cuMemAllocAsync(&p, (size_t)a, NULL);
        reply_ptr(rc, p);
    } else if (!strcmp(cmd, "free_async13")) {
        unsigned long long q = strtoull(line + strlen("free_async13"), NULL, 16);
        printf("rc=%d\n", cuMemFreeAsync(q, NULL));
    } else if (!strcmp(cmd, "alloc13")) {
        int rc = cuMemAlloc_v2(&p, (size_t)a);
        reply_ptr(rc, p);
    } else if (!strcmp(cmd, "free13")) {
        unsigned long long q = strtoull(line + strlen("free13"), NULL, 16);
        printf("rc=%d\n", cuMemFree_v2(q));
    } else if (!strcmp(cmd, "green_create")) {
        int gid = -1;
        int rc = green_create((int)a, (unsigned)b, &gid);
        printf("rc=%d gid=%d\n", rc, gid);
    } else if (!strcmp(cmd, "green_current")) {
        CUcontext ctx = NULL;
        int rc = cuCtxFromGreenCtx(&ctx, green_of((unsigned long long)a));
        if (!rc) rc = cuCtxSetCurrent(ctx);
        printf("rc=%d ctx=%p\n", rc, (void *)ctx);
    } else if (!strcmp(cmd, "green_destroy")) {
        printf("rc=%d\n", cuGreenCtxDestroy(green_of((unsigned long long)a)));
    } else {
        return 0;
    }
    return 1;
}
