//! The deployment recipe (docs/deploy.md) cannot be built here (no image registry), so this checks that
//! the names and paths it uses agree everywhere: `deploy/Dockerfile`, `deploy/values.yaml`,
//! `docs/deploy.md`, the release script's artifacts (`ci/release.sh`), the injection test's
//! reproduction of the device plugin's mounts (`tests/injection.rs`, `tests/py/injection.sh`), the
//! KAI test (`tests/py/kai.sh`) and the library's own constants.

use std::path::Path;

fn read(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `ARG NAME=value` default of the Dockerfile.
fn arg_default(dockerfile: &str, name: &str) -> String {
    dockerfile
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("ARG {name}=")))
        .unwrap_or_else(|| panic!("no ARG {name}= default"))
        .trim()
        .to_string()
}

/// (source, destination) of every COPY, with `${HAMI_VERSION}` expanded; every source is taken
/// from the build platform's directory `${TARGETARCH}/` (the prefix is removed).
fn copies(dockerfile: &str, version: &str) -> Vec<(String, String)> {
    dockerfile
        .lines()
        .filter_map(|l| l.trim().strip_prefix("COPY "))
        .map(|r| {
            let parts: Vec<&str> = r.split_whitespace().collect();
            assert_eq!(parts.len(), 2, "COPY with one source: {r}");
            let src = parts[0].strip_prefix("${TARGETARCH}/").unwrap_or_else(|| panic!("COPY not per platform: {r}"));
            (src.to_string(), parts[1].replace("${HAMI_VERSION}", version))
        })
        .collect()
}

/// A `key: value` of a YAML block (two-space indentation), by dotted path; enough for values.yaml.
fn yaml_get(text: &str, path: &str) -> Option<String> {
    let keys: Vec<&str> = path.split('.').collect();
    let mut depth = 0;
    for line in text.lines() {
        let content = line.split(" #").next().unwrap().trim_end();
        if content.trim().is_empty() || content.trim_start().starts_with('#') {
            continue;
        }
        let indent = (content.len() - content.trim_start().len()) / 2;
        if indent < depth {
            return None;
        }
        if indent == depth
            && let Some((k, v)) = content.trim().split_once(':')
            && k == keys[depth]
        {
            if depth + 1 == keys.len() {
                return Some(v.trim().trim_matches('"').to_string());
            }
            depth += 1;
        }
    }
    None
}

