#!/usr/bin/env bash
# Compute-limiter benchmark: on the simulated GPU, the container's share of device time
# measured by the simulator's exact per-process busy time (`simctl sample`) over a 5 s window after
# 1 s of settling, for limit x workload x processes, two containers 30/60, an under-limit workload,
# the unthrottled launch latency against no shim, and a PNG plot of share over time per limit.
#
#   ci/bench_compute.sh            full table (~6 min on 2 cores)
#   BENCH_QUICK=1 ci/bench_compute.sh   a few cells only
#   BENCH_SECTIONS=main,pair,nonvml,under,latency,burst   (default: all)
#   BENCH_BURST_WORK=long,mix BENCH_BURST_PROCS=4 BENCH_BURST_SCEN=AC,AD,Bstart   burst cells subset
#   BENCH_BURST_WINDOW=3   seconds measured after 1 s in the steady-state burst rows (default 5)
#   BENCH_BURST_TIMESLICE_US=1000   burst rows on the time-sliced simulated GPU (default 0: one FIFO)
#   BENCH_TRACE_DIR=DIR   clients' stderr (LIBCUDA_LOG_LEVEL=4) and each cell's 100 ms series into DIR
#
# Output: a markdown report on stdout; report, CSV and plot in $BENCH_OUT (default
# target/bench-compute/: compute.md, compute.csv, share_over_time.png).
# Environment: CARGO_TARGET_DIR (honoured), BENCH_NO_BUILD=1 (use existing build),
# BENCH_PID_OFFSET (default 100000: NVML reports pid + offset, as a PID namespace would).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
REL="$TARGET_DIR/release"
OUT=${BENCH_OUT:-$ROOT/target/bench-compute}
if [[ -z ${BENCH_NO_BUILD:-} ]]; then
  cargo build --release -q -p libvgpu -p vgpu-sim-cuda -p vgpu-sim-nvml -p vgpu-simctl
fi
mkdir -p "$REL/simlib" "$REL/bench" "$OUT"
ln -sf ../libcuda.so "$REL/simlib/libcuda.so.1"
ln -sf ../libnvidia_ml.so "$REL/simlib/libnvidia-ml.so.1"
cc -std=gnu11 -O2 -Wall -I tests/c -o "$REL/bench/compute_client" tests/c/compute_client.c \
  -L "$REL/simlib" -l:libcuda.so.1 -lpthread -Wl,-rpath,"$REL/simlib"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

export BENCH_CLIENT="$REL/bench/compute_client" BENCH_SHIM="$REL/libvgpu.so" BENCH_SIMCTL="$REL/simctl"
export BENCH_SIMLIB="$REL/simlib" BENCH_WORK="$work" BENCH_OUT="$OUT"
python3 - <<'PY'
import os, subprocess, sys, time, struct, zlib, statistics

CLIENT = os.environ["BENCH_CLIENT"]; SHIM = os.environ["BENCH_SHIM"]; SIMCTL = os.environ["BENCH_SIMCTL"]
SIMLIB = os.environ["BENCH_SIMLIB"]; WORK = os.environ["BENCH_WORK"]; OUT = os.environ["BENCH_OUT"]
QUICK = os.environ.get("BENCH_QUICK") == "1"
SECTIONS = set((os.environ.get("BENCH_SECTIONS") or "main,pair,nonvml,under,latency,burst").split(","))
PID_OFFSET = os.environ.get("BENCH_PID_OFFSET", "100000")
SETTLE, WINDOW, STEP_MS = 1.0, 5.0, 100

def mono_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)

def base_env(state, extra):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("CUDA_", "VGPU_", "LIBCUDA_", "LD_", "GPU_CORE", "BENCH_"))}
    e.update({"LD_LIBRARY_PATH": SIMLIB, "VGPU_SIM_STATE": state, "VGPU_SIM_PID_OFFSET": PID_OFFSET})
    if os.environ.get("BENCH_TRACE_DIR"):
        e["LIBCUDA_LOG_LEVEL"] = "4"
    e.update(extra)
    return e

cell_no = [0]

