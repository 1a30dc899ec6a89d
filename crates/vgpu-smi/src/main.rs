//! `vgpu-smi`: what libvgpu does in a container or on a node, read from the usage regions
//! (needs no driver). See `vgpu-smi --help` and README "Operating".

mod control;
mod node;
mod render;
mod snapshot;
mod units;

use render::Item;
use std::path::{Path, PathBuf};

const USAGE: &str = "\
usage:
  vgpu-smi [--region FILE] [--json | --prometheus] [--watch SECONDS]
      this container's region (found as the library finds it), per device and per process
  vgpu-smi --node [DIR] [--json | --prometheus] [--watch SECONDS]
      every DIR/containers/<pod-uid>_<container>/*.cache (DIR: $HOOK_PATH, else /usr/local/vgpu)
  vgpu-smi [--region FILE] set-limit [--device I] (--memory SIZE | --sm PERCENT | --sm-ceiling PERCENT)
      write limit[] / sm_limit[] as HAMi's monitor does (SIZE: 2g, 1536m, 4GiB, bytes; 0 = unlimited)
  vgpu-smi [--region FILE] block | unblock
      set / clear the monitor's launch block (recent_kernel)
  vgpu-smi [--region FILE] sweep
      free dead processes' slots now (run it in the container: PIDs are the container's)
flags:
  --region FILE        the region file to read or control (default: found as the library finds it)
  --node [DIR]         every container's region under DIR/containers (DIR: $HOOK_PATH, else /usr/local/vgpu)
  --json               machine-readable output
  --prometheus         Prometheus text exposition output
  --watch SECONDS      repeat the view every SECONDS (at least 0.1)
  --device I, -i I     set-limit: only device I (default: every recorded device)
  --memory SIZE        set-limit: memory limit (2g, 1536m, 4GiB, bytes; 0 = unlimited)
  --sm PERCENT         set-limit: SM limit, 1-100
  --sm-ceiling PERCENT set-limit: burst ceiling, 1-100
  -h, --help           this text
exit status: 0 ok, 1 bad usage or no usable region, 2 refused (no write access, unusable file)
";

#[derive(Default)]
struct Args {
    region: Option<PathBuf>,
    node: Option<Option<PathBuf>>,
    json: bool,
    prometheus: bool,
    watch: Option<f64>,
    verb: Option<String>,
    device: Option<usize>,
    memory: Option<String>,
    sm: Option<String>,
    sm_ceiling: Option<String>,
}

fn die(msg: &str, code: i32) -> ! {
    eprintln!("vgpu-smi: {msg}");
    std::process::exit(code)
}

fn parse_args(argv: Vec<String>) -> Result<Args, String> {
    let mut a = Args::default();
    let mut it = argv.into_iter().peekable();
    let need = |it: &mut std::iter::Peekable<std::vec::IntoIter<String>>, flag: &str| {
        it.next().ok_or_else(|| format!("{flag} needs a value"))
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-h" | "--help" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            "--region" => a.region = Some(need(&mut it, "--region")?.into()),
            "--node" => {
                let dir = match it.peek() {
                    Some(n) if !n.starts_with('-') && !is_verb(n) => Some(PathBuf::from(it.next().unwrap())),
                    _ => None,
                };
                a.node = Some(dir);
            }
            "--json" => a.json = true,
            "--prometheus" => a.prometheus = true,
            "--watch" => {
                let v = need(&mut it, "--watch")?;
                let s: f64 = v.parse().map_err(|_| format!("--watch: not a number of seconds: {v:?}"))?;
                if !(s.is_finite() && s > 0.0) {
                    return Err(format!("--watch: must be > 0: {v:?}"));
                }
                a.watch = Some(s.max(0.1));
            }
            "--device" | "-i" => {
                let v = need(&mut it, "--device")?;
                a.device = Some(v.parse().map_err(|_| format!("--device: not an index: {v:?}"))?);
            }
            "--memory" => a.memory = Some(need(&mut it, "--memory")?),
            "--sm" => a.sm = Some(need(&mut it, "--sm")?),
            "--sm-ceiling" => a.sm_ceiling = Some(need(&mut it, "--sm-ceiling")?),
            v if is_verb(v) && a.verb.is_none() => a.verb = Some(v.to_string()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.json && a.prometheus {
        return Err("--json and --prometheus exclude each other".into());
    }
    if a.verb.is_some() && (a.node.is_some() || a.watch.is_some() || a.json || a.prometheus) {
        return Err("control verbs take only --region (and set-limit's options)".into());
    }
    if a.verb.as_deref() != Some("set-limit")
        && (a.memory.is_some() || a.sm.is_some() || a.sm_ceiling.is_some() || a.device.is_some())
    {
        return Err("--device/--memory/--sm/--sm-ceiling belong to set-limit".into());
    }
    Ok(a)
}

fn is_verb(s: &str) -> bool {
    matches!(s, "set-limit" | "block" | "unblock" | "sweep")
}

/// The region of this container, found as the library finds it (regionpath.rs order).
fn container_region(a: &Args) -> PathBuf {
    match &a.region {
        Some(p) => p.clone(),
        None => {
            apply_override_env();
            vgpu_core::config::Config::from_system().region_path
        }
    }
}

/// `/overrideEnv` (docs/hami-contract.md §1.5), applied before the configuration as the library does.
fn apply_override_env() {
    use std::sync::Once;
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for (k, v) in vgpu_core::config::read_override_env(&vgpu_core::config::SystemSources) {
            if !k.is_empty() && !k.contains(['=', '\0']) && !v.contains('\0') {
                // SAFETY: called before any thread of ours exists (the CLI is single-threaded).
                unsafe { std::env::set_var(k, v) };
            }
        }
    });
}

/// `<pod>_<ctr>` from the environment, else from a `…/containers/<pod>_<ctr>/…` region path.
fn container_ids(region: &Path) -> (Option<String>, Option<String>) {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if let (Some(p), Some(c)) = (env("POD_UID"), env("CONTAINER_NAME")) {
        return (Some(p), Some(c));
    }
    let dir = region.parent();
    if dir.and_then(Path::parent).and_then(Path::file_name).is_some_and(|n| n == "containers")
        && let Some((p, c)) = dir.and_then(Path::file_name).and_then(|n| n.to_str()).and_then(|n| n.split_once('_'))
    {
        return (Some(p.into()), Some(c.into()));
    }
    (None, None)
}

fn render(a: &Args, mode: &str, root: Option<&Path>, items: &[Item]) -> String {
    if a.json {
        render::json(mode, root, items)
    } else if a.prometheus {
        render::prometheus(items)
    } else {
        render::table(items)
    }
}

/// One view; returns the text and whether everything shown was usable.
fn view_once(a: &Args) -> (String, bool) {
    if let Some(dir) = &a.node {
        let root = dir.clone().unwrap_or_else(node::default_root);
        let entries = match node::scan(&root) {
            Ok(e) => e,
            Err(e) => die(&format!("--node: cannot list {e}"), 1),
        };
        let items: Vec<Item> = entries
            .iter()
            .map(|e| Item {
                pod_uid: e.pod_uid.as_deref(),
                container: e.container.as_deref(),
                path: &e.path,
                result: e.result.as_ref().map_err(|u| u.0.as_str()),
            })
            .collect();
        let mut text = render(a, "node", Some(&root), &items);
        if items.is_empty() && !a.json && !a.prometheus {
            text = format!("no container directories under {}\n", root.join("containers").display());
        }
        return (text, true);
    }
    let path = container_region(a);
    let (pod, ctr) = container_ids(&path);
    let snap = match std::fs::symlink_metadata(&path) {
        Ok(_) => snapshot::read(&path, snapshot::PidView::Container),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(snapshot::Unusable("no region file yet (no process of this container has used CUDA or NVML)".into()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            Err(snapshot::Unusable(format!("permission denied: {e}")))
        }
        Err(e) => Err(snapshot::Unusable(format!("cannot stat: {e}"))),
    };
    let ok = snap.is_ok();
    let items = [Item {
        pod_uid: pod.as_deref(),
        container: ctr.as_deref(),
        path: &path,
        result: snap.as_ref().map_err(|u| u.0.as_str()),
    }];
    (render(a, "container", None, &items), ok)
}

fn control(a: &Args) -> Result<String, control::Failure> {
    let path = container_region(a);
    match a.verb.as_deref() {
        Some("set-limit") => {
            let given = [a.memory.is_some(), a.sm.is_some(), a.sm_ceiling.is_some()].iter().filter(|&&b| b).count();
            if given != 1 {
                return Err(control::Failure("set-limit needs exactly one of --memory, --sm, --sm-ceiling".into(), 1));
            }
            let pct = |v: &str, flag: &str| -> Result<u64, control::Failure> {
                let t = v.trim().trim_end_matches('%');
                match t.parse::<u64>() {
                    Ok(p @ 1..=100) => Ok(p),
                    _ => Err(control::Failure(format!("{flag}: a percent from 1 to 100, not {v:?}"), 1)),
                }
            };
            let change = if let Some(m) = &a.memory {
                control::LimitChange::Memory(units::parse_size(m).map_err(|e| control::Failure(e, 1))?)
            } else if let Some(s) = &a.sm {
                control::LimitChange::Sm(pct(s, "--sm")?)
            } else {
                control::LimitChange::SmCeiling(pct(a.sm_ceiling.as_deref().unwrap(), "--sm-ceiling")?)
            };
            control::set_limit(&path, a.device, change)
        }
        Some("block") => control::block(&path),
        Some("unblock") => control::unblock(&path),
        Some("sweep") => control::sweep(&path),
        _ => unreachable!(),
    }
}

fn main() {
    let a = match parse_args(std::env::args().skip(1).collect()) {
        Ok(a) => a,
        Err(e) => die(&format!("{e}\n{USAGE}"), 1),
    };
    if a.verb.is_some() {
        match control(&a) {
            Ok(msg) => print!("{msg}"),
            Err(control::Failure(msg, code)) => die(&msg, code),
        }
        return;
    }
    match a.watch {
        None => {
            let (text, ok) = view_once(&a);
            print!("{text}");
            std::process::exit(if ok { 0 } else { 1 });
        }
        Some(secs) => loop {
            let (text, _) = view_once(&a);
            if !a.json && !a.prometheus {
                // Home + clear, as `watch` does, so the table redraws in place.
                print!("\x1b[H\x1b[2J");
            }
            print!("{text}");
            use std::io::Write;
            if std::io::stdout().flush().is_err() {
                return; // reader gone
            }
            std::thread::sleep(std::time::Duration::from_secs_f64(secs));
        },
    }
}
