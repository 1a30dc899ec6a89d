//! CUDA arrays and mipmapped arrays: no backing, only device memory charged
//! (width × height × depth × channels × element size, rounded up to 2 MiB).

use crate::context::current;
use crate::memory::{charge, uncharge};
use crate::sim::{self, Sim};
use crate::types::*;
use crate::{check_init, cu_try, nonnull, out};
use sim_state::{GRANULE, round_up};

pub(crate) struct Array {
    pub ctx: u64,
    pub dev: usize,
    pub charged: u64,
    pub desc: CUDA_ARRAY3D_DESCRIPTOR,
}

pub(crate) struct Mipmap {
    pub ctx: u64,
    pub dev: usize,
    pub charged: u64,
}

pub(crate) fn element_size(format: u32) -> Option<u64> {
    Some(match format {
        0x01 | 0x08 => 1,        // UNSIGNED_INT8, SIGNED_INT8
        0x02 | 0x09 | 0x10 => 2, // UNSIGNED_INT16, SIGNED_INT16, HALF
        0x03 | 0x0a | 0x20 => 4, // UNSIGNED_INT32, SIGNED_INT32, FLOAT
        0xb0 => 2,               // NV12 (approx.)
        0xc0 | 0xc6 => 1,        // UNORM/SNORM_INT8X1
        0xc1 | 0xc7 | 0xc3 | 0xc9 => 2,
        0xc2 | 0xc8 | 0xc4 | 0xca => 4,
        0xc5 | 0xcb => 8,
        0x91..=0x9e => 1, // block-compressed (approx.)
        _ => return None,
    })
}

fn bytes_of(d: &CUDA_ARRAY3D_DESCRIPTOR) -> Result<u64, CUresult> {
    let e = element_size(d.format).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if d.width == 0 || !matches!(d.num_channels, 1 | 2 | 4) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    (d.width as u64)
        .checked_mul(d.height.max(1) as u64)
        .and_then(|x| x.checked_mul(d.depth.max(1) as u64))
        .and_then(|x| x.checked_mul(d.num_channels as u64 * e))
        .ok_or(CUDA_ERROR_INVALID_VALUE)
}

fn create(ph: *mut CUarray, d: CUDA_ARRAY3D_DESCRIPTOR) -> CUresult {
    cu_try!({
        nonnull(ph)?;
        let mut sim = sim::lock();
        let (ctx, dev) = current(&mut sim)?;
        let bytes = round_up(bytes_of(&d)?, GRANULE);
        charge(dev, bytes)?;
        let h = sim::new_handle();
        sim.arrays.insert(h, Array { ctx, dev, charged: bytes, desc: d });
        unsafe { out(ph, h as CUarray) }
    })
}

pub(crate) fn array_create(ph: *mut CUarray, d: *const CUDA_ARRAY_DESCRIPTOR) -> CUresult {
    if d.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let d = unsafe { *d };
    create(
        ph,
        CUDA_ARRAY3D_DESCRIPTOR {
            width: d.width,
            height: d.height,
            depth: 0,
            format: d.format,
            num_channels: d.num_channels,
            flags: 0,
        },
    )
}

pub(crate) fn array3d_create(ph: *mut CUarray, d: *const CUDA_ARRAY3D_DESCRIPTOR) -> CUresult {
    if d.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    create(ph, unsafe { *d })
}

pub(crate) fn array_destroy(h: CUarray) -> CUresult {
    cu_try!({
        check_init()?;
        let a = sim::lock().arrays.remove(&(h as u64)).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        uncharge(a.dev, a.charged);
        Ok(())
    })
}

pub(crate) fn array_get_descriptor(d: *mut CUDA_ARRAY_DESCRIPTOR, h: CUarray) -> CUresult {
    cu_try!({
        check_init()?;
        let sim = sim::lock();
        let a = sim.arrays.get(&(h as u64)).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        let x = a.desc;
        unsafe {
            out(
                d,
                CUDA_ARRAY_DESCRIPTOR {
                    width: x.width,
                    height: x.height,
                    format: x.format,
                    num_channels: x.num_channels,
                },
            )
        }
    })
}

pub(crate) fn array3d_get_descriptor(d: *mut CUDA_ARRAY3D_DESCRIPTOR, h: CUarray) -> CUresult {
    cu_try!({
        check_init()?;
        let sim = sim::lock();
        let a = sim.arrays.get(&(h as u64)).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        unsafe { out(d, a.desc) }
    })
}

pub(crate) fn mipmapped_create(ph: *mut CUmipmappedArray, d: *const CUDA_ARRAY3D_DESCRIPTOR, levels: u32) -> CUresult {
    cu_try!({
        nonnull(ph)?;
        nonnull(d)?;
        if levels == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let mut lvl = unsafe { *d };
        let mut total = 0u64;
        for _ in 0..levels {
            total += bytes_of(&lvl)?;
            lvl.width = (lvl.width / 2).max(1);
            if lvl.height > 0 {
                lvl.height = (lvl.height / 2).max(1);
            }
            if lvl.depth > 0 {
                lvl.depth = (lvl.depth / 2).max(1);
            }
        }
        let mut sim = sim::lock();
        let (ctx, dev) = current(&mut sim)?;
        let bytes = round_up(total, GRANULE);
        charge(dev, bytes)?;
        let h = sim::new_handle();
        sim.mipmaps.insert(h, Mipmap { ctx, dev, charged: bytes });
        unsafe { out(ph, h as CUmipmappedArray) }
    })
}

pub(crate) fn mipmapped_destroy(h: CUmipmappedArray) -> CUresult {
    cu_try!({
        check_init()?;
        let m = sim::lock().mipmaps.remove(&(h as u64)).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        uncharge(m.dev, m.charged);
        Ok(())
    })
}

pub(crate) fn free_ctx_arrays(sim: &mut Sim, ctx: u64) {
    let mut give = Vec::new();
    sim.arrays.retain(|_, a| {
        let keep = a.ctx != ctx;
        if !keep {
            give.push((a.dev, a.charged));
        }
        keep
    });
    sim.mipmaps.retain(|_, m| {
        let keep = m.ctx != ctx;
        if !keep {
            give.push((m.dev, m.charged));
        }
        keep
    });
    for (d, b) in give {
        uncharge(d, b);
    }
}
