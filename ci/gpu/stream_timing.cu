// Streams and events: 4 streams each copy in (pinned, async), scale, copy out; events time the
// whole pipeline and each stream; all results checked.
#include "common.cuh"
#include <cmath>

__global__ void scale(float *x, int n, float f) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        for (int k = 0; k < 64; k++) v = v * f + 0.0f;
        x[i] = v;
    }
}

int main() {
    const int S = 4, n = 1 << 22;
    float *h, *d;
    CK(cudaMallocHost(&h, sizeof(float) * n * S));
    CK(cudaMalloc(&d, sizeof(float) * n * S));
    for (int i = 0; i < n * S; i++) h[i] = (float)(i % 1000);
    cudaStream_t st[S];
    cudaEvent_t b[S], e[S], all0, all1;
    for (int s = 0; s < S; s++) {
        CK(cudaStreamCreateWithFlags(&st[s], cudaStreamNonBlocking));
        CK(cudaEventCreate(&b[s]));
        CK(cudaEventCreate(&e[s]));
    }
    CK(cudaEventCreate(&all0));
    CK(cudaEventCreate(&all1));
    CK(cudaEventRecord(all0));
    for (int s = 0; s < S; s++) {
        float *hs = h + (size_t)s * n, *ds = d + (size_t)s * n;
        CK(cudaStreamWaitEvent(st[s], all0, 0));
        CK(cudaEventRecord(b[s], st[s]));
        CK(cudaMemcpyAsync(ds, hs, sizeof(float) * n, cudaMemcpyHostToDevice, st[s]));
        scale<<<(n + 255) / 256, 256, 0, st[s]>>>(ds, n, 1.0f);  // x * 1 (64 times) = x
        scale<<<(n + 255) / 256, 256, 0, st[s]>>>(ds, n, -1.0f); // x * (-1)^64 = x
        CK(cudaMemcpyAsync(hs, ds, sizeof(float) * n, cudaMemcpyDeviceToHost, st[s]));
        CK(cudaEventRecord(e[s], st[s]));
    }
    for (int s = 0; s < S; s++) CK(cudaStreamWaitEvent(0, e[s], 0));
    CK(cudaEventRecord(all1));
    CK(cudaEventSynchronize(all1));
    CK(cudaGetLastError());
    float total_ms = 0, ms;
    CK(cudaEventElapsedTime(&total_ms, all0, all1));
    bool ok = total_ms > 0;
    for (int s = 0; s < S; s++) {
        CK(cudaEventElapsedTime(&ms, b[s], e[s]));
        std::printf("stream%d_ms=%.3f\n", s, ms);
        ok = ok && ms > 0 && ms <= total_ms + 0.01f;
    }
    long bad = 0;
    for (int i = 0; i < n * S; i++) bad += h[i] != (float)(i % 1000);
    std::printf("total_ms=%.3f\nbad_elements=%ld\n", total_ms, bad);
    ok = ok && bad == 0;
    for (int s = 0; s < S; s++) CK(cudaStreamDestroy(st[s]));
    CK(cudaFree(d));
    CK(cudaFreeHost(h));
    std::printf("RESULT=%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
