//! The job loop's verify steps (verify/ does the checking): a
//! `verify_backlog` check during the run, `verify_only`'s dry run in
//! place of the I/O, and after the writes the read-back, fio's state file
//! and the job's verify error.

use mqblk::Client;

use super::super::pattern::Pattern;
use super::super::verify::{VerifyCounts, EILSEQ};
use super::{IoState, JobLoop, Progress};

impl<const TIMED: bool, const REPLAY: bool, const SHAPED: bool> JobLoop<'_, TIMED, REPLAY, SHAPED> {
    /// `verify_backlog` blocks written: waits for the job's I/O in flight,
    /// then checks a batch in the write buffers, now all free.
    #[cold]
    #[inline(never)]
    pub(super) fn backlog_check(&self, client: &mut Client, io: &mut IoState, p: &mut Progress) -> Result<(), String> {
        while client.in_flight() > 0 {
            let in_flight = client.in_flight();
            self.reap(client, in_flight, io, p)?;
        }
        p.verify_due = false;
        let v = io.verifier.as_mut().expect("a backlog check has a verifier");
        let go_on = v.verify_backlog(client, &mut io.write_bufs).map_err(|e| self.named(e))?;
        if !go_on && p.error == 0 {
            p.error = EILSEQ; // verify_fatal: the job stops here
        }
        Ok(())
    }

    /// `verify_only` for a job that writes: its writes replayed without
    /// I/O (fio's dry run), to be checked by `verify_end`.
    pub(super) fn dry_run(&self, io: &mut IoState, p: &mut Progress) {
        let v = io.verifier.as_mut().expect("verify_only has a verifier");
        let bs = (self.opts.bs_read, self.opts.bs_write);
        v.replay_writes(&mut p.pattern, bs, (self.io_limit_bytes, self.io_limit_count));
    }

    /// After the writes: `experimental_verify` rebuilds the map by
    /// replaying the job's offsets, the written blocks are read back and checked (unless the
    /// job failed or `do_verify=0`), and `verify_state_save` writes fio's
    /// state file (the job's pattern restarts from its seed for the
    /// replay). Returns the job's error and what was verified.
    pub(super) fn verify_end(
        &self,
        client: &mut Client,
        io: &mut IoState,
        p: &Progress,
    ) -> Result<(i32, VerifyCounts), String> {
        let Some(v) = io.verifier.as_mut() else { return Ok((p.error, VerifyCounts::default())) };
        let vo = &self.opts.verify;
        if vo.state_save && !vo.only && v.writes() {
            if let Err(e) = v.save_state() {
                eprintln!("{}", self.named(e));
            }
        }
        if vo.experimental && !vo.only && v.verifies_written() {
            let (index, start, len) = v.job_region();
            let mut fresh = Pattern::new(self.opts, io.geometry, index, start, len).map_err(|e| self.named(e))?;
            let bs = (self.opts.bs_read, self.opts.bs_write);
            v.replay_writes(&mut fresh, bs, (u64::MAX, p.issued_ios));
        }
        if p.error == 0 && v.verifies_written() {
            v.verify_written(client, &mut io.write_bufs).map_err(|e| self.named(e))?;
        }
        if v.counts.failed > 0 {
            eprintln!("{}: verify: {} of {} blocks failed", self.opts.name, v.counts.failed, v.counts.blocks);
        }
        let error = if p.error != 0 { p.error } else { v.error() };
        Ok((error, v.counts))
    }

    fn named(&self, e: String) -> String {
        format!("job '{}': {e}", self.opts.name)
    }
}
