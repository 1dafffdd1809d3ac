//! fio's verify options (HOWTO "Verification"): `VerifyOptions` with
//! fio's defaults, one option's value parsed by `set`, and `resolve`:
//! fio's fix-ups for one job (init.c: the interval fitted to the block
//! size, which header checks apply), whose errors are bad input.

use super::super::cpus::CpuList;
use super::super::options::{err, JobOptions, OptionError, RwModifier};
use super::super::values::{parse_flag, parse_int, parse_size};
use super::algo::Algorithm;
use super::block::Layout;
use super::pattern::VerifyPattern;

/// The verify options bench knows.
pub const VERIFY_OPTIONS: &[&str] = &[
    "verify",
    "verify_pattern",
    "verify_pattern_interval",
    "verify_interval",
    "verify_offset",
    "do_verify",
    "verify_only",
    "verify_backlog",
    "verify_backlog_batch",
    "verify_fatal",
    "verify_dump",
    "verify_async",
    "verify_async_cpus",
    "verify_state_save",
    "verify_state_load",
    "verify_write_sequence",
    "verify_header_seed",
    "experimental_verify",
];

/// One job's verify options, as given (fio's defaults otherwise).
#[derive(Debug, Clone, PartialEq)]
pub struct VerifyOptions {
    /// `verify=` (None: `0`, `none`).
    pub algo: Option<Algorithm>,
    /// `verify=` was given: `verify_pattern` then leaves it alone.
    algo_given: bool,
    pub pattern: Option<VerifyPattern>,
    pub pattern_interval_bytes: u64,
    /// `verify_interval` (0: the block size).
    pub interval_bytes: u64,
    /// `verify_offset`: the header kept this far into its interval.
    pub offset_bytes: u64,
    /// `do_verify` (1): verify after writing.
    pub do_verify: bool,
    /// `verify_only`: check what an identical earlier run wrote.
    pub only: bool,
    /// `verify_backlog`: verify after every N blocks written (0: at the end).
    pub backlog: u64,
    /// `verify_backlog_batch`: blocks verified each time (0: `verify_backlog`).
    pub backlog_batch: u64,
    pub fatal: bool,
    pub dump: bool,
    /// `verify_async`: accepted; verification stays on the job's thread
    /// (verify/mod.rs says why).
    pub async_threads: u64,
    /// `verify_state_save` (1) and `verify_state_load` (0): state.rs.
    pub state_save: bool,
    pub state_load: bool,
    /// `verify_write_sequence`, `verify_header_seed`: None when not given
    /// (fio's fix-ups decide, `resolve`).
    pub write_sequence: Option<bool>,
    pub header_seed: Option<bool>,
    /// `experimental_verify`: the verify phase replays the job's offsets
    /// instead of reading the map kept while writing.
    pub experimental: bool,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        Self {
            algo: None,
            algo_given: false,
            pattern: None,
            pattern_interval_bytes: 0,
            interval_bytes: 0,
            offset_bytes: 0,
            do_verify: true,
            only: false,
            backlog: 0,
            backlog_batch: 0,
            fatal: false,
            dump: false,
            async_threads: 0,
            state_save: true,
            state_load: false,
            write_sequence: None,
            header_seed: None,
            experimental: false,
        }
    }
}

