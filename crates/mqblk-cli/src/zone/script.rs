//! The zone op script language of `mqblk zone script` and its JSON output,
//! run against any `ZoneTarget`: an mqblk device, or (in the kernel oracle's
//! guest) a real zoned block device through ioctls and O_DIRECT I/O. Both
//! print through the same code, so their lines can be diffed.
//!
//! Script lines: `report` | `reset Z` | `reset all` | `open Z` | `close Z`
//! | `finish Z` | `write Z OFF N` | `read Z OFF N`; Z is a zone index, OFF
//! and N are 512-byte sectors relative to the zone's start; `#` starts a
//! comment.

use mqblk::zoned::ZoneMgmt;
use serde_json::{json, Value};

/// A parsed script line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZoneOp {
    Report,
    Mgmt(ZoneMgmt, Option<u64>),
    Write { zone: u64, off: u64, nr: u64 },
    Read { zone: u64, off: u64, nr: u64 },
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
    fn read(&mut self, offset_bytes: u64, out: &mut [u8]) -> Result<(), i32>;
}

/// Parses one line; Ok(None) for blank and comment lines.
pub fn parse_line(line: &str) -> Result<Option<(String, ZoneOp)>, String> {
    let text = line.split('#').next().unwrap_or("").trim();
    if text.is_empty() {
        return Ok(None);
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
                 write Z OFF N | read Z OFF N)"
            ))
        }
    };
    Ok(Some((text.to_string(), op)))
}

/// Byte `i` of the data `write Z OFF N` writes.
pub fn pattern_byte(zone: u64, off: u64, i: u64) -> u8 {
    let pos = off * 512 + i;
    ((zone * 131) ^ (pos * 7) ^ (pos >> 9)) as u8
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
    let zs = target.zone_sectors();
    let mut crc = None;
    let result = match *op {
        ZoneOp::Report => Ok(()),
        ZoneOp::Mgmt(mgmt, zone) => target.mgmt(mgmt, zone),
        ZoneOp::Write { zone, off, nr } => {
            let data: Vec<u8> = (0..nr * 512).map(|i| pattern_byte(zone, off, i)).collect();
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
    let zones: Value = match target.report() {
        Ok(z) => z.into_iter().map(|(cond, wp)| json!([cond, wp])).collect(),
        Err(e) => json!(errno_name(e)),
    };
    let line = match crc {
        Some(crc) => json!({"op": text, "status": status, "crc32": crc, "zones": zones}),
        None => json!({"op": text, "status": status, "zones": zones}),
    };
    line.to_string()
}

/// Runs a whole script, one JSON line per op.
pub fn run_script(target: &mut dyn ZoneTarget, script: &str) -> Result<String, String> {
    let mut out = String::new();
    for (n, line) in script.lines().enumerate() {
        let Some((text, op)) = parse_line(line).map_err(|e| format!("line {}: {e}", n + 1))? else { continue };
        out.push_str(&run_op(target, &text, &op));
        out.push('\n');
    }
    Ok(out)
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
    }

    #[test]
    fn pattern_follows_the_issue_formula() {
        // zone 2, off 1, i 3: pos 515 -> 262 ^ 3605 ^ 1 = 3860 -> 0x14
        assert_eq!(pattern_byte(2, 1, 3), ((2 * 131) ^ (515 * 7) ^ (515 >> 9)) as u8);
        assert_eq!(errno_name(libc::ETOOMANYREFS), "ETOOMANYREFS");
    }
}
