//! fio's option value syntax: integers (decimal or 0x hex), sizes with
//! k/m/g/t/p suffixes (powers of 1024, fio's default kb_base), times with
//! units, and 0/1 flags. Every error names the option and what it accepts.

use super::options::OptionError;

fn err<T>(msg: impl Into<String>) -> Result<T, OptionError> {
    Err(OptionError(msg.into()))
}

/// fio's per-direction value `R,W,T` (`bs`, `rate`, `bsrange`, ...): one
/// for reads, writes and trims; an empty one keeps fio's default (None),
/// and the last one given applies to the directions after it unless a
/// comma ends the list (`8k,32k`: trims 32k; `8k,32k,`: trims default),
/// as fio's parser stores a multi-direction option.
pub fn per_direction<'v>(key: &str, v: &'v str) -> Result<[Option<&'v str>; 3], OptionError> {
    if v.trim().is_empty() {
        return err(format!("{key}: bad value '' (a value, or R,W,T per direction)"));
    }
    let parts: Vec<&str> = v.split(',').collect();
    if parts.len() > 3 {
        return err(format!("{key}: at most 3 values (read,write,trim), got '{v}'"));
    }
    let last = parts[parts.len() - 1];
    let at = |i: usize| Some(*parts.get(i).unwrap_or(&last)).filter(|p| !p.trim().is_empty());
    Ok([at(0), at(1), at(2)])
}

/// `per_direction`'s values parsed by `one`, `default` where none is given.
pub fn per_direction_values<T: Copy>(
    key: &str,
    v: &str,
    default: T,
    one: impl Fn(&str) -> Result<T, OptionError>,
) -> Result<[T; 3], OptionError> {
    let [r, w, t] = per_direction(key, v)?;
    let value = |side: Option<&str>| side.map_or(Ok(default), &one);
    Ok([value(r)?, value(w)?, value(t)?])
}

/// fio integer: decimal or 0x hex, within `min..=max`.
pub fn parse_int(key: &str, v: &str, min: u64, max: u64) -> Result<u64, OptionError> {
    let parsed = match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse::<u64>().ok(),
    };
    match parsed {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => err(format!("{key}: bad value '{v}' (accepted: an integer in {min}..={max})")),
    }
}

/// fio size: a number with an optional k/m/g/t/p suffix (powers of 1024,
/// fio's default kb_base), with or without "i"/"b" ("4k", "4KiB", "1g").
pub fn parse_size(key: &str, v: &str) -> Result<u64, OptionError> {
    let lower = v.trim().to_ascii_lowercase();
    let digits_end = lower.find(|c: char| !c.is_ascii_digit()).unwrap_or(lower.len());
    let (num, suffix) = lower.split_at(digits_end);
    let shift = match suffix.trim_end_matches('b').trim_end_matches('i') {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        "p" => 50,
        _ => return err(format!("{key}: bad size '{v}' (accepted: a number with an optional k, m, g, t suffix)")),
    };
    let n: u64 = num.parse().map_err(|_| OptionError(format!("{key}: bad size '{v}' (accepted: e.g. 4k, 1m, 10g)")))?;
    n.checked_mul(1u64 << shift).ok_or_else(|| OptionError(format!("{key}: size '{v}' overflows")))
}

/// fio time: seconds by default, or with a unit (us, ms, s, m, h, d).
pub fn parse_time_ns(key: &str, v: &str) -> Result<u64, OptionError> {
    let lower = v.trim().to_ascii_lowercase();
    let digits_end = lower.find(|c: char| !c.is_ascii_digit()).unwrap_or(lower.len());
    let (num, unit) = lower.split_at(digits_end);
    let ns_per_unit: u64 = match unit {
        "" | "s" | "sec" => 1_000_000_000,
        "ms" | "msec" => 1_000_000,
        "us" | "usec" => 1_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "d" => 86_400_000_000_000,
        _ => return err(format!("{key}: bad time '{v}' (accepted: a number with an optional unit us, ms, s, m, h)")),
    };
    let n: u64 =
        num.parse().map_err(|_| OptionError(format!("{key}: bad time '{v}' (accepted: e.g. 10, 500ms, 2m)")))?;
    n.checked_mul(ns_per_unit).ok_or_else(|| OptionError(format!("{key}: time '{v}' overflows")))
}

/// A flag option: bare (`time_based`) means on; else 0/1.
pub(super) fn parse_flag(key: &str, value: Option<&str>) -> Result<bool, OptionError> {
    match value {
        None | Some("1") | Some("true") => Ok(true),
        Some("0") | Some("false") => Ok(false),
        Some(v) => err(format!("{key}: bad value '{v}' (accepted: 0 or 1)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// fio's rule for `bs=`, `rate=` and the other options per direction.
    #[test]
    fn per_direction_values_follow_fios_parser() {
        let dirs = |v| per_direction("bs", v).unwrap();
        assert_eq!(dirs("4k"), [Some("4k"); 3], "one value: every direction");
        assert_eq!(dirs("8k,32k"), [Some("8k"), Some("32k"), Some("32k")], "the last covers the rest");
        assert_eq!(dirs("8k,32k,"), [Some("8k"), Some("32k"), None], "a trailing comma leaves trims' default");
        assert_eq!(dirs(",500k"), [None, Some("500k"), Some("500k")]);
        assert!(per_direction("bs", "1,2,3,4").unwrap_err().0.contains("at most 3"));
        assert!(per_direction("bs", "").unwrap_err().0.contains("bad value ''"), "an unset FIO_BS in a job file");
        let sizes = per_direction_values("bs", ",8k,", 4096, |s| parse_size("bs", s)).unwrap();
        assert_eq!(sizes, [4096, 8192, 4096]);
    }
}
