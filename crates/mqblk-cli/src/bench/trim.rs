//! fio's trims: `rw=trim` and `rw=randtrim` (each I/O a discard of the
//! job's trim block size, the third of `bs=R,W,T`, sequential or at random
//! offsets), `rw=trimwrite` and `rw=randtrimwrite` (a discard, then a write
//! of the block just discarded, in turn). A trim is the device's discard
//! (`Bio::discard`); fio's trim statistics are the third direction of
//! stats.rs (`Dir::Trim`) and of every report.
//!
//! Trim jobs run the job loop's `SHAPED` copy (job/shaped.rs picks each
//! I/O's direction and a trimwrite's offsets), so the synthetic loop never
//! tests for them. fio's trimwrite walks its writes with their own block
//! size, meeting the trims' offsets when the sizes are equal (the
//! default); here each write covers the block its trim discarded, of the
//! trim's size, as fio's randtrimwrite does.
//!
//! Relies on the device's queue limits (`max_discard_sectors`, 0 when it
//! has no discard) to refuse a trim job up front.

use std::borrow::Cow;

use mqblk::Device;

use super::options::{err, JobOptions, OptionError, RwMode};

/// How a job's I/Os alternate between trims and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Trims {
    /// No trims: the job's read/write mix decides.
    None,
    /// Every I/O is a trim.
    Only,
    /// A trim, then a write of the block trimmed.
    ThenWrite,
}

impl Trims {
    pub(super) fn of(opts: &JobOptions) -> Self {
        match opts.rw {
            // A replayed trace decides its own directions.
            _ if opts.read_iolog.is_some() => Trims::None,
            RwMode::Trim | RwMode::RandTrim => Trims::Only,
            RwMode::TrimWrite | RwMode::RandTrimWrite => Trims::ThenWrite,
            _ => Trims::None,
        }
    }
}

/// What a trim job cannot combine with, checked when its options are
/// complete.
pub(super) fn validate(opts: &JobOptions) -> Result<(), OptionError> {
    if !opts.rw.trims() || opts.read_iolog.is_some() {
        return Ok(());
    }
    let rw = opts.rw.name();
    let conflict = [
        (opts.verify.enabled(), "verify: a trim discards blocks the verifier expects to read back"),
        (
            opts.shape.rate_bytes != [0, 0, 0]
                || opts.shape.rate_iops != [0, 0, 0]
                || opts.shape.rate_min_bytes != [0, 0, 0]
                || opts.shape.rate_iops_min != [0, 0, 0],
            "rate options: bench paces reads and writes, not trims",
        ),
    ];
    match conflict.iter().find(|(bad, _)| *bad) {
        Some((_, why)) => err(format!("job '{}': rw={rw} with {why}", opts.name)),
        None => Ok(()),
    }
}

/// A trim job's options as its loop uses them: reads and writes of the
/// trim's size (its pattern's blocks, its region's check, a trimwrite's
/// write buffers); other jobs' unchanged.
pub(super) fn loop_options(opts: &JobOptions) -> Cow<'_, JobOptions> {
    if Trims::of(opts) == Trims::None {
        return Cow::Borrowed(opts);
    }
    let mut view = opts.clone();
    (view.bs_read, view.bs_write) = (opts.bs_trim, opts.bs_trim);
    Cow::Owned(view)
}

