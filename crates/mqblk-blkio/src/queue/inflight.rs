//! What a queue remembers of its requests in flight, and settling a
//! reaped completion into libblkio's terms (cookie, ret, message).
//!
//! Every buffer a request lends the block layer borrows memory
//! (`Buf::borrowed`): the caller's, or a bounce buffer kept here in the
//! request's slot (the write-zeroes fallback's zeroes). So a completion's
//! segments need no look: a vector goes back to the segment-vector pool
//! (segvecs.rs), a buffer ends without its drop glue (which would free
//! nothing, and cost a call).
//!
//! The common request needs nothing remembered: its cookie travels as
//! mqblk's user_data. A slot is taken for a cookie with bit 63 set and for
//! a request with a bounce buffer.
//!
//! Settling takes the completion by value and is inlined into the reaping
//! loop: a call taking `&mut Completion`, or the segments, would keep them
//! in memory and cost tens of instructions per I/O.
//!
//! Relies on: mqblk's Completion, BioVec and Buf.

use std::ffi::{c_int, c_void, CString};

use mqblk::{BioVec, Buf, Completion, Status};

use super::segvecs::SegVecs;

/// An mqblk user_data with this bit set names a slot: a request whose
/// cookie has the bit itself, or with a bounce buffer. Clear, it is the
/// caller's cookie as given (user-space addresses on Linux never set it, so
/// pointer cookies take the short path).
pub(super) const SLOT_BIT: u64 = 1 << 63;

/// What a slot remembers of its request.
struct Slot {
    user_data: *mut c_void,
    /// The buffer the request's borrowed segment views, back to the
    /// bounce pool at completion.
    bounce: Option<Buf>,
}

/// The slots, the segment-vector pool and the bounce pool of one queue.
pub(super) struct Inflight {
    /// Indexed by the mqblk user_data (less `SLOT_BIT`).
    slots: Vec<Slot>,
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
            slots: (0..capacity).map(|_| Slot { user_data: std::ptr::null_mut(), bounce: None }).collect(),
            free_slots: (0..capacity as u32).rev().collect(),
            seg_vecs: SegVecs::new(capacity),
            bounce_pool: Vec::new(),
            messages: Vec::new(),
        }
    }

    pub(super) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Takes a slot for a request (keeping its bounce buffer, if any);
    /// returns the mqblk user_data naming it, or None when every slot is
    /// in use (the bounce buffer then goes back to its pool).
    pub(super) fn take_slot(&mut self, user_data: *mut c_void, bounce: Option<Buf>) -> Option<u64> {
        let Some(index) = self.free_slots.pop() else {
            self.bounce_pool.extend(bounce);
            return None;
        };
        self.slots[index as usize] = Slot { user_data, bounce };
        Some(u64::from(index) | SLOT_BIT)
    }

    /// Gives back a slot (its request completed, or never reached
    /// mqblk); returns its cookie.
    fn put_slot(&mut self, mqblk_user_data: u64) -> *mut c_void {
        debug_assert!(mqblk_user_data & SLOT_BIT != 0);
        let index = (mqblk_user_data & !SLOT_BIT) as u32;
        let slot =
            std::mem::replace(&mut self.slots[index as usize], Slot { user_data: std::ptr::null_mut(), bounce: None });
        self.free_slots.push(index);
        self.bounce_pool.extend(slot.bounce);
        slot.user_data
    }

    /// A slot whose request mqblk refused.
    pub(super) fn put_refused_slot(&mut self, mqblk_user_data: u64) {
        self.put_slot(mqblk_user_data);
    }

    /// Takes back a request's segments: a vector of buffers to its pool;
    /// the caller's iovecs, a borrowed buffer, or none, simply end. One
    /// test tells a vector of buffers from the rest (`owns_vec`): a call
    /// to learn that the caller's iovecs need nothing cost 17 instructions
    /// per readv8 (qd1.c, callgrind).
    #[inline(always)]
    pub(super) fn end_segments(&mut self, segs: BioVec) {
        if segs.owns_vec() {
            return self.end_vector(segs);
        }
        // Borrowed (or nothing): dropping it would free nothing.
        std::mem::forget(segs);
    }

    /// A vector of buffers' end: back to the pool.
    #[inline(never)]
    fn end_vector(&mut self, segs: BioVec) {
        debug_assert!(segs.iter().all(Buf::is_borrowed), "every lent buffer is borrowed (module header)");
        self.seg_vecs.give_back(segs.into_vec());
    }

    /// A zeroed bounce buffer of `len` bytes, from the pool if it has one
    /// large enough.
    pub(super) fn take_bounce(&mut self, len: usize) -> Buf {
        match self.bounce_pool.iter().position(|b| b.capacity() >= len) {
            Some(i) => {
                let mut buf = self.bounce_pool.swap_remove(i);
                buf.set_len(len);
                buf.fill(0);
                buf
            }
            None => Buf::new(len),
        }
    }

    /// Settles a reaped completion: takes back its segments and its slot.
    /// Returns the caller's cookie, ret and, for a failure, the message.
    #[inline(always)]
    pub(super) fn settle(&mut self, c: Completion) -> (*mut c_void, c_int, Option<CString>) {
        let Completion { user_data, status, segs, .. } = c;
        self.end_segments(segs);
        if user_data & SLOT_BIT == 0 && status.is_ok() {
            // The common case: the cookie came back as mqblk's user_data.
            return (user_data as *mut c_void, 0, None);
        }
        self.settle_slow(user_data, status)
    }

    /// A slot's cookie or a failure (by value: nothing kept in memory).
    #[cold]
    #[inline(never)]
    fn settle_slow(&mut self, mqblk_user_data: u64, status: Status) -> (*mut c_void, c_int, Option<CString>) {
        let user_data = if mqblk_user_data & SLOT_BIT == 0 {
            mqblk_user_data as *mut c_void
        } else {
            self.put_slot(mqblk_user_data)
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
