//! The container's lowest measured cost per launch shape, shared by its processes (words 15-18 of
//! the device's extension block): a process whose own estimate of a signature is not confirmed
//! yet (or that has none) is charged at most this, so a newcomer process does not start from its
//! own first samples alone.
//!
//! Why: on a FIFO device a process's first samples queue behind the other processes' kernels
//! (its own container's and a burster's), so with 20 ms kernels × 4 processes each process's
//! first samples measure 30-90 ms, it re-prices itself into debt, and being in debt it launches
//! too little to get the clean sample that would refund it. A sample only ever over-states a
//! kernel's duration (queueing adds, nothing subtracts), so the lowest sample any process of the
//! container took of a shape is an upper bound of its cost, and the first clean sample anywhere in
//! the container lowers everybody's charge.
//!
//! * **Key** = a 24-bit tag of (kind, grid, block, dynamic shared memory); the function address
//!   differs between processes and is not part of it. Two kernels with one shape share the entry;
//!   the value is then the faster one's.
//! * **Safety.** The value is only a cap on *unconfirmed* estimates ([`super::cost`]): a
//!   process's own confirmed estimate is always what it is charged, and the confirming sample
//!   re-prices the whole open account at it, so a value that is too low (a shared shape, a slower
//!   kernel since, a dead process's stale word) costs at most the under-charge of a few launches
//!   until that process's own samples agree, which is then charged. A confirmed estimate above the
//!   shared value (beyond the cluster band) replaces it, so the entry follows a slow-down.
//! * **Layout.** Each word: tag (24 bits) << 40 | confirmed (bit 39) | ns (39 bits, ≤ ~550 s);
//!   0 = empty. Only a *confirmed* value (a process's samples agreed on it) is a basis for
//!   guessing a signature a process has never measured (no first-sample wait): a single first
//!   sample may be inflated by tens of ms, and other processes charged at it would start in debt. An entry is
//!   updated by CAS (lower only, or replaced by a higher confirmed value); a new tag takes an empty
//!   word, else the word `tag % 4` (four shapes at a time: the entry is a start-up aid, not a
//!   cache).

use super::cost::{CLUSTER_PPM, MIN_SAMPLE_NS, Sig};
use core::sync::atomic::AtomicU64;
use core::sync::atomic::Ordering::{AcqRel, Acquire};

pub const ENTRIES: usize = 4;
const NS_BITS: u32 = 39;
const NS_MASK: u64 = (1 << NS_BITS) - 1;
const CONFIRMED: u64 = 1 << NS_BITS;
const TAG_SHIFT: u32 = 40;

/// The shape tag of a signature (never 0).
pub fn tag(sig: &Sig) -> u64 {
    // FNV-1a over the process-independent fields.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |v: u64| {
        for b in v.to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(sig.kind as u64);
    sig.grid.iter().chain(sig.block.iter()).for_each(|&g| eat(g as u64));
    eat(sig.shmem as u64);
    ((h ^ (h >> 24) ^ (h >> 48)) & 0xff_ffff).max(1)
}

/// The container's lowest cost of a shape: ns, and whether a process confirmed it (its own samples
/// agreed on it) rather than offered a single, possibly inflated, sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Low {
    pub ns: u64,
    pub confirmed: bool,
}

fn unpack(w: u64) -> (u64, Low) {
    (w >> TAG_SHIFT, Low { ns: w & NS_MASK, confirmed: w & CONFIRMED != 0 })
}

fn pack(tag: u64, l: Low) -> u64 {
    tag << TAG_SHIFT | if l.confirmed { CONFIRMED } else { 0 } | l.ns.clamp(MIN_SAMPLE_NS, NS_MASK)
}

/// `a` is above `b` by more than the cluster band.
fn above_band(a: u64, b: u64) -> bool {
    a as u128 * 1_000_000 > b as u128 * (1_000_000 + CLUSTER_PPM) as u128
}

/// The container's lowest cost of shape `tag`, if it has one.
pub fn lookup(words: &[&AtomicU64; ENTRIES], tag: u64) -> Option<Low> {
    words
        .iter()
        .map(|w| unpack(w.load(Acquire)))
        .find(|&(t, l)| t == tag && l.ns != 0)
        .map(|(_, l)| Low { ns: l.ns.max(MIN_SAMPLE_NS), ..l })
}

