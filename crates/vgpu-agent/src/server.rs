//! The `/metrics` HTTP server (tiny_http: synchronous, no async runtime). A bind failure is logged
//! and retried; the feedback loop goes on regardless, as in the monitor.

use crate::agent::Agent;
use crate::log;
use std::sync::Arc;
use std::time::Duration;

/// Go's `:9394` means every address: try IPv6 any (dual-stack), then IPv4 any.
fn candidates(bind: &str) -> Vec<String> {
    match bind.strip_prefix(':') {
        Some(port) => vec![format!("[::]:{port}"), format!("0.0.0.0:{port}")],
        None => vec![bind.to_string()],
    }
}

fn listen(bind: &str) -> tiny_http::Server {
    loop {
        let mut last = String::new();
        for addr in candidates(bind) {
            match tiny_http::Server::http(&addr) {
                Ok(s) => {
                    log::once("listen", None);
                    log::info(0, &format!("serving /metrics on {addr}"));
                    return s;
                }
                Err(e) => last = format!("{addr}: {e}"),
            }
        }
        log::once("listen", Some(&format!("cannot serve metrics on {bind}: {last} (retrying)")));
        std::thread::sleep(Duration::from_secs(5));
    }
}

pub fn serve(bind: &str, agent: Arc<Agent>, legacy: bool) {
    let server = listen(bind);
    let mut scratch = Vec::new();
    for req in server.incoming_requests() {
        let path = req.url().split('?').next().unwrap_or("").to_string();
        let resp = match (req.method(), path.as_str()) {
            (tiny_http::Method::Get, "/metrics") => {
                let t0 = std::time::Instant::now();
                let body = crate::metrics::render(&agent, legacy, &mut scratch);
                log::info(6, &format!("scrape: {} bytes in {:?}", body.len(), t0.elapsed()));
                let ct = tiny_http::Header::from_bytes("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                    .expect("valid header");
                tiny_http::Response::from_string(body).with_header(ct)
            }
            (_, "/healthz") => tiny_http::Response::from_string("ok\n"),
            _ => tiny_http::Response::from_string("not found\n").with_status_code(404),
        };
        let _ = req.respond(resp);
    }
}
