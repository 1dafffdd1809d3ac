//! fio's per-option setter: one job option's value (`key=value`, or a bare
//! flag) parsed into `JobOptions`, with fio's aliases, ranges and units.
//! The options come in groups: what and where to do I/O, how deep and
//! how submitted, how long and how measured, and the file engine's.

use super::cpus::CpuList;
use super::options::{
    err, job_options, unknown_option, ExitWhat, JobOptions, OptionError, RwMode, RwModifier, IOENGINES, REFUSED_OPTIONS,
};
use super::values::{parse_flag, parse_int, parse_size, parse_time_ns, per_direction_values};

/// The option's value, or the error of an option given bare that needs one.
fn need<'v>(key: &str, value: Option<&'v str>) -> Result<&'v str, OptionError> {
    value.ok_or_else(|| OptionError(format!("{key}: needs a value ({key}=...)")))
}

/// Parses `value` for `key` out of `allowed` (value, setting), else the
/// error `msg` names.
fn choice<T: Copy>(value: &str, allowed: &[(&str, T)], msg: impl FnOnce(&str) -> String) -> Result<T, OptionError> {
    match allowed.iter().find(|(v, _)| *v == value) {
        Some(&(_, t)) => Ok(t),
        None => err(msg(value)),
    }
}

/// The `:N` of `rw=MODE:N`: a signed size for a sequential mode (fio's
/// `ddir_seq_add`), a count of at least 1 for a random one (fio's
/// `ddir_seq_nr`).
fn rw_modifier(mode: RwMode, n: &str) -> Result<RwModifier, OptionError> {
    if mode.is_random() {
        return Ok(RwModifier::SeqNr(parse_int("rw", n, 1, u64::from(u32::MAX))?));
    }
    let (negative, size) = n.strip_prefix('-').map_or((false, n), |s| (true, s));
    let bytes = i64::try_from(parse_size("rw", size)?).map_err(|_| OptionError(format!("rw: ':{n}' overflows")))?;
    Ok(RwModifier::SeqAdd(if negative { -bytes } else { bytes }))
}

impl JobOptions {
    /// Sets one option, and records it as given (for the JSON "job
    /// options"); an unknown option names the nearest known one.
    pub(super) fn set(&mut self, key: &str, value: Option<&str>) -> Result<(), OptionError> {
        if let Some((_, why)) = REFUSED_OPTIONS.iter().find(|(k, _)| *k == key) {
            return err(format!("{key}: not supported: {why}"));
        }
        // A size in percent or in zones: each forgets the other's earlier
        // value, so both look at every size.
        let in_percent = self.percents.set(key, value)?;
        let in_zones = self.zones.set_count(key, value);
        let known = in_percent
            || in_zones
            || self.set_pattern(key, value)?
            || self.set_queue(key, value)?
            || self.set_run(key, value)?
            || self.set_file(key, value)?
            || self.set_replay(key, value)?
            || self.shape.set(key, value)?
            || self.logs.set(key, value)?
            || self.steady.set(key, value)?
            || self.numa.set(key, value)?
            || self.cmdprio.set(key, value)?
            || self.errors.set(key, value)?
            || self.latency.set(key, value)?
            || self.buffers.set(key, value)?
            || self.sync.set(key, value)?
            || self.block_sizes.set(key, value)?
            || self.distribution.set(key, value)?
            || self.zones.set(key, value)?
            || self.verify.set(key, value)?;
        if !known {
            return err(unknown_option(key, &job_options()));
        }
        if key != "name" {
            self.given.push((key.to_string(), value.unwrap_or("").to_string()));
        }
        Ok(())
    }

