//! Sandboxes and running clients: a fresh directory per test ([`Sandbox`]), [`Run`] (scrubbed
//! environment, optional `LD_PRELOAD` of the shim), run to the end under a hard timeout
//! ([`Run::go`] → [`Out`]) or spawned as an interactive client ([`Run::spawn`] → [`Spawned`]).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::artifacts;

static SANDBOX_SEQ: AtomicUsize = AtomicUsize::new(0);

/// A fresh directory per test: `sim.state` (`VGPU_SIM_STATE`), `region.cache`
/// (`CUDA_DEVICE_MEMORY_SHARED_CACHE`), `counts` (`VGPU_SIM_COUNT_FILE`). Removed on drop unless the
/// test is panicking (then its path is printed for inspection).
pub struct Sandbox {
    pub dir: PathBuf,
}

impl Sandbox {
    pub fn new(name: &str) -> Sandbox {
        let a = artifacts();
        let n = SANDBOX_SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = a.tmp_root.join(format!("{name}.{}.{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create sandbox");
        Sandbox { dir }
    }
    pub fn state(&self) -> PathBuf {
        self.dir.join("sim.state")
    }
    pub fn region(&self) -> PathBuf {
        self.dir.join("region.cache")
    }
    pub fn counts_file(&self) -> PathBuf {
        self.dir.join("counts")
    }
    /// A subdirectory (created) of the sandbox.
    pub fn subdir(&self, name: &str) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::create_dir_all(&p).expect("create sandbox subdir");
        p
    }
    /// Start building a run of `program` (absolute path, or a name looked up in `testbin/`).
    pub fn run(&self, program: impl AsRef<Path>) -> Run<'_> {
        let p = program.as_ref();
        let program = if p.is_absolute() { p.to_path_buf() } else { artifacts().bin(&p.to_string_lossy()) };
        Run {
            sb: self,
            program,
            args: Vec::new(),
            env: Vec::new(),
            shim: false,
            ld_library_path: Some(artifacts().simlib.clone()),
            timeout: Duration::from_secs(15),
        }
    }
    /// Simulator call counts summed over all processes that wrote to the count file, by symbol.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        parse_counts(&std::fs::read_to_string(self.counts_file()).unwrap_or_default())
    }
    /// Clear the count file (e.g. between a baseline and a shim run in the same sandbox).
    pub fn reset_counts(&self) {
        let _ = std::fs::remove_file(self.counts_file());
    }
}

/// The shim's fallback region files for `region` (docs/design.md "Where the region lives": named
/// after an FNV-1a hash of the configured path, in /dev/shm and /tmp), which live outside the
/// sandbox: removed with it.
pub fn remove_fallback_regions(region: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let h = region
        .as_os_str()
        .as_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &c| (h ^ c as u64).wrapping_mul(0x0100_0000_01b3));
    let tag = format!("libvgpu-region-{h:016x}");
    for dir in ["/dev/shm", "/tmp"] {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.file_name().to_string_lossy().contains(&tag) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        remove_fallback_regions(&self.region());
        if std::thread::panicking() {
            eprintln!("(sandbox kept for inspection: {})", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Parse `<pid> <symbol> <count>` lines into per-symbol totals.
pub fn parse_counts(text: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 3 {
            continue;
        }
        if let Ok(c) = f[2].parse::<u64>() {
            *m.entry(f[1].to_string()).or_insert(0) += c;
        }
    }
    m
}

// ------------------------------------------------------------------------------------------------
// Running clients

/// Environment variable prefixes/names never inherited by a client.
const SCRUB_PREFIXES: &[&str] = &["CUDA_", "VGPU_", "LIBCUDA_", "NVIDIA_", "HAMI_", "LD_"];
const SCRUB_NAMES: &[&str] =
    &["GPU_CORE_UTILIZATION_POLICY", "ACTIVE_OOM_KILLER", "RECORD_KERNEL_INTERVAL", "MEMORY_LIMIT_TOLERATION_RATE"];

pub struct Run<'a> {
    sb: &'a Sandbox,
    program: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, Option<OsString>)>,
    shim: bool,
    ld_library_path: Option<PathBuf>,
    timeout: Duration,
}

