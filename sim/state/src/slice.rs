//! Time-slicing between processes (`VGPU_SIM_TIMESLICE_US`): each process's work on a device is
//! one FIFO backlog; the device serves the processes with a backlog round-robin, a turn lasting at
//! most one slice (a kernel longer than a slice is split across turns) and ending early when the
//! process has nothing queued. Work is queued at launch and measured in ns of device time; a
//! process's work is identified by a ticket, its backlog's cumulative size after queuing it, and is
//! complete once the process's served time reaches the ticket.

/// One device's schedule, as plain values (the state file keeps it under a lock and copies it in
/// and out; tests drive it directly).
#[derive(Clone, Debug, PartialEq)]
pub struct Slicer {
    /// Slice length, ns.
    pub slice: u64,
    /// The schedule has been run up to here (CLOCK_MONOTONIC ns).
    pub clock: u64,
    /// The process whose turn it is and what is left of its turn (0: no turn in progress).
    pub cur: usize,
    pub turn_left: u64,
    /// Per process: cumulative queued and served device time, ns.
    pub queued: Vec<u64>,
    pub served: Vec<u64>,
}

impl Slicer {
    pub fn new(slice: u64, procs: usize) -> Slicer {
        Slicer { slice: slice.max(1), clock: 0, cur: 0, turn_left: 0, queued: vec![0; procs], served: vec![0; procs] }
    }

    pub fn backlog(&self, p: usize) -> u64 {
        self.queued[p].saturating_sub(self.served[p])
    }

    /// Queue `dur` ns of work for process `p` at the schedule's clock; returns its ticket.
    pub fn queue(&mut self, p: usize, dur: u64) -> u64 {
        self.queued[p] += dur;
        self.queued[p]
    }

    /// Run one piece of the schedule, not past `to`: `Some((process, start, end))`, or None when
    /// the clock reached `to` (an idle device jumps there).
    pub fn step(&mut self, to: u64) -> Option<(usize, u64, u64)> {
        if self.clock >= to {
            return None;
        }
        if self.turn_left == 0 || self.backlog(self.cur) == 0 {
            let n = self.queued.len();
            match (1..=n).map(|i| (self.cur + i) % n).find(|&p| self.backlog(p) > 0) {
                Some(p) => {
                    self.cur = p;
                    self.turn_left = self.slice;
                }
                None => {
                    self.clock = to;
                    self.turn_left = 0;
                    return None;
                }
            }
        }
        let run = self.turn_left.min(self.backlog(self.cur)).min(to - self.clock);
        let start = self.clock;
        self.clock += run;
        self.turn_left -= run;
        self.served[self.cur] += run;
        Some((self.cur, start, self.clock))
    }

    /// Run the schedule up to `to`, handing each executed piece to `ran`.
    pub fn advance(&mut self, to: u64, mut ran: impl FnMut(usize, u64, u64)) {
        while let Some((p, s, e)) = self.step(to) {
            ran(p, s, e);
        }
    }

    /// When process `p`'s served time reaches `ticket` if no further work is queued (the earliest
    /// it can: later work of others only delays it). The clock when already reached.
    pub fn predict(&self, p: usize, ticket: u64) -> u64 {
        if self.served[p] >= ticket {
            return self.clock;
        }
        let mut s = self.clone();
        loop {
            let before = s.served[p];
            match s.step(u64::MAX) {
                Some((q, start, _)) if q == p && s.served[p] >= ticket => return start + (ticket - before),
                Some(_) => {}
                None => return u64::MAX, // never queued
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn two_long_queues_share_the_device_evenly() {
        let mut s = Slicer::new(MS, 4);
        s.clock = 1000;
        s.queue(0, 500 * MS);
        s.queue(2, 500 * MS);
        let mut busy = [0u64; 4];
        s.advance(1000 + 301 * MS, |p, a, b| busy[p] += b - a);
        assert_eq!(busy[0] + busy[2], 301 * MS);
        assert!(busy[0].abs_diff(busy[2]) <= MS, "{busy:?}");
        assert_eq!(s.served[0], busy[0]);
    }

    #[test]
    fn a_newcomer_behind_a_deep_queue_waits_about_one_slice() {
        let mut s = Slicer::new(MS, 2);
        // Process 0 has a 20 ms queue of 5 ms kernels and has run 0.3 ms of its turn.
        for _ in 0..4 {
            s.queue(0, 5 * MS);
        }
        s.advance(300_000, |_, _, _| {});
        let t = s.queue(1, 200_000);
        let done = s.predict(1, t);
        assert_eq!(done, MS + 200_000, "rest of the slice, then its own 0.2 ms");
        let mut pieces = Vec::new();
        s.advance(done, |p, a, b| pieces.push((p, a, b)));
        assert_eq!(pieces, vec![(0, 300_000, MS), (1, MS, MS + 200_000)]);
        // Then process 0 resumes: its 20 ms end 0.2 ms later than alone.
        assert_eq!(s.predict(0, 20 * MS), 20 * MS + 200_000);
    }

    #[test]
    fn a_long_kernel_is_split_and_an_idle_process_gives_up_its_turn() {
        let mut s = Slicer::new(MS, 2);
        s.queue(0, 3 * MS);
        s.advance(MS / 5, |_, _, _| {});
        s.queue(1, MS / 2);
        let mut pieces = Vec::new();
        s.advance(10 * MS, |p, a, b| pieces.push((p, a, b)));
        assert_eq!(
            pieces,
            vec![(0, MS / 5, MS), (1, MS, 3 * MS / 2), (0, 3 * MS / 2, 5 * MS / 2), (0, 5 * MS / 2, 7 * MS / 2)]
        );
        assert_eq!(s.clock, 10 * MS);
        assert_eq!(s.backlog(0) + s.backlog(1), 0);
        // An idle device starts new work at once.
        let t = s.queue(1, 1000);
        assert_eq!(s.predict(1, t), 10 * MS + 1000);
    }
}
