//! fio's sizes in percent of the device: `size=50%`, `io_size=200%`,
//! `offset=25%`, `offset_increment=10%` (fio's HOWTO: "a percentage of
//! the real size of the file/device"). They are kept as given while the
//! options parse and turned into bytes once the device is built and its
//! capacity known (`resolve`, beside zones.rs' sizes in zones); an
//! offset rounds down to the device's logical block, as fio aligns it.

use mqblk::Device;

use super::options::{err, BenchPlan, OptionError};

/// The percentages a job gave (None: that option in bytes or not given).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SizePercents {
    pub size: Option<f64>,
    pub io_size: Option<f64>,
    pub offset: Option<f64>,
    pub offset_increment: Option<f64>,
}

impl SizePercents {
    /// `size`, `io_size`, `offset` or `offset_increment` as `P%`: true if
    /// `value` was one. A plain value forgets an earlier percentage (the
    /// caller then parses it).
    pub fn set(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionError> {
        let slot = match key {
            "size" => &mut self.size,
            "io_size" | "io_limit" => &mut self.io_size,
            "offset" => &mut self.offset,
            "offset_increment" => &mut self.offset_increment,
            _ => return Ok(false),
        };
        let Some(number) = value.and_then(|v| v.trim().strip_suffix('%')) else {
            *slot = None;
            return Ok(false);
        };
        let max = if key.starts_with("io_") { f64::MAX } else { 100.0 };
        match number.trim().parse::<f64>() {
            Ok(p) if p > 0.0 && p <= max || p == 0.0 && key.starts_with("offset") => {
                *slot = Some(p);
                Ok(true)
            }
            _ => err(format!(
                "{key}: bad percentage '{}' (accepted: above 0, up to 100%; offsets from 0%)",
                value.unwrap_or("")
            )),
        }
    }

    fn any(&self) -> bool {
        *self != Self::default()
    }
}

/// `plan` with every job's percentages of the device turned into bytes.
pub fn resolve(plan: &BenchPlan, dev: &Device) -> Result<BenchPlan, String> {
    if !plan.jobs.iter().any(|j| j.percents.any()) {
        return Ok(plan.clone());
    }
    let limits = dev.limits();
    let (capacity, block) = (limits.capacity_bytes, u64::from(limits.logical_block_size));
    let of = |p: f64| ((capacity as f64 * p / 100.0) as u64) / block * block;
    let mut plan = plan.clone();
    for job in &mut plan.jobs {
        let p = job.percents;
        if let Some(pct) = p.size {
            job.size = Some(of(pct).max(block));
        }
        if let Some(pct) = p.io_size {
            job.io_size = Some(of(pct).max(block));
        }
        if let Some(pct) = p.offset {
            job.offset = of(pct);
        }
        if let Some(pct) = p.offset_increment {
            job.offset_increment = of(pct);
        }
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_parse_and_a_plain_value_forgets_one() {
        let mut p = SizePercents::default();
        assert!(p.set("size", Some("50%")).unwrap());
        assert!(p.set("offset", Some("0%")).unwrap());
        assert_eq!((p.size, p.offset), (Some(50.0), Some(0.0)));
        assert!(!p.set("size", Some("1g")).unwrap());
        assert_eq!(p.size, None);
        assert!(p.set("size", Some("101%")).unwrap_err().0.contains("up to 100%"));
        assert!(p.set("io_size", Some("250%")).unwrap(), "io_size may loop past the region");
        assert!(!p.set("bs", Some("50%")).unwrap());
    }
}
