//! A request slot of a virtqueue (queue.rs): what a request in flight
//! needs at its completion, and the lending of its data segments to the
//! block layer as one bio over the guest's own memory.
//!
//! A read or write whose data segments can be lent becomes one bio: one
//! segment is a `Bio::read`/`write` of one borrowed `Buf`; several are a
//! `Bio::readv`/`writev` of the slot's own `Vec<Buf>`, which moves into
//! the bio and comes back in its completion with its capacity
//! (`BioVec::into_vec`), so lending allocates nothing. The block layer
//! splits that bio only where the device's limits need it and completes
//! it once, with the first error (the kernel's bio_split_to_limits and
//! bio_endio of a chained parent).
//!
//! Relies on: mqblk's `Buf::borrowed`, `Bio` and `BioVec`; vm-memory's
//! host addresses (regions.rs); request.rs (`Segment`, `Kind`).

use std::sync::Arc;

use mqblk::{Bio, BioVec, Buf};
use vm_memory::{GuestAddress, GuestMemoryRegion};

use crate::queue::Mem;
use crate::regions::Regions;
use crate::request::{Kind, Segment};

/// A request in flight: what its completion needs.
pub(crate) struct Slot {
    pub(crate) head: u16,
    /// The chain's position in the avail ring: its turn in the used ring.
    pub(crate) avail_pos: u16,
    pub(crate) status: GuestAddress,
    pub(crate) kind: Kind,
    /// The request's data segments in the guest (request::parse).
    pub(crate) data: Vec<Segment>,
    /// The vector a vectored bio's segments travel in: empty, with room
    /// for `seg_max` segments, while the slot is free or its bio holds one
    /// buffer; moved into the bio while a vectored bio is in flight.
    segs: Vec<Buf>,
    /// Its bio was submitted and has not completed.
    pub(crate) in_flight: bool,
    /// The guest memory its bio borrows (None on the copy path): kept
    /// mapped until the bio completes.
    pub(crate) lent: Option<Arc<Mem>>,
}

impl Slot {
    /// A free slot for requests of up to `seg_max` data segments (at most
    /// BIO_MAX_VECS, DiskLimits).
    pub(crate) fn new(seg_max: u32) -> Self {
        Self {
            head: 0,
            avail_pos: 0,
            status: GuestAddress(0),
            kind: Kind::Flush,
            data: Vec::with_capacity(seg_max as usize + 2),
            segs: Vec::with_capacity(seg_max as usize),
            in_flight: false,
            lent: None,
        }
    }

    /// The bio of a read (`write` false) or write of the data segments at
    /// disk byte `offset`, each over the guest's own memory of it (no
    /// copy), keeping `mem` in the slot until the bio completes. None,
    /// preparing nothing, if a segment cannot be lent: a length that is
    /// not a whole number of logical blocks `block` (the device refuses
    /// such a segment), a range not inside one memory region (vm-memory
    /// maps each on its own), or more segments than one bio of this slot
    /// holds (a guest past its `seg_max`); the request then takes the copy
    /// path.
    pub(crate) fn lend(&mut self, offset: u64, write: bool, block: u32, mem: &Arc<Mem>) -> Option<Bio> {
        debug_assert!(!self.in_flight && self.lent.is_none() && self.segs.is_empty(), "a free slot");
        let nr_segs = self.data.len();
        if nr_segs == 0 || nr_segs > self.segs.capacity() || self.data.iter().any(|s| s.len == 0 || s.len % block != 0)
        {
            return None;
        }
        let mut regions = Regions::new(mem);
        if nr_segs == 1 {
            let buf = borrow(&mut regions, self.data[0])?;
            self.lent = Some(Arc::clone(mem));
            return Some(if write { Bio::write(offset, buf) } else { Bio::read(offset, buf) });
        }
        for &seg in &self.data {
            let Some(buf) = borrow(&mut regions, seg) else {
                // Nothing of this request is submitted yet; borrowed
                // buffers free nothing.
                self.segs.clear();
                return None;
            };
            self.segs.push(buf);
        }
        self.lent = Some(Arc::clone(mem));
        let segs = std::mem::take(&mut self.segs);
        Some(if write { Bio::writev(offset, segs) } else { Bio::readv(offset, segs) })
    }

    /// Takes back the segments of the slot's bio, completed or refused:
    /// a vector goes back into the slot, emptied, with its capacity; a
    /// lent buffer ends; a bounce buffer (the copy path) is returned.
    pub(crate) fn take_back(&mut self, segs: BioVec) -> Option<Buf> {
        if segs.is_vectored() {
            let mut vec = segs.into_vec();
            debug_assert!(vec.iter().all(Buf::is_borrowed), "a vector holds only lent segments");
            // Lent buffers free nothing when dropped.
            vec.clear();
            debug_assert!(self.segs.capacity() == 0, "one vector per slot");
            self.segs = vec;
            return None;
        }
        segs.into_buf().ok().and_then(|buf| buf.end_borrow().err())
    }
}

