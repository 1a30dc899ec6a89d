// Tiled SGEMM C = A·B (1024²), 512 entries checked against a double-precision host dot product.
#include "common.cuh"
#include <cmath>
#include <vector>

#define T 16
__global__ void mm(const float *A, const float *B, float *C, int n) {
    __shared__ float sa[T][T], sb[T][T];
    int r = blockIdx.y * T + threadIdx.y, c = blockIdx.x * T + threadIdx.x;
    float acc = 0;
    for (int k0 = 0; k0 < n; k0 += T) {
        sa[threadIdx.y][threadIdx.x] = A[r * n + k0 + threadIdx.x];
        sb[threadIdx.y][threadIdx.x] = B[(k0 + threadIdx.y) * n + c];
        __syncthreads();
        for (int k = 0; k < T; k++) acc += sa[threadIdx.y][k] * sb[k][threadIdx.x];
        __syncthreads();
    }
    C[r * n + c] = acc;
}

int main() {
    const int n = 1024;
    std::vector<float> A(n * n), B(n * n), C(n * n);
    unsigned s = 12345;
    auto rnd = [&]() { s = s * 1103515245u + 12345u; return ((s >> 8) & 0xffff) / 65536.0f - 0.5f; };
    for (auto &x : A) x = rnd();
    for (auto &x : B) x = rnd();
    float *dA, *dB, *dC;
    size_t bytes = sizeof(float) * n * n;
    CK(cudaMalloc(&dA, bytes));
    CK(cudaMalloc(&dB, bytes));
    CK(cudaMalloc(&dC, bytes));
    CK(cudaMemcpy(dA, A.data(), bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, B.data(), bytes, cudaMemcpyHostToDevice));
    dim3 grid(n / T, n / T), block(T, T);
    mm<<<grid, block>>>(dA, dB, dC, n);  // warm-up
    CK(cudaDeviceSynchronize());
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int reps = 20;
    CK(cudaEventRecord(e0));
    for (int i = 0; i < reps; i++) mm<<<grid, block>>>(dA, dB, dC, n);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    CK(cudaMemcpy(C.data(), dC, bytes, cudaMemcpyDeviceToHost));
    double max_rel = 0;
    for (int t = 0; t < 512; t++) {
        int r = (t * 7919) % n, c = (t * 104729) % n;
        double ref = 0;
        for (int k = 0; k < n; k++) ref += (double)A[r * n + k] * B[k * n + c];
        max_rel = std::fmax(max_rel, std::fabs(C[r * n + c] - ref) / (std::fabs(ref) + 1e-3));
    }
    bool ok = max_rel < 1e-3;
    std::printf("n=%d\ngflops=%.1f\nmax_rel_err=%g\nRESULT=%s\n", n, 2.0 * n * n * n * reps / (ms * 1e-3) / 1e9,
                max_rel, ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
