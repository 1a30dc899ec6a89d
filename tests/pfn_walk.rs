//! Every `cuGetProcAddress` threshold of NVIDIA's CUDA 12.9 and 13.x headers
//! (`cuda_types::pfn_table`, generated from their `PFN_<name>_v<version>` typedefs) looked up at
//! its own version (flags 2 for the `_ptds`/`_ptsz` variants, flags 0 and 2 for the others), the
//! way libcudart looks them up (`tests/c/pfn_walk.c`: through the pointer returned for `"cuGetProcAddress"` @ 12000), on a
//! simulated driver reporting 12090 and one reporting 13050:
//! - without the shim, the driver answers each threshold it implements with exactly the symbol of
//!   that ABI, and never with a newer ABI than its own version;
//! - with the shim, each lookup returns what the driver returned, except that a symbol the shim
//!   exports (a wrapped function) comes back as the shim's export of that same symbol: never a
//!   wrapper for another ABI, never a wrapper where the driver found nothing.
//!
//! And once more on a driver whose `cuGetProcAddress` hands out unexported thunks instead of its
//! exported functions (`VGPU_SIM_PROCADDR_THUNKS=1`): the shim then matches by NVIDIA's
//! thresholds, and must still hand out exactly the wrapper of the ABI the driver answered with.

mod common;
use common::*;
use cuda_types::pfn_table::{PFN_ROWS, PerThread, PfnRow};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Look {
    rc: i32,
    lib: String,
    sym: String,
}

fn flags(r: &PfnRow) -> u64 {
    if r.per_thread == PerThread::No { 0 } else { 2 }
}

fn key(r: &PfnRow) -> (String, u32, u64) {
    (r.name().to_string(), r.version, flags(r))
}

fn defined_symbols(lib: &Path) -> BTreeSet<String> {
    let nm = tool("nm", &[OsStr::new("-D"), OsStr::new("--defined-only"), lib.as_os_str()]);
    nm.lines().filter_map(|l| l.split_whitespace().last()).map(|s| s.split('@').next().unwrap().to_string()).collect()
}

type Walk = BTreeMap<(String, u32, u64), Look>;

fn walk(sb: &Sandbox, shim: bool, driver: &str, rows: &Path, thunks: bool) -> (String, Walk) {
    let prog = c_program("pfn_walk", &["pfn_walk.c"], &["-ldl"]);
    let out = sb
        .run(prog)
        .arg(rows)
        .shim(shim)
        .env("VGPU_SIM_DRIVER_VERSION", driver)
        .env("VGPU_SIM_PROCADDR_THUNKS", if thunks { "1" } else { "0" })
        .timeout_secs(60)
        .go();
    out.ok();
    let mut via = String::new();
    let mut m = BTreeMap::new();
    for line in out.stdout.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["via", lib, sym] => via = format!("{lib} {sym}"),
            [name, ver, fl, rc, lib, sym] => {
                let look = Look { rc: rc.parse().unwrap(), lib: lib.to_string(), sym: sym.to_string() };
                m.insert((name.to_string(), ver.parse().unwrap(), fl.parse().unwrap()), look);
            }
            _ => panic!("unexpected line {line:?}\n{}", out.dump()),
        }
    }
    (via, m)
}

/// The rows file (one line per distinct lookup) and the number of lookups.
fn rows_file(sb: &Sandbox) -> (std::path::PathBuf, usize) {
    let rows_file = sb.dir.join("rows");
    let mut text = String::new();
    let mut seen = BTreeSet::new();
    // Each threshold at its own flags, and every default one with the per-thread flag as well
    // (clients ask that of names with no per-thread variant too).
    for r in PFN_ROWS {
        for k in [key(r), (r.name().to_string(), r.version, 2)] {
            if seen.insert(k.clone()) {
                text.push_str(&format!("{} {} {}\n", k.0, k.1, k.2));
            }
        }
    }
    std::fs::write(&rows_file, text).unwrap();
    (rows_file, seen.len())
}

