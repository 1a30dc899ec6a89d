//! Interval arithmetic shared by the state file and its readers.

/// A busy interval on the device, CLOCK_MONOTONIC ns, `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    pub start: u64,
    pub end: u64,
}

/// Busy ns of `intervals` that lies before `until`.
pub fn busy_in_intervals(intervals: &[Interval], until: u64) -> u64 {
    intervals.iter().filter(|i| i.start < until).map(|i| i.end.min(until).saturating_sub(i.start)).sum()
}

/// Busy ns in the window `[from, to)`.
pub fn busy_between(intervals: &[Interval], from: u64, to: u64) -> u64 {
    busy_in_intervals(intervals, to).saturating_sub(busy_in_intervals(intervals, from))
}
