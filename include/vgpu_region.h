/*
 * vgpu_region.h - layout of libvgpu's shared usage region file (*.cache).
 *
 * Bytes [0, 2008952) are HAMi-core's shared_region_t v1.2, byte for byte
 * (docs: docs/hami-contract.md §3; HAMi-core
 * src/multiprocess/multiprocess_memory_limit.h; HAMi pkg/monitor/nvidia/v1/spec.go).
 * libvgpu appends a private extension block at offset 2011136 (8192 bytes), so
 * the file it creates is 2019328 bytes. The vGPU monitor maps only the v1.2 part.
 *
 * x86_64 / aarch64 LP64 with glibc (sem_t = 32 bytes, 8-byte aligned).
 * The Rust definition (crates/vgpu-core/src/region.rs) asserts the same offsets.
 *
 * Concurrency: all integer fields are accessed atomically by libvgpu; readers
 * should use aligned 4/8-byte loads (C11 atomics or volatile). The monitor-read
 * fields are listed in docs/hami-contract.md §3.10.
 */
#ifndef VGPU_REGION_H
#define VGPU_REGION_H

#include <stddef.h>
#include <stdint.h>
#include <semaphore.h>

#define VGPU_REGION_MAGIC          19920718 /* 0x012FF74E */
#define VGPU_REGION_MAJOR_VERSION  1
#define VGPU_REGION_MINOR_VERSION  2
#define VGPU_MAX_DEVICES           16
#define VGPU_MAX_PROCS             1024
#define VGPU_UUID_LEN              96

#define VGPU_V1_REGION_SIZE        2008952u /* sizeof(vgpu_shared_region_t) */
#define VGPU_C_FILE_SIZE           2008953u /* file size left by the C library */
#define VGPU_LOCK_BYTE_OFFSET      2008952u /* OFD-locked byte (container lock) */
#define VGPU_EXT_OFFSET            2011136u
#define VGPU_EXT_SIZE              8192u
#define VGPU_FILE_SIZE             2019328u

#define VGPU_EXT_MAGIC             0x315550475642494Cull /* "LIBVGPU1" little-endian */
#define VGPU_EXT_VERSION           1

/* Usage categories (the incumbent's `type`). */
#define VGPU_USAGE_CONTEXT 0
#define VGPU_USAGE_MODULE  1
#define VGPU_USAGE_DATA    2

typedef struct {
    uint64_t context_size;
    uint64_t module_size;
    uint64_t data_size;   /* Go: bufferSize */
    uint64_t offset;
    uint64_t total;       /* the sum the limit is checked against */
    uint64_t unused[3];
} vgpu_device_memory_t;   /* 64 bytes */

typedef struct {
    uint64_t dec_util;
    uint64_t enc_util;
    uint64_t sm_util;     /* NVML per-process SM % */
    uint64_t unused[3];
} vgpu_device_util_t;     /* 48 bytes */

typedef struct {
    int32_t pid;          /* container pid; 0 = exited */
    int32_t hostpid;      /* host pid; 0 = unknown */
    vgpu_device_memory_t used[VGPU_MAX_DEVICES];
    uint64_t monitorused[VGPU_MAX_DEVICES];
    vgpu_device_util_t device_util[VGPU_MAX_DEVICES];
    int32_t status;       /* 1 running, 2 suspended, 0 exited */
    int32_t padding;
    uint64_t seqlock;     /* odd while used[] is being updated */
    uint64_t unused[2];   /* libvgpu: [0] owner start time (identity), [1] reservation in flight */
} vgpu_proc_slot_t;       /* 1960 bytes */

