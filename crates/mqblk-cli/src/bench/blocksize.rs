//! How big a job's next I/O is: fio's block size options beside `bs`
//! (`bsrange`, `bssplit`, `blockalign`, `bs_unaligned`, `bs_is_seq_rand`)
//! and the per-job table the job loop draws each I/O's size from.
//!
//! The rules are fio's (HOWTO "Block size", io_u.c `get_next_buflen`,
//! options.c `bssplit_ddir`): a `bsrange` size is the minimum plus a
//! uniform fraction of the maximum, rounded down to a multiple of the
//! minimum and capped at the maximum (so `1k-4k` gives 1k, 2k, 3k and 4k
//! a quarter each); a `bssplit` size is drawn by its percentage, rounded
//! down to a multiple of the smallest size as fio does; `blockalign`
//! sets the boundary random offsets are drawn on (default: the smallest
//! size). Sizes are precomputed at job setup: a `bssplit` is a table of
//! 100 sizes, one per percent, so each draw is one random word and one
//! load; a job of one size draws nothing.
//!
//! Relies on: the job's random word (pattern.rs), values.rs for sizes.

use super::options::{err, JobOptions, OptionError};
use super::values::{parse_flag, parse_size, per_direction};

/// fio's limit of sizes in one direction's `bssplit`.
const BSSPLIT_MAX: usize = 64;

/// The block size options besides `bs`, per direction (reads, writes).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BlockSizeOptions {
    /// `bsrange=MIN-MAX[,MIN-MAX]`: (min, max) bytes; None: `bs`.
    pub range: [Option<(u64, u64)>; 2],
    /// `bssplit=SIZE/PCT:...[,...]`: (size, percent) with fio's fill-in of
    /// missing percentages; empty: none.
    pub split: [Vec<(u64, u32)>; 2],
    /// `blockalign` (`ba`): random offsets are multiples of this (0: the
    /// direction's smallest size).
    pub align: [u64; 2],
    /// `bs_unaligned`: `bsrange` sizes not rounded to the minimum.
    pub unaligned: bool,
    /// `bs_is_seq_rand`: the read sizes serve sequential I/O, the write
    /// sizes random I/O, whatever the direction.
    pub seq_rand: bool,
}

/// The block size options' names (options.rs' `job_options` adds them).
pub const BLOCKSIZE_OPTIONS: &[&str] = &[
    "bsrange",
    "blocksize_range",
    "bssplit",
    "blockalign",
    "ba",
    "bs_unaligned",
    "blocksize_unaligned",
    "bs_is_seq_rand",
];

/// `MIN-MAX` (or `MIN:MAX`, or one size).
fn parse_range(key: &str, v: &str) -> Result<(u64, u64), OptionError> {
    let (lo, hi) = v.split_once(['-', ':']).unwrap_or((v, v));
    let (lo, hi) = (parse_size(key, lo)?, parse_size(key, hi)?);
    if lo == 0 || lo > hi {
        return err(format!("{key}: bad range '{v}' (accepted: MIN-MAX with 0 < MIN <= MAX)"));
    }
    Ok((lo.min(hi), hi))
}

/// One direction's `SIZE/PCT:SIZE/PCT...`, missing percentages sharing
/// what the given ones leave (fio's `bssplit_ddir`; a percentage of 0
/// counts as missing, as in fio).
fn parse_split(key: &str, v: &str) -> Result<Vec<(u64, u32)>, OptionError> {
    let mut entries: Vec<(u64, Option<u32>)> = Vec::new();
    for part in v.split(':').filter(|p| !p.is_empty()) {
        let (size, pct) = part.split_once('/').map_or((part, None), |(s, p)| (s, Some(p)));
        let size = parse_size(key, size)?;
        if size == 0 {
            return err(format!("{key}: block size 0 in '{part}'"));
        }
        let pct = match pct.map(str::trim) {
            None | Some("") | Some("0") => None,
            Some(p) => Some(p.parse::<u32>().map_err(|_| OptionError(format!("{key}: bad percentage in '{part}'")))?),
        };
        entries.push((size, pct.map(|p| p.min(100))));
    }
    if entries.len() > BSSPLIT_MAX {
        return err(format!("{key}: {} sizes, fio takes at most {BSSPLIT_MAX}", entries.len()));
    }
    let given: u32 = entries.iter().filter_map(|e| e.1).sum();
    let missing = entries.iter().filter(|e| e.1.is_none()).count() as u32;
    if given > 100 {
        return err(format!("{key}: percentages add up to {given}, more than 100 in '{v}'"));
    }
    if missing == 0 && given != 100 && !entries.is_empty() {
        return err(format!("{key}: percentages add up to {given}, not 100, in '{v}'"));
    }
    let share = (100 - given).checked_div(missing).unwrap_or(0);
    Ok(entries.into_iter().map(|(size, pct)| (size, pct.unwrap_or(share))).collect())
}

