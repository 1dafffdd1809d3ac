//! blktrace's binary records as a replay trace (fio's blktrace.c: what
//! `blkparse -d` writes): 48-byte `struct blk_io_trace` records, each
//! followed by `pdu_len` bytes of payload, in the byte order of the
//! machine that traced (the magic tells which).
//!
//! As fio, only queue (Q) events are replayed: a discard becomes a trim, a
//! flush a sync, others a read or a write (zero-byte ones are skipped);
//! notify events carry no I/O. Delays come from the nanosecond timestamps
//! by fio's rule (iolog.rs), offsets from sectors of 512 bytes, scaled and
//! aligned as in text logs; replay_align also rounds lengths up. A
//! truncated record or a bad magic or version is an error naming the
//! record; every device of the trace is mqblk's one device. Unless the job
//! gives `iodepth`, it replays at the trace's depth, probed as fio does:
//! per direction, the most I/Os queued (less those merged) before a
//! completion, at most `MAX_PROBED_DEPTH`, at least 1.

use std::io::Read;

use super::iolog::{Action, IoAction, ReplayRules, TraceEntry};

/// `BLK_IO_TRACE_MAGIC`, in the upper 24 bits of `magic`.
const MAGIC: u32 = 0x6561_7400;
/// `BLK_IO_TRACE_VERSION`, in its lower 8 bits.
const VERSION: u32 = 0x07;
/// `sizeof(struct blk_io_trace)`.
pub(super) const RECORD_BYTES: usize = 48;

/// The trace categories (`BLK_TC_*`), shifted into `action`'s upper half.
const TC_WRITE: u32 = 1 << (1 + 16);
const TC_FLUSH: u32 = 1 << (2 + 16);
const TC_NOTIFY: u32 = 1 << (10 + 16);
const TC_DISCARD: u32 = 1 << (13 + 16);
const TC_READ: u32 = 1 << 16;
/// The basic actions (`__BLK_TA_*`) in `action`'s lower half: queued,
/// merged at the back or front of a request, completed.
const TA_QUEUE: u32 = 1;
const TA_BACKMERGE: u32 = 2;
const TA_FRONTMERGE: u32 = 3;
const TA_COMPLETE: u32 = 8;
/// fio's cap on a probed depth (stacked devices may miss completions).
const MAX_PROBED_DEPTH: u64 = 1024;

/// Whether `first` (a file's first record) is blktrace's, and if so,
/// whether its byte order is big endian.
pub(super) fn detect(first: &[u8]) -> Option<bool> {
    let bytes: [u8; 4] = first.get(..4)?.try_into().ok()?;
    if first.len() < RECORD_BYTES {
        return None;
    }
    if u32::from_le_bytes(bytes) & 0xffff_ff00 == MAGIC {
        Some(false)
    } else if u32::from_be_bytes(bytes) & 0xffff_ff00 == MAGIC {
        Some(true)
    } else {
        None
    }
}

/// The fields of one record that replay reads.
struct Record {
    magic: u32,
    time_ns: u64,
    sector: u64,
    bytes: u32,
    action: u32,
    pdu_len: u16,
}

impl Record {
    fn decode(raw: &[u8; RECORD_BYTES], big_endian: bool) -> Self {
        let u32_at = |at: usize| {
            let b: [u8; 4] = raw[at..at + 4].try_into().expect("4 bytes");
            if big_endian {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }
        };
        let u64_at = |at: usize| {
            let b: [u8; 8] = raw[at..at + 8].try_into().expect("8 bytes");
            if big_endian {
                u64::from_be_bytes(b)
            } else {
                u64::from_le_bytes(b)
            }
        };
        let pdu = [raw[46], raw[47]];
        Self {
            magic: u32_at(0),
            time_ns: u64_at(8),
            sector: u64_at(16),
            bytes: u32_at(24),
            action: u32_at(28),
            pdu_len: if big_endian { u16::from_be_bytes(pdu) } else { u16::from_le_bytes(pdu) },
        }
    }
}

/// Reads records one at a time, keeping the last timestamp for delays.
pub(super) struct BlktraceReader<R> {
    input: R,
    big_endian: bool,
    rules: ReplayRules,
    last_time_ns: u64,
    /// Records read so far (the next one's number is this plus one).
    records: u64,
    pdu: Vec<u8>,
    /// Per direction (read, write, trim): I/Os queued since the last
    /// completion, the most seen at a completion, and I/Os replayed.
    queued: [u64; 3],
    depth: [u64; 3],
    ios: [u64; 3],
}