typedef struct {
    int32_t initialized_flag;   /* VGPU_REGION_MAGIC, stored last */
    uint32_t major_version;
    uint32_t minor_version;
    int32_t sm_init_flag;
    uint64_t owner_pid;         /* pid holding the container lock (informational) */
    sem_t sem;
    uint64_t device_num;
    char uuids[VGPU_MAX_DEVICES][VGPU_UUID_LEN];
    uint64_t limit[VGPU_MAX_DEVICES];     /* bytes, 0 = unlimited */
    uint64_t sm_limit[VGPU_MAX_DEVICES];  /* percent */
    vgpu_proc_slot_t procs[VGPU_MAX_PROCS];
    int32_t proc_num;           /* slots in use are below it; libvgpu leaves holes with status 0 */
    int32_t utilization_switch; /* monitor-owned */
    int32_t recent_kernel;      /* monitor and library */
    int32_t priority;
    uint64_t last_kernel_time;  /* unix seconds */
    sem_t sem_postinit;
} vgpu_shared_region_t;         /* 2008952 bytes */

/* Private extension (libvgpu only). */
typedef struct {
    int64_t balance_ns;          /* token balance, ns of device time; negative = debt */
    uint64_t last_refill_ns;     /* CLOCK_MONOTONIC of the last refill; 0 = never */
    uint64_t generation;         /* bumped when rate/cap change */
    uint64_t rate_ppm;           /* refill rate, millionths of wall time; 0 = unlimited */
    uint64_t cap_ns;             /* burst cap of the balance */
    uint64_t charged_ns;         /* metric: device ns charged */
    uint64_t throttled_ns;       /* metric: wall ns waited for tokens */
    uint64_t throttled_launches; /* metric: launches that waited */
    uint64_t blocked_ns;         /* metric: wall ns waited while recent_kernel < 0 */
    uint64_t share_ppm;          /* last measured container share, ppm */
    uint64_t share_stamp_ns;     /* CLOCK_MONOTONIC of share_ppm; 0 = none */
    uint64_t sensor;             /* 0 none, 1 self-measured, 2 NVML per-process */
    uint64_t correction_ppm;     /* last outer-loop correction x 1e6 */
    uint64_t unresolved_pids;    /* processes without a host PID yet */
    uint64_t reserved[5];
    uint64_t burst_seen_us;    /* burst controller: NVML per-process samples used up to (wall us) */
    uint64_t burst_signals;    /* burst controller: 3 x 21-bit ppm (others | hold << 21 | busy << 42) */
    uint64_t burst_stamp_us;   /* burst controller: wall us of its last step */
    uint64_t burst_rate_ppm;   /* burst controller: effective rate, ppm (0 = the limit) */
    uint64_t sm_ceiling;       /* burst ceiling, percent (0 = unset = the SM limit) */
} vgpu_device_limiter_state_t;  /* 192 bytes */

#define VGPU_OVERFLOW_RECORDS 28
typedef struct {
    int32_t pid;                 /* 0 = free */
    int32_t status;              /* 1 in use */
    uint64_t start_time;         /* /proc/<pid>/stat field 22 of the owner */
    uint64_t total[VGPU_MAX_DEVICES];
} vgpu_overflow_record_t;       /* 144 bytes */

typedef struct {
    uint32_t num;                /* high-water mark of used records */
    uint32_t pad;
    uint64_t reserved[7];
    vgpu_overflow_record_t records[VGPU_OVERFLOW_RECORDS];
} vgpu_overflow_table_t;        /* 4096 bytes */

typedef struct {
    uint64_t ext_magic;         /* VGPU_EXT_MAGIC, stored last */
    uint32_t ext_version;
    uint32_t ext_flags;
    uint64_t reserved_hdr[6];
    vgpu_device_limiter_state_t limiter[VGPU_MAX_DEVICES];
    uint64_t reserved[120];
    vgpu_overflow_table_t overflow; /* page 1: processes beyond the 1024 slots */
} vgpu_region_ext_t;            /* 8192 bytes */

typedef struct {
    vgpu_shared_region_t shared;
    unsigned char gap[VGPU_EXT_OFFSET - VGPU_V1_REGION_SIZE];
    vgpu_region_ext_t ext;
} vgpu_region_file_t;           /* 2019328 bytes */

