//! Where a job's random offsets fall: fio's `random_distribution`
//! (`random`, `zipf:THETA`, `pareto:H`, `normal:DEV` (alias `gauss`),
//! each with an optional `:CENTER`, `zoned:ACCESS/SIZE%:...` and
//! `zoned_abs:ACCESS/SIZE:...`), and the per-job state that draws a
//! block number from it.
//!
//! The shapes are fio's (HOWTO `random_distribution`, lib/zipf.c,
//! lib/gauss.c, io_u.c `__get_next_rand_offset_zoned*`), so that
//! `fio-genzipf` describes bench's hit distribution too:
//! - zipf draws a rank with Gray et al.'s approximation ("Quickly
//!   generating billion-record synthetic databases", SIGMOD 1994) over
//!   the region's blocks (its normalising sum over at most 10M terms, as
//!   fio caps it); pareto draws `(n - 1) * u^(ln h / ln(1 - h))`; normal
//!   averages 12 uniform draws and adds a uniform jitter of the deviation
//!   (percent of the region). Each rank is then scattered over the region
//!   by a multiplicative (Fibonacci) hash, as fio does, and shifted by a
//!   random offset (or `CENTER` x blocks), modulo the blocks.
//! - zoned: each percent of accesses maps to its zone's share of the
//!   region (percent, or bytes for zoned_abs), uniform inside it.
//!
//! A job with any of these draws offsets without fio's random map, as
//! fio turns the map off for them. All state is built at job setup.
//!
//! Relies on: the job's random words (pattern.rs `next_rand`).

use super::options::{err, OptionError};
use super::values::parse_size;
use super::values::per_direction;

/// fio's cap on the terms of zipf's normalising sum (lib/zipf.c).
const ZIPF_MAX_TERMS: u64 = 10_000_000;
/// Uniform draws averaged per normal draw (lib/gauss.c).
const GAUSS_ITERS: u64 = 12;
/// The 64-bit golden-ratio multiplier of Fibonacci hashing.
const GOLDEN_RATIO_64: u64 = 0x61c8_8646_80b5_83eb;
/// fio's defaults when `zipf` or `pareto` come bare.
const DEFAULT_ZIPF_THETA: f64 = 1.1;
const DEFAULT_PARETO_H: f64 = 0.2;

/// One zone of a zoned distribution: percent of accesses, and its size
/// (percent of the region for `zoned`, bytes for `zoned_abs`).
pub type ZoneSplit = (u32, u64);

/// fio's `random_distribution`.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum RandomDistribution {
    #[default]
    Random,
    Zipf {
        theta: f64,
        center: Option<f64>,
    },
    Pareto {
        h: f64,
        center: Option<f64>,
    },
    Normal {
        dev_pct: f64,
        center: Option<f64>,
    },
    /// Per direction (reads, writes).
    Zoned([Vec<ZoneSplit>; 2]),
    ZonedAbs([Vec<ZoneSplit>; 2]),
}

/// The distribution options' names (options.rs' `job_options` adds them).
pub const DISTRIBUTION_OPTIONS: &[&str] = &["random_distribution"];

