//! fio's `verify=` methods: the checksums and digests a block's header
//! carries over its data, and the methods without one (`meta`: the
//! header alone; `pattern`, `pattern_hdr`: the `verify_pattern` bytes;
//! `null`: nothing checked).
//!
//! The digests come from crates (crc, crc32c, crc32fast, md-5, sha1,
//! sha2, sha3, xxhash-rust); the CRC variants are the catalogue's named
//! ones (CRC-64/XZ, CRC-32/ISO-HDLC, CRC-16/ARC, CRC-7/MMC), xxhash is
//! XXH32 with seed 0. Headers are mqblk's own (header.rs), so the values
//! need not match fio's on-disk bytes.

use md5::Md5;
use sha1::Sha1;
use sha2::{Digest, Sha256, Sha512};
use sha3::{Sha3_224, Sha3_256, Sha3_384, Sha3_512};

/// The longest digest (sha512, sha3-512).
pub const MAX_DIGEST_BYTES: usize = 64;

const CRC64: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_XZ);
const CRC16: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_ARC);
const CRC7: crc::Crc<u8> = crc::Crc::<u8>::new(&crc::CRC_7_MMC);

/// One `verify=` method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Md5,
    Crc64,
    Crc32c,
    Crc32,
    Crc16,
    Crc7,
    Xxhash,
    Sha512,
    Sha256,
    Sha1,
    Sha3_224,
    Sha3_256,
    Sha3_384,
    Sha3_512,
    /// The header alone (offset, length, sequence), and the pattern if one
    /// is given.
    Meta,
    /// `verify=pattern`: no header, the whole block is the pattern.
    Pattern,
    /// `verify=pattern_hdr` (and `verify_pattern` without `verify`): a
    /// header, then the pattern.
    PatternHdr,
    /// Nothing written into the block, nothing checked.
    Null,
}

/// fio's names, with the method each stands for (`crc32c-intel` is
/// fio's synonym of `crc32c`).
const NAMES: &[(&str, Algorithm)] = &[
    ("md5", Algorithm::Md5),
    ("crc64", Algorithm::Crc64),
    ("crc32c", Algorithm::Crc32c),
    ("crc32c-intel", Algorithm::Crc32c),
    ("crc32", Algorithm::Crc32),
    ("crc16", Algorithm::Crc16),
    ("crc7", Algorithm::Crc7),
    ("xxhash", Algorithm::Xxhash),
    ("sha512", Algorithm::Sha512),
    ("sha256", Algorithm::Sha256),
    ("sha1", Algorithm::Sha1),
    ("sha3-224", Algorithm::Sha3_224),
    ("sha3-256", Algorithm::Sha3_256),
    ("sha3-384", Algorithm::Sha3_384),
    ("sha3-512", Algorithm::Sha3_512),
    ("meta", Algorithm::Meta),
    ("pattern", Algorithm::Pattern),
    ("pattern_hdr", Algorithm::PatternHdr),
    ("null", Algorithm::Null),
];

impl Algorithm {
    /// `verify=NAME`: Some(method), None for `0`/`none` (no verify).
    pub fn parse(name: &str) -> Result<Option<Self>, String> {
        if matches!(name, "0" | "none") {
            return Ok(None);
        }
        match NAMES.iter().find(|(n, _)| *n == name) {
            Some(&(_, a)) => Ok(Some(a)),
            None => {
                let known: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
                Err(format!("verify={name}: unknown method (accepted: 0, none, {})", known.join(", ")))
            }
        }
    }