impl VerifyOptions {
    /// Sets one verify option; false if `key` is none of them.
    pub fn set(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionError> {
        let v = || value.ok_or_else(|| OptionError(format!("{key}: needs a value ({key}=...)")));
        match key {
            "verify" => {
                self.algo = Algorithm::parse(v()?).map_err(OptionError)?;
                self.algo_given = true;
            }
            "verify_pattern" => {
                self.pattern = Some(VerifyPattern::parse(key, v()?)?);
                // fio: a pattern without a method verifies header and pattern.
                if !self.algo_given {
                    self.algo = Some(Algorithm::PatternHdr);
                }
            }
            "verify_pattern_interval" => self.pattern_interval_bytes = parse_size(key, v()?)?,
            "verify_interval" => self.interval_bytes = parse_size(key, v()?)?,
            "verify_offset" => self.offset_bytes = parse_size(key, v()?)?,
            "do_verify" => self.do_verify = parse_flag(key, value)?,
            "verify_only" => self.only = parse_flag(key, value)?,
            "verify_backlog" => self.backlog = parse_int(key, v()?, 0, u64::from(u32::MAX))?,
            "verify_backlog_batch" => self.backlog_batch = parse_int(key, v()?, 0, u64::from(u32::MAX))?,
            "verify_fatal" => self.fatal = parse_flag(key, value)?,
            "verify_dump" => self.dump = parse_flag(key, value)?,
            "verify_async" => self.async_threads = parse_int(key, v()?, 0, 4096)?,
            "verify_async_cpus" => _ = CpuList::parse(key, v()?)?,
            "verify_state_save" => self.state_save = parse_flag(key, value)?,
            "verify_state_load" => self.state_load = parse_flag(key, value)?,
            "verify_write_sequence" => self.write_sequence = Some(parse_flag(key, value)?),
            "verify_header_seed" => self.header_seed = Some(parse_flag(key, value)?),
            "experimental_verify" => self.experimental = parse_flag(key, value)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Whether the job verifies at all.
    pub fn enabled(&self) -> bool {
        self.algo.is_some()
    }
}

/// One job's verification after fio's fix-ups.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub layout: Layout,
    /// The blocks verified: the write block size (the read one for a job
    /// that only reads).
    pub block_bytes: u64,
    /// The job writes (else it checks what it reads).
    pub writes: bool,
    pub check_seq: bool,
    pub check_seed: bool,
}

/// fio's fix-ups of a job's verify options (init.c `fixup_options`), or
/// None if it does not verify. Errors name the option.
pub fn resolve(opts: &JobOptions) -> Result<Option<Resolved>, OptionError> {
    let v = &opts.verify;
    let Some(algo) = v.algo else { return Ok(None) };
    let name = &opts.name;
    let writes = opts.rw.read_pct(opts.rwmixread) < 100;
    let block_bytes = if writes { opts.bs_write } else { opts.bs_read };
    if algo.checks_pattern() && algo != Algorithm::Meta && v.pattern.is_none() {
        return err(format!("job '{name}': verify={} needs verify_pattern", algo.name()));
    }
    if v.only && opts.time_based {
        return err(format!("job '{name}': verify_only does not support time_based (as in fio)"));
    }
    check_offsets(opts, writes)?;
    // The interval: the block size unless smaller and dividing it.
    let mut interval = if v.interval_bytes == 0 { block_bytes } else { v.interval_bytes.min(block_bytes) };
    if block_bytes % interval != 0 {
        interval = block_bytes;
    }
    let layout = Layout {
        algo,
        interval_bytes: interval as usize,
        header_at: v.offset_bytes as usize,
        pattern: v.pattern.clone(),
        pattern_interval_bytes: v.pattern_interval_bytes as usize,
    };
    let hdr = layout.header_bytes() as u64;
    if hdr > 0 && interval <= hdr {
        return err(format!(
            "job '{name}': verify={}: a verify_interval of {interval} bytes leaves no data after its {hdr}-byte header",
            algo.name()
        ));
    }
    if v.offset_bytes > 0 && hdr > 0 && (v.offset_bytes < hdr || v.offset_bytes + hdr > interval) {
        return err(format!(
            "job '{name}': verify_offset={}: the {hdr}-byte header must move past itself and stay inside the \
             verify interval ({interval} bytes)",
            v.offset_bytes
        ));
    }
    Ok(Some(Resolved { layout, block_bytes, writes, check_seq: check_seq(opts, writes), check_seed: check_seed(opts) }))
}

/// Verified writes fall on whole blocks of the job's region.
fn check_offsets(opts: &JobOptions, writes: bool) -> Result<(), OptionError> {
    let name = &opts.name;
    if let RwModifier::SeqAdd(add) = opts.rw_modifier {
        if add.unsigned_abs() % opts.bs_write != 0 {
            return err(format!(
                "job '{name}': verify with rw=...:{add}: the skip must be a multiple of bs ({})",
                opts.bs_write
            ));
        }
    }
    let mixed = writes && opts.rw.read_pct(opts.rwmixread) > 0;
    if mixed && !opts.rw.is_random() && opts.bs_read != opts.bs_write {
        return err(format!(
            "job '{name}': verify with rw={} and different read and write block sizes: writes would not fall on whole \
             blocks",
            opts.rw.name()
        ));
    }
    Ok(())
}

/// fio's `verify_write_sequence` default: on, but off for `verify_only`
/// and for `norandommap` at an iodepth above 1 with an async engine (two
/// writes to one block may be in flight), unless given. Only a job that
/// writes blocks of one size knows each block's sequence number.
fn check_seq(opts: &JobOptions, writes: bool) -> bool {
    let v = &opts.verify;
    let racing = opts.norandommap && opts.effective_iodepth() > 1;
    let default = !v.only && !racing;
    writes && opts.bs_read == opts.bs_write && v.write_sequence.unwrap_or(default)
}

/// fio's `verify_header_seed` default: on, but off for `verify_only`, a
/// job that only reads, `verify_backlog`, and offsets that may repeat
/// (`norandommap`, `rw=...:N`), unless given.
fn check_seed(opts: &JobOptions) -> bool {
    let v = &opts.verify;
    let writes = opts.rw.read_pct(opts.rwmixread) < 100;
    let overlap = opts.norandommap || opts.rw_modifier != RwModifier::None;
    let default = !v.only && writes && v.backlog == 0 && !overlap;
    v.header_seed.unwrap_or(default)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(args: &[(&str, &str)]) -> JobOptions {
        let mut j = JobOptions::defaults("j");
        for (k, v) in args {
            j.set(k, Some(v)).unwrap();
        }
        j
    }

    #[test]
    fn a_pattern_alone_verifies_header_and_pattern_and_verify_wins_either_way() {
        assert_eq!(job(&[("verify_pattern", "0xaa")]).verify.algo, Some(Algorithm::PatternHdr));
        assert_eq!(job(&[("verify", "meta"), ("verify_pattern", "0xaa")]).verify.algo, Some(Algorithm::Meta));
        assert_eq!(job(&[("verify_pattern", "0xaa"), ("verify", "md5")]).verify.algo, Some(Algorithm::Md5));
    }

    #[test]
    fn the_interval_fits_the_block_as_fio_fixes_it() {
        let interval = |args: &[(&str, &str)]| resolve(&job(args)).unwrap().unwrap().layout.interval_bytes;
        assert_eq!(interval(&[("rw", "write"), ("verify", "crc32c")]), 4096);
        assert_eq!(interval(&[("rw", "write"), ("verify", "crc32c"), ("verify_interval", "512")]), 512);
        assert_eq!(interval(&[("rw", "write"), ("verify", "crc32c"), ("verify_interval", "64k")]), 4096);
        assert_eq!(interval(&[("rw", "write"), ("verify", "crc32c"), ("verify_interval", "1000")]), 4096);
        assert_eq!(interval(&[("rw", "read"), ("bs", "64k"), ("verify", "meta"), ("verify_interval", "512")]), 512);
    }

    #[test]
    fn header_checks_follow_fios_defaults() {
        let r = |args: &[(&str, &str)]| {
            let r = resolve(&job(args)).unwrap().unwrap();
            (r.check_seq, r.check_seed)
        };
        assert_eq!(r(&[("rw", "randwrite"), ("verify", "md5")]), (true, true));
        assert_eq!(r(&[("rw", "randwrite"), ("verify", "md5"), ("verify_only", "1")]), (false, false));
        let only_explicit = [("rw", "write"), ("verify", "md5"), ("verify_only", "1"), ("verify_write_sequence", "1")];
        assert_eq!(r(&only_explicit), (true, false));
        let racing = [("rw", "randwrite"), ("verify", "md5"), ("norandommap", "1"), ("iodepth", "8")];
        assert_eq!(r(&racing), (false, false));
        assert_eq!(r(&[("rw", "randwrite"), ("verify", "md5"), ("verify_backlog", "8")]), (true, false));
        assert_eq!(r(&[("rw", "read"), ("verify", "md5")]), (false, false));
    }

    #[test]
    fn bad_combinations_are_bad_input_naming_the_option() {
        let e = |args: &[(&str, &str)]| resolve(&job(args)).unwrap_err().0;
        assert!(e(&[("rw", "write"), ("verify", "pattern")]).contains("verify=pattern needs verify_pattern"));
        let off = e(&[("rw", "write"), ("verify", "crc32c"), ("verify_offset", "4090")]);
        assert!(off.contains("verify_offset=4090"), "{off}");
        assert!(e(&[("rw", "write"), ("verify", "sha512"), ("bs", "64")]).contains("leaves no data"));
        let only = [("rw", "write"), ("verify", "md5"), ("verify_only", "1"), ("time_based", "1")];
        assert!(e(&only).contains("verify_only does not support time_based"));
        assert!(e(&[("rw", "write:6k"), ("verify", "md5")]).contains("multiple of bs"));
        assert!(resolve(&job(&[("rw", "write")])).unwrap().is_none());
    }
}
