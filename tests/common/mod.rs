//! Shared harness of the integration tests.
//!
//! * [`artifacts`] builds (once per test binary) the shim, the simulated driver/NVML and `simctl`
//!   with a nested `cargo build`, creates the soname symlink directory `target/<profile>/simlib/`
//!   and compiles the C clients of `tests/c/` into `target/<profile>/testbin/`.
//! * [`Sandbox`] is a fresh per-test directory holding the simulated GPU's state file, the shim's
//!   region file and the simulator's call-count file, so tests run in parallel.
//! * [`Run`] spawns a client with a scrubbed environment, an optional `LD_PRELOAD` of the shim and a
//!   hard timeout, and returns an [`Out`] with helpers to parse `key=value` lines, shim hook logs
//!   and the simulator's per-variant call counts; [`Run::spawn`] starts the same client as an
//!   interactive [`Spawned`] (stdin, stdout lines, stderr, wait/kill/signal), the one process
//!   runner under the memory tests' `Client`s.
// Included by several test binaries; each uses a part.
#![allow(dead_code)]

mod build;
pub mod regionmap;
mod run;
pub mod simbusy;

pub use build::*;
pub use run::*;