impl RandomDistribution {
    /// Sets `random_distribution`; false for any other key.
    pub fn set(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionError> {
        if key != "random_distribution" {
            return Ok(false);
        }
        let v = value.ok_or_else(|| OptionError(format!("{key}: needs a value ({key}=...)")))?;
        *self = Self::parse(key, v.trim())?;
        Ok(true)
    }

    fn parse(key: &str, v: &str) -> Result<Self, OptionError> {
        if let Some(zones) = v.strip_prefix("zoned_abs:") {
            return Ok(Self::ZonedAbs(parse_zones(key, zones, true)?));
        }
        if let Some(zones) = v.strip_prefix("zoned:") {
            return Ok(Self::Zoned(parse_zones(key, zones, false)?));
        }
        let (name, rest) = v.split_once(':').map_or((v, None), |(n, r)| (n, Some(r)));
        let (value, center) = match rest {
            None => (None, None),
            Some(r) => {
                let (a, c) = r.split_once(':').map_or((r, None), |(a, c)| (a, Some(c)));
                (Some(parse_float(key, a)?), c.map(|c| parse_float(key, c)).transpose()?)
            }
        };
        if center.is_some_and(|c| !(0.0..=1.0).contains(&c)) {
            return err(format!("{key}: center out of range in '{v}' (accepted: 0 <= center <= 1)"));
        }
        match name {
            "random" => Ok(Self::Random),
            "zipf" => match value.unwrap_or(DEFAULT_ZIPF_THETA) {
                t if t == 1.0 || t <= 0.0 => err(format!("{key}: zipf theta must be positive and not 1, got {t}")),
                theta => Ok(Self::Zipf { theta, center }),
            },
            "pareto" => match value.unwrap_or(DEFAULT_PARETO_H) {
                h if h <= 0.0 || h >= 1.0 => err(format!("{key}: pareto input must be in (0, 1), got {h}")),
                h => Ok(Self::Pareto { h, center }),
            },
            "normal" | "gauss" => match value.unwrap_or(0.0) {
                d if !(0.0..100.0).contains(&d) => err(format!("{key}: normal deviation must be in [0, 100), got {d}")),
                dev_pct => Ok(Self::Normal { dev_pct, center }),
            },
            "zoned" | "zoned_abs" => err(format!("{key}: {name} needs its zones ({name}:ACCESS/SIZE:...)")),
            _ => err(format!(
                "{key}: bad value '{v}' (accepted: random, zipf[:THETA[:CENTER]], pareto[:H[:CENTER]], \
                 normal[:DEV[:CENTER]], zoned:A/S:..., zoned_abs:A/SIZE:...)"
            )),
        }
    }
}

fn parse_float(key: &str, v: &str) -> Result<f64, OptionError> {
    v.trim().parse::<f64>().map_err(|_| OptionError(format!("{key}: bad number '{v}'")))
}

/// `zoned:`'s zones, per direction as `bs` takes them.
fn parse_zones(key: &str, v: &str, absolute: bool) -> Result<[Vec<ZoneSplit>; 2], OptionError> {
    let sides = per_direction(key, v)?;
    let read = parse_zone_side(key, sides[0].unwrap_or(""), absolute)?;
    let write = match sides[1] {
        Some(side) => parse_zone_side(key, side, absolute)?,
        None => read.clone(),
    };
    Ok([read, write])
}

/// One direction's `ACCESS/SIZE:...`: accesses must add up to 100 (fio's
/// `zone_split_ddir`); for `zoned`, sizes at most 100, a missing one
/// sharing what the others leave.
fn parse_zone_side(key: &str, v: &str, absolute: bool) -> Result<Vec<ZoneSplit>, OptionError> {
    let mut zones: Vec<(u32, Option<u64>)> = Vec::new();
    for part in v.split(':').filter(|p| !p.is_empty()) {
        let (access, size) = part.split_once('/').unwrap_or((part, ""));
        let access = access
            .trim()
            .parse::<u32>()
            .map_err(|_| OptionError(format!("{key}: bad access percentage in '{part}'")))?;
        let size = match (size.trim(), absolute) {
            ("", false) | ("0", false) => None,
            ("", true) => return err(format!("{key}: zoned_abs zone '{part}' needs its size")),
            (s, true) => Some(parse_size(key, s)?),
            (s, false) => Some(
                s.parse::<u64>().map_err(|_| OptionError(format!("{key}: bad size percentage in '{part}'")))?.min(100),
            ),
        };
        zones.push((access, size));
    }
    if zones.len() > 256 {
        return err(format!("{key}: {} zones, fio takes at most 256", zones.len()));
    }
    let access: u32 = zones.iter().map(|z| z.0).sum();
    if access != 100 {
        return err(format!("{key}: access percentages add up to {access}, not 100, in '{v}'"));
    }
    if absolute {
        return Ok(zones.into_iter().map(|(a, s)| (a, s.unwrap_or(0))).collect());
    }
    let sized: u64 = zones.iter().filter_map(|z| z.1).sum();
    if sized > 100 {
        return err(format!("{key}: size percentages add up to {sized}, more than 100, in '{v}'"));
    }
    let missing = zones.iter().filter(|z| z.1.is_none()).count() as u64;
    let share = (100 - sized).checked_div(missing).unwrap_or(0);
    Ok(zones.into_iter().map(|(a, s)| (a, s.unwrap_or(share))).collect())
}

/// A uniform draw in `0..n` from the random word `r` (multiply-high).
#[inline]
fn below(r: u64, n: u64) -> u64 {
    ((u128::from(r) * u128::from(n)) >> 64) as u64
}

/// A uniform draw in [0, 1) from the random word `r`.
#[inline]
fn unit(r: u64) -> f64 {
    (r >> 11) as f64 / (1u64 << 53) as f64
}

/// A job's distribution state (not `random`), built at setup.
#[derive(Debug, Clone)]
pub(super) enum Distribution {
    /// Ranked draws over `n` ranges (fio's `nranges`), scattered by hash
    /// and shifted by `shift`.
    Zipf {
        n: u64,
        shift: u64,
        theta: f64,
        zetan: f64,
        alpha: f64,
        eta: f64,
    },
    Pareto {
        n: u64,
        shift: u64,
        power: f64,
    },
    Normal {
        n: u64,
        shift: u64,
        stddev: u64,
    },
    /// For each percent of accesses, per direction: the zone's
    /// (start, end), in percent of the region's blocks.
    Zoned([Box<[(u64, u64); 100]>; 2]),
    /// The same in bytes from the region's start.
    ZonedAbs([Box<[(u64, u64); 100]>; 2]),
}

impl Distribution {
    /// The state of `dist` over `nranges` ranges of the region (fio: the
    /// region over the smallest block size, rounded up), its random shift
    /// drawn from `rand`; None for `random`.
    pub(super) fn new(dist: &RandomDistribution, nranges: u64, rand: &mut impl FnMut() -> u64) -> Option<Self> {
        let n = nranges.max(1);
        let shift_for = |center: Option<f64>, r: u64| match center {
            Some(c) => (n as f64 * c) as u64,
            None => r,
        };
        Some(match dist {
            RandomDistribution::Random => return None,
            RandomDistribution::Zipf { theta, center } => {
                let zetan: f64 = (1..=n.min(ZIPF_MAX_TERMS)).map(|i| (i as f64).powf(-theta)).sum();
                let zeta2 = 1.0 + 0.5f64.powf(*theta);
                let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
                let shift = shift_for(*center, rand());
                Self::Zipf { n, shift, theta: *theta, zetan, alpha: 1.0 / (1.0 - theta), eta }
            }
            RandomDistribution::Pareto { h, center } => {
                Self::Pareto { n, shift: shift_for(*center, rand()), power: h.ln() / (1.0 - h).ln() }
            }
            RandomDistribution::Normal { dev_pct, center } => {
                let stddev = ((n as f64 * dev_pct) / 100.0).ceil() as u64;
                // fio centres normal on the region's middle by default.
                let shift = center.map_or(0, |c| (n as f64 * (c - 0.5)).rem_euclid(n as f64) as u64);
                Self::Normal { n, shift, stddev: stddev.min(n / 2) }
            }
            RandomDistribution::Zoned(sides) => Self::Zoned(sides.clone().map(|s| zone_index(&s))),
            RandomDistribution::ZonedAbs(sides) => Self::ZonedAbs(sides.clone().map(|s| zone_index(&s))),
        })
    }

