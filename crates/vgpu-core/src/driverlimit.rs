//! Where the driver enforces a memory limit itself: NVML 13.x reports, per device and cgroup,
//! the soft and hard limits the driver applies (`nvmlDeviceGetMemoryLimits_v1`, drivers r615+).
//! A hard limit there is enforced by the driver for every allocation of the cgroup, so the shim
//! refuses nothing itself (two limits would compete: ours could refuse what the driver grants, or
//! promise room the driver refuses) and its views report the driver's limit. Usage is counted as
//! always; the compute limit is unaffected.

/// `NVML_DEVICE_MEMORY_LIMIT_MAX`: no hard limit.
pub const NO_HARD_LIMIT: u64 = u64::MAX;

/// What NVML reported for our cgroup on one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverLimits {
    pub soft: u64,
    pub hard: u64,
}

/// The limits one device runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitPlan {
    /// What the shim refuses allocations against (0: nothing).
    pub enforced: u64,
    /// What the views (`cuMemGetInfo`, `cuDeviceTotalMem`, NVML memory info) report (0: none).
    pub shown: u64,
    /// The driver enforces a hard limit of its own.
    pub by_driver: bool,
}

/// The limits of a device whose configured limit is `ours` (0: none) when the driver reported
/// `driver` for our cgroup (`None`: no such API, no answer, or no limits set).
pub fn plan(ours: u64, driver: Option<DriverLimits>) -> LimitPlan {
    match driver {
        Some(d) if d.hard != NO_HARD_LIMIT && d.hard > 0 => LimitPlan { enforced: 0, shown: d.hard, by_driver: true },
        _ => LimitPlan { enforced: ours, shown: ours, by_driver: false },
    }
}

/// The `nameSpace` NVML wants for our cgroup ("full path to sysfs cgroup file name"), from the
/// text of `/proc/self/cgroup`: the unified (v2) hierarchy's `0::<path>` line under
/// `/sys/fs/cgroup`. `None` without a v2 line.
pub fn cgroup_namespace(proc_self_cgroup: &str) -> Option<String> {
    let path = proc_self_cgroup.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
    if !path.starts_with('/') {
        return None;
    }
    Some(if path == "/" { "/sys/fs/cgroup".to_string() } else { format!("/sys/fs/cgroup{path}") })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_driver_hard_limit_replaces_ours() {
        let d = Some(DriverLimits { soft: 0, hard: 8 << 30 });
        assert_eq!(plan(4 << 30, d), LimitPlan { enforced: 0, shown: 8 << 30, by_driver: true });
        assert_eq!(plan(0, d), LimitPlan { enforced: 0, shown: 8 << 30, by_driver: true });
        // A soft limit alone is not enforcement.
        let soft_only = Some(DriverLimits { soft: 1 << 30, hard: NO_HARD_LIMIT });
        assert_eq!(plan(4 << 30, soft_only), LimitPlan { enforced: 4 << 30, shown: 4 << 30, by_driver: false });
    }

    #[test]
    fn no_driver_limit_keeps_ours() {
        assert_eq!(plan(4 << 30, None), LimitPlan { enforced: 4 << 30, shown: 4 << 30, by_driver: false });
        let cleared = Some(DriverLimits { soft: 0, hard: NO_HARD_LIMIT });
        assert_eq!(plan(1 << 30, cleared), LimitPlan { enforced: 1 << 30, shown: 1 << 30, by_driver: false });
        let zero = Some(DriverLimits { soft: 0, hard: 0 });
        assert_eq!(plan(0, zero), LimitPlan { enforced: 0, shown: 0, by_driver: false });
    }

    #[test]
    fn namespace_from_proc_self_cgroup() {
        assert_eq!(
            cgroup_namespace("0::/kubepods.slice/pod1/cri-abc.scope\n").as_deref(),
            Some("/sys/fs/cgroup/kubepods.slice/pod1/cri-abc.scope")
        );
        assert_eq!(cgroup_namespace("0::/\n").as_deref(), Some("/sys/fs/cgroup"));
        // Hybrid: v1 lines first, the unified one last.
        assert_eq!(cgroup_namespace("12:memory:/docker/x\n0::/docker/x\n").as_deref(), Some("/sys/fs/cgroup/docker/x"));
        assert_eq!(cgroup_namespace("4:cpu:/a\n"), None);
        assert_eq!(cgroup_namespace(""), None);
        assert_eq!(cgroup_namespace("0::relative\n"), None);
    }
}