#[test]
fn dockerfile_docs_release_and_injection_agree() {
    let df = read("deploy/Dockerfile");
    let doc = read("docs/deploy.md");
    let release = read("ci/release.sh");
    let injection = read("tests/injection.rs");
    let injection_sh = read("tests/py/injection.sh");

    // The base image and the version the library name carries.
    let version = arg_default(&df, "HAMI_VERSION");
    assert_eq!(version, "v2.10.0");
    assert!(df.lines().any(|l| l.trim() == "FROM projecthami/hami:${HAMI_VERSION}"), "{df}");
    assert!(doc.contains(&format!("projecthami/hami:{version}")));

    // The library replaces the exact file name of the image (and the build checks it exists first).
    let lib = format!("/k8s-vgpu/lib/nvidia/libvgpu.so.{version}");
    let cp = copies(&df, &version);
    assert_eq!(
        cp,
        vec![
            ("libvgpu.so".to_string(), lib.clone()),
            ("vgpu-smi".to_string(), "/k8s-vgpu/lib/nvidia/vgpu-smi".to_string()),
            ("vgpu-agent".to_string(), "/k8s-vgpu/bin/vgpu-agent".to_string())
        ]
    );
    assert!(df.contains("RUN test -f /k8s-vgpu/lib/nvidia/libvgpu.so.${HAMI_VERSION}"), "{df}");
    assert!(doc.contains(&format!("`{lib}`")) || doc.contains(&format!("**`{lib}`**")), "docs name {lib}");

    // The COPY sources are the release script's artifacts, for each platform from its architecture's
    // release directory.
    assert!(df.lines().any(|l| l.trim() == "ARG TARGETARCH"), "{df}");
    assert!(doc.contains("--platform linux/amd64,linux/arm64"), "docs build both platforms");
    let shipped = release
        .lines()
        .find_map(|l| l.strip_prefix("SHIPPED_BINS=("))
        .expect("ci/release.sh: SHIPPED_BINS=(...)")
        .trim_end_matches(')')
        .split_whitespace()
        .collect::<Vec<_>>();
    for (src, _) in &cp {
        assert!(
            src == "libvgpu.so" && release.contains("\"$out/libvgpu.so\"") || shipped.contains(&src.as_str()),
            "ci/release.sh does not produce {src}"
        );
        for (dir, arch) in [("release-floor", "amd64"), ("release-floor-aarch64", "arm64")] {
            let line = format!("target/{dir}/{src}");
            assert!(
                doc.lines()
                    .any(|l| l.starts_with("cp ") && l.contains(&line) && l.ends_with(&format!(" deploy/{arch}/"))),
                "docs do not copy {line} to deploy/{arch}/"
            );
        }
    }

    // Host and container paths: the ones the injection test reproduces.
    for p in [
        "/usr/local/vgpu/libvgpu.so",
        "/usr/local/vgpu/ld.so.preload",
        "/tmp/vgpulock",
        "/etc/ld.so.preload",
        "/usr/local/vgpu/<uuid>.cache",
        "/usr/local/vgpu/containers/<pod-uid>_<container>/",
    ] {
        assert!(doc.contains(p), "docs/deploy.md lacks {p}");
    }
    assert!(
        injection.contains("host/usr/local/vgpu") && injection.contains("\"containers\""),
        "injection test layout changed"
    );
    assert!(injection.contains("format!(\"{POD_UID}_{CTR}\")"), "per-container dir name <pod>_<ctr> in injection.rs");
    assert!(injection.contains("format!(\"/usr/local/vgpu/{CACHE_UUID}.cache\")"));
    assert!(injection.contains("\"/usr/local/vgpu/libvgpu.so\\n\""), "ld.so.preload content in injection.rs");
    for m in [
        "mount --bind \"$INJ_POD_DIR\" /usr/local/vgpu",
        "/usr/local/vgpu/libvgpu.so",
        "/tmp/vgpulock",
        "/etc/ld.so.preload",
    ] {
        assert!(injection_sh.contains(m), "injection.sh lacks {m}");
    }

    // Helm values: the device plugin's image is ours, libPath = gpuHookPath + /vgpu = the hook dir.
    let values = read("deploy/values.yaml");
    let hook = yaml_get(&values, "global.gpuHookPath").expect("global.gpuHookPath");
    let lib_path = yaml_get(&values, "devicePlugin.libPath").expect("devicePlugin.libPath");
    assert_eq!(lib_path, format!("{hook}/vgpu"));
    assert_eq!(lib_path, vgpu_core::config::HOOK_DIR);
    let tag = yaml_get(&values, "devicePlugin.image.tag").expect("devicePlugin.image.tag");
    assert!(tag.starts_with(&version), "{tag}");
    assert!(doc.contains(&tag), "docs build the tag {tag}");
    // The monitor container runs our image too, where the chart's `vGPUmonitor` is the agent.
    assert_eq!(yaml_get(&values, "devicePlugin.monitor.image.tag").as_deref(), Some(tag.as_str()));
    assert_eq!(
        yaml_get(&values, "devicePlugin.monitor.ctrPath"),
        Some(format!("{lib_path}/containers")),
        "the agent's HOOK_PATH/containers"
    );
    assert!(df.contains("ln -s vgpu-agent /k8s-vgpu/bin/vGPUmonitor"), "{df}");
}

#[test]
fn kai_paths_agree() {
    let doc = read("docs/deploy.md");
    let config_doc = read("docs/configuration.md");
    let kai = read("tests/py/kai.sh");
    use vgpu_core::regionpath::{ENV_CONTAINER_NAME, ENV_POD_UID, ENV_VGPU_MOUNT, KAI_FILE};
    let form =
        format!("${{{ENV_VGPU_MOUNT}:-/usr/local/vgpu}}/containers/<{ENV_POD_UID}>_<{ENV_CONTAINER_NAME}>/{KAI_FILE}");
    assert!(doc.contains(&form), "docs/deploy.md lacks {form}");
    assert!(
        config_doc.contains(&format!("`<mount>/containers/<{ENV_POD_UID}>_<{ENV_CONTAINER_NAME}>/{KAI_FILE}`")),
        "docs/configuration.md"
    );
    assert!(
        kai.contains("POD_UID=pod-1 CONTAINER_NAME=root-ctr")
            && kai.contains("mount --bind \"$KAI_HOST\" /usr/local/vgpu")
    );
    let p = vgpu_core::regionpath::kai_path(&AlwaysExists, None, "pod-1", "root-ctr").unwrap();
    assert_eq!(p, Path::new("/usr/local/vgpu/containers/pod-1_root-ctr/usage.cache"));
}

struct AlwaysExists;
impl vgpu_core::config::ConfigSources for AlwaysExists {
    fn env(&self, _: &str) -> Option<String> {
        None
    }
    fn read_file(&self, _: &Path) -> Option<Vec<u8>> {
        None
    }
    fn exists(&self, _: &Path) -> bool {
        true
    }
    fn list_dir(&self, _: &Path) -> Option<Vec<String>> {
        None
    }
}