    /// The next block (in units of the direction's alignment) of a region
    /// of `blocks` such units, drawn from the random words `rand` gives.
    /// Ranked draws come in ranges of the smallest block size; the
    /// caller fits the block to the region.
    #[inline]
    pub(super) fn next_block(&self, is_write: bool, blocks: u64, align: u64, rand: &mut impl FnMut() -> u64) -> u64 {
        match self {
            Self::Zipf { n, shift, theta, zetan, alpha, eta } => {
                let u = unit(rand());
                let z = u * zetan;
                let rank = if z < 1.0 {
                    0
                } else if z < 1.0 + 0.5f64.powf(*theta) {
                    1
                } else {
                    (*n as f64 * (eta * u - eta + 1.0).powf(*alpha)) as u64
                };
                scatter(rank, *shift, *n)
            }
            Self::Pareto { n, shift, power } => {
                scatter(((n - 1) as f64 * unit(rand()).powf(*power)) as u64, *shift, *n)
            }
            Self::Normal { n, shift, stddev } => {
                let sum: u64 = (0..GAUSS_ITERS).map(|_| below(rand(), n + 1)).sum();
                let mut mean = sum.div_ceil(GAUSS_ITERS);
                if *stddev > 0 {
                    let mut dev = below(rand(), *stddev) as i64 - (*stddev / 2) as i64;
                    while dev + mean as i64 >= *n as i64 {
                        dev /= 2;
                    }
                    mean = mean.saturating_add_signed(dev);
                }
                scatter(mean, *shift, *n)
            }
            Self::Zoned(sides) => {
                let (start_pct, end_pct) = sides[usize::from(is_write)][below(rand(), 100) as usize];
                let first = start_pct * blocks / 100;
                first + below(rand(), blocks * (end_pct - start_pct) / 100)
            }
            Self::ZonedAbs(sides) => {
                let (start, end) = sides[usize::from(is_write)][below(rand(), 100) as usize];
                let (first, last) = (start / align, (end / align).min(blocks));
                first + below(rand(), last.saturating_sub(first))
            }
        }
    }

