//! fio's `verify_pattern`: the bytes a written block is filled with
//! instead of random data, repeated to fill it, as fio's lib/pattern.c
//! reads them: `0x` hex of any length (`0xaa555aa5` is aa 55 5a a5; an
//! odd digit count gives the first nibble a byte of its own), decimal
//! numbers in the 32-bit range (their little-endian bytes, as few as the
//! value needs: 0 is one zero byte, a negative one four), `"strings"`,
//! `'file'` (the file's bytes) and `%o` (eight bytes: the offset, little
//! endian), one after another (`0xff%o"abcd"-12`).
//!
//! `%o` is the block's offset; with `verify_pattern_interval=N` the
//! pattern starts anew every N bytes, each with the offset of its start.

use super::super::options::OptionError;

/// The bytes `%o` takes.
const OFFSET_BYTES: usize = 8;
/// fio's MAX_PATTERN_SIZE.
const MAX_PATTERN_BYTES: usize = 512;

/// A parsed `verify_pattern`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyPattern {
    bytes: Vec<u8>,
    /// Where in `bytes` each `%o` goes.
    offsets_at: Vec<usize>,
}

impl VerifyPattern {
    /// Parses `verify_pattern`'s value (`key` names the option in errors).
    pub fn parse(key: &str, input: &str) -> Result<Self, OptionError> {
        let bad = |why: &str| OptionError(format!("{key}: bad pattern '{input}': {why}"));
        let mut p = Self { bytes: Vec::new(), offsets_at: Vec::new() };
        let mut rest = input;
        while !rest.is_empty() {
            rest = match rest.as_bytes()[0] {
                b'"' => {
                    let end = rest[1..].find('"').ok_or_else(|| bad("a string without its closing quote"))?;
                    p.bytes.extend_from_slice(&rest.as_bytes()[1..1 + end]);
                    &rest[end + 2..]
                }
                b'\'' => {
                    let end = rest[1..].find('\'').ok_or_else(|| bad("a file name without its closing quote"))?;
                    let name = &rest[1..1 + end];
                    let data = std::fs::read(name).map_err(|e| bad(&format!("file '{name}': {e}")))?;
                    p.bytes.extend_from_slice(&data);
                    &rest[end + 2..]
                }
                b'%' if rest.starts_with("%o") => {
                    p.offsets_at.push(p.bytes.len());
                    p.bytes.extend_from_slice(&[0; OFFSET_BYTES]);
                    &rest[2..]
                }
                b'%' => return Err(bad("the only format is %o")),
                _ => parse_number(rest, &mut p.bytes).ok_or_else(|| bad("not a number, string or format"))?,
            };
        }
        if p.bytes.is_empty() {
            return Err(bad("empty"));
        }
        if p.bytes.len() > MAX_PATTERN_BYTES {
            return Err(bad(&format!("{} bytes, more than fio's {MAX_PATTERN_BYTES}", p.bytes.len())));
        }
        Ok(p)
    }

    /// Fills `buf` (at `offset` on the device) with the pattern, anew
    /// every `interval_bytes` (0: once for the whole buffer).
    pub fn fill(&self, buf: &mut [u8], offset: u64, interval_bytes: usize) {
        let chunk_bytes = if interval_bytes == 0 { buf.len() } else { interval_bytes };
        for (i, chunk) in buf.chunks_mut(chunk_bytes).enumerate() {
            self.fill_chunk(chunk, offset + (i * chunk_bytes) as u64);
        }
    }

    fn fill_chunk(&self, chunk: &mut [u8], offset: u64) {
        let len = self.bytes.len();
        for rep in chunk.chunks_mut(len) {
            rep.copy_from_slice(&self.bytes[..rep.len()]);
            for &at in &self.offsets_at {
                if at < rep.len() {
                    let n = OFFSET_BYTES.min(rep.len() - at);
                    rep[at..at + n].copy_from_slice(&offset.to_le_bytes()[..n]);
                }
            }
        }
    }
}

