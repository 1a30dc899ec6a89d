/* Driver-held-memory test client (tests/memory_truth.rs).
 *
 * Linked against libcuda.so.1 (the shim, when preloaded, interposes). One command per stdin line,
 * one `key=value ...` reply line each (the same protocol as mem_client.c):
 *   pid | init | exit
 *   ctx ORD                 primary retain + cuCtxSetCurrent (the path the shim sees)
 *   hidden ORD              primary context through the simulated driver's private export table
 *                           (VGPU_SIM_HIDDEN_PRIMARY=1), as NVIDIA's runtime does: no hooked call
 *   module MIB              cuModuleLoadData of an ELF image of MIB MiB -> id
 *   library MIB             cuLibraryLoadData of the same kind of image -> id
 *   module_unload ID | library_unload ID
 *   limit L V               cuCtxSetLimit(L, V)
 *   graph MIB [KEEP]        graph with one MIB MiB memory-allocation node and a free node of it
 *                           (KEEP=1: no free node), instantiated -> id
 *   graph_at MIB VER        the same graph (with its free node), instantiated through the pointer
 *                           cuGetProcAddress_v2("cuGraphInstantiate", VER) hands out: the
 *                           (exec, graph, errNode, log, size) ABI below 12000 -> id
 *   graph_params MIB FLAGS  the same graph, instantiated with cuGraphInstantiateWithParams(FLAGS;
 *                           2: upload) -> id
 *   graph_upload ID         cuGraphUpload on the NULL stream
 *   graph_launch ID         cuGraphLaunch on the NULL stream + cuCtxSynchronize
 *   trim ORD                cuDeviceGraphMemTrim
 *   graph_attr ORD          cuDeviceGetGraphMemAttribute -> used reserved (the driver's own figures)
 * Stream capture. S is a stream id from `stream`, or 9999 for the per-thread default stream
 * (through the _ptsz entry points with the NULL handle):
 *   stream                  cuStreamCreate (non-blocking) -> id
 *   cap_begin S             cuStreamBeginCapture_v2 (relaxed)
 *   alloc_async S MIB       cuMemAllocAsync on S (captured or not) -> id dptr
 *   free_async S ID         cuMemFreeAsync on S
 *   cap_kernel S MODID      cuLaunchKernel of vgpu_test_kernel of module MODID on S
 *   cap_end S [FLAGS]       cuStreamEndCapture + cuGraphInstantiateWithFlags(FLAGS) -> id (an exec)
 *   sync                    cuCtxSynchronize (stream-ordered pools trim to their threshold)
 *   alloc BYTES -> id | free ID
 *   fill CHUNK              cuMemAlloc_v2 CHUNK until it fails -> n rc (kept)
 *   meminfo                 cuMemGetInfo_v2 -> free total
 *   module_loop N MIB       N × (cuModuleLoadData + cuModuleUnload) -> ns per pair (bench)
 */
#include <time.h>
#include "cuda_min.h"
#include <unistd.h>

typedef struct CUlib_st *CUlibrary;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphExec_st *CUgraphExec;

typedef struct {
    int allocType, handleTypes, locType, locId;
    void *win32;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
    const void *accessDescs;
    size_t accessDescCount;
    size_t bytesize;
    CUdeviceptr dptr;
} MemAllocNodeParams;

CUresult cuGetExportTable(const void **table, const CUuuid *id);
CUresult cuModuleUnload(CUmodule m);
CUresult cuLibraryLoadData(CUlibrary *l, const void *code, int *jo, void **jv, unsigned nj, int *lo, void **lv, unsigned nl);
CUresult cuLibraryUnload(CUlibrary l);
CUresult cuCtxSetLimit(int limit, size_t value);
CUresult cuGraphCreate(CUgraph *g, unsigned flags);
CUresult cuGraphAddMemAllocNode(CUgraphNode *n, CUgraph g, const CUgraphNode *deps, size_t nd, MemAllocNodeParams *p);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags);
CUresult cuGraphLaunch(CUgraphExec e, CUstream s);
typedef struct {
    unsigned long long flags;
    CUstream upload_stream;
    CUgraphNode err_node;
    int result;
} InstantiateParams;
CUresult cuGraphInstantiateWithParams(CUgraphExec *e, CUgraph g, InstantiateParams *p);
CUresult cuGraphUpload(CUgraphExec e, CUstream s);
CUresult cuDeviceGraphMemTrim(CUdevice d);
CUresult cuGraphAddMemFreeNode(CUgraphNode *n, CUgraph g, const CUgraphNode *deps, size_t nd, CUdeviceptr p);
CUresult cuDeviceGetGraphMemAttribute(CUdevice d, int attr, void *v);
CUresult cuStreamCreate(CUstream *s, unsigned flags);
CUresult cuStreamBeginCapture_v2(CUstream s, int mode);
CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, int mode);
CUresult cuStreamEndCapture(CUstream s, CUgraph *g);
CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g);
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t bytes, CUstream s);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t bytes, CUstream s);
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s);
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shmem, CUstream s, void **params, void **extra);

