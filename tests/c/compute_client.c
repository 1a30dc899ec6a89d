/* Compute-limiter workload client (tests/compute*.rs, ci/bench_compute.sh).
 *
 *   compute_client [--seconds S | --count N] [--kernel-us U | --mix A,B] [--api API] [--stream S]
 *                  [--pace-us P] [--graph-kernels K] [--latency] [--capture-test] [--start-at NS]
 *                  [--threads T]
 *
 * API: launch launch_ptsz ex ex_ptsz coop coop_ptsz multi graph graph_ptsz
 * S:   null (default) explicit legacy per_thread
 * Kernel duration in the simulator = grid blocks x VGPU_SIM_NS_PER_BLOCK (default 1000 ns), so a
 * U-microsecond kernel is launched with U*1000/ns_per_block blocks.
 * --pace-us P: after each launch synchronise the stream, then sleep P us (an under-limit workload).
 * --latency: time each launch call; prints lat_p50_ns / lat_p99_ns / lat_mean_ns.
 * --capture-test: capture K launches on an explicit stream (they must return at once), instantiate,
 *                 then replay the graph for the run (prints capture_ns).
 * --start-at NS: busy-wait-free sleep until CLOCK_MONOTONIC NS before the run (multi-process start).
 * --pid-file F: write getpid() to F once initialised.
 * Output (key=value): init_ns (process start to context + module ready), launches, kernel_ns
 * (simulated device time launched), errors, first_error, elapsed_ns, and the options above.
 */
#define _GNU_SOURCE
#include "cuda_min.h"
#include <pthread.h>
#include <time.h>
#include <errno.h>
#include <unistd.h>

typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct {
    unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    CUstream hStream;
    void *attrs;
    unsigned numAttrs;
} LaunchConfig;
typedef struct {
    CUfunction function;
    unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    CUstream hStream;
    void **kernelParams;
} LaunchParams;

CUresult cuLaunchKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **);
CUresult cuLaunchKernelEx(const LaunchConfig *, CUfunction, void **, void **);
CUresult cuLaunchKernelEx_ptsz(const LaunchConfig *, CUfunction, void **, void **);
CUresult cuLaunchCooperativeKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **);
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **);
CUresult cuLaunchCooperativeKernelMultiDevice(LaunchParams *, unsigned, unsigned);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamSynchronize(CUstream);
CUresult cuStreamSynchronize_ptsz(CUstream);
CUresult cuStreamBeginCapture_v2(CUstream, unsigned);
CUresult cuStreamEndCapture(CUstream, CUgraph *);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *, CUgraph, unsigned long long);
CUresult cuGraphLaunch(CUgraphExec, CUstream);
CUresult cuGraphLaunch_ptsz(CUgraphExec, CUstream);
CUresult cuCtxSynchronize(void);

#define STREAM_LEGACY ((CUstream)0x1)
#define STREAM_PER_THREAD ((CUstream)0x2)