impl<R: Read> BlktraceReader<R> {
    pub(super) fn new(input: R, big_endian: bool, rules: ReplayRules) -> Self {
        Self {
            input,
            big_endian,
            rules,
            last_time_ns: 0,
            records: 0,
            pdu: vec![0; usize::from(u16::MAX)],
            queued: [0; 3],
            depth: [0; 3],
            ios: [0; 3],
        }
    }

    /// fio's probed depth of what was read so far: the deepest direction,
    /// capped, and at least 1 for a direction with I/O.
    pub(super) fn probed_depth(&self) -> usize {
        let per_dir = (0..3).map(|d| match self.depth[d] {
            0 if self.ios[d] > 0 => 1,
            depth => depth.min(MAX_PROBED_DEPTH),
        });
        per_dir.max().unwrap_or(1).max(1) as usize
    }

    /// The next entry to replay; None at the end of the trace. The error
    /// names the record (counted from 1).
    pub(super) fn next_entry(&mut self) -> Result<Option<TraceEntry>, String> {
        loop {
            let Some(rec) = self.read_record()? else { return Ok(None) };
            self.track_depth(&rec);
            let n = self.records;
            if let Some(entry) = self.entry_of(&rec).map_err(|e| format!("record {n}: {e}"))? {
                return Ok(Some(entry));
            }
        }
    }

    /// One record and its payload skipped; None at a clean end.
    fn read_record(&mut self) -> Result<Option<Record>, String> {
        let mut raw = [0u8; RECORD_BYTES];
        let got = read_full(&mut self.input, &mut raw).map_err(|e| format!("record {}: {e}", self.records + 1))?;
        if got == 0 {
            return Ok(None);
        }
        self.records += 1;
        let n = self.records;
        if got < RECORD_BYTES {
            return Err(format!("record {n}: truncated ({got} of {RECORD_BYTES} bytes)"));
        }
        let rec = Record::decode(&raw, self.big_endian);
        if rec.magic & 0xffff_ff00 != MAGIC {
            return Err(format!("record {n}: bad magic {:#x}", rec.magic));
        }
        if rec.magic & 0xff != VERSION {
            return Err(format!("record {n}: blktrace version {} (accepted: {VERSION})", rec.magic & 0xff));
        }
        let pdu = &mut self.pdu[..usize::from(rec.pdu_len)];
        let got = read_full(&mut self.input, pdu).map_err(|e| format!("record {n}: {e}"))?;
        if got < pdu.len() {
            return Err(format!("record {n}: truncated payload ({got} of {} bytes)", pdu.len()));
        }
        Ok(Some(rec))
    }

    /// fio's depth probe: a queued I/O adds one to its direction, a merge
    /// takes one off, a completion ends the run of queued I/Os.
    fn track_depth(&mut self, rec: &Record) {
        if rec.action & TC_NOTIFY != 0 {
            return;
        }
        let dir = match rec.action {
            a if a & TC_READ != 0 => 0,
            a if a & TC_WRITE != 0 => 1,
            a if a & TC_DISCARD != 0 => 2,
            _ => return,
        };
        match rec.action & 0xffff {
            TA_QUEUE => self.queued[dir] += 1,
            TA_BACKMERGE | TA_FRONTMERGE => self.queued[dir] = self.queued[dir].saturating_sub(1),
            TA_COMPLETE => {
                self.depth[dir] = self.depth[dir].max(self.queued[dir]);
                self.queued[dir] = 0;
            }
            _ => {}
        }
    }

    /// fio's `queue_trace`: a Q event's entry; None for any other event.
    fn entry_of(&mut self, rec: &Record) -> Result<Option<TraceEntry>, String> {
        if rec.action & 0xffff != TA_QUEUE || rec.action & TC_NOTIFY != 0 {
            return Ok(None);
        }
        let delay_us = self.rules.delay_since(self.last_time_ns, rec.time_ns) / 1000;
        self.last_time_ns = rec.time_ns;
        if rec.action & TC_FLUSH != 0 && rec.action & TC_DISCARD == 0 {
            return Ok(Some(TraceEntry { action: Action::Io(IoAction::Sync), offset: 0, len_bytes: 0, delay_us }));
        }
        let align = self.rules.align_bytes;
        let len_bytes = if align > 0 { u64::from(rec.bytes).next_multiple_of(align) } else { u64::from(rec.bytes) };
        let io = match rec.action {
            a if a & TC_DISCARD != 0 => IoAction::Trim,
            _ if len_bytes == 0 => return Ok(None), // fio skips zero-byte reads and writes
            a if a & TC_WRITE != 0 => IoAction::Write,
            _ => IoAction::Read,
        };
        let offset = self.rules.map_offset(rec.sector.checked_mul(512).ok_or("sector overflows")?);
        self.rules.check_range(offset, len_bytes)?;
        let dir = match io {
            IoAction::Read => 0,
            IoAction::Write => 1,
            _ => 2,
        };
        self.ios[dir] += 1;
        Ok(Some(TraceEntry { action: Action::Io(io), offset, len_bytes, delay_us }))
    }
}

