//! NVML views: what `nvidia-smi` and pynvml see inside the container.

use crate::ffi::*;
use crate::hooks::nvml::pfn;
use std::ffi::c_uint;

pub unsafe fn memory_info(real: pfn::nvmlDeviceGetMemoryInfo, dev: nvmlDevice_t, m: *mut nvmlMemory_t) -> nvmlReturn_t {
    unsafe { real(dev, m) }
}
pub unsafe fn memory_info_v2(real: pfn::nvmlDeviceGetMemoryInfo_v2, dev: nvmlDevice_t, m: *mut nvmlMemory_v2_t) -> nvmlReturn_t {
    unsafe { real(dev, m) }
}
pub unsafe fn running_processes_v1(real: pfn::nvmlDeviceGetComputeRunningProcesses, dev: nvmlDevice_t, n: *mut c_uint, p: *mut nvmlProcessInfo_v1_t) -> nvmlReturn_t {
    unsafe { real(dev, n, p) }
}
pub unsafe fn running_processes_v2(real: pfn::nvmlDeviceGetComputeRunningProcesses_v2, dev: nvmlDevice_t, n: *mut c_uint, p: *mut nvmlProcessInfo_t) -> nvmlReturn_t {
    unsafe { real(dev, n, p) }
}
pub unsafe fn running_processes_v3(real: pfn::nvmlDeviceGetComputeRunningProcesses_v3, dev: nvmlDevice_t, n: *mut c_uint, p: *mut nvmlProcessInfo_t) -> nvmlReturn_t {
    unsafe { real(dev, n, p) }
}
