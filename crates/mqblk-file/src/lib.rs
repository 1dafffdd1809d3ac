//! The `file:` driver: real I/O on a regular file or a block device with
//! io_uring, one ring per hardware queue (ring.rs).
//!
//! | key | default | meaning |
//! |---|---|---|
//! | path | (required) | the file or block device |
//! | direct | 0 | open with O_DIRECT (bypass the page cache) |
//! | size | the file's | device size in bytes (k/m/g suffixes); with create=1, the file is extended to it |
//! | create | 0 | create the file if it does not exist |
//! | queue_depth | 128 | tags (and SQ entries) per hardware queue |
//! | submit_queues | 1 | hardware queues, one ring each with a completion thread |
//! | poll_queues | 0 | poll queues: rings with IORING_SETUP_IOPOLL for hipri I/O (needs direct=1 and a device that supports polling) |
//! | bs | 512; 4096 with direct=1; BLKSSZGET for block devices | logical block size |
//! | registerfiles | 1 | register the file with each ring (fio's registerfiles) |
//! | readonly | 0 | open read-only (writes fail with EBADF from the kernel) |
//! | single_issuer | 0 | with reap=client: each ring is used by one thread only (one client per ring, sched=none), so rings get IORING_SETUP_SINGLE_ISSUER and DEFER_TASKRUN as fio sets them (completions then reach a client only through its own io_uring_enter: a reap that does not sleep enters when the kernel marks task work pending); I/O from another thread fails. The C library's fast setting for programs that use each queue from one thread (fio); not its default, since libblkio lets a queue move between threads |
//! | reap | thread | `thread`: each ring's completion thread reaps it and wakes clients (interrupt style); `client`: no completion thread, a client waiting for its I/O reaps its ring itself, sleeping in io_uring_enter (fio's io_uring engine's way; give each client its own ring with submit_queues; a client's completion fd is registered with its ring). `mqblk bench` and the C library use `client` for a spec that names none of reap, submit_queues, poll_queues (`reaped_file_spec`) |
//!
//! Ops: read and write (readv/writev of a request's segments), flush
//! (fdatasync), FUA (RWF_DSYNC), discard and write zeroes (files: a punched
//! hole; block devices: BLKDISCARD / BLKZEROOUT). Buffers are the clients'
//! own, so they are not registered with the rings (io_uring could only
//! register fixed regions known in advance).
//!
//! Relies on: ring.rs, the Driver trait, the io-uring crate.

mod ring;

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;

use mqblk::config::{ConfigError, SpecParams};
use mqblk::driver::{Driver, QueueRqResult};
use mqblk::Error;
use mqblk::Hctx;
use mqblk::QueueLimits;
use mqblk::Status;
use mqblk::TagSetConfig;
use mqblk::{Op, Rq};

use ring::Ring;

/// The fast configuration of a `file:` spec for `nr_clients` clients that
/// can reap (they wait in `do_io`, or on a completion fd, which is then
/// registered with their ring): `reap=client` and a ring per client, as
/// fio's io_uring engine runs. The driver's own default (`reap=thread`, a
/// completion thread per ring waking the clients) suits any client, but
/// costs about half the IOPS of a tmpfs file at QD32 (BENCHMARKS.md, issue
/// 20, "fast by default"); `mqblk bench` and the C library, whose clients
/// reap, open plain file specs through this. None when `spec` is not a
/// file spec or already names `reap`, `submit_queues` or `poll_queues`
/// (its author chose).
pub fn reaped_file_spec(spec: &str, nr_clients: usize) -> Option<String> {
    let params = spec.strip_prefix("file:")?;
    let named = |key: &str| params.split(',').any(|kv| kv.split('=').next() == Some(key));
    if named("reap") || named("submit_queues") || named("poll_queues") {
        return None;
    }
    Some(format!("{spec},reap=client,submit_queues={}", nr_clients.clamp(1, 64)))
}

#[cfg(test)]
mod spec_tests {
    use super::reaped_file_spec;

