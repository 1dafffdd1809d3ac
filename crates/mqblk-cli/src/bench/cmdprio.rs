//! fio's per-command priorities (`cmdprio_percentage`, `cmdprio_class`,
//! `cmdprio`, `cmdprio_hint`, `cmdprio_bssplit`): a share of a job's I/Os,
//! per direction and optionally per block size, carry another I/O
//! priority than the job's (`prio`, `prioclass`), so that a scheduler
//! that serves classes (mq-deadline, bfq) can be seen to serve them.
//!
//! The rules are fio's (engines/cmdprio.c): without a class the
//! highest (RT) is used, without a level 0; `cmdprio_bssplit` gives, per
//! block size, the percentages of I/Os and optionally each one's class
//! and level. Priority hints (command duration limits) are a device
//! feature mqblk's devices lack: a non-zero `cmdprio_hint` is refused.
//! The choice per I/O draws from the job's own generator; nothing is
//! allocated per I/O.

use mqblk::{IoPrio, IoPrioClass};

use super::options::{err, OptionError};
use super::values::{parse_int, parse_size, per_direction_values};

/// One `cmdprio_bssplit` entry: this share of the I/Os of this size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitEntry {
    pub bs_bytes: u64,
    pub pct: u32,
    /// The entry's own class and level (fio's second format).
    pub prio: Option<IoPrio>,
}

/// A job's per-command priority options, per direction (reads, writes).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CmdPrioOptions {
    pub percentage: [u32; 2],
    pub class: [Option<IoPrioClass>; 2],
    pub level: [Option<u8>; 2],
    pub bssplit: [Vec<SplitEntry>; 2],
}

/// The option names (options.rs' `job_options` adds them).
pub const CMDPRIO_OPTIONS: &[&str] =
    &["cmdprio_percentage", "cmdprio_class", "cmdprio", "cmdprio_hint", "cmdprio_bssplit"];

/// `V` (both directions) or `R,W` (fio's rule: values.rs), `default`
/// where none is given; a trims' value has no I/O to apply to.
fn per_direction<T: Copy>(
    key: &str,
    v: &str,
    default: T,
    one: impl Fn(&str) -> Result<T, OptionError>,
) -> Result<[T; 2], OptionError> {
    let [r, w, _] = per_direction_values(key, v, default, one)?;
    Ok([r, w])
}

fn class(key: &str, v: &str) -> Result<IoPrioClass, OptionError> {
    Ok(match parse_int(key, v, 1, 3)? {
        1 => IoPrioClass::Rt,
        2 => IoPrioClass::Be,
        _ => IoPrioClass::Idle,
    })
}

impl CmdPrioOptions {
    /// Whether any I/O may carry its own priority.
    pub fn any(&self) -> bool {
        self.percentage != [0, 0] || self.bssplit.iter().any(|s| !s.is_empty())
    }

