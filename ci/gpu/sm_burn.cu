// Compute-bound kernel loop for the SM-limit check: a kernel that fills every SM with an FMA
// chain (calibrated to ~KERNEL_MS), launched in batches of BATCH with a stream sync after each
// batch, for WARMUP + SECONDS; prints the completed kernels per second of the measured window.
//   sm_burn [SECONDS=4] [WARMUP=2] [KERNEL_MS=2]
#include "common.cuh"

__global__ void burn(float *out, int iters) {
    float a = threadIdx.x * 1e-3f, b = 1.000001f, c = 1e-7f;
    for (int i = 0; i < iters; i++) {
        a = fmaf(a, b, c);
        c = fmaf(c, b, a * 1e-9f);
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = a + c;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 4, warmup = argc > 2 ? atof(argv[2]) : 2;
    double kernel_ms = argc > 3 ? atof(argv[3]) : 2;
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    int blocks = p.multiProcessorCount * 8, threads = 256;
    float *out;
    CK(cudaMalloc(&out, sizeof(float) * blocks * threads));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    // Calibrate the iteration count to the wanted kernel duration (a few rounds).
    int iters = 1 << 12;
    float ms = 0;
    for (int r = 0; r < 6; r++) {
        CK(cudaEventRecord(e0, s));
        burn<<<blocks, threads, 0, s>>>(out, iters);
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
        double f = kernel_ms / (ms > 1e-3 ? ms : 1e-3);
        if (f > 64) f = 64;
        if (f < 1.0 / 64) f = 1.0 / 64;
        iters = (int)(iters * f) + 1;
    }
    CK(cudaEventRecord(e0, s));
    burn<<<blocks, threads, 0, s>>>(out, iters);
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    const int batch = 5;
    double t0 = now_s(), start = -1, end = t0 + warmup + seconds;
    long done = 0;
    for (;;) {
        for (int b = 0; b < batch; b++) burn<<<blocks, threads, 0, s>>>(out, iters);
        CK(cudaStreamSynchronize(s));
        double t = now_s();
        if (start < 0 && t >= t0 + warmup) {
            start = t;
            done = 0;
            continue;
        }
        if (start >= 0) done += batch;
        if (t >= end) break;
    }
    double window = now_s() - start;
    CK(cudaGetLastError());
    std::printf("sm_count=%d\nblocks=%d\niters=%d\nkernel_ms=%.3f\nkernels=%ld\nwindow_s=%.3f\nkernels_per_s=%.2f\nRESULT=PASS\n",
                p.multiProcessorCount, blocks, iters, ms, done, window, done / window);
    return 0;
}
