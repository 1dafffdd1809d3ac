//! The zone op script language of `mqblk zone script` and its JSON output,
//! run against any `ZoneTarget`: an mqblk device, or (in the kernel oracle's
//! guest) a real zoned block device through ioctls and O_DIRECT I/O. Both
//! print through the same code, so their lines can be diffed.
//!
//! Script lines: `report` | `reset Z` | `reset all` | `open Z` | `close Z`
//! | `finish Z` | `write Z OFF N` | `read Z OFF N`; Z is a zone index, OFF
//! and N are 512-byte sectors relative to the zone's start; `#` starts a
//! comment. Each op's line carries a zone report taken after it, except
//! after `noreport OP`: a report is not neutral (on Linux 6.12 it tells
//! the block layer a zone's write pointer again, after a failed write,
//! and until then the zone takes no writes), so the next op sees what the
//! kernel left without one.

use mqblk::zoned::ZoneMgmt;
use serde_json::json;

/// A parsed script line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZoneOp {
    Report,
    Mgmt(ZoneMgmt, Option<u64>),
    Write {
        zone: u64,
        off: u64,
        nr: u64,
    },
    Read {
        zone: u64,
        off: u64,
        nr: u64,
    },
    /// The op, with no zone report after it.
    NoReport(Box<ZoneOp>),
}