fn walk_at(driver: &str) {
    let a = artifacts();
    let sb = Sandbox::new(&format!("pfn-walk-{driver}"));
    let driver_ver: u32 = driver.parse().unwrap();
    let (rows_file, n_lookups) = rows_file(&sb);

    let shim_file = a.shim.file_name().unwrap().to_string_lossy().to_string();
    let wrapped = defined_symbols(&a.shim);
    let sim_syms = defined_symbols(&std::fs::canonicalize(a.simlib.join("libcuda.so.1")).unwrap());

    let (via0, bare) = walk(&sb, false, driver, &rows_file, false);
    let (via1, shimmed) = walk(&sb, true, driver, &rows_file, false);
    assert_eq!(via0, "libcuda.so.1 cuGetProcAddress_v2");
    assert_eq!(via1, format!("{shim_file} cuGetProcAddress_v2"), "the walk must run through the shim's wrapper");
    assert_eq!(bare.len(), n_lookups);
    assert_eq!(shimmed.len(), n_lookups);

    let mut bad = Vec::new();
    let (mut n_wrapped, mut n_forwarded, mut n_missing) = (0, 0, 0);
    let mut handed_out = BTreeSet::new();
    // The driver: the exact ABI of each threshold it knows, nothing newer than itself.
    for r in PFN_ROWS {
        let k = key(r);
        let b = &bare[&k];
        if r.version <= driver_ver && sim_syms.contains(r.symbol()) && (b.rc != 0 || b.sym != r.symbol()) {
            bad.push(format!("{k:?}: driver returned {b:?}, expected {}", r.symbol()));
        }
        if r.version > driver_ver && b.rc == 0 && b.sym == r.symbol() {
            bad.push(format!("{k:?}: a {driver} driver handed out the newer ABI {}", r.symbol()));
        }
    }
    // The shim: the driver's answer, with a wrapped symbol replaced by our export of it.
    for (k, b) in &bare {
        let s = &shimmed[k];
        if s.rc != b.rc {
            bad.push(format!("{k:?}: rc {} under the shim, {} without", s.rc, b.rc));
            continue;
        }
        if b.rc != 0 {
            n_missing += 1;
            if s.lib != "-" {
                bad.push(format!("{k:?}: the shim substituted {s:?} where the driver found nothing"));
            }
            continue;
        }
        let expect = if wrapped.contains(&b.sym) {
            n_wrapped += 1;
            handed_out.insert(b.sym.clone());
            Look { rc: 0, lib: shim_file.clone(), sym: b.sym.clone() }
        } else {
            n_forwarded += 1;
            b.clone()
        };
        if *s != expect {
            bad.push(format!("{k:?}: under the shim {s:?}, expected {expect:?}"));
        }
    }
    assert!(bad.is_empty(), "driver {driver}: {} of {n_lookups} lookups wrong:\n{}", bad.len(), bad.join("\n"));

    // Every driver function the shim wraps that this driver has is reachable through some threshold.
    let unreachable: Vec<&String> = wrapped
        .iter()
        .filter(|w| w.starts_with("cu") && sim_syms.contains(*w) && !handed_out.contains(*w))
        .filter(|w| PFN_ROWS.iter().any(|r| r.symbol() == w.as_str() && r.version <= driver_ver))
        .collect();
    assert!(unreachable.is_empty(), "driver {driver}: wrapped but never handed out: {unreachable:?}");
    assert!(n_wrapped > 50 && n_forwarded > 100, "wrapped {n_wrapped}, forwarded {n_forwarded}");
    eprintln!(
        "driver {driver}: {n_lookups} lookups: {n_wrapped} wrapped, {n_forwarded} forwarded, {n_missing} not found"
    );
}

#[test]
fn every_pfn_threshold_on_a_12_9_driver() {
    walk_at("12090");
}

#[test]
fn every_pfn_threshold_on_a_13_5_driver() {
    walk_at("13050");
}

/// The driver hands out thunks: no returned address is an exported symbol, so the shim matches by
/// threshold. Each lookup must yield the wrapper of exactly the symbol the same driver answers with
/// when it hands out its exported functions, and the driver's own thunk for everything else.
#[test]
fn every_pfn_threshold_on_a_driver_handing_out_thunks() {
    let a = artifacts();
    let driver = "13050";
    let sb = Sandbox::new("pfn-walk-thunks");
    let (rows_file, n_lookups) = rows_file(&sb);
    let shim_file = a.shim.file_name().unwrap().to_string_lossy().to_string();
    let wrapped = defined_symbols(&a.shim);

    let (_, plain) = walk(&sb, false, driver, &rows_file, false);
    let (via0, bare) = walk(&sb, false, driver, &rows_file, true);
    let (via1, shimmed) = walk(&sb, true, driver, &rows_file, true);
    assert_eq!(via0, "libcuda.so.1 -", "the driver's own lookup of cuGetProcAddress is a thunk");
    assert_eq!(via1, format!("{shim_file} cuGetProcAddress_v2"), "the shim's wrapper, found by threshold");
    assert_eq!(shimmed.len(), n_lookups);

    let mut bad = Vec::new();
    let mut n_wrapped = 0;
    for (k, p) in &plain {
        let (b, s) = (&bare[k], &shimmed[k]);
        if b.rc != p.rc || s.rc != p.rc {
            bad.push(format!("{k:?}: rc {} plain, {} thunks, {} thunks under the shim", p.rc, b.rc, s.rc));
            continue;
        }
        if p.rc != 0 {
            if s.lib != "-" {
                bad.push(format!("{k:?}: the shim substituted {s:?} where the driver found nothing"));
            }
            continue;
        }
        if b.lib != "libcuda.so.1" || b.sym != "-" {
            bad.push(format!("{k:?}: the thunk driver returned {b:?}"));
        }
        let expect = if wrapped.contains(&p.sym) {
            n_wrapped += 1;
            Look { rc: 0, lib: shim_file.clone(), sym: p.sym.clone() }
        } else {
            b.clone()
        };
        if *s != expect {
            bad.push(format!("{k:?}: under the shim {s:?}, expected {expect:?} (the driver's ABI is {})", p.sym));
        }
    }
    assert!(bad.is_empty(), "{} of {n_lookups} lookups wrong:\n{}", bad.len(), bad.join("\n"));
    assert!(n_wrapped > 50, "wrapped {n_wrapped}");
}
