//! The container's lowest measured cost per launch shape, shared by its processes (the
//! `low_costs` words of the device's extension block): a process whose own estimate of a
//! signature is not confirmed yet (or that has none) is charged at most this, so a newcomer does
//! not start from its own first samples alone, which queue behind the other processes' kernels.
//! A sample only ever over-states a kernel, so the lowest any process took is an upper bound.
//! Reasoning: docs/design.md "Cost prediction".
//!
//! * **Key**: a 20-bit tag of (kind, grid, block, dynamic shared memory), not the function
//!   address (it differs between processes); two kernels of one shape share the entry.
//! * **Only lower, and only for a while.** An offer replaces the value when lower; nothing raises
//!   it (two samples agreeing on a queue would re-price every process into debt). An entry lives
//!   one to two [`EPOCH_NS`] epochs unless an offer within the cluster band renews it.
//! * **Layout.** Tag (20 bits) << 44 | epoch mod 16 (4 bits) << 40 | confirmed (bit 39) | ns (39
//!   bits, ≤ ~550 s); 0 = empty. CAS; a new tag takes an empty or expired word, else word
//!   `tag % 4`. Only a *confirmed* value (a process's samples agreed on it) is a basis for
//!   guessing a signature a process never measured.

use super::{CLUSTER_PPM, MIN_SAMPLE_NS, Sig};
use core::sync::atomic::AtomicU64;
use core::sync::atomic::Ordering::{AcqRel, Acquire};

pub const ENTRIES: usize = 4;
/// An entry's lifetime unit (the cost floor's horizon, [`super::FLOOR_BUCKETS`] s).
pub const EPOCH_NS: u64 = 16_000_000_000;
const NS_BITS: u32 = 39;
const NS_MASK: u64 = (1 << NS_BITS) - 1;
const CONFIRMED: u64 = 1 << NS_BITS;
const EPOCH_SHIFT: u32 = 40;
const TAG_SHIFT: u32 = 44;

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
    ((h ^ (h >> 20) ^ (h >> 40)) & 0xf_ffff).max(1)
}

/// The container's lowest cost of a shape: ns, and whether a process confirmed it (its own samples
/// agreed on it) rather than offered a single, possibly inflated, sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Low {
    pub ns: u64,
    pub confirmed: bool,
}

#[derive(Clone, Copy)]
struct Entry {
    tag: u64,
    epoch: u64,
    low: Low,
}

fn unpack(w: u64) -> Entry {
    Entry {
        tag: w >> TAG_SHIFT,
        epoch: (w >> EPOCH_SHIFT) & 0xf,
        low: Low { ns: w & NS_MASK, confirmed: w & CONFIRMED != 0 },
    }
}

fn pack(e: Entry) -> u64 {
    e.tag << TAG_SHIFT
        | (e.epoch & 0xf) << EPOCH_SHIFT
        | if e.low.confirmed { CONFIRMED } else { 0 }
        | e.low.ns.clamp(MIN_SAMPLE_NS, NS_MASK)
}

fn epoch(now: u64) -> u64 {
    (now / EPOCH_NS) & 0xf
}

/// Written in this epoch or the previous one.
fn fresh(e: &Entry, now: u64) -> bool {
    e.tag != 0 && e.low.ns != 0 && (epoch(now) + 16 - e.epoch) % 16 <= 1
}

/// `a` is above `b` by more than the cluster band.
fn above_band(a: u64, b: u64) -> bool {
    a as u128 * 1_000_000 > b as u128 * (1_000_000 + CLUSTER_PPM) as u128
}

/// The container's lowest cost of shape `tag` at `now` (CLOCK_MONOTONIC), if it has a fresh one.
pub fn lookup(words: &[AtomicU64; ENTRIES], tag: u64, now: u64) -> Option<Low> {
    words.iter().map(|w| unpack(w.load(Acquire))).find(|e| e.tag == tag && fresh(e, now)).map(|e| e.low)
}

/// What a fresh entry becomes when a process offers `new` for its shape (`None`: unchanged).
fn merged(cur: Low, new: Low) -> Option<Low> {
    if new.ns < cur.ns {
        // Lower: a valid upper bound of the cost. Still confirmed if it is within the band of a
        // confirmed value (noise), else only as confirmed as the offer.
        return Some(Low { ns: new.ns, confirmed: new.confirmed || (cur.confirmed && !above_band(cur.ns, new.ns)) });
    }
    // Within the band: renews the entry (and confirms it if the offer is confirmed).
    (!above_band(new.ns, cur.ns)).then_some(Low { confirmed: cur.confirmed || new.confirmed, ..cur })
}