    /// What and where: direction, mix, block sizes, the region, zones.
    /// False if `key` is none of these.
    fn set_pattern(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionError> {
        let v = || need(key, value);
        match key {
            "name" => self.name = v()?.to_string(),
            "rw" | "readwrite" => {
                let v = v()?;
                let (mode, modifier) = v.split_once(':').map_or((v, None), |(m, n)| (m, Some(n)));
                self.rw = RwMode::parse(mode)?;
                self.rw_modifier = match modifier {
                    None => RwModifier::None,
                    Some(n) => rw_modifier(self.rw, n)?,
                };
            }
            "rwmixread" => self.rwmixread = parse_int(key, v()?, 0, 100)? as u32,
            "rwmixwrite" => self.rwmixread = 100 - parse_int(key, v()?, 0, 100)? as u32,
            "bs" | "blocksize" => {
                let v = v()?;
                [self.bs_read, self.bs_write, self.bs_trim] =
                    per_direction_values(key, v, 4096, |s| parse_size(key, s))?;
                if self.bs_read == 0 || self.bs_write == 0 || self.bs_trim == 0 {
                    return err(format!("{key}: block size must be positive, got '{v}'"));
                }
                self.block_sizes.fixed_by_bs();
            }
            "size" => self.size = Some(parse_size(key, v()?)?),
            "io_size" | "io_limit" => {
                let bytes = parse_size(key, v()?)?;
                if bytes == 0 {
                    return err(format!("{key}: must be positive, got '{}'", v()?));
                }
                self.io_size = Some(bytes);
            }
            "offset" => self.offset = parse_size(key, v()?)?,
            "offset_increment" => self.offset_increment = parse_size(key, v()?)?,
            "zonemode" => self.zonemode_zbd = self.zones.set_mode(v()?)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// How deep and how submitted: queue depth and batches, jobs,
    /// plugging, flags, engine, priority. False if `key` is none of these.
    fn set_queue(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionError> {
        let v = || need(key, value);
        match key {
            "iodepth" => self.iodepth = parse_int(key, v()?, 1, 65536)? as usize,
            "iodepth_batch_submit" | "iodepth_batch" => {
                self.iodepth_batch_submit = parse_int(key, v()?, 0, 65536)? as usize
            }
            "iodepth_batch_complete_min" | "iodepth_batch_complete" => {
                self.iodepth_batch_complete_min = parse_int(key, v()?, 0, 65536)? as usize
            }
            "iodepth_batch_complete_max" => self.iodepth_batch_complete_max = parse_int(key, v()?, 0, 65536)? as usize,
            "numjobs" => self.numjobs = parse_int(key, v()?, 1, 4096)? as usize,
            "plug" => self.plug = parse_flag(key, value)?,
            "plug_per_io" => self.plug_per_io = parse_flag(key, value)?,
            "mqblk_async" => self.mqblk_async = parse_flag(key, value)?,
            "hipri" => self.hipri = parse_flag(key, value)?,
            "ioengine" => {
                let v = v()?;
                if !IOENGINES.contains(&v) {
                    return err(format!("ioengine: bad value '{v}' (accepted: {})", IOENGINES.join(", ")));
                }
                self.ioengine = v.to_string();
            }
            "prio" => self.ioprio.level = parse_int(key, v()?, 0, 7)? as u8,
            "prioclass" => {
                use mqblk::IoPrioClass;
                self.ioprio.class = match parse_int(key, v()?, 1, 3)? {
                    1 => IoPrioClass::Rt,
                    2 => IoPrioClass::Be,
                    _ => IoPrioClass::Idle,
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// How long and how measured: run time, ramp, I/O count, reporting,
    /// seed, clock, start delay, exit, CPUs. False if `key` is none of
    /// these.
    fn set_run(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionError> {
        let v = || need(key, value);
        match key {
            "runtime" | "timeout" => self.runtime_ns = parse_time_ns(key, v()?)?,
            "time_based" => self.time_based = parse_flag(key, value)?,
            "ramp_time" => self.ramp_time_ns = parse_time_ns(key, v()?)?,
            "number_ios" => self.number_ios = parse_int(key, v()?, 0, u64::MAX)?,
            "group_reporting" => self.group_reporting = parse_flag(key, value)?,
            "randseed" => self.randseed = parse_int(key, v()?, 0, u64::MAX)?,
            "gtod_reduce" => self.gtod_reduce = parse_flag(key, value)?,
            "lat_percentiles" => self.lat_percentiles = parse_flag(key, value)?,
            "clocksource" => {
                use mqblk::clock::ClockSource;
                let accepted = [
                    ("cpu", ClockSource::Cpu),
                    ("clock_gettime", ClockSource::ClockGettime),
                    ("gettimeofday", ClockSource::ClockGettime),
                ];
                self.clocksource = Some(choice(v()?, &accepted, |o| {
                    format!("clocksource: bad value '{o}' (accepted: cpu, clock_gettime, gettimeofday)")
                })?)
            }
            "startdelay" => self.startdelay_ns = parse_time_ns(key, v()?)?,
            "norandommap" => self.norandommap = parse_flag(key, value)?,
            "randrepeat" => self.randrepeat = parse_flag(key, value)?,
            "random_generator" => {
                let accepted = [("tausworthe", false), ("tausworthe64", false), ("lfsr", true)];
                self.random_lfsr = choice(v()?, &accepted, |o| {
                    format!("random_generator={o} (accepted: tausworthe, tausworthe64, lfsr)")
                })?
            }
            "loops" => self.loops = parse_int(key, v()?, 1, u64::from(u32::MAX))?,
            "stonewall" | "wait_on_prev" => self.stonewall = parse_flag(key, value)?,
            "new_group" => self.new_group = parse_flag(key, value)?,
            "wait_for" => self.wait_for = Some(v()?.to_string()),
            "description" => self.description = Some(v()?.to_string()),
            // Every job is a thread of this process already (fio's
            // `thread`); `threads` is fio's tiobench profile's option,
            // which fio too ignores without `profile=tiobench`.
            "thread" => _ = parse_flag(key, value)?,
            "threads" => _ = parse_int(key, v()?, 1, 4096)?,
            "exitall" => self.exitall = parse_flag(key, value)?,
            "exit_what" => {
                let accepted = [("group", ExitWhat::Group), ("stonewall", ExitWhat::Stonewall), ("all", ExitWhat::All)];
                self.exit_what = choice(v()?, &accepted, |o| {
                    format!("exit_what: bad value '{o}' (accepted: group, stonewall, all)")
                })?
            }
            "cpus_allowed" => self.cpus_allowed = Some(CpuList::parse(key, v()?)?),
            "cpus_allowed_policy" => {
                self.cpus_allowed_split = choice(v()?, &[("shared", false), ("split", true)], |o| {
                    format!("cpus_allowed_policy={o} (accepted: shared, split)")
                })?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The file device and fio's io_uring engine options. False if `key`
    /// is none of these.
    fn set_file(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionError> {
        match key {
            "filename" => self.filename = Some(need(key, value)?.to_string()),
            "direct" => self.direct = parse_flag(key, value)?,
            "buffered" => self.direct = !parse_flag(key, value)?,
            "allow_file_create" => self.allow_file_create = parse_flag(key, value)?,
            "directory" => self.directory = Some(need(key, value)?.to_string()),
            "filesize" => self.filesize = Some(parse_size(key, need(key, value)?)?),
            "registerfiles" => self.registerfiles = parse_flag(key, value)?,
            "fill_device" | "fill_fs" => self.fill_device = parse_flag(key, value)?,
            // Files are laid out one at a time or not: one device has none.
            "create_serialize" => _ = parse_flag(key, value)?,
            // Options of fio's io_uring engine that mqblk cannot honour say so.
            "fixedbufs" => self.fixedbufs = parse_flag(key, value)?,
            "sqthread_poll" if parse_flag(key, value)? => {
                return err("sqthread_poll=1: the file driver submits from the clients' threads, it has no SQ \
                            polling thread; use sqthread_poll=0")
            }
            "sqthread_poll" => {}
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// fio's iolog options: the trace to replay and how, the log to
    /// write. False if `key` is none of these.
    fn set_replay(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionError> {
        let v = || need(key, value);
        let replay = &mut self.replay;
        match key {
            "write_iolog" => self.write_iolog = Some(v()?.to_string()),
            "read_iolog" => self.read_iolog = Some(v()?.to_string()),
            "read_iolog_chunked" => replay.chunked = parse_flag(key, value)?,
            "replay_no_stall" => replay.no_stall = parse_flag(key, value)?,
            "replay_time_scale" => replay.time_scale_pct = parse_int(key, v()?, 1, u64::from(u32::MAX))?,
            "replay_redirect" => replay.redirect = Some(v()?.to_string()),
            "replay_align" => {
                let align = parse_size(key, v()?)?;
                if !align.is_power_of_two() && align != 0 {
                    return err(format!("{key}: must be a power of 2, got '{}'", v()?));
                }
                replay.align_bytes = align;
            }
            "replay_scale" => replay.scale = parse_int(key, v()?, 0, u64::MAX)?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sizes_per_direction_as_fio_reads_them() {
        // HOWTO.rst's examples of bs=.
        for (v, want) in [
            ("256k", [262_144, 262_144, 262_144]),
            ("8k,32k", [8192, 32_768, 32_768]),
            ("8k,32k,", [8192, 32_768, 4096]),
            (",8k", [4096, 8192, 8192]),
            (",8k,", [4096, 8192, 4096]),
            ("1k,2k,3k", [1024, 2048, 3072]),
        ] {
            let mut o = JobOptions::defaults("j");
            o.set("bs", Some(v)).unwrap();
            assert_eq!([o.bs_read, o.bs_write, o.bs_trim], want, "bs={v}");
        }
        let mut o = JobOptions::defaults("j");
        assert!(o.set("bs", Some("1k,2k,3k,4k")).unwrap_err().0.contains("at most 3"));
        assert!(o.set("bs", Some("4k,0")).unwrap_err().0.contains("positive"));
    }
}