#define PTDS 9999ULL

#define MAXOBJ 4096
static void *objs[MAXOBJ];
static int nobj;

static int add(void *p) {
    if (nobj >= MAXOBJ) return -1;
    objs[nobj] = p;
    return nobj++;
}

/* An ELF64 image whose section header table ends at `bytes` (what the simulated driver sizes
 * an image by). */
static void *elf_image(size_t bytes) {
    unsigned char *b = calloc(1, bytes);
    if (!b) return NULL;
    b[0] = 0x7f; b[1] = 'E'; b[2] = 'L'; b[3] = 'F'; b[4] = 2; b[5] = 1; b[6] = 1;
    unsigned long long shoff = bytes - 64;
    unsigned short shentsize = 64, shnum = 1;
    memcpy(b + 0x28, &shoff, 8);
    memcpy(b + 0x3a, &shentsize, 2);
    memcpy(b + 0x3c, &shnum, 2);
    return b;
}

int main(void) {
    char line[512];
    CUcontext ctx = NULL;
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready=1 pid=%d\n", (int)getpid());
    while (fgets(line, sizeof line, stdin)) {
        char cmd[64] = {0};
        unsigned long long a = 0, b = 0;
        if (sscanf(line, "%63s %llu %llu", cmd, &a, &b) < 1) continue;
        if (!strcmp(cmd, "pid")) {
            printf("pid=%d\n", (int)getpid());
        } else if (!strcmp(cmd, "init")) {
            printf("rc=%d\n", cuInit(0));
        } else if (!strcmp(cmd, "ctx")) {
            CUdevice d = -1;
            int rc = cuDeviceGet(&d, (int)a);
            if (!rc) rc = cuDevicePrimaryCtxRetain(&ctx, d);
            if (!rc) rc = cuCtxSetCurrent(ctx);
            printf("rc=%d\n", rc);
        } else if (!strcmp(cmd, "hidden")) {
            CUuuid id;
            const void *t = NULL;
            memcpy(id.bytes, "vgpu-sim-hidden!", 16);
            int rc = cuGetExportTable(&t, &id);
            if (!rc) {
                CUresult (*retain)(CUcontext *, int);
                memcpy(&retain, (const char *)t + sizeof(size_t), sizeof retain);
                rc = retain(&ctx, (int)a);
            }
            printf("rc=%d\n", rc);
        } else if (!strcmp(cmd, "module") || !strcmp(cmd, "library")) {
            size_t bytes = (size_t)a << 20;
            void *img = elf_image(bytes);
            int rc, id = -1;
            if (!strcmp(cmd, "module")) {
                CUmodule m = NULL;
                rc = cuModuleLoadData(&m, img);
                if (!rc) id = add(m);
            } else {
                CUlibrary l = NULL;
                rc = cuLibraryLoadData(&l, img, NULL, NULL, 0, NULL, NULL, 0);
                if (!rc) id = add(l);
            }
            free(img);
            printf("rc=%d id=%d\n", rc, id);
        } else if (!strcmp(cmd, "module_unload")) {
            printf("rc=%d\n", cuModuleUnload((CUmodule)objs[a]));
        } else if (!strcmp(cmd, "library_unload")) {
            printf("rc=%d\n", cuLibraryUnload((CUlibrary)objs[a]));
        } else if (!strcmp(cmd, "limit")) {
            printf("rc=%d\n", cuCtxSetLimit((int)a, (size_t)b));
        } else if (!strcmp(cmd, "graph")) {
            CUgraph g = NULL;
            CUgraphNode n = NULL;
            CUgraphExec e = NULL;
            MemAllocNodeParams p;
            memset(&p, 0, sizeof p);
            p.allocType = 1; /* pinned */
            p.locType = 1;   /* device */
            p.locId = 0;
            p.bytesize = (size_t)a << 20;
            int rc = cuGraphCreate(&g, 0);
            if (!rc) rc = cuGraphAddMemAllocNode(&n, g, NULL, 0, &p);
            CUgraphNode fn_ = NULL;
            if (!rc && !b) rc = cuGraphAddMemFreeNode(&fn_, g, &n, 1, p.dptr);
            if (!rc) rc = cuGraphInstantiateWithFlags(&e, g, 0);
            printf("rc=%d id=%d dptr=%llx\n", rc, rc ? -1 : add(e), p.dptr);
        } else if (!strcmp(cmd, "graph_at")) {
            CUgraph g = NULL;
            CUgraphNode n = NULL, fn_ = NULL;
            CUgraphExec e = NULL;
            MemAllocNodeParams p;
            memset(&p, 0, sizeof p);
            p.allocType = 1; /* pinned */
            p.locType = 1;   /* device */
            p.bytesize = (size_t)a << 20;
            void *f = NULL;
            int rc = cuGetProcAddress_v2("cuGraphInstantiate", &f, (int)b, 0, NULL);
            if (!rc && !f) rc = 500; /* CUDA_ERROR_NOT_FOUND */
            if (!rc) rc = cuGraphCreate(&g, 0);
            if (!rc) rc = cuGraphAddMemAllocNode(&n, g, NULL, 0, &p);
            if (!rc) rc = cuGraphAddMemFreeNode(&fn_, g, &n, 1, p.dptr);
            if (!rc && b < 12000) {
                char log[64];
                CUgraphNode err = NULL;
                rc = ((CUresult (*)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t))f)(&e, g, &err, log, sizeof log);
            } else if (!rc) {
                rc = ((CUresult (*)(CUgraphExec *, CUgraph, unsigned long long))f)(&e, g, 0);
            }
            printf("rc=%d id=%d\n", rc, rc ? -1 : add(e));
        } else if (!strcmp(cmd, "graph_params")) {
            CUgraph g = NULL;
            CUgraphNode n = NULL, fn_ = NULL;
            CUgraphExec e = NULL;
            MemAllocNodeParams p;
            memset(&p, 0, sizeof p);
            p.allocType = 1; /* pinned */
            p.locType = 1;   /* device */
            p.bytesize = (size_t)a << 20;
            InstantiateParams ip;
            memset(&ip, 0, sizeof ip);
            ip.flags = b;
            int rc = cuGraphCreate(&g, 0);
            if (!rc) rc = cuGraphAddMemAllocNode(&n, g, NULL, 0, &p);
            if (!rc) rc = cuGraphAddMemFreeNode(&fn_, g, &n, 1, p.dptr);
            if (!rc) rc = cuGraphInstantiateWithParams(&e, g, &ip);
            printf("rc=%d id=%d\n", rc, rc ? -1 : add(e));
        } else if (!strcmp(cmd, "graph_upload")) {
            printf("rc=%d\n", cuGraphUpload((CUgraphExec)objs[a], NULL));
        } else if (!strcmp(cmd, "graph_launch")) {
            int rc = cuGraphLaunch((CUgraphExec)objs[a], NULL);
            if (!rc) rc = cuCtxSynchronize();
            printf("rc=%d\n", rc);
        } else if (!strcmp(cmd, "graph_attr")) {
            unsigned long long used = 0, reserved = 0;
            int rc = cuDeviceGetGraphMemAttribute((int)a, 0, &used);
            if (!rc) rc = cuDeviceGetGraphMemAttribute((int)a, 2, &reserved);
            printf("rc=%d used=%llu reserved=%llu\n", rc, used, reserved);
        } else if (!strcmp(cmd, "stream")) {
            CUstream s = NULL;
            int rc = cuStreamCreate(&s, 1);
            printf("rc=%d id=%d\n", rc, rc ? -1 : add(s));
        } else if (!strcmp(cmd, "cap_begin")) {
            int rc = a == PTDS ? cuStreamBeginCapture_v2_ptsz(NULL, 2) : cuStreamBeginCapture_v2((CUstream)objs[a], 2);
            printf("rc=%d\n", rc);
        } else if (!strcmp(cmd, "alloc_async")) {
            CUdeviceptr p = 0;
            size_t bytes = (size_t)b << 20;
            int rc = a == PTDS ? cuMemAllocAsync_ptsz(&p, bytes, NULL) : cuMemAllocAsync(&p, bytes, (CUstream)objs[a]);
            printf("rc=%d id=%d dptr=%llx\n", rc, rc ? -1 : add((void *)(uintptr_t)p), p);
        } else if (!strcmp(cmd, "free_async")) {
            CUdeviceptr p = (CUdeviceptr)(uintptr_t)objs[b];
            int rc = a == PTDS ? cuMemFreeAsync_ptsz(p, NULL) : cuMemFreeAsync(p, (CUstream)objs[a]);
            printf("rc=%d\n", rc);
        } else if (!strcmp(cmd, "cap_kernel")) {
            CUfunction f = NULL;
            int rc = cuModuleGetFunction(&f, (CUmodule)objs[b], VGPU_TEST_KERNEL);
            if (!rc) {
                rc = a == PTDS ? cuLaunchKernel_ptsz(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL)
                               : cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, (CUstream)objs[a], NULL, NULL);
            }
            printf("rc=%d\n", rc);
        } else if (!strcmp(cmd, "cap_end")) {
            CUgraph g = NULL;
            CUgraphExec e = NULL;
            int rc = a == PTDS ? cuStreamEndCapture_ptsz(NULL, &g) : cuStreamEndCapture((CUstream)objs[a], &g);
            if (!rc) rc = cuGraphInstantiateWithFlags(&e, g, b);
            printf("rc=%d id=%d\n", rc, rc ? -1 : add(e));
        } else if (!strcmp(cmd, "sync")) {
            printf("rc=%d\n", cuCtxSynchronize());
        } else if (!strcmp(cmd, "trim")) {
            printf("rc=%d\n", cuDeviceGraphMemTrim((int)a));
        } else if (!strcmp(cmd, "alloc")) {
            CUdeviceptr p = 0;
            int rc = cuMemAlloc_v2(&p, (size_t)a);
            printf("rc=%d id=%d\n", rc, rc ? -1 : add((void *)(uintptr_t)p));
        } else if (!strcmp(cmd, "free")) {
            printf("rc=%d\n", cuMemFree_v2((CUdeviceptr)(uintptr_t)objs[a]));
        } else if (!strcmp(cmd, "fill")) {
            int n = 0, rc = 0;
            for (;;) {
                CUdeviceptr p = 0;
                rc = cuMemAlloc_v2(&p, (size_t)a);
                if (rc) break;
                add((void *)(uintptr_t)p);
                n++;
            }
            printf("n=%d rc=%d\n", n, rc);
        } else if (!strcmp(cmd, "allocn")) {
            /* allocn COUNT BYTES: up to COUNT allocations of BYTES, stopping at the first failure. */
            unsigned long long n = 0;
            int rc = 0;
            for (; n < a; n++) {
                CUdeviceptr p = 0;
                rc = cuMemAlloc_v2(&p, (size_t)b);
                if (rc) break;
                add((void *)(uintptr_t)p);
            }
            printf("n=%llu rc=%d\n", n, rc);
        } else if (!strcmp(cmd, "meminfo")) {
            size_t f = 0, t = 0;
            int rc = cuMemGetInfo_v2(&f, &t);
            printf("rc=%d free=%zu total=%zu\n", rc, f, t);
        } else if (!strcmp(cmd, "module_loop")) {
            void *img = elf_image((size_t)b << 20);
            struct timespec t0, t1;
            int rc = 0;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (unsigned long long i = 0; i < a && !rc; i++) {
                CUmodule m = NULL;
                rc = cuModuleLoadData(&m, img);
                if (!rc) rc = cuModuleUnload(m);
            }
            clock_gettime(CLOCK_MONOTONIC, &t1);
            free(img);
            long long ns = (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
            printf("rc=%d ns=%lld\n", rc, a ? ns / (long long)a : 0);
        } else if (!strcmp(cmd, "exit")) {
            printf("bye=1\n");
            return 0;
        } else {
            printf("error=unknown\n");
        }
    }
    return 0;
}
