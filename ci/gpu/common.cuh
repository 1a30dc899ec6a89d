// Shared helpers of the ci/gpu-validate.sh CUDA samples: checked calls, key=value output.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <cuda_runtime.h>

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            std::printf("RESULT=FAIL\nerror=%s:%d %s -> %s\n", __FILE__, __LINE__, #call,          \
                        cudaGetErrorName(e_));                                                     \
            std::exit(1);                                                                          \
        }                                                                                          \
    } while (0)

static inline double now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
