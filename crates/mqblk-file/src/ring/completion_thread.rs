//! The completion thread of a ring no client polls (interrupt style): it
//! sleeps in io_uring_enter until CQEs arrive and ends their requests. If
//! it panics, the ring is marked
//! dead and its requests in flight are salvaged (salvage.rs), so no client
//! waits forever for them.
//!
//! Relies on: ring.rs (the ring, `complete`, the in-flight count, STOP).

use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

use super::{Ring, IORING_ENTER_GETEVENTS, STOP};

/// The completion thread of a (non-poll) ring: sleeps in io_uring_enter
/// until completions arrive, then ends their requests. If it panics, the
/// ring is marked dead and its requests in flight are salvaged, so no
/// client waits forever for them.
pub(crate) fn spawn_completion_thread(ring: std::sync::Arc<Ring>, index: usize) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(format!("uring-cq{index}")).spawn(move || {
        let mut batch = Vec::with_capacity(ring.slots.len() * 2);
        let mut next = 0;
        let reaped =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| completion_loop(&ring, &mut batch, &mut next)));
        if let Err(panic) = reaped {
            // Dead first: a client woken by the completions ended below
            // must find its next request refused, not queued to a ring
            // nobody reaps.
            ring.dead.store(true, Ordering::SeqCst);
            // CQEs reaped but not yet handled (the one that panicked
            // included) are not in the CQ any more: end them first.
            for &(user_data, res) in &batch[next.min(batch.len())..] {
                if user_data != STOP {
                    ring.end_salvaged(user_data, res);
                }
            }
            ring.salvage();
            std::panic::resume_unwind(panic);
        }
    })
}

/// Reaps and ends requests until stopped; `next` is the index in `batch`
/// of the CQE being handled (what a panic left unhandled).
fn completion_loop(ring: &Ring, batch: &mut Vec<(u64, i32)>, next: &mut usize) {
    let mut stopping = false;
    loop {
        // SAFETY: to_submit 0: only waits for one completion.
        let r = unsafe { ring.ring.submitter().enter::<libc::sigset_t>(0, 1, IORING_ENTER_GETEVENTS, None) };
        if let Err(e) = r {
            if e.raw_os_error() != Some(libc::EINTR) {
                panic!("io_uring_enter failed in the completion thread: {e}");
            }
        }
        batch.clear();
        *next = 0;
        ring.drain_cq(batch);
        let mut stop = false;
        for (i, &(user_data, res)) in batch.iter().enumerate() {
            *next = i;
            if user_data == STOP {
                stop = true;
            } else {
                #[cfg(test)]
                super::tests::maybe_inject_panic(ring, (user_data & !super::kbuf::STEP_MASK) as usize);
                ring.complete(user_data, res);
            }
        }
        // After the stop, wait for what is still in flight (a client
        // that went away without reaping).
        if stop || (stopping && ring.inflight.load(Ordering::Relaxed) == 0) {
            if ring.inflight.load(Ordering::Relaxed) == 0 {
                return;
            }
            stopping = true;
        }
    }
}