    #[test]
    fn a_plain_file_spec_gets_a_reaped_ring_per_client() {
        assert_eq!(reaped_file_spec("file:path=/x", 2).as_deref(), Some("file:path=/x,reap=client,submit_queues=2"));
        let direct = reaped_file_spec("file:path=/x,direct=1", 0);
        assert_eq!(direct.as_deref(), Some("file:path=/x,direct=1,reap=client,submit_queues=1"));
        assert_eq!(reaped_file_spec("file:path=/x", 500).as_deref(), Some("file:path=/x,reap=client,submit_queues=64"));
        // A path that merely contains a key's name names no key.
        assert!(reaped_file_spec("file:path=/reap=thread", 1).is_some());
    }

    #[test]
    fn a_spec_that_chose_is_left_alone() {
        for spec in
            ["file:path=/x,reap=thread", "file:path=/x,submit_queues=3", "file:path=/x,poll_queues=1", "null:gb=1"]
        {
            assert_eq!(reaped_file_spec(spec, 1), None, "{spec}");
        }
    }
}

pub const FILE_KEYS: &[&str] = &[
    "path",
    "direct",
    "size",
    "create",
    "queue_depth",
    "submit_queues",
    "poll_queues",
    "bs",
    "registerfiles",
    "readonly",
    "reap",
    "single_issuer",
];

/// Segments one request may carry (its iovec array).
const MAX_SEGMENTS: u32 = 128;

// <linux/fs.h>
const BLKGETSIZE64: u64 = (2 << 30) | (8 << 16) | (0x12 << 8) | 114;
const BLKSSZGET: u64 = 0x1268;
const BLKDISCARD: u64 = 0x1277;
const BLKZEROOUT: u64 = 0x127f;

/// The `file:` spec's parameters: `FileConfig::new(path)` has the
/// defaults of the module table, changed by a setter named as each field.
/// The same checks as a `file:` spec apply when the device is built.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileConfig {
    pub path: String,
    pub direct: bool,
    pub size_bytes: Option<u64>,
    pub create: bool,
    pub queue_depth: u32,
    pub submit_queues: usize,
    pub poll_queues: usize,
    pub bs: Option<u32>,
    pub register_files: bool,
    pub readonly: bool,
    /// `reap=client`: submitters reap their rings (no completion threads).
    pub reap_by_client: bool,
    /// `single_issuer=1` (needs reap=client).
    pub single_issuer: bool,
}

/// "4096", "64k", "1g": bytes.
fn parse_bytes(p: &SpecParams, key: &str) -> Result<Option<u64>, ConfigError> {
    let Some(v) = p.raw(key) else { return Ok(None) };
    let (num, shift) = match v.chars().last().map(|c| c.to_ascii_lowercase()) {
        Some('k') => (&v[..v.len() - 1], 10),
        Some('m') => (&v[..v.len() - 1], 20),
        Some('g') => (&v[..v.len() - 1], 30),
        Some('t') => (&v[..v.len() - 1], 40),
        _ => (v, 0),
    };
    let bad = || ConfigError::BadValue {
        driver: p.driver.clone(),
        key: key.into(),
        value: v.into(),
        expected: "a byte count such as 1048576, 64k, 4g".into(),
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    n.checked_mul(1 << shift).map(Some).ok_or_else(bad)
}

impl FileConfig {
    /// The defaults of the module table, on `path`.
    pub fn new(path: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            direct: false,
            size_bytes: None,
            create: false,
            queue_depth: 128,
            submit_queues: 1,
            poll_queues: 0,
            bs: None,
            register_files: true,
            readonly: false,
            reap_by_client: false,
            single_issuer: false,
        }
    }

    /// Device size in bytes (`size=`; default: the file's).
    pub fn size_bytes(mut self, size_bytes: u64) -> Self {
        self.size_bytes = Some(size_bytes);
        self
    }

    /// Logical block size (`bs=`).
    pub fn bs(mut self, bs: u32) -> Self {
        self.bs = Some(bs);
        self
    }

    mqblk::setters! {
        direct: bool,
        create: bool,
        queue_depth: u32,
        submit_queues: usize,
        poll_queues: usize,
        register_files: bool,
        readonly: bool,
        reap_by_client: bool,
        single_issuer: bool,
    }

    /// Checks every value as a `file:` spec's would be (errors name the
    /// spec key).
    pub fn validate(&self) -> Result<Self, ConfigError> {
        let b = |v: bool| u64::from(v).to_string();
        let mut pairs = vec![
            ("path", self.path.clone()),
            ("direct", b(self.direct)),
            ("create", b(self.create)),
            ("queue_depth", self.queue_depth.to_string()),
            ("submit_queues", self.submit_queues.to_string()),
            ("poll_queues", self.poll_queues.to_string()),
            ("registerfiles", b(self.register_files)),
            ("readonly", b(self.readonly)),
            ("reap", if self.reap_by_client { "client" } else { "thread" }.to_string()),
            ("single_issuer", b(self.single_issuer)),
        ];
        pairs.extend(self.size_bytes.map(|v| ("size", v.to_string())));
        pairs.extend(self.bs.map(|v| ("bs", v.to_string())));
        let pairs = pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        Self::from_params(&SpecParams::from_pairs("file", pairs))
    }

    pub fn from_params(p: &SpecParams) -> Result<Self, ConfigError> {
        p.check_keys(FILE_KEYS)?;
        let path = p.raw("path").ok_or_else(|| p.conflict("path=... is required (a file or a block device)"))?;
        let bs = match p.raw("bs") {
            None => None,
            Some(_) => {
                let bs = p.u64_in("bs", 512, 512, 65536)? as u32;
                if !bs.is_power_of_two() {
                    return Err(p.conflict(format!("bs={bs} is not a power of two")));
                }
                Some(bs)
            }
        };
        Ok(Self {
            path: path.to_string(),
            direct: p.bool("direct", false)?,
            size_bytes: parse_bytes(p, "size")?,
            create: p.bool("create", false)?,
            queue_depth: p.u64_in("queue_depth", 128, 1, 4096)? as u32,
            submit_queues: p.u64_in("submit_queues", 1, 1, 64)? as usize,
            poll_queues: p.u64_in("poll_queues", 0, 0, 64)? as usize,
            bs,
            register_files: p.bool("registerfiles", true)?,
            readonly: p.bool("readonly", false)?,
            reap_by_client: p.choice("reap", "thread", &["thread", "client"])? == "client",
            single_issuer: p.bool("single_issuer", false)?,
        })
    }
}

