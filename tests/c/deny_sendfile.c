/* Runs a program with sendfile(2) refused (ENOSYS) by a seccomp filter, as on a sandbox or kernel
 * without it; the filter is inherited across exec.
 *
 *   deny_sendfile PROGRAM [ARGS...] */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PROGRAM [ARGS...]\n", argv[0]);
        return 2;
    }
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_sendfile, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        perror("deny_sendfile: seccomp");
        return 3;
    }
    /* The filter must bite, or the test would prove nothing. */
    if (syscall(SYS_sendfile, -1, -1, NULL, (size_t)0) != -1 || errno != ENOSYS) {
        fprintf(stderr, "deny_sendfile: sendfile is not refused\n");
        return 4;
    }
    execv(argv[1], argv + 1);
    perror("deny_sendfile: execv");
    return 5;
}
