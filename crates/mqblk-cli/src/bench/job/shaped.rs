//! The shaping copy of the job loop's steps (`SHAPED`): each I/O's
//! direction as the job's rates allow it, its count against rates and
//! think time, and the loop's stalls (shape.rs has the rules; log.rs the
//! logs, written from job/complete.rs). The synthetic loop compiles none
//! of this.

use std::sync::atomic::Ordering;

use mqblk::clock::Clock;
use mqblk::{Bio, Client};

use super::{Control, Dir, IoState, JobLoop, Progress, Trims, PHASE_STOP};
use crate::bench::latency::Verdict;
use crate::bench::shape::Stall;

/// A job ahead of its flow with no `flow_sleep` looks again after this.
const FLOW_RETRY_NS: u64 = 20_000;

impl<const TIMED: bool, const REPLAY: bool, const SHAPED: bool> JobLoop<'_, TIMED, REPLAY, SHAPED> {
    /// The next I/O's direction, as the pattern and the job's rates pick
    /// it; None when the rates hold every direction back (`p.paced` says
    /// until when). A trim job's alternate as trim.rs says (it has no
    /// rates).
    #[inline(never)]
    pub(super) fn paced_direction(&self, io: &mut IoState, p: &mut Progress) -> Option<Dir> {
        let dir = match self.trims {
            Trims::Only => Dir::Trim,
            Trims::ThenWrite => {
                if p.trimmed_at.is_some() {
                    Dir::Write
                } else {
                    Dir::Trim
                }
            }
            Trims::None => self.rated_direction(io, p)?,
        };
        if io.flow.as_mut().is_some_and(|flow| flow.ahead()) {
            // fio's flow stall: the I/O in flight, then flow_sleep (with
            // none, fio spins; here a short sleep, so waiting sleeps).
            if dir != Dir::Trim {
                p.held_direction = Some(dir == Dir::Write);
            }
            let sleep_ns =
                if self.opts.shape.flow_sleep_ns > 0 { self.opts.shape.flow_sleep_ns } else { FLOW_RETRY_NS };
            p.paced = Some((self.clock.now_ns() - io.shape_epoch_ns + sleep_ns, true));
            return None;
        }
        Some(dir)
    }

    /// A read or write job's next direction as its rates allow it; None
    /// (with `p.paced` set) when they hold every direction back.
    fn rated_direction(&self, io: &mut IoState, p: &mut Progress) -> Option<Dir> {
        let wanted = match p.held_direction.take() {
            Some(is_write) => is_write,
            None => p.pattern.next_is_write(),
        };
        let Some(pacer) = io.pacer.as_ref() else { return Some(Dir::of_write(wanted)) };
        match pacer.stall(wanted, self.clock.now_ns() - io.shape_epoch_ns) {
            Stall::Go(is_write) => Some(Dir::of_write(is_write)),
            Stall::Until { until_ns, is_write, quiesce } => {
                p.held_direction = Some(is_write);
                p.paced = Some((until_ns, quiesce));
                None
            }
        }
    }

    /// A trimwrite's next offset (trim.rs): a trim's from the pattern, and
    /// the write after it where the trim went.
    #[inline(never)]
    pub(super) fn trimwrite_offset(&self, dir: Dir, bs: u64, p: &mut Progress) -> u64 {
        match (dir, p.trimmed_at.take()) {
            (Dir::Write, Some(offset)) => offset,
            _ => {
                let offset = p.pattern.next_offset(bs, false);
                p.trimmed_at = Some(offset);
                offset
            }
        }
    }

    /// Counts an issued I/O against the job's rate and think time (trims
    /// are not paced: trim.rs refuses rates with them).
    #[inline(never)]
    pub(super) fn shaped_issued(&self, dir: Dir, bs: u64, io: &mut IoState, p: &mut Progress) {
        if let (Some(pacer), false) = (io.pacer.as_mut(), dir == Dir::Trim) {
            pacer.issued(dir == Dir::Write, bs);
        }
        if let Some(think) = io.think.as_mut() {
            p.think_due = think.issued();
        }
        if dir == Dir::Write && io.syncer.as_ref().is_some_and(|s| s.flush_due()) {
            // fio's fsync=N: the I/O in flight, then a flush (a stall).
            p.flush_due = true;
            p.paced = Some((self.clock.now_ns() - io.shape_epoch_ns, true));
        }
    }

    /// A stall of the `SHAPED` loop (fio's `rate_ddir` sleep and
    /// `handle_thinktime`): waits for the I/O in flight when asked (fio's
    /// `io_u_quiesce`), spins and sleeps the think time, sleeps until the
    /// rate lets the next I/O go, and checks `rate_min`. Sleeps are cut
    /// short when the run stops.
    #[cold]
    pub(super) fn stall(
        &self,
        client: &mut Client,
        ctrl: &Control,
        io: &mut IoState,
        p: &mut Progress,
    ) -> Result<(), String> {
        let quiesce = p.think_due || p.paced.is_some_and(|(_, q)| q);
        while quiesce && client.in_flight() > 0 {
            self.reap(client, client.in_flight(), io, p)?;
        }
        if p.flush_due {
            p.flush_due = false;
            client.submit_and_wait(Bio::flush()).map_err(|e| format!("job '{}': fsync: {e}", self.opts.name))?;
            io.syncer.as_mut().expect("a job due to flush has a syncer").flushes += 1;
        }
        if p.lat_reset_due {
            // The latency target's final window: from fresh statistics.
            p.lat_reset_due = false;
            self.end_ramp(io, p);
        }
        if p.think_due {
            let think = io.think.as_mut().expect("a job due to think has a think time");
            let spin_until = self.clock.now_ns() + think.spin_ns;
            while self.clock.now_ns() < spin_until {
                std::hint::spin_loop();
            }
            let until = self.clock.now_ns() + think.sleep_ns;
            think.thought();
            p.think_due = false;
            sleep_until(&self.clock, until, ctrl);
        }
        if let Some((until_ns, _)) = p.paced.take() {
            sleep_until(&self.clock, io.shape_epoch_ns + until_ns, ctrl);
        }
        self.publish(io, p);
        if let Some(pacer) = io.pacer.as_mut() {
            let (bytes, ios) = ([io.stats[0].bytes, io.stats[1].bytes], [io.stats[0].ios, io.stats[1].ios]);
            pacer
                .check_min_rate(self.clock.now_ns() - io.shape_epoch_ns, bytes, ios)
                .map_err(|e| format!("job '{}': {e}", self.opts.name))?;
        }
        Ok(())
    }
}