impl<'a> Run<'a> {
    pub fn arg(mut self, a: impl Into<OsString>) -> Self {
        self.args.push(a.into());
        self
    }
    pub fn args<I, S>(mut self, it: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(it.into_iter().map(Into::into));
        self
    }
    /// Set a variable (applied after the sandbox defaults, so it can override them).
    pub fn env(mut self, k: impl Into<OsString>, v: impl Into<OsString>) -> Self {
        self.env.push((k.into(), Some(v.into())));
        self
    }
    /// Remove a variable (including a sandbox default such as `CUDA_DEVICE_MEMORY_SHARED_CACHE`).
    pub fn env_remove(mut self, k: impl Into<OsString>) -> Self {
        self.env.push((k.into(), None));
        self
    }
    /// `LD_PRELOAD` the shim.
    pub fn shim(mut self, on: bool) -> Self {
        self.shim = on;
        self
    }
    /// `LD_PRELOAD` the shim with `LIBCUDA_LOG_LEVEL=4`.
    pub fn shim_debug(self) -> Self {
        self.shim(true).env("LIBCUDA_LOG_LEVEL", "4")
    }
    /// Replace `LD_LIBRARY_PATH` (default: the simlib dir); `None` leaves it unset.
    pub fn ld_library_path(mut self, p: Option<PathBuf>) -> Self {
        self.ld_library_path = p;
        self
    }
    pub fn timeout_secs(mut self, s: u64) -> Self {
        self.timeout = Duration::from_secs(s);
        self
    }

    /// The command with the scrubbed environment, sandbox defaults and overrides applied, in its
    /// own process group, stdout/stderr piped; and its description for messages.
    fn command(&self) -> (Command, String) {
        let a = artifacts();
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args);
        for (k, _) in std::env::vars_os() {
            let ks = k.to_string_lossy();
            if SCRUB_PREFIXES.iter().any(|p| ks.starts_with(p)) || SCRUB_NAMES.contains(&ks.as_ref()) {
                cmd.env_remove(&k);
            }
        }
        cmd.env("VGPU_SIM_STATE", self.sb.state())
            .env("CUDA_DEVICE_MEMORY_SHARED_CACHE", self.sb.region())
            .env("VGPU_SIM_COUNT_FILE", self.sb.counts_file());
        if let Some(p) = &self.ld_library_path {
            cmd.env("LD_LIBRARY_PATH", p);
        }
        if self.shim {
            cmd.env("LD_PRELOAD", &a.shim);
        }
        for (k, v) in &self.env {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd.current_dir(&self.sb.dir).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
        let desc = format!("{:?} {:?} (shim={})", self.program, self.args, self.shim);
        (cmd, desc)
    }

    /// Spawn, wait (killing the process group at the timeout) and capture. Panics on timeout.
    pub fn go(self) -> Out {
        let (mut cmd, desc) = self.command();
        cmd.stdin(Stdio::null());
        let start = Instant::now();
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {desc}: {e}"));
        let pid = child.id();
        let mut so = child.stdout.take().unwrap();
        let mut se = child.stderr.take().unwrap();
        let t_out = std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = so.read_to_end(&mut v);
            v
        });
        let t_err = std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = se.read_to_end(&mut v);
            v
        });
        let mut timed_out = false;
        let status = loop {
            match child.try_wait().expect("try_wait") {
                Some(s) => break s,
                None if start.elapsed() >= self.timeout => {
                    timed_out = true;
                    // Kill the whole process group (the client may have children, e.g. `sh -c`).
                    unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
                    break child.wait().expect("wait after kill");
                }
                None => std::thread::sleep(Duration::from_millis(2)),
            }
        };
        // Anything still holding the pipes (grandchildren) belongs to the group: make sure it dies.
        unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
        let stdout = String::from_utf8_lossy(&t_out.join().unwrap()).into_owned();
        let stderr = String::from_utf8_lossy(&t_err.join().unwrap()).into_owned();
        let out =
            Out { desc, pid, code: status.code(), signal: status.signal(), stdout, stderr, elapsed: start.elapsed() };
        assert!(!timed_out, "TIMEOUT after {:?}: {}", self.timeout, out.dump());
        out
    }

    /// Spawn an interactive client: stdin piped (see [`Spawned::send_line`]), stdout delivered line
    /// by line, stderr collected. No timeout applies: the caller bounds each reply and the end.
    pub fn spawn(self) -> Spawned {
        let (mut cmd, desc) = self.command();
        cmd.stdin(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {desc}: {e}"));
        let pid = child.id();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let err_buf = Arc::new(Mutex::new(Vec::new()));
        let eb = err_buf.clone();
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            loop {
                match stderr.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => eb.lock().unwrap().extend_from_slice(&chunk[..n]),
                }
            }
        });
        Spawned { desc, child: Some(child), stdin: Some(stdin), lines, stderr: err_buf, pid }
    }
}

