//! fio's write-buffer contents: `zero_buffers`, `buffer_pattern`,
//! `refill_buffers`, `scramble_buffers`, `buffer_compress_percentage`
//! (with `buffer_compress_chunk`) and the dedupe options
//! (`dedupe_percentage`, `dedupe_mode`, `dedupe_working_set_percentage`,
//! `dedupe_global`): what a device that compresses or deduplicates would
//! see in the job's writes.
//!
//! The rules are fio's (HOWTO "Buffers and memory", io_u.c
//! `fill_io_buffer`): by default every write buffer holds random bytes
//! filled once; compression and dedupe refill the buffer on every write.
//! A compressible buffer is, per `buffer_compress_chunk`, random bytes
//! followed by the fixed part (zeros, or the `buffer_pattern`) making up
//! the percentage; a deduplicated write repeats an earlier buffer's
//! contents: the last unique one (`repeat`), or one of the first unique
//! buffers, as many as `dedupe_working_set_percentage` of the job's
//! region holds (`working_set`). Contents are generated from a seed per
//! buffer, so repeating one is repeating its seed; nothing is allocated
//! per I/O. A job that verifies writes its verify blocks instead.
//! `dedupe_global`: the jobs that have it draw their working sets from
//! one stream of seeds (`randseed`'s), so their dedupe buffers are the
//! same buffers, shared.

use super::options::{err, OptionError};
use super::values::{parse_flag, parse_int, parse_size};
use super::verify::VerifyPattern;

/// A job's buffer options, with fio's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct BufferOptions {
    pub zero: bool,
    pub refill: bool,
    pub pattern: Option<VerifyPattern>,
    pub compress_pct: u32,
    pub compress_chunk_bytes: u64,
    pub dedupe_pct: u32,
    pub dedupe_working_set: bool,
    pub dedupe_working_set_pct: u32,
    pub dedupe_global: bool,
}

impl Default for BufferOptions {
    fn default() -> Self {
        Self {
            zero: false,
            refill: false,
            pattern: None,
            compress_pct: 0,
            compress_chunk_bytes: 512,
            dedupe_pct: 0,
            dedupe_working_set: false,
            dedupe_working_set_pct: 5,
            dedupe_global: false,
        }
    }
}

/// The option names (options.rs' `job_options` adds them).
pub const BUFFER_OPTIONS: &[&str] = &[
    "zero_buffers",
    "refill_buffers",
    "scramble_buffers",
    "buffer_pattern",
    "buffer_compress_percentage",
    "buffer_compress_chunk",
    "dedupe_percentage",
    "dedupe_mode",
    "dedupe_working_set_percentage",
    "dedupe_global",
];

impl BufferOptions {
    /// Whether each write's buffer is filled anew (the `SHAPED` loop).
    pub fn refills(&self) -> bool {
        self.refill || self.compress_pct > 0 || self.dedupe_pct > 0
    }

