//! fio's verify family for bench jobs: each written block carries
//! headers and a checksum, a pattern or both (block.rs), and is read back
//! and checked; the job's error becomes EILSEQ when a block fails.
//!
//! The parts: the methods (algo.rs), the header (header.rs), the pattern
//! (pattern.rs), a block's layout (block.rs), the options and fio's
//! fix-ups (options.rs), the state file (state.rs), the read-back
//! (readback.rs) and failure reports and dumps (failure.rs).
//!
//! What a job keeps, allocated at setup: per block of its region, the
//! sequence number of the newest completed write (fio's `numberio`; the
//! newest issued wins when two writes to a block overlap), so a block
//! written twice is checked against its last write; per slot, the
//! sequence number of the write in it; with `verify_backlog`, a ring of
//! the blocks written since the last check. The write path fills the
//! block and the completion records it; nothing is allocated per I/O.
//!
//! When: after the job's writes (fio's verify phase); with
//! `verify_backlog=N`, also each time N more blocks have been written
//! (the job's I/O in flight is waited for first, then `verify_backlog_batch`
//! blocks are checked); a job that only reads checks each read as it
//! completes. `verify_only` replays the job's offsets without writing and
//! checks them; `experimental_verify` rebuilds the map the same way after
//! the writes. `verify_async=N` is accepted and verification stays on the
//! job's thread: mqblk's devices complete in memory, so a helper thread
//! would be handed a buffer the job then waits for before it can reuse
//! it, and the hand-off costs more than a CRC-32C of a 4 KiB block; the
//! result is the same.

mod algo;
mod block;
mod failure;
mod header;
mod options;
mod pattern;
mod readback;
mod state;

use mqblk::Buf;

pub use options::{resolve, VerifyOptions, VERIFY_OPTIONS};
pub use pattern::VerifyPattern;

use super::pattern::Pattern;
use block::{Layout, Want};
use options::Resolved;
use state::VerifyState;

/// fio's errno for a verify failure.
pub const EILSEQ: i32 = 84;
/// A block's entry: its newest completed write's sequence number, and
/// this bit once it has been checked since.
const VERIFIED: u64 = 1 << 63;

/// What a job's verification did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerifyCounts {
    /// Blocks read back and checked (or reads checked, for a read job).
    pub blocks: u64,
    /// Of those, checked while the job was still writing (`verify_backlog`).
    pub during_run: u64,
    pub failed: u64,
}

impl VerifyCounts {
    pub fn merge(&mut self, o: &VerifyCounts) {
        self.blocks += o.blocks;
        self.during_run += o.during_run;
        self.failed += o.failed;
    }
}

/// `verify_backlog`: the blocks written since they were last checked.
struct Backlog {
    every: u64,
    batch: u64,
    /// Block indices, oldest first; bounded by the region's blocks (an
    /// entry pushed out is checked at the end instead).
    ring: std::collections::VecDeque<u32>,
    since: u64,
}

/// One job's verifier.
pub struct Verifier {
    layout: Layout,
    job: String,
    /// The device's name in messages and dump files.
    file: String,
    /// Which of the plan's jobs (clones counted): its state file's name.
    index: usize,
    region_start: u64,
    region_len: u64,
    block_bytes: u64,
    seed_base: u64,
    writes: bool,
    do_verify: bool,
    check_seq: bool,
    check_seed: bool,
    fatal: bool,
    dump: bool,
    blocks: Vec<u64>,
    /// Writes issued: the last one's sequence number.
    issued: u64,
    slot_seq: Vec<u64>,
    /// Writes that failed, for the state file (bounded by the depth: a
    /// failed write ends the job).
    incomplete: Vec<u64>,
    backlog: Option<Backlog>,
    /// `verify_state_load`: which writes the run being checked completed.
    loaded: Option<VerifyState>,
    /// The expected pattern of a block being checked.
    scratch: Vec<u8>,
    readback: readback::Slots,
    pub counts: VerifyCounts,
}