/// A running interactive client ([`Run::spawn`]). Dropped unreaped, its process group is killed
/// and reaped.
pub struct Spawned {
    pub desc: String,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Arc<Mutex<Vec<u8>>>,
    pub pid: u32,
}

impl Spawned {
    /// What it wrote to stderr so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }
    /// Write one line to its stdin and flush.
    pub fn send_line(&mut self, line: &str) -> std::io::Result<()> {
        let w = self.stdin.as_mut().ok_or_else(|| std::io::Error::other("stdin closed"))?;
        writeln!(w, "{line}").and_then(|_| w.flush())
    }
    /// Close its stdin (end of input).
    pub fn close_stdin(&mut self) {
        drop(self.stdin.take());
    }
    /// The next stdout line, waiting at most `timeout` (`Disconnected`: stdout closed).
    pub fn recv_line(&self, timeout: Duration) -> Result<String, RecvTimeoutError> {
        self.lines.recv_timeout(timeout)
    }
    /// The next stdout line if one has arrived.
    pub fn try_line(&self) -> Option<String> {
        self.lines.try_recv().ok()
    }
    /// The stdout lines still to come until it closes its stdout, waiting at most `bound` in all.
    pub fn rest_of_stdout(&self, bound: Duration) -> Vec<String> {
        let end = Instant::now() + bound;
        let mut v = Vec::new();
        while let Ok(l) = self.lines.recv_timeout(end.saturating_duration_since(Instant::now())) {
            v.push(l);
        }
        v
    }
    /// Wait for it to end, unbounded, and reap it (`None`: already reaped or wait failed).
    pub fn wait_blocking(&mut self) -> Option<ExitStatus> {
        self.child.take()?.wait().ok()
    }
    /// Wait for it to end by itself within `deadline` and reap it, then give the stderr reader
    /// up to 5 s to drain the pipe. `Err(())` if it did not end: its group is killed and reaped.
    #[allow(clippy::result_unit_err)]
    pub fn wait_within(&mut self, deadline: Duration) -> Result<ExitStatus, ()> {
        let start = Instant::now();
        let mut child = self.child.take().expect("not yet waited");
        let status = loop {
            match child.try_wait().expect("try_wait") {
                Some(s) => break s,
                None if start.elapsed() > deadline => {
                    unsafe { libc::kill(-(self.pid as i32), libc::SIGKILL) };
                    let _ = child.wait();
                    return Err(());
                }
                None => std::thread::yield_now(),
            }
        };
        // The stderr reader finishes when the pipe closes.
        let end = Instant::now() + Duration::from_secs(5);
        while Arc::strong_count(&self.stderr) > 1 && Instant::now() < end {
            std::thread::yield_now();
        }
        Ok(status)
    }
    /// SIGKILL the process (not its group) and reap it (`None`: already reaped).
    pub fn kill(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        self.signal(libc::SIGKILL);
        child.wait().ok()
    }
    /// Send a raw signal (SIGSTOP/SIGCONT/SIGKILL) without reaping.
    pub fn signal(&self, sig: i32) {
        unsafe { libc::kill(self.pid as i32, sig) };
    }
    /// Not yet ended (and not reaped).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            unsafe { libc::kill(-(self.pid as i32), libc::SIGKILL) };
            let _ = c.wait();
        }
    }
}

