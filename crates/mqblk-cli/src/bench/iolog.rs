//! fio's text iolog, versions 2 and 3 (fio's HOWTO, "Trace file format"):
//! the parser `read_iolog` replays from, and the version-3 writer of
//! `write_iolog`.
//!
//! A version-2 log is `fio version 2 iolog`, then `FILE add|open|close`
//! and `FILE read|write|trim|sync|datasync|wait OFFSET LENGTH` lines; a
//! version-3 log puts a timestamp (microseconds from the start of the run,
//! as fio writes it) before each line and has no `wait`. A line's delay is
//! the time since the previous line's timestamp (none after a timestamp of
//! 0, none when time goes backwards: fio's rule), scaled by
//! `replay_time_scale`. Offsets are divided by `replay_scale` and rounded
//! down to `replay_align`, as fio does.
//!
//! Stricter than fio, which logs and skips them: an unknown action, a
//! malformed line, I/O to a file not added and opened (which fio cannot
//! issue either), and I/O the device cannot take (past its end, or not
//! aligned to its logical block size) are errors naming the file and line.
//! mqblk runs one device: every file of the log is that device.

use std::collections::HashMap;
use std::io::Write;
use std::time::Instant;

/// The first line of each version (fio matches it as a prefix).
pub(super) const HEADER_V2: &str = "fio version 2 iolog";
pub(super) const HEADER_V3: &str = "fio version 3 iolog";

/// An I/O of the trace, fio's data directions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoAction {
    Read,
    Write,
    Trim,
    Sync,
    DataSync,
}

impl IoAction {
    /// fio's name (`io_ddir_name`).
    pub fn name(self) -> &'static str {
        match self {
            IoAction::Read => "read",
            IoAction::Write => "write",
            IoAction::Trim => "trim",
            IoAction::Sync => "sync",
            IoAction::DataSync => "datasync",
        }
    }

    /// Reads, writes and trims address a range; syncs do not.
    pub fn has_range(self) -> bool {
        matches!(self, IoAction::Read | IoAction::Write | IoAction::Trim)
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "read" => IoAction::Read,
            "write" => IoAction::Write,
            "trim" => IoAction::Trim,
            "sync" => IoAction::Sync,
            "datasync" => IoAction::DataSync,
            _ => return None,
        })
    }
}

/// What one entry of a trace does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Io(IoAction),
    /// A file's `add`, `open` or `close`: no I/O, but its delay is kept.
    File,
    /// Version 2's `wait`: until `delay_us` after the job's start (fio
    /// compares the value with the milliseconds since it started).
    Wait,
}

/// One entry of a trace, ready to replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceEntry {
    pub action: Action,
    pub offset: u64,
    pub len_bytes: u64,
    /// Wait this long after the previous issue (0 with replay_no_stall).
    pub delay_us: u64,
}

impl TraceEntry {
    /// The I/O of an entry that is one (what a replay yields).
    pub fn action_io(&self) -> IoAction {
        match self.action {
            Action::Io(io) => io,
            other => unreachable!("{other:?} is not an I/O"),
        }
    }
}

/// How a trace maps onto the device: fio's replay options and the
/// device's geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayRules {
    pub no_stall: bool,
    pub time_scale_pct: u64,
    /// replay_redirect: every file name is one file.
    pub redirect: bool,
    pub align_bytes: u64,
    pub scale: u64,
    pub capacity_bytes: u64,
    pub logical_block_size: u64,
}

impl ReplayRules {
    /// fio's `delay_since_ttime`: the time since the previous timestamp,
    /// scaled; none after a timestamp of 0, backwards, or with no_stall.
    pub(super) fn delay_since(&self, last: u64, now: u64) -> u64 {
        if last == 0 || self.no_stall || now < last {
            return 0;
        }
        let delta = now - last;
        if self.time_scale_pct == 100 {
            return delta;
        }
        (u128::from(delta) * 100 / u128::from(self.time_scale_pct)) as u64
    }

    /// The offset as replayed: fio's replay_scale, then replay_align.
    pub(super) fn map_offset(&self, offset: u64) -> u64 {
        let scaled = offset.checked_div(self.scale).unwrap_or(offset); // replay_scale=0: none
        if self.align_bytes > 0 {
            scaled & !(self.align_bytes - 1)
        } else {
            scaled
        }
    }

