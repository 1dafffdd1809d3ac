//! Repeated measurement: running compared variants alternately over
//! several rounds, and summarising a cell's rounds as median and spread.
//! On a small shared machine a single run of a cell says little (the same
//! command swings by tens of percent); alternating the variants makes a
//! drift of the machine hit all of them alike.

use serde_json::{json, Value};

/// A cell's values over its rounds: the median, and the spread (min, max).
#[derive(Debug, Clone, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Every round's value, in run order.
    pub runs: Vec<f64>,
}

impl Spread {
    /// Summarises `runs` (at least one value).
    pub fn of(runs: &[f64]) -> Self {
        assert!(!runs.is_empty(), "a spread of no runs");
        let mut sorted = runs.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 };
        Self { median, min: sorted[0], max: sorted[n - 1], runs: runs.to_vec() }
    }

    /// Summarises one field of every round's result.
    pub fn over<T>(rounds: &[T], f: impl Fn(&T) -> f64) -> Self {
        Self::of(&rounds.iter().map(f).collect::<Vec<_>>())
    }

    /// "median (min-max)" with `decimals` places.
    pub fn show(&self, decimals: usize) -> String {
        if self.runs.len() == 1 {
            return format!("{:.*}", decimals, self.median);
        }
        format!("{:.d$} ({:.d$}-{:.d$})", self.median, self.min, self.max, d = decimals)
    }

    /// The spread relative to the median, in percent ((max - min) / median).
    pub fn spread_pct(&self) -> f64 {
        if self.median == 0.0 {
            return 0.0;
        }
        (self.max - self.min) / self.median.abs() * 100.0
    }

    pub fn json(&self) -> Value {
        json!({ "median": self.median, "min": self.min, "max": self.max, "runs": self.runs })
    }
}

/// Runs `variants` variants for `rounds` rounds, alternating: round 0 runs
/// variants 0, 1, ..., n-1, round 1 runs them in reverse, and so on.
/// `run(variant, round)` measures one cell once. Returns every result by
/// variant, then round.
pub fn alternate<T, E>(
    variants: usize,
    rounds: u32,
    mut run: impl FnMut(usize, u32) -> Result<T, E>,
) -> Result<Vec<Vec<T>>, E> {
    let mut out: Vec<Vec<T>> = (0..variants).map(|_| Vec::with_capacity(rounds as usize)).collect();
    for round in 0..rounds {
        for i in 0..variants {
            let v = if round % 2 == 0 { i } else { variants - 1 - i };
            out[v].push(run(v, round)?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(Spread::of(&[3.0, 1.0, 2.0]).median, 2.0);
        assert_eq!(Spread::of(&[4.0, 1.0, 2.0, 3.0]).median, 2.5);
        let s = Spread::of(&[5.0, 1.0, 9.0]);
        assert_eq!((s.min, s.max), (1.0, 9.0));
        assert_eq!(s.runs, vec![5.0, 1.0, 9.0]);
        assert_eq!(s.show(0), "5 (1-9)");
        assert_eq!(s.spread_pct(), 160.0);
    }

    #[test]
    fn alternate_reverses_every_other_round() {
        let mut order = Vec::new();
        let out = alternate::<_, ()>(3, 3, |v, r| {
            order.push(v);
            Ok((v, r))
        })
        .unwrap();
        assert_eq!(order, vec![0, 1, 2, 2, 1, 0, 0, 1, 2]);
        assert_eq!(out[2], vec![(2, 0), (2, 1), (2, 2)]);
    }
}
