//! What a queue remembers of its requests in flight, and settling a
//! reaped completion into libblkio's terms (cookie, ret, message).
//!
//! The common request needs nothing remembered: its cookie travels as
//! mqblk's user_data. A slot is taken only for a cookie with bit 63 set.
//! What a request lends the block layer comes back here at completion: a
//! vectored request's `Vec<Buf>` goes back to the segment-vector pool
//! (segvecs.rs), a write-zeroes fallback's zeroed buffer to the bounce pool;
//! a borrowed buffer ends with nothing to free.
//!
//! Settling takes the completion by value and is inlined into the reaping
//! loop: a call taking `&mut Completion` would keep the completion in
//! memory and cost tens of instructions per I/O.
//!
//! Relies on: mqblk's Completion, BioVec and Buf.

use std::ffi::{c_int, c_void, CString};

use mqblk::{BioVec, Buf, Completion, Status};

use super::segvecs::SegVecs;

/// An mqblk user_data with this bit set names a slot: a request whose
/// cookie has the bit itself. Clear, it is the caller's cookie as given
/// (user-space addresses on Linux never set it, so pointer cookies take the
/// short path).
pub(super) const SLOT_BIT: u64 = 1 << 63;

/// The slots, the segment-vector pool and the bounce pool of one queue.
pub(super) struct Inflight {
    /// The caller's cookie of each slot (indexed by the mqblk user_data).
    slots: Vec<*mut c_void>,
    free_slots: Vec<u32>,
    pub(super) seg_vecs: SegVecs,
    /// Zeroed buffers of write-zeroes fallbacks; grows to the largest once.
    bounce_pool: Vec<Buf>,
    /// Messages of the completions the last `do_io` returned (libblkio
    /// keeps them until the next `do_io`).
    messages: Vec<CString>,
}

impl Inflight {
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            slots: vec![std::ptr::null_mut(); capacity],
            free_slots: (0..capacity as u32).rev().collect(),
            seg_vecs: SegVecs::new(capacity),
            bounce_pool: Vec::new(),
            messages: Vec::new(),
        }
    }

    pub(super) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Takes a slot for a request; returns the mqblk user_data naming it,
    /// or None when every slot is in use.
    pub(super) fn take_slot(&mut self, user_data: *mut c_void) -> Option<u64> {
        let slot = self.free_slots.pop()?;
        self.slots[slot as usize] = user_data;
        Some(u64::from(slot) | SLOT_BIT)
    }

    /// Gives back a slot whose request never reached mqblk.
    pub(super) fn put_slot(&mut self, mqblk_user_data: u64) {
        debug_assert!(mqblk_user_data & SLOT_BIT != 0);
        let index = (mqblk_user_data & !SLOT_BIT) as u32;
        self.slots[index as usize] = std::ptr::null_mut();
        self.free_slots.push(index);
    }

    /// Takes back what a request lent the block layer: a segment vector
    /// to its pool, a bounce buffer to the bounce pool; borrowed buffers
    /// end without their drop glue (there is nothing to free).
    #[inline(always)]
    pub(super) fn recycle(&mut self, segs: BioVec) {
        if segs.is_vectored() {
            return self.seg_vecs.give_back(segs.into_vec());
        }
        // None, or one buffer in place: tested on the words, so nothing is
        // moved to memory unless it is a bounce buffer.
        if segs.as_slice().iter().all(Buf::is_borrowed) {
            std::mem::forget(segs);
            return;
        }
        self.recycle_owned(segs);
    }

    #[cold]
    #[inline(never)]
    fn recycle_owned(&mut self, segs: BioVec) {
        if let Ok(buf) = segs.into_buf() {
            self.bounce_pool.push(buf);
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

    /// Settles a reaped completion: recycles what it lent and its slot.
    /// Returns the caller's cookie, ret and, for a failure, the message.
    #[inline(always)]
    pub(super) fn settle(&mut self, c: Completion) -> (*mut c_void, c_int, Option<CString>) {
        let Completion { user_data, status, segs, .. } = c;
        self.recycle(segs);
        if user_data & SLOT_BIT == 0 && status.is_ok() {
            // The common case: the cookie came back as mqblk's user_data.
            return (user_data as *mut c_void, 0, None);
        }
        self.settle_slow(user_data, status)
    }

    /// A slot's cookie or a failure (by value: no completion kept in memory).
    #[cold]
    #[inline(never)]
    fn settle_slow(&mut self, mqblk_user_data: u64, status: Status) -> (*mut c_void, c_int, Option<CString>) {
        let user_data = if mqblk_user_data & SLOT_BIT == 0 {
            mqblk_user_data as *mut c_void
        } else {
            let index = (mqblk_user_data & !SLOT_BIT) as u32;
            self.free_slots.push(index);
            std::mem::replace(&mut self.slots[index as usize], std::ptr::null_mut())
        };
        match status.errno() {
            0 => (user_data, 0, None),
            errno => {
                let msg = CString::new(format!("I/O failed: {}", status.name())).unwrap_or_default();
                (user_data, -errno, Some(msg))
            }
        }
    }

    /// Keeps a completion's message alive until the next `do_io`; returns
    /// the pointer the caller sees (null for none).
    #[inline(always)]
    pub(super) fn keep_message(&mut self, msg: Option<CString>) -> *const libc::c_char {
        match msg {
            Some(m) => self.keep_message_slow(m),
            None => std::ptr::null(),
        }
    }

    #[cold]
    fn keep_message_slow(&mut self, msg: CString) -> *const libc::c_char {
        self.messages.push(msg);
        self.messages.last().map_or(std::ptr::null(), |m| m.as_ptr())
    }

    /// Drops the messages the last `do_io` returned.
    #[inline(always)]
    pub(super) fn forget_messages(&mut self) {
        if !self.messages.is_empty() {
            self.messages.clear();
        }
    }
}
