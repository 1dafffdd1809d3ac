//! fio's `read_iolog`: a job that replays a trace instead of generating
//! its I/O. The trace is a text iolog (iolog.rs) or blktrace's binary
//! records (blktrace_input.rs), told apart as fio does: by blktrace's
//! magic, else by the text header.
//!
//! The whole trace is parsed before the run starts, into a vector (or,
//! with `read_iolog_chunked`, validated in a first pass and then read
//! into a vector of `CHUNK_ENTRIES` refilled as it drains), so a bad
//! trace fails before any I/O and the replay loop allocates nothing.
//!
//! Timing, as fio's `iolog_delay`: each entry is issued `delay_us` after
//! the previous issue; time overslept is taken off the next delay.
//! Version 2's `wait` waits until a time since the job started.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::time::{Duration, Instant};

use mqblk::{Bio, Buf, ReqFlags};

use super::blktrace_input::{self, BlktraceReader};
use super::iolog::{self, Action, IoAction, IologParser, ReplayRules, TraceEntry};

/// Entries read at a time with `read_iolog_chunked`.
const CHUNK_ENTRIES: usize = 4096;
/// Longest sleep between looks at whether the run should stop.
const SLEEP_SLICE: Duration = Duration::from_millis(10);

/// Reads a trace entry by entry, whatever its format.
enum TraceReader {
    Text { path: String, input: BufReader<File>, line: String, line_no: u64, parser: IologParser },
    Blktrace { path: String, reader: BlktraceReader<BufReader<File>> },
}

impl TraceReader {
    fn open(path: &str, rules: ReplayRules) -> Result<Self, String> {
        let open = || File::open(path).map_err(|e| format!("read_iolog={path}: {e}"));
        let mut first = [0u8; blktrace_input::RECORD_BYTES];
        let got = open()?.read(&mut first).map_err(|e| format!("read_iolog={path}: {e}"))?;
        if let Some(big_endian) = blktrace_input::detect(&first[..got]) {
            let reader = BlktraceReader::new(BufReader::new(open()?), big_endian, rules);
            return Ok(TraceReader::Blktrace { path: path.to_string(), reader });
        }
        let mut input = BufReader::new(open()?);
        let mut line = String::with_capacity(256);
        input.read_line(&mut line).map_err(|e| format!("read_iolog={path}: {e}"))?;
        let Some(version) = iolog::version_of(&line) else {
            let first = line.trim_end();
            return Err(format!(
                "read_iolog={path}:1: not a fio iolog (first line '{first}', expected '{}' or '{}') nor a blktrace",
                iolog::HEADER_V2,
                iolog::HEADER_V3
            ));
        };
        Ok(TraceReader::Text {
            path: path.to_string(),
            input,
            line,
            line_no: 1,
            parser: IologParser::new(version, rules),
        })
    }

    /// The next entry; None at the end. Errors name the file and line or
    /// record.
    fn next_entry(&mut self) -> Result<Option<TraceEntry>, String> {
        match self {
            TraceReader::Text { path, input, line, line_no, parser } => loop {
                line.clear();
                let n = input.read_line(line).map_err(|e| format!("read_iolog={path}:{}: {e}", *line_no + 1))?;
                if n == 0 {
                    return Ok(None);
                }
                *line_no += 1;
                if let Some(entry) = parser.parse_line(line).map_err(|e| format!("read_iolog={path}:{line_no}: {e}"))? {
                    return Ok(Some(entry));
                }
            },
            TraceReader::Blktrace { path, reader } => {
                reader.next_entry().map_err(|e| format!("read_iolog={path}: {e}"))
            }
        }
    }
}

/// What a whole trace holds: its largest transfers (the job's buffers)
/// and how many I/Os.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct TraceSummary {
    pub(super) max_read_bytes: u64,
    pub(super) max_write_bytes: u64,
    pub(super) ios: u64,
    /// A blktrace's queue depth, probed as fio does (blktrace_input.rs).
    pub(super) probed_depth: Option<usize>,
}

impl TraceSummary {
    fn add(&mut self, e: &TraceEntry) {
        match e.action {
            Action::Io(IoAction::Read) => self.max_read_bytes = self.max_read_bytes.max(e.len_bytes),
            Action::Io(IoAction::Write) => self.max_write_bytes = self.max_write_bytes.max(e.len_bytes),
            _ => {}
        }
        if matches!(e.action, Action::Io(_)) {
            self.ios += 1;
        }
    }
}

/// A trace opened for a job: parsed and checked, and what it holds.
pub(super) type OpenTrace = (Replay, TraceSummary);

/// A job's trace being replayed: its entries and its pacing.
pub(super) struct Replay {
    /// Some with `read_iolog_chunked`: where the next chunk comes from.
    chunks: Option<TraceReader>,
    entries: Vec<TraceEntry>,
    next: usize,
    /// When the job started (version 2's `wait` counts from it).
    start: Instant,
    last_issue: Option<Instant>,
    /// fio's `time_offset`: how much the last sleep overslept.
    overslept: Duration,
}