def run_cell(containers, args, extra=None, seconds=None, settle=SETTLE, window=WINDOW):
    """containers: list of (limit or None for no shim, nprocs[, ceiling, start s]). Returns per
    container (window share %, 1 s shares, series of (t_s, share %) per STEP_MS, launches)."""
    seconds = seconds or settle + window
    cell_no[0] += 1
    d = os.path.join(WORK, f"cell{cell_no[0]}")
    os.makedirs(d)
    state = os.path.join(d, "sim.state")
    extra = extra or {}
    subprocess.run([CLIENT, "--count", "0"], env=base_env(state, extra), stdout=subprocess.DEVNULL, check=True)
    nprocs = sum(c[1] for c in containers)
    t0 = mono_ns() + int((0.4 + 0.1 * nprocs) * 1e9)
    procs = []
    for ci, c in enumerate(containers):
        limit, n = c[0], c[1]
        ceiling, start = (c[2], c[3]) if len(c) > 2 else (0, 0.0)
        env = base_env(state, extra)
        env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = os.path.join(d, f"c{ci}.cache")
        if limit is not None:
            env.update({"LD_PRELOAD": SHIM, "CUDA_DEVICE_SM_LIMIT": str(limit), "GPU_CORE_UTILIZATION_POLICY": "force"})
        if ceiling:
            env["CUDA_DEVICE_SM_CEILING"] = str(ceiling)
        for k in range(n):
            # Traced clients log every launch: straight into a file (a pipe read only at the end
            # fills up and blocks a client with 50 µs kernels within a fraction of a second).
            trace = os.environ.get("BENCH_TRACE_DIR")
            err = open(os.path.join(trace, f"cell{cell_no[0]}-c{ci}-{k}.err"), "w") if trace else subprocess.PIPE
            p = subprocess.Popen([CLIENT, "--seconds", f"{seconds - start + 0.3}", "--start-at", str(t0 + int(start * 1e9))] + args,
                                 env=env, stdout=subprocess.PIPE, stderr=err, text=True)
            procs.append((ci, p))
    while mono_ns() < t0:
        time.sleep(min(0.05, (t0 - mono_ns()) / 1e9 + 0.001))
    count = int(seconds * 1000 / STEP_MS) + 1
    smp = subprocess.run([SIMCTL, "--state", state, "sample", "--interval-ms", str(STEP_MS), "--count", str(count)],
                         capture_output=True, text=True, check=True).stdout
    launches = [0] * len(containers)
    pids = [set() for _ in containers]
    for ci, p in procs:
        o, e = p.communicate(timeout=120)
        if p.returncode != 0:
            sys.exit(f"client failed ({p.returncode}): {o}\n{e}")
        kv = dict(l.split("=", 1) for l in o.splitlines() if "=" in l)
        launches[ci] += int(kv.get("launches", 0))
        pids[ci].add(p.pid)
    busy = {}  # t_ms -> [busy per container]
    for line in smp.splitlines():
        f = line.split(",")
        if len(f) != 5 or not f[0][0].isdigit():
            continue
        t, pid, dev = float(f[0]), int(f[1]), int(f[2])
        row = busy.setdefault(t, [0] * len(containers))
        for ci in range(len(containers)):
            if pid in pids[ci] and dev == 0:
                row[ci] += int(f[3])
    ts = sorted(busy)
    res = []
    for ci in range(len(containers)):
        def share(a, b):
            return (busy[b][ci] - busy[a][ci]) / ((b - a) * 1e6) * 100
        def at(sec):
            return min(ts, key=lambda t: abs(t - sec * 1000))
        w0, w1 = at(settle), at(settle + window)
        win = share(w0, w1)
        secs = [share(at(settle + i), at(settle + i + 1)) for i in range(int(window))]
        series = [(ts[i + 1] / 1000, share(ts[i], ts[i + 1])) for i in range(len(ts) - 1)]
        res.append((win, secs, series, launches[ci]))
        if os.environ.get("BENCH_TRACE_DIR"):
            with open(os.path.join(os.environ["BENCH_TRACE_DIR"], f"cell{cell_no[0]}-c{ci}.series"), "w") as f:
                f.write(" ".join(f"{t:.1f}:{v:.0f}" for t, v in series) + "\n")
    return res

report = []
def out(s=""):
    print(s, flush=True)
    report.append(s)

csv = ["section,workload,processes,limit,share,error,worst_1s,launches"]
WORKLOADS = [("short 50us", ["--kernel-us", "50"]), ("long 20ms", ["--kernel-us", "20000"]),
             ("mix 50us+20ms", ["--mix", "50,20000"])]
