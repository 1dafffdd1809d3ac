//! Reading written blocks back and checking them (fio's `do_verify` and
//! its backlog reads): every block written and not checked since, after
//! the job's writes; or, with `verify_backlog`, the oldest
//! `verify_backlog_batch` of the ring. Reads go out into the job's write
//! buffers (as fio reuses its io_u buffers: registered ones stay
//! registered), as many at a time as there are buffers; their slots and
//! completion vector are the verifier's, allocated at setup.

use mqblk::{Bio, Buf, Client, Completion};

use super::block::Want;
use super::{Verifier, VERIFIED};

/// The read-back's own bookkeeping, allocated at setup.
pub(super) struct Slots {
    free: Vec<usize>,
    done: Vec<Completion>,
    /// Per slot: the sequence number its block should hold.
    want_seq: Vec<u64>,
}

impl Slots {
    pub(super) fn new(depth: usize) -> Self {
        let depth = depth.max(1);
        Self { free: Vec::with_capacity(depth), done: Vec::with_capacity(depth), want_seq: vec![0; depth] }
    }
}

/// Which blocks a read-back takes.
enum Source {
    /// Every block written and unchecked, from this index on.
    Scan(usize),
    /// Up to this many blocks from the backlog ring.
    Ring(u64),
}

impl Verifier {
    /// After the job's writes: checks every block written and not checked
    /// since. Err only when the reads themselves fail.
    pub fn verify_written(&mut self, client: &mut Client, bufs: &mut [Option<Buf>]) -> Result<(), String> {
        self.read_back(client, bufs, Source::Scan(0), false)
    }

    /// A `verify_backlog` check, with nothing of the job's in flight: the
    /// oldest `verify_backlog_batch` blocks written. False if a block
    /// failed and the job should stop (`verify_fatal`).
    pub fn verify_backlog(&mut self, client: &mut Client, bufs: &mut [Option<Buf>]) -> Result<bool, String> {
        let Some(backlog) = self.backlog.as_mut() else { return Ok(true) };
        // The writes past the trigger (those in flight then) count on.
        backlog.since = backlog.since.saturating_sub(backlog.every);
        let batch = backlog.batch;
        let failed = self.counts.failed;
        self.read_back(client, bufs, Source::Ring(batch), true)?;
        Ok(!(self.fatal && self.counts.failed > failed))
    }

    /// The next block to check, or None.
    fn next_block(&mut self, src: &mut Source) -> Option<usize> {
        let unchecked = |entry: u64| entry != 0 && entry & VERIFIED == 0;
        match src {
            Source::Scan(next) => {
                let found = self.blocks[*next..].iter().position(|&e| unchecked(e))? + *next;
                *next = found + 1;
                Some(found)
            }
            Source::Ring(left) => {
                let ring = &mut self.backlog.as_mut().expect("a ring source has a backlog").ring;
                while *left > 0 {
                    let b = ring.pop_front()? as usize;
                    if unchecked(self.blocks[b]) {
                        *left -= 1;
                        return Some(b);
                    }
                }
                None
            }
        }
    }

    /// Reads back and checks the blocks `src` gives, as many at a time as
    /// there are buffers (and client capacity); `during_run` counts them
    /// as backlog checks. Stops issuing at a failure with `verify_fatal`.
    fn read_back(
        &mut self,
        client: &mut Client,
        bufs: &mut [Option<Buf>],
        mut src: Source,
        during_run: bool,
    ) -> Result<(), String> {
        let depth = bufs.len().min(client.capacity()).min(self.readback.want_seq.len());
        assert!(depth > 0, "a job that writes has write buffers");
        assert!(bufs[..depth].iter().all(|b| b.as_ref().is_some_and(|b| b.len() as u64 == self.block_bytes)));
        self.readback.free.clear();
        self.readback.free.extend(0..depth);
        let mut stop = false;
        loop {
            while let (false, Some(&idx)) = (stop, self.readback.free.last()) {
                let Some(b) = self.next_block(&mut src) else { break };
                self.readback.free.pop();
                self.readback.want_seq[idx] = self.blocks[b];
                let offset = self.region_start + b as u64 * self.block_bytes;
                let mut buf = bufs[idx].take().expect("a free read-back slot has its buffer");
                // A device that does not fill the buffer must not pass on
                // what the buffer held before (a block written from it).
                buf.fill(0);
                client
                    .submit(Bio::read(offset, buf), (offset << 16) | idx as u64)
                    .map_err(|r| format!("verify: read at {offset}: {}", r.error))?;
            }
            if client.in_flight() == 0 {
                return Ok(());
            }
            let mut done = std::mem::take(&mut self.readback.done);
            let reaped = client.do_io(&mut done, 1, depth, None).map_err(|e| format!("verify: {e}"));
            for c in done.drain(..) {
                let (offset, idx) = (c.user_data >> 16, (c.user_data & 0xffff) as usize);
                let mut buf = c.segs.into_buf().expect("reads give their buffer back");
                if !c.status.is_ok() {
                    return Err(format!("verify: read at offset {offset} failed: {}", c.status));
                }
                // verify_fatal: the reads in flight at the first failure
                // go unchecked (fio stops the job there).
                if !stop {
                    stop = !self.check_block(&mut buf, offset, self.readback.want_seq[idx], during_run);
                }
                bufs[idx] = Some(buf);
                self.readback.free.push(idx);
            }
            self.readback.done = done;
            reaped?;
        }
    }

    /// Checks one block read back from `offset`, which should hold write
    /// `seq`; marks it checked. False if it failed and `verify_fatal`.
    fn check_block(&mut self, buf: &mut Buf, offset: u64, seq: u64, during_run: bool) -> bool {
        let b = self.block_of(offset);
        self.blocks[b] |= VERIFIED;
        self.counts.blocks += 1;
        self.counts.during_run += u64::from(during_run);
        let want = Want { seq: self.check_seq.then_some(seq), seed: self.check_seed.then(|| self.seed_of(seq)) };
        match self.layout.check(buf, offset, want, &mut self.scratch) {
            Ok(()) => true,
            Err(f) => {
                self.failed(&f, buf, offset, Some(seq));
                !self.fatal
            }
        }
    }
}
