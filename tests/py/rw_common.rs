//! Private helpers of the real-world tests: `tests/real_clients.rs`, `tests/injection.rs`,
//! `tests/release_floor.rs` include this file with `#[path = "py/rw_common.rs"] mod rw;` next to
//! `mod common;` (the shared harness, which they use but do not change).
//!
//! * [`python`] / [`python_for`]: the venv interpreter with cuda-bindings and pynvml of one CUDA
//!   major (`ci/venv.sh <major>`).
//! * [`limit_client`]: `tests/py/limit_client.c`, compiled once into `target/<profile>/rwbin/`.
//! * [`Region`]: an independent reader of the v1.2 region (offsets written out from
//!   docs/hami-contract.md §3, deliberately not shared with `vgpu-core`).
#![allow(dead_code)]

use crate::common::{Out, artifacts};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub const MIB: u64 = 1 << 20;
pub const CUDA_SUCCESS: &str = "CUDA_SUCCESS";
pub const CUDA_ERROR_OUT_OF_MEMORY: &str = "CUDA_ERROR_OUT_OF_MEMORY";
/// `CUDA_ERROR_OUT_OF_MEMORY` as printed by limit_client / `steps` (numeric).
pub const OOM: &str = "2";

/// The venv Python with cuda-bindings 12.9 (see [`python_for`]).
pub fn python() -> &'static Path {
    python_for(12)
}

/// The venv Python of CUDA major `major` (12: cuda-bindings 12.9 + nvidia-ml-py 12; 13:
/// cuda-bindings 13.x + nvidia-ml-py 13), created by `ci/venv.sh <major>` on first use (it
/// installs from PyPI if needed).
pub fn python_for(major: u32) -> &'static Path {
    static PY12: OnceLock<PathBuf> = OnceLock::new();
    static PY13: OnceLock<PathBuf> = OnceLock::new();
    let cell = match major {
        12 => &PY12,
        13 => &PY13,
        _ => panic!("no venv for CUDA major {major}"),
    };
    cell.get_or_init(|| {
        let root = &artifacts().root;
        let o = Command::new("bash")
            .arg(root.join("ci/venv.sh"))
            .arg(major.to_string())
            .env_remove("LD_PRELOAD")
            .output()
            .expect("run ci/venv.sh");
        assert!(
            o.status.success(),
            "ci/venv.sh {major} failed (it installs cuda-bindings and nvidia-ml-py from PyPI):\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        let out = String::from_utf8_lossy(&o.stdout);
        let p = PathBuf::from(out.lines().last().expect("venv.sh printed the python path").trim());
        assert!(p.exists(), "venv python {} missing", p.display());
        p
    })
}

/// A file of `tests/py/`.
pub fn py_file(name: &str) -> PathBuf {
    artifacts().root.join("tests/py").join(name)
}

/// `tests/py/limit_client.c`, compiled (once per test binary; atomically replaced).
pub fn limit_client() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let a = artifacts();
        let dir = a.profile_dir.join("rwbin");
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("limit_client");
        let src = py_file("limit_client.c");
        let tmp = dir.join(format!(".limit_client.{}", std::process::id()));
        let cc = std::env::var("CC").unwrap_or_else(|_| "gcc".into());
        let o = Command::new(&cc)
            .args(["-std=gnu11", "-O1", "-g", "-Wall", "-Werror", "-o"])
            .arg(&tmp)
            .arg(&src)
            .arg("-ldl")
            .env_remove("LD_PRELOAD")
            .output()
            .expect("run cc");
        assert!(o.status.success(), "compiling limit_client.c failed:\n{}", String::from_utf8_lossy(&o.stderr));
        std::fs::rename(&tmp, &out).unwrap();
        out
    })
}

/// Parse an `Out` value as u64 with a useful panic.
#[track_caller]
pub fn u64_of(out: &Out, key: &str) -> u64 {
    let v = out.val(key);
    v.parse().unwrap_or_else(|_| panic!("`{key}`={v} is not a number\n{}", out.dump()))
}

/// Assert `key` has `want`, dumping the run otherwise.
#[track_caller]
pub fn expect(out: &Out, key: &str, want: &str) {
    let got = out.get(key);
    assert_eq!(got.as_deref(), Some(want), "`{key}`: expected {want}, got {got:?}\n{}", out.dump());
}