/// A setup error naming the file: "file: {what} {path}: {e}".
fn setup_error(cfg: &FileConfig, what: &str, e: std::io::Error) -> Error {
    Error::Setup(format!("file: {what} {}: {e}", cfg.path))
}

/// Opens the file or block device of `cfg` and sizes it: the file,
/// whether it is a block device, its size in whole logical blocks (an
/// error if there is none) and the logical block size.
fn open_sized(cfg: &FileConfig) -> Result<(File, bool, u64, u32), Error> {
    let mut oo = OpenOptions::new();
    oo.read(true).write(!cfg.readonly).create(cfg.create && !cfg.readonly);
    if cfg.direct {
        oo.custom_flags(libc::O_DIRECT);
    }
    let file = oo.open(&cfg.path).map_err(|e| setup_error(cfg, "cannot open", e))?;
    let meta = file.metadata().map_err(|e| setup_error(cfg, "cannot stat", e))?;
    let blockdev = meta.file_type().is_block_device();
    let (size_bytes, lbs) = if blockdev { blockdev_size(cfg, &file)? } else { file_size(cfg, &file, meta.len())? };
    let size_bytes = size_bytes / u64::from(lbs) * u64::from(lbs);
    if size_bytes == 0 {
        return Err(Error::Setup(format!(
            "file: {} has no whole block of {lbs} bytes (give size=... with create=1 to make one)",
            cfg.path
        )));
    }
    Ok((file, blockdev, size_bytes, lbs))
}

/// A block device's size (BLKGETSIZE64, at most `size=`) and logical
/// block size (`bs=`, else BLKSSZGET).
fn blockdev_size(cfg: &FileConfig, file: &File) -> Result<(u64, u32), Error> {
    let fd = file.as_raw_fd();
    let (mut bytes, mut ssz) = (0u64, 0i32);
    // SAFETY: each ioctl writes one value of the pointed-to type.
    let ok = unsafe {
        libc::ioctl(fd, BLKGETSIZE64 as _, &mut bytes) == 0 && libc::ioctl(fd, BLKSSZGET as _, &mut ssz) == 0
    };
    if !ok {
        return Err(setup_error(cfg, "cannot size block device", std::io::Error::last_os_error()));
    }
    let size = cfg.size_bytes.map_or(bytes, |s| s.min(bytes));
    Ok((size, cfg.bs.unwrap_or(ssz as u32)))
}

