//! One verified block: how a write fills it and how a read checks it
//! (fio's `populate_verify_io_u` and `verify_io_u`).
//!
//! A block is cut into `verify_interval`s; each begins with a header
//! (header.rs) over the interval's data. The data is the `verify_pattern`
//! if one is given, else pseudo-random bytes from the write's seed. With
//! `verify_offset` the header is swapped with the bytes at that offset of
//! its interval after it is filled, and swapped back before it is checked.
//! Checked per interval: the header (fio's order), then the method's
//! digest of the data after it, or the pattern (`meta`, `pattern`,
//! `pattern_hdr`). Nothing here allocates: the expected pattern is built
//! in a buffer the caller keeps.

use super::algo::{Algorithm, MAX_DIGEST_BYTES};
use super::header::{Expect, Header, HeaderError, FIXED_BYTES};
use super::pattern::VerifyPattern;

/// How a job's blocks are laid out (fixed for the job).
#[derive(Debug, Clone)]
pub struct Layout {
    pub algo: Algorithm,
    pub interval_bytes: usize,
    /// `verify_offset`: where in its interval the header is kept.
    pub header_at: usize,
    pub pattern: Option<VerifyPattern>,
    /// `verify_pattern_interval` (0: the pattern once per block).
    pub pattern_interval_bytes: usize,
}

/// What the reader expects of a block: its write's sequence number and
/// seed, where they are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Want {
    pub seq: Option<u64>,
    pub seed: Option<u64>,
}

/// Which check of an interval failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    Header(HeaderError),
    Digest {
        expected: [u8; MAX_DIGEST_BYTES],
        received: [u8; MAX_DIGEST_BYTES],
    },
    /// The first byte off the pattern, at `at` bytes into the interval.
    Pattern {
        at: usize,
        got: u8,
        wanted: u8,
    },
}

/// A failed interval: where, how long, what failed; and the header found
/// (the write it claims to be), if it was readable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub offset: u64,
    pub len_bytes: usize,
    pub check: Check,
    pub header: Option<Header>,
}

impl Layout {
    /// The header's bytes with its digest (0 without a header).
    pub fn header_bytes(&self) -> usize {
        if self.algo.has_header() {
            FIXED_BYTES + self.algo.digest_bytes()
        } else {
            0
        }
    }

    /// Fills `buf`, one block to be written at `offset` by write `seq`
    /// whose data comes from `seed`.
    pub fn fill(&self, buf: &mut [u8], offset: u64, seq: u64, seed: u64) {
        if self.algo == Algorithm::Null {
            return;
        }
        match &self.pattern {
            Some(p) => p.fill(buf, offset, self.pattern_interval_bytes),
            None => fill_random(buf, seed),
        }
        let hdr = self.header_bytes();
        if hdr == 0 {
            return;
        }
        for (i, chunk) in buf.chunks_mut(self.interval_bytes).enumerate() {
            let h = Header {
                algo_id: self.algo.id(),
                len_bytes: chunk.len() as u32,
                offset: offset + (i * self.interval_bytes) as u64,
                seq,
                seed,
            };
            h.write(chunk);
            let mut digest = [0u8; MAX_DIGEST_BYTES];
            self.algo.digest(&chunk[hdr..], &mut digest);
            chunk[FIXED_BYTES..hdr].copy_from_slice(&digest[..hdr - FIXED_BYTES]);
            if self.header_at > 0 {
                swap_header(chunk, self.header_at, hdr);
            }
        }
    }

