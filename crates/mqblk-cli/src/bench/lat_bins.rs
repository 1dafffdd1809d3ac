//! fio's latency buckets, derived from bench's histograms: the "bins" of
//! `--output-format=json+` (fio's `io_u_plat` array: stat.h
//! `FIO_IO_U_PLAT_*`) and the latency distribution of the terse and normal
//! reports (fio's `io_u_lat_n/u/m`).
//!
//! fio's scheme: a value whose most significant bit is bit 6 or below is
//! its own bucket (0..=127); above, each power of two is split into 64
//! equal buckets, and a bucket is reported as the middle of its range.
//! Bench records latencies in an HdrHistogram of 3 significant digits
//! (stats.rs), whose buckets are exact below 2048 and, in each power of
//! two [2^m, 2^(m+1)) above, 2^(m-10) wide, aligned to their width; fio's
//! are 2^(m-6) wide, aligned likewise. So every HdrHistogram bucket lies
//! inside one fio bucket, and the bins derived here count each I/O in the
//! bucket fio would have put it in: exact, with nothing recorded per I/O
//! beyond the histogram already kept.

use hdrhistogram::Histogram;

/// Bits of a value kept within its power of two (fio's
/// `FIO_IO_U_PLAT_BITS`), buckets per group, groups.
const PLAT_BITS: u32 = 6;
const PLAT_VAL: u64 = 1 << PLAT_BITS;
const PLAT_GROUPS: u64 = 29;
/// fio's `FIO_IO_U_PLAT_NR`: the last bucket takes every larger value.
pub const PLAT_NR: u64 = PLAT_GROUPS * PLAT_VAL;

/// fio's bucket of a latency of `value_ns`.
pub fn plat_index(value_ns: u64) -> u64 {
    let msb = 63 - (value_ns | 1).leading_zeros();
    if msb <= PLAT_BITS {
        return value_ns;
    }
    let error_bits = msb - PLAT_BITS;
    let group_start = u64::from(error_bits + 1) << PLAT_BITS;
    let within = (value_ns >> error_bits) & (PLAT_VAL - 1);
    (group_start + within).min(PLAT_NR - 1)
}

/// The value fio reports for bucket `index`: the middle of its range.
pub fn plat_value(index: u64) -> u64 {
    debug_assert!(index < PLAT_NR);
    if index < 2 * PLAT_VAL {
        return index;
    }
    let error_bits = (index >> PLAT_BITS) - 1;
    let group_min = 1u64 << (error_bits + u64::from(PLAT_BITS));
    let k = index % PLAT_VAL;
    group_min + (k << error_bits) + (1 << (error_bits - 1))
}

/// fio's non-empty bins of `hist`: (bucket value in ns, I/Os), by value.
pub fn bins(hist: &Histogram<u64>) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for v in hist.iter_recorded() {
        let value = plat_value(plat_index(hist.lowest_equivalent(v.value_iterated_to())));
        match out.last_mut() {
            Some((last, count)) if *last == value => *count += v.count_at_value(),
            _ => out.push((value, v.count_at_value())),
        }
    }
    out
}

/// fio's latency distribution: I/Os under 2, 4, 10, 20, 50, 100, 250,
/// 500, 750 and 1000 units (its `io_u_lat_n` in ns and `io_u_lat_u` in
/// us), and under 2, ... 1000, 2000 ms then at least 2000 ms
/// (`io_u_lat_m`). The edges, each the last of a bucket's values + 1.
pub const LAT_EDGES: [u64; 10] = [2, 4, 10, 20, 50, 100, 250, 500, 750, 1000];

/// Completed I/Os by fio's latency distribution, summed over `hists`:
/// (ns buckets, us buckets, ms buckets). A histogram bucket that holds
/// an edge counts where its lowest value falls (within 0.1%).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LatDist {
    pub ns: [u64; 10],
    pub us: [u64; 10],
    pub ms: [u64; 12],
}

impl LatDist {
    pub fn of(hists: &[&Histogram<u64>]) -> Self {
        let mut d = LatDist::default();
        for h in hists {
            for v in h.iter_recorded() {
                d.add(h.lowest_equivalent(v.value_iterated_to()), v.count_at_value());
            }
        }
        d
    }

    fn add(&mut self, ns: u64, count: u64) {
        let bucket = |v: u64| LAT_EDGES.iter().position(|&e| v < e).unwrap_or(LAT_EDGES.len());
        if ns < 1_000 {
            self.ns[bucket(ns)] += count;
        } else if ns < 1_000_000 {
            self.us[bucket(ns / 1_000)] += count;
        } else {
            let ms = ns / 1_000_000;
            let i = if ms < 1000 {
                bucket(ms)
            } else if ms < 2000 {
                10
            } else {
                11
            };
            self.ms[i] += count;
        }
    }

    /// Shares in percent of `total` I/Os, as fio's `stat_calc_lat`: a
    /// bucket with any I/O shows at least 0.01.
    pub fn percent(counts: &[u64], total: u64) -> Vec<f64> {
        counts
            .iter()
            .map(|&c| {
                if total == 0 {
                    return 0.0;
                }
                let p = c as f64 * 100.0 / total as f64;
                if p < 0.01 && c > 0 {
                    0.01
                } else {
                    p
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist() -> Histogram<u64> {
        Histogram::new_with_bounds(1, 3_600_000_000_000, 3).unwrap()
    }

    #[test]
    fn fio_buckets_by_hand() {
        // Exact up to 127; then 64 buckets per power of two.
        assert_eq!((plat_index(0), plat_index(127)), (0, 127));
        assert_eq!((plat_index(128), plat_index(129), plat_index(130)), (128, 128, 129));
        assert_eq!(plat_value(128), 129); // [128, 129]
        assert_eq!(plat_index(256), 192);
        assert_eq!(plat_value(192), 258); // [256, 259]
        assert_eq!(plat_index(u64::MAX), PLAT_NR - 1);
        for i in 0..PLAT_NR - 1 {
            assert_eq!(plat_index(plat_value(i)), i, "bucket {i}'s value falls in it");
        }
    }

    #[test]
    fn bins_from_the_histogram_match_fio_bucket_by_bucket() {
        let mut h = hist();
        let mut direct = std::collections::BTreeMap::new();
        let mut x = 0x1234_5678_u64;
        for i in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Spread over 1 ns .. ~17 s, many below 2048.
            let v = (x % (1 << (i % 35))).max(1);
            h.record(v).unwrap();
            *direct.entry(plat_value(plat_index(v))).or_insert(0u64) += 1;
        }
        let direct: Vec<(u64, u64)> = direct.into_iter().collect();
        assert_eq!(bins(&h), direct);
    }

    #[test]
    fn latency_distribution_as_fio_marks_it() {
        let mut h = hist();
        for v in [1, 3, 999, 1_500, 249_000, 999_000, 1_100_000, 3_000_000, 1_500_000_000, 2_500_000_000] {
            h.record(v).unwrap();
        }
        let d = LatDist::of(&[&h]);
        assert_eq!(d.ns, [1, 1, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(d.us, [1, 0, 0, 0, 0, 0, 1, 0, 0, 1]);
        assert_eq!(d.ms, [1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1]);
        assert_eq!(LatDist::percent(&[1, 0, 99_999], 100_000), [0.01, 0.0, 99.999]);
    }
}
