//! Registered ("fixed") buffers, fio's `fixedbufs`: one page-aligned
//! region cut into equal slots, registered once with a device's io_uring
//! rings, so that reads and writes into it skip pinning pages per I/O
//! (IORING_OP_READ_FIXED / WRITE_FIXED).
//!
//! Why a region of its own: memory registered with io_uring must stay
//! mapped, with the same pages, as long as a ring may use it. An ordinary
//! `Buf` can be freed by its owner at any time, so the driver registers
//! only this region, and the region lives as long as its longest holder:
//! the `FixedBufs`, every `Buf` taken from it (each keeps it alive), and
//! every device it was registered with.
//!
//! Relies on: `Buf`'s fixed variant (mod.rs) giving its slot back on drop.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::Arc;

use parking_lot::Mutex;

use super::{Buf, BUF_ALIGN};

/// The largest region: io_uring registers at most 1 GiB per buffer.
const MAX_REGION_BYTES: usize = 1 << 30;

/// A pool of registered-buffer slots; cheap to clone (shares the region).
/// Register it with a device that uses fixed buffers
/// ([`RegisteredBuffers`](crate::RegisteredBuffers)); buffers taken from it
/// work on any device.
///
/// ```
/// use mqblk::FixedBufs;
///
/// let pool = FixedBufs::new(2, 5000); // slots round up to whole pages
/// assert_eq!((pool.nr_slots(), pool.slot_bytes()), (2, 8192));
/// let a = pool.take(4096).unwrap();
/// let b = pool.take(8192).unwrap();
/// assert_eq!((a.len(), a.capacity()), (4096, 8192));
/// assert!(pool.take(512).is_none(), "both slots are taken");
///
/// // What a driver registers with the kernel, and which buffers lie in it.
/// let (start, len) = pool.span();
/// assert_eq!(len, 2 * 8192);
/// assert!(pool.contains(a.as_ptr() as usize, a.len()));
/// assert!(!pool.contains(start + len, 1));
///
/// drop((a, b));
/// assert_eq!(pool.free_slots(), 2, "a dropped buffer frees its slot");
/// assert!(2 * 8192 <= FixedBufs::MAX_REGION_BYTES);
/// ```
#[derive(Clone)]
pub struct FixedBufs {
    region: Arc<Region>,
}

/// The memory and its free slots.
pub(crate) struct Region {
    ptr: NonNull<u8>,
    slot_bytes: usize,
    nr_slots: usize,
    free: Mutex<Vec<u32>>,
}

// SAFETY: the region's bytes are reached only through the `Buf`s taken
// from it, one per slot at a time (the free list hands each slot out
// once); the region itself is plain memory.
unsafe impl Send for Region {}
// SAFETY: as above; `free` is behind a lock.
unsafe impl Sync for Region {}

impl FixedBufs {
    /// The largest region: io_uring registers at most 1 GiB per buffer.
    pub const MAX_REGION_BYTES: usize = MAX_REGION_BYTES;

    /// `nr_slots` slots of `slot_bytes` each (rounded up to a page).
    /// Panics if the region would exceed `MAX_REGION_BYTES` or is empty.
    pub fn new(nr_slots: usize, slot_bytes: usize) -> Self {
        let slot_bytes = slot_bytes.div_ceil(BUF_ALIGN).max(1) * BUF_ALIGN;
        let total = nr_slots.checked_mul(slot_bytes).expect("fixed buffer region size overflows");
        assert!(nr_slots > 0 && nr_slots <= u32::MAX as usize, "a fixed buffer pool needs 1..2^32 slots");
        assert!(total <= MAX_REGION_BYTES, "fixed buffer region of {total} bytes is over io_uring's 1 GiB");
        let layout = Region::layout(total);
        // SAFETY: `layout` has a non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else { std::alloc::handle_alloc_error(layout) };
        let free = Mutex::new((0..nr_slots as u32).rev().collect());
        Self { region: Arc::new(Region { ptr, slot_bytes, nr_slots, free }) }
    }

    /// A buffer of `len` bytes (at most `slot_bytes`) in a free slot, or
    /// None if every slot is taken. Its bytes are what the slot last held
    /// (zeros at first). Dropping the buffer frees the slot.
    pub fn take(&self, len: usize) -> Option<Buf> {
        assert!(len <= self.region.slot_bytes, "take({len}) from slots of {} bytes", self.region.slot_bytes);
        let slot = self.region.free.lock().pop()? as usize;
        // SAFETY: slot < nr_slots, so the slot lies inside the region.
        let ptr = unsafe { NonNull::new_unchecked(self.region.ptr.as_ptr().add(slot * self.region.slot_bytes)) };
        Some(Buf::from_fixed(ptr, len, self.region.clone()))
    }

    /// Bytes per slot (a page multiple): the most a buffer may hold.
    pub fn slot_bytes(&self) -> usize {
        self.region.slot_bytes
    }

    /// Slots in the region.
    pub fn nr_slots(&self) -> usize {
        self.region.nr_slots
    }

    /// Slots not taken now.
    pub fn free_slots(&self) -> usize {
        self.region.free.lock().len()
    }

