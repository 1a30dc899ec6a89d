//! `cuCheckpointProcess*` (12.8): checkpoint state of any process by PID, kept in the shared state
//! file (`sim_state::checkpoint`) so that a tool process can drive it for another. With
//! `VGPU_SIM_CHECKPOINT_BLOCKS=1` a process asking for its own state while it is locked or
//! checkpointed is held until it runs again (as a driver that blocks a locked process's calls).

use crate::types::*;
use crate::{check_init, cu_try, nonnull, out, state};
use sim_state::SimState;
use sim_state::checkpoint::CheckpointError;

fn blocks() -> bool {
    static B: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *B.get_or_init(|| std::env::var("VGPU_SIM_CHECKPOINT_BLOCKS").is_ok_and(|v| v.trim() == "1"))
}

fn code(e: CheckpointError) -> CUresult {
    match e {
        CheckpointError::NoProcess => CUDA_ERROR_INVALID_VALUE,
        CheckpointError::WrongState(_) => CUDA_ERROR_ILLEGAL_STATE,
        CheckpointError::NoRoom => CUDA_ERROR_OUT_OF_MEMORY,
    }
}

/// `CUprocessState` of `pid` (a live process unknown to the simulated driver is running).
pub(crate) fn get_state(pid: i32, st: *mut u32) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(st)?;
        let pid = u32::try_from(pid).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
        if blocks() && pid == std::process::id() {
            while state().checkpoint_state(pid).is_some_and(|s| s != sim_state::checkpoint::RUNNING) {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        let s = state().checkpoint_state(pid).unwrap_or(sim_state::checkpoint::RUNNING);
        unsafe { out(st, s) }
    })
}

pub(crate) fn step(pid: i32, f: fn(&SimState, u32) -> Result<(), CheckpointError>) -> CUresult {
    cu_try!({
        check_init()?;
        let pid = u32::try_from(pid).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
        f(state(), pid).map_err(code)
    })
}
