//! A verify failure, reported as fio reports it (verify.c
//! `log_verify_failure`, `verify_header`, `check_pattern`): which check
//! failed, where (the interval's offset and length, and the block it is
//! part of), expected against received; with `verify_dump`, the block as
//! received and as it was written, in files named as fio names them
//! (`FILE.OFFSET.received`, `FILE.OFFSET.expected`, or
//! `FILE.OFFSET.hdr_fail` when the header itself is bad) in the working
//! directory. Failures are counted; the first `MAX_REPORTED` of a job are
//! printed (a corrupt device would print a line per block).

use std::fmt::Write;

use super::block::{Check, Failure};
use super::Verifier;

const MAX_REPORTED: u64 = 16;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

impl Verifier {
    /// Counts and reports failure `f` of the block `buf` read from
    /// `block_offset`, which should hold write `seq` (None: unknown, a
    /// read job's).
    #[cold]
    pub(super) fn failed(&mut self, f: &Failure, buf: &[u8], block_offset: u64, seq: Option<u64>) {
        self.counts.failed += 1;
        if self.counts.failed > MAX_REPORTED {
            return;
        }
        eprintln!("{}", self.describe(f, block_offset, buf.len()));
        if self.dump {
            self.dump_buffers(f, buf, block_offset, seq);
        }
        if self.counts.failed == MAX_REPORTED {
            eprintln!("{}: verify: further failures are counted, not shown", self.job);
        }
    }

    /// fio's lines for failure `f`.
    fn describe(&self, f: &Failure, block_offset: u64, block_len: usize) -> String {
        let at = format!(
            "at file {} offset {}, length {} (requested block: offset={block_offset}, length={block_len})",
            self.file, f.offset, f.len_bytes
        );
        let job = &self.job;
        let n = self.layout.algo.digest_bytes();
        match &f.check {
            Check::Header(e) => format!("{job}: verify: {e} {at}"),
            Check::Digest { expected, received } => format!(
                "{job}: {}: verify failed {at}\n       Expected CRC: {}\n       Received CRC: {}",
                self.layout.algo.name(),
                hex(&expected[..n]),
                hex(&received[..n])
            ),
            Check::Pattern { at: pos, got, wanted } => format!(
                "{job}: got pattern '{got:02x}', wanted '{wanted:02x}'. Bad bits {}\n{job}: bad pattern block offset \
                 {pos}\n{job}: pattern: verify failed {at}",
                (got ^ wanted).count_ones()
            ),
        }
    }

    /// `verify_dump`: the failing interval as received and as written
    /// (regenerated from the write it should hold, or the one its header
    /// names).
    fn dump_buffers(&self, f: &Failure, buf: &[u8], block_offset: u64, seq: Option<u64>) {
        let start = (f.offset - block_offset) as usize;
        let received = &buf[start..start + f.len_bytes];
        if let Check::Header(_) = f.check {
            self.dump_file(f.offset, "hdr_fail", received);
            return;
        }
        self.dump_file(f.offset, "received", received);
        let (seq, seed) = match (seq, f.header) {
            (Some(seq), _) => (seq, self.seed_of(seq)),
            (None, Some(h)) => (h.seq, h.seed),
            (None, None) => (0, self.seed_of(0)),
        };
        let mut expected = buf.to_vec();
        self.layout.fill(&mut expected, block_offset, seq, seed);
        self.dump_file(f.offset, "expected", &expected[start..start + f.len_bytes]);
    }

    fn dump_file(&self, offset: u64, kind: &str, data: &[u8]) {
        let name = format!("{}.{offset}.{kind}", self.file);
        match std::fs::write(&name, data) {
            Ok(()) => eprintln!("       {kind} data dumped as {name}"),
            Err(e) => eprintln!("{}: verify_dump: {name}: {e}", self.job),
        }
    }
}
