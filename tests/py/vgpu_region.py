"""Independent reader of the HAMi v1.2 shared usage region (docs/hami-contract.md §3).

Offsets are written out here by hand from the contract, on purpose: this reader must not share
code with the shim (crates/vgpu-core/src/region.rs), so that a layout mistake on either side shows
up as a disagreement.

    python3 vgpu_region.py FILE      prints the region as JSON
"""

import json
import struct
import sys

MAGIC = 19920718
REGION_SIZE = 2_008_952  # sizeof(shared_region_t)
MAX_DEVICES = 16
MAX_PROCS = 1024
OFF_MAGIC, OFF_MAJOR, OFF_MINOR = 0, 4, 8
OFF_OWNER_PID = 16
OFF_DEVICE_NUM = 56
OFF_UUIDS, UUID_LEN = 64, 96
OFF_LIMIT = 1600
OFF_SM_LIMIT = 1728
OFF_PROCS, SLOT_SIZE = 1856, 1960
OFF_PROC_NUM = 2_008_896
OFF_UTIL_SWITCH = 2_008_900
OFF_RECENT_KERNEL = 2_008_904
OFF_PRIORITY = 2_008_908
OFF_LAST_KERNEL_TIME = 2_008_912
# Slot-relative.
SLOT_PID, SLOT_HOSTPID, SLOT_USED, USED_STRIDE = 0, 4, 8, 64
SLOT_MONITORUSED, SLOT_STATUS, SLOT_SEQLOCK = 1032, 1928, 1936
# device_memory_t-relative.
MEM_CONTEXT, MEM_MODULE, MEM_DATA, MEM_OFFSET, MEM_TOTAL = 0, 8, 16, 24, 32


def _u32(b, o):
    return struct.unpack_from("<I", b, o)[0]


def _i32(b, o):
    return struct.unpack_from("<i", b, o)[0]


def _u64(b, o):
    return struct.unpack_from("<Q", b, o)[0]


def slot_offset(k):
    return OFF_PROCS + SLOT_SIZE * k


def read(path):
    """The whole region as a dict (raises ValueError if the file is not a v1 region)."""
    with open(path, "rb") as f:
        b = f.read()
    if len(b) < REGION_SIZE:
        raise ValueError(f"{path}: {len(b)} bytes, smaller than the v1.2 region ({REGION_SIZE})")
    r = {
        "file_size": len(b),
        "magic": _i32(b, OFF_MAGIC),
        "major": _u32(b, OFF_MAJOR),
        "minor": _u32(b, OFF_MINOR),
        "owner_pid": _u64(b, OFF_OWNER_PID),
        "device_num": _u64(b, OFF_DEVICE_NUM),
        "uuids": [],
        "limit": [_u64(b, OFF_LIMIT + 8 * d) for d in range(MAX_DEVICES)],
        "sm_limit": [_u64(b, OFF_SM_LIMIT + 8 * d) for d in range(MAX_DEVICES)],
        "proc_num": _i32(b, OFF_PROC_NUM),
        "utilization_switch": _i32(b, OFF_UTIL_SWITCH),
        "recent_kernel": _i32(b, OFF_RECENT_KERNEL),
        "priority": _i32(b, OFF_PRIORITY),
        "last_kernel_time": _u64(b, OFF_LAST_KERNEL_TIME),
        "procs": [],
    }
    for d in range(MAX_DEVICES):
        raw = b[OFF_UUIDS + UUID_LEN * d : OFF_UUIDS + UUID_LEN * (d + 1)]
        r["uuids"].append(raw.split(b"\0", 1)[0].decode("utf-8", "replace"))
    n = max(0, min(r["proc_num"], MAX_PROCS))
    for k in range(n):
        s = slot_offset(k)
        used = []
        for d in range(MAX_DEVICES):
            u = s + SLOT_USED + USED_STRIDE * d
            used.append(
                {
                    "context_size": _u64(b, u + MEM_CONTEXT),
                    "module_size": _u64(b, u + MEM_MODULE),
                    "data_size": _u64(b, u + MEM_DATA),
                    "offset": _u64(b, u + MEM_OFFSET),
                    "total": _u64(b, u + MEM_TOTAL),
                }
            )
        r["procs"].append(
            {
                "slot": k,
                "pid": _i32(b, s + SLOT_PID),
                "hostpid": _i32(b, s + SLOT_HOSTPID),
                "status": _i32(b, s + SLOT_STATUS),
                "seqlock": _u64(b, s + SLOT_SEQLOCK),
                "used": used,
                "monitorused": [_u64(b, s + SLOT_MONITORUSED + 8 * d) for d in range(MAX_DEVICES)],
            }
        )
    return r


def used_total(path, pid, dev=0):
    """used[dev].total of the live slot of `pid` (None if the process has no slot)."""
    for p in read(path)["procs"]:
        if p["pid"] == pid and p["status"] != 0:
            return p["used"][dev]["total"]
    return None


def container_used(path, dev=0):
    """What the monitor sums: used[dev].total over slots k < proc_num with status != 0."""
    return sum(p["used"][dev]["total"] for p in read(path)["procs"] if p["status"] != 0)


if __name__ == "__main__":
    print(json.dumps(read(sys.argv[1]), indent=1))