/// Result of a client run.
#[derive(Debug, Clone)]
pub struct Out {
    pub desc: String,
    pub pid: u32,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Out {
    pub fn dump(&self) -> String {
        format!(
            "{}\n  pid={} code={:?} signal={:?} elapsed={:?}\n--- stdout ---\n{}--- stderr ---\n{}--------------",
            self.desc, self.pid, self.code, self.signal, self.elapsed, self.stdout, self.stderr
        )
    }
    /// Assert exit code 0 and no signal.
    #[track_caller]
    pub fn ok(&self) -> &Self {
        assert_eq!(self.code, Some(0), "client failed: {}", self.dump());
        self
    }
    /// `key=value` lines of stdout, in order (other lines ignored).
    pub fn kv(&self) -> Vec<(String, String)> {
        self.stdout
            .lines()
            .filter_map(|l| l.split_once('='))
            .filter(|(k, _)| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .map(|(k, v)| (k.to_string(), v.trim_end().to_string()))
            .collect()
    }
    /// `kv()` without the given keys (for values that legitimately differ between runs).
    pub fn kv_without(&self, skip: &[&str]) -> Vec<(String, String)> {
        self.kv().into_iter().filter(|(k, _)| !skip.contains(&k.as_str())).collect()
    }
    /// Value of one key (last occurrence).
    pub fn get(&self, key: &str) -> Option<String> {
        self.kv().into_iter().rev().find(|(k, _)| k == key).map(|(_, v)| v)
    }
    #[track_caller]
    pub fn val(&self, key: &str) -> String {
        self.get(key).unwrap_or_else(|| panic!("key `{key}` missing: {}", self.dump()))
    }
    /// The shim's log lines: (pid, level, message).
    pub fn shim_logs(&self) -> Vec<(u32, String, String)> {
        self.stderr
            .lines()
            .filter_map(|l| {
                let rest = l.strip_prefix("[libvgpu ")?;
                let (pid, rest) = rest.split_once("] ")?;
                let (level, msg) = rest.split_once(": ")?;
                Some((pid.parse().ok()?, level.to_string(), msg.to_string()))
            })
            .collect()
    }
    /// Hook names logged at debug level (`[libvgpu <pid>] DEBUG: hook <name>`) with counts.
    pub fn hooks(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for (_, level, msg) in self.shim_logs() {
            if level != "DEBUG" {
                continue;
            }
            if let Some(name) = msg.strip_prefix("hook ") {
                let name = name.split_whitespace().next().unwrap_or("");
                *m.entry(name.to_string()).or_insert(0) += 1;
            }
        }
        m
    }
    /// Assert that each name was logged as a hook at least once.
    #[track_caller]
    pub fn assert_hooked(&self, names: &[&str]) {
        let h = self.hooks();
        let missing: Vec<&&str> = names.iter().filter(|n| !h.contains_key(**n)).collect();
        assert!(missing.is_empty(), "hooks not logged: {missing:?}; logged: {h:?}\n{}", self.dump());
    }
    /// Assert that none of the names was logged as a hook.
    #[track_caller]
    pub fn assert_not_hooked(&self, names: &[&str]) {
        let h = self.hooks();
        let present: Vec<&&str> = names.iter().filter(|n| h.contains_key(**n)).collect();
        assert!(present.is_empty(), "unexpected hooks logged: {present:?}\n{}", self.dump());
    }
    /// Assert the shim logged no ERROR line.
    #[track_caller]
    pub fn assert_no_shim_errors(&self) {
        let errs: Vec<_> = self.shim_logs().into_iter().filter(|(_, l, _)| l == "ERROR").collect();
        assert!(errs.is_empty(), "shim logged errors: {errs:?}\n{}", self.dump());
    }
}

/// Whether the machine has a real `libcuda.so.1` visible to the dynamic loader without
/// `LD_LIBRARY_PATH` (then "no driver anywhere" cannot be simulated).
pub fn system_has_libcuda() -> bool {
    let ld = Command::new("/sbin/ldconfig").arg("-p").output().or_else(|_| Command::new("ldconfig").arg("-p").output());
    match ld {
        Ok(o) => String::from_utf8_lossy(&o.stdout).contains("libcuda.so.1"),
        Err(_) => false,
    }
}

/// Run a tool (nm, readelf, objdump) and return stdout; panic on failure.
pub fn tool(prog: &str, args: &[&std::ffi::OsStr]) -> String {
    let o = Command::new(prog).args(args).output().unwrap_or_else(|e| panic!("cannot run {prog}: {e}"));
    assert!(o.status.success(), "{prog} {args:?} failed: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}