    /// Sets one option; false if `key` is none of them.
    pub(super) fn set(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionError> {
        let v = value.ok_or_else(|| OptionError(format!("{key}: needs a value ({key}=...)")));
        match key {
            "cmdprio_percentage" => {
                self.percentage = per_direction(key, v?, 0, |s| Ok(parse_int(key, s, 0, 100)? as u32))?
            }
            "cmdprio_class" => self.class = per_direction(key, v?, None, |s| class(key, s).map(Some))?,
            "cmdprio" => self.level = per_direction(key, v?, None, |s| Ok(Some(parse_int(key, s, 0, 7)? as u8)))?,
            "cmdprio_hint" => {
                if per_direction(key, v?, 0, |s| parse_int(key, s, 0, 7))? != [0, 0] {
                    return err(format!(
                        "{key}: not supported: priority hints (command duration limits) need a device that has them, and mqblk's devices do not"
                    ));
                }
            }
            "cmdprio_bssplit" => {
                let v = v?;
                let (r, w) = v.split_once(',').unwrap_or((v, v));
                self.bssplit = [split(key, r)?, split(key, w)?];
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Checks what fio checks: percentages and bssplit are exclusive.
    pub(super) fn validate(&self, job: &str) -> Result<(), OptionError> {
        if self.percentage != [0, 0] && self.bssplit.iter().any(|s| !s.is_empty()) {
            return err(format!("job '{job}': cmdprio_percentage and cmdprio_bssplit are exclusive"));
        }
        Ok(())
    }
}

/// `SIZE/PCT[/CLASS/LEVEL[/HINT]]:...`: a direction's entries; each
/// size's percentages sum to at most 100.
fn split(key: &str, v: &str) -> Result<Vec<SplitEntry>, OptionError> {
    let mut entries: Vec<SplitEntry> = Vec::new();
    for part in v.split(':').filter(|p| !p.is_empty()) {
        let fields: Vec<&str> = part.split('/').collect();
        let bad = || OptionError(format!("{key}: bad entry '{part}' (SIZE/PCT or SIZE/PCT/CLASS/LEVEL[/HINT])"));
        let entry = match fields[..] {
            [bs, pct] => {
                SplitEntry { bs_bytes: parse_size(key, bs)?, pct: parse_int(key, pct, 0, 100)? as u32, prio: None }
            }
            [bs, pct, c, level] | [bs, pct, c, level, "0"] => SplitEntry {
                bs_bytes: parse_size(key, bs)?,
                pct: parse_int(key, pct, 0, 100)? as u32,
                prio: Some(IoPrio::new(class(key, c)?, parse_int(key, level, 0, 7)? as u8)),
            },
            [_, _, _, _, _] => {
                return err(format!(
                    "{key}: '{part}': priority hints need a device that has them, and mqblk's devices do not"
                ))
            }
            _ => return Err(bad()),
        };
        let sum: u32 = entries.iter().filter(|e| e.bs_bytes == entry.bs_bytes).map(|e| e.pct).sum::<u32>() + entry.pct;
        if sum > 100 {
            return err(format!("{key}: the entries for {} bytes add up to {sum}%", entry.bs_bytes));
        }
        entries.push(entry);
    }
    Ok(entries)
}

/// A job's per-I/O priority choice at run time.
#[derive(Debug, Clone)]
pub struct CmdPrio {
    opts: CmdPrioOptions,
    /// The priority an I/O picked by the percentage carries, per direction.
    prio: [IoPrio; 2],
    rng: u64,
}

impl CmdPrio {
    pub fn new(opts: &CmdPrioOptions, seed: u64) -> Option<Self> {
        if !opts.any() {
            return None;
        }
        let prio = [0, 1].map(|d| IoPrio::new(opts.class[d].unwrap_or(IoPrioClass::Rt), opts.level[d].unwrap_or(0)));
        Some(Self { opts: opts.clone(), prio, rng: seed | 1 })
    }

    fn percent(&mut self) -> u32 {
        // xorshift64*: the job's own stream.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32 % 100
    }

    /// The priority of the next I/O (`is_write`, `len_bytes`), or `job`'s.
    pub fn pick(&mut self, is_write: bool, len_bytes: u64, job: IoPrio) -> IoPrio {
        let d = usize::from(is_write);
        let r = self.percent();
        if self.opts.bssplit[d].is_empty() {
            return if r < self.opts.percentage[d] { self.prio[d] } else { job };
        }
        let mut below = 0;
        for e in self.opts.bssplit[d].iter().filter(|e| e.bs_bytes == len_bytes) {
            below += e.pct;
            if r < below {
                return e.prio.unwrap_or(self.prio[d]);
            }
        }
        job
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(set: &[(&str, &str)]) -> CmdPrioOptions {
        crate::bench::options::group_from(set, CmdPrioOptions::set)
    }

    #[test]
    fn options_parse_as_fio_writes_them() {
        let o = opts(&[("cmdprio_percentage", "20"), ("cmdprio_class", "1"), ("cmdprio", "0,3")]);
        assert_eq!(o.percentage, [20, 20]);
        assert_eq!(o.level, [Some(0), Some(3)]);
        let o = opts(&[("cmdprio_bssplit", "64k/25/1/1:64k/75/3/2:1024k/0,1024k/0")]);
        assert_eq!(o.bssplit[0].len(), 3);
        assert_eq!(o.bssplit[0][1].prio, Some(IoPrio::new(IoPrioClass::Idle, 2)));
        assert!(CmdPrioOptions::default().set("cmdprio_bssplit", Some("4k/60:4k/50")).unwrap_err().0.contains("110%"));
        assert!(CmdPrioOptions::default().set("cmdprio_hint", Some("1")).unwrap_err().0.contains("hints"));
        assert!(opts(&[("cmdprio_hint", "0")]) == CmdPrioOptions::default());
        let both = opts(&[("cmdprio_percentage", "5"), ("cmdprio_bssplit", "4k/10")]);
        assert!(both.validate("j").is_err());
    }

    /// 20% of 100,000 draws get the command priority, to within 1%.
    #[test]
    fn the_percentage_of_ios_gets_the_priority() {
        let o = opts(&[("cmdprio_percentage", "20"), ("cmdprio_class", "1")]);
        let mut c = CmdPrio::new(&o, 7).unwrap();
        let job = IoPrio::new(IoPrioClass::Idle, 7);
        let rt = (0..100_000).filter(|_| c.pick(false, 4096, job).class == IoPrioClass::Rt).count();
        assert!((19_000..=21_000).contains(&rt), "{rt}");
    }

    /// Per size: 64k I/Os split 25/75 between two priorities, 1M ones keep
    /// the job's.
    #[test]
    fn bssplit_entries_apply_to_their_size() {
        let o = opts(&[("cmdprio_bssplit", "64k/25/1/1:64k/75/3/2:1024k/0")]);
        let mut c = CmdPrio::new(&o, 9).unwrap();
        let job = IoPrio::default();
        let rt = (0..40_000).filter(|_| c.pick(false, 64 << 10, job) == IoPrio::new(IoPrioClass::Rt, 1)).count();
        assert!((9_000..=11_000).contains(&rt), "{rt}");
        assert!((0..1000).all(|_| c.pick(false, 1 << 20, job) == job));
    }
}
