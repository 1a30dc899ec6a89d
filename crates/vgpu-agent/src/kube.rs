//! The one Kubernetes API call the agent makes: list the pods of this node
//! (`GET /api/v1/pods?fieldSelector=spec.nodeName=<node>`, served from the API server's cache with
//! `resourceVersion=0`), for pod names in the metrics and for directory GC.
//!
//! Credentials as client-go's `BuildConfigFromFlags("", $KUBECONFIG)` finds them: the kubeconfig
//! file when `KUBECONFIG` is set (current context: server, CA, token / token file, client
//! certificate), else the in-cluster service account. TLS is rustls (no OpenSSL on the node image).

use serde::Deserialize;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};
use yaml_rust2::{Yaml, YamlLoader};

const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Where and how to reach the API server.
pub struct ApiConfig {
    pub server: String,
    ca_pem: Option<Vec<u8>>,
    insecure: bool,
    token: Option<String>,
    token_file: Option<String>,
    client_pem: Option<(Vec<u8>, Vec<u8>)>,
    /// Where the configuration came from (for the log line).
    pub source: String,
}

/// A pod of this node, as far as the agent needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
}

#[derive(Deserialize)]
struct PodList {
    items: Vec<PodItem>,
}
#[derive(Deserialize)]
struct PodItem {
    metadata: Meta,
}
#[derive(Deserialize)]
struct Meta {
    #[serde(default)]
    uid: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
}

fn read(path: &str, what: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{what} {path}: {e}"))
}

fn decode_b64(s: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes().filter(|c| !c.is_ascii_whitespace()) {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            b'=' => break,
            _ => return Err("invalid base64 in kubeconfig".into()),
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Ok(out)
}

/// `<key>-data` (base64) or `<key>` (a file, relative to the kubeconfig's directory).
fn data_or_file(m: &Yaml, key: &str, base: &std::path::Path) -> Result<Option<Vec<u8>>, String> {
    if let Some(d) = m[format!("{key}-data").as_str()].as_str() {
        return decode_b64(d).map(Some);
    }
    if let Some(f) = m[key].as_str() {
        let p = base.join(f);
        return read(&p.to_string_lossy(), key).map(Some);
    }
    Ok(None)
}

fn named<'a>(list: &'a Yaml, name: &str, field: &str) -> Option<&'a Yaml> {
    list.as_vec()?.iter().find(|e| e["name"].as_str() == Some(name)).map(|e| &e[field])
}

impl ApiConfig {
    /// From `KUBECONFIG` (non-empty) or the in-cluster service account.
    pub fn discover(kubeconfig: Option<&str>) -> Result<ApiConfig, String> {
        match kubeconfig.filter(|k| !k.is_empty()) {
            Some(path) => ApiConfig::from_kubeconfig(path),
            None => ApiConfig::in_cluster(),
        }
    }

    fn in_cluster() -> Result<ApiConfig, String> {
        let host = std::env::var("KUBERNETES_SERVICE_HOST")
            .map_err(|_| "not in a cluster (KUBERNETES_SERVICE_HOST unset) and KUBECONFIG empty".to_string())?;
        let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
        let host = if host.contains(':') { format!("[{host}]") } else { host };
        Ok(ApiConfig {
            server: format!("https://{host}:{port}"),
            ca_pem: Some(read(&format!("{SA_DIR}/ca.crt"), "service account CA")?),
            insecure: false,
            token: None,
            token_file: Some(format!("{SA_DIR}/token")),
            client_pem: None,
            source: "in-cluster service account".into(),
        })
    }

    fn from_kubeconfig(path: &str) -> Result<ApiConfig, String> {
        let text = String::from_utf8(read(path, "kubeconfig")?).map_err(|_| format!("kubeconfig {path}: not UTF-8"))?;
        let docs = YamlLoader::load_from_str(&text).map_err(|e| format!("kubeconfig {path}: {e}"))?;
        let doc = docs.first().ok_or_else(|| format!("kubeconfig {path}: empty"))?;
        let base = std::path::Path::new(path).parent().unwrap_or(std::path::Path::new("."));
        let ctx_name =
            doc["current-context"].as_str().ok_or_else(|| format!("kubeconfig {path}: no current-context"))?;
        let ctx = named(&doc["contexts"], ctx_name, "context")
            .ok_or_else(|| format!("kubeconfig {path}: context {ctx_name:?} not found"))?;
        let cluster_name = ctx["cluster"].as_str().unwrap_or_default();
        let cluster = named(&doc["clusters"], cluster_name, "cluster")
            .ok_or_else(|| format!("kubeconfig {path}: cluster {cluster_name:?} not found"))?;
        let server = cluster["server"].as_str().ok_or_else(|| format!("kubeconfig {path}: cluster has no server"))?;
        let user = ctx["user"].as_str().and_then(|u| named(&doc["users"], u, "user"));
        let none = Yaml::Null;
        let user = user.unwrap_or(&none);
        let cert = data_or_file(user, "client-certificate", base)?;
        let key = data_or_file(user, "client-key", base)?;
        Ok(ApiConfig {
            server: server.trim_end_matches('/').to_string(),
            ca_pem: data_or_file(cluster, "certificate-authority", base)?,
            insecure: cluster["insecure-skip-tls-verify"].as_bool().unwrap_or(false),
            token: user["token"].as_str().map(str::to_owned),
            token_file: user["tokenFile"].as_str().map(|f| base.join(f).to_string_lossy().into_owned()),
            client_pem: cert.zip(key),
            source: format!("kubeconfig {path}"),
        })
    }
}

