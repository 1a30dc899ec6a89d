/* A program that never loads libdl (on glibc < 2.34 dlopen lives there): its first CUDA touch is a
 * call of cuInit, which only a preloaded libvgpu.so defines (a weak reference: no libcuda is
 * linked). Prints init=<CUresult>, or init=absent without the shim. */
#include <stdio.h>

extern int cuInit(unsigned flags) __attribute__((weak));

int main(void) {
    if (!cuInit) {
        printf("init=absent\n");
        return 1;
    }
    printf("init=%d\n", cuInit(0));
    return 0;
}