/// What a target does; errors are errnos (the kernel's, or mqblk's
/// statuses mapped the kernel's way).
pub trait ZoneTarget {
    fn zone_sectors(&self) -> u64;
    /// (condition name, write pointer - zone start) of every zone.
    fn report(&mut self) -> Result<Vec<(&'static str, u64)>, i32>;
    /// `zone` None: every zone (reset all).
    fn mgmt(&mut self, op: ZoneMgmt, zone: Option<u64>) -> Result<(), i32>;
    fn write(&mut self, offset_bytes: u64, data: &[u8]) -> Result<(), i32>;
    /// Readies the target for writes of up to `bytes` (called once before
    /// a script runs, with its largest write); Err stops the script.
    fn prepare_writes(&mut self, _bytes: usize) -> Result<(), String> {
        Ok(())
    }
    fn read(&mut self, offset_bytes: u64, out: &mut [u8]) -> Result<(), i32>;
}

/// Parses one line; Ok(None) for blank and comment lines.
pub fn parse_line(line: &str) -> Result<Option<(String, ZoneOp)>, String> {
    let text = line.split('#').next().unwrap_or("").trim();
    if text.is_empty() {
        return Ok(None);
    }
    if let Some(rest) = text.strip_prefix("noreport ") {
        return match parse_line(rest)? {
            Some((_, ZoneOp::Report | ZoneOp::NoReport(_))) | None => {
                Err(format!("'noreport' takes a zone op other than report, in '{text}'"))
            }
            Some((_, op)) => Ok(Some((text.to_string(), ZoneOp::NoReport(Box::new(op))))),
        };
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    let num = |w: &str| w.parse::<u64>().map_err(|_| format!("'{w}' is not a number in '{text}'"));
    let op = match words.as_slice() {
        ["report"] => ZoneOp::Report,
        [verb, "all"] if *verb == "reset" => ZoneOp::Mgmt(ZoneMgmt::Reset, None),
        [verb, z] if matches!(*verb, "reset" | "open" | "close" | "finish") => {
            let mgmt = match *verb {
                "reset" => ZoneMgmt::Reset,
                "open" => ZoneMgmt::Open,
                "close" => ZoneMgmt::Close,
                _ => ZoneMgmt::Finish,
            };
            ZoneOp::Mgmt(mgmt, Some(num(z)?))
        }
        ["write", z, off, n] => ZoneOp::Write { zone: num(z)?, off: num(off)?, nr: num(n)? },
        ["read", z, off, n] => ZoneOp::Read { zone: num(z)?, off: num(off)?, nr: num(n)? },
        _ => {
            return Err(format!(
                "bad script line '{text}' (accepted: report | reset Z | reset all | open Z | close Z | finish Z | \
                 write Z OFF N | read Z OFF N, each but report also after 'noreport')"
            ))
        }
    };
    Ok(Some((text.to_string(), op)))
}

/// Byte `i` of the data `write Z OFF N` writes: the formula, which
/// `fill_pattern` computes a sector at a time.
#[cfg(test)]
pub fn pattern_byte(zone: u64, off: u64, i: u64) -> u8 {
    let pos = off * 512 + i;
    ((zone * 131) ^ (pos * 7) ^ (pos >> 9)) as u8
}

/// The data `write Z OFF N` writes (`pattern_byte` for each byte), a
/// 512-byte sector at a time: in sector s, byte j is (j * 7) as u8 ^
/// (zone * 131 ^ (OFF + s)) as u8, since the sector's start is a multiple
/// of 256. Under the oracle's emulated CPU a byte-at-a-time loop over a
/// 64 MiB write took seconds.
pub fn fill_pattern(zone: u64, off: u64, out: &mut [u8]) {
    let base: [u8; 512] = std::array::from_fn(|j| (j * 7) as u8);
    for (s, sector) in out.chunks_mut(512).enumerate() {
        let k = ((zone * 131) ^ (off + s as u64)) as u8;
        for (b, t) in sector.iter_mut().zip(base.iter()) {
            *b = t ^ k;
        }
    }
}

/// The name user space sees for an errno (the oracle's status field).
pub fn errno_name(errno: i32) -> String {
    match errno {
        0 => "ok".into(),
        libc::EIO => "EIO".into(),
        libc::ETOOMANYREFS => "ETOOMANYREFS".into(),
        libc::EOVERFLOW => "EOVERFLOW".into(),
        libc::EINVAL => "EINVAL".into(),
        libc::EOPNOTSUPP => "EOPNOTSUPP".into(),
        libc::ENOSPC => "ENOSPC".into(),
        libc::ENOTTY => "ENOTTY".into(),
        libc::EBUSY => "EBUSY".into(),
        libc::ENODEV => "ENODEV".into(),
        libc::EAGAIN => "EAGAIN".into(),
        other => format!("E{other}"),
    }
}

/// Runs one op and returns its JSON line.
pub fn run_op(target: &mut dyn ZoneTarget, text: &str, op: &ZoneOp) -> String {
    let (op, report) = match op {
        ZoneOp::NoReport(inner) => (&**inner, false),
        op => (op, true),
    };
    let zs = target.zone_sectors();
    let mut crc = None;
    let result = match *op {
        ZoneOp::Report => Ok(()),
        ZoneOp::NoReport(_) => unreachable!("parse_line nests no noreport"),
        ZoneOp::Mgmt(mgmt, zone) => target.mgmt(mgmt, zone),
        ZoneOp::Write { zone, off, nr } => {
            let mut data = vec![0u8; (nr * 512) as usize];
            fill_pattern(zone, off, &mut data);
            target.write((zone * zs + off) * 512, &data)
        }
        ZoneOp::Read { zone, off, nr } => {
            let mut buf = vec![0u8; (nr * 512) as usize];
            let r = target.read((zone * zs + off) * 512, &mut buf);
            if r.is_ok() {
                crc = Some(format!("{:08x}", crc32fast::hash(&buf)));
            }
            r
        }
    };
    let status = errno_name(result.err().unwrap_or(0));
    let mut line = json!({"op": text, "status": status});
    if let Some(crc) = crc {
        line["crc32"] = json!(crc);
    }
    if report {
        line["zones"] = match target.report() {
            Ok(z) => z.into_iter().map(|(cond, wp)| json!([cond, wp])).collect(),
            Err(e) => json!(errno_name(e)),
        };
    }
    line.to_string()
}

/// Runs a whole script, one JSON line per op.
pub fn run_script(target: &mut dyn ZoneTarget, script: &str) -> Result<String, String> {
    let mut ops = Vec::new();
    for (n, line) in script.lines().enumerate() {
        if let Some(op) = parse_line(line).map_err(|e| format!("line {}: {e}", n + 1))? {
            ops.push(op);
        }
    }
    let largest = ops.iter().map(|(_, op)| write_sectors(op)).max().unwrap_or(0);
    target.prepare_writes((largest * 512) as usize)?;
    let mut out = String::new();
    for (text, op) in &ops {
        out.push_str(&run_op(target, text, op));
        out.push('\n');
    }
    Ok(out)
}

/// The sectors an op writes (0 for other ops).
fn write_sectors(op: &ZoneOp) -> u64 {
    match op {
        ZoneOp::Write { nr, .. } => *nr,
        ZoneOp::NoReport(inner) => write_sectors(inner),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_and_bad_lines_name_the_problem() {
        assert_eq!(parse_line("  # only a comment").unwrap(), None);
        assert_eq!(parse_line("reset all # x").unwrap().unwrap().1, ZoneOp::Mgmt(ZoneMgmt::Reset, None));
        assert_eq!(parse_line("write 3 8 16").unwrap().unwrap().1, ZoneOp::Write { zone: 3, off: 8, nr: 16 });
        assert!(parse_line("write 3 x 16").unwrap_err().contains("'x' is not a number"));
        assert!(parse_line("append 1").unwrap_err().contains("bad script line"));
        // Zero-length reads and writes are accepted: the kernel answers a
        // zero-length pread/pwrite with success and no effect.
        assert_eq!(parse_line("read 1 0 0").unwrap().unwrap().1, ZoneOp::Read { zone: 1, off: 0, nr: 0 });
        assert_eq!(
            parse_line("noreport write 3 8 16").unwrap().unwrap().1,
            ZoneOp::NoReport(Box::new(ZoneOp::Write { zone: 3, off: 8, nr: 16 }))
        );
        assert!(parse_line("noreport report").unwrap_err().contains("other than report"));
        assert!(parse_line("noreport noreport open 1").unwrap_err().contains("other than report"));
    }

    #[test]
    fn pattern_follows_the_issue_formula() {
        // zone 2, off 1, i 3: pos 515 -> 262 ^ 3605 ^ 1 = 3860 -> 0x14
        assert_eq!(pattern_byte(2, 1, 3), ((2 * 131) ^ (515 * 7) ^ (515 >> 9)) as u8);
        assert_eq!(errno_name(libc::ETOOMANYREFS), "ETOOMANYREFS");
    }

    #[test]
    fn fill_pattern_is_pattern_byte() {
        for (zone, off, sectors) in [(0, 0, 1), (2, 1, 3), (15, 131_000, 5), (7, 255, 2), (300, 77, 4)] {
            let mut out = vec![0u8; sectors * 512];
            fill_pattern(zone, off, &mut out);
            for (i, b) in out.iter().enumerate() {
                assert_eq!(*b, pattern_byte(zone, off, i as u64), "zone {zone} off {off} byte {i}");
            }
        }
    }

    /// Records what run_script asks of a target.
    struct Recorder {
        prepared: Vec<usize>,
        writes: usize,
        limit: usize,
    }

    impl ZoneTarget for Recorder {
        fn zone_sectors(&self) -> u64 {
            1024
        }
        fn report(&mut self) -> Result<Vec<(&'static str, u64)>, i32> {
            Ok(vec![("EMPTY", 0)])
        }
        fn mgmt(&mut self, _: ZoneMgmt, _: Option<u64>) -> Result<(), i32> {
            Ok(())
        }
        fn write(&mut self, _: u64, _: &[u8]) -> Result<(), i32> {
            self.writes += 1;
            Ok(())
        }
        fn prepare_writes(&mut self, bytes: usize) -> Result<(), String> {
            self.prepared.push(bytes);
            if bytes > self.limit {
                return Err(format!("no room for {bytes} bytes"));
            }
            Ok(())
        }
        fn read(&mut self, _: u64, _: &mut [u8]) -> Result<(), i32> {
            Ok(())
        }
    }

    #[test]
    fn the_target_is_readied_once_for_the_largest_write_before_any_op() {
        let script = "write 0 0 8\nnoreport write 1 0 3000\nread 0 0 5000\nwrite 2 0 16\n";
        let mut t = Recorder { prepared: vec![], writes: 0, limit: usize::MAX };
        let out = run_script(&mut t, script).unwrap();
        assert_eq!((t.prepared, t.writes, out.lines().count()), (vec![3000 * 512], 3, 4));
        // A target that cannot take the largest write stops the script
        // before its first op, with the target's reason.
        let mut t = Recorder { prepared: vec![], writes: 0, limit: 1 << 20 };
        assert_eq!(run_script(&mut t, script).unwrap_err(), format!("no room for {} bytes", 3000 * 512));
        assert_eq!(t.writes, 0);
    }
}
