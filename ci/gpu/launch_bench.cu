// Launch overhead: many tiny kernels back to back; best of 3 rounds of N launches (+ one sync).
//   launch_bench [N=50000]
#include "common.cuh"

__global__ void tiny(int *x) {
    if (threadIdx.x == 0 && x == nullptr) x[0] = 1;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 50000;
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    for (int i = 0; i < 2000; i++) tiny<<<1, 32, 0, s>>>(nullptr);
    CK(cudaStreamSynchronize(s));
    double best = 1e9;
    for (int r = 0; r < 3; r++) {
        double t0 = now_s();
        for (int i = 0; i < n; i++) tiny<<<1, 32, 0, s>>>(nullptr);
        CK(cudaStreamSynchronize(s));
        double us = (now_s() - t0) * 1e6 / n;
        if (us < best) best = us;
    }
    CK(cudaGetLastError());
    std::printf("launches=%d\nus_per_launch=%.3f\nRESULT=PASS\n", n, best);
    return 0;
}
