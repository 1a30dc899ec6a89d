//! Completion points of queued work. With one FIFO across processes a completion time is known at
//! launch (`at`). Time-sliced (`VGPU_SIM_TIMESLICE_US`), later launches of other processes move it,
//! so a point also holds, per device, this process's ticket in the device's schedule
//! (`sim_state::Slicer`): complete once the process's served device time reaches it.

use crate::{my_slot, sim, state};
use sim_state::MAX_DEVICES;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Mark {
    /// Not complete before this time (CLOCK_MONOTONIC ns).
    pub at: u64,
    /// Per device: ticket of this process's kernels (0: none).
    pub work: [u64; MAX_DEVICES],
}

impl Mark {
    /// Complete when both are.
    pub fn max(self, o: Mark) -> Mark {
        let mut work = self.work;
        for (w, v) in work.iter_mut().zip(o.work) {
            *w = (*w).max(v);
        }
        Mark { at: self.at.max(o.at), work }
    }

    fn tickets(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.work.iter().copied().enumerate().filter(|&(_, t)| t > 0)
    }

    pub fn done(&self) -> bool {
        sim::now() >= self.at && self.tickets().all(|(d, t)| !pending(d, t))
    }

    /// Sleep until complete (until each ticket's predicted time, again while others' work delays it).
    pub fn wait(&self) {
        for (d, t) in self.tickets() {
            while pending(d, t) {
                sim::sleep_until(state().ticket_time(my_slot(), d, t));
            }
        }
        sim::sleep_until(self.at);
    }

    /// The completion time (exact once complete; the earliest possible before).
    pub fn time(&self) -> u64 {
        self.tickets().map(|(d, t)| state().ticket_time(my_slot(), d, t)).fold(self.at, u64::max)
    }
}

/// This process's work up to `ticket` on `dev` has not run yet. A ticket this process never queued
/// (a forked child's copy of its parent's streams) is complete.
fn pending(dev: usize, ticket: u64) -> bool {
    let (served, queued) = state().served_ns(my_slot(), dev);
    served < ticket && queued >= ticket
}
