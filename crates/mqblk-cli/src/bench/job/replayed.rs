//! The replaying copy of the job loop (`REPLAY`, `read_iolog`): each I/O,
//! its direction, offset, length and time, comes from the trace
//! (replay.rs) rather than the job's pattern, and the job ends with the
//! trace. The synthetic loop compiles none of this.

use std::sync::atomic::Ordering;

use mqblk::Client;

use super::{Dir, IoState, JobLoop, Progress, PHASE_STOP};
use crate::bench::iolog::{IoAction, TraceEntry};
use crate::bench::replay::{replayed_bio, Replay};

/// The trace a job replays, and the length of the I/O in each slot (a
/// replayed I/O's length is the trace's, not the job's `bs`).
pub(super) struct ReplaySource {
    pub(super) trace: Replay,
    /// Indexed by an I/O's `user_data`, as the slots are.
    pub(super) len_bytes: Vec<u64>,
}

impl ReplaySource {
    /// `trace` for a job of `depth` slots.
    pub(super) fn new(trace: Replay, depth: usize) -> Self {
        Self { trace, len_bytes: vec![0; depth] }
    }
}

impl<const TIMED: bool, const REPLAY: bool, const SHAPED: bool> JobLoop<'_, TIMED, REPLAY, SHAPED> {
    /// Issues the trace's next I/O in slot `idx` (`prev`, `plugged`: as
    /// `submit_one`). False if there was none to issue: the trace is over
    /// or the run stopped during its delay.
    #[inline(always)]
    pub(super) fn submit_replayed(
        &self,
        c: &mut Client,
        idx: u32,
        prev: Option<u32>,
        plugged: bool,
        io: &mut IoState,
        p: &mut Progress,
    ) -> Result<bool, String> {
        debug_assert!(REPLAY);
        let Some(e) = self.next_replayed(io, p)? else { return Ok(false) };
        let action = e.action_io();
        let (bufs, flags) = match action {
            IoAction::Write => (&mut io.write_bufs, self.write_flags),
            _ => (&mut io.read_bufs, self.hipri),
        };
        // A sync's range is the trace's (its bio has none).
        let bio = replayed_bio(&e, &mut bufs[idx as usize], flags).with_ioprio(self.opts.ioprio);
        io.replay.as_mut().expect("a replaying job has its trace").len_bytes[idx as usize] = e.len_bytes;
        // A replayed sync is accounted nowhere (job/complete.rs), under
        // the read index.
        let dir = match action {
            IoAction::Write => Dir::Write,
            IoAction::Trim => Dir::Trim,
            _ => Dir::Read,
        };
        self.issue(c, (idx, prev, plugged), bio, (dir, action, e.offset, e.len_bytes), io)?;
        p.issued_bytes += e.len_bytes;
        p.issued_ios += 1;
        Ok(true)
    }

    /// The replayed trace's next I/O, after its delay; None (and the job's
    /// source done) at its end or when the run stops.
    fn next_replayed(&self, io: &mut IoState, p: &mut Progress) -> Result<Option<TraceEntry>, String> {
        let replay = io.replay.as_mut().expect("a replaying job has its trace");
        let stopped = || self.ctrl.phase.load(Ordering::Acquire) == PHASE_STOP;
        let next = replay.trace.next_io(stopped).map_err(|e| format!("job '{}': {e}", self.opts.name))?;
        p.source_done = next.is_none();
        Ok(next)
    }
}
