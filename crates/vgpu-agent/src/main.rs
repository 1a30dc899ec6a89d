//! `vgpu-agent`: the node half of libvgpu, a drop-in for HAMi's vGPU monitor container that needs
//! no NVML, no GPU device node and no root. It exports the regions' metrics on `/metrics`, runs
//! the monitor's feedback loop (priorities, "limit only when contended") and removes the
//! directories of deleted pods. See docs/agent.md.

mod agent;
mod discover;
mod feedback;
mod hostgpu;
mod kube;
mod log;
mod metrics;
mod server;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

const USAGE: &str = "\
usage: vgpu-agent [flags]
  the node agent: serves the usage regions' metrics, runs the feedback loop and removes the
  directories of deleted pods under $HOOK_PATH/containers (a drop-in for HAMi's vGPU monitor)
flags:
  --metrics-bind-address ADDR  address to serve /metrics on (default :9394)
  --legacy-metrics             also emit the monitor's legacy metric names
  -v N, --v N                  log verbosity (klog levels; 5 logs every feedback store)
  --feedback-interval DUR      feedback loop period, e.g. 5s, 500ms, 1m (default 5s)
  --no-feedback                never write the regions' control words (metrics and GC only)
  --pod-list-interval DUR      how often the pods of NODE_NAME are listed (default 15s)
  -h, --help                   this text
environment:
  HOOK_PATH             required: the monitor's hook path (<gpuHookPath>/vgpu)
  NODE_NAME             this node (pod names and directory GC need it)
  KUBECONFIG            kubeconfig file; empty: the in-cluster service account
  HAMI_RESYNC_INTERVAL  a dead pod's directory is removed once older than this (default 5m)
";

struct Args {
    bind: String,
    legacy: bool,
    verbosity: i32,
    interval: Duration,
    feedback: bool,
    pod_list_interval: Duration,
}

/// A Go duration as `time.ParseDuration` reads the common forms: `300ms`, `5s`, `1m30s`, `2h`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("not a duration: {s:?} (e.g. 5s, 500ms, 1m30s)");
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let n = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
        let v: f64 = rest[..n].parse().map_err(|_| bad())?;
        rest = &rest[n..];
        let u = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let mult = match &rest[..u] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += v * mult;
        rest = &rest[u..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad())
}

fn parse_args(argv: Vec<String>) -> Result<Args, String> {
    let mut a = Args {
        bind: ":9394".into(),
        legacy: false,
        verbosity: 0,
        interval: Duration::from_secs(5),
        feedback: true,
        pod_list_interval: Duration::from_secs(15),
    };
    let mut it = argv.into_iter();
    while let Some(arg) = it.next() {
        // Go's flag package accepts -flag, --flag and -flag=value.
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with('-') => (n.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let name = name.strip_prefix("--").or_else(|| name.strip_prefix('-')).map(str::to_owned);
        let Some(name) = name else { return Err(format!("unexpected argument {arg:?}")) };
        let mut value =
            |flag: &str| inline.clone().or_else(|| it.next()).ok_or_else(|| format!("--{flag} needs a value"));
        match name.as_str() {
            "h" | "help" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            "metrics-bind-address" => a.bind = value("metrics-bind-address")?,
            "legacy-metrics" => a.legacy = inline.as_deref().is_none_or(|v| v == "true"),
            "v" => {
                let v = value("v")?;
                a.verbosity = v.parse().map_err(|_| format!("-v: not a level: {v:?}"))?;
            }
            "feedback-interval" => {
                a.interval = parse_duration(&value("feedback-interval")?)?;
                if a.interval < Duration::from_millis(10) {
                    return Err("--feedback-interval: at least 10ms".into());
                }
            }
            "pod-list-interval" => {
                a.pod_list_interval = parse_duration(&value("pod-list-interval")?)?.max(Duration::from_millis(100));
            }
            "no-feedback" => a.feedback = false,
            _ => return Err(format!("unknown flag {arg:?}")),
        }
    }
    Ok(a)
}

fn env(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.is_empty())
}