/// A buffer over the guest's memory of `seg`, or None if it does not lie
/// in one memory region.
#[inline]
fn borrow(regions: &mut Regions<'_>, seg: Segment) -> Option<Buf> {
    // Crossing a region boundary fails here (request.rs checked that the
    // range is guest memory).
    let (region, offset) = regions.find(seg.addr, seg.len)?;
    let host = region.get_slice(offset, seg.len as usize).ok()?;
    debug_assert_eq!(host.len(), seg.len as usize);
    // The guest is not trusted to keep virtio's promise that the chain's
    // buffers are the device's until they are in the used ring: it may
    // write its buffers while a bio uses them, or name the same memory
    // twice. That is accepted, as for any memory shared with another
    // process, because what is lent is plain bytes: every u8 value is
    // valid, no driver or block-layer code decides anything about memory
    // safety from data bytes (the null driver copies them in or out with
    // memcpy, the file driver hands their address to the kernel), and the
    // lent range is never reached through a Rust reference outside the
    // bio. A guest racing its own buffers gets back or stores mixed bytes
    // of its own, as with a DMA device; no other memory is touched.
    //
    // `host` maps `seg.len` initialised, read-write bytes of one guest
    // memory region (the region's get_slice checked they lie in it), and
    // they stay mapped while the bio lives: the slot keeps `mem`'s Arc,
    // which owns the mappings, until its bio completes or is drained
    // (queue.rs `bio_done`, `abandon_in_flight`); a SET_MEM_TABLE
    // meanwhile only swaps the GuestMemoryAtomic.
    // SAFETY: valid, mapped bytes for the bio's life (above); guest races accepted.
    Some(unsafe { Buf::borrowed(host.ptr_guard_mut().as_ptr(), seg.len as usize) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::GuestMemoryBackend;

    fn seg(addr: u64, len: u32) -> Segment {
        Segment { addr: GuestAddress(addr), len }
    }

    fn host(mem: &Mem, addr: u64) -> usize {
        mem.get_host_address(GuestAddress(addr)).unwrap() as usize
    }

    #[test]
    fn a_vectored_bio_travels_in_the_slots_vector_and_comes_back_whole() {
        let mem = Arc::new(Mem::from_ranges(&[(GuestAddress(0), 0x10_0000)]).unwrap());
        let mut slot = Slot::new(8);
        let (ptr, capacity) = (slot.segs.as_ptr(), slot.segs.capacity());
        slot.data.extend([seg(0x3000, 4096), seg(0x1000, 8192)]);

        let mut bio = slot.lend(512, false, 512, &mem).expect("lent");
        assert_eq!((bio.offset, bio.len, bio.segs.nr_segs()), (512, 12288, 2));
        let lent: Vec<(usize, usize)> = bio.segs.iter().map(|b| (b.as_ptr() as usize, b.len())).collect();
        assert_eq!(lent, [(host(&mem, 0x3000), 4096), (host(&mem, 0x1000), 8192)], "the guest's own memory");
        assert!(bio.segs.iter().all(Buf::is_borrowed));
        assert_eq!(slot.segs.capacity(), 0, "the vector travels in the bio");
        assert!(slot.lent.is_some(), "the mapping is held");

        assert!(slot.take_back(bio.segs.take()).is_none(), "nothing to give back");
        assert_eq!((slot.segs.as_ptr(), slot.segs.capacity(), slot.segs.len()), (ptr, capacity, 0), "the same vector");
    }

    #[test]
    fn one_segment_is_a_bio_of_one_buffer() {
        let mem = Arc::new(Mem::from_ranges(&[(GuestAddress(0), 0x10_0000)]).unwrap());
        let mut slot = Slot::new(8);
        slot.data.push(seg(0x2000, 4096));
        let mut bio = slot.lend(0, true, 4096, &mem).expect("lent");
        assert!(!bio.segs.is_vectored());
        assert_eq!(bio.segs.as_slice()[0].as_ptr() as usize, host(&mem, 0x2000));
        assert_eq!(slot.segs.capacity(), 8, "the vector stays");
        assert!(slot.take_back(bio.segs.take()).is_none());
        assert_eq!(slot.segs.capacity(), 8);
    }

    #[test]
    fn segments_that_cannot_be_lent_prepare_nothing() {
        let mem = Mem::from_ranges(&[(GuestAddress(0), 0x10_0000), (GuestAddress(0x10_0000), 0x10_0000)]).unwrap();
        let mem = Arc::new(mem);
        let mut slot = Slot::new(2);
        // Across two regions (the second segment), not whole blocks, more
        // than the slot's vector holds.
        for data in [
            vec![seg(0x1000, 4096), seg(0x10_0000 - 512, 1024)],
            vec![seg(0x1000, 4096), seg(0x3000, 100)],
            vec![seg(0x1000, 512), seg(0x2000, 512), seg(0x3000, 512)],
        ] {
            slot.data.clone_from(&data);
            assert!(slot.lend(0, false, 512, &mem).is_none(), "{data:?}");
            assert!(slot.lent.is_none());
            assert_eq!((slot.segs.len(), slot.segs.capacity()), (0, 2), "{data:?}");
        }
    }

    #[test]
    fn a_bounce_buffer_is_given_back() {
        let mut slot = Slot::new(2);
        let bounce = slot.take_back(BioVec::from(Buf::new(4096))).expect("the copy path's buffer");
        assert_eq!(bounce.len(), 4096);
        assert!(slot.take_back(BioVec::new()).is_none());
    }
}
