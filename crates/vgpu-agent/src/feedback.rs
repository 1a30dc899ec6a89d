//! The monitor's feedback decisions (HAMi `cmd/vGPUmonitor/feedback.go`, `Observe`;
//! docs/hami-contract.md §4.2), as a pure function over the containers' control words.
//!
//! Field for field:
//! 1. Census: a container with `recent_kernel > 0` gets it decremented (stored even when the
//!    result is 0); if the result is still > 0 it counts as active at its priority on each device
//!    whose UUID field is valid (byte 0 ≠ 0). A negative priority is not counted.
//! 2. Blocking: if any container active at a smaller priority number (≥ 0) shares one of this
//!    container's UUIDs, `recent_kernel = -1` unless it already is negative; otherwise a negative
//!    `recent_kernel` becomes 0.
//! 3. Switch: the blocking condition, or more than one active container at this container's own
//!    priority on a shared UUID, sets `utilization_switch = 1`; otherwise 0. Written only when it
//!    changes.
//!
//! UUIDs match on the whole 96-byte field. HAMi keeps per-UUID counts in a slice indexed by
//! priority (so a huge priority would allocate a huge slice); a sorted map gives the same answers.

use std::collections::{BTreeMap, HashMap};
use vgpu_core::region::{MAX_DEVICES, UUID_LEN};

/// The control words of one container, as read this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Control {
    pub priority: i32,
    pub recent_kernel: i32,
    pub utilization_switch: i32,
    /// `uuids[d]`, all 16 fields.
    pub uuids: Vec<[u8; UUID_LEN]>,
}

/// Which control word a store goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    RecentKernel,
    UtilizationSwitch,
}

impl Field {
    pub fn label(self) -> &'static str {
        match self {
            Field::RecentKernel => "recent_kernel",
            Field::UtilizationSwitch => "utilization_switch",
        }
    }
}

/// One aligned 32-bit store, in the order the monitor makes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Store {
    pub container: usize,
    pub field: Field,
    pub value: i32,
}

type Census = HashMap<[u8; UUID_LEN], BTreeMap<i32, u32>>;

fn valid(uuid: &[u8; UUID_LEN]) -> bool {
    uuid[0] != 0
}

/// Any container active at a priority number below `p` on one of `c`'s UUIDs.
fn higher_active(census: &Census, p: i32, c: &Control) -> bool {
    c.uuids.iter().take(MAX_DEVICES).any(|u| census.get(u).is_some_and(|m| m.range(..p).any(|(_, &n)| n > 0)))
}

fn same_priority_contended(census: &Census, p: i32, c: &Control) -> bool {
    p >= 0 && c.uuids.iter().take(MAX_DEVICES).any(|u| census.get(u).and_then(|m| m.get(&p)).is_some_and(|&n| n > 1))
}