/// Reads until `buf` is full or the input ends; how many bytes it read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One little-endian record.
    fn record(time_ns: u64, sector: u64, bytes: u32, action: u32) -> Vec<u8> {
        let mut r = Vec::with_capacity(RECORD_BYTES);
        r.extend_from_slice(&(MAGIC | VERSION).to_le_bytes());
        r.extend_from_slice(&0u32.to_le_bytes()); // sequence
        r.extend_from_slice(&time_ns.to_le_bytes());
        r.extend_from_slice(&sector.to_le_bytes());
        r.extend_from_slice(&bytes.to_le_bytes());
        r.extend_from_slice(&action.to_le_bytes());
        r.extend_from_slice(&[0; 12]); // pid, device, cpu
        r.extend_from_slice(&[0; 4]); // error, pdu_len
        r
    }

    /// `BLK_TA_QUEUE` of a read, write, discard.
    const Q_READ: u32 = TA_QUEUE | (1 << 16) | (1 << (4 + 16));
    const Q_WRITE: u32 = TA_QUEUE | TC_WRITE | (1 << (4 + 16));
    const COMPLETE_READ: u32 = 8 | (1 << 16) | (1 << (7 + 16));

    fn rules() -> ReplayRules {
        ReplayRules {
            no_stall: false,
            time_scale_pct: 100,
            redirect: true,
            align_bytes: 0,
            scale: 1,
            capacity_bytes: 1 << 30,
            logical_block_size: 512,
        }
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<TraceEntry>, String> {
        let mut r = BlktraceReader::new(bytes, false, rules());
        let mut out = Vec::new();
        while let Some(e) = r.next_entry()? {
            out.push(e);
        }
        Ok(out)
    }

    #[test]
    fn queue_events_replay_others_do_not() {
        let mut t = record(1_000, 8, 4096, Q_READ);
        t.extend(record(3_000, 8, 4096, COMPLETE_READ));
        t.extend(record(51_000, 16, 8192, Q_WRITE));
        t.extend(record(60_000, 0, 4096, TA_QUEUE | TC_DISCARD));
        assert_eq!(detect(&t), Some(false));
        let e = read_all(&t).unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!((e[0].action, e[0].offset, e[0].len_bytes), (Action::Io(IoAction::Read), 4096, 4096));
        assert_eq!((e[1].action, e[1].offset, e[1].delay_us), (Action::Io(IoAction::Write), 8192, 50));
        assert_eq!((e[2].action, e[2].delay_us), (Action::Io(IoAction::Trim), 9));
    }

    #[test]
    fn depth_is_probed_as_fio_does() {
        let mut t = Vec::new();
        for i in 0..3 {
            t.extend(record(1_000 + i, 8 * i, 4096, Q_READ));
        }
        t.extend(record(2_000, 8, 4096, (2 | (1 << 16)) | (1 << 20))); // a back merge
        t.extend(record(3_000, 8, 4096, COMPLETE_READ));
        t.extend(record(4_000, 64, 4096, Q_WRITE)); // never completes
        let mut r = BlktraceReader::new(&t[..], false, rules());
        while r.next_entry().unwrap().is_some() {}
        assert_eq!(r.probed_depth(), 2, "3 reads queued, one merged; the write's depth is 1");
    }

    #[test]
    fn big_endian_is_detected() {
        let mut raw = [0u8; RECORD_BYTES];
        raw[..4].copy_from_slice(&(MAGIC | VERSION).to_be_bytes());
        assert_eq!(detect(&raw), Some(true));
        assert_eq!(detect(b"fio version 2 iolog\nf add\nf open\nf read 0 4096\n"), None);
    }

    #[test]
    fn truncation_and_bad_magic_name_the_record() {
        let mut t = record(1_000, 8, 4096, Q_READ);
        t.extend(&record(2_000, 8, 4096, Q_READ)[..30]);
        assert_eq!(read_all(&t).unwrap_err(), "record 2: truncated (30 of 48 bytes)");
        let mut t = record(1_000, 8, 4096, Q_READ);
        t.extend([0u8; RECORD_BYTES]);
        assert!(read_all(&t).unwrap_err().starts_with("record 2: bad magic"));
        let t = record(1_000, 1 << 30, 4096, Q_READ);
        assert!(read_all(&t).unwrap_err().contains("past the device's end"));
    }
}
