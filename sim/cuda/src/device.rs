//! Version, error strings and device queries (H100-like attributes).

use crate::context::check_dev;
use crate::types::*;
use crate::{check_init, cu_try, nonnull, out, state};
use std::ffi::{CStr, c_char};

pub(crate) const DEVICE_NAME: &str = "NVIDIA H100 80GB HBM3";

pub(crate) fn driver_get_version(v: *mut i32) -> CUresult {
    cu_try!({
        let ver = crate::state_opt().map(|s| s.driver_version()).unwrap_or(12090);
        unsafe { out(v, ver) }
    })
}

pub(crate) fn get_error_name(e: CUresult, p: *mut *const c_char, descr: bool) -> CUresult {
    if p.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // Static NUL-terminated copies.
    static TABLE: std::sync::OnceLock<Vec<(CUresult, std::ffi::CString, std::ffi::CString)>> =
        std::sync::OnceLock::new();
    let t = TABLE.get_or_init(|| {
        ERRORS
            .iter()
            .map(|(c, n, d)| (*c, std::ffi::CString::new(*n).unwrap(), std::ffi::CString::new(*d).unwrap()))
            .collect()
    });
    match t.iter().find(|(c, _, _)| *c == e) {
        Some((_, n, d)) => {
            unsafe { *p = if descr { d.as_ptr() } else { n.as_ptr() } };
            CUDA_SUCCESS
        }
        None => {
            unsafe { *p = std::ptr::null() };
            CUDA_ERROR_INVALID_VALUE
        }
    }
}

pub(crate) fn device_get_count(n: *mut i32) -> CUresult {
    cu_try!({
        check_init()?;
        unsafe { out(n, crate::visible().len() as i32) }
    })
}

pub(crate) fn device_get(d: *mut CUdevice, ordinal: i32) -> CUresult {
    cu_try!({
        crate::nonnull(d)?;
        check_dev(ordinal)?;
        unsafe { out(d, ordinal as CUdevice) }
    })
}

unsafe fn write_str(dst: *mut c_char, len: i32, s: &str) -> Result<(), CUresult> {
    if dst.is_null() || len <= 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let b = s.as_bytes();
    let n = b.len().min(len as usize - 1);
    unsafe {
        std::ptr::copy_nonoverlapping(b.as_ptr(), dst as *mut u8, n);
        *dst.add(n) = 0;
    }
    Ok(())
}

pub(crate) fn device_get_name(name: *mut c_char, len: i32, dev: CUdevice) -> CUresult {
    cu_try!({
        check_dev(dev)?;
        unsafe { write_str(name, len, DEVICE_NAME) }
    })
}

pub(crate) fn device_total_mem(bytes: *mut usize, dev: CUdevice) -> CUresult {
    cu_try!({
        let d = check_dev(dev)?;
        unsafe { out(bytes, state().device_total(d) as usize) }
    })
}

/// The 16 bytes of a `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` UUID.
pub(crate) fn uuid_bytes(s: &str) -> [u8; 16] {
    let hex: Vec<u8> = s.trim_start_matches("GPU-").bytes().filter(|c| c.is_ascii_hexdigit()).collect();
    let mut out = [0u8; 16];
    if hex.len() >= 32 {
        for i in 0..16 {
            let h = std::str::from_utf8(&hex[2 * i..2 * i + 2]).unwrap();
            out[i] = u8::from_str_radix(h, 16).unwrap();
        }
    } else {
        for (i, b) in s.bytes().enumerate() {
            out[i % 16] = out[i % 16].wrapping_mul(31).wrapping_add(b);
        }
    }
    out
}

pub(crate) fn device_get_uuid(uuid: *mut CUuuid, dev: CUdevice) -> CUresult {
    cu_try!({
        let d = check_dev(dev)?;
        unsafe { out(uuid, CUuuid { bytes: uuid_bytes(&state().device_uuid(d)) }) }
    })
}

pub(crate) fn pci_bus_id_string(dev: usize) -> String {
    format!("0000:{:02x}:00.0", state().device_pci_bus(dev))
}

