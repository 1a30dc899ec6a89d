"""Checks `vgpu-smi --json` against the independent region reader (vgpu_region.py), the way HAMi's
vGPU monitor reads a v1 region (docs/hami-contract.md §3.10, §4.1): for every usable region in the JSON, per
device i < 16 listed: limit[i], Σ used[i].total / context_size / module_size / data_size over
slots k < proc_num with status != 0, sm_limit[i]; and the list of live processes.

    python3 smi_check.py JSON_FILE      prints "checked=<n regions>" and exits 0, or the mismatches and 1
"""

import json
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
import vgpu_region  # noqa: E402


def main(path):
    doc = json.load(open(path))
    bad = []
    if doc.get("schema") != "vgpu-smi" or doc.get("version") != 1:
        bad.append(f"schema/version: {doc.get('schema')!r} {doc.get('version')!r}")
    n = 0
    for reg in doc["regions"]:
        if reg["error"] is not None:
            continue
        n += 1
        r = vgpu_region.read(reg["path"])
        live = [p for p in r["procs"] if p["status"] != 0]
        for d in reg["devices"]:
            i = d["index"]
            want = {
                "memory_limit_bytes": r["limit"][i],
                "memory_used_bytes": sum(p["used"][i]["total"] for p in live),
                "memory_context_bytes": sum(p["used"][i]["context_size"] for p in live),
                "memory_module_bytes": sum(p["used"][i]["module_size"] for p in live),
                "memory_data_bytes": sum(p["used"][i]["data_size"] for p in live),
                "sm_limit_percent": r["sm_limit"][i],
                "uuid": r["uuids"][i] or None,
            }
            for k, v in want.items():
                if d[k] != v:
                    bad.append(f"{reg['path']} device {i} {k}: vgpu-smi {d[k]!r}, region {v!r}")
            free = None if r["limit"][i] == 0 else max(0, r["limit"][i] - want["memory_used_bytes"])
            if d["memory_free_bytes"] != free:
                bad.append(f"{reg['path']} device {i} free: {d['memory_free_bytes']!r} != {free!r}")
        got = sorted((p["slot"], p["pid"], p["host_pid"], p["status"]) for p in reg["processes"])
        want = sorted((p["slot"], p["pid"], p["hostpid"], p["status"]) for p in live)
        if got != want:
            bad.append(f"{reg['path']} processes: vgpu-smi {got}, region {want}")
        for k in ("priority", "recent_kernel", "proc_num", "utilization_switch"):
            if reg[k] != r[k]:
                bad.append(f"{reg['path']} {k}: {reg[k]!r} != {r[k]!r}")
    for b in bad:
        print(b)
    print(f"checked={n}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