LIMITS = [10, 25, 50, 75, 90]
if QUICK:
    WORKLOADS, LIMITS = WORKLOADS[:1] + WORKLOADS[2:], [25, 75]

misses = []
trace = {}
out("## Compute: share of device time (simulated GPU, exact per-process busy time)")
out()
out(f"Window: {WINDOW:.0f} s after {SETTLE:.0f} s settling; policy force; NVML reports pid + {PID_OFFSET} (PID namespace). "
    "'worst 1 s' = the 1 s sub-window farthest from the limit.")
out()
out("| workload | processes | limit | share | error | worst 1 s | launches |")
out("|---|---:|---:|---:|---:|---:|---:|")
for wname, wargs in (WORKLOADS if "main" in SECTIONS else []):
    for n in (1, 4):
        for lim in LIMITS:
            (win, secs, series, nl), = run_cell([(lim, n)], wargs)
            worst = max(secs, key=lambda s: abs(s - lim))
            err = win - lim
            flag = "" if abs(err) <= 3 else " **(>3)**"
            if abs(err) > 3:
                misses.append(f"{wname}, {n} proc, limit {lim}: {win:.2f}")
            out(f"| {wname} | {n} | {lim} | {win:.2f} | {err:+.2f}{flag} | {worst:.1f} | {nl} |")
            csv.append(f"main,{wname},{n},{lim},{win:.3f},{err:.3f},{worst:.2f},{nl}")
            if wname.startswith("short") and n == 1:
                trace[lim] = series
out()

out("### Two containers on one device, limits 30 and 60 (1 process each)")
out()
out("| workload | share (limit 30) | error | share (limit 60) | error | sum |")
out("|---|---:|---:|---:|---:|---:|")
for wname, wargs in ((WORKLOADS if not QUICK else WORKLOADS[:1]) if "pair" in SECTIONS else []):
    (a, _, _, _), (b, _, _, _) = run_cell([(30, 1), (60, 1)], wargs)
    for lim, v in ((30, a), (60, b)):
        if abs(v - lim) > 3:
            misses.append(f"two containers {wname}, limit {lim}: {v:.2f}")
    out(f"| {wname} | {a:.2f} | {a - 30:+.2f} | {b:.2f} | {b - 60:+.2f} | {a + b:.2f} |")
    csv.append(f"pair,{wname},1+1,30/60,{a:.3f}/{b:.3f},{a - 30:.3f}/{b - 60:.3f},,")
out()

out("### Without NVML per-process utilisation (VGPU_SIM_NO_PROC_UTIL=1: events only)")
out()
out("| workload | processes | limit | share | error |")
out("|---|---:|---:|---:|---:|")
for wname, wargs in ((WORKLOADS if not QUICK else WORKLOADS[:1]) if "nonvml" in SECTIONS else []):
    for n in (1, 4):
        for lim in ([25, 75] if not QUICK else [50]):
            (win, _, _, _), = run_cell([(lim, n)], wargs, {"VGPU_SIM_NO_PROC_UTIL": "1"})
            out(f"| {wname} | {n} | {lim} | {win:.2f} | {win - lim:+.2f} |")
            csv.append(f"nonvml,{wname},{n},{lim},{win:.3f},{win - lim:.3f},,")
out()

out("### Under-limit workloads are not slowed")
out()
out("| workload | limit | launches without shim | with shim | change | share with shim |")
out("|---|---:|---:|---:|---:|---:|")
UNDER = [("1 ms kernel + sync + 3 ms sleep", ["--kernel-us", "1000", "--pace-us", "3000"], 50),
         ("50 us kernel + sync + 150 us sleep", ["--kernel-us", "50", "--pace-us", "150"], 30)]
for wname, wargs, lim in (UNDER if "under" in SECTIONS else []):
    (w0, _, _, n0), = run_cell([(None, 1)], wargs)
    (w1, _, _, n1), = run_cell([(lim, 1)], wargs)
    out(f"| {wname} | {lim} | {n0} | {n1} | {(n1 - n0) / n0 * 100:+.2f} % | {w1:.2f} |")
    csv.append(f"under,{wname},1,{lim},{w1:.3f},,,{n0}/{n1}")
out()