impl Verifier {
    /// Job `job_index`'s verifier over its region, `depth` slots deep, on
    /// a device driven by `driver` (named so in reports without
    /// `filename`, as fio names the file).
    pub fn new(
        opts: &super::options::JobOptions,
        r: Resolved,
        ((region_start, region_len), depth): ((u64, u64), usize),
        job_index: usize,
        driver: &str,
    ) -> Result<Self, String> {
        let v = &opts.verify;
        let nr_blocks = region_len / r.block_bytes;
        let keeps_map = r.writes && (v.do_verify || v.only);
        let backlog = (keeps_map && v.backlog > 0).then(|| Backlog {
            every: v.backlog,
            batch: if v.backlog_batch == 0 { v.backlog } else { v.backlog_batch },
            ring: std::collections::VecDeque::with_capacity(nr_blocks as usize),
            since: 0,
        });
        let loaded = match v.state_load && v.only && r.writes {
            true => Some(VerifyState::load(&opts.name, job_index)?),
            false => None,
        };
        let file = opts.filename.as_deref().map_or(driver, |f| f.rsplit('/').next().unwrap_or(f));
        Ok(Self {
            job: opts.name.clone(),
            file: file.to_string(),
            index: job_index,
            region_start,
            region_len,
            block_bytes: r.block_bytes,
            seed_base: opts.randseed ^ (job_index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            writes: r.writes,
            do_verify: v.do_verify || v.only,
            check_seq: r.check_seq,
            check_seed: r.check_seed,
            fatal: v.fatal,
            dump: v.dump,
            blocks: if keeps_map { vec![0; nr_blocks as usize] } else { Vec::new() },
            issued: 0,
            slot_seq: vec![0; depth],
            incomplete: Vec::with_capacity(depth),
            backlog,
            loaded,
            scratch: vec![0; r.block_bytes as usize],
            readback: readback::Slots::new(depth),
            layout: r.layout,
            counts: VerifyCounts::default(),
        })
    }

    /// The seed of write `seq`'s data.
    fn seed_of(&self, seq: u64) -> u64 {
        let mut z = self.seed_base ^ seq.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn block_of(&self, offset: u64) -> usize {
        debug_assert_eq!((offset - self.region_start) % self.block_bytes, 0, "verified writes are whole blocks");
        ((offset - self.region_start) / self.block_bytes) as usize
    }

    /// Fills `buf`, the write at `offset` in slot `slot`, with the next
    /// sequence number's headers and data.
    #[inline]
    pub fn fill(&mut self, buf: &mut [u8], offset: u64, slot: usize) {
        self.issued += 1;
        self.slot_seq[slot] = self.issued;
        self.layout.fill(buf, offset, self.issued, self.seed_of(self.issued));
    }

    /// Records the completion of the write at `offset` in slot `slot`
    /// (`ok`: it succeeded); true when a `verify_backlog` check is due.
    #[inline]
    pub fn written(&mut self, slot: usize, offset: u64, ok: bool) -> bool {
        let seq = self.slot_seq[slot];
        if !ok && self.incomplete.len() < self.incomplete.capacity() {
            self.incomplete.push(seq);
        }
        if self.blocks.is_empty() {
            return false;
        }
        self.record(self.block_of(offset), seq, ok)
    }

    /// Block `b` now holds write `seq` (`ok`), or nothing known if it failed.
    fn record(&mut self, b: usize, seq: u64, ok: bool) -> bool {
        if !ok {
            self.blocks[b] = 0;
            return false;
        }
        if seq <= self.blocks[b] & !VERIFIED {
            return false; // an older write completing after a newer one
        }
        self.blocks[b] = seq;
        let Some(backlog) = self.backlog.as_mut() else { return false };
        if backlog.ring.len() == backlog.ring.capacity() {
            backlog.ring.pop_front();
        }
        backlog.ring.push_back(b as u32);
        backlog.since += 1;
        backlog.since >= backlog.every
    }

    /// fio's dry run (`verify_only`, and `experimental_verify` after the
    /// writes): the job's writes replayed from `pattern` without I/O, up to
    /// `limits` (bytes, I/Os), recorded as if each had completed, except
    /// those a loaded state says did not.
    pub(in crate::bench) fn replay_writes(&mut self, pattern: &mut Pattern, bs: (u64, u64), limits: (u64, u64)) {
        let (mut bytes, mut ios) = (0, 0);
        self.issued = 0;
        self.blocks.fill(0);
        while bytes < limits.0 && ios < limits.1 {
            let is_write = pattern.next_is_write();
            let len = if is_write { bs.1 } else { bs.0 };
            let offset = pattern.next_offset(len, true);
            if is_write {
                self.issued += 1;
                if self.loaded.as_ref().is_some_and(|s| self.issued > s.issued) {
                    break; // the saved run stopped here
                }
                let ok = self.loaded.as_ref().map_or(true, |s| s.completed(self.issued));
                if !self.blocks.is_empty() {
                    self.record(self.block_of(offset), self.issued, ok);
                }
            }
            bytes += len;
            ios += 1;
        }
        if let Some(backlog) = self.backlog.as_mut() {
            backlog.ring.clear();
        }
    }

    /// A read of a job that only reads, completed into `buf` from
    /// `offset`: checked now (fio's `verify_io_u` on each read). False if
    /// it failed and the job should stop (`verify_fatal`).
    pub fn check_read(&mut self, buf: &mut Buf, offset: u64) -> bool {
        debug_assert!(!self.writes);
        self.counts.blocks += 1;
        // The n-th read expects the n-th write's seed (fio: "only if the
        // read invocation exactly matches the original write").
        let seed = self.check_seed.then(|| self.seed_of(self.counts.blocks));
        let want = Want { seq: None, seed };
        match self.layout.check(buf, offset, want, &mut self.scratch) {
            Ok(()) => true,
            Err(f) => {
                self.failed(&f, buf, offset, None);
                !self.fatal
            }
        }
    }

    /// The job's verify error: EILSEQ if a block failed.
    pub fn error(&self) -> i32 {
        if self.counts.failed > 0 {
            EILSEQ
        } else {
            0
        }
    }

    /// The job's index and region (offset, bytes).
    pub fn job_region(&self) -> (usize, u64, u64) {
        (self.index, self.region_start, self.region_len)
    }

    /// Whether the job writes (else each read is checked).
    pub fn writes(&self) -> bool {
        self.writes
    }

    /// Whether blocks are read back after the writes (`do_verify`).
    pub fn verifies_written(&self) -> bool {
        self.writes && self.do_verify
    }

    /// `verify_state_save`: what this job's writes did, for a later
    /// `verify_only` run.
    pub fn save_state(&self) -> Result<(), String> {
        if !self.writes {
            return Ok(());
        }
        let mut incomplete = self.incomplete.clone();
        incomplete.sort_unstable();
        let state = VerifyState { name: self.job.clone(), index: self.index, issued: self.issued, incomplete };
        state.save().map(|_| ())
    }
}

#[cfg(test)]
mod tests;