/// A regular file's size (`size=`: the file is extended to it with
/// `create=1`, else it is at most the file's length) and logical block
/// size (`bs=`, else 4096 with direct=1 and 512 without).
fn file_size(cfg: &FileConfig, file: &File, file_len: u64) -> Result<(u64, u32), Error> {
    let lbs = cfg.bs.unwrap_or(if cfg.direct { 4096 } else { 512 });
    let size = match cfg.size_bytes {
        Some(s) if cfg.create && file_len < s => {
            file.set_len(s).map_err(|e| setup_error(cfg, "cannot extend", e))?;
            s
        }
        Some(s) => s.min(file_len),
        None => file_len,
    };
    Ok((size, lbs))
}

/// A device's rings, one per hardware queue, and their completion threads.
type RingsAndThreads = (Vec<Arc<Ring>>, Vec<JoinHandle<()>>);

/// One ring per hardware queue (with IORING_SETUP_IOPOLL for the poll
/// queues), and a completion thread for each ring that no client reaps.
fn start_rings(cfg: &FileConfig, fd: RawFd) -> Result<RingsAndThreads, Error> {
    let nr_rings = cfg.submit_queues + cfg.poll_queues;
    let mut rings = Vec::with_capacity(nr_rings);
    let mut threads = Vec::new();
    for i in 0..nr_rings {
        let iopoll = i >= cfg.submit_queues;
        let polled = iopoll || cfg.reap_by_client;
        let single = cfg.single_issuer && !iopoll;
        let ring = Ring::new(cfg.queue_depth, fd, cfg.register_files, iopoll, polled, single, MAX_SEGMENTS as usize)
            .map_err(|e| Error::Setup(format!("file: cannot create an io_uring ({e}): is io_uring available (kernel >= 5.6, not blocked by seccomp)?")))?;
        let ring = Arc::new(ring);
        if !polled {
            threads.push(
                ring::spawn_completion_thread(ring.clone(), i)
                    .map_err(|e| Error::Setup(format!("file: cannot start completion thread: {e}")))?,
            );
        }
        rings.push(ring);
    }
    Ok((rings, threads))
}

/// What a block device's sysfs says (rotational, max_sectors_kb, discard).
struct SysfsQueue {
    rotational: bool,
    max_sectors: u32,
    discard: bool,
}

fn sysfs_queue(file: &File) -> Option<SysfsQueue> {
    use std::os::unix::fs::MetadataExt;
    let rdev = file.metadata().ok()?.rdev();
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let base = format!("/sys/dev/block/{major}:{minor}/queue");
    let read =
        |name: &str| std::fs::read_to_string(format!("{base}/{name}")).ok().and_then(|s| s.trim().parse::<u64>().ok());
    Some(SysfsQueue {
        rotational: read("rotational")? == 1,
        max_sectors: (read("max_sectors_kb")? * 2).min(u64::from(u32::MAX)) as u32,
        discard: read("discard_max_bytes").unwrap_or(0) > 0,
    })
}

/// Makes `file:` specs open a file or block device
/// (`Device::open("file:path=disk.img")`), through the same registry an
/// outside driver uses. Call it once before opening specs; calling it
/// again changes nothing.
pub fn register() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| mqblk::register_driver("file", open));
}

/// A `file:` spec's driver.
fn open(p: &SpecParams) -> Result<Box<dyn Driver>, Error> {
    Ok(Box::new(FileDriver::from_params(p)?))
}