/// What an entry becomes when a process offers `new` for its shape (`None`: unchanged).
fn merged(cur: Low, new: Low) -> Option<Low> {
    if new.confirmed && above_band(new.ns, cur.ns) {
        return Some(new); // the kernel is slower now (or another kernel of the shape): follow it
    }
    if new.ns < cur.ns {
        // Lower: a valid upper bound of the cost. Still confirmed if it is within the band of a
        // confirmed value (noise), else only as confirmed as the offer.
        return Some(Low { ns: new.ns, confirmed: new.confirmed || (cur.confirmed && !above_band(cur.ns, new.ns)) });
    }
    (new.confirmed && !cur.confirmed && !above_band(new.ns, cur.ns)).then_some(Low { confirmed: true, ..cur })
}

/// A process's estimate `est_ns` of shape `tag` (`confirmed`: its own samples agree on it).
pub fn offer(words: &[&AtomicU64; ENTRIES], tag: u64, est_ns: u64, confirmed: bool) {
    let offer = Low { ns: est_ns.clamp(MIN_SAMPLE_NS, NS_MASK), confirmed };
    let w = words
        .iter()
        .find(|w| unpack(w.load(Acquire)).0 == tag)
        .or_else(|| words.iter().find(|w| w.load(Acquire) == 0))
        .unwrap_or(&words[(tag % ENTRIES as u64) as usize]);
    let mut cur = w.load(Acquire);
    loop {
        let (t, l) = unpack(cur);
        let next = if t != tag || l.ns == 0 { Some(offer) } else { merged(l, offer) };
        let Some(next) = next else { return };
        match w.compare_exchange(cur, pack(tag, next), AcqRel, Acquire) {
            Ok(_) => return,
            Err(v) => cur = v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words() -> [AtomicU64; ENTRIES] {
        Default::default()
    }

    fn refs(w: &[AtomicU64; ENTRIES]) -> [&AtomicU64; ENTRIES] {
        [&w[0], &w[1], &w[2], &w[3]]
    }

    #[test]
    fn tag_ignores_the_function_address() {
        let a = Sig::kernel(0x1000, [20000, 1, 1], [128, 1, 1], 0);
        let b = Sig::kernel(0x7fff_0000, [20000, 1, 1], [128, 1, 1], 0);
        assert_eq!(tag(&a), tag(&b));
        assert_ne!(tag(&a), tag(&Sig::kernel(0x1000, [50, 1, 1], [128, 1, 1], 0)));
        assert_ne!(tag(&a), 0);
    }

    #[test]
    fn lowest_wins_and_a_confirmed_higher_value_replaces_it() {
        let st = words();
        let w = refs(&st);
        let low = |ns, confirmed| Some(Low { ns, confirmed });
        assert_eq!(lookup(&w, 7), None);
        offer(&w, 7, 60_000_000, false);
        offer(&w, 7, 90_000_000, false); // an inflated sample does not raise it
        assert_eq!(lookup(&w, 7), low(60_000_000, false));
        offer(&w, 7, 20_000_000, false);
        assert_eq!(lookup(&w, 7), low(20_000_000, false));
        offer(&w, 7, 21_000_000, true); // within the cluster band: kept, and now confirmed
        assert_eq!(lookup(&w, 7), low(20_000_000, true));
        offer(&w, 7, 19_500_000, false); // noise below a confirmed value stays confirmed
        assert_eq!(lookup(&w, 7), low(19_500_000, true));
        offer(&w, 7, 5_000_000, false); // far below: another kernel of the shape, not confirmed
        assert_eq!(lookup(&w, 7), low(5_000_000, false));
        offer(&w, 7, 30_000_000, true); // the kernel is slower now (or another kernel of the shape)
        assert_eq!(lookup(&w, 7), low(30_000_000, true));
    }

    #[test]
    fn shapes_take_free_words_then_evict_by_tag() {
        let st = words();
        let w = refs(&st);
        for t in 1..=4 {
            offer(&w, t, t * 1000, false);
        }
        let ns = |t| lookup(&w, t).map(|l| l.ns);
        for t in 1..=4 {
            assert_eq!(ns(t), Some(t * 1000));
        }
        offer(&w, 9, 5000, false); // full: replaces word 9 % 4 = 1 (tag 2)
        assert_eq!(ns(9), Some(5000));
        assert_eq!(ns(2), None);
        assert_eq!(ns(1), Some(1000));
        // Values are clamped into the word (and a garbage word never yields 0).
        offer(&w, 3, 0, false);
        assert_eq!(ns(3), Some(MIN_SAMPLE_NS));
        st[3].store(5 << TAG_SHIFT, core::sync::atomic::Ordering::Relaxed);
        assert_eq!(lookup(&w, 5), None);
    }
}