/// One number of a pattern: its bytes onto `out`; the rest of the input,
/// or None if it is none.
fn parse_number<'a>(s: &'a str, out: &mut Vec<u8>) -> Option<&'a str> {
    let lower = s.to_ascii_lowercase();
    if let Some(hex) = lower.strip_prefix("0x") {
        let mut digits = hex.bytes().take_while(u8::is_ascii_hexdigit).count();
        // "0xff0x14" is two numbers: a run ending in the next's "0x".
        if digits > 0 && hex[digits..].starts_with('x') && hex.as_bytes()[digits - 1] == b'0' {
            digits -= 1;
        }
        if digits == 0 {
            return None;
        }
        let hex = &hex[..digits];
        let (first, pairs) = hex.split_at(digits % 2);
        if !first.is_empty() {
            out.push(u8::from_str_radix(first, 16).ok()?);
        }
        for i in (0..pairs.len()).step_by(2) {
            out.push(u8::from_str_radix(&pairs[i..i + 2], 16).ok()?);
        }
        return Some(&s[2 + digits..]);
    }
    // A decimal number runs to the next "0x", if any (fio: "-100xab" is
    // -10 then 0xab).
    let end = lower.find("0x").unwrap_or(s.len());
    let sign = usize::from(s.starts_with('-') || s.starts_with('+'));
    let digits = s[sign..end].bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let value: i64 = s[..sign + digits].parse().ok()?;
    if value < i64::from(i32::MIN) || value > i64::from(i32::MAX) {
        return None;
    }
    let mut v = value as i32 as u32;
    if v == 0 {
        out.push(0);
    }
    while v != 0 {
        out.push(v as u8);
        v >>= 8;
    }
    Some(&s[sign + digits..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(s: &str) -> Vec<u8> {
        VerifyPattern::parse("verify_pattern", s).unwrap().bytes
    }

    #[test]
    fn fios_documented_examples_parse_to_its_bytes() {
        // lib/pattern.c's examples.
        assert_eq!(bytes("\"abcd\""), b"abcd");
        assert_eq!(bytes("-1024"), [0x00, 0xfc, 0xff, 0xff]);
        assert_eq!(bytes("66"), [0x42]);
        assert_eq!(bytes("0xFF0X1"), [0xff, 0x01]);
        assert_eq!(bytes("%o"), [0; 8]);
        assert_eq!(bytes("\"123\"0xFFeeCC"), [0x31, 0x32, 0x33, 0xff, 0xee, 0xcc]);
        let mut want = vec![0xf6, 0xff, 0xff, 0xff, 0xab, 0x31];
        want.extend([0; 8]);
        want.push(0x32);
        assert_eq!(bytes("-100xab\"1\"%o\"2\""), want);
        assert_eq!(bytes("0xaa555aa5"), [0xaa, 0x55, 0x5a, 0xa5]);
        assert_eq!(bytes("0"), [0]);
        assert_eq!(bytes("0xabc"), [0x0a, 0xbc]);
    }

    #[test]
    fn bad_patterns_name_the_option() {
        for bad in ["", "\"open", "%x", "zz", "4294967296", "0x"] {
            let e = VerifyPattern::parse("verify_pattern", bad).unwrap_err();
            assert!(e.0.starts_with("verify_pattern: bad pattern"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_pattern_repeats_and_carries_each_instances_offset() {
        let p = VerifyPattern::parse("verify_pattern", "0xaa%o").unwrap();
        let mut buf = [0u8; 24];
        p.fill(&mut buf, 0x1000, 0);
        // Every repetition carries the block's offset.
        assert_eq!(&buf[..9], &[0xaa, 0x00, 0x10, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&buf[9..18], &buf[..9]);
        assert_eq!(&buf[18..], &[0xaa, 0x00, 0x10, 0, 0, 0]);
        // verify_pattern_interval: anew every 12 bytes, at its own offset.
        p.fill(&mut buf, 0x1000, 12);
        assert_eq!(&buf[12..16], &[0xaa, 0x0c, 0x10, 0]);
        assert_eq!(buf[9], 0xaa);
    }
}