/// An HTTP agent for the API server with the configuration's TLS settings.
pub struct Client {
    cfg: ApiConfig,
    agent: ureq::Agent,
}

fn certs(pem: &[u8]) -> Result<Vec<Certificate<'static>>, String> {
    let mut out = Vec::new();
    for item in ureq::tls::parse_pem(pem) {
        if let PemItem::Certificate(c) = item.map_err(|e| format!("PEM: {e}"))? {
            out.push(c);
        }
    }
    Ok(out)
}

fn key(pem: &[u8]) -> Result<PrivateKey<'static>, String> {
    for item in ureq::tls::parse_pem(pem) {
        if let PemItem::PrivateKey(k) = item.map_err(|e| format!("PEM: {e}"))? {
            return Ok(k);
        }
    }
    Err("client key: no private key in PEM".into())
}

impl Client {
    pub fn new(cfg: ApiConfig, timeout: Duration) -> Result<Client, String> {
        let mut tls = TlsConfig::builder().disable_verification(cfg.insecure);
        if let Some(ca) = &cfg.ca_pem {
            tls = tls.root_certs(RootCerts::Specific(Arc::new(certs(ca)?)));
        }
        if let Some((c, k)) = &cfg.client_pem {
            tls = tls.client_cert(Some(ClientCert::new_with_certs(&certs(c)?, key(k)?)));
        }
        let agent = ureq::Agent::config_builder()
            .tls_config(tls.build())
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .build()
            .new_agent();
        Ok(Client { cfg, agent })
    }

    pub fn server(&self) -> &str {
        &self.cfg.server
    }

    pub fn source(&self) -> &str {
        &self.cfg.source
    }

    fn bearer(&self) -> Option<String> {
        // A projected token file is rotated by the kubelet: read it on every call.
        if let Some(f) = &self.cfg.token_file
            && let Ok(t) = std::fs::read_to_string(f)
        {
            return Some(t.trim().to_string());
        }
        self.cfg.token.clone()
    }

    /// Pods on `node`, by UID.
    pub fn pods_on(&self, node: &str) -> Result<HashMap<String, Pod>, String> {
        let url =
            format!("{}/api/v1/pods?fieldSelector=spec.nodeName%3D{}&resourceVersion=0", self.cfg.server, encode(node));
        let mut req = self.agent.get(&url).header("Accept", "application/json");
        if let Some(t) = self.bearer() {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        let mut resp = req.call().map_err(|e| format!("GET {url}: {e}"))?;
        let status = resp.status();
        let body = resp
            .body_mut()
            .with_config()
            .limit(256 << 20)
            .read_to_vec()
            .map_err(|e| format!("GET {url}: reading the body: {e}"))?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
            return Err(format!("GET {url}: HTTP {status}: {text}"));
        }
        parse_pod_list(&body).map_err(|e| format!("GET {url}: {e}"))
    }
}

/// Percent-encodes a query value (node names are DNS labels, but be safe).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A `v1.PodList` JSON document → pods by UID.
pub fn parse_pod_list(body: &[u8]) -> Result<HashMap<String, Pod>, String> {
    let list: PodList = serde_json::from_slice(body).map_err(|e| format!("not a PodList: {e}"))?;
    Ok(list
        .items
        .into_iter()
        .filter(|p| !p.metadata.uid.is_empty())
        .map(|p| (p.metadata.uid, Pod { namespace: p.metadata.namespace, name: p.metadata.name }))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_and_pod_list() {
        assert_eq!(decode_b64("aGVsbG8gd29ybGQ=").unwrap(), b"hello world");
        let body = br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5"},
            "items":[{"metadata":{"name":"a","namespace":"ns","uid":"u-1","labels":{"x":"y"}},
                      "spec":{"nodeName":"n","containers":[{"name":"c"}]},"status":{"phase":"Running"}},
                     {"metadata":{"name":"nouid","namespace":"ns"}}]}"#;
        let m = parse_pod_list(body).unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m["u-1"], Pod { namespace: "ns".into(), name: "a".into() });
        assert!(parse_pod_list(b"{\"kind\":\"Status\"}").is_err());
    }

    #[test]
    fn kubeconfig_current_context() {
        let d = std::env::temp_dir().join(format!("agent-kc-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let kc = d.join("config");
        std::fs::write(
            &kc,
            "apiVersion: v1\nkind: Config\ncurrent-context: b\nclusters:\n- name: one\n  cluster:\n    server: http://127.0.0.1:1\n- name: two\n  cluster:\n    server: https://api.example:6443/\n    insecure-skip-tls-verify: true\ncontexts:\n- name: a\n  context: {cluster: one, user: u}\n- name: b\n  context: {cluster: two, user: u}\nusers:\n- name: u\n  user:\n    token: abc\n",
        )
        .unwrap();
        let c = ApiConfig::discover(Some(kc.to_str().unwrap())).unwrap();
        assert_eq!(c.server, "https://api.example:6443");
        assert!(c.insecure);
        assert_eq!(c.token.as_deref(), Some("abc"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