out("### Launch latency (cuLaunchKernel, 1 us kernels, no back-pressure), ns per call")
out()
out("Configurations interleaved, 7 rounds of 200 000 launches; medians over rounds; 'added' = median of the")
out("per-round differences of p50 against no shim (the simulator's own launch costs ~0.5 us and varies by ~50 ns).")
out()
out("| configuration | p50 | p99 | mean | added (p50) |")
out("|---|---:|---:|---:|---:|")
def latency_once(extra, shim):
    state = os.path.join(WORK, f"lat{mono_ns()}.state")
    env = base_env(state, {"VGPU_SIM_MAX_QUEUE_US": "100000000", **extra})
    env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = state + ".cache"
    if shim:
        env["LD_PRELOAD"] = SHIM
    o = subprocess.run([CLIENT, "--count", "200000", "--kernel-us", "1", "--latency"], env=env,
                       capture_output=True, text=True, check=True).stdout
    kv = dict(l.split("=", 1) for l in o.splitlines() if "=" in l)
    return (int(kv["lat_p50_ns"]), int(kv["lat_p99_ns"]), int(kv["lat_mean_ns"]))
CONFIGS = [("no shim", {}, False), ("shim, no limit", {}, True),
           ("shim, CUDA_DEVICE_SM_LIMIT=100", {"CUDA_DEVICE_SM_LIMIT": "100"}, True),
           ("shim, limit 50, policy disable", {"CUDA_DEVICE_SM_LIMIT": "50", "GPU_CORE_UTILIZATION_POLICY": "disable"}, True)]
rounds = [[latency_once(e, sh) for _, e, sh in CONFIGS] for _ in range(3 if QUICK else 7)] if "latency" in SECTIONS else []
for i, (name, _, _) in enumerate(CONFIGS if rounds else []):
    med = [statistics.median(r[i][j] for r in rounds) for j in range(3)]
    added = statistics.median(r[i][0] - r[0][0] for r in rounds)
    out(f"| {name} | {med[0]:.0f} | {med[1]:.0f} | {med[2]:.0f} | {'' if i == 0 else f'{added:+.0f}'} |")
    csv.append(f"latency,{name},1,,{med[0]},{added},{med[1]},")
out()

# ---- burst: the limit as a guarantee, idle time up to CUDA_DEVICE_SM_CEILING ----------------
burst_trace = {}
BURST_T, BURST_B_START = 4.0, 1.5
# BENCH_BURST_TIMESLICE_US: the burst rows on the time-sliced simulated GPU (processes round-robin in
# slices of that many µs, as a real GPU time-slices between contexts); 0: one FIFO across processes.
BURST_SLICE = os.environ.get("BENCH_BURST_TIMESLICE_US") or "0"
BURST_EXTRA = {"VGPU_SIM_TIMESLICE_US": BURST_SLICE} if BURST_SLICE != "0" else {}
# The steady-state rows use the main matrix's 5 s window: with 20 ms kernels a pair's split wanders by
# a few points over a second or two (docs/design.md "Burst", what the rule leaves).
BURST_WINDOW = float(os.environ.get("BENCH_BURST_WINDOW") or 5.0)
out("### Burst: limit = guarantee, idle time shared up to the ceiling (separate containers)")
out()
out(f"Share over 1-{1 + BURST_WINDOW:.0f} s after a common start (B-start: B's first second after it starts, and the time until B's")
out("100 ms share first reaches 45 %). Targets: alone >= 90; A+B: B >= 48, A 28-52; A+C: 50 +- 5 each, sum >= 92;")
out("A+D: 25 +- 5 / 75 +- 5; B-start: B's first second >= 45.")
if BURST_EXTRA:
    out(f"Time-sliced simulated GPU: processes round-robin in {BURST_SLICE} us slices (VGPU_SIM_TIMESLICE_US).")
out()
out("| workload | procs | A 30/100 alone | A 30/100 + B 50 | A 30/100 + C 30/100 | A 20/100 + D 60/100 | B starts: B first 1 s / A | time to 45 % |")
out("|---|---:|---:|---:|---:|---:|---:|---:|")
BURST_WORK = WORKLOADS if not QUICK else WORKLOADS[:1]
# Subsets for iterating on a few cells: BENCH_BURST_WORK=long,mix (workload name prefixes),
# BENCH_BURST_PROCS=4, BENCH_BURST_SCEN=AC,AD,Bstart (of alone,AB,AC,AD,Bstart; skipped = nan).
if os.environ.get("BENCH_BURST_WORK"):
    BURST_WORK = [w for w in WORKLOADS if any(w[0].startswith(p) for p in os.environ["BENCH_BURST_WORK"].split(","))]