/// Every trim job needs a device with discard: refused before any job
/// starts, naming the job and what to give the device.
pub(super) fn check_device(jobs: &[JobOptions], dev: &Device) -> Result<(), String> {
    if dev.limits().max_discard_sectors > 0 {
        return Ok(());
    }
    // A zonemode=zbd job's trims are zone resets (zbd.rs).
    match jobs.iter().find(|j| Trims::of(j) != Trims::None && !j.zonemode_zbd) {
        Some(j) => Err(format!(
            "job '{}': rw={} needs a device that supports discard, and the {} device does not (the null and \
             ram drivers discard with discard=1 and memory_backed=1)",
            j.name,
            j.rw.name(),
            dev.driver_name()
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(opts: &[(&str, &str)]) -> JobOptions {
        let mut j = JobOptions::defaults("t");
        for (k, v) in opts {
            j.set(k, Some(v)).unwrap();
        }
        j
    }

    #[test]
    fn trim_modes_and_their_loop_block_size() {
        assert_eq!(Trims::of(&job(&[("rw", "randtrim")])), Trims::Only);
        assert_eq!(Trims::of(&job(&[("rw", "trimwrite")])), Trims::ThenWrite);
        assert_eq!(Trims::of(&job(&[("rw", "randrw")])), Trims::None);
        let j = job(&[("rw", "trim"), ("bs", "4k,8k,64k")]);
        let view = loop_options(&j);
        assert_eq!((view.bs_read, view.bs_write, view.bs_trim), (65_536, 65_536, 65_536));
        assert!(j.shaped(), "trims run the SHAPED loop");
        assert_eq!(j.directions(), (false, false));
    }

    #[test]
    fn what_trims_do_not_combine_with() {
        let e = validate(&job(&[("rw", "randtrim"), ("verify", "crc32c")])).unwrap_err();
        assert!(e.0.contains("rw=randtrim with verify"), "{e}");
        let e = validate(&job(&[("rw", "trimwrite"), ("rate", "1m")])).unwrap_err();
        assert!(e.0.contains("rate"), "{e}");
        assert!(validate(&job(&[("rw", "randwrite"), ("rate", "1m")])).is_ok());
    }

    /// Runs `opts` as one job on `dev` to its end.
    fn run(dev: &Device, opts: &[(&str, &str)]) -> super::super::job::JobResult {
        use std::sync::atomic::Ordering;

        use super::super::job::{run_job, Control, Live, PHASE_RUN};
        use super::super::start::StartGate;
        let gate = StartGate::new(1);
        let ctrl = Control { phase: Default::default(), start: &gate, zones: None };
        ctrl.phase.store(PHASE_RUN, Ordering::Release);
        let clock = mqblk::clock::Clock::best();
        run_job(&job(opts), dev, None, clock, 0, &ctrl, &Live::default(), None).unwrap()
    }

    fn read_back(dev: &Device, len_bytes: usize) -> Vec<u8> {
        let mut client = dev.client();
        let segs = client.submit_and_wait(mqblk::Bio::read(0, mqblk::Buf::new(len_bytes))).unwrap();
        segs.into_buf().unwrap().to_vec()
    }

    #[test]
    fn trims_zero_what_they_discard_on_a_memory_backed_null_device() {
        crate::register_drivers();
        let dev = Device::open("null:gb=1,memory_backed=1,discard=1,irqmode=0").unwrap();
        let w = run(&dev, &[("rw", "write"), ("bs", "64k"), ("size", "1m")]);
        assert_eq!((w.write.ios, w.trim.ios), (16, 0));
        // Sequential trims of 128k over [256k, 768k): 4 of them.
        let t = run(&dev, &[("rw", "trim"), ("bs", "4k,4k,128k"), ("offset", "256k"), ("size", "512k")]);
        assert_eq!((t.read.ios, t.write.ios, t.trim.ios, t.trim.bytes), (0, 0, 4, 512 << 10));
        assert_eq!(t.trim.clat.n, 4, "trims have latencies");
        let data = read_back(&dev, 1 << 20);
        let zero_blocks: Vec<usize> =
            data.chunks(64 << 10).enumerate().filter(|(_, b)| b.iter().all(|&x| x == 0)).map(|(i, _)| i).collect();
        assert_eq!(zero_blocks, (4..12).collect::<Vec<_>>(), "exactly the trimmed 64k blocks read zeros");
    }

    #[test]
    fn trimwrite_writes_each_block_it_trims() {
        crate::register_drivers();
        let dev = Device::open("null:gb=1,memory_backed=1,discard=1,irqmode=0").unwrap();
        let r = run(&dev, &[("rw", "randtrimwrite"), ("bs", "16k"), ("size", "256k"), ("iodepth", "4")]);
        // size counts both: 8 trims and 8 writes of 16k.
        assert_eq!((r.trim.ios, r.write.ios, r.read.ios), (8, 8, 0));
        let data = read_back(&dev, 256 << 10);
        let written = data.chunks(16 << 10).filter(|b| b.iter().any(|&x| x != 0)).count();
        assert_eq!(written, 8, "each trimmed block was written after its trim");
    }
}