    /// Whether the device can take `len_bytes` at `offset`; the reason if not.
    pub(super) fn check_range(&self, offset: u64, len_bytes: u64) -> Result<(), String> {
        if len_bytes == 0 {
            return Err("length 0".into());
        }
        let lbs = self.logical_block_size;
        if offset % lbs != 0 || len_bytes % lbs != 0 {
            return Err(format!(
                "offset {offset} length {len_bytes} not aligned to the device's logical block size of {lbs} bytes"
            ));
        }
        if offset.checked_add(len_bytes).map_or(true, |end| end > self.capacity_bytes) {
            return Err(format!(
                "offset {offset} length {len_bytes} ends past the device's end ({} bytes)",
                self.capacity_bytes
            ));
        }
        Ok(())
    }
}

/// The version of a text iolog, from its first line.
pub(super) fn version_of(first_line: &str) -> Option<u32> {
    if first_line.starts_with(HEADER_V2) {
        Some(2)
    } else if first_line.starts_with(HEADER_V3) {
        Some(3)
    } else {
        None
    }
}

/// Parses a text iolog line by line, keeping what crosses lines: the last
/// timestamp and which files were added and opened.
pub(super) struct IologParser {
    version: u32,
    rules: ReplayRules,
    last_time_us: u64,
    /// File name (one name for all with replay_redirect) to "is open".
    files: HashMap<String, bool>,
}

impl IologParser {
    pub(super) fn new(version: u32, rules: ReplayRules) -> Self {
        assert!(version == 2 || version == 3, "iolog version {version}");
        Self { version, rules, last_time_us: 0, files: HashMap::new() }
    }

    /// One line (after the header); None for a blank line or a `wait`
    /// dropped by replay_no_stall. The error says what is wrong, without
    /// the file and line, which the caller adds.
    pub(super) fn parse_line(&mut self, line: &str) -> Result<Option<TraceEntry>, String> {
        let mut fields = line.split_ascii_whitespace();
        let mut delay_us = 0;
        if self.version == 3 {
            let Some(time) = fields.next() else { return Ok(None) };
            let time_us: u64 = time.parse().map_err(|_| format!("bad timestamp '{time}'"))?;
            delay_us = self.rules.delay_since(self.last_time_us, time_us);
            self.last_time_us = time_us;
        }
        let Some(name) = fields.next() else { return Ok(None) };
        let action = fields.next().ok_or("no action after the file name")?;
        let offset = fields.next();
        let len = fields.next();
        if let Some(extra) = fields.next() {
            return Err(format!("unexpected '{extra}' after the length"));
        }
        let key = if self.rules.redirect { "" } else { name };
        match (offset, len) {
            (None, None) => self
                .file_action(key, name, action)
                .map(|()| Some(TraceEntry { action: Action::File, offset: 0, len_bytes: 0, delay_us })),
            (Some(offset), Some(len)) => self.io_action(key, name, action, offset, len, delay_us),
            _ => Err(format!("'{action}' needs an offset and a length, or neither (a file action)")),
        }
    }

    fn file_action(&mut self, key: &str, name: &str, action: &str) -> Result<(), String> {
        match action {
            "add" => {
                self.files.entry(key.to_string()).or_insert(false);
            }
            "open" => *self.files.get_mut(key).ok_or_else(|| format!("open of '{name}', never added"))? = true,
            "close" => match self.files.get_mut(key) {
                Some(open) if *open => *open = false,
                _ => return Err(format!("close of '{name}', not open")),
            },
            _ => return Err(format!("unknown file action '{action}' (accepted: add, open, close)")),
        }
        Ok(())
    }

    fn io_action(
        &mut self,
        key: &str,
        name: &str,
        action: &str,
        offset: &str,
        len: &str,
        delay_us: u64,
    ) -> Result<Option<TraceEntry>, String> {
        let offset: u64 = offset.parse().map_err(|_| format!("bad offset '{offset}'"))?;
        // fio reads the length as a 32-bit unsigned int.
        let len_bytes = u64::from(len.parse::<u32>().map_err(|_| format!("bad length '{len}'"))?);
        if action == "wait" {
            if self.version == 3 {
                return Err("'wait' is not allowed in a version 3 iolog (timestamps do its job)".into());
            }
            let entry =
                TraceEntry { action: Action::Wait, offset: 0, len_bytes: 0, delay_us: offset.saturating_mul(1000) };
            return Ok((!self.rules.no_stall).then_some(entry));
        }
        let io = IoAction::parse(action).ok_or_else(|| {
            format!("unknown action '{action}' (accepted: read, write, trim, sync, datasync, wait, add, open, close)")
        })?;
        match self.files.get(key) {
            None => return Err(format!("{action} on '{name}', never added")),
            Some(false) => return Err(format!("{action} on '{name}', not open")),
            Some(true) => {}
        }
        let offset = self.rules.map_offset(offset);
        if io.has_range() {
            self.rules.check_range(offset, len_bytes)?;
        }
        Ok(Some(TraceEntry { action: Action::Io(io), offset, len_bytes, delay_us }))
    }
}