BURST_PROCS = [int(n) for n in (os.environ.get("BENCH_BURST_PROCS") or "1,4").split(",")]
BURST_SCEN = set((os.environ.get("BENCH_BURST_SCEN") or "alone,AB,AC,AD,Bstart").split(","))
NAN4 = (float("nan"), [], [], 0)
def burst_cell(name, containers, wargs, **kw):
    return run_cell(containers, wargs, extra=BURST_EXTRA, **kw) if name in BURST_SCEN else [NAN4] * len(containers)
for wname, wargs in (BURST_WORK if "burst" in SECTIONS else []):
    for n in BURST_PROCS:
        (al, _, _, _), = burst_cell("alone", [(30, n, 100, 0.0)], wargs, settle=1.0, window=BURST_WINDOW)
        (ab_a, _, _, _), (ab_b, _, _, _) = burst_cell("AB", [(30, n, 100, 0.0), (50, n, 0, 0.0)], wargs, settle=1.0, window=BURST_WINDOW)
        (ac_a, _, _, _), (ac_c, _, _, _) = burst_cell("AC", [(30, n, 100, 0.0), (30, n, 100, 0.0)], wargs, settle=1.0, window=BURST_WINDOW)
        (ad_a, _, _, _), (ad_d, _, _, _) = burst_cell("AD", [(20, n, 100, 0.0), (60, n, 100, 0.0)], wargs, settle=1.0, window=BURST_WINDOW)
        (bs_a, _, sa, _), (bs_b, _, sb, _) = burst_cell("Bstart", [(30, n, 100, 0.0), (50, n, 0, BURST_B_START)], wargs,
                                                        settle=BURST_B_START, window=1.0, seconds=BURST_T)
        yield_ms = next((round((t - BURST_B_START) * 1000) for t, v in sb if t > BURST_B_START and v >= 45.0), None)
        out(f"| {wname} | {n} | {al:.1f} | {ab_a:.1f} / {ab_b:.1f} | {ac_a:.1f} / {ac_c:.1f} (sum {ac_a + ac_c:.1f}) | "
            f"{ad_a:.1f} / {ad_d:.1f} | {bs_b:.1f} / {bs_a:.1f} | {'-' if yield_ms is None else f'{yield_ms} ms'} |")
        csv.append(f"burst,{wname},{n},alone,{al:.3f},,,")
        csv.append(f"burst,{wname},{n},A+B,{ab_a:.3f}/{ab_b:.3f},,,")
        csv.append(f"burst,{wname},{n},A+C,{ac_a:.3f}/{ac_c:.3f},,,")
        csv.append(f"burst,{wname},{n},A+D,{ad_a:.3f}/{ad_d:.3f},,,")
        csv.append(f"burst,{wname},{n},B-start,{bs_b:.3f}/{bs_a:.3f},,,{yield_ms}")
        if wname.startswith("short") and n == 1 and sa:
            burst_trace = {("A 30/100", 30): sa, ("B 50", 50): sb}
out()

# ---- plots: share over time (a tiny PNG writer) ----
FONT = {  # 3x5 glyphs, rows top to bottom
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001001001001",
    "8": "111101111101111", "9": "111101111001111", "%": "101001010100101", " ": "000000000000000",
    "S": "011100010001110", "H": "101101111101101", "A": "010101111101101", "R": "110101110101101",
    "E": "111100111100111", "T": "111010010010010", "I": "111010010010111", "M": "101111111101101",
    "L": "100100100100111", "P": "110101110100100", "O": "111101101101111", "C": "111100100100111",
    "U": "101101101101111", "N": "110101101101101", "K": "101101110101101", "=": "000111000111000",
    ",": "000000000010100", "(": "010100100100010", ")": "010001001001010", ".": "000000000000010",
    "-": "000000111000000", "G": "111100101101111", "D": "110101101101110", "W": "101101111111101",
    "V": "101101101101010", "B": "110101110101110", "F": "111100111100100", "Y": "101101010010010",
    "X": "101101010101101", "Z": "111001010100111", "Q": "111101101111001", "J": "001001001101111",
}
W, H, ML, MR, MT, MB = 900, 520, 70, 170, 50, 60
img = [[(255, 255, 255)] * W for _ in range(H)]
def px(x, y, c):
    if 0 <= x < W and 0 <= y < H:
        img[y][x] = c
