#!/usr/bin/env bash
# Benchmarks, reported against running without the shim in the same run (never timed assertions
# in tests). Sections: memory (this file: alloc+free pairs, cuMemGetInfo, syscalls per call, the
# SIGKILL storm, allocation near the limit) and compute (ci/bench_compute.sh: limiter accuracy
# table, plot, launch overhead).
#
#   ci/bench.sh                       both sections
#   BENCH_MEMORY_ONLY=1 ci/bench.sh   memory only (~3 min on 2 cores, ~2 min more near the limit)
#   BENCH_MEMORY_SECTIONS=paired      only some memory sections (process, paired, syscalls, storm,
#                                     nearlimit)
#   BENCH_ROUNDS=7 ALLOC_ITERS=20000 STORM_SECS=2 STORM_ROUNDS=5   (defaults)
#   LIMIT_ROUNDS=5 LIMIT_ITERS=20000  (near the limit; defaults)
#   VGPU_BENCH_SHIM=path/libvgpu.so   measure another build of the shim (e.g. an older one)
#
# Memory figures: every configuration runs once per round, without and with the shim back to
# back (interleaved); a configuration's figure per round is the mean of its processes' medians;
# reported are the median over rounds and the range of the per-round difference.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=ci/simgpu.sh
. ci/simgpu.sh
shim="${VGPU_BENCH_SHIM:-$shim}"
mkdir -p "$out/bench"
cc -O2 -o "$out/bench/alloc_bench" ci/bench/alloc_bench.c -ldl
export BENCH_BIN="$out/bench/alloc_bench" BENCH_SHIM="$shim" BENCH_WORK="$work"
python3 - <<'PY'
import os, random, shutil, statistics, subprocess, time

BIN, SHIM, WORK = os.environ["BENCH_BIN"], os.environ["BENCH_SHIM"], os.environ["BENCH_WORK"]
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "7"))
ITERS = int(os.environ.get("ALLOC_ITERS", "20000"))
STORM_SECS = float(os.environ.get("STORM_SECS", "2"))
STORM_ROUNDS = int(os.environ.get("STORM_ROUNDS", "5"))
# Sections of this file to run (all by default): process, paired, syscalls, storm.
SECTIONS = os.environ.get("BENCH_MEMORY_SECTIONS", "process,paired,syscalls,storm,nearlimit").split(",")
LIMIT_ROUNDS = int(os.environ.get("LIMIT_ROUNDS", "5"))
LIMIT_ITERS = int(os.environ.get("LIMIT_ITERS", "20000"))

SIM_N = [0]

def env(shim, cache="bench.cache", fresh_sim=True):
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    if fresh_sim:
        # A fresh simulated-GPU state per run: the simulator's own per-call work grows with the
        # processes it has seen, which would bias whichever configuration runs later.
        SIM_N[0] += 1
        e["VGPU_SIM_STATE"] = f"{WORK}/sim.{SIM_N[0]}.state"
    if shim:
        e.update(LD_PRELOAD=SHIM, CUDA_DEVICE_MEMORY_LIMIT="8g", CUDA_DEVICE_MEMORY_SHARED_CACHE=f"{WORK}/{cache}")
    return e

def outputs(mode, n, e, iters=None):
    """Runs `n` alloc_bench processes of `mode` at once; their `key=value` outputs."""
    ps = [subprocess.Popen([BIN, mode, str(iters or ITERS)], env=e, stdout=subprocess.PIPE, text=True) for _ in range(n)]
    res = []
    for p in ps:
        out, _ = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"alloc_bench {mode} failed ({p.returncode})")
        res.append({k: int(v) for k, v in (f.split("=") for f in out.split())})
    return res

def run(mode, n, shim):
    e = env(shim, f"{mode}.{n}.cache")
    if mode.endswith("_t"):
        mode = mode[:-2]
        if not shim:
            e["ALLOC_BENCH_IDLE_THREAD"] = "1"
            e["ALLOC_BENCH_NVML"] = "1"
    meds = [o["median_ns"] for o in outputs(mode, n, e)]
    return sum(meds) / len(meds)

