//! Pure logic of libvgpu (no hooks, no dlsym, no CUDA calls): configuration and limit syntax,
//! the shared region's layout and file protocol, the container lock, process slots, memory
//! accounting and the virtual memory view. Everything here is unit-tested with `cargo test -p vgpu-core`.

pub mod arrays;
pub mod config;
pub mod devices;
pub mod counters;
pub mod hostpid;
pub mod idhash;
pub mod ledger;
pub mod limiter;
pub mod limits;
pub mod reconcile;
pub mod lock;
pub mod region;
pub mod regionpath;
pub mod regionfile;
pub mod regionplace;
pub mod slots;
pub mod sync;
pub mod views;

#[cfg(test)]
pub(crate) mod testutil;
#[cfg(test)]
mod mptests;