#define VGPU_SLOT_OFFSET(k) (offsetof(vgpu_shared_region_t, procs) + (size_t)(k) * sizeof(vgpu_proc_slot_t))

_Static_assert(sizeof(sem_t) == 32, "glibc sem_t is 32 bytes");
_Static_assert(_Alignof(sem_t) == 8, "glibc sem_t is 8-byte aligned");

_Static_assert(sizeof(vgpu_device_memory_t) == 64, "device_memory_t size");
_Static_assert(offsetof(vgpu_device_memory_t, context_size) == 0, "context_size");
_Static_assert(offsetof(vgpu_device_memory_t, module_size) == 8, "module_size");
_Static_assert(offsetof(vgpu_device_memory_t, data_size) == 16, "data_size");
_Static_assert(offsetof(vgpu_device_memory_t, offset) == 24, "offset");
_Static_assert(offsetof(vgpu_device_memory_t, total) == 32, "total");
_Static_assert(offsetof(vgpu_device_memory_t, unused) == 40, "unused");

_Static_assert(sizeof(vgpu_device_util_t) == 48, "device_util_t size");
_Static_assert(offsetof(vgpu_device_util_t, dec_util) == 0, "dec_util");
_Static_assert(offsetof(vgpu_device_util_t, enc_util) == 8, "enc_util");
_Static_assert(offsetof(vgpu_device_util_t, sm_util) == 16, "sm_util");
_Static_assert(offsetof(vgpu_device_util_t, unused) == 24, "unused");

_Static_assert(sizeof(vgpu_proc_slot_t) == 1960, "slot size");
_Static_assert(offsetof(vgpu_proc_slot_t, pid) == 0, "pid");
_Static_assert(offsetof(vgpu_proc_slot_t, hostpid) == 4, "hostpid");
_Static_assert(offsetof(vgpu_proc_slot_t, used) == 8, "used");
_Static_assert(offsetof(vgpu_proc_slot_t, monitorused) == 1032, "monitorused");
_Static_assert(offsetof(vgpu_proc_slot_t, device_util) == 1160, "device_util");
_Static_assert(offsetof(vgpu_proc_slot_t, status) == 1928, "status");
_Static_assert(offsetof(vgpu_proc_slot_t, padding) == 1932, "padding");
_Static_assert(offsetof(vgpu_proc_slot_t, seqlock) == 1936, "seqlock");
_Static_assert(offsetof(vgpu_proc_slot_t, unused) == 1944, "unused");

_Static_assert(sizeof(vgpu_shared_region_t) == 2008952, "shared_region_t size");
_Static_assert(_Alignof(vgpu_shared_region_t) == 8, "shared_region_t alignment");
_Static_assert(offsetof(vgpu_shared_region_t, initialized_flag) == 0, "initialized_flag");
_Static_assert(offsetof(vgpu_shared_region_t, major_version) == 4, "major_version");
_Static_assert(offsetof(vgpu_shared_region_t, minor_version) == 8, "minor_version");
_Static_assert(offsetof(vgpu_shared_region_t, sm_init_flag) == 12, "sm_init_flag");
_Static_assert(offsetof(vgpu_shared_region_t, owner_pid) == 16, "owner_pid");
_Static_assert(offsetof(vgpu_shared_region_t, sem) == 24, "sem");
_Static_assert(offsetof(vgpu_shared_region_t, device_num) == 56, "device_num");
_Static_assert(offsetof(vgpu_shared_region_t, uuids) == 64, "uuids");
_Static_assert(offsetof(vgpu_shared_region_t, limit) == 1600, "limit");
_Static_assert(offsetof(vgpu_shared_region_t, sm_limit) == 1728, "sm_limit");
_Static_assert(offsetof(vgpu_shared_region_t, procs) == 1856, "procs");
_Static_assert(offsetof(vgpu_shared_region_t, proc_num) == 2008896, "proc_num");
_Static_assert(offsetof(vgpu_shared_region_t, utilization_switch) == 2008900, "utilization_switch");
_Static_assert(offsetof(vgpu_shared_region_t, recent_kernel) == 2008904, "recent_kernel");
_Static_assert(offsetof(vgpu_shared_region_t, priority) == 2008908, "priority");
_Static_assert(offsetof(vgpu_shared_region_t, last_kernel_time) == 2008912, "last_kernel_time");
_Static_assert(offsetof(vgpu_shared_region_t, sem_postinit) == 2008920, "sem_postinit");

