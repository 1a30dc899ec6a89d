//! The book of counted VMM handles and their mappings. Physical VMM memory is freed only when its
//! handle is released AND its last mapping is gone ("create, map, release the handle, keep using
//! the mapping" is the normal pattern), so a counted handle stays counted until both have
//! happened. The shim (`src/memory.rs`) asks this book when to uncount.

use std::collections::{BTreeMap, HashMap};

#[derive(Default, Debug)]
pub struct VmmBook {
    /// Counted handle → (live mappings, released).
    handles: HashMap<u64, (u32, bool)>,
    /// Mapping start address → (size, handle).
    maps: BTreeMap<u64, (u64, u64)>,
}

impl VmmBook {
    /// `handle` (a counted one) is now mapped at `[va, va+size)`.
    pub fn mapped(&mut self, va: u64, size: u64, handle: u64) {
        self.maps.insert(va, (size, handle));
        self.handles.entry(handle).or_insert((0, false)).0 += 1;
    }

    /// Forget the mappings that start inside `[va, va+size)`; returns released handles whose last
    /// mapping went away (to uncount now).
    pub fn unmapped(&mut self, va: u64, size: u64) -> Vec<u64> {
        let end = va.saturating_add(size);
        let gone: Vec<(u64, u64)> = self.maps.range(va..end).map(|(&a, &(_, h))| (a, h)).collect();
        let mut free = Vec::new();
        for (a, h) in gone {
            self.maps.remove(&a);
            if let Some(e) = self.handles.get_mut(&h) {
                e.0 = e.0.saturating_sub(1);
                if e.0 == 0 {
                    let released = e.1;
                    self.handles.remove(&h);
                    if released {
                        free.push(h);
                    }
                }
            }
        }
        free
    }

    /// The handle was released: true if it can be uncounted now (no live mapping).
    pub fn released(&mut self, handle: u64) -> bool {
        match self.handles.get_mut(&handle) {
            Some(e) if e.0 > 0 => {
                e.1 = true;
                false
            }
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    #[test]
    fn release_of_an_unmapped_handle_uncounts_at_once() {
        let mut b = VmmBook::default();
        assert!(b.released(7));
        assert!(b.unmapped(0, u64::MAX).is_empty());
    }

    #[test]
    fn mapped_then_released_then_unmapped_uncounts_at_the_unmap() {
        let mut b = VmmBook::default();
        b.mapped(0x1000_0000, 2 * MB, 7);
        assert!(!b.released(7), "a live mapping keeps the memory");
        assert_eq!(b.unmapped(0x1000_0000, 2 * MB), vec![7]);
        // Nothing is left to uncount twice.
        assert!(b.unmapped(0x1000_0000, 2 * MB).is_empty());
    }

    #[test]
    fn mapped_then_unmapped_then_released_uncounts_at_the_release() {
        let mut b = VmmBook::default();
        b.mapped(0x1000_0000, 2 * MB, 7);
        assert!(b.unmapped(0x1000_0000, 2 * MB).is_empty(), "not released yet: the handle stays counted");
        assert!(b.released(7));
    }

    #[test]
    fn partial_unmap_keeps_the_handle_until_its_last_mapping_goes() {
        let mut b = VmmBook::default();
        let va = 0x2000_0000;
        b.mapped(va, 2 * MB, 9);
        b.mapped(va + 2 * MB, 2 * MB, 9);
        assert!(!b.released(9));
        assert!(b.unmapped(va, 2 * MB).is_empty(), "one mapping of two remains");
        assert_eq!(b.unmapped(va + 2 * MB, 2 * MB), vec![9]);
    }

    #[test]
    fn one_unmap_over_several_mappings_frees_each_released_handle_once() {
        let mut b = VmmBook::default();
        let va = 0x3000_0000;
        b.mapped(va, MB, 1);
        b.mapped(va + MB, MB, 2);
        b.mapped(va + 2 * MB, MB, 2);
        b.mapped(va + 3 * MB, MB, 3);
        assert!(!b.released(1));
        assert!(!b.released(2));
        // Handle 3 not released: unmapping it frees nothing, a later release does.
        let mut free = b.unmapped(va, 4 * MB);
        free.sort_unstable();
        assert_eq!(free, vec![1, 2]);
        assert!(b.released(3));
    }

    #[test]
    fn unmap_of_a_range_that_holds_no_mapping_start_changes_nothing() {
        let mut b = VmmBook::default();
        b.mapped(0x4000_0000, 2 * MB, 5);
        assert!(b.unmapped(0x4000_0000 + MB, MB).is_empty());
        assert!(b.unmapped(0x5000_0000, MB).is_empty());
        assert!(b.unmapped(0x4000_0000, 0).is_empty(), "an empty range holds nothing");
        assert!(!b.released(5), "the mapping is still live");
        assert_eq!(b.unmapped(0x4000_0000, 2 * MB), vec![5]);
    }

    #[test]
    fn unmap_near_the_top_of_the_address_space_does_not_overflow() {
        let mut b = VmmBook::default();
        b.mapped(u64::MAX - MB, MB, 4);
        assert!(!b.released(4));
        assert_eq!(b.unmapped(u64::MAX - MB, u64::MAX), vec![4]);
    }

    #[test]
    fn a_remapped_address_is_counted_once_per_live_mapping() {
        // The same handle mapped at two addresses; released between the unmaps.
        let mut b = VmmBook::default();
        b.mapped(0x6000_0000, MB, 8);
        b.mapped(0x7000_0000, MB, 8);
        assert!(b.unmapped(0x6000_0000, MB).is_empty());
        assert!(!b.released(8));
        assert_eq!(b.unmapped(0x7000_0000, MB), vec![8]);
    }
}
