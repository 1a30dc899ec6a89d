//! Checkpoint state of a process (what `cuda-checkpoint` drives through the driver's
//! `cuCheckpointProcess*` calls on a PID): running → locked → checkpointed → (restore) locked →
//! running. A checkpointed process holds no device memory: checkpointing moves its per-device
//! usage aside (the device and NVML see 0 for it), restoring charges it back, refused when the
//! device no longer has the room. The process's own calls are not blocked while it is locked or
//! checkpointed (a real driver blocks them); tests make none then.

use crate::{MAX_DEVICES, MAX_PROCS, ST_ALIVE, SimState, sat_sub, st_of};
use std::sync::atomic::Ordering;

pub const RUNNING: u32 = 0;
pub const LOCKED: u32 = 1;
pub const CHECKPOINTED: u32 = 2;

/// Why a checkpoint transition was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum CheckpointError {
    /// No live process with that PID.
    NoProcess,
    /// Not in the state the transition starts from (the state it is in).
    WrongState(u32),
    /// Restoring: the device lacks the room for the process's memory.
    NoRoom,
}

impl SimState {
    fn live_slot_of(&self, pid: u32) -> Option<usize> {
        let h = self.sh();
        (0..MAX_PROCS).find(|&k| {
            let r = &h.procs[k];
            st_of(r.state.load(Ordering::Acquire)) == ST_ALIVE && r.pid.load(Ordering::Relaxed) == pid
        })
    }

    /// The checkpoint state of `pid` (`None`: no live process).
    pub fn checkpoint_state(&self, pid: u32) -> Option<u32> {
        self.live_slot_of(pid).map(|k| self.sh().procs[k].ckpt.load(Ordering::Acquire))
    }

    fn transition(&self, pid: u32, from: u32, to: u32) -> Result<usize, CheckpointError> {
        let k = self.live_slot_of(pid).ok_or(CheckpointError::NoProcess)?;
        self.sh().procs[k]
            .ckpt
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| k)
            .map_err(CheckpointError::WrongState)
    }

    /// Lock: the process's CUDA calls would block from now on.
    pub fn checkpoint_lock(&self, pid: u32) -> Result<(), CheckpointError> {
        self.transition(pid, RUNNING, LOCKED).map(|_| ())
    }

    pub fn checkpoint_unlock(&self, pid: u32) -> Result<(), CheckpointError> {
        self.transition(pid, LOCKED, RUNNING).map(|_| ())
    }

    /// Checkpoint a locked process: its device memory is given back to the devices.
    pub fn checkpoint(&self, pid: u32) -> Result<(), CheckpointError> {
        let k = self.transition(pid, LOCKED, CHECKPOINTED)?;
        let h = self.sh();
        let r = &h.procs[k];
        for d in 0..MAX_DEVICES.min(self.device_count()) {
            let used = r.used[d].swap(0, Ordering::AcqRel);
            r.saved[d].store(used, Ordering::Release);
            sat_sub(&h.devices[d].used, used);
        }
        Ok(())
    }

    /// Restore a checkpointed process (back to locked): its device memory is charged again, all
    /// of it or (no room on some device) none.
    pub fn checkpoint_restore(&self, pid: u32) -> Result<(), CheckpointError> {
        let k = self.live_slot_of(pid).ok_or(CheckpointError::NoProcess)?;
        let r = &self.sh().procs[k];
        let st = r.ckpt.load(Ordering::Acquire);
        if st != CHECKPOINTED {
            return Err(CheckpointError::WrongState(st));
        }
        let ndev = MAX_DEVICES.min(self.device_count());
        let mut charged = Vec::new();
        for d in 0..ndev {
            let bytes = r.saved[d].load(Ordering::Acquire);
            if self.try_charge(k, d, bytes) {
                charged.push((d, bytes));
            } else {
                for (d, b) in charged {
                    self.uncharge(k, d, b);
                }
                return Err(CheckpointError::NoRoom);
            }
        }
        for d in 0..ndev {
            r.saved[d].store(0, Ordering::Release);
        }
        r.ckpt.store(LOCKED, Ordering::Release);
        Ok(())
    }
}
