//! The guest memory region of a run of guest addresses, the last region
//! found kept: a request's descriptors almost always lie in one region
//! (the guest's RAM), so most lookups are one bounds check instead of
//! vm-memory's search over its regions (`find_region`) and, for a slice,
//! its checks again.
//!
//! Relies on: vm-memory's `GuestMemoryMmap` regions.

use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryRegion, GuestRegionMmap, MemoryRegionAddress};

use crate::queue::Mem;

/// Finds regions of one guest memory, remembering the last.
pub(crate) struct Regions<'m> {
    mem: &'m Mem,
    last: Option<&'m GuestRegionMmap<()>>,
}

impl<'m> Regions<'m> {
    pub(crate) fn new(mem: &'m Mem) -> Self {
        Self { mem, last: None }
    }

    /// The region holding all `len` bytes at `addr`, and where they start
    /// in it; None if no one region does (outside guest memory, or across
    /// two regions).
    #[inline]
    pub(crate) fn find(
        &mut self,
        addr: GuestAddress,
        len: u32,
    ) -> Option<(&'m GuestRegionMmap<()>, MemoryRegionAddress)> {
        if let Some(found) = self.last.and_then(|r| holds(r, addr, len)) {
            return Some(found);
        }
        let region = self.mem.find_region(addr)?;
        self.last = Some(region);
        holds(region, addr, len)
    }
}

/// Where `len` bytes at `addr` start in `region`, if it holds them all.
#[inline]
fn holds(
    region: &GuestRegionMmap<()>,
    addr: GuestAddress,
    len: u32,
) -> Option<(&GuestRegionMmap<()>, MemoryRegionAddress)> {
    let offset = addr.0.checked_sub(region.start_addr().0)?;
    (offset.checked_add(u64::from(len))? <= region.len()).then_some((region, MemoryRegionAddress(offset)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_in_one_region_are_found_and_others_not() {
        let mem = Mem::from_ranges(&[(GuestAddress(0x1000), 0x1000), (GuestAddress(0x2000), 0x2000)]).unwrap();
        let mut regions = Regions::new(&mem);
        let start = |r: Option<(&GuestRegionMmap<()>, MemoryRegionAddress)>| r.map(|(r, at)| (r.start_addr().0, at.0));
        assert_eq!(start(regions.find(GuestAddress(0x1800), 0x800)), Some((0x1000, 0x800)), "to the region's end");
        assert_eq!(start(regions.find(GuestAddress(0x1800), 0x801)), None, "into the next region");
        assert_eq!(start(regions.find(GuestAddress(0x3fff), 1)), Some((0x2000, 0x1fff)), "the other region");
        assert_eq!(start(regions.find(GuestAddress(0x1000), 0x10)), Some((0x1000, 0)), "back to the first");
        assert_eq!(start(regions.find(GuestAddress(0x4000), 1)), None, "past memory");
        assert_eq!(start(regions.find(GuestAddress(0x800), 0x1000)), None, "before memory");
        assert_eq!(start(regions.find(GuestAddress(u64::MAX), u32::MAX)), None, "overflowing");
    }
}