    /// fio's name (the first of its names).
    pub fn name(self) -> &'static str {
        NAMES.iter().find(|(_, a)| *a == self).map(|(n, _)| *n).expect("every method is named")
    }

    /// Its number in a header (stable: written to the device).
    pub fn id(self) -> u8 {
        NAMES.iter().filter(|(n, _)| *n != "crc32c-intel").position(|(_, a)| *a == self).expect("named") as u8 + 1
    }

    /// Bytes of its digest in the header (0: none).
    pub fn digest_bytes(self) -> usize {
        match self {
            Algorithm::Md5 => 16,
            Algorithm::Crc64 => 8,
            Algorithm::Crc32c | Algorithm::Crc32 | Algorithm::Xxhash => 4,
            Algorithm::Crc16 => 2,
            Algorithm::Crc7 => 1,
            Algorithm::Sha512 | Algorithm::Sha3_512 => 64,
            Algorithm::Sha256 | Algorithm::Sha3_256 => 32,
            Algorithm::Sha1 => 20,
            Algorithm::Sha3_224 => 28,
            Algorithm::Sha3_384 => 48,
            Algorithm::Meta | Algorithm::Pattern | Algorithm::PatternHdr | Algorithm::Null => 0,
        }
    }

    /// Whether blocks carry a header (all but `pattern` and `null`).
    pub fn has_header(self) -> bool {
        !matches!(self, Algorithm::Pattern | Algorithm::Null)
    }

    /// Whether the pattern is what is checked (beside the header).
    pub fn checks_pattern(self) -> bool {
        matches!(self, Algorithm::Meta | Algorithm::Pattern | Algorithm::PatternHdr)
    }

    /// The digest of `data` into `out[..digest_bytes()]` (little endian
    /// for the CRCs and xxhash).
    pub fn digest(self, data: &[u8], out: &mut [u8; MAX_DIGEST_BYTES]) {
        let n = self.digest_bytes();
        match self {
            Algorithm::Md5 => out[..n].copy_from_slice(&Md5::digest(data)),
            Algorithm::Crc64 => out[..n].copy_from_slice(&CRC64.checksum(data).to_le_bytes()),
            Algorithm::Crc32c => out[..n].copy_from_slice(&crc32c::crc32c(data).to_le_bytes()),
            Algorithm::Crc32 => out[..n].copy_from_slice(&crc32fast::hash(data).to_le_bytes()),
            Algorithm::Crc16 => out[..n].copy_from_slice(&CRC16.checksum(data).to_le_bytes()),
            Algorithm::Crc7 => out[0] = CRC7.checksum(data),
            Algorithm::Xxhash => out[..n].copy_from_slice(&xxhash_rust::xxh32::xxh32(data, 0).to_le_bytes()),
            Algorithm::Sha512 => out[..n].copy_from_slice(&Sha512::digest(data)),
            Algorithm::Sha256 => out[..n].copy_from_slice(&Sha256::digest(data)),
            Algorithm::Sha1 => out[..n].copy_from_slice(&Sha1::digest(data)),
            Algorithm::Sha3_224 => out[..n].copy_from_slice(&Sha3_224::digest(data)),
            Algorithm::Sha3_256 => out[..n].copy_from_slice(&Sha3_256::digest(data)),
            Algorithm::Sha3_384 => out[..n].copy_from_slice(&Sha3_384::digest(data)),
            Algorithm::Sha3_512 => out[..n].copy_from_slice(&Sha3_512::digest(data)),
            Algorithm::Meta | Algorithm::Pattern | Algorithm::PatternHdr | Algorithm::Null => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(a: Algorithm, data: &[u8]) -> String {
        let mut out = [0u8; MAX_DIGEST_BYTES];
        a.digest(data, &mut out);
        out[..a.digest_bytes()].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// A CRC's check value (of "123456789") as its little-endian bytes.
    fn le(v: u64, bytes: usize) -> String {
        v.to_le_bytes()[..bytes].iter().map(|b| format!("{b:02x}")).collect()
    }

    const CHECK: &[u8] = b"123456789";

    #[test]
    fn crcs_give_the_catalogue_check_values() {
        assert_eq!(hex(Algorithm::Crc64, CHECK), le(0x995d_c9bb_df19_39fa, 8), "CRC-64/XZ");
        assert_eq!(hex(Algorithm::Crc32c, CHECK), le(0xe306_9283, 4), "CRC-32C");
        assert_eq!(hex(Algorithm::Crc32, CHECK), le(0xcbf4_3926, 4), "CRC-32/ISO-HDLC");
        assert_eq!(hex(Algorithm::Crc16, CHECK), le(0xbb3d, 2), "CRC-16/ARC");
        assert_eq!(hex(Algorithm::Crc7, CHECK), "75", "CRC-7/MMC");
    }

    #[test]
    fn xxhash_is_xxh32_with_seed_0() {
        assert_eq!(hex(Algorithm::Xxhash, b""), le(0x02cc_5d05, 4));
        assert_eq!(hex(Algorithm::Xxhash, b"abc"), le(0x32d1_53ff, 4));
    }

    #[test]
    fn digests_give_the_published_values() {
        // Python's hashlib of "123456789".
        let cases = [
            (Algorithm::Md5, "25f9e794323b453885f5181f1b624d0b"),
            (Algorithm::Sha1, "f7c3bc1d808e04732adf679965ccc34ca7ae3441"),
            (Algorithm::Sha256, "15e2b0d3c33891ebb0f1ef609ec419420c20e320ce94c65fbc8c3312448eb225"),
            (
                Algorithm::Sha512,
                "d9e6762dd1c8eaf6d61b3c6192fc408d4d6d5f1176d0c29169bc24e71c3f274a\
                 d27fcd5811b313d681f7e55ec02d73d499c95455b6b5bb503acf574fba8ffe85",
            ),
            (Algorithm::Sha3_224, "5795c3d628fd638c9835a4c79a55809f265068c88729a1a3fcdf8522"),
            (Algorithm::Sha3_256, "87cd084d190e436f147322b90e7384f6a8e0676c99d21ef519ea718e51d45f9c"),
            (
                Algorithm::Sha3_384,
                "8b90ede4d095409f1a12492c2520599683a9478dc70b7566d23b3e41ece8538c6cde92382a5e38786490375c54672abf",
            ),
            (
                Algorithm::Sha3_512,
                "e1e44d20556e97a180b6dd3ed7ae5c465cafd553fa8747dca038fb95635b77a3\
                 7318f7ddf7aec1f6c3c14bb160ba2497007decf38dd361cab199e3b8c8fe1f5c",
            ),
        ];
        for (a, want) in cases {
            assert_eq!(hex(a, CHECK), want, "{}", a.name());
        }
    }

    #[test]
    fn names_parse_and_ids_are_distinct() {
        assert_eq!(Algorithm::parse("crc32c-intel"), Ok(Some(Algorithm::Crc32c)));
        assert_eq!(Algorithm::parse("none"), Ok(None));
        assert_eq!(Algorithm::parse("0"), Ok(None));
        let e = Algorithm::parse("sha384").unwrap_err();
        assert!(e.contains("verify=sha384: unknown method") && e.contains("sha3-384"), "{e}");
        let mut ids: Vec<u8> = NAMES.iter().map(|(_, a)| a.id()).collect();
        ids.dedup();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), NAMES.len() - 1, "one id per method");
        assert!(NAMES.iter().all(|(n, a)| Algorithm::parse(n) == Ok(Some(*a))));
    }
}