def line(x0, y0, x1, y1, c, th=1):
    n = max(abs(x1 - x0), abs(y1 - y0), 1)
    for i in range(n + 1):
        x = round(x0 + (x1 - x0) * i / n); y = round(y0 + (y1 - y0) * i / n)
        for dx in range(-(th // 2), th - th // 2):
            for dy in range(-(th // 2), th - th // 2):
                px(x + dx, y + dy, c)
def text(x, y, s, c=(0, 0, 0), sc=2):
    for ch in s.upper():
        g = FONT.get(ch, FONT[" "])
        for r in range(5):
            for col in range(3):
                if g[r * 3 + col] == "1":
                    for a in range(sc):
                        for b in range(sc):
                            px(x + col * sc + a, y + r * sc + b, c)
        x += 4 * sc
def plot(trace, fname, title, T, label, mark_t, note):
    """trace: {key: [(t_s, share %)]}; dashed line at each key's value (its limit)."""
    global img
    img = [[(255, 255, 255)] * W for _ in range(H)]
    pw, ph = W - ML - MR, H - MT - MB
    X = lambda t: ML + round(t / T * pw)
    Y = lambda v: MT + ph - round(max(0, min(100, v)) / 100 * ph)
    for v in range(0, 101, 25):
        line(ML, Y(v), ML + pw, Y(v), (225, 225, 225)); text(ML - 40, Y(v) - 5, f"{v}")
    for t in range(0, int(T) + 1):
        line(X(t), MT, X(t), MT + ph, (235, 235, 235)); text(X(t) - 4, MT + ph + 10, f"{t}")
    line(ML, MT, ML, MT + ph, (0, 0, 0)); line(ML, MT + ph, ML + pw, MT + ph, (0, 0, 0))
    line(X(mark_t), MT, X(mark_t), MT + ph, (160, 160, 160))
    text(ML, 12, title)
    text(ML + pw // 2 - 20, H - 24, "TIME S")
    colors = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189)]
    for i, key in enumerate(sorted(trace)):
        c = colors[i % len(colors)]
        lim = key if isinstance(key, (int, float)) else key[1]
        for x in range(ML, ML + pw, 8):
            line(x, Y(lim), x + 3, Y(lim), c)
        pts = trace[key]
        for (t0, v0), (t1, v1) in zip(pts, pts[1:]):
            line(X(t0), Y(v0), X(t1), Y(v1), c, 2)
        ly = MT + 20 + i * 28
        for dy in range(10):
            line(ML + pw + 20, ly + dy, ML + pw + 40, ly + dy, c)
        text(ML + pw + 50, ly, label(key))
    raw = b"".join(b"\x00" + bytes(v for p in row for v in p) for row in img)
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", W, H, 8, 2, 0, 0, 0)) + \
          chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
    with open(os.path.join(OUT, fname), "wb") as f:
        f.write(png)
    out(f"Plot: {os.path.join(OUT, fname)} ({note}).")
    out()
if trace:
    plot(trace, "share_over_time.png", "SHARE % PER 100 MS VS TIME S  -  1 PROCESS, 50 US KERNELS", SETTLE + WINDOW,
         lambda k: f"LIMIT {k}", SETTLE, "share per 100 ms, one line per limit; dashed: the limit; grey: end of settling")
if burst_trace:
    plot(burst_trace, "burst_newcomer.png", "B STARTS WHILE A BURSTS  -  SHARE % PER 100 MS, 50 US KERNELS", BURST_T,
         lambda k: k[0], BURST_B_START, "A 30/100 alone, B 50 starts at the grey line; dashed: the guarantees")
if misses:
    out("Cells outside +-3 points: " + "; ".join(misses))
else:
    out("All accuracy cells within +-3 points.")
with open(os.path.join(OUT, "compute.md"), "w") as f:
    f.write("\n".join(report) + "\n")
with open(os.path.join(OUT, "compute.csv"), "w") as f:
    f.write("\n".join(csv) + "\n")
PY