pub(crate) fn device_get_pci_bus_id(buf: *mut c_char, len: i32, dev: CUdevice) -> CUresult {
    cu_try!({
        let d = check_dev(dev)?;
        unsafe { write_str(buf, len, &pci_bus_id_string(d)) }
    })
}

/// Parse `[domain:]bus:device.function` (hex) into (domain, bus, device).
pub(crate) fn parse_bus_id(s: &str) -> Option<(u32, u32, u32)> {
    let s = s.trim();
    let (rest, _func) = s.rsplit_once('.').unwrap_or((s, "0"));
    let parts: Vec<&str> = rest.split(':').collect();
    let p = |x: &str| u32::from_str_radix(x, 16).ok();
    match parts.as_slice() {
        [d, b, dv] => Some((p(d)?, p(b)?, p(dv)?)),
        [b, dv] => Some((0, p(b)?, p(dv)?)),
        _ => None,
    }
}

pub(crate) fn device_get_by_pci_bus_id(dev: *mut CUdevice, bus_id: *const c_char) -> CUresult {
    cu_try!({
        check_init()?;
        nonnull(dev)?;
        nonnull(bus_id)?;
        let s = unsafe { CStr::from_ptr(bus_id) }.to_string_lossy();
        let (dom, bus, device) = parse_bus_id(&s).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let st = state();
        for (ordinal, &d) in crate::visible().iter().enumerate() {
            if dom == 0 && device == 0 && bus == st.device_pci_bus(d) {
                return unsafe { out(dev, ordinal as CUdevice) };
            }
        }
        Err(CUDA_ERROR_INVALID_DEVICE)
    })
}

pub(crate) fn device_compute_capability(major: *mut i32, minor: *mut i32, dev: CUdevice) -> CUresult {
    cu_try!({
        check_dev(dev)?;
        unsafe {
            out(major, 9)?;
            out(minor, 0)
        }
    })
}