    /// Checks `buf`, read from `offset`; `scratch` (a block's bytes) holds
    /// the expected pattern. Headers are swapped back in `buf`, so a dump
    /// shows them in place. The first failing interval, if any (boxed: a
    /// failure is rare and carries two digests).
    pub fn check(&self, buf: &mut [u8], offset: u64, want: Want, scratch: &mut [u8]) -> Result<(), Box<Failure>> {
        if self.algo == Algorithm::Null {
            return Ok(());
        }
        let pattern = self.pattern.as_ref().filter(|_| self.algo.checks_pattern());
        if let Some(p) = pattern {
            p.fill(&mut scratch[..buf.len()], offset, self.pattern_interval_bytes);
        }
        let hdr = self.header_bytes();
        for (i, chunk) in buf.chunks_mut(self.interval_bytes).enumerate() {
            let at = offset + (i * self.interval_bytes) as u64;
            let len_bytes = chunk.len();
            let fail = |check, header| Box::new(Failure { offset: at, len_bytes, check, header });
            let mut header = None;
            if hdr > 0 {
                if self.header_at > 0 {
                    swap_header(chunk, self.header_at, hdr);
                }
                let expect = Expect { len_bytes: chunk.len() as u32, offset: at, seq: want.seq, seed: want.seed };
                let h = Header::check(chunk, &expect).map_err(|e| fail(Check::Header(e), None))?;
                header = Some(h);
                if let Some(check) = self.check_digest(chunk, hdr) {
                    return Err(fail(check, header));
                }
            }
            if pattern.is_some() {
                let start = i * self.interval_bytes;
                let expected = &scratch[start + hdr..start + chunk.len()];
                if let Some(k) = chunk[hdr..].iter().zip(expected).position(|(a, b)| a != b) {
                    let check = Check::Pattern { at: hdr + k, got: chunk[hdr + k], wanted: expected[k] };
                    return Err(fail(check, header));
                }
            }
        }
        Ok(())
    }

    /// The digest check of one interval (header `hdr` bytes long).
    fn check_digest(&self, chunk: &[u8], hdr: usize) -> Option<Check> {
        let n = self.algo.digest_bytes();
        if n == 0 {
            return None;
        }
        let mut expected = [0u8; MAX_DIGEST_BYTES];
        expected[..n].copy_from_slice(&chunk[FIXED_BYTES..hdr]);
        let mut received = [0u8; MAX_DIGEST_BYTES];
        self.algo.digest(&chunk[hdr..], &mut received);
        (expected[..n] != received[..n]).then_some(Check::Digest { expected, received })
    }
}

/// Swaps the interval's first `len` bytes with those at `at` (fio's
/// `verify_offset`; its own inverse).
fn swap_header(chunk: &mut [u8], at: usize, len: usize) {
    debug_assert!(at >= len && at + len <= chunk.len(), "verify_offset leaves the header whole and apart");
    let (head, tail) = chunk.split_at_mut(at);
    head[..len].swap_with_slice(&mut tail[..len]);
}