/// Lists the pods of `node` every `every`, forever (a failure is said once, retried).
fn poll_pods(agent: Arc<agent::Agent>, node: String, every: Duration) {
    let client = loop {
        match kube::ApiConfig::discover(env("KUBECONFIG").as_deref())
            .and_then(|c| kube::Client::new(c, Duration::from_secs(10)))
        {
            Ok(c) => break c,
            Err(e) => {
                log::once("api", Some(&format!("no Kubernetes API: {e}; metrics show pod UIDs, no directory GC")));
                std::thread::sleep(every.max(Duration::from_secs(30)));
            }
        }
    };
    log::info(0, &format!("listing the pods of node {node} from {} ({})", client.server(), client.source()));
    loop {
        let r = client.pods_on(&node);
        let mut st = agent.pods.lock().unwrap_or_else(|p| p.into_inner());
        match r {
            Ok(pods) => {
                log::info(4, &format!("{} pods on {node}", pods.len()));
                st.pods = Some((Arc::new(pods), std::time::SystemTime::now()));
                st.up = true;
                drop(st);
                log::once("api", None);
            }
            Err(e) => {
                st.up = false;
                // Names already learnt stay; GC waits for a fresh list.
                if let Some((m, _)) = st.pods.take() {
                    st.pods = Some((m, std::time::UNIX_EPOCH));
                }
                drop(st);
                agent.stats.lock().unwrap_or_else(|p| p.into_inner()).pod_list_errors += 1;
                log::once("api", Some(&format!("pod list failed: {e} (retrying; no directory GC meanwhile)")));
            }
        }
        std::thread::sleep(every);
    }
}

fn main() {
    let a = match parse_args(std::env::args().skip(1).collect()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("vgpu-agent: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    log::set_verbosity(a.verbosity);
    let Some(hook) = std::env::var_os("HOOK_PATH").filter(|v| !v.is_empty()) else {
        log::error("required environment variable HOOK_PATH not set");
        std::process::exit(1);
    };
    let resync = match env("HAMI_RESYNC_INTERVAL") {
        None => Duration::from_secs(300),
        Some(v) => parse_duration(&v).unwrap_or_else(|e| {
            log::warn(&format!("invalid HAMI_RESYNC_INTERVAL: {e}; using 5m"));
            Duration::from_secs(300)
        }),
    };
    let node = env("NODE_NAME");
    let agent = Arc::new(agent::Agent::new(PathBuf::from(hook), resync, a.feedback));
    log::info(
        0,
        &format!(
            "hook path {}, feedback {}, resync {:?}, host GPU metrics: from the tenants' {} side files (no NVML used)",
            agent.hook_path.display(),
            if a.feedback { format!("every {:?}", a.interval) } else { "off".into() },
            resync,
            hostgpu::FILE_NAME
        ),
    );
    match node {
        Some(n) => {
            let ag = agent.clone();
            let every = a.pod_list_interval;
            std::thread::Builder::new().name("pods".into()).spawn(move || poll_pods(ag, n, every)).expect("thread");
        }
        None => log::warn("NODE_NAME not set: metrics show pod UIDs, no directory GC"),
    }
    {
        let ag = agent.clone();
        let legacy = a.legacy;
        let bind = a.bind.clone();
        std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || server::serve(&bind, ag, legacy))
            .expect("thread");
    }
    let mut scratch = Vec::new();
    loop {
        let t0 = std::time::Instant::now();
        agent.pass(&mut scratch);
        log::info(6, &format!("pass took {:?}", t0.elapsed()));
        std::thread::sleep(a.interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_as_go_reads_them() {
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        for bad in ["", "5", "s", "5x", "-1s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn flags_in_go_forms() {
        let a = parse_args(
            [
                "--metrics-bind-address=127.0.0.1:1",
                "-v",
                "4",
                "--legacy-metrics",
                "-feedback-interval",
                "1s",
                "--no-feedback",
            ]
            .map(String::from)
            .to_vec(),
        )
        .unwrap();
        assert_eq!(a.bind, "127.0.0.1:1");
        assert_eq!(a.verbosity, 4);
        assert!(a.legacy && !a.feedback);
        assert_eq!(a.interval, Duration::from_secs(1));
        assert!(parse_args(vec!["--bogus".into()]).is_err());
        assert!(parse_args(vec!["stray".into()]).is_err());
        assert!(parse_args(vec!["-v".into()]).is_err());
    }
}
