//! `simctl`: inspect the simulated GPU (test/benchmark tool).
//!
//! ```text
//! simctl [--state PATH] procs
//! simctl [--state PATH] devices
//! simctl [--state PATH] sample --interval-ms N --count K [--pids a,b]
//! simctl [--state PATH] checkpoint PID | restore PID
//! ```
//! `procs`: one line per live process and device (`pid device used_bytes busy_ns has_ctx`).
//! `devices`: `device total_bytes used_bytes busy_ns uuid`.
//! `sample`: CSV `t_ms,pid,device,busy_ns,used_bytes` every N ms, K times (busy_ns cumulative,
//! from the exact per-process interval record; `t_ms` since the first sample).
//! `checkpoint`: lock and checkpoint a process as `cuda-checkpoint --toggle` does (its device memory
//! goes back to the device); `restore`: restore and unlock it (charged again; exit 1 without room).
//! The state file is `--state`, else `VGPU_SIM_STATE`, else `/dev/shm/vgpu-sim-<uid>.state`; it is
//! never created by simctl.

use sim_state::{SimState, now_mono_ns};
use std::io::Write;
use std::process::exit;

fn usage() -> ! {
    eprintln!(
        "usage: simctl [--state PATH] procs | devices | sample --interval-ms N --count K [--pids a,b] | checkpoint PID | restore PID"
    );
    exit(2)
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut path = sim_state::default_path();
    if let Some(i) = args.iter().position(|a| a == "--state") {
        if i + 1 >= args.len() {
            usage();
        }
        path = args.remove(i + 1);
        args.remove(i);
    }
    let Some(cmd) = args.first().cloned() else { usage() };
    let st = match SimState::open_existing(&path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("simctl: cannot open {path}: {e}");
            exit(1)
        }
    };
    match cmd.as_str() {
        "procs" => procs(&st),
        "devices" => devices(&st),
        "sample" => sample(&st, &args[1..]),
        "checkpoint" | "restore" => checkpoint(&st, &cmd, &args[1..]),
        _ => usage(),
    }
}

fn checkpoint(st: &SimState, cmd: &str, args: &[String]) {
    let Some(pid) = args.first().and_then(|p| p.parse::<u32>().ok()) else { usage() };
    let r = if cmd == "checkpoint" {
        st.checkpoint_lock(pid).and_then(|()| st.checkpoint(pid))
    } else {
        st.checkpoint_restore(pid).and_then(|()| st.checkpoint_unlock(pid))
    };
    if let Err(e) = r {
        eprintln!("simctl: {cmd} {pid}: {e:?}");
        exit(1);
    }
}

fn procs(st: &SimState) {
    let out = std::io::stdout();
    let mut o = out.lock();
    let _ = writeln!(o, "pid device used_bytes busy_ns has_ctx");
    for p in st.processes() {
        for d in 0..st.device_count() {
            if p.used[d] > 0 || p.busy_ns[d] > 0 || p.has_ctx[d] {
                let _ = writeln!(o, "{} {} {} {} {}", p.pid, d, p.used[d], p.busy_ns[d], p.has_ctx[d] as u8);
            }
        }
    }
}

fn devices(st: &SimState) {
    st.reclaim_dead();
    let now = now_mono_ns();
    println!("device total_bytes used_bytes busy_ns uuid");
    for d in 0..st.device_count() {
        println!(
            "{} {} {} {} {}",
            d,
            st.device_total(d),
            st.device_used(d),
            st.device_busy_ns(d, now),
            st.device_uuid(d)
        );
    }
}

fn sample(st: &SimState, args: &[String]) {
    let mut interval_ms = 100u64;
    let mut count = 10u64;
    let mut pids: Option<Vec<u32>> = None;
    let mut i = 0;
    while i < args.len() {
        let v = args.get(i + 1).unwrap_or_else(|| usage());
        match args[i].as_str() {
            "--interval-ms" => interval_ms = v.parse().unwrap_or_else(|_| usage()),
            "--count" => count = v.parse().unwrap_or_else(|_| usage()),
            "--pids" => pids = Some(v.split(',').filter_map(|x| x.trim().parse().ok()).collect()),
            _ => usage(),
        }
        i += 2;
    }
    let out = std::io::stdout();
    let mut o = out.lock();
    let _ = writeln!(o, "t_ms,pid,device,busy_ns,used_bytes");
    let t0 = now_mono_ns();
    for k in 0..count {
        // Sample on a fixed grid so that intervals do not drift.
        let due = t0 + k * interval_ms * 1_000_000;
        let now = now_mono_ns();
        if due > now {
            std::thread::sleep(std::time::Duration::from_nanos(due - now));
        }
        let now = now_mono_ns();
        st.reclaim_dead();
        let list = st.processes();
        let t_ms = (now - t0) as f64 / 1e6;
        let wanted: Vec<u32> = match &pids {
            Some(v) => v.clone(),
            None => list.iter().map(|p| p.pid).collect(),
        };
        for pid in wanted {
            for d in 0..st.device_count() {
                let (busy, used) = list
                    .iter()
                    .filter(|p| p.pid == pid)
                    .fold((0u64, 0u64), |(b, u), p| (b + st.busy_ns(p.slot, d, now), u + p.used[d]));
                if pids.is_some() || busy > 0 || used > 0 {
                    let _ = writeln!(o, "{:.3},{},{},{},{}", t_ms, pid, d, busy, used);
                }
            }
        }
        let _ = o.flush();
    }
}
