//! Pure logic of libvgpu (no hooks, no dlsym, no CUDA calls): configuration and limit syntax,
//! the shared region's layout and file protocol, the container lock, process slots, memory
//! accounting and the virtual memory view. Everything here is unit-tested with `cargo test -p vgpu-core`.

pub mod arrays;
pub mod config;
pub mod counters;
pub mod devices;
pub mod driverlimit;
pub mod hostpid;
pub mod hostsample;
pub mod idhash;
pub mod ledger;
pub mod limiter;
pub mod limits;
pub mod locations;
pub mod lock;
pub mod noderegion;
pub mod reconcile;
pub mod region;
pub mod regionanchor;
pub mod regionfile;
pub mod regionmap;
pub mod regionpath;
pub mod regionplace;
pub mod secure;
pub mod slots;
pub mod sources;
pub mod symname;
pub mod sync;
pub mod views;
pub mod vmm;

#[cfg(test)]
mod mptests;
#[cfg(test)]
pub(crate) mod testutil;