impl Replay {
    /// Parses the trace at `path` (the whole of it, validating every
    /// entry, even when `chunked`); the error names the line or record.
    pub(super) fn open(path: &str, rules: ReplayRules, chunked: bool) -> Result<OpenTrace, String> {
        let mut reader = TraceReader::open(path, rules)?;
        let mut summary = TraceSummary::default();
        let mut entries = Vec::new();
        while let Some(e) = reader.next_entry()? {
            summary.add(&e);
            if !chunked {
                entries.push(e);
            }
        }
        if summary.ios == 0 {
            return Err(format!("read_iolog={path}: the trace has no I/O"));
        }
        if let TraceReader::Blktrace { reader, .. } = &reader {
            summary.probed_depth = Some(reader.probed_depth());
        }
        let chunks = match chunked {
            true => Some(TraceReader::open(path, rules)?),
            false => None,
        };
        if chunked {
            entries = Vec::with_capacity(CHUNK_ENTRIES);
        }
        let replay =
            Self { chunks, entries, next: 0, start: Instant::now(), last_issue: None, overslept: Duration::ZERO };
        Ok((replay, summary))
    }

    /// The replay starts now (version 2's `wait` counts from here).
    pub(super) fn start(&mut self) {
        self.start = Instant::now();
    }

    /// The next I/O, once its time has come; None at the trace's end or
    /// when `stopped` says the run is over.
    pub(super) fn next_io(&mut self, stopped: impl Fn() -> bool) -> Result<Option<TraceEntry>, String> {
        loop {
            let Some(e) = self.next_entry()? else { return Ok(None) };
            match e.action {
                Action::Wait => sleep_until(self.start + Duration::from_micros(e.delay_us), &stopped),
                Action::File => {
                    self.delay(e.delay_us, &stopped);
                    self.last_issue = Some(Instant::now());
                }
                Action::Io(_) => {
                    self.delay(e.delay_us, &stopped);
                    self.last_issue = Some(Instant::now());
                    return Ok((!stopped()).then_some(e));
                }
            }
            if stopped() {
                return Ok(None);
            }
        }
    }

    fn next_entry(&mut self) -> Result<Option<TraceEntry>, String> {
        if self.next == self.entries.len() {
            let Some(reader) = self.chunks.as_mut() else { return Ok(None) };
            // Reuses the vector: its capacity was reserved at open.
            self.entries.clear();
            self.next = 0;
            while self.entries.len() < CHUNK_ENTRIES {
                match reader.next_entry()? {
                    Some(e) => self.entries.push(e),
                    None => break,
                }
            }
            if self.entries.is_empty() {
                return Ok(None);
            }
        }
        let e = self.entries[self.next];
        self.next += 1;
        Ok(Some(e))
    }

    /// fio's `iolog_delay`: waits `delay_us` from the last issue, less
    /// what the previous wait overslept.
    fn delay(&mut self, delay_us: u64, stopped: &impl Fn() -> bool) {
        let delay = Duration::from_micros(delay_us);
        if delay.is_zero() {
            return;
        }
        if delay < self.overslept {
            self.overslept = Duration::ZERO;
            return;
        }
        let since_issue = self.last_issue.map_or(Duration::ZERO, |t| t.elapsed());
        let Some(left) = (delay - self.overslept).checked_sub(since_issue) else { return };
        let slept_from = Instant::now();
        sleep_until(slept_from + left, stopped);
        self.overslept = slept_from.elapsed().saturating_sub(delay);
    }
}

/// The bio of a replayed entry: a read or write of the slot's buffer
/// (`slot_buf`, of the trace's largest transfer) cut to the entry's
/// length, with `flags`; a discard; or a flush.
pub(super) fn replayed_bio(e: &TraceEntry, slot_buf: &mut Option<Buf>, flags: ReqFlags) -> Bio {
    let action = e.action_io();
    match action {
        IoAction::Read | IoAction::Write => {
            let mut buf = slot_buf.take().expect("a buffer for each direction the trace has");
            buf.set_len(e.len_bytes as usize);
            match action {
                IoAction::Write => Bio::write(e.offset, buf),
                _ => Bio::read(e.offset, buf),
            }
            .with_flags(flags)
        }
        IoAction::Trim => Bio::discard(e.offset, e.len_bytes),
        IoAction::Sync | IoAction::DataSync => Bio::flush(),
    }
}

/// Sleeps until `until`, in slices, unless `stopped` says to stop.
fn sleep_until(until: Instant, stopped: &impl Fn() -> bool) {
    loop {
        let now = Instant::now();
        if now >= until || stopped() {
            return;
        }
        std::thread::sleep((until - now).min(SLEEP_SLICE));
    }
}
