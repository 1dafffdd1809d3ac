//! A job's setup before its I/O loop (job.rs): its region of the device,
//! the zones it writes (`zonemode=zbd`), its verifier (`verify`), the
//! trace it replays (`read_iolog`, opened by the main thread before the
//! jobs start), the log it writes (`write_iolog`) and every slot's
//! buffers. All allocation of a job happens here, before the run.

use mqblk::{Buf, Device};

use super::buffers::{fill_initial, BufferOptions};
use super::iolog::{IologWriter, ReplayRules};
use super::options::JobOptions;
use super::replay::{OpenTrace, Replay, TraceSummary};
use super::verify::Verifier;
use super::zbd::{SharedZones, ZbdJob};

/// The job's region of the device: (offset, length), bytes.
pub(super) fn job_region(opts: &JobOptions, dev: &Device, job_index: usize) -> Result<(u64, u64), String> {
    let capacity = dev.limits().capacity_bytes;
    let offset = opts.offset.saturating_add((job_index as u64).saturating_mul(opts.offset_increment));
    if offset >= capacity {
        return Err(format!("job '{}': offset {offset} is beyond the device size {capacity}", opts.name));
    }
    let max_bs = opts.max_bs();
    // fio: without `size`, a job covers its file (`filesize`), else the
    // device from its offset on.
    // fio's `fill_device`: without `size`, up to the device's end.
    let filesize = opts.filesize.filter(|_| !opts.fill_device);
    let region_len = opts.size.or(filesize).unwrap_or(capacity - offset).min(capacity - offset);
    if region_len < max_bs {
        return Err(format!("job '{}': size {region_len} is smaller than the block size {max_bs}", opts.name));
    }
    super::zones::align_zbd_region(opts, dev, (offset, region_len))
}

/// fio's `zonemode=zbd`: the job's view of the phase's shared zones.
pub(super) fn new_zbd(
    opts: &JobOptions,
    zones: Option<std::sync::Arc<SharedZones>>,
    job_index: usize,
    region: (u64, u64),
) -> Result<Option<ZbdJob>, String> {
    match (opts.zonemode_zbd, zones) {
        (false, _) => Ok(None),
        (true, None) => Err(format!("job '{}': zonemode=zbd on a device that is not zoned", opts.name)),
        (true, Some(zones)) => {
            Ok(Some(ZbdJob::new(opts, zones, job_index, region).map_err(|e| format!("job '{}': {e}", opts.name))?))
        }
    }
}

/// fio's `verify` (verify/), for the job's region and `depth` slots, on
/// the device driven by `driver` (its name in messages without `filename`).
pub(super) fn new_verifier(
    opts: &JobOptions,
    region: (u64, u64),
    depth: usize,
    job_index: usize,
    driver: &str,
) -> Result<Option<Verifier>, String> {
    let named = |e: String| format!("job '{}': {e}", opts.name);
    let Some(resolved) = super::verify::resolve(opts).map_err(|e| e.0)? else { return Ok(None) };
    if opts.zonemode_zbd {
        return Err(named("verify with zonemode=zbd is not supported (zone resets erase blocks)".into()));
    }
    Ok(Some(Verifier::new(opts, resolved, (region, depth), job_index, driver).map_err(named)?))
}

/// fio's `read_iolog`: the job's trace, parsed and checked against the
/// device before the run (a bad trace is bad input), and what it holds.
pub(super) fn new_replay(opts: &JobOptions, dev: &Device) -> Result<Option<OpenTrace>, String> {
    let Some(path) = &opts.read_iolog else { return Ok(None) };
    let limits = dev.limits();
    let rules = ReplayRules {
        no_stall: opts.replay.no_stall,
        time_scale_pct: opts.replay.time_scale_pct,
        redirect: opts.replay.redirect.is_some(),
        align_bytes: opts.replay.align_bytes,
        scale: opts.replay.scale,
        capacity_bytes: limits.capacity_bytes,
        logical_block_size: u64::from(limits.logical_block_size),
    };
    let replay = Replay::open(path, rules, opts.replay.chunked).map_err(|e| format!("job '{}': {e}", opts.name))?;
    Ok(Some(replay))
}

/// The job's queue depth: its `iodepth` (1 with a sync engine), or, as
/// fio, the depth probed from a replayed blktrace when `iodepth` was not
/// given.
pub(super) fn job_depth(opts: &JobOptions, trace: Option<&OpenTrace>) -> usize {
    let iodepth_given = opts.given.iter().any(|(k, _)| k == "iodepth");
    match trace.and_then(|(_, summary)| summary.probed_depth) {
        Some(depth) if !iodepth_given && opts.effective_iodepth() == opts.iodepth => depth,
        _ => opts.effective_iodepth(),
    }
}

/// fio's `write_iolog`: the log of what the job issues, naming the device
/// by its spec.
pub(super) fn new_iolog_writer(opts: &JobOptions, dev_name: &str) -> Result<Option<IologWriter>, String> {
    match &opts.write_iolog {
        Some(path) => Ok(Some(IologWriter::create(path, dev_name).map_err(|e| format!("job '{}': {e}", opts.name))?)),
        None => Ok(None),
    }
}

/// The buffer size of each slot for reads and for writes (None: the job
/// does not do them): the block sizes of its mix, or the largest transfer
/// of the trace it replays.
pub(super) fn buffer_sizes(
    opts: &JobOptions,
    read_pct: u32,
    trace: Option<&TraceSummary>,
) -> (Option<u64>, Option<u64>) {
    match trace {
        Some(t) => {
            ((t.max_read_bytes > 0).then_some(t.max_read_bytes), (t.max_write_bytes > 0).then_some(t.max_write_bytes))
        }
        None => {
            // A job that only trims has no buffers (`directions`).
            let (reads, writes) = opts.directions();
            debug_assert_eq!(reads, read_pct > 0);
            (reads.then_some(opts.max_bs_of(0)), writes.then_some(opts.max_bs_of(1)))
        }
    }
}

/// Each slot's read and write buffers (of `sizes`, from `buffer_sizes`):
/// of our own, or slots of the registered pool (`fixedbufs=1`).
pub(super) fn slot_buffers(
    fixed: Option<&mqblk::FixedBufs>,
    depth: usize,
    sizes: (Option<u64>, Option<u64>),
    (contents, job_index): (&BufferOptions, usize),
) -> (Vec<Option<Buf>>, Vec<Option<Buf>>) {
    let new_buf = |len: u64| match fixed {
        Some(pool) => pool.take(len as usize).expect("the fixedbufs pool has a slot for every job buffer"),
        None => Buf::new(len as usize),
    };
    let read_bufs: Vec<Option<Buf>> = (0..depth).map(|_| sizes.0.map(new_buf)).collect();
    // fio's default contents: random bytes (each slot's from a seed of
    // its own, so no two buffers are alike), or zeros or a pattern.
    let write_bufs: Vec<Option<Buf>> = (0..depth)
        .map(|slot| {
            sizes.1.map(|len| {
                let mut b = new_buf(len);
                let seed = 0x1234_5678_9abc_def1u64 ^ ((job_index << 20) + slot) as u64;
                fill_initial(&mut b, contents, seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                b
            })
        })
        .collect();
    (read_bufs, write_bufs)
}