    /// Sets one option; false if `key` is none of them.
    pub(super) fn set(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionError> {
        let v = || value.ok_or_else(|| OptionError(format!("{key}: needs a value ({key}=...)")));
        let pct = |s: &str| parse_int(key, s, 0, 100).map(|p| p as u32);
        match key {
            "zero_buffers" => self.zero = parse_flag(key, value)?,
            "refill_buffers" => self.refill = parse_flag(key, value)?,
            // Each slot's buffer is filled from its own seed already, so
            // no two buffers in flight are alike; per-submit scrambling
            // on top is not done.
            "scramble_buffers" => _ = parse_flag(key, value)?,
            "buffer_pattern" => self.pattern = Some(VerifyPattern::parse(key, v()?)?),
            "buffer_compress_percentage" => self.compress_pct = pct(v()?)?,
            "buffer_compress_chunk" => self.compress_chunk_bytes = parse_size(key, v()?)?,
            "dedupe_percentage" => self.dedupe_pct = pct(v()?)?,
            "dedupe_mode" => {
                self.dedupe_working_set = match v()? {
                    "repeat" => false,
                    "working_set" => true,
                    o => return err(format!("dedupe_mode: bad value '{o}' (accepted: repeat, working_set)")),
                }
            }
            "dedupe_working_set_percentage" => self.dedupe_working_set_pct = pct(v()?)?,
            "dedupe_global" => self.dedupe_global = parse_flag(key, value)?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// The contents of a job's writes at run time.
#[derive(Debug, Clone)]
pub struct BufferFiller {
    opts: BufferOptions,
    rng: u64,
    /// The seeds of the unique buffers written so far: the last one
    /// (`repeat`) or the first `working_set` of them, drawn from
    /// `set_rng` (shared by `dedupe_global` jobs) until the set is full.
    last_unique: u64,
    working_set: Vec<u64>,
    working_set_len: usize,
    set_rng: u64,
    /// Writes and the deduplicated ones among them (for the tests).
    pub writes: u64,
    pub deduped: u64,
}

impl BufferFiller {
    /// The filler of a job whose region holds `region_blocks` blocks;
    /// None when its buffers are filled once at setup.
    pub fn new(opts: &BufferOptions, seed: u64, global_seed: u64, region_blocks: u64) -> Option<Self> {
        if !opts.refills() {
            return None;
        }
        let working_set_len = (region_blocks * u64::from(opts.dedupe_working_set_pct) / 100).clamp(1, 1 << 20) as usize;
        Some(Self {
            opts: opts.clone(),
            rng: seed | 1,
            last_unique: 0,
            working_set: Vec::with_capacity(if opts.dedupe_working_set { working_set_len } else { 0 }),
            working_set_len,
            set_rng: if opts.dedupe_global { global_seed | 1 } else { seed.rotate_left(17) | 1 },
            writes: 0,
            deduped: 0,
        })
    }

    fn next(&mut self) -> u64 {
        xorshift(&mut self.rng)
    }

    /// Fills one write's buffer: a repeat of an earlier buffer for the
    /// dedupe percentage, else new contents.
    pub fn fill(&mut self, buf: &mut [u8], offset: u64) {
        self.writes += 1;
        let dedupe = self.opts.dedupe_pct > 0 && (self.next() % 100) < u64::from(self.opts.dedupe_pct);
        let repeat = match (dedupe, self.opts.dedupe_working_set) {
            (true, false) if self.last_unique != 0 => Some(self.last_unique),
            (true, true) if self.working_set.len() == self.working_set_len => {
                let i = (self.next() % self.working_set_len as u64) as usize;
                Some(self.working_set[i])
            }
            _ => None,
        };
        let seed = match repeat {
            Some(seed) => {
                self.deduped += 1;
                seed
            }
            None if self.opts.dedupe_working_set && self.working_set.len() < self.working_set_len => {
                let seed = xorshift(&mut self.set_rng);
                self.working_set.push(seed);
                seed
            }
            None => {
                self.last_unique = self.next();
                self.last_unique
            }
        };
        fill_compressible(buf, seed, &self.opts, offset);
    }
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// `buf` from `seed`: per chunk, random bytes then the fixed part (zeros
/// or the pattern) making up `compress_pct` of it.
fn fill_compressible(buf: &mut [u8], seed: u64, opts: &BufferOptions, offset: u64) {
    let chunk_bytes = if opts.compress_chunk_bytes == 0 { buf.len() } else { opts.compress_chunk_bytes as usize };
    let mut x = seed | 1;
    for chunk in buf.chunks_mut(chunk_bytes) {
        let fixed = chunk.len() * opts.compress_pct as usize / 100;
        let (random, rest) = chunk.split_at_mut(chunk.len() - fixed);
        for word in random.chunks_mut(8) {
            word.copy_from_slice(&xorshift(&mut x).to_le_bytes()[..word.len()]);
        }
        match &opts.pattern {
            Some(p) => p.fill(rest, offset, 0),
            None => rest.fill(0),
        }
    }
}

/// A write buffer's contents at setup: zeros, the pattern, or (fio's
/// default) random bytes from `seed`.
pub fn fill_initial(buf: &mut [u8], opts: &BufferOptions, seed: u64) {
    if opts.zero {
        buf.fill(0);
    } else if let Some(p) = &opts.pattern {
        p.fill(buf, 0, 0);
    } else {
        let random_only = BufferOptions { compress_pct: 0, ..BufferOptions::default() };
        fill_compressible(buf, seed, &random_only, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(set: &[(&str, &str)]) -> BufferOptions {
        crate::bench::options::group_from(set, BufferOptions::set)
    }

    /// How many bytes of `buf` a run of zeros covers, per 512-byte chunk.
    fn zero_tail(chunk: &[u8]) -> usize {
        chunk.iter().rev().take_while(|b| **b == 0).count()
    }

    #[test]
    fn compress_percentage_is_the_fixed_share_of_each_chunk() {
        let o = opts(&[("buffer_compress_percentage", "50")]);
        let mut f = BufferFiller::new(&o, 3, 3, 1000).unwrap();
        let mut buf = vec![0xffu8; 4096];
        f.fill(&mut buf, 0);
        for chunk in buf.chunks(512) {
            let zeros = zero_tail(chunk);
            assert!((256..=258).contains(&zeros), "{zeros} zero bytes in a 512-byte chunk");
        }
        // zstd-like compressors aside: the random half does not repeat.
        assert_ne!(buf[..256], buf[512..768]);
    }

    /// dedupe_percentage=50 in repeat mode: half the writes repeat the
    /// last unique buffer, byte for byte.
    #[test]
    fn dedupe_repeats_an_earlier_buffer_for_its_share_of_writes() {
        let o = opts(&[("dedupe_percentage", "50")]);
        let mut f = BufferFiller::new(&o, 5, 5, 1000).unwrap();
        let (mut prev, mut same) = (vec![0u8; 4096], 0);
        for _ in 0..10_000 {
            let mut buf = vec![0u8; 4096];
            f.fill(&mut buf, 0);
            same += usize::from(buf == prev);
            prev = buf;
        }
        assert!((4_700..=5_300).contains(&same), "{same} of 10,000 repeated the buffer before");
        assert_eq!(f.writes, 10_000);
    }

    /// working_set: dedupe writes come from the first 5% of the region's
    /// blocks' worth of unique buffers.
    #[test]
    fn working_set_dedupe_draws_from_the_first_unique_buffers() {
        let o = opts(&[("dedupe_percentage", "100"), ("dedupe_mode", "working_set")]);
        let set = |seed: u64, global: bool| {
            let o = BufferOptions { dedupe_global: global, ..o.clone() };
            let mut f = BufferFiller::new(&o, seed, 99, 200).unwrap();
            let mut seen = std::collections::BTreeSet::new();
            for _ in 0..5_000 {
                let mut buf = vec![0u8; 64];
                f.fill(&mut buf, 0);
                seen.insert(buf);
            }
            seen
        };
        assert_eq!(set(7, false).len(), 10, "5% of 200 blocks: 10 distinct buffers");
        assert_ne!(set(7, false), set(8, false), "each job its own set");
        assert_eq!(set(7, true), set(8, true), "dedupe_global: one set shared");
        assert!(BufferOptions::default().set("dedupe_mode", Some("hash")).is_err());
    }

    #[test]
    fn initial_contents_are_zeros_a_pattern_or_random() {
        let mut buf = vec![1u8; 16];
        fill_initial(&mut buf, &opts(&[("zero_buffers", "1")]), 1);
        assert_eq!(buf, vec![0; 16]);
        fill_initial(&mut buf, &opts(&[("buffer_pattern", "\"ab\"")]), 1);
        assert_eq!(&buf[..4], b"abab");
        fill_initial(&mut buf, &BufferOptions::default(), 1);
        assert!(buf.iter().any(|b| *b != 0));
    }
}