pub struct FileDriver {
    cfg: FileConfig,
    file: File,
    blockdev: bool,
    size_bytes: u64,
    lbs: u32,
    sysfs: Option<SysfsQueue>,
    rings: Box<[Arc<Ring>]>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl FileDriver {
    pub fn from_params(p: &SpecParams) -> Result<Self, Error> {
        Self::new(FileConfig::from_params(p)?)
    }

    /// A file device; `cfg` is checked first (`FileConfig::validate`).
    pub fn new(cfg: FileConfig) -> Result<Self, Error> {
        let cfg = cfg.validate()?;
        let (file, blockdev, size_bytes, lbs) = open_sized(&cfg)?;
        if cfg.single_issuer && !cfg.reap_by_client {
            return Err(Error::Setup(
                "file: single_issuer=1 needs reap=client (a completion thread would issue too)".into(),
            ));
        }
        if cfg.poll_queues > 0 && !cfg.direct {
            return Err(Error::Setup(
                "file: poll_queues needs direct=1 (IORING_SETUP_IOPOLL polls O_DIRECT I/O only)".into(),
            ));
        }
        let sysfs = if blockdev { sysfs_queue(&file) } else { None };
        let (rings, threads) = start_rings(&cfg, file.as_raw_fd())?;
        let d = Self {
            cfg,
            file,
            blockdev,
            size_bytes,
            lbs,
            sysfs,
            rings: rings.into_boxed_slice(),
            threads: Mutex::new(threads),
        };
        if d.cfg.poll_queues > 0 {
            d.probe_polling()?;
        }
        Ok(d)
    }

    /// Reads one block through the first poll ring: a file system or
    /// device that cannot poll fails it with EOPNOTSUPP, reported here
    /// instead of on the first hipri I/O.
    fn probe_polling(&self) -> Result<(), Error> {
        let mut buf = mqblk::Buf::new(self.lbs as usize);
        let iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let res = self.rings[self.cfg.submit_queues].probe_read(&iov);
        match res {
            r if r >= 0 => Ok(()),
            r => Err(Error::Setup(format!(
                "file: poll_queues: {} does not support polled I/O ({}); use poll_queues=0",
                self.cfg.path,
                std::io::Error::from_raw_os_error(-r)
            ))),
        }
    }

    /// Block devices: discard and write zeroes are ioctls, done inline.
    fn blockdev_range_op(&self, rq: &Rq) -> Status {
        let range = [rq.pos_bytes(), rq.len_bytes()];
        let request = if rq.op() == Op::Discard { BLKDISCARD } else { BLKZEROOUT };
        // SAFETY: the ioctl reads two u64s.
        if unsafe { libc::ioctl(self.file.as_raw_fd(), request as _, range.as_ptr()) } == 0 {
            Status::Ok
        } else {
            Status::from_errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO))
        }
    }
}

impl Driver for FileDriver {
    fn name(&self) -> &str {
        "file"
    }

    fn tag_set(&self) -> TagSetConfig {
        let mut t = TagSetConfig::new(self.rings.len(), self.cfg.queue_depth);
        t.poll_queues = self.cfg.poll_queues;
        t.submitter_reaps = self.cfg.reap_by_client;
        t
    }

    fn limits(&self) -> QueueLimits {
        let mut l = QueueLimits::new(self.size_bytes, self.lbs);
        let lbs_sectors = self.lbs >> 9;
        let max_sectors = self.sysfs.as_ref().map_or(2048, |s| s.max_sectors.max(lbs_sectors));
        l.max_sectors = max_sectors / lbs_sectors * lbs_sectors;
        l.max_segments = MAX_SEGMENTS;
        l.rotational = self.sysfs.as_ref().is_some_and(|s| s.rotational);
        let discard = !self.blockdev || self.sysfs.as_ref().is_some_and(|s| s.discard);
        if discard {
            l.max_discard_sectors = (u32::MAX >> 9) / lbs_sectors * lbs_sectors;
        }
        l.max_write_zeroes_sectors = (u32::MAX >> 9) / lbs_sectors * lbs_sectors;
        l.write_cache = true;
        l.fua = true;
        l
    }

    fn queue_rq(&self, hctx: &Hctx, rq: Rq, last: bool) -> QueueRqResult {
        if self.blockdev && matches!(rq.op(), Op::Discard | Op::WriteZeroes) {
            let status = self.blockdev_range_op(&rq);
            rq.complete(status);
            if last {
                self.rings[hctx.index()].submit();
            }
            return QueueRqResult::Queued;
        }
        self.rings[hctx.index()].queue(rq, last);
        QueueRqResult::Queued
    }

    fn commit_rqs(&self, hctx: &Hctx) {
        self.rings[hctx.index()].submit();
    }

    fn poll(&self, hctx: &Hctx) -> usize {
        self.poll_ring(hctx, true)
    }

    fn reap(&self, hctx: &Hctx) -> usize {
        self.poll_ring(hctx, false)
    }