impl<const TIMED: bool, const REPLAY: bool, const SHAPED: bool> JobLoop<'_, TIMED, REPLAY, SHAPED> {
    /// A completion against the latency target and limit (latency.rs):
    /// a miss may bring the depth down (the I/O in flight waited for
    /// first, through a stall) or fail the job with ETIMEDOUT; then the
    /// window is checked (fio's `lat_target_check`, here per completion).
    #[inline(never)]
    pub(super) fn latency_completion(&self, now: u64, slot: super::Slot, io: &mut IoState, p: &mut Progress) {
        let Some(lt) = io.lat_target.as_mut() else { return };
        let lat_ns = now.saturating_sub(slot.issue_ns);
        let mut verdict = lt.completed(slot.dir == Dir::Write, lat_ns, now);
        if verdict == Verdict::Ok && p.measuring {
            let (v, final_window) = lt.check(now);
            verdict = v;
            p.lat_reset_due |= final_window;
        }
        p.lat_done = lt.done;
        match verdict {
            Verdict::Ok => {}
            Verdict::Quiesce => p.paced = Some((now.saturating_sub(io.shape_epoch_ns), true)),
            Verdict::Fatal => {
                if p.error == 0 {
                    eprintln!(
                        "mqblk bench: job '{}': latency of {} us exceeds the specified maximum",
                        self.opts.name,
                        lat_ns / 1_000
                    );
                    p.error = libc::ETIMEDOUT;
                }
            }
        }
    }
}

/// Sleeps until `until_ns` on `clock`, in slices of at most 50 ms so that
/// a stopped run is not kept waiting.
fn sleep_until(clock: &Clock, until_ns: u64, ctrl: &Control) {
    loop {
        let now = clock.now_ns();
        if now >= until_ns || ctrl.phase.load(Ordering::Acquire) == PHASE_STOP {
            return;
        }
        std::thread::sleep(std::time::Duration::from_nanos((until_ns - now).min(50_000_000)));
    }
}