impl BlockSizeOptions {
    /// Sets one option; false if `key` is none of these.
    pub fn set(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionError> {
        let v = || value.ok_or_else(|| OptionError(format!("{key}: needs a value ({key}=...)")));
        match key {
            "bsrange" | "blocksize_range" => {
                for (dir, side) in per_direction(key, v()?)?.into_iter().take(2).enumerate() {
                    if let Some(side) = side {
                        self.range[dir] = Some(parse_range(key, side)?);
                        self.split[dir].clear();
                    }
                }
            }
            "bssplit" => {
                for (dir, side) in per_direction(key, v()?)?.into_iter().take(2).enumerate() {
                    if let Some(side) = side {
                        self.split[dir] = parse_split(key, side)?;
                        self.range[dir] = None;
                    }
                }
            }
            "blockalign" | "ba" => {
                for (dir, side) in per_direction(key, v()?)?.into_iter().take(2).enumerate() {
                    if let Some(side) = side {
                        self.align[dir] = parse_size(key, side)?;
                    }
                }
            }
            "bs_unaligned" | "blocksize_unaligned" => self.unaligned = parse_flag(key, value)?,
            "bs_is_seq_rand" => self.seq_rand = parse_flag(key, value)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `bs=` was given after: it sets every direction's one size, as in
    /// fio (the ranges and splits it replaces are forgotten).
    pub fn fixed_by_bs(&mut self) {
        self.range = [None, None];
        self.split = [Vec::new(), Vec::new()];
    }
}

impl JobOptions {
    /// The smallest and largest size of direction `dir` (0 reads, 1
    /// writes), as fio's `min_bs` and `max_bs`.
    pub fn bs_limits(&self, dir: usize) -> (u64, u64) {
        let sizes = &self.block_sizes;
        if let Some(range) = sizes.range[dir] {
            return range;
        }
        if !sizes.split[dir].is_empty() {
            let split = sizes.split[dir].iter().map(|e| e.0);
            return (split.clone().min().unwrap_or(1), split.max().unwrap_or(1));
        }
        let bs = [self.bs_read, self.bs_write][dir];
        (bs, bs)
    }

    /// The largest I/O of either direction: what every buffer must hold.
    pub fn max_bs(&self) -> u64 {
        self.bs_limits(0).1.max(self.bs_limits(1).1)
    }

    /// The largest I/O of direction `dir` (with `bs_is_seq_rand`, an I/O
    /// of either direction may take either side's sizes).
    pub fn max_bs_of(&self, dir: usize) -> u64 {
        if self.block_sizes.seq_rand {
            self.max_bs()
        } else {
            self.bs_limits(dir).1
        }
    }

    /// Random offsets' boundary in direction `dir`: `blockalign`, else
    /// the smallest size.
    pub fn block_align(&self, dir: usize) -> u64 {
        match self.block_sizes.align[dir] {
            0 => self.bs_limits(dir).0,
            a => a,
        }
    }

    /// Whether every I/O of the job has one size and random offsets are
    /// multiples of it: the job loop's plain case.
    pub fn one_block_size(&self) -> bool {
        let (r, w) = (self.bs_limits(0), self.bs_limits(1));
        r.0 == r.1 && w.0 == w.1 && r == w && self.block_align(0) == r.0 && self.block_align(1) == w.0
    }

    /// Checks the sizes against each other and the job's other options:
    /// verify checks blocks of one size at multiples of it (verify.rs),
    /// so a job that verifies writes one size, aligned to it.
    pub(super) fn validate_block_sizes(&self) -> Result<(), OptionError> {
        let (wmin, wmax) = self.bs_limits(1);
        let varies = wmin != wmax || self.block_align(1) != wmin || self.block_sizes.seq_rand;
        if self.verify.enabled() && self.rw.read_pct(self.rwmixread) < 100 && varies {
            return err(format!(
                "job '{}': verify with bsrange, bssplit, blockalign or bs_is_seq_rand on writes is not supported: \
                 verify checks blocks of one size at multiples of it",
                self.name
            ));
        }
        if u32::try_from(self.max_bs()).is_err() {
            return err(format!("job '{}': block size {} is more than 4 GiB", self.name, self.max_bs()));
        }
        Ok(())
    }
}

/// One direction's sizes, ready to draw from.
#[derive(Debug, Clone)]
struct DirSizes {
    min: u64,
    max: u64,
    /// `bsrange` sizes are multiples of this: the minimum, or with
    /// `bs_unaligned` the device's logical block size (the finest a
    /// block device takes).
    round: u64,
    /// `bssplit`: the size for each percent of draws.
    split: Option<Box<[u64; 100]>>,
}

impl DirSizes {
    fn new(opts: &JobOptions, dir: usize, logical_block_bytes: u64) -> Self {
        let (min, max) = opts.bs_limits(dir);
        let round = if opts.block_sizes.unaligned { logical_block_bytes.min(min).max(1) } else { min };
        let split = (!opts.block_sizes.split[dir].is_empty())
            .then(|| Box::new(split_table(&opts.block_sizes.split[dir], min, opts.block_sizes.unaligned)));
        Self { min, max, round, split }
    }

    /// A size drawn with the random word `r`.
    #[inline]
    fn draw(&self, r: u64) -> u64 {
        if let Some(table) = &self.split {
            return table[((u128::from(r) * 100) >> 64) as usize];
        }
        // fio: min + max x uniform[0, 1), rounded down, capped at max.
        let len = self.min + ((u128::from(r) * u128::from(self.max)) >> 64) as u64;
        (len - len % self.round).min(self.max)
    }
}

/// The 100-entry table of a split: sizes by ascending percentage (fio
/// sorts them so), each taking its percent of the slots; what rounding
/// of missing percentages leaves goes to the last, as in fio's lookup.
/// Sizes are rounded down to a multiple of the smallest, as fio does.
fn split_table(split: &[(u64, u32)], min: u64, unaligned: bool) -> [u64; 100] {
    let mut sorted = split.to_vec();
    sorted.sort_by_key(|e| e.1);
    let mut table = [0u64; 100];
    let mut slot = 0;
    for &(size, pct) in &sorted {
        let size = if unaligned { size } else { size - size % min };
        for t in table.iter_mut().skip(slot).take(pct as usize) {
            *t = size;
        }
        slot += pct as usize;
    }
    let last = sorted.last().map_or(min, |e| if unaligned { e.0 } else { e.0 - e.0 % min });
    for t in table.iter_mut().skip(slot) {
        *t = last;
    }
    table
}

/// A job's block sizes: each I/O's drawn per direction (or, with
/// `bs_is_seq_rand`, per sequential or random), allocated at setup.
#[derive(Debug, Clone)]
pub(super) struct BlockSizes {
    dirs: [DirSizes; 2],
    seq_rand: bool,
}

impl BlockSizes {
    pub(super) fn new(opts: &JobOptions, logical_block_bytes: u64) -> Self {
        let dirs = [DirSizes::new(opts, 0, logical_block_bytes), DirSizes::new(opts, 1, logical_block_bytes)];
        Self { dirs, seq_rand: opts.block_sizes.seq_rand }
    }

    /// The next I/O's size: `is_write` picks the direction's sizes (with
    /// `bs_is_seq_rand`, `is_random` does); `rand` gives a random word
    /// only when the sizes vary.
    #[inline]
    pub(super) fn next(&self, is_write: bool, is_random: bool, rand: impl FnOnce() -> u64) -> u64 {
        let dir = &self.dirs[usize::from(if self.seq_rand { is_random } else { is_write })];
        if dir.min == dir.max {
            return dir.min;
        }
        dir.draw(rand())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> JobOptions {
        let mut o = JobOptions::defaults("t");
        for (k, v) in pairs {
            o.set(k, Some(v)).unwrap();
        }
        o
    }

    fn counts(sizes: &BlockSizes, is_write: bool, n: u64) -> std::collections::BTreeMap<u64, u64> {
        let mut rng = 0x1234_5678u64;
        let mut out = std::collections::BTreeMap::new();
        for _ in 0..n {
            let bs = sizes.next(is_write, true, || crate::bench::pattern::next_rand(&mut rng));
            *out.entry(bs).or_insert(0) += 1;
        }
        out
    }

    #[test]
    fn a_split_fills_missing_percentages_and_draws_by_them() {
        let o = opts(&[("bssplit", "4k/50:1k/:32k/")]);
        assert_eq!(o.block_sizes.split[0], vec![(4096, 50), (1024, 25), (32768, 25)]);
        let c = counts(&BlockSizes::new(&o, 512), false, 100_000);
        // Each share within 1% of 100,000 draws (3 standard deviations: 0.5%).
        for (bs, pct) in [(1024u64, 25u64), (4096, 50), (32768, 25)] {
            assert!(c[&bs].abs_diff(pct * 1000) < 1000, "{bs}: {} of 100000 ({c:?})", c[&bs]);
        }
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn split_sums_are_checked() {
        let mut o = JobOptions::defaults("t");
        let e = o.set("bssplit", Some("4k/60:8k/50")).unwrap_err().0;
        assert!(e.contains("more than 100"), "{e}");
        let e = o.set("bssplit", Some("4k/60:8k/30")).unwrap_err().0;
        assert!(e.contains("not 100"), "{e}");
    }

    #[test]
    fn a_range_gives_fios_shares_in_multiples_of_the_minimum() {
        let o = opts(&[("bsrange", "1k-4k")]);
        let c = counts(&BlockSizes::new(&o, 512), false, 100_000);
        assert_eq!(c.keys().copied().collect::<Vec<_>>(), [1024, 2048, 3072, 4096]);
        for n in c.values() {
            assert!(n.abs_diff(25_000) < 1000, "{c:?}");
        }
    }

    #[test]
    fn unaligned_ranges_round_to_the_logical_block_only() {
        let o = opts(&[("bsrange", "1k-4k"), ("bs_unaligned", "1")]);
        let c = counts(&BlockSizes::new(&o, 512), false, 10_000);
        assert!(c.keys().any(|bs| bs % 1024 != 0), "{c:?}");
        assert!(c.keys().all(|bs| bs % 512 == 0 && (1024..=4096).contains(bs)), "{c:?}");
    }

    #[test]
    fn directions_and_seq_rand_pick_their_side() {
        let o = opts(&[("bsrange", "4k-4k,8k-16k")]);
        let sizes = BlockSizes::new(&o, 512);
        assert_eq!(counts(&sizes, false, 100).keys().copied().collect::<Vec<_>>(), [4096]);
        assert!(counts(&sizes, true, 1000).keys().all(|bs| [8192, 16384].contains(bs)));
        let o = opts(&[("bs", "4k,64k"), ("bs_is_seq_rand", "1")]);
        let sizes = BlockSizes::new(&o, 512);
        assert_eq!(sizes.next(false, true, || 0), 65536, "random: the write side");
        assert_eq!(sizes.next(true, false, || 0), 4096, "sequential: the read side");
    }

    #[test]
    fn bs_after_a_range_is_one_size_again_and_verify_refuses_a_mix() {
        let mut o = opts(&[("bsrange", "4k-16k"), ("bs", "8k")]);
        assert!(o.one_block_size());
        o.set("bssplit", Some("4k/50:8k/50")).unwrap();
        o.set("verify", Some("crc32c")).unwrap();
        o.rw = super::super::options::RwMode::Write;
        assert!(o.validate_block_sizes().unwrap_err().0.contains("verify"));
    }
}
