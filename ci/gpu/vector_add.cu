// Vector add: c = a + b over 16 Mi floats, every element checked on the host.
#include "common.cuh"
#include <cmath>
#include <vector>

__global__ void add(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

int main() {
    const int n = 1 << 24;
    std::vector<float> a(n), b(n), c(n);
    for (int i = 0; i < n; i++) {
        a[i] = std::sin(i * 1e-3f);
        b[i] = std::cos(i * 1e-3f) * 2.0f;
    }
    float *da, *db, *dc;
    CK(cudaMalloc(&da, n * sizeof(float)));
    CK(cudaMalloc(&db, n * sizeof(float)));
    CK(cudaMalloc(&dc, n * sizeof(float)));
    CK(cudaMemcpy(da, a.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, b.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    add<<<(n + 255) / 256, 256>>>(da, db, dc, n);
    CK(cudaGetLastError());
    CK(cudaMemcpy(c.data(), dc, n * sizeof(float), cudaMemcpyDeviceToHost));
    double max_err = 0;
    for (int i = 0; i < n; i++) max_err = std::fmax(max_err, std::fabs(c[i] - (a[i] + b[i])));
    CK(cudaFree(da));
    CK(cudaFree(db));
    CK(cudaFree(dc));
    std::printf("n=%d\nmax_err=%g\nRESULT=%s\n", n, max_err, max_err == 0 ? "PASS" : "FAIL");
    return max_err == 0 ? 0 : 1;
}
