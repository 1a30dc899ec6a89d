// NVIDIA's headers, used only at test time and never committed: `$VGPU_NVIDIA_HEADERS`, else the
// pinned wheels fetched once into `target/nvidia-headers/` (see tests/abi_conformance.rs).
// `include!`d by tests/abi_conformance.rs.

#[derive(Debug, Clone)]
struct NvHeaders {
    cuda_dir: PathBuf,
    nvml_dir: PathBuf,
    source: String,
}

fn find_file(dir: &Path, name: &str, depth: u32) -> Option<PathBuf> {
    let direct = dir.join(name);
    if direct.is_file() {
        return Some(dir.to_path_buf());
    }
    if depth == 0 {
        return None;
    }
    let mut subdirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    subdirs.sort();
    subdirs
        .into_iter()
        .find_map(|d| find_file(&d, name, depth - 1))
}

fn headers_in(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    Some((find_file(dir, "cuda.h", 6)?, find_file(dir, "nvml.h", 6)?))
}

fn python() -> String {
    std::env::var("VGPU_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn wheels(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p| {
        let n = p.file_name().unwrap().to_string_lossy();
        n.ends_with(".whl")
            && (n.starts_with(CUDA_WHEEL_PREFIX) || n.starts_with(NVML_WHEEL_PREFIX))
    });
    v.sort();
    v
}

fn fetch_wheels() -> Result<NvHeaders, String> {
    let cache = repo().join("target/nvidia-headers");
    let extracted = cache.join("include");
    let marker = extracted.join(".complete");
    if marker.is_file()
        && let Some((c, n)) = headers_in(&extracted)
    {
        let src = std::fs::read_to_string(&marker).unwrap_or_default();
        return Ok(NvHeaders {
            cuda_dir: c,
            nvml_dir: n,
            source: format!("cached wheels: {}", src.trim()),
        });
    }
    let wheel_dir = cache.join("wheels");
    std::fs::create_dir_all(&wheel_dir)
        .map_err(|e| format!("create {}: {e}", wheel_dir.display()))?;
    let have = wheels(&wheel_dir);
    let have_cuda = have.iter().any(|p| {
        p.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(CUDA_WHEEL_PREFIX)
    });
    let have_nvml = have.iter().any(|p| {
        p.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(NVML_WHEEL_PREFIX)
    });
    if !(have_cuda && have_nvml) {
        let out = Command::new(python())
            .args([
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--disable-pip-version-check",
                "-q",
                "-d",
            ])
            .arg(&wheel_dir)
            .args([CUDA_WHEEL, NVML_WHEEL])
            .output()
            .map_err(|e| format!("cannot run `{} -m pip`: {e}", python()))?;
        if !out.status.success() {
            return Err(format!(
                "`{} -m pip download --no-deps {CUDA_WHEEL} {NVML_WHEEL}` failed ({}):\n{}{}",
                python(),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    let whls = wheels(&wheel_dir);
    // Newest 12.9.x of each (lexicographic order of the same-length patch numbers is not numeric;
    // sort by the parsed version).
    let pick = |prefix: &str| -> Option<PathBuf> {
        whls.iter()
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
            .max_by_key(|p| {
                let n = p.file_name().unwrap().to_string_lossy().to_string();
                let ver = n.split('-').nth(1).unwrap_or("").to_string();
                ver.split('.')
                    .map(|x| x.parse::<u64>().unwrap_or(0))
                    .collect::<Vec<_>>()
            })
            .cloned()
    };
    let (Some(cw), Some(nw)) = (pick(CUDA_WHEEL_PREFIX), pick(NVML_WHEEL_PREFIX)) else {
        return Err(format!(
            "pip download succeeded but {} lacks the wheels",
            wheel_dir.display()
        ));
    };
    let tmp = cache.join(format!("include.tmp.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| e.to_string())?;
    let script = "import sys, zipfile\n\
                  dest = sys.argv[1]\n\
                  for w in sys.argv[2:]:\n\
                  \x20   z = zipfile.ZipFile(w)\n\
                  \x20   for n in z.namelist():\n\
                  \x20       if '/include/' in n and n.endswith('.h'):\n\
                  \x20           z.extract(n, dest)\n";
    let out = Command::new(python())
        .arg("-c")
        .arg(script)
        .arg(&tmp)
        .args([&cw, &nw])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python()))?;
    if !out.status.success() {
        return Err(format!(
            "unzipping the wheels failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let names = format!(
        "{} {}",
        cw.file_name().unwrap().to_string_lossy(),
        nw.file_name().unwrap().to_string_lossy()
    );
    std::fs::write(tmp.join(".complete"), &names).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&extracted);
    if std::fs::rename(&tmp, &extracted).is_err() {
        // Another test process won the race; use its copy.
        let _ = std::fs::remove_dir_all(&tmp);
    }
    let (c, n) =
        headers_in(&extracted).ok_or_else(|| format!("wheels {names} hold no cuda.h / nvml.h"))?;
    Ok(NvHeaders {
        cuda_dir: c,
        nvml_dir: n,
        source: format!("wheels: {names}"),
    })
}

fn nvidia_headers() -> &'static NvHeaders {
    static H: OnceLock<Result<NvHeaders, String>> = OnceLock::new();
    let r = H.get_or_init(|| {
        let mut why = String::new();
        if let Some(dir) = std::env::var_os("VGPU_NVIDIA_HEADERS") {
            let dir = PathBuf::from(dir);
            match headers_in(&dir) {
                Some((c, n)) => {
                    return Ok(NvHeaders {
                        cuda_dir: c,
                        nvml_dir: n,
                        source: format!("VGPU_NVIDIA_HEADERS={}", dir.display()),
                    });
                }
                None => {
                    let _ = writeln!(
                        why,
                        "VGPU_NVIDIA_HEADERS={} holds no cuda.h and nvml.h",
                        dir.display()
                    );
                }
            }
        } else {
            let _ = writeln!(why, "VGPU_NVIDIA_HEADERS is not set");
        }
        fetch_wheels().map_err(|e| format!("{why}{e}"))
    });
    match r {
        Ok(h) => {
            eprintln!(
                "NVIDIA headers ({}): {} , {}",
                h.source,
                h.cuda_dir.display(),
                h.nvml_dir.display()
            );
            h
        }
        Err(e) => panic!(
            "ABI conformance needs NVIDIA's cuda.h and nvml.h and could not get them.\n{e}\n\
             Fix: allow `python3 -m pip download` to reach PyPI, or set VGPU_NVIDIA_HEADERS to a \
             directory containing cuda.h and nvml.h (CUDA 12.9)."
        ),
    }
}
