//! What a ring does once its completion thread has died (it panicked):
//! refuse new requests, cancel what the kernel holds, and end every
//! request in flight only once its CQE arrived, so no buffer is handed
//! back while the kernel may still write into it.
//!
//! Relies on: ring.rs (the slots, the in-flight count, `dead`); kbuf.rs
//! for the CQEs of a kernel-buffer chain.

use std::sync::atomic::Ordering;

use io_uring::{opcode, types};

use mqblk::Status;

use super::kbuf::STEP_MASK;
use super::{Ring, CANCEL, STOP};

/// Attempts of `salvage` to reap what is still in flight before it gives up.
const SALVAGE_ROUNDS: u32 = 1000;

impl Ring {
    /// After the completion thread panicked: refuses new requests, cancels
    /// what the kernel still holds and ends every request in flight with
    /// its CQE's result or an error. A request is ended only once its CQE
    /// arrived (the kernel no longer touches its buffers), so a buffer is
    /// never handed back while the kernel may still write into it.
    pub(super) fn salvage(&self) {
        self.dead.store(true, Ordering::SeqCst);
        let cancel = opcode::AsyncCancel2::new(types::CancelBuilder::any()).build().user_data(CANCEL);
        self.push(&cancel);
        let mut batch = Vec::with_capacity(self.slots.len() * 2);
        for _ in 0..SALVAGE_ROUNDS {
            if self.inflight.load(Ordering::SeqCst) == 0 {
                return;
            }
            // Submits the cancel (and anything queued meanwhile), then
            // waits for a CQE; an error here is retried a bounded number
            // of times.
            let _ = self.enter(1);
            batch.clear();
            self.drain_cq(&mut batch);
            for &(user_data, res) in batch.iter() {
                if user_data != STOP && user_data != CANCEL {
                    self.end_salvaged(user_data, res);
                }
            }
        }
    }

    /// Ends the request of `tag` whose CQE arrived after the thread died:
    /// with success only if the whole transfer is done, else an error.
    pub(super) fn end_salvaged(&self, user_data: u64, res: i32) {
        if user_data & STEP_MASK != 0 {
            return self.chain_cqe(user_data, res, true);
        }
        let tag = user_data as usize;
        // SAFETY: this CQE makes us the tag's owner (see the Sync impl).
        let Some(inf) = (unsafe { (*self.slots[tag].get()).io.take() }) else { return };
        let status = if res < 0 {
            Status::from_errno(-res)
        } else if inf.rq.op().has_data() && inf.done + u64::from(res.unsigned_abs()) < inf.len {
            Status::IoErr
        } else {
            Status::Ok
        };
        self.inflight.fetch_sub(1, Ordering::Release);
        inf.rq.complete(status);
    }
}
