//! `cuCheckpointProcess*` (12.8): checkpoint state of any process by PID, kept in the shared state
//! file (`sim_state::checkpoint`) so that a tool process can drive it for another.

use crate::types::*;
use crate::{check_init, cu_try, nonnull, out, state};
use sim_state::SimState;
use sim_state::checkpoint::CheckpointError;

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