# "_t": the baseline runs in the shim's environment: one idle thread per process (the shim's
# process has one more thread, its housekeeping thread) and NVML loaded and initialised (the shim
# reads NVML for driver-held memory; the simulated driver's own alloc/free measures ~0.1 µs slower
# in any process that has the simulated NVML loaded). Against it the difference is the shim's own cost.
configs = [("pair", 1), ("pair_t", 1), ("pair", 8), ("pair_t", 8), ("async", 1), ("async_t", 1), ("async", 8),
           ("async_t", 8), ("meminfo", 1), ("meminfo_t", 1), ("ctxdev", 1)]
names = {
    "pair": "`cuMemAlloc_v2` + `cuMemFree_v2` (1 MiB) pair",
    "async": "`cuMemAllocAsync` + `cuMemFreeAsync` (1 MiB) pair",
    "meminfo": "`cuMemGetInfo_v2`",
    "meminfo_t": "`cuMemGetInfo_v2`, baseline with one idle thread and NVML",
    "pair_t": "`cuMemAlloc_v2` + `cuMemFree_v2` pair, baseline with one idle thread and NVML",
    "async_t": "`cuMemAllocAsync` + `cuMemFreeAsync` pair, baseline with one idle thread and NVML",
    "ctxdev": "(reference) simulated `cuCtxGetDevice` + `cuCtxGetCurrent`",
}
if "process" in SECTIONS:
    res = {c: ([], []) for c in configs}
    for r in range(ROUNDS):
        for c in configs:
            # Alternate which runs first.
            for shim in ((False, True) if r % 2 == 0 else (True, False)):
                res[c][shim].append(run(*c, shim))

    print(f"## Memory: median ns per call, {ROUNDS} interleaved rounds ({ITERS} calls per process per round)")
    print()
    print("| call | processes | without shim | with shim (limit 8g) | added (median) | added (range over rounds) | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for c in configs:
        b, w = res[c]
        d = [y - x for x, y in zip(b, w)]
        mb, mw = statistics.median(b), statistics.median(w)
        print(f"| {names[c[0]]} | {c[1]} | {mb:.0f} | {mw:.0f} | {statistics.median(d):+.0f} | {min(d):+.0f} … {max(d):+.0f} | {mw / mb:.2f} |")
    print()
    ref = statistics.median(res[("ctxdev", 1)][0])
    print(f"The hooks ask the driver for the current device and context on every allocation (the view for")
    print(f"the device): the simulated driver answers those two queries in {ref:.0f} ns (last row, without the")
    print("shim), which is part of the added time above; a real driver answers them from thread-local state.")
    print("The shim's process has one more thread (housekeeping) and NVML loaded; the rows \"baseline with one")
    print("idle thread and NVML\" compare against no shim plus one sleeping thread and an initialised NVML")
    print("(the simulated driver's own alloc/free is slower in a process with the simulated NVML loaded), so")
    print("that difference is the shim's own cost. With")
    print("8 processes on a machine of few cores the processes are time-sliced and the slot words they")
    print("write move between cores: that is part of the 8-process figures, as it would be on a real node.")
    print()

# ---- the same calls, paired within each process ---------------------------------------------
# Between two runs this machine drifts by more than the shim costs (the same configuration moves
# by ±150 ns and more from one run to the next, a 3.5 µs pair by 25 %), so a difference of two
# runs' medians resolves the shim only roughly. Paired, each process alternates call by call
# between the function cuGetProcAddress returned (the shim's hook) and the driver's own export
# (alloc_bench ALLOC_BENCH_PAIRED=1), so both medians come from the same moments and the drift
# cancels. This is the shim's cost per call on its path; what its process pays besides (its two
# threads and their periodic NVML work) is in the table above, not here. Without a shim both
# paths are the same function: that control row shows the method's own error.
def run_paired(mode, n, shim):
    e = env(shim, f"paired.{mode}.{n}.cache")
    e["ALLOC_BENCH_PAIRED"] = "1"
    if not shim:
        e["ALLOC_BENCH_IDLE_THREAD"] = "1"
    outs = outputs(mode, n, e)
    added = [o["median_ns"] - o["direct_median_ns"] for o in outs]
    return sum(added) / n, sum(o["direct_median_ns"] for o in outs) / n

if "paired" in SECTIONS:
    paired = [("pair", 1), ("pair", 8), ("async", 1), ("async", 8)]
    pres = {(c, shim): ([], []) for c in paired for shim in (False, True)}
    for r in range(ROUNDS):
        for c in paired:
            for shim in ((False, True) if r % 2 == 0 else (True, False)):
                a, d = run_paired(*c, shim)
                pres[(c, shim)][0].append(a)
                pres[(c, shim)][1].append(d)
    print(f"## Memory: added ns per call, paired within each process ({ROUNDS} rounds, {ITERS} calls per path per process)")
    print()
    print("| call | processes | driver alone (median) | added by the shim (median) | range over rounds | control: no shim, both paths the driver |")
    print("|---|---:|---:|---:|---:|---:|")
    for c in paired:
        a, d = pres[(c, True)]
        z, _ = pres[(c, False)]
        print(f"| {names[c[0]]} | {c[1]} | {statistics.median(d):.0f} | **{statistics.median(a):+.0f}** | {min(a):+.0f} … {max(a):+.0f} | {statistics.median(z):+.0f} ({min(z):+.0f} … {max(z):+.0f}) |")
    print()

# ---- system calls per call (main thread; the difference of two loop lengths cancels setup) ----
def syscalls(mode, shim):
    if not shutil.which("strace"):
        return None
    counts = []
    for n in (1000, 11000):
        f = f"{WORK}/strace.{mode}.{n}"
        subprocess.run(["strace", "-c", "-o", f, BIN, mode, str(n)], env=env(shim, "strace.cache"), stdout=subprocess.DEVNULL, check=True)
        per = {}
        for line in open(f):
            p = line.split()
            if len(p) >= 5 and p[0][0].isdigit() and p[-1] != "total":
                per[p[-1]] = int(p[3])
        counts.append(per)
    keys = set(counts[0]) | set(counts[1])
    return {k: (counts[1].get(k, 0) - counts[0].get(k, 0)) / 10000 for k in keys}

if "syscalls" in SECTIONS:
    print("## Memory: system calls per call (strace -c of the calling thread, 11 000 − 1 000 calls)")
    print()
    if not shutil.which("strace"):
        print("strace not installed: skipped")
    else:
        print("| call | without shim | with shim | added by the shim |")
        print("|---|---:|---:|---|")
        for mode in ("pair", "async", "meminfo"):
            a, b = syscalls(mode, False), syscalls(mode, True)
            added = {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b)}
            added = {k: v for k, v in added.items() if abs(v) >= 0.001}
            txt = ", ".join(f"{k} {v:+.3f}" for k, v in sorted(added.items())) or "none"
            print(f"| {names[mode]} | {sum(a.values()):.2f} | {sum(b.values()):.2f} | {txt} |")
        print()
        print("(The simulated driver's own calls are in both columns.)")
    print()

