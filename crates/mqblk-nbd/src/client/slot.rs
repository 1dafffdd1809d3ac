//! A driver tag's slot on one connection: the request it holds and who
//! may touch the request's buffers. Three parties share it, each under
//! the slot's lock for the state and outside it for the bytes:
//!
//! - the sender (conn.rs) reads a write's segments while `tx_busy`: from
//!   the moment the request joins a batch until `sendmsg` returned;
//! - the receiver (rx.rs) fills a read's segments while `rx_busy`;
//! - the timeout handler takes a request no one is busy with, or marks
//!   it `timed_out` for the busy party to end.
//!
//! A reply can beat the sender: the server may answer once the last byte
//! of a request is in its socket, before `sendmsg` returns here. So a
//! reply only records `answered`, and whoever clears the last busy flag
//! ends the request ([`Slot::settle`]); no one completes a request whose
//! buffers another party may still be using.
//!
//! | state | rq | on_wire | tx_busy | rx_busy | answered |
//! |---|---|---|---|---|---|
//! | free | None | - | - | - | - |
//! | in a batch or being sent | Some | true | true | any | any |
//! | sent, awaiting its reply | Some | true | false | false | None |
//! | reply data arriving | Some | true | any | true | None |
//! | parked (connection down) | Some | false | false | false | None |
//!
//! Relies on: reply.rs (`Asked`, `Progress`); the block layer's promise
//! that a driver tag is in flight at most once.

use mqblk::driver::Rq;
use mqblk::{Op, Status};

use super::reply::{Asked, Progress};

/// The cookie of a request: its driver tag, and in the high half the
/// number of times the slot has been sent, so that a reply meant for an
/// earlier sending (before a reconnect) is never taken for this one.
pub(crate) fn cookie(tag: u32, generation: u32) -> u64 {
    u64::from(generation) << 32 | u64::from(tag)
}

/// The tag and generation of a cookie.
pub(crate) fn split_cookie(cookie: u64) -> (u32, u32) {
    (cookie as u32, (cookie >> 32) as u32)
}

#[derive(Default)]
pub(crate) struct Slot {
    pub(crate) rq: Option<Rq>,
    /// Bumped at each sending.
    pub(crate) generation: u32,
    /// Sent, or in the batch being sent, on the current connection.
    pub(crate) on_wire: bool,
    pub(crate) tx_busy: bool,
    pub(crate) rx_busy: bool,
    /// The reply is complete: the request's status.
    pub(crate) answered: Option<Status>,
    /// The block layer's timeout passed while a party was busy: that
    /// party ends it with an error when it is done.
    pub(crate) timed_out: bool,
    /// A structured reply's progress.
    pub(crate) progress: Progress,
    /// The request as the reply parser checks it.
    pub(crate) asked: Asked,
    /// Ended (by `settle`) while a lock above this slot was held: the
    /// holder completes it once that lock is released.
    pub(crate) ready: Option<Status>,
}

impl Slot {
    /// Takes `rq` in, neither sent nor answered yet (parked until
    /// [`Slot::resend`] puts it on the wire).
    pub(crate) fn hold(&mut self, rq: Rq) {
        debug_assert!(self.rq.is_none() && !self.rx_busy && self.ready.is_none(), "tag {} in flight twice", rq.tag());
        self.asked = Asked { is_read: rq.op() == Op::Read, offset: rq.pos_bytes(), length: rq.len_bytes() as u32 };
        self.rq = Some(rq);
        (self.on_wire, self.tx_busy, self.timed_out, self.answered) = (false, false, false, None);
    }

    /// A held request goes (again, after a reconnect) into the sender's
    /// batch: a new cookie, its reply's progress forgotten.
    pub(crate) fn resend(&mut self, tag: u32) -> u64 {
        debug_assert!(self.rq.is_some() && !self.tx_busy && !self.rx_busy);
        self.generation = self.generation.wrapping_add(1);
        self.on_wire = true;
        self.tx_busy = true;
        self.answered = None;
        self.progress = Progress::default();
        cookie(tag, self.generation)
    }

    /// Whether a reply with this cookie's generation may answer the slot.
    pub(crate) fn awaits(&self, generation: u32) -> bool {
        self.rq.is_some() && self.on_wire && self.generation == generation && self.answered.is_none()
    }

    /// Parked: the connection is gone, the request waits for the next.
    pub(crate) fn is_parked(&self) -> bool {
        self.rq.is_some() && !self.on_wire && !self.tx_busy && !self.rx_busy && self.ready.is_none()
    }

    /// The connection went away: whatever was on it waits for the next
    /// one (the caller holds the sender's lock, so no send is under way).
    pub(crate) fn park(&mut self) {
        debug_assert!(!self.rx_busy, "only the receiver parks, and it is not receiving");
        self.on_wire = false;
        self.tx_busy = false;
        self.answered = None;
    }

    /// Ends the request if it is answered (or timed out) and no party is
    /// busy with its buffers: the token and its status, for the caller to
    /// complete once it holds no lock.
    pub(crate) fn settle(&mut self) -> Option<(Rq, Status)> {
        if self.rq.is_none() || self.tx_busy || self.rx_busy {
            return None;
        }
        let status = match (self.answered, self.timed_out) {
            (Some(status), _) => status,
            (None, true) => Status::IoErr,
            (None, false) => return None,
        };
        self.on_wire = false;
        self.answered = None;
        self.rq.take().map(|rq| (rq, status))
    }

    /// As `settle`, but leaves the token in the slot marked `ready`, for
    /// a caller that holds the sender's lock (a completion may run the
    /// queue, which calls back into the sender). Returns whether it did.
    pub(crate) fn settle_later(&mut self) -> bool {
        match self.settle() {
            Some((rq, status)) => {
                self.rq = Some(rq);
                self.ready = Some(status);
                true
            }
            None => false,
        }
    }

    /// Takes a request `settle_later` left.
    pub(crate) fn take_ready(&mut self) -> Option<(Rq, Status)> {
        let status = self.ready.take()?;
        self.rq.take().map(|rq| (rq, status))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_carry_tag_and_generation() {
        assert_eq!(split_cookie(cookie(7, 3)), (7, 3));
        assert_eq!(split_cookie(cookie(u32::MAX, u32::MAX)), (u32::MAX, u32::MAX));
        assert_ne!(cookie(7, 3), cookie(7, 4), "a reply to an earlier sending is told apart");
    }

    #[test]
    fn an_empty_slot_neither_awaits_nor_settles() {
        let mut s = Slot::default();
        assert!(!s.awaits(0) && !s.is_parked());
        s.timed_out = true;
        assert!(s.settle().is_none());
        assert!(!s.settle_later() && s.take_ready().is_none());
    }
}