    /// The region's start address and length in bytes: what a driver
    /// registers with the kernel (io_uring's buffer 0). A clone of the
    /// `FixedBufs` keeps the region mapped for as long as the driver holds it.
    pub fn span(&self) -> (usize, usize) {
        self.region.span()
    }

    /// Whether `[addr, addr + len)` lies inside the region (an I/O whose
    /// buffer does may use the fixed opcodes).
    pub fn contains(&self, addr: usize, len: usize) -> bool {
        self.region.contains(addr, len)
    }
}

impl Region {
    fn layout(total: usize) -> Layout {
        Layout::from_size_align(total, BUF_ALIGN).expect("region layout")
    }

    /// Start address and length in bytes.
    pub(crate) fn span(&self) -> (usize, usize) {
        (self.ptr.as_ptr() as usize, self.slot_bytes * self.nr_slots)
    }

    /// Whether `[addr, addr + len)` lies inside the region.
    pub(crate) fn contains(&self, addr: usize, len: usize) -> bool {
        let (base, total) = self.span();
        addr >= base && addr.checked_add(len).is_some_and(|end| end <= base + total)
    }

    /// Bytes per slot (a fixed `Buf`'s capacity).
    pub(crate) fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// A `Buf` taken at `ptr` was dropped: its slot is free again.
    pub(crate) fn give_back(&self, ptr: NonNull<u8>) {
        let slot = (ptr.as_ptr() as usize - self.ptr.as_ptr() as usize) / self.slot_bytes;
        debug_assert!(slot < self.nr_slots);
        self.free.lock().push(slot as u32);
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: allocated in `FixedBufs::new` with this layout; the last
        // holder (pool, buffer or device) is going, so nothing uses it.
        unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.slot_bytes * self.nr_slots)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_handed_out_once_and_come_back_on_drop() {
        let pool = FixedBufs::new(2, 5000);
        assert_eq!(pool.slot_bytes(), 8192);
        let mut a = pool.take(4096).unwrap();
        let b = pool.take(8192).unwrap();
        assert!(pool.take(512).is_none(), "two slots, both taken");
        a[..4].copy_from_slice(b"abcd");
        assert_ne!(a.as_ptr(), b.as_ptr());
        let addr = a.as_ptr() as usize;
        drop(a);
        assert_eq!(pool.free_slots(), 1);
        let c = pool.take(4096).unwrap();
        assert_eq!(c.as_ptr() as usize, addr, "the freed slot is reused");
        assert_eq!(&c[..4], b"abcd", "a slot keeps what it last held");
        assert!(pool.contains(addr, 8192) && !pool.contains(addr, 8192 * 2 + 1));
    }

    /// A slot's buffer may grow to the slot (its capacity), no further.
    #[test]
    fn a_fixed_buffer_has_its_slot_as_capacity() {
        let pool = FixedBufs::new(1, 8192);
        let mut a = pool.take(512).unwrap();
        assert_eq!((a.len(), a.capacity(), a.is_borrowed()), (512, 8192, false));
        a.set_len(8192);
        a[8191] = 1;
        let grow = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| a.set_len(8193)));
        assert!(grow.is_err(), "set_len past the slot panics");
        drop(a);
        assert_eq!(pool.free_slots(), 1, "and the slot came back after all");
    }

    /// Threads taking and dropping slots at once: a slot is never held by
    /// two buffers (each writes its mark and finds it intact), and every
    /// slot is free at the end.
    #[test]
    fn concurrent_takes_never_share_a_slot() {
        // Miri interprets each step: far fewer rounds, and 64 bytes of each
        // slot, there (60 rounds of 4 threads still want twice the 6 slots).
        const ROUNDS: u32 = if cfg!(miri) { 60 } else { 20_000 };
        const LEN: usize = if cfg!(miri) { 64 } else { 4096 };
        let pool = FixedBufs::new(6, 4096);
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                let pool = pool.clone();
                std::thread::spawn(move || {
                    let mut held = Vec::new();
                    let mut taken = 0u32;
                    for i in 0..ROUNDS {
                        if i % 3 != 2 {
                            if let Some(mut b) = pool.take(LEN) {
                                b.fill(t + 1);
                                held.push(b);
                                taken += 1;
                            }
                        } else if let Some(b) = held.pop() {
                            assert!(b[..] == [t + 1; LEN], "another holder wrote into our slot");
                        }
                        if held.len() > 2 {
                            let b = held.remove(0);
                            assert!(b[..] == [t + 1; LEN], "another holder wrote into our slot");
                        }
                    }
                    taken
                })
            })
            .collect();
        let taken: u32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert!(taken > ROUNDS / 20, "the threads did take slots ({taken})");
        assert_eq!(pool.free_slots(), 6, "every slot came back");
    }

    #[test]
    fn buffers_keep_the_region_alive_after_the_pool_goes() {
        let pool = FixedBufs::new(4, 4096);
        let mut b = pool.take(4096).unwrap();
        drop(pool);
        b.fill(7); // the region is still there (Miri/ASan would object otherwise)
        assert!(b[..] == [7; 4096], "one comparison: Miri interprets a loop byte by byte");
        let c = b.clone();
        drop(b);
        assert_eq!(c.len(), 4096, "a clone is an ordinary buffer");
    }
}