/// Plausible H100 SXM values for every attribute 1..=143.
pub(crate) fn attribute_value(attr: i32, dev: usize) -> Option<i32> {
    let sm = state().sm_count() as i32;
    Some(match attr {
        1 => 1024,                                // MAX_THREADS_PER_BLOCK
        2 | 3 => 1024,                            // MAX_BLOCK_DIM_X/Y
        4 => 64,                                  // MAX_BLOCK_DIM_Z
        5 => i32::MAX,                            // MAX_GRID_DIM_X
        6 | 7 => 65535,                           // MAX_GRID_DIM_Y/Z
        8 => 49152,                               // MAX_SHARED_MEMORY_PER_BLOCK
        9 => 65536,                               // TOTAL_CONSTANT_MEMORY
        10 => 32,                                 // WARP_SIZE
        11 => i32::MAX,                           // MAX_PITCH
        12 => 65536,                              // MAX_REGISTERS_PER_BLOCK
        13 => 1_980_000,                          // CLOCK_RATE (kHz)
        14 => 512,                                // TEXTURE_ALIGNMENT
        15 => 1,                                  // GPU_OVERLAP
        16 => sm,                                 // MULTIPROCESSOR_COUNT
        17 => 0,                                  // KERNEL_EXEC_TIMEOUT
        18 => 0,                                  // INTEGRATED
        19 => 1,                                  // CAN_MAP_HOST_MEMORY
        20 => 0,                                  // COMPUTE_MODE (default)
        21 => 131072,                             // MAXIMUM_TEXTURE1D_WIDTH
        22 => 131072,                             // MAXIMUM_TEXTURE2D_WIDTH
        23 => 65536,                              // MAXIMUM_TEXTURE2D_HEIGHT
        24..=26 => 16384,                         // MAXIMUM_TEXTURE3D_*
        27 | 28 => 32768,                         // MAXIMUM_TEXTURE2D_LAYERED_WIDTH/HEIGHT
        29 => 2048,                               // MAXIMUM_TEXTURE2D_LAYERED_LAYERS
        30 => 512,                                // SURFACE_ALIGNMENT
        31 => 1,                                  // CONCURRENT_KERNELS
        32 => 1,                                  // ECC_ENABLED
        33 => state().device_pci_bus(dev) as i32, // PCI_BUS_ID
        34 => 0,                                  // PCI_DEVICE_ID
        35 => 0,                                  // TCC_DRIVER
        36 => 2_619_000,                          // MEMORY_CLOCK_RATE (kHz)
        37 => 5120,                               // GLOBAL_MEMORY_BUS_WIDTH
        38 => 52_428_800,                         // L2_CACHE_SIZE
        39 => 2048,                               // MAX_THREADS_PER_MULTIPROCESSOR
        40 => 3,                                  // ASYNC_ENGINE_COUNT
        41 => 1,                                  // UNIFIED_ADDRESSING
        42 => 32768,                              // MAXIMUM_TEXTURE1D_LAYERED_WIDTH
        43 => 2048,                               // MAXIMUM_TEXTURE1D_LAYERED_LAYERS
        44 => 0,                                  // CAN_TEX2D_GATHER (deprecated)
        45 | 46 => 32768,                         // MAXIMUM_TEXTURE2D_GATHER_WIDTH/HEIGHT
        47 | 48 => 8192,                          // MAXIMUM_TEXTURE3D_WIDTH/HEIGHT_ALTERNATE
        49 => 32768,                              // MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE
        50 => 0,                                  // PCI_DOMAIN_ID
        51 => 32,                                 // TEXTURE_PITCH_ALIGNMENT
        52 | 53 => 32768,                         // MAXIMUM_TEXTURECUBEMAP_WIDTH, _LAYERED_WIDTH
        54 => 2046,                               // MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS
        55 => 32768,                              // MAXIMUM_SURFACE1D_WIDTH
        56 => 131072,                             // MAXIMUM_SURFACE2D_WIDTH
        57 => 65536,                              // MAXIMUM_SURFACE2D_HEIGHT
        58..=60 => 16384,                         // MAXIMUM_SURFACE3D_*
        61 => 32768,                              // MAXIMUM_SURFACE1D_LAYERED_WIDTH
        62 => 2048,                               // MAXIMUM_SURFACE1D_LAYERED_LAYERS
        63 | 64 => 32768,                         // MAXIMUM_SURFACE2D_LAYERED_WIDTH/HEIGHT
        65 => 2048,                               // MAXIMUM_SURFACE2D_LAYERED_LAYERS
        66 | 67 => 32768,                         // MAXIMUM_SURFACECUBEMAP_WIDTH, _LAYERED_WIDTH
        68 => 2046,                               // MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS
        69 => 268_435_456,                        // MAXIMUM_TEXTURE1D_LINEAR_WIDTH (deprecated)
        70 => 131072,                             // MAXIMUM_TEXTURE2D_LINEAR_WIDTH
        71 => 65000,                              // MAXIMUM_TEXTURE2D_LINEAR_HEIGHT
        72 => 2_097_120,                          // MAXIMUM_TEXTURE2D_LINEAR_PITCH
        73 | 74 => 32768,                         // MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH/HEIGHT
        75 => 9,                                  // COMPUTE_CAPABILITY_MAJOR
        76 => 0,                                  // COMPUTE_CAPABILITY_MINOR
        77 => 32768,                              // MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH
        78 => 1,                                  // STREAM_PRIORITIES_SUPPORTED
        79 | 80 => 1,                             // GLOBAL/LOCAL_L1_CACHE_SUPPORTED
        81 => 233_472,                            // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
        82 => 65536,                              // MAX_REGISTERS_PER_MULTIPROCESSOR
        83 => 1,                                  // MANAGED_MEMORY
        84 => 0,                                  // MULTI_GPU_BOARD
        85 => dev as i32,                         // MULTI_GPU_BOARD_GROUP_ID
        86 => 0,                                  // HOST_NATIVE_ATOMIC_SUPPORTED
        87 => 2,                                  // SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO
        88 => 0,                                  // PAGEABLE_MEMORY_ACCESS
        89 => 1,                                  // CONCURRENT_MANAGED_ACCESS
        90 => 1,                                  // COMPUTE_PREEMPTION_SUPPORTED
        91 => 1,                                  // CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM
        92..=94 => 0,                             // CAN_USE_STREAM_MEM_OPS_V1 etc. (deprecated)
        95 => 1,                                  // COOPERATIVE_LAUNCH
        96 => 1,                                  // COOPERATIVE_MULTI_DEVICE_LAUNCH (deprecated)
        97 => 232_448,                            // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        98 => 1,                                  // CAN_FLUSH_REMOTE_WRITES
        99 => 1,                                  // HOST_REGISTER_SUPPORTED
        100 => 0,                                 // PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES
        101 => 0,                                 // DIRECT_MANAGED_MEM_ACCESS_FROM_HOST
        102 => 1,                                 // VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
        103 => 1,                                 // HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
        104 | 105 => 0,                           // HANDLE_TYPE_WIN32(_KMT)_HANDLE_SUPPORTED
        106 => 32,                                // MAX_BLOCKS_PER_MULTIPROCESSOR
        107 => 1,                                 // GENERIC_COMPRESSION_SUPPORTED
        108 => 82_837_504,                        // MAX_PERSISTING_L2_CACHE_SIZE
        109 => 134_213_632,                       // MAX_ACCESS_POLICY_WINDOW_SIZE
        110 => 1,                                 // GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED
        111 => 1024,                              // RESERVED_SHARED_MEMORY_PER_BLOCK
        112 => 1,                                 // SPARSE_CUDA_ARRAY_SUPPORTED
        113 => 1,                                 // READ_ONLY_HOST_REGISTER_SUPPORTED
        114 => 1,                                 // TIMELINE_SEMAPHORE_INTEROP_SUPPORTED
        115 => 1,                                 // MEMORY_POOLS_SUPPORTED
        116 => 1,                                 // GPU_DIRECT_RDMA_SUPPORTED
        117 => 1,                                 // GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS
        118 => 100,                               // GPU_DIRECT_RDMA_WRITES_ORDERING
        119 => 1,                                 // MEMPOOL_SUPPORTED_HANDLE_TYPES (POSIX fd)
        120 => 1,                                 // CLUSTER_LAUNCH
        121 => 1,                                 // DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED
        122 | 123 => 1,                           // CAN_USE_64_BIT_STREAM_MEM_OPS, CAN_USE_STREAM_WAIT_VALUE_NOR
        124 => 1,                                 // DMA_BUF_SUPPORTED
        125 => 1,                                 // IPC_EVENT_SUPPORTED
        126 => 4,                                 // MEM_SYNC_DOMAIN_COUNT
        127 => 1,                                 // TENSOR_MAP_ACCESS_SUPPORTED
        128 => 0,                                 // HANDLE_TYPE_FABRIC_SUPPORTED
        129 => 1,                                 // UNIFIED_FUNCTION_POINTERS
        130 => 0,                                 // NUMA_CONFIG
        131 => -1,                                // NUMA_ID
        132 => 0,                                 // MULTICAST_SUPPORTED
        133 => 0,                                 // MPS_ENABLED
        134 => 0,                                 // HOST_NUMA_ID
        135 => 0,                                 // D3D12_CIG_SUPPORTED
        136 | 137 => 0,                           // MEM_DECOMPRESS_ALGORITHM_MASK / MAXIMUM_LENGTH
        138 => 0,                                 // VULKAN_CIG_SUPPORTED
        139 => 0x2330_10de,                       // GPU_PCI_DEVICE_ID
        140 => 0x16c1_10de,                       // GPU_PCI_SUBSYSTEM_ID
        141..=143 => 0,                           // HOST_NUMA_* support
        _ => return None,
    })
}

pub(crate) fn device_get_attribute(pi: *mut i32, attr: i32, dev: CUdevice) -> CUresult {
    cu_try!({
        let d = check_dev(dev)?;
        let v = attribute_value(attr, d).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        unsafe { out(pi, v) }
    })
}