/// Runs one `Observe` pass over `containers` (updated in place) and returns the stores made.
pub fn observe(containers: &mut [Control]) -> Vec<Store> {
    let mut stores = Vec::new();
    let mut census = Census::new();
    for (i, c) in containers.iter_mut().enumerate() {
        if c.recent_kernel > 0 {
            let rk = c.recent_kernel - 1;
            if rk > 0 && c.priority >= 0 {
                for u in c.uuids.iter().take(MAX_DEVICES).filter(|u| valid(u)) {
                    *census.entry(*u).or_default().entry(c.priority).or_insert(0) += 1;
                }
            }
            c.recent_kernel = rk;
            stores.push(Store { container: i, field: Field::RecentKernel, value: rk });
        }
    }
    for (i, c) in containers.iter_mut().enumerate() {
        let p = c.priority;
        if higher_active(&census, p, c) {
            if c.recent_kernel >= 0 {
                c.recent_kernel = -1;
                stores.push(Store { container: i, field: Field::RecentKernel, value: -1 });
            }
        } else if c.recent_kernel < 0 {
            c.recent_kernel = 0;
            stores.push(Store { container: i, field: Field::RecentKernel, value: 0 });
        }
        let on = higher_active(&census, p, c) || same_priority_contended(&census, p, c);
        let want = i32::from(on);
        if c.utilization_switch != want {
            c.utilization_switch = want;
            stores.push(Store { container: i, field: Field::UtilizationSwitch, value: want });
        }
    }
    stores
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uuid(s: &str) -> [u8; UUID_LEN] {
        let mut f = [0u8; UUID_LEN];
        f[..s.len()].copy_from_slice(s.as_bytes());
        f
    }

    const A: &str = "GPU-aaaaaaaa-0000-4000-8000-000000000000";
    const B: &str = "GPU-bbbbbbbb-0000-4000-8000-000000000000";

    /// (priority, recent_kernel, switch, devices)
    fn ctl(p: i32, rk: i32, sw: i32, devs: &[&str]) -> Control {
        let mut uuids = vec![[0u8; UUID_LEN]; MAX_DEVICES];
        for (d, u) in devs.iter().enumerate() {
            uuids[d] = uuid(u);
        }
        Control { priority: p, recent_kernel: rk, utilization_switch: sw, uuids }
    }

    /// (recent_kernel, switch) of every container after one pass.
    fn after(mut cs: Vec<Control>) -> Vec<(i32, i32)> {
        observe(&mut cs);
        cs.iter().map(|c| (c.recent_kernel, c.utilization_switch)).collect()
    }

    struct Case {
        rule: &'static str,
        before: Vec<Control>,
        want: Vec<(i32, i32)>,
    }

    #[test]
    fn observe_rule_table() {
        let cases = vec![
            Case {
                rule: "decrement before counting: 2 -> 1 counts, lone container: switch off",
                before: vec![ctl(1, 2, 1, &[A])],
                want: vec![(1, 0)],
            },
            Case {
                rule: "1 -> 0 is stored but not counted as active",
                before: vec![ctl(0, 1, 1, &[A]), ctl(1, 2, 1, &[A])],
                want: vec![(0, 0), (1, 0)],
            },
            Case {
                rule: "0 stays 0 (no store, not active)",
                before: vec![ctl(0, 0, 0, &[A]), ctl(1, 2, 0, &[A])],
                want: vec![(0, 0), (1, 0)],
            },
            Case {
                rule: "higher priority active on a shared UUID blocks the lower one and switches it on",
                before: vec![ctl(0, 2, 0, &[A]), ctl(1, 2, 0, &[A])],
                want: vec![(1, 0), (-1, 1)],
            },
            Case {
                rule: "blocking by any lower priority index (0 blocks 5)",
                before: vec![ctl(0, 3, 0, &[A]), ctl(5, 0, 0, &[A])],
                want: vec![(2, 0), (-1, 1)],
            },
            Case {
                rule: "an already negative recent_kernel is not rewritten while blocked",
                before: vec![ctl(0, 2, 0, &[A]), ctl(1, -7, 1, &[A])],
                want: vec![(1, 0), (-7, 1)],
            },
            Case {
                rule: "unblock: negative becomes 0 when nothing higher is active",
                before: vec![ctl(0, 1, 0, &[A]), ctl(1, -1, 1, &[A])],
                want: vec![(0, 0), (0, 0)],
            },
            Case {
                rule: "different GPUs do not interact",
                before: vec![ctl(0, 2, 1, &[A]), ctl(1, 2, 1, &[B])],
                want: vec![(1, 0), (1, 0)],
            },
            Case {
                rule: "any shared UUID counts (second device)",
                before: vec![ctl(0, 2, 0, &[B, A]), ctl(1, 2, 0, &[A])],
                want: vec![(1, 0), (-1, 1)],
            },
            Case {
                rule: "same-priority contention switches both on, blocks neither",
                before: vec![ctl(1, 2, 0, &[A]), ctl(1, 2, 0, &[A])],
                want: vec![(1, 1), (1, 1)],
            },
            Case {
                rule: "same priority, one idle: the active one is alone at its priority",
                before: vec![ctl(1, 2, 1, &[A]), ctl(1, 0, 1, &[A])],
                want: vec![(1, 0), (0, 0)],
            },
            Case {
                rule: "negative priority is ignored in the census",
                before: vec![ctl(-1, 2, 1, &[A]), ctl(0, 0, 0, &[A]), ctl(-1, 5, 0, &[A])],
                want: vec![(1, 0), (0, 0), (4, 0)],
            },
            Case {
                rule: "negative priority is never blocked (no index below it)",
                before: vec![ctl(0, 2, 0, &[A]), ctl(-3, 0, 0, &[A])],
                want: vec![(1, 0), (0, 0)],
            },
            Case {
                rule: "invalid UUIDs (byte 0 = 0) are skipped",
                before: vec![ctl(0, 2, 0, &["\0GPU-x"]), ctl(1, 2, 0, &["\0GPU-x"])],
                want: vec![(1, 0), (1, 0)],
            },
            Case {
                rule: "UUIDs match on the whole 96-byte field",
                before: vec![ctl(0, 2, 0, &[A]), {
                    let mut c = ctl(1, 2, 0, &[A]);
                    c.uuids[0][60] = b'x';
                    c
                }],
                want: vec![(1, 0), (1, 0)],
            },
            Case {
                rule: "the blocked container still counts itself as active (it was > 1)",
                before: vec![ctl(0, 2, 0, &[A]), ctl(1, 2, 0, &[A]), ctl(1, 2, 0, &[A])],
                want: vec![(1, 0), (-1, 1), (-1, 1)],
            },
            Case {
                rule: "a huge priority is only a number (no allocation by priority)",
                before: vec![ctl(i32::MAX, 2, 0, &[A]), ctl(i32::MAX, 2, 0, &[A]), ctl(0, 0, 1, &[A])],
                want: vec![(1, 1), (1, 1), (0, 0)],
            },
            Case {
                rule: "switch written only when it changes; on stays on under contention",
                before: vec![ctl(0, 2, 1, &[A]), ctl(0, 2, 1, &[A])],
                want: vec![(1, 1), (1, 1)],
            },
        ];
        for c in cases {
            assert_eq!(after(c.before), c.want, "rule: {}", c.rule);
        }
    }

    #[test]
    fn stores_in_the_monitors_order_and_only_on_change() {
        let mut cs = vec![ctl(0, 2, 0, &[A]), ctl(1, 0, 0, &[A]), ctl(2, 0, 0, &[B])];
        let s = observe(&mut cs);
        assert_eq!(
            s,
            vec![
                Store { container: 0, field: Field::RecentKernel, value: 1 },
                Store { container: 1, field: Field::RecentKernel, value: -1 },
                Store { container: 1, field: Field::UtilizationSwitch, value: 1 },
            ]
        );
        // Steady state of idle containers: no stores at all.
        let mut idle = vec![ctl(0, 0, 0, &[A]), ctl(1, 0, 0, &[A])];
        assert!(observe(&mut idle).is_empty());
    }

    #[test]
    fn two_passes_release_the_block() {
        // The library writes 2 on launches; when it stops, the block lifts after two ticks.
        let mut cs = vec![ctl(0, 2, 0, &[A]), ctl(1, 2, 0, &[A])];
        observe(&mut cs);
        assert_eq!((cs[0].recent_kernel, cs[1].recent_kernel), (1, -1));
        observe(&mut cs);
        assert_eq!((cs[0].recent_kernel, cs[1].recent_kernel), (0, 0));
    }
}
