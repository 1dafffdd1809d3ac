//! What a queue remembers of its requests in flight, and settling a
//! reaped completion into libblkio's terms (cookie, ret, message).
//!
//! The common request needs nothing remembered: its cookie travels as
//! mqblk's user_data. A slot is taken only for a bounced read (the iovecs
//! to scatter into) or a cookie with bit 63 set. Bounce buffers come from a
//! pool that grows to the largest scattered I/O once and is reused.
//!
//! Relies on: mqblk's Completion and Buf.

use std::ffi::{c_int, c_void, CString};

use mqblk::Buf;

/// An mqblk user_data with this bit set names a slot: a request with
/// scatter state, or one whose cookie has the bit itself. Clear, it is the
/// caller's cookie as given (user-space addresses on Linux never set it, so
/// pointer cookies take the short path).
pub(super) const SLOT_BIT: u64 = 1 << 63;

/// A bounced read's destination: the caller's iovec array and its length.
pub(super) type Scatter = (*const libc::iovec, usize);

/// What the queue remembers of a request in flight (indexed by the
/// mqblk `user_data`).
#[derive(Clone, Copy)]
struct Slot {
    user_data: *mut c_void,
    /// A bounced read: the iovecs to scatter the data into.
    scatter: Option<Scatter>,
}

const EMPTY_SLOT: Slot = Slot { user_data: std::ptr::null_mut(), scatter: None };

/// The slots and the bounce pool of one queue.
pub(super) struct Inflight {
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    bounce_pool: Vec<Buf>,
}

impl Inflight {
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            slots: vec![EMPTY_SLOT; capacity],
            free_slots: (0..capacity as u32).rev().collect(),
            bounce_pool: Vec::new(),
        }
    }

    pub(super) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Takes a slot for a request; returns the mqblk user_data naming it,
    /// or None when every slot is in use.
    pub(super) fn take_slot(&mut self, user_data: *mut c_void, scatter: Option<Scatter>) -> Option<u64> {
        let slot = self.free_slots.pop()?;
        self.slots[slot as usize] = Slot { user_data, scatter };
        Some(u64::from(slot) | SLOT_BIT)
    }

    /// Gives back a slot whose request never reached mqblk.
    pub(super) fn put_slot(&mut self, mqblk_user_data: u64) {
        debug_assert!(mqblk_user_data & SLOT_BIT != 0);
        let index = (mqblk_user_data & !SLOT_BIT) as u32;
        self.slots[index as usize] = EMPTY_SLOT;
        self.free_slots.push(index);
    }

    /// Returns a bounce buffer to the pool (borrowed buffers just drop).
    #[inline]
    pub(super) fn recycle(&mut self, buf: Option<Buf>) {
        if let Some(Err(owned)) = buf.map(Buf::end_borrow) {
            self.bounce_pool.push(owned);
        }
    }

    pub(super) fn take_bounce(&mut self, len: usize) -> Buf {
        match self.bounce_pool.iter().position(|b| b.capacity() >= len) {
            Some(i) => {
                let mut buf = self.bounce_pool.swap_remove(i);
                buf.set_len(len);
                buf
            }
            None => Buf::new(len),
        }
    }

    /// Settles a reaped completion: recycles its slot, scatters a bounced
    /// read, recycles the bounce buffer. Returns the caller's cookie, ret
    /// and, for a failure, the message.
    #[inline]
    pub(super) fn settle(&mut self, c: &mut mqblk::Completion) -> (*mut c_void, c_int, Option<CString>) {
        if c.user_data & SLOT_BIT == 0 && c.status.is_ok() {
            // The common case: the cookie came back as mqblk's user_data,
            // and the buffer was the caller's own (or a write's bounce).
            self.recycle(c.segs.take().into_buf().ok());
            return (c.user_data as *mut c_void, 0, None);
        }
        self.settle_slow(c)
    }

    #[inline(never)]
    fn settle_slow(&mut self, c: &mut mqblk::Completion) -> (*mut c_void, c_int, Option<CString>) {
        let slot = if c.user_data & SLOT_BIT == 0 {
            Slot { user_data: c.user_data as *mut c_void, scatter: None }
        } else {
            let index = (c.user_data & !SLOT_BIT) as u32;
            self.free_slots.push(index);
            std::mem::replace(&mut self.slots[index as usize], EMPTY_SLOT)
        };
        if let (Some((iov, iovcnt)), Some(buf), true) = (slot.scatter, c.segs.as_slice().first(), c.status.is_ok()) {
            let mut at = 0;
            // SAFETY: the caller keeps the iovec array and its buffers valid
            // until this completion is returned (checked at submission).
            for v in unsafe { std::slice::from_raw_parts(iov, iovcnt) } {
                // SAFETY: each segment is writable for its length.
                unsafe { std::ptr::copy_nonoverlapping(buf[at..].as_ptr(), v.iov_base.cast::<u8>(), v.iov_len) };
                at += v.iov_len;
            }
        }
        self.recycle(c.segs.take().into_buf().ok());
        match c.status.errno() {
            0 => (slot.user_data, 0, None),
            errno => {
                let msg = CString::new(format!("I/O failed: {}", c.status.name())).unwrap_or_default();
                (slot.user_data, -errno, Some(msg))
            }
        }
    }
}
