//! The container's first-sample gate (`vgpu_core::limiter::cost::claim_first`): one process at a
//! time launches a kernel of unknown cost; taken by the launch gate, released once the sample is
//! measured.

use super::Compute;
use vgpu_core::limiter::cost;
use vgpu_core::limiter::words::Words;

/// Takes the container's first-sample gate for a launch of unknown cost (or holds it already);
/// false: another process's launch of unknown cost is in flight.
pub(super) fn take_first_gate(c: &Compute, d: usize, now: u64) -> bool {
    let mut ctl = c.devs[d].ctl.lock();
    if ctl.model.holds_gate() {
        return true;
    }
    match cost::claim_first(Words(c.bucket_state(d)).first_gate(), now) {
        Some(token) => {
            ctl.model.hold_gate(token);
            true
        }
        None => false,
    }
}

/// Frees the container's first-sample gate once this process's launches of unknown cost are
/// measured (or were not measured after all).
pub(super) fn release_first_gate(c: &Compute, d: usize) {
    if let Some(token) = c.devs[d].ctl.lock().model.gate_to_release() {
        cost::release_first(Words(c.bucket_state(d)).first_gate(), token);
    }
}