/// Wait for a file to appear (handshakes with background clients).
#[track_caller]
pub fn wait_file(p: &Path, secs: u64) {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !p.exists() {
        assert!(std::time::Instant::now() < end, "timed out waiting for {}", p.display());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

// ------------------------------------------------------------------------------------------------
// Region reader (docs/hami-contract.md §3.1-3.4)

pub const MAGIC: i32 = 19_920_718;
pub const REGION_SIZE: usize = 2_008_952;
const OFF_MAJOR: usize = 4;
const OFF_MINOR: usize = 8;
const OFF_DEVICE_NUM: usize = 56;
const OFF_UUIDS: usize = 64;
const UUID_LEN: usize = 96;
const OFF_LIMIT: usize = 1600;
const OFF_SM_LIMIT: usize = 1728;
const OFF_PROCS: usize = 1856;
const SLOT_SIZE: usize = 1960;
const OFF_PROC_NUM: usize = 2_008_896;
const OFF_PRIORITY: usize = 2_008_908;

pub struct Region {
    pub bytes: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct Slot {
    pub index: usize,
    pub pid: i32,
    pub hostpid: i32,
    pub status: i32,
    /// used[d] for d in 0..16: (context_size, module_size, data_size, offset, total).
    pub used: Vec<[u64; 5]>,
}

impl Slot {
    pub fn total(&self, d: usize) -> u64 {
        self.used[d][4]
    }
    pub fn data(&self, d: usize) -> u64 {
        self.used[d][2]
    }
    pub fn context(&self, d: usize) -> u64 {
        self.used[d][0]
    }
}

impl Region {
    pub fn read(path: &Path) -> Option<Region> {
        let bytes = std::fs::read(path).ok()?;
        Some(Region { bytes })
    }
    fn u32(&self, o: usize) -> u32 {
        u32::from_le_bytes(self.bytes[o..o + 4].try_into().unwrap())
    }
    fn i32(&self, o: usize) -> i32 {
        i32::from_le_bytes(self.bytes[o..o + 4].try_into().unwrap())
    }
    fn u64(&self, o: usize) -> u64 {
        u64::from_le_bytes(self.bytes[o..o + 8].try_into().unwrap())
    }
    pub fn len(&self) -> usize {
        self.bytes.len()
    }
    pub fn magic(&self) -> i32 {
        self.i32(0)
    }
    pub fn version(&self) -> (u32, u32) {
        (self.u32(OFF_MAJOR), self.u32(OFF_MINOR))
    }
    pub fn device_num(&self) -> u64 {
        self.u64(OFF_DEVICE_NUM)
    }
    /// The 96-byte uuid field: (string before the NUL, all bytes after it are zero).
    pub fn uuid(&self, d: usize) -> (String, bool) {
        let f = &self.bytes[OFF_UUIDS + UUID_LEN * d..OFF_UUIDS + UUID_LEN * (d + 1)];
        let n = f.iter().position(|&b| b == 0).unwrap_or(UUID_LEN);
        (String::from_utf8_lossy(&f[..n]).into_owned(), f[n..].iter().all(|&b| b == 0))
    }
    pub fn limit(&self, d: usize) -> u64 {
        self.u64(OFF_LIMIT + 8 * d)
    }
    pub fn sm_limit(&self, d: usize) -> u64 {
        self.u64(OFF_SM_LIMIT + 8 * d)
    }
    pub fn proc_num(&self) -> i32 {
        self.i32(OFF_PROC_NUM)
    }
    pub fn priority(&self) -> i32 {
        self.i32(OFF_PRIORITY)
    }
    /// Slots `[0, proc_num)` (clamped as the monitor does).
    pub fn slots(&self) -> Vec<Slot> {
        let n = self.proc_num().clamp(0, 1024) as usize;
        (0..n)
            .map(|k| {
                let b = OFF_PROCS + SLOT_SIZE * k;
                let used = (0..16)
                    .map(|d| {
                        let u = b + 8 + 64 * d;
                        [self.u64(u), self.u64(u + 8), self.u64(u + 16), self.u64(u + 24), self.u64(u + 32)]
                    })
                    .collect();
                Slot { index: k, pid: self.i32(b), hostpid: self.i32(b + 4), status: self.i32(b + 1928), used }
            })
            .collect()
    }
    /// Live slots (status != 0), as the monitor counts them.
    pub fn live(&self) -> Vec<Slot> {
        self.slots().into_iter().filter(|s| s.status != 0).collect()
    }
    /// What the monitor reports as the container's usage of device `d`.
    pub fn container_used(&self, d: usize) -> u64 {
        self.live().iter().map(|s| s.total(d)).sum()
    }
    pub fn describe(&self) -> String {
        let (v0, v1) = self.version();
        format!(
            "region: {} bytes, magic {}, v{v0}.{v1}, device_num {}, uuid0 {:?}, limit0 {}, sm_limit0 {}, proc_num {}, live slots {:?}",
            self.len(),
            self.magic(),
            self.device_num(),
            self.uuid(0).0,
            self.limit(0),
            self.sm_limit(0),
            self.proc_num(),
            self.live().iter().map(|s| (s.pid, s.status, s.total(0))).collect::<Vec<_>>()
        )
    }
}