/// A process's estimate `est_ns` of shape `tag` at `now` (`confirmed`: its own samples agree on it).
pub fn offer(words: &[AtomicU64; ENTRIES], tag: u64, est_ns: u64, confirmed: bool, now: u64) {
    let offer = Low { ns: est_ns.clamp(MIN_SAMPLE_NS, NS_MASK), confirmed };
    let w = words
        .iter()
        .find(|w| unpack(w.load(Acquire)).tag == tag)
        .or_else(|| words.iter().find(|w| !fresh(&unpack(w.load(Acquire)), now)))
        .unwrap_or(&words[(tag % ENTRIES as u64) as usize]);
    let mut cur = w.load(Acquire);
    loop {
        let e = unpack(cur);
        let next = if e.tag != tag || !fresh(&e, now) { Some(offer) } else { merged(e.low, offer) };
        let Some(low) = next else { return };
        let new = pack(Entry { tag, epoch: epoch(now), low });
        if new == cur {
            return;
        }
        match w.compare_exchange(cur, new, AcqRel, Acquire) {
            Ok(_) => return,
            Err(v) => cur = v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 100 * EPOCH_NS + 5;

    fn words() -> [AtomicU64; ENTRIES] {
        Default::default()
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
    fn only_lower_values_replace_and_the_band_confirms() {
        let st = words();
        let w = &st;
        let low = |ns, confirmed| Some(Low { ns, confirmed });
        assert_eq!(lookup(w, 7, T), None);
        offer(w, 7, 60_000_000, false, T);
        offer(w, 7, 90_000_000, false, T); // an inflated sample does not raise it
        assert_eq!(lookup(w, 7, T), low(60_000_000, false));
        offer(w, 7, 20_000_000, false, T);
        assert_eq!(lookup(w, 7, T), low(20_000_000, false));
        offer(w, 7, 21_000_000, true, T); // within the cluster band: kept, and now confirmed
        assert_eq!(lookup(w, 7, T), low(20_000_000, true));
        offer(w, 7, 19_500_000, false, T); // noise below a confirmed value stays confirmed
        assert_eq!(lookup(w, 7, T), low(19_500_000, true));
        // Two samples that agree on a queue confirm 40 ms in some process: no raise.
        offer(w, 7, 40_000_000, true, T);
        assert_eq!(lookup(w, 7, T), low(19_500_000, true));
        offer(w, 7, 5_000_000, false, T); // far below: another kernel of the shape, not confirmed
        assert_eq!(lookup(w, 7, T), low(5_000_000, false));
    }

    #[test]
    fn entries_expire_unless_renewed() {
        let st = words();
        let w = &st;
        offer(w, 7, 20_000_000, true, T);
        // Alive in the next epoch, renewed by an offer within the band ...
        assert!(lookup(w, 7, T + EPOCH_NS).is_some());
        offer(w, 7, 21_000_000, false, T + EPOCH_NS);
        assert!(lookup(w, 7, T + 2 * EPOCH_NS).is_some());
        // ... not by one above it (the value is not raised either): gone two epochs after its
        // last renewal, and then the next offer starts a new entry.
        offer(w, 7, 30_000_000, true, T + 2 * EPOCH_NS);
        assert_eq!(lookup(w, 7, T + 2 * EPOCH_NS).map(|l| l.ns), Some(20_000_000));
        assert_eq!(lookup(w, 7, T + 3 * EPOCH_NS), None);
        offer(w, 7, 30_000_000, true, T + 3 * EPOCH_NS);
        assert_eq!(lookup(w, 7, T + 3 * EPOCH_NS), Some(Low { ns: 30_000_000, confirmed: true }));
    }

    #[test]
    fn shapes_take_free_words_then_evict_by_tag() {
        let st = words();
        let w = &st;
        for t in 1..=4 {
            offer(w, t, t * 1000, false, T);
        }
        let ns = |t| lookup(w, t, T).map(|l| l.ns);
        for t in 1..=4 {
            assert_eq!(ns(t), Some(t * 1000));
        }
        offer(w, 9, 5000, false, T); // full: replaces word 9 % 4 = 1 (tag 2)
        assert_eq!(ns(9), Some(5000));
        assert_eq!(ns(2), None);
        assert_eq!(ns(1), Some(1000));
        // An expired word is reused before a live one is evicted.
        let later = T + 2 * EPOCH_NS;
        offer(w, 1, 1000, false, later - EPOCH_NS); // renew tag 1 only
        offer(w, 13, 7000, false, later);
        assert_eq!(lookup(w, 1, later).map(|l| l.ns), Some(1000));
        assert_eq!(lookup(w, 13, later).map(|l| l.ns), Some(7000));
        // Values are clamped into the word (and a garbage word never yields 0).
        offer(w, 3, 0, false, T);
        assert_eq!(ns(3), Some(MIN_SAMPLE_NS));
        st[3].store(5 << TAG_SHIFT | epoch(T) << EPOCH_SHIFT, core::sync::atomic::Ordering::Relaxed);
        assert_eq!(lookup(w, 5, T), None);
    }
}
