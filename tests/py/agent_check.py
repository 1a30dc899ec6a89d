"""Checks `vgpu-agent`'s /metrics against the regions, each read independently: the exposition text
is parsed by prometheus_client's own parser, the regions by vgpu_region.py, and every HAMi family
(docs/hami-contract.md §4.4) is compared sample for sample, the way HAMi's monitor computes it.

    python3 agent_check.py METRICS_FILE EXPECT_JSON

EXPECT_JSON: {"legacy": bool, "containers": [{"region": path, "namespace": ns, "pod": name,
"container": ctr}, ...]}. Prints "checked=<devices>" and exits 0, or the mismatches and 1.
"""

import json
import sys
import time

sys.path.insert(0, __import__("os").path.dirname(__file__))
import vgpu_region  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

NEW = [
    "hami_vgpu_memory_used_bytes",
    "hami_vgpu_memory_limit_bytes",
    "hami_container_device_memory_bytes",
    "hami_container_device_utilization_ratio",
    "hami_vgpu_memory_context_bytes",
    "hami_vgpu_memory_module_bytes",
    "hami_vgpu_memory_buffer_bytes",
]
LEGACY = [
    "vGPU_device_memory_usage_in_bytes",
    "vGPU_device_memory_limit_in_bytes",
    "Device_memory_desc_of_container",
    "Device_utilization_desc_of_container",
]


def samples(text):
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def main(metrics_file, expect_file):
    text = open(metrics_file).read()
    exp = json.load(open(expect_file))
    got = samples(text)
    bad = []
    checked = 0
    now = time.time()
    for c in exp["containers"]:
        r = vgpu_region.read(c["region"])
        live = [p for p in r["procs"][: max(0, min(r["proc_num"], 1024))] if p["status"] != 0]
        for i in range(min(r["device_num"], 16)):
            uuid = r["uuids"][i]
            if not uuid:
                continue
            base = {
                "namespace": c["namespace"],
                "pod": c["pod"],
                "container": c["container"],
                "vdevice_index": str(i),
                "device_uuid": uuid[:40],
                "zone": "vGPU",
            }

            def s(f):
                return sum(p["used"][i][f] for p in live) % (1 << 64)

            total, ctx, mod, data = s("total"), s("context_size"), s("module_size"), s("data_size")
            sm = 0
            with open(c["region"], "rb") as fh:
                b = fh.read()
            for p in live:
                off = vgpu_region.slot_offset(p["slot"]) + 1160 + 48 * i + 16
                sm += int.from_bytes(b[off : off + 8], "little")
            want = {
                "hami_vgpu_memory_used_bytes": total,
                "hami_vgpu_memory_limit_bytes": r["limit"][i],
                "hami_container_device_memory_bytes": total,
                "hami_container_device_utilization_ratio": sm,
                "hami_vgpu_memory_context_bytes": ctx,
                "hami_vgpu_memory_module_bytes": mod,
                "hami_vgpu_memory_buffer_bytes": data,
            }
            legacy_base = {
                "podnamespace": c["namespace"],
                "podname": c["pod"],
                "ctrname": c["container"],
                "vdeviceid": str(i),
                "deviceuuid": uuid[:40],
                "zone": "vGPU",
            }
            if exp["legacy"]:
                want["vGPU_device_memory_usage_in_bytes"] = total
                want["vGPU_device_memory_limit_in_bytes"] = r["limit"][i]
                want["Device_utilization_desc_of_container"] = sm
                want["Device_memory_desc_of_container"] = total
            for name, v in want.items():
                labels = dict(legacy_base if name in LEGACY else base)
                if name == "Device_memory_desc_of_container":
                    offset = (total - ctx - mod - data) % (1 << 64)
                    labels.update(context=str(ctx), module=str(mod), data=str(data), offset=str(offset))
                hits = [val for (lab, val) in got.get(name, []) if lab == labels]
                if len(hits) != 1:
                    bad.append(f"{name}{labels}: {len(hits)} samples (have {got.get(name, [])[:3]})")
                elif hits[0] != float(v):
                    bad.append(f"{name}{labels}: {hits[0]} != region {v}")
            lkt = r["last_kernel_time"]
            hits = [val for (lab, val) in got.get("hami_container_last_kernel_elapsed_seconds", []) if lab == base]
            if lkt > 0 and lkt < (1 << 63):
                if len(hits) != 1 or abs(hits[0] - max(now - lkt, 0)) > 5:
                    bad.append(f"last kernel {base}: {hits} vs now - {lkt}")
            elif hits:
                bad.append(f"last kernel {base}: emitted without last_kernel_time")
            checked += 1
    if not exp["legacy"]:
        for name in LEGACY + ["Device_last_kernel_of_container"]:
            if name in got:
                bad.append(f"{name} emitted without --legacy-metrics")
    if bad:
        print("\n".join(bad))
        return 1
    print(f"checked={checked}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