/// fio's `write_iolog`: a version-3 log of what the job issued, as fio
/// writes it: the header, `T NAME add`, `T NAME open`, a line per I/O
/// (`T NAME read|write|trim|sync OFFSET LENGTH`, microseconds since the
/// log was opened), and `T NAME close` at the end. Like fio, the file is
/// opened for appending. Lines go through a buffer: nothing is allocated
/// per I/O; the first write error is kept and reported at the end.
pub(super) struct IologWriter {
    path: String,
    name: String,
    out: std::io::BufWriter<std::fs::File>,
    start: Instant,
    error: Option<std::io::Error>,
}

impl IologWriter {
    /// Opens `path` and writes the header and the file's `add` and `open`.
    pub(super) fn create(path: &str, name: &str) -> Result<Self, String> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("write_iolog={path}: {e}"))?;
        let mut w = Self {
            path: path.to_string(),
            name: name.to_string(),
            out: std::io::BufWriter::with_capacity(64 << 10, file),
            start: Instant::now(),
            error: None,
        };
        let r = writeln!(w.out, "{HEADER_V3}");
        w.keep(r);
        w.file_line("add");
        w.file_line("open");
        Ok(w)
    }

    fn since_start_us(&self) -> u128 {
        self.start.elapsed().as_micros()
    }

    fn keep(&mut self, r: std::io::Result<()>) {
        if let (Err(e), true) = (r, self.error.is_none()) {
            self.error = Some(e);
        }
    }

    fn file_line(&mut self, action: &str) {
        let r = writeln!(self.out, "{} {} {action}", self.since_start_us(), self.name);
        self.keep(r);
    }

    /// Records one I/O as it is issued.
    #[inline]
    pub(super) fn record(&mut self, action: IoAction, offset: u64, len_bytes: u64) {
        let r = writeln!(self.out, "{} {} {} {offset} {len_bytes}", self.since_start_us(), self.name, action.name());
        self.keep(r);
    }

    /// Writes the `close` line and flushes; the first error, if any.
    pub(super) fn finish(mut self) -> Result<(), String> {
        self.file_line("close");
        let r = self.out.flush();
        self.keep(r);
        match self.error {
            Some(e) => Err(format!("write_iolog={}: {e}", self.path)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> ReplayRules {
        ReplayRules {
            no_stall: false,
            time_scale_pct: 100,
            redirect: false,
            align_bytes: 0,
            scale: 1,
            capacity_bytes: 1 << 20,
            logical_block_size: 512,
        }
    }

    fn parse_all(version: u32, rules: ReplayRules, lines: &str) -> Result<Vec<TraceEntry>, String> {
        let mut p = IologParser::new(version, rules);
        let mut out = Vec::new();
        for line in lines.lines() {
            out.extend(p.parse_line(line)?);
        }
        Ok(out)
    }

    #[test]
    fn headers_name_their_version() {
        assert_eq!(version_of("fio version 2 iolog"), Some(2));
        assert_eq!(version_of("fio version 3 iolog\n"), Some(3));
        assert_eq!(version_of("0 f read 0 512"), None);
    }

    #[test]
    fn version_2_reads_writes_and_file_actions() {
        let log = "/dev/x add\n/dev/x open\n/dev/x read 4096 512\n/dev/x write 0 8192\n/dev/x sync 0 0\n/dev/x close\n";
        let e = parse_all(2, rules(), log).unwrap();
        assert_eq!(e.len(), 6);
        assert_eq!(e[2], TraceEntry { action: Action::Io(IoAction::Read), offset: 4096, len_bytes: 512, delay_us: 0 });
        assert_eq!((e[3].action, e[3].len_bytes), (Action::Io(IoAction::Write), 8192));
        assert_eq!(e[4].action, Action::Io(IoAction::Sync));
        assert!(e.iter().all(|e| e.delay_us == 0));
    }

    #[test]
    fn version_3_delays_follow_fio() {
        let log = "0 f add\n0 f open\n100 f read 0 512\n350 f read 512 512\n300 f read 0 512\n400 f read 0 512\n";
        let delays: Vec<u64> = parse_all(3, rules(), log).unwrap().iter().map(|e| e.delay_us).collect();
        // After a timestamp of 0 there is no delay (fio's rule), nor when
        // time goes backwards.
        assert_eq!(delays, [0, 0, 0, 250, 0, 100]);
        let slow = ReplayRules { time_scale_pct: 50, ..rules() };
        let delays: Vec<u64> = parse_all(3, slow, log).unwrap().iter().map(|e| e.delay_us).collect();
        assert_eq!(delays, [0, 0, 0, 500, 0, 200]);
        let fast = ReplayRules { no_stall: true, ..rules() };
        assert!(parse_all(3, fast, log).unwrap().iter().all(|e| e.delay_us == 0));
    }

    #[test]
    fn scale_then_align() {
        let r = ReplayRules { scale: 2, align_bytes: 4096, ..rules() };
        let e = parse_all(2, r, "f add\nf open\nf read 20480 4096\n").unwrap();
        assert_eq!(e[2].offset, 8192, "20480 / 2 = 10240, aligned down to 8192");
    }

    #[test]
    fn file_rules() {
        let e = parse_all(2, rules(), "f add\nf read 0 512\n").unwrap_err();
        assert!(e.contains("not open"), "{e}");
        let e = parse_all(2, rules(), "f add\nf open\ng read 0 512\n").unwrap_err();
        assert!(e.contains("'g', never added"), "{e}");
        assert!(parse_all(2, rules(), "g open\n").unwrap_err().contains("never added"));
        assert!(parse_all(2, rules(), "f add\nf close\n").unwrap_err().contains("not open"));
        let redirect = ReplayRules { redirect: true, ..rules() };
        assert_eq!(parse_all(2, redirect, "f add\nf open\ng read 0 512\n").unwrap().len(), 3);
    }

    #[test]
    fn bad_lines_say_why() {
        let bad = |version, line: &str| {
            let opened = if version == 3 { "0 f add\n0 f open" } else { "f add\nf open" };
            parse_all(version, rules(), &format!("{opened}\n{line}\n")).unwrap_err()
        };
        assert!(bad(2, "f frobnicate 0 512").contains("unknown action 'frobnicate'"));
        assert!(bad(2, "f reopen").contains("unknown file action 'reopen'"));
        assert!(bad(2, "f read 0").contains("needs an offset and a length"));
        assert!(bad(2, "f read x 512").contains("bad offset 'x'"));
        assert!(bad(2, "f read 0 512 9").contains("unexpected '9'"));
        assert!(bad(3, "x f read 0 512").contains("bad timestamp 'x'"));
        assert!(bad(3, "5 f wait 1 0").contains("not allowed in a version 3"));
        assert!(bad(2, "f read 100 512").contains("not aligned"));
        assert!(bad(2, "f read 1048576 512").contains("past the device's end"));
        assert!(bad(2, "f write 0 0").contains("length 0"));
    }

    #[test]
    fn version_2_wait_is_dropped_without_stalls() {
        let log = "f add\nf wait 5 0\n";
        assert_eq!(parse_all(2, rules(), log).unwrap()[1].action, Action::Wait);
        let fast = ReplayRules { no_stall: true, ..rules() };
        assert_eq!(parse_all(2, fast, log).unwrap().len(), 1);
    }

    #[test]
    fn writer_round_trips_through_the_parser() {
        let dir = std::env::temp_dir().join(format!("mqblk-iolog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w.log");
        let _ = std::fs::remove_file(&path);
        let mut w = IologWriter::create(path.to_str().unwrap(), "null:gb=1").unwrap();
        w.record(IoAction::Read, 4096, 512);
        w.record(IoAction::Write, 0, 1024);
        w.finish().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines = text.lines();
        assert_eq!(version_of(lines.next().unwrap()), Some(3));
        let io: Vec<TraceEntry> = parse_all(3, rules(), &lines.collect::<Vec<_>>().join("\n"))
            .unwrap()
            .into_iter()
            .filter(|e| e.action != Action::File)
            .collect();
        assert_eq!(io.len(), 2);
        assert_eq!((io[0].action, io[0].offset, io[0].len_bytes), (Action::Io(IoAction::Read), 4096, 512));
        assert_eq!((io[1].action, io[1].offset, io[1].len_bytes), (Action::Io(IoAction::Write), 0, 1024));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