/// Pseudo-random bytes from `seed` (xorshift64).
fn fill_random(buf: &mut [u8], seed: u64) {
    let mut x = seed | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(algo: Algorithm, interval_bytes: usize, header_at: usize, pattern: Option<&str>) -> Layout {
        let pattern = pattern.map(|p| VerifyPattern::parse("verify_pattern", p).unwrap());
        Layout { algo, interval_bytes, header_at, pattern, pattern_interval_bytes: 0 }
    }

    const WANT: Want = Want { seq: Some(5), seed: Some(77) };

    fn check(l: &Layout, buf: &[u8], offset: u64, want: Want) -> Result<(), Box<Failure>> {
        let mut copy = buf.to_vec();
        let mut scratch = vec![0u8; buf.len()];
        l.check(&mut copy, offset, want, &mut scratch)
    }

    #[test]
    fn every_method_passes_its_own_block_and_catches_a_flipped_bit() {
        use Algorithm::*;
        let algos = [Md5, Crc64, Crc32c, Crc32, Crc16, Crc7, Xxhash, Sha512, Sha256, Sha1, Sha3_224];
        for algo in algos.into_iter().chain([Sha3_256, Sha3_384, Sha3_512]) {
            let l = layout(algo, 4096, 0, None);
            let mut buf = vec![0u8; 4096];
            l.fill(&mut buf, 8192, 5, 77);
            assert_eq!(check(&l, &buf, 8192, WANT), Ok(()), "{}", algo.name());
            buf[3000] ^= 0x10;
            let e = check(&l, &buf, 8192, WANT).unwrap_err();
            assert!(matches!(e.check, Check::Digest { .. }), "{}: {e:?}", algo.name());
            assert_eq!((e.offset, e.len_bytes, e.header.map(|h| h.seq)), (8192, 4096, Some(5)));
        }
    }

    #[test]
    fn intervals_each_carry_a_header_and_the_failing_one_is_named() {
        let l = layout(Algorithm::Crc32c, 512, 0, None);
        let mut buf = vec![0u8; 4096];
        l.fill(&mut buf, 1 << 20, 5, 77);
        assert!(buf.chunks(512).all(|c| &c[..8] == super::super::header::MAGIC));
        buf[512 * 3 + 100] ^= 1;
        let e = check(&l, &buf, 1 << 20, WANT).unwrap_err();
        assert_eq!((e.offset, e.len_bytes), ((1 << 20) + 3 * 512, 512));
    }

    #[test]
    fn meta_checks_the_header_and_the_pattern() {
        let l = layout(Algorithm::Meta, 512, 0, Some("0xaa555aa5"));
        let mut buf = vec![0u8; 4096];
        l.fill(&mut buf, 0, 5, 77);
        assert_eq!(check(&l, &buf, 0, WANT), Ok(()));
        assert_eq!(&buf[512 + 48..512 + 52], &[0xaa, 0x55, 0x5a, 0xa5], "the pattern runs on past each header");
        let e = check(&l, &buf, 4096, WANT).unwrap_err();
        assert_eq!(e.check, Check::Header(HeaderError::Offset { found: 0, wanted: 4096 }));
        let e = check(&l, &buf, 0, Want { seq: Some(6), ..WANT }).unwrap_err();
        assert_eq!(e.check, Check::Header(HeaderError::Sequence { found: 5, wanted: 6 }));
        buf[1003] = 0;
        let e = check(&l, &buf, 0, WANT).unwrap_err();
        assert_eq!((e.offset, &e.check), (512, &Check::Pattern { at: 491, got: 0, wanted: 0xa5 }));
    }

    #[test]
    fn pattern_alone_has_no_header_and_checks_every_byte() {
        let l = layout(Algorithm::Pattern, 4096, 0, Some("%o"));
        let mut buf = vec![0u8; 4096];
        l.fill(&mut buf, 4096, 5, 77);
        assert_eq!(&buf[..8], &4096u64.to_le_bytes());
        assert_eq!(check(&l, &buf, 4096, WANT), Ok(()));
        let e = check(&l, &buf, 8192, WANT).unwrap_err();
        assert_eq!(e.check, Check::Pattern { at: 1, got: 0x10, wanted: 0x20 });
    }

    #[test]
    fn verify_offset_moves_the_header_and_checks_it_in_place() {
        let l = layout(Algorithm::Sha256, 4096, 1024, None);
        let mut buf = vec![0u8; 4096];
        l.fill(&mut buf, 0, 5, 77);
        assert_eq!(&buf[1024..1032], super::super::header::MAGIC, "the header sits at verify_offset");
        assert_ne!(&buf[..8], super::super::header::MAGIC);
        assert_eq!(check(&l, &buf, 0, WANT), Ok(()));
        // Without the swap back, the block does not check.
        let plain = layout(Algorithm::Sha256, 4096, 0, None);
        assert!(check(&plain, &buf, 0, WANT).is_err());
    }

    #[test]
    fn null_writes_nothing_and_checks_nothing() {
        let l = layout(Algorithm::Null, 4096, 0, None);
        let mut buf = vec![7u8; 4096];
        l.fill(&mut buf, 0, 5, 77);
        assert!(buf.iter().all(|&b| b == 7));
        assert_eq!(check(&l, &[0u8; 4096], 0, WANT), Ok(()));
    }
}