    /// Registered buffers always; block status for files (a block device
    /// cannot tell its holes).
    fn capabilities(&self) -> mqblk::driver::Capabilities<'_> {
        let caps = mqblk::driver::Capabilities::none().fixed_buffers(self);
        if self.blockdev {
            caps
        } else {
            caps.block_status(self)
        }
    }

    fn poll_fd(&self, hctx: &Hctx) -> Option<RawFd> {
        // IOPOLL rings complete only when driven; they have no useful fd.
        let ring = &self.rings[hctx.index()];
        (ring.polled && !ring.is_iopoll()).then(|| ring.fd())
    }

    fn set_notify_fd(&self, hctx: &Hctx, fd: Option<RawFd>) -> Result<(), Error> {
        let ring = &self.rings[hctx.index()];
        // Rings with a completion thread signal clients through mqblk's own
        // eventfd path; IOPOLL rings post nothing until polled.
        if !ring.polled || ring.is_iopoll() {
            return Ok(());
        }
        ring.set_eventfd(fd).map_err(|e| match e.raw_os_error() {
            Some(libc::EBUSY) => Error::Busy(format!(
                "file: hardware queue {}'s ring already signals another client's completion fd: give each client \
                 its own ring (submit_queues=N for N clients)",
                hctx.index()
            )),
            _ => Error::Setup(format!(
                "file: registering a completion eventfd with hardware queue {}'s ring: {e}",
                hctx.index()
            )),
        })
    }

    fn shutdown(&self) {
        for r in self.rings.iter().filter(|r| !r.polled) {
            r.stop();
        }
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
    }

    fn show(&self, out: &mut String) {
        let c = &self.cfg;
        let _ = writeln!(
            out,
            "file/path={} direct={} size_bytes={} bs={} blockdev={} rings={} poll_queues={} fixed_ios={}",
            c.path,
            c.direct as u8,
            self.size_bytes,
            self.lbs,
            self.blockdev as u8,
            self.rings.len(),
            c.poll_queues,
            self.rings.iter().map(|r| r.fixed_ios.load(std::sync::atomic::Ordering::Relaxed)).sum::<usize>()
        );
    }
}

impl FileDriver {
    /// Reaps the ring of `hctx` if its clients reap it (`wait`: sleep in
    /// the kernel when nothing is there, with requests in flight).
    fn poll_ring(&self, hctx: &Hctx, wait: bool) -> usize {
        let ring = &self.rings[hctx.index()];
        if !ring.polled {
            return 0;
        }
        ring.poll(wait)
    }
}

impl Drop for FileDriver {
    fn drop(&mut self) {
        if !self.threads.lock().is_empty() {
            self.shutdown();
        }
    }
}

/// Holes and data of a regular file.
impl mqblk::driver::BlockStatus for FileDriver {
    /// SEEK_DATA / SEEK_HOLE.
    fn block_status(&self, offset: u64, len: u64, out: &mut Vec<(u64, bool)>) {
        let fd = self.file.as_raw_fd();
        let end = offset + len;
        let mut pos = offset;
        while pos < end && out.len() < mqblk::driver::MAX_EXTENTS {
            // SAFETY: lseek on our own fd; errors are checked.
            let data = unsafe { libc::lseek(fd, pos as libc::off_t, libc::SEEK_DATA) };
            let next = if data < 0 || data as u64 >= end {
                out.push((end - pos, true)); // no data up to the end (ENXIO: none at all)
                end
            } else if data as u64 > pos {
                out.push((data as u64 - pos, true));
                data as u64
            } else {
                // SAFETY: as above.
                let hole = unsafe { libc::lseek(fd, pos as libc::off_t, libc::SEEK_HOLE) };
                let stop = if hole < 0 { end } else { (hole as u64).clamp(pos + 1, end) };
                out.push((stop - pos, false));
                stop
            };
            pos = next;
        }
    }
}

/// io_uring's registered buffers, on every ring.
impl mqblk::driver::FixedBuffers for FileDriver {
    fn register_buffers(&self, bufs: &mqblk::FixedBufs) -> Result<(), Error> {
        for ring in self.rings.iter() {
            ring.register_fixed(bufs)
                .map_err(|e| Error::Setup(format!("file: registering {} fixed buffer bytes: {e}", bufs.span().1)))?;
        }
        Ok(())
    }
}