static unsigned long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void sleep_ns(unsigned long long ns) {
    struct timespec ts = {(time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static void sleep_until(unsigned long long t) {
    struct timespec ts = {(time_t)(t / 1000000000ULL), (long)(t % 1000000000ULL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

/* Options. */
static double o_seconds = 1.0;
static long long o_count = -1;
static unsigned o_us_a = 50, o_us_b = 0; /* b != 0: alternate */
static const char *o_api = "launch";
static const char *o_stream = "null";
static unsigned long long o_pace_us = 0;
static int o_graph_kernels = 4;
static int o_latency = 0;
static int o_capture_test = 0;
static unsigned long long o_start_at = 0;
static int o_threads = 1;
static unsigned ns_per_block = 1000;
static const char *o_pid_file = NULL;

static CUfunction g_fn;
static CUcontext g_ctx;

typedef struct {
    long long launches, errors;
    unsigned long long kernel_ns;
    int first_error;
    unsigned long long *lat;
    long long nlat, caplat;
    unsigned long long capture_ns;
} Result;

static unsigned blocks_for(unsigned us) {
    unsigned long long b = (unsigned long long)us * 1000ULL / ns_per_block;
    return b ? (unsigned)b : 1;
}

static CUresult launch_one(CUstream s, unsigned us, CUgraphExec ge) {
    unsigned g = blocks_for(us);
    /* Grid split into x*y to keep x small for cooperative-size checks irrelevant here. */
    unsigned gx = g, gy = 1;
    if (!strcmp(o_api, "launch")) return cuLaunchKernel(g_fn, gx, gy, 1, 128, 1, 1, 0, s, NULL, NULL);
    if (!strcmp(o_api, "launch_ptsz")) return cuLaunchKernel_ptsz(g_fn, gx, gy, 1, 128, 1, 1, 0, s, NULL, NULL);
    if (!strcmp(o_api, "ex") || !strcmp(o_api, "ex_ptsz")) {
        LaunchConfig c = {gx, gy, 1, 128, 1, 1, 0, s, NULL, 0};
        return !strcmp(o_api, "ex") ? cuLaunchKernelEx(&c, g_fn, NULL, NULL) : cuLaunchKernelEx_ptsz(&c, g_fn, NULL, NULL);
    }
    if (!strcmp(o_api, "coop")) return cuLaunchCooperativeKernel(g_fn, gx, gy, 1, 128, 1, 1, 0, s, NULL);
    if (!strcmp(o_api, "coop_ptsz")) return cuLaunchCooperativeKernel_ptsz(g_fn, gx, gy, 1, 128, 1, 1, 0, s, NULL);
    if (!strcmp(o_api, "multi")) {
        LaunchParams p = {g_fn, gx, gy, 1, 128, 1, 1, 0, s, NULL};
        return cuLaunchCooperativeKernelMultiDevice(&p, 1, 0);
    }
    if (!strcmp(o_api, "graph")) return cuGraphLaunch(ge, s);
    if (!strcmp(o_api, "graph_ptsz")) return cuGraphLaunch_ptsz(ge, s);
    fprintf(stderr, "unknown api %s\n", o_api);
    exit(2);
}

static int is_ptsz(void) { return strstr(o_api, "_ptsz") != NULL; }

static CUgraphExec build_graph(CUstream s, unsigned us, Result *r) {
    /* Capture o_graph_kernels plain launches on an explicit stream, timing the capture. */
    CUstream cs;
    if (cuStreamCreate(&cs, 1) != 0) { fprintf(stderr, "stream create failed\n"); exit(1); }
    CUgraph g;
    unsigned long long t0 = now_ns();
    if (cuStreamBeginCapture_v2(cs, 0) != 0) { fprintf(stderr, "begin capture failed\n"); exit(1); }
    for (int i = 0; i < o_graph_kernels; i++) {
        CUresult rc = cuLaunchKernel(g_fn, blocks_for(us), 1, 1, 128, 1, 1, 0, cs, NULL, NULL);
        if (rc) { fprintf(stderr, "captured launch failed %d\n", rc); exit(1); }
    }
    if (cuStreamEndCapture(cs, &g) != 0) { fprintf(stderr, "end capture failed\n"); exit(1); }
    r->capture_ns = now_ns() - t0;
    CUgraphExec e;
    if (cuGraphInstantiateWithFlags(&e, g, 0) != 0) { fprintf(stderr, "instantiate failed\n"); exit(1); }
    (void)s;
    return e;
}

static int cmp_u64(const void *a, const void *b) {
    unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return x < y ? -1 : x > y;
}

static void *worker(void *arg) {
    Result *r = arg;
    cuCtxSetCurrent(g_ctx);
    CUstream s = NULL;
    if (!strcmp(o_stream, "explicit")) {
        if (cuStreamCreate(&s, 1) != 0) { fprintf(stderr, "stream create failed\n"); exit(1); }
    } else if (!strcmp(o_stream, "legacy")) {
        s = STREAM_LEGACY;
    } else if (!strcmp(o_stream, "per_thread")) {
        s = STREAM_PER_THREAD;
    }
    CUgraphExec ge = NULL;
    if (!strncmp(o_api, "graph", 5) || o_capture_test) ge = build_graph(s, o_us_a, r);
    if (o_capture_test && strncmp(o_api, "graph", 5)) o_api = "graph";
    if (o_latency) r->lat = malloc(sizeof(unsigned long long) * 4000000);
    unsigned long long end = now_ns() + (unsigned long long)(o_seconds * 1e9);
    long long n = 0;
    for (;;) {
        if (o_count >= 0 ? n >= o_count : now_ns() >= end) break;
        unsigned us = (o_us_b && (n & 1)) ? o_us_b : o_us_a;
        unsigned long long t0 = o_latency ? now_ns() : 0;
        CUresult rc = launch_one(s, us, ge);
        if (!rc) r->kernel_ns += (unsigned long long)blocks_for(us) * ns_per_block * (ge && !strncmp(o_api, "graph", 5) ? (unsigned)o_graph_kernels : 1u);
        if (o_latency && r->nlat < 4000000) r->lat[r->nlat++] = now_ns() - t0;
        n++;
        if (rc) {
            if (!r->errors) r->first_error = rc;
            r->errors++;
        }
        if (o_pace_us) {
            if (is_ptsz()) cuStreamSynchronize_ptsz(s); else cuStreamSynchronize(s);
            sleep_ns(o_pace_us * 1000ULL);
        }
    }
    if (is_ptsz()) cuStreamSynchronize_ptsz(s); else cuStreamSynchronize(s);
    r->launches = n;
    return NULL;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEXT (i++, v)
        if (!strcmp(a, "--seconds") && v) o_seconds = atof(NEXT);
        else if (!strcmp(a, "--count") && v) o_count = atoll(NEXT);
        else if (!strcmp(a, "--kernel-us") && v) o_us_a = (unsigned)atoi(NEXT);
        else if (!strcmp(a, "--mix") && v) { sscanf(NEXT, "%u,%u", &o_us_a, &o_us_b); }
        else if (!strcmp(a, "--api") && v) o_api = NEXT;
        else if (!strcmp(a, "--stream") && v) o_stream = NEXT;
        else if (!strcmp(a, "--pace-us") && v) o_pace_us = strtoull(NEXT, NULL, 10);
        else if (!strcmp(a, "--graph-kernels") && v) o_graph_kernels = atoi(NEXT);
        else if (!strcmp(a, "--latency")) o_latency = 1;
        else if (!strcmp(a, "--capture-test")) o_capture_test = 1;
        else if (!strcmp(a, "--start-at") && v) o_start_at = strtoull(NEXT, NULL, 10);
        else if (!strcmp(a, "--threads") && v) o_threads = atoi(NEXT);
        else if (!strcmp(a, "--pid-file") && v) o_pid_file = NEXT;
        else { fprintf(stderr, "bad argument %s\n", a); return 2; }
    }
    unsigned long long t_main = now_ns();
    const char *npb = getenv("VGPU_SIM_NS_PER_BLOCK");
    if (npb && atoi(npb) > 0) ns_per_block = (unsigned)atoi(npb);

    CHECK("init", cuInit(0));
    CUdevice dev;
    CHECK("device", cuDeviceGet(&dev, 0));
    CHECK("ctx", cuDevicePrimaryCtxRetain(&g_ctx, dev));
    CHECK("set_ctx", cuCtxSetCurrent(g_ctx));
    CUmodule m;
    CHECK("module", cuModuleLoadData(&m, VGPU_TEST_IMAGE));
    CHECK("function", cuModuleGetFunction(&g_fn, m, VGPU_TEST_KERNEL));
    kv_u64("init_ns", now_ns() - t_main);
    if (o_pid_file) {
        FILE *pf = fopen(o_pid_file, "w");
        if (pf) { fprintf(pf, "%d\n", (int)getpid()); fclose(pf); }
    }
    if (o_start_at) sleep_until(o_start_at);
    kv_u64("start_ns", now_ns());
    fflush(stdout);

    unsigned long long t0 = now_ns();
    Result *rs = calloc((size_t)o_threads, sizeof(Result));
    pthread_t *th = calloc((size_t)o_threads, sizeof(pthread_t));
    for (int t = 0; t < o_threads; t++) pthread_create(&th[t], NULL, worker, &rs[t]);
    long long launches = 0, errors = 0;
    unsigned long long kernel_ns = 0;
    int first_error = 0;
    for (int t = 0; t < o_threads; t++) {
        pthread_join(th[t], NULL);
        launches += rs[t].launches;
        errors += rs[t].errors;
        kernel_ns += rs[t].kernel_ns;
        if (!first_error) first_error = rs[t].first_error;
    }
    cuCtxSynchronize();
    unsigned long long el = now_ns() - t0;
    kv_int("launches", launches);
    kv_u64("kernel_ns", kernel_ns);
    kv_int("errors", errors);
    kv_int("first_error", first_error);
    kv_u64("elapsed_ns", el);
    kv_u64("end_ns", now_ns());
    if (rs[0].capture_ns) kv_u64("capture_ns", rs[0].capture_ns);
    if (o_latency && rs[0].nlat) {
        qsort(rs[0].lat, (size_t)rs[0].nlat, sizeof(unsigned long long), cmp_u64);
        unsigned long long sum = 0;
        for (long long i = 0; i < rs[0].nlat; i++) sum += rs[0].lat[i];
        kv_u64("lat_p50_ns", rs[0].lat[rs[0].nlat / 2]);
        kv_u64("lat_p99_ns", rs[0].lat[rs[0].nlat * 99 / 100]);
        kv_u64("lat_mean_ns", sum / (unsigned long long)rs[0].nlat);
        kv_int("lat_n", rs[0].nlat);
    }
    return errors ? 3 : 0;
}
