//! Where a job's next I/O goes and how big it is: fio's offset patterns
//! (sequential or random over the job's region, the read/write mix),
//! each I/O's size (blocksize.rs), random offsets on `blockalign`
//! boundaries and in `random_distribution`'s shape (distribution.rs),
//! and `zonemode=strided`'s moving window (zones.rs). A job of one block
//! size, uniform offsets and no modifier takes the plain path; anything
//! else takes `next_modified`, so the plain job tests none of it per I/O.

use super::blocksize::BlockSizes;
use super::distribution::Distribution;
use super::options::{JobOptions, RwModifier};
use super::zones::Strided;

/// The next word of the job's generator (xorshift64*: fast and good
/// enough for offsets and sizes).
#[inline]
pub(super) fn next_rand(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// Where the next I/O goes.
pub(super) struct Pattern {
    pub(super) random: bool,
    pub(super) read_pct: u32,
    pub(super) region_start: u64,
    pub(super) region_len: u64,
    pub(super) pos: u64,
    /// (block size, blocks of that size in the region): the last random
    /// I/O's, so a fixed block size divides once per job, not per I/O.
    pub(super) blocks: (u64, u64),
    pub(super) rng: u64,
    /// `rw=MODE:N` (options.rs' `RwModifier`): bytes added to each
    /// sequential offset (0: none), and I/Os in sequence from each random
    /// offset (1: every I/O at a random offset), with those left.
    pub(super) seq_add: i64,
    pub(super) seq_nr: u64,
    pub(super) seq_left: u64,
    /// fio's random map (the default for random patterns; not with
    /// `norandommap`): every block once per pass.
    pub(super) map: Option<RandomMap>,
    /// Each I/O's size (`bs`, `bsrange`, `bssplit`).
    pub(super) sizes: BlockSizes,
    /// Random offsets' boundary per direction (`blockalign`).
    pub(super) align: [u64; 2],
    /// `random_distribution` other than `random`.
    pub(super) dist: Option<Distribution>,
    /// `zonemode=strided`: the window the job's I/O is in.
    pub(super) strided: Option<Strided>,
    /// A modifier, a map, sizes or alignments that differ, a skewed
    /// distribution or strided zones: offsets come from `next_modified`.
    pub(super) modified: bool,
}

impl Pattern {
    /// Job `job_index`'s pattern over its region (`region_start`,
    /// `region_len` bytes) of a device of `capacity_bytes` whose logical
    /// block is `logical_block_bytes`: fio's seeds (`randseed`,
    /// `randrepeat`), the `rw=MODE:N` modifier, the block sizes, the
    /// distribution, strided zones, and the random map unless
    /// `norandommap`. fio's map counts blocks of the smallest block size;
    /// a job whose I/Os differ in size or alignment, or whose offsets are
    /// skewed or strided, draws its offsets as with `norandommap` (fio
    /// turns its map off for the last three).
    pub(super) fn new(
        opts: &JobOptions,
        (capacity_bytes, logical_block_bytes): (u64, u64),
        job_index: usize,
        region_start: u64,
        region_len: u64,
    ) -> Result<Self, String> {
        let seed = if opts.randrepeat {
            opts.randseed
        } else {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            now.as_nanos() as u64
        };
        let mut rng = seed.wrapping_add((job_index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1;
        let (seq_add, seq_nr) = match opts.rw_modifier {
            RwModifier::SeqAdd(bytes) => (bytes, 1),
            RwModifier::SeqNr(n) => (0, n),
            RwModifier::None => (0, 1),
        };
        let random = opts.rw.is_random();
        let strided = Strided::new(opts, region_start, capacity_bytes);
        let zone_len = strided.as_ref().map_or(region_len, |s| s.window_len());
        let dist = distribution(opts, zone_len, &mut rng)?;
        let plain_sizes = opts.one_block_size();
        let mapped =
            random && (opts.random_lfsr || !opts.norandommap) && plain_sizes && dist.is_none() && strided.is_none();
        let bs = opts.bs_read;
        let map = (mapped && region_len / bs > 0).then(|| RandomMap::new(region_len / bs, bs, &mut rng));
        let (region_start, region_len) = strided.as_ref().map_or((region_start, region_len), |s| s.window());
        let modifier = seq_add != 0 || seq_nr > 1;
        let modified = map.is_some() || modifier || !plain_sizes || dist.is_some() || strided.is_some();
        Ok(Self {
            random,
            read_pct: opts.rw.read_pct(opts.rwmixread),
            region_start,
            region_len,
            pos: 0,
            blocks: (0, 0),
            rng,
            seq_add,
            seq_nr,
            seq_left: 0,
            map,
            sizes: BlockSizes::new(opts, logical_block_bytes),
            align: [opts.block_align(0), opts.block_align(1)],
            dist,
            strided,
            modified,
        })
    }

    #[inline]
    pub(super) fn next_rand(&mut self) -> u64 {
        next_rand(&mut self.rng)
    }

    #[inline]
    pub(super) fn next_is_write(&mut self) -> bool {
        match self.read_pct {
            100 => false,
            0 => true,
            pct => (self.next_rand() % 100) as u32 >= pct,
        }
    }

    /// The next I/O's size (`is_write`: its direction). With
    /// `bs_is_seq_rand`, an I/O is random when it starts a random run.
    #[inline]
    pub(super) fn next_len(&mut self, is_write: bool) -> u64 {
        let is_random = self.random && (self.seq_nr <= 1 || self.seq_left == 0);
        let rng = &mut self.rng;
        self.sizes.next(is_write, is_random, || next_rand(rng))
    }

    #[inline]
    pub(super) fn next_offset(&mut self, bs: u64, is_write: bool) -> u64 {
        if self.modified {
            return self.next_modified(bs, is_write);
        }
        if self.random {
            if self.blocks.0 != bs {
                self.blocks = (bs, self.region_len / bs);
            }
            let blocks = self.blocks.1;
            // Multiply-high maps the random word onto 0..blocks without a
            // 64-bit division (Lemire's reduction; bias below 2^-40 here).
            let block = ((u128::from(self.next_rand()) * u128::from(blocks)) >> 64) as u64;
            return self.region_start + block * bs;
        }
        if self.pos + bs > self.region_len {
            self.pos = 0; // wrap (time_based runs loop over the region)
        }
        let off = self.region_start + self.pos;
        self.pos += bs;
        off
    }

    /// A sequential pattern's next I/O goes on from `offset` + `len`
    /// (zonemode=zbd moved it past a zone's written data).
    pub(super) fn continue_after(&mut self, offset: u64, len: u64) {
        self.pos = offset.saturating_sub(self.region_start) + len;
    }
}

/// The job's skewed distribution, over its region (or strided zone) in
/// ranges of its smallest block size, as fio's `nranges`.
fn distribution(opts: &JobOptions, region_len: u64, rng: &mut u64) -> Result<Option<Distribution>, String> {
    let range_bytes = opts.bs_limits(0).0.min(opts.bs_limits(1).0);
    let nranges = region_len.div_ceil(range_bytes);
    let dist = Distribution::new(&opts.distribution, nranges, &mut || next_rand(rng));
    let abs_bytes = dist.as_ref().map_or(0, Distribution::zoned_abs_bytes);
    if abs_bytes > region_len {
        return Err(format!(
            "job '{}': random_distribution=zoned_abs: the zones span {abs_bytes} bytes, more than the job's \
             region of {region_len}",
            opts.name
        ));
    }
    Ok(dist)
}

impl Pattern {
    /// The next offset of a pattern with a modifier, a map, sizes or
    /// alignments that differ, a skewed distribution or strided zones, as
    /// fio's `get_next_offset` places it.
    #[cold]
    fn next_modified(&mut self, bs: u64, is_write: bool) -> u64 {
        if let Some(strided) = self.strided.as_mut() {
            if let Some((start, len)) = strided.account(bs) {
                (self.region_start, self.region_len, self.pos, self.blocks) = (start, len, 0, (0, 0));
            }
        }
        if self.random && self.seq_nr <= 1 {
            if let Some(map) = self.map.as_mut() {
                let block = map.next_block(&mut self.rng);
                return self.region_start + block * map.bs;
            }
            return self.next_random(bs, is_write);
        }
        if self.random {
            return self.next_random_run(bs, is_write);
        }
        // `pos` is where the last I/O ended, relative to the region. fio
        // adds the modifier to it from the second I/O on; a backwards
        // pattern starts from the region's end.
        let (add, len) = (self.seq_add, self.region_len as i64);
        let mut pos = self.pos as i64;
        if pos == 0 && add < 0 {
            pos = len;
        }
        if pos != 0 {
            pos += add;
        }
        if pos < 0 || pos + bs as i64 > len {
            // Wrapped: forwards to the start, backwards to the end plus
            // the (negative) modifier, as fio wraps.
            pos = if add > 0 { 0 } else { len + add };
            if pos < 0 || pos + bs as i64 > len {
                pos = 0;
            }
        }
        self.pos = (pos as u64) + bs;
        self.region_start + pos as u64
    }

    /// A random offset for an I/O of `bs` bytes: a multiple of the
    /// direction's alignment at which it fits the region, drawn
    /// uniformly or from the job's distribution.
    fn next_random(&mut self, bs: u64, is_write: bool) -> u64 {
        let align = self.align[usize::from(is_write)];
        let fit = self.region_len.saturating_sub(bs) / align + 1;
        let rng = &mut self.rng;
        let block = match &self.dist {
            None => ((u128::from(next_rand(rng)) * u128::from(fit)) >> 64) as u64,
            // Ranked draws count ranges of the smallest size: those past
            // the last fit wrap, as fio's past the file end would fail.
            Some(d) => d.next_block(is_write, fit, align, &mut || next_rand(rng)) % fit,
        };
        self.region_start + block * align
    }

    /// `randMODE:N`: a random offset, then N - 1 I/Os in sequence from it.
    fn next_random_run(&mut self, bs: u64, is_write: bool) -> u64 {
        if self.seq_left == 0 || self.pos + bs > self.region_len {
            self.pos = self.next_random(bs, is_write) - self.region_start;
            self.seq_left = self.seq_nr;
        }
        self.seq_left -= 1;
        let off = self.region_start + self.pos;
        self.pos += bs;
        off
    }
}

/// fio's random map: each block of the region once per pass, in an order
/// that differs from pass to pass. fio keeps a bitmap of the blocks done
/// (its axmap) or uses a full-period LFSR (`random_generator=lfsr`); here
/// a bijection of the k-bit integers (xors, odd multiplies and xor-shifts,
/// each invertible modulo 2^k) is walked by a counter, and values past
/// the region's blocks are skipped (cycle walking: fewer than two tries
/// per block on average, as the region has more than 2^(k-1) blocks). No
/// memory per block, no search for a free one.
pub(super) struct RandomMap {
    bits: u32,
    mask: u64,
    keys: [u64; 3],
    counter: u64,
    blocks: u64,
    pub(super) bs: u64,
}

impl RandomMap {
    /// A map over `blocks` blocks of `bs` bytes, keyed from `rng`.
    pub(super) fn new(blocks: u64, bs: u64, rng: &mut u64) -> Self {
        assert!(blocks > 0 && bs > 0, "a map of {blocks} blocks of {bs} bytes");
        let bits = (64 - (blocks - 1).leading_zeros()).max(2);
        let mask = if bits == 64 { u64::MAX } else { (1 << bits) - 1 };
        let mut map = Self { bits, mask, keys: [0; 3], counter: 0, blocks, bs };
        map.rekey(rng);
        map
    }

    fn rekey(&mut self, rng: &mut u64) {
        for k in &mut self.keys {
            *rng ^= *rng << 13;
            *rng ^= *rng >> 7;
            *rng ^= *rng << 17;
            *k = *rng;
        }
    }

    fn permute(&self, mut x: u64) -> u64 {
        let half = self.bits.div_ceil(2);
        for k in self.keys {
            x = (x ^ k) & self.mask;
            x = x.wrapping_mul(k | 1) & self.mask;
            x ^= x >> half;
        }
        x
    }

    /// The next block of the pass; a new pass (new keys) after the last.
    pub(super) fn next_block(&mut self, rng: &mut u64) -> u64 {
        loop {
            if self.counter > self.mask {
                self.counter = 0;
                self.rekey(rng);
            }
            let block = self.permute(self.counter);
            self.counter += 1;
            if block < self.blocks {
                return block;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(random: bool, seq_add: i64, seq_nr: u64) -> Pattern {
        let (region_start, region_len) = (1 << 20, 64 << 10);
        Pattern {
            random,
            read_pct: 100,
            region_start,
            region_len,
            pos: 0,
            blocks: (0, 0),
            rng: 7,
            seq_add,
            seq_nr,
            seq_left: 0,
            map: None,
            sizes: BlockSizes::new(&JobOptions::defaults("t"), 512),
            align: [4096, 4096],
            dist: None,
            strided: None,
            modified: seq_add != 0 || seq_nr > 1,
        }
    }

    #[test]
    fn the_random_map_covers_every_block_once_per_pass() {
        for blocks in [1u64, 2, 3, 5, 1000, 4096, 4097] {
            let mut rng = 99;
            let mut map = RandomMap::new(blocks, 4096, &mut rng);
            for pass in 0..2 {
                let mut seen: Vec<u64> = (0..blocks).map(|_| map.next_block(&mut rng)).collect();
                let order = seen.clone();
                seen.sort_unstable();
                assert_eq!(seen, (0..blocks).collect::<Vec<_>>(), "{blocks} blocks, pass {pass}");
                if blocks >= 1000 {
                    let in_place = order.iter().enumerate().filter(|(i, &b)| *i as u64 == b).count();
                    assert!(in_place < 10, "{blocks} blocks: {in_place} in their own place: not shuffled");
                }
            }
        }
    }

    #[test]
    fn a_negative_modifier_reads_backwards_as_fio_does() {
        // fio's examples/backwards-read.fio: bs=4k, rw=read:-8k. The
        // first read is at the end minus 8k, each next 4k lower; past the
        // start it wraps to the end minus 8k again.
        let mut p = pattern(false, -8192, 1);
        let offs: Vec<u64> = (0..17).map(|_| p.next_offset(4096, false) - (1 << 20)).collect();
        let want: Vec<u64> = (0..15).map(|i| (56 << 10) - i * 4096).chain([56 << 10, 52 << 10]).collect();
        assert_eq!(offs, want);
    }

    #[test]
    fn a_positive_modifier_leaves_holes_and_wraps_to_the_start() {
        let mut p = pattern(false, 4096, 1);
        let offs: Vec<u64> = (0..9).map(|_| p.next_offset(4096, false) - (1 << 20)).collect();
        assert_eq!(offs, [0, 8192, 16384, 24576, 32768, 40960, 49152, 57344, 0]);
    }

    #[test]
    fn a_random_run_issues_n_ios_in_sequence_from_each_random_offset() {
        let mut p = pattern(true, 0, 4);
        let offs: Vec<u64> = (0..400).map(|_| p.next_offset(4096, false) - (1 << 20)).collect();
        let mut runs = 0;
        for w in offs.windows(2) {
            if w[1] != w[0] + 4096 {
                runs += 1;
            }
        }
        assert!(offs.iter().all(|&o| o % 4096 == 0 && o + 4096 <= 64 << 10));
        // A run is cut short only at the region's end; else 4 I/Os each.
        assert!((99..=140).contains(&(runs + 1)), "{} runs in 400 I/Os", runs + 1);
        let mut plain = pattern(true, 0, 1);
        let jumps = (0..400)
            .map(|_| plain.next_offset(4096, false))
            .collect::<Vec<_>>()
            .windows(2)
            .filter(|w| w[1] != w[0] + 4096)
            .count();
        assert!(jumps > 300, "without a modifier every I/O is random: {jumps} jumps");
    }
}