# ---- SIGKILL storm: 6 allocating processes of one container, one killed every 0.3 s ----------
def storm(shim, kills, tag, idle_thread=False, mode="storm", at_limit=False):
    ctr = f"{WORK}/storm.{tag}.ctr"
    with open(ctr, "wb") as f:
        f.write(b"\0" * 8)
    cache = f"storm.{tag}.cache"
    ms = str(int(STORM_SECS * 1000) + 2000)  # outlive the window; stopped at its end
    e = env(shim, cache)  # one simulated GPU for the whole storm (restarts included)
    if at_limit:
        e = at_the_limit(e, shim)
    if idle_thread:
        e["ALLOC_BENCH_IDLE_THREAD"] = "1"
    start = lambda: subprocess.Popen([BIN, mode, ms, ctr], env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ps = [start() for _ in range(6)]
    time.sleep(0.3)  # all initialised
    read = lambda: int.from_bytes(open(ctr, "rb").read(8), "little")
    c0, t0, killed = read(), time.monotonic(), 0
    rng = random.Random(7)
    while time.monotonic() - t0 < STORM_SECS:
        time.sleep(0.3)
        if kills:
            i = rng.randrange(6)
            ps[i].kill()
            ps[i].wait()
            ps[i] = start()
            killed += 1
    c1, t1 = read(), time.monotonic()
    for p in ps:
        p.kill()
        p.wait()
    return (c1 - c0) / (t1 - t0), killed

# The machine is shared (other jobs' load moves a window's rate by tens of %): each round runs
# its four windows back to back, in alternating order, and "kept" is the median over rounds of
# the ratio within a round, so both sides of a ratio saw nearly the same load.
if "storm" in SECTIONS:
    kinds = [("base", False, False, False), ("base_t", False, False, True), ("shim", True, False, False), ("kills", True, True, False)]
    rates = {k[0]: [] for k in kinds}
    for r in range(STORM_ROUNDS):
        for name, shim, kills, idle in (kinds if r % 2 == 0 else kinds[::-1]):
            rates[name].append(storm(shim, kills, f"{name}{r}", idle_thread=idle)[0])
    med = {k: statistics.median(v) for k, v in rates.items()}
    def kept(a, b="base"):
        ratios = [100 * x / y for x, y in zip(rates[a], rates[b])]
        return statistics.median(ratios), ratios
    print(f"## Memory: SIGKILL storm (6 processes of one container, 1 MiB alloc+free pairs, one killed every 0.3 s and restarted; {STORM_SECS:g} s windows, {STORM_ROUNDS} interleaved rounds)")
    print()
    print("| configuration | pairs/s (median) | kept vs no shim, no kills (median of per-round ratios; rounds) |")
    print("|---|---:|---:|")
    print(f"| no shim, no kills | {med['base']:.0f} | 100 % |")
    for name, label in (("base_t", "no shim, no kills, one idle thread per process"), ("shim", "shim, no kills"), ("kills", "shim, one SIGKILL every 0.3 s")):
        m, rs = kept(name)
        bold = "**" if name == "kills" else ""
        print(f"| {label} | {med[name]:.0f} | {bold}{m:.0f} %{bold} ({', '.join(f'{x:.0f}' for x in rs)}) |")
    m, rs = kept("kills", "shim")
    print(f"| (the kills alone: shim with kills vs shim without) | | {m:.0f} % ({', '.join(f'{x:.0f}' for x in rs)}) |")
    print()

# ---- allocation near the limit (docs/benchmarks.md "Allocation near the limit") -------------
# A device of 1 GiB and, with the shim, a container limit of 1 GiB: every process allocates
# 2-64 MiB blocks and keeps up to 64 of them (far more than fit), freeing the oldest when an
# attempt is refused, so the container stays at its limit and about every other attempt is
# refused: by the driver's own OOM without the shim, by the shim's limit with it. No context
# cost (VGPU_SIM_CTX_MIB=0): both sides hold the same blocks. The simulated driver refuses from
# its counters as a real one does (VGPU_SIM_FAST_OOM=1), not after a /proc scan of every process.
def at_the_limit(e, shim):
    e["VGPU_SIM_MEM_MIB"] = "1024"
    e["VGPU_SIM_CTX_MIB"] = "0"
    e["VGPU_SIM_FAST_OOM"] = "1"
    if shim:
        e["CUDA_DEVICE_MEMORY_LIMIT"] = "1g"
        e["LIBCUDA_LOG_LEVEL"] = "1"  # the refusal lines (one per second per process) off the bench's output
    return e

def run_limit(n, shim):
    outs = outputs("limit", n, at_the_limit(env(shim, f"limit.{n}.cache"), shim), LIMIT_ITERS)
    mean = lambda k: sum(o[k] for o in outs) / n
    return sum(o["ok_rate"] for o in outs), mean("ok_median_ns"), mean("oom_median_ns")

def limit_syscalls(shim, lengths=(2000, 12000)):
    """System calls per attempt of 4 processes at the limit, all their threads (strace -f -c;
    the difference of two loop lengths cancels start-up). All four are traced alike: a traced
    process among untraced ones is slower and starves, which would hide its refusals' cost."""
    counts = []
    for n in lengths:
        e = at_the_limit(env(shim, f"stracelimit.{n}.cache"), shim)
        f = f"{WORK}/strace.limit.{n}"
        four = f'for i in 1 2 3 4; do "{BIN}" limit {n} & done; wait'
        subprocess.run(["strace", "-f", "-c", "-o", f, "sh", "-c", four], env=e, stdout=subprocess.DEVNULL, check=True)
        per = {}
        for line in open(f):
            p = line.split()
            if len(p) >= 5 and p[0][0].isdigit() and p[-1] != "total":
                per[p[-1]] = int(p[3])
        counts.append(per)
    keys = set(counts[0]) | set(counts[1])
    return {k: (counts[1].get(k, 0) - counts[0].get(k, 0)) / (4 * (lengths[1] - lengths[0])) for k in keys}

if "nearlimit" in SECTIONS:
    lres = {(n, shim): [] for n in (1, 4, 8) for shim in (False, True)}
    for r in range(LIMIT_ROUNDS):
        for n in (1, 4, 8):
            for shim in ((False, True) if r % 2 == 0 else (True, False)):
                lres[(n, shim)].append(run_limit(n, shim))
    print(f"## Memory: allocation near the limit ({LIMIT_ROUNDS} interleaved rounds, {LIMIT_ITERS} attempts per process per round; device 1 GiB, limit 1 GiB)")
    print()
    print("| processes | allocations/s, no shim | allocations/s, shim | kept (median of per-round ratios; range) | success: driver / shim / added (ns) | refusal: driver OOM / shim (ns) | refusal ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in (1, 4, 8):
        b, w = lres[(n, False)], lres[(n, True)]
        kept = [100 * y[0] / x[0] for x, y in zip(b, w)]
        med = lambda rows, i: statistics.median(x[i] for x in rows)
        ok_b, ok_w, oom_b, oom_w = med(b, 1), med(w, 1), med(b, 2), med(w, 2)
        print(f"| {n} | {med(b, 0):.0f} | {med(w, 0):.0f} | **{statistics.median(kept):.0f} %** ({min(kept):.0f} … {max(kept):.0f}) "
              f"| {ok_b:.0f} / {ok_w:.0f} / {ok_w - ok_b:+.0f} | {oom_b:.0f} / {oom_w:.0f} | **{oom_w / max(oom_b, 1):.1f}×** |")
    print()
    kinds = [("base", False, False), ("shim", True, False), ("kills", True, True)]
    srates = {k[0]: [] for k in kinds}
    for r in range(STORM_ROUNDS):
        for name, shim, kills in (kinds if r % 2 == 0 else kinds[::-1]):
            srates[name].append(storm(shim, kills, f"limit{name}{r}", mode="stormlimit", at_limit=True)[0])
    print(f"SIGKILL storm at the limit (6 processes, the loop above, one killed every 0.3 s and restarted; {STORM_SECS:g} s windows, {STORM_ROUNDS} rounds):")
    print()
    print("| configuration | allocations/s (median) | kept vs no shim (median of per-round ratios; rounds) |")
    print("|---|---:|---:|")
    print(f"| no shim, no kills | {statistics.median(srates['base']):.0f} | 100 % |")
    for name, label in (("shim", "shim, no kills"), ("kills", "shim, one SIGKILL every 0.3 s")):
        ratios = [100 * x / y for x, y in zip(srates[name], srates["base"])]
        print(f"| {label} | {statistics.median(srates[name]):.0f} | **{statistics.median(ratios):.0f} %** ({', '.join(f'{x:.0f}' for x in ratios)}) |")
    print()
    if shutil.which("strace"):
        a, b = limit_syscalls(False), limit_syscalls(True)
        fmt = lambda d: ", ".join(f"{k} {v:.3f}" for k, v in sorted(d.items()) if v >= 0.001) or "none"
        print("System calls per attempt, 4 processes at the limit (strace -f -c, every thread of the 4):")
        print()
        print("| | per attempt |")
        print("|---|---|")
        print(f"| no shim | {fmt(a)} |")
        print(f"| shim | {fmt(b)} |")
        added = {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b)}
        print(f"| added by the shim | {', '.join(f'{k} {v:+.3f}' for k, v in sorted(added.items()) if abs(v) >= 0.001) or 'none'} |")
        print()
PY
if [[ -z ${BENCH_MEMORY_ONLY:-} && -x ci/bench_compute.sh ]]; then
  ci/bench_compute.sh
fi
