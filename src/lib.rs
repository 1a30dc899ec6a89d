//! libvgpu: an in-container GPU governor loaded through `/etc/ld.so.preload`.
//!
//! No constructor: a process that never touches CUDA or NVML pays for nothing but the mapping.
//! Everything starts lazily from the first hooked call (see `state`).

#[macro_use]
pub mod log;
mod checkpoint;
mod clock;
mod compute;
mod context;
mod devices;
mod dl;
mod dlsym_hook;
mod driver;
mod driver_limit;
mod faults;
mod ffi;
mod guard;
mod hooks;
mod hostgpu;
mod hostpid;
mod launch;
mod memory;
mod nvml;
mod pfn_lookup;
mod pool_place;
mod state;
mod truth;
