//! The verify header at the start of each `verify_interval` of a written
//! block: mqblk's own layout (not fio's bytes), with what fio's carries:
//! where the interval belongs (offset, length), which write put it there
//! (the job's write sequence number, fio's `numberio`), the seed of its
//! data, the method, a CRC-32C of the header itself, and the method's
//! digest of the interval's data after the header.
//!
//! Layout (little endian): 0..8 magic `mqblkvfy`, 8 method id, 9 version,
//! 10..12 zero, 12..16 length, 16..24 offset, 24..32 sequence, 32..40
//! seed, 40..44 CRC-32C of bytes 0..40, 44..48 zero, then the digest.
//! Checked in fio's order (verify.c `verify_header`): magic, version,
//! length, seed, offset, sequence, header CRC.

use std::fmt;

pub const MAGIC: &[u8; 8] = b"mqblkvfy";
const VERSION: u8 = 1;
/// The header before the digest.
pub const FIXED_BYTES: usize = 48;
const CRC_AT: usize = 40;

/// What a header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub algo_id: u8,
    pub len_bytes: u32,
    pub offset: u64,
    pub seq: u64,
    pub seed: u64,
}

/// What the reader expects of a header; None: not checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect {
    pub len_bytes: u32,
    pub offset: u64,
    pub seq: Option<u64>,
    pub seed: Option<u64>,
}

/// Which check of a header failed, with what was found and wanted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    Magic([u8; 8]),
    Version(u8),
    Length { found: u32, wanted: u32 },
    Seed { found: u64, wanted: u64 },
    Offset { found: u64, wanted: u64 },
    Sequence { found: u64, wanted: u64 },
    Crc { found: u32, computed: u32 },
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderError::Magic(m) => {
                let hex: String = m.iter().map(|b| format!("{b:02x}")).collect();
                write!(f, "bad magic header {hex}, wanted {}", String::from_utf8_lossy(MAGIC))
            }
            HeaderError::Version(v) => write!(f, "unsupported header version {v:x}, wanted {VERSION:x}"),
            HeaderError::Length { found, wanted } => write!(f, "bad header length {found}, wanted {wanted}"),
            HeaderError::Seed { found, wanted } => write!(f, "bad header rand_seed {found}, wanted {wanted}"),
            HeaderError::Offset { found, wanted } => write!(f, "bad header offset {found}, wanted {wanted}"),
            HeaderError::Sequence { found, wanted } => write!(f, "bad header numberio {found}, wanted {wanted}"),
            HeaderError::Crc { found, computed } => write!(f, "bad header crc {found:x}, calculated {computed:x}"),
        }
    }
}

impl Header {
    /// Writes the header into `buf[..FIXED_BYTES]` (the digest after it
    /// is the caller's).
    pub fn write(&self, buf: &mut [u8]) {
        buf[0..8].copy_from_slice(MAGIC);
        buf[8] = self.algo_id;
        buf[9] = VERSION;
        buf[10..12].fill(0);
        buf[12..16].copy_from_slice(&self.len_bytes.to_le_bytes());
        buf[16..24].copy_from_slice(&self.offset.to_le_bytes());
        buf[24..32].copy_from_slice(&self.seq.to_le_bytes());
        buf[32..40].copy_from_slice(&self.seed.to_le_bytes());
        let crc = crc32c::crc32c(&buf[..CRC_AT]);
        buf[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        buf[44..48].fill(0);
    }

    /// Reads the header of `buf` and checks it against `want`.
    pub fn check(buf: &[u8], want: &Expect) -> Result<Header, HeaderError> {
        let u32_at = |i: usize| u32::from_le_bytes(buf[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(buf[i..i + 8].try_into().expect("8 bytes"));
        if &buf[0..8] != MAGIC {
            return Err(HeaderError::Magic(buf[0..8].try_into().expect("8 bytes")));
        }
        if buf[9] != VERSION {
            return Err(HeaderError::Version(buf[9]));
        }
        let h =
            Header { algo_id: buf[8], len_bytes: u32_at(12), offset: u64_at(16), seq: u64_at(24), seed: u64_at(32) };
        if h.len_bytes != want.len_bytes {
            return Err(HeaderError::Length { found: h.len_bytes, wanted: want.len_bytes });
        }
        match want.seed {
            Some(seed) if seed != h.seed => return Err(HeaderError::Seed { found: h.seed, wanted: seed }),
            _ => {}
        }
        if h.offset != want.offset {
            return Err(HeaderError::Offset { found: h.offset, wanted: want.offset });
        }
        match want.seq {
            Some(seq) if seq != h.seq => return Err(HeaderError::Sequence { found: h.seq, wanted: seq }),
            _ => {}
        }
        let (found, computed) = (u32_at(CRC_AT), crc32c::crc32c(&buf[..CRC_AT]));
        if found != computed {
            return Err(HeaderError::Crc { found, computed });
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: Header = Header { algo_id: 3, len_bytes: 4096, offset: 8192, seq: 7, seed: 99 };
    const WANT: Expect = Expect { len_bytes: 4096, offset: 8192, seq: Some(7), seed: Some(99) };

    #[test]
    fn a_written_header_reads_back() {
        let mut buf = [0u8; FIXED_BYTES];
        H.write(&mut buf);
        assert_eq!(Header::check(&buf, &WANT), Ok(H));
    }

    #[test]
    fn each_check_fails_in_fios_order() {
        let mut buf = [0u8; FIXED_BYTES];
        H.write(&mut buf);
        let with = |f: &dyn Fn(&mut Expect)| {
            let mut w = WANT;
            f(&mut w);
            Header::check(&buf, &w).unwrap_err()
        };
        assert_eq!(with(&|w| w.len_bytes = 512), HeaderError::Length { found: 4096, wanted: 512 });
        assert_eq!(with(&|w| w.seed = Some(1)), HeaderError::Seed { found: 99, wanted: 1 });
        assert_eq!(with(&|w| w.offset = 0), HeaderError::Offset { found: 8192, wanted: 0 });
        assert_eq!(with(&|w| w.seq = Some(8)), HeaderError::Sequence { found: 7, wanted: 8 });
        assert!(Header::check(&buf, &Expect { seq: None, seed: None, ..WANT }).is_ok());
        let mut torn = buf;
        torn[38] ^= 1; // the seed, unchecked: only the header CRC sees it
        let e = Header::check(&torn, &Expect { seed: None, ..WANT }).unwrap_err();
        assert!(matches!(e, HeaderError::Crc { .. }), "{e}");
        assert!(Header::check(&[0u8; FIXED_BYTES], &WANT)
            .unwrap_err()
            .to_string()
            .starts_with("bad magic header 0000"));
    }
}
