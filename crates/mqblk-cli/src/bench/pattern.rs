//! Where a job's next I/O goes: fio's offset patterns (sequential or
//! random over the job's region, the read/write mix) and, for
//! `zonemode=zbd`, the write pointers of the job's zones.

use mqblk::Device;

use super::options::{JobOptions, RwModifier};

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
    /// A modifier or a map: offsets come from `next_modified`.
    pub(super) modified: bool,
}

impl Pattern {
    /// Job `job_index`'s pattern over its region (`region_start`,
    /// `region_len` bytes): fio's seeds (`randseed`, `randrepeat`), the
    /// `rw=MODE:N` modifier, and the random map unless `norandommap`.
    /// fio's map counts blocks of the smallest block size; a job whose
    /// reads and writes differ in size draws its offsets as with
    /// `norandommap`.
    pub(super) fn new(opts: &JobOptions, job_index: usize, region_start: u64, region_len: u64) -> Self {
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
        let mapped = random && (opts.random_lfsr || !opts.norandommap) && opts.bs_read == opts.bs_write;
        let blocks = region_len / opts.bs_read;
        let map = (mapped && blocks > 0).then(|| RandomMap::new(blocks, opts.bs_read, &mut rng));
        Self {
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
            modified: map.is_some() || seq_add != 0 || seq_nr > 1,
            map,
        }
    }

    #[inline]
    fn next_rand(&mut self) -> u64 {
        // xorshift64*: fast and good enough for offsets.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    #[inline]
    pub(super) fn next_is_write(&mut self) -> bool {
        match self.read_pct {
            100 => false,
            0 => true,
            pct => (self.next_rand() % 100) as u32 >= pct,
        }
    }

    #[inline]
    pub(super) fn next_offset(&mut self, bs: u64) -> u64 {
        if self.modified {
            return self.next_modified(bs);
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
}

impl Pattern {
    /// The next offset of a pattern with an `rw=MODE:N` modifier, as
    /// fio's `get_next_seq_offset` and `ddir_seq_nr` place it.
    #[cold]
    fn next_modified(&mut self, bs: u64) -> u64 {
        if self.random && self.seq_nr <= 1 {
            if let Some(map) = self.map.as_mut() {
                let block = map.next_block(&mut self.rng);
                return self.region_start + block * map.bs;
            }
        }
        if self.random {
            return self.next_random_run(bs);
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

    /// `randMODE:N`: a random offset, then N - 1 I/Os in sequence from it.
    fn next_random_run(&mut self, bs: u64) -> u64 {
        if self.seq_left == 0 || self.pos + bs > self.region_len {
            let blocks = (self.region_len / bs).max(1);
            self.pos = ((u128::from(self.next_rand()) * u128::from(blocks)) >> 64) as u64 * bs;
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

/// fio's `zonemode=zbd` for writes: each goes to a zone's write pointer.
/// The job owns the sequential zones inside its region (give jobs their
/// own zones with `offset_increment`), so it tracks their write pointers
/// itself; a zone too full for the next write is reset first.
pub(super) struct ZoneWriter {
    /// (zone start, capacity, write pointer), bytes.
    zones: Vec<(u64, u64, u64)>,
    cur: usize,
}

impl ZoneWriter {
    pub(super) fn new(dev: &Device, region_start: u64, region_len: u64) -> Result<Self, String> {
        let zones = dev.zones().ok_or("zonemode=zbd: the device is not zoned")?;
        let all = zones.report(0, usize::MAX).map_err(|s| format!("zonemode=zbd: zone report failed: {s}"))?;
        let zones: Vec<(u64, u64, u64)> = all
            .iter()
            .filter(|z| z.ztype == mqblk::zoned::ZoneType::SeqWriteRequired)
            .map(|z| (z.start << 9, z.capacity << 9, (z.wp - z.start) << 9))
            .filter(|&(start, cap, _)| start >= region_start && start + cap <= region_start + region_len)
            .collect();
        if zones.is_empty() {
            return Err("zonemode=zbd: no sequential zone lies inside the job's region".into());
        }
        Ok(Self { zones, cur: 0 })
    }

    /// The next write's offset, and the zone to reset before it, if any.
    #[inline]
    pub(super) fn next(&mut self, pattern: &mut Pattern, bs: u64) -> (u64, Option<u64>) {
        let n = self.zones.len();
        let fits = |z: &(u64, u64, u64)| z.2 + bs <= z.1;
        let z = if pattern.random {
            (pattern.next_rand() % n as u64) as usize
        } else {
            if !fits(&self.zones[self.cur]) {
                self.cur = (self.cur + 1) % n; // sequential: on to the next zone
            }
            self.cur
        };
        let mut reset = None;
        if !fits(&self.zones[z]) {
            reset = Some(self.zones[z].0);
            self.zones[z].2 = 0;
        }
        let (start, _, wp) = &mut self.zones[z];
        let off = *start + *wp;
        *wp += bs;
        (off, reset)
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
        let offs: Vec<u64> = (0..17).map(|_| p.next_offset(4096) - (1 << 20)).collect();
        let want: Vec<u64> = (0..15).map(|i| (56 << 10) - i * 4096).chain([56 << 10, 52 << 10]).collect();
        assert_eq!(offs, want);
    }

    #[test]
    fn a_positive_modifier_leaves_holes_and_wraps_to_the_start() {
        let mut p = pattern(false, 4096, 1);
        let offs: Vec<u64> = (0..9).map(|_| p.next_offset(4096) - (1 << 20)).collect();
        assert_eq!(offs, [0, 8192, 16384, 24576, 32768, 40960, 49152, 57344, 0]);
    }

    #[test]
    fn a_random_run_issues_n_ios_in_sequence_from_each_random_offset() {
        let mut p = pattern(true, 0, 4);
        let offs: Vec<u64> = (0..400).map(|_| p.next_offset(4096) - (1 << 20)).collect();
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
            .map(|_| plain.next_offset(4096))
            .collect::<Vec<_>>()
            .windows(2)
            .filter(|w| w[1] != w[0] + 4096)
            .count();
        assert!(jumps > 300, "without a modifier every I/O is random: {jumps} jumps");
    }
}
