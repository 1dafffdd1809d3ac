//! The completion side of the job loop (fio's `io_completed`): reaping
//! completions in batches and accounting each where it is reaped, its
//! stats and latencies, the verifier's map (or its check of a read), its
//! slot and buffer free again.

use mqblk::{Client, Completion};

use super::super::errors::ErrorKind;
use super::super::log::Sample;
use super::super::verify::EILSEQ;
use super::{Dir, IoState, JobLoop, Progress};

impl<const TIMED: bool, const REPLAY: bool, const SHAPED: bool> JobLoop<'_, TIMED, REPLAY, SHAPED> {
    /// Reaps at least `iodepth_batch_complete_min` (at most what is in
    /// flight) and at most `iodepth_batch_complete_max` completions,
    /// accounting each as it is reaped (no vector in between); one clock
    /// read, at the first completion, stamps them all.
    #[inline(always)]
    pub(super) fn reap(
        &self,
        client: &mut Client,
        in_flight: usize,
        io: &mut IoState,
        p: &mut Progress,
    ) -> Result<(), String> {
        let min = self.complete_min.min(in_flight);
        client
            .do_io_each(min, self.complete_max, None, Reaped { job: self, now: None, io, p })
            .map_err(|e| format!("job '{}': do_io: {e}", self.opts.name))?;
        Ok(())
    }

    /// Accounts one completion (fio's `io_completed`): its direction's
    /// stats and latencies or the job's first error, the verifier's map,
    /// and the slot and its buffer free again.
    #[inline(always)]
    fn account(&self, c: Completion, now: u64, io: &mut IoState, p: &mut Progress) {
        let idx = c.user_data as usize;
        let slot = io.slots[idx];
        // Whether the I/O counts in its direction's stats, and carries a
        // buffer: a trim counts without one (only the REPLAY and SHAPED
        // loops trim); a replayed sync does neither.
        let (counted, data, bs) = if REPLAY {
            let data = !c.segs.is_empty();
            let len = io.replay.as_ref().expect("a replaying job has its trace").len_bytes[idx];
            (data || slot.dir == Dir::Trim, data, len)
        } else if SHAPED {
            (true, slot.dir != Dir::Trim, u64::from(slot.len_bytes))
        } else {
            (true, true, u64::from(slot.len_bytes))
        };
        let stats = &mut io.stats[slot.dir as usize];
        // Verify and zbd jobs run the SHAPED copy: the plain one tests
        // for neither.
        if let (true, Dir::Write, Some(v)) = (SHAPED, slot.dir, io.verifier.as_mut()) {
            p.verify_due |= v.written(idx, slot.offset, c.status.is_ok());
        }
        if c.status.is_ok() {
            if counted {
                stats.ios += 1;
                stats.bytes += bs;
                if TIMED {
                    let clat = now.saturating_sub(slot.issue_ns + slot.slat_ns);
                    stats.record_latency(slot.slat_ns, clat, self.lat_hist);
                }
                if SHAPED {
                    self.log_completion(now, slot, bs, io);
                    self.latency_completion(now, slot, io, p);
                }
            }
        } else {
            stats.errors += 1;
            self.io_error(c.status.errno(), slot, bs, p);
        }
        match (SHAPED, slot.dir, io.zbd.as_mut()) {
            (true, Dir::Write, Some(zbd)) => zbd.completed(slot.offset),
            (true, Dir::Trim, Some(zbd)) => zbd.trim_completed(slot.offset),
            _ => {}
        }
        if data {
            let mut buf = c.segs.into_buf().expect("data I/O completions carry their buffer");
            if slot.dir == Dir::Write {
                io.write_bufs[idx] = Some(buf);
            } else {
                if let (true, true, Some(v)) = (SHAPED, c.status.is_ok(), io.verifier.as_mut()) {
                    // A job that only reads checks each read (fio's verify
                    // of a read workload); verify_fatal stops it.
                    if !v.writes() && !v.check_read(&mut buf, slot.offset) && p.error == 0 {
                        p.error = EILSEQ;
                    }
                }
                io.read_bufs[idx] = Some(buf);
            }
        }
        io.free.push(idx as u32);
        p.total_ios += 1;
    }
}

impl<const TIMED: bool, const REPLAY: bool, const SHAPED: bool> JobLoop<'_, TIMED, REPLAY, SHAPED> {
    /// A failed I/O (errno `errno`): printed when `error_dump`, and the
    /// job's error unless its error policy (errors.rs) goes past it.
    #[cold]
    #[inline(never)]
    fn io_error(&self, errno: i32, slot: super::Slot, bs: u64, p: &mut Progress) {
        let policy = &self.opts.errors;
        // fio counts a trim's error as a write's.
        let kind = if slot.dir == Dir::Read { ErrorKind::Read } else { ErrorKind::Write };
        let continues = policy.continues(kind, errno);
        if policy.dump || !continues {
            let what = match slot.dir {
                Dir::Read => "read",
                Dir::Write => "write",
                Dir::Trim => "trim",
            };
            let text = std::io::Error::from_raw_os_error(errno);
            eprintln!(
                "mqblk bench: job '{}': io_u error: {text}: {what} offset={}, buflen={bs}",
                self.opts.name, slot.offset
            );
        }
        if p.first_error == 0 {
            p.first_error = errno;
        }
        if !continues && p.error == 0 {
            p.error = errno;
        }
    }

    /// fio's logs of one completion (log.rs), if the job writes any.
    #[inline(never)]
    fn log_completion(&self, now: u64, slot: super::Slot, bs: u64, io: &mut IoState) {
        let Some(logs) = io.logs.as_mut() else { return };
        let now = if TIMED { now } else { self.clock.now_ns() };
        let clat_ns = if TIMED { now.saturating_sub(slot.issue_ns + slot.slat_ns) } else { 0 };
        let sample =
            Sample { dir: slot.dir, bs, offset: slot.offset, ioprio: slot.ioprio, slat_ns: slot.slat_ns, clat_ns };
        logs.complete(now.saturating_sub(io.start_ns), &sample);
    }
}

/// The reap's sink: accounts each completion where it is reaped (a
/// `CompletionSink` rather than a closure, so that it is inlined into the
/// reaping loop); one clock read, at the first completion, stamps them all.
struct Reaped<'j, 'a, const TIMED: bool, const REPLAY: bool, const SHAPED: bool> {
    job: &'j JobLoop<'a, TIMED, REPLAY, SHAPED>,
    now: Option<u64>,
    io: &'j mut IoState,
    p: &'j mut Progress,
}

impl<const TIMED: bool, const REPLAY: bool, const SHAPED: bool> mqblk::CompletionSink
    for Reaped<'_, '_, TIMED, REPLAY, SHAPED>
{
    #[inline(always)]
    fn complete(&mut self, c: Completion) {
        let t = if TIMED { *self.now.get_or_insert_with(|| self.job.clock.now_ns()) } else { 0 };
        self.job.account(c, t, self.io, self.p);
    }
}