    /// `zoned_abs`: the bytes its zones span (they must fit the region).
    pub(super) fn zoned_abs_bytes(&self) -> u64 {
        match self {
            Self::ZonedAbs(sides) => sides.iter().map(|s| s[99].1).max().unwrap_or(0),
            _ => 0,
        }
    }
}

/// fio's hash of a rank onto the region, then the shift.
#[inline]
fn scatter(rank: u64, shift: u64, n: u64) -> u64 {
    rank.wrapping_mul(GOLDEN_RATIO_64).wrapping_add(shift) % n
}

/// For each percent of accesses, its zone's (start, end): cumulative
/// sizes (percent, or bytes), as fio's `td_zone_gen_index`. Percents no
/// zone takes (none: accesses add up to 100) fall to the last zone.
fn zone_index(zones: &[ZoneSplit]) -> Box<[(u64, u64); 100]> {
    let mut table = Box::new([(0u64, 0u64); 100]);
    let (mut access, mut size) = (0usize, 0u64);
    for &(pct, len) in zones {
        for t in table.iter_mut().skip(access).take(pct as usize) {
            *t = (size, size + len);
        }
        access += pct as usize;
        size += len;
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rng() -> impl FnMut() -> u64 {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        move || crate::bench::pattern::next_rand(&mut state)
    }

    #[test]
    fn parses_fios_forms_and_names_bad_input() {
        let p = |v: &str| RandomDistribution::parse("random_distribution", v);
        assert_eq!(p("zipf:1.2:0.25").unwrap(), RandomDistribution::Zipf { theta: 1.2, center: Some(0.25) });
        assert_eq!(p("pareto").unwrap(), RandomDistribution::Pareto { h: 0.2, center: None });
        assert_eq!(p("gauss:5").unwrap(), RandomDistribution::Normal { dev_pct: 5.0, center: None });
        let RandomDistribution::Zoned(z) = p("zoned:50/5:30/15:20/").unwrap() else { panic!() };
        assert_eq!(z[0], vec![(50, 5), (30, 15), (20, 80)]);
        assert_eq!(z[1], z[0], "one set serves both directions");
        let RandomDistribution::ZonedAbs(z) = p("zoned_abs:60/20m:40/100m,100/1g").unwrap() else { panic!() };
        assert_eq!((z[0].clone(), z[1].clone()), (vec![(60, 20 << 20), (40, 100 << 20)], vec![(100, 1 << 30)]));
        for (bad, says) in [
            ("zipf:1", "not 1"),
            ("pareto:1.5", "(0, 1)"),
            ("zoned:50/10:40/10", "not 100"),
            ("zoned:50/60:50/60", "more than 100"),
            ("zipf:1.2:2", "center"),
            ("uniform", "accepted"),
        ] {
            assert!(p(bad).unwrap_err().0.contains(says), "{bad}: {:?}", p(bad));
        }
    }

    #[test]
    fn zoned_accesses_fall_in_their_zones_in_their_shares() {
        let dist = RandomDistribution::parse("k", "zoned:60/10:30/20:10/70").unwrap();
        let d = Distribution::new(&dist, 1000, &mut rng()).unwrap();
        let mut r = rng();
        let mut per_zone = [0u64; 3];
        for _ in 0..100_000 {
            let b = d.next_block(false, 1000, 4096, &mut r);
            assert!(b < 1000);
            per_zone[usize::from(b >= 100) + usize::from(b >= 300)] += 1;
        }
        // Each within 1% of 100,000 draws (over 6 standard deviations).
        for (got, want) in per_zone.iter().zip([60_000u64, 30_000, 10_000]) {
            assert!(got.abs_diff(want) < 1000, "{per_zone:?}");
        }
    }

    #[test]
    fn zipf_concentrates_hits_and_pareto_more_so() {
        let hot_share = |dist: &str| {
            let dist = RandomDistribution::parse("k", dist).unwrap();
            let d = Distribution::new(&dist, 10_000, &mut rng()).unwrap();
            let mut hits = vec![0u64; 10_000];
            let mut r = rng();
            for _ in 0..100_000 {
                hits[d.next_block(false, 10_000, 4096, &mut r) as usize] += 1;
            }
            hits.sort_unstable_by(|a, b| b.cmp(a));
            hits[..500].iter().sum::<u64>() as f64 / 100_000.0
        };
        let (uniform_ish, zipf, pareto) = (hot_share("normal:0"), hot_share("zipf:1.2"), hot_share("pareto:0.1"));
        assert!(zipf > 0.5 && pareto > zipf, "top 5%: normal {uniform_ish}, zipf {zipf}, pareto {pareto}");
    }
}