_Static_assert(sizeof(vgpu_device_limiter_state_t) == 192, "limiter state size");
_Static_assert(offsetof(vgpu_device_limiter_state_t, balance_ns) == 0, "balance_ns");
_Static_assert(offsetof(vgpu_device_limiter_state_t, last_refill_ns) == 8, "last_refill_ns");
_Static_assert(offsetof(vgpu_device_limiter_state_t, generation) == 16, "generation");
_Static_assert(offsetof(vgpu_device_limiter_state_t, rate_ppm) == 24, "rate_ppm");
_Static_assert(offsetof(vgpu_device_limiter_state_t, sm_ceiling) == 184, "sm_ceiling");
_Static_assert(offsetof(vgpu_device_limiter_state_t, cap_ns) == 32, "cap_ns");
_Static_assert(offsetof(vgpu_device_limiter_state_t, charged_ns) == 40, "charged_ns");
_Static_assert(offsetof(vgpu_device_limiter_state_t, throttled_ns) == 48, "throttled_ns");
_Static_assert(offsetof(vgpu_device_limiter_state_t, throttled_launches) == 56, "throttled_launches");
_Static_assert(offsetof(vgpu_device_limiter_state_t, blocked_ns) == 64, "blocked_ns");
_Static_assert(offsetof(vgpu_device_limiter_state_t, share_ppm) == 72, "share_ppm");
_Static_assert(offsetof(vgpu_device_limiter_state_t, share_stamp_ns) == 80, "share_stamp_ns");
_Static_assert(offsetof(vgpu_device_limiter_state_t, sensor) == 88, "sensor");
_Static_assert(offsetof(vgpu_device_limiter_state_t, correction_ppm) == 96, "correction_ppm");
_Static_assert(offsetof(vgpu_device_limiter_state_t, unresolved_pids) == 104, "unresolved_pids");
_Static_assert(offsetof(vgpu_device_limiter_state_t, reserved) == 112, "reserved");

_Static_assert(sizeof(vgpu_overflow_table_t) == 4096, "overflow table size");
_Static_assert(sizeof(vgpu_region_ext_t) == 8192, "ext size");
_Static_assert(offsetof(vgpu_region_ext_t, overflow) == 4096, "ext overflow");
_Static_assert(offsetof(vgpu_region_ext_t, ext_magic) == 0, "ext_magic");
_Static_assert(offsetof(vgpu_region_ext_t, ext_version) == 8, "ext_version");
_Static_assert(offsetof(vgpu_region_ext_t, ext_flags) == 12, "ext_flags");
_Static_assert(offsetof(vgpu_region_ext_t, reserved_hdr) == 16, "reserved_hdr");
_Static_assert(offsetof(vgpu_region_ext_t, limiter) == 64, "limiter");
_Static_assert(offsetof(vgpu_region_ext_t, reserved) == 3136, "ext reserved");

_Static_assert(offsetof(vgpu_region_file_t, shared) == 0, "file: shared");
_Static_assert(offsetof(vgpu_region_file_t, gap) == 2008952, "file: gap");
_Static_assert(offsetof(vgpu_region_file_t, ext) == 2011136, "file: ext");
_Static_assert(sizeof(vgpu_region_file_t) == 2019328, "file size");

#endif /* VGPU_REGION_H */
