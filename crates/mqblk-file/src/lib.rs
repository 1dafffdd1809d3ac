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
//! | reap | thread | `thread`: each ring's completion thread reaps it and wakes clients (interrupt style); `client`: no completion thread, a client waiting for its I/O reaps its ring itself, sleeping in io_uring_enter (fio's io_uring engine's way; give each client its own ring with submit_queues; a client's completion fd is registered with its ring). `mqblk bench` and the C library use `client` for a spec that names none of reap, submit_queues, poll_queues (`FileConfig::reaped_by_clients`) |
//!
//! Ops: read and write (readv/writev of a request's segments), flush
//! (fdatasync), FUA (RWF_DSYNC), discard and write zeroes (files: a punched
//! hole; block devices: BLKDISCARD / BLKZEROOUT). Buffers are the clients'
//! own and are pinned per I/O, except the slots of a `FixedBufs` region a
//! client registered with the device (the `FixedBuffers` capability): I/O
//! into those uses the fixed opcodes (ring.rs).
//!
//! ```
//! use mqblk::Device;
//!
//! mqblk_file::register(); // `file:` specs now open files
//! let path = std::env::temp_dir().join(format!("mqblk-file-doc-{}.img", std::process::id()));
//! // A 1 MiB file, created: its size is the device's.
//! let dev = Device::open(&format!("file:path={},create=1,size=1m", path.display()))?;
//! assert_eq!(dev.limits().capacity_bytes, 1 << 20);
//! let mut client = dev.client();
//! client.write_at(&[3; 4096], 8192)?; // 4096 bytes at byte offset 8192
//! let mut back = [0; 4096];
//! client.read_at(&mut back, 8192)?;
//! assert_eq!(back, [3; 4096]);
//! drop((client, dev)); // shut down: the rings stop
//! assert_eq!(std::fs::read(&path)?[8192..12288], [3; 4096]);
//! std::fs::remove_file(&path)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Relies on: ring.rs, the Driver trait, the io-uring crate.

mod config;
mod ring;

pub use config::{FileConfig, Reap, FILE_KEYS};

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;

use mqblk::config::SpecParams;
use mqblk::driver::Hctx;
use mqblk::driver::Rq;
use mqblk::driver::{Driver, QueueRqResult};
use mqblk::Error;
use mqblk::Op;
use mqblk::QueueLimits;
use mqblk::ReqFlags;
use mqblk::Status;
use mqblk::TagSetConfig;

use ring::Ring;

/// Physical segments one request may carry: its iovec array, one READV or
/// WRITEV (a bio's most, BIO_MAX_VECS, so a vectored bio is one request
/// unless `max_sectors` cuts it). Any iovec length and address serve a
/// file (O_DIRECT's alignment is the file's own rule, checked by the
/// kernel), so there is no segment size or boundary limit.
const MAX_SEGMENTS: u32 = mqblk::BIO_MAX_VECS as u32;

// <linux/fs.h>
const BLKGETSIZE64: u64 = (2 << 30) | (8 << 16) | (0x12 << 8) | 114;
const BLKSSZGET: u64 = 0x1268;
const BLKDISCARD: u64 = 0x1277;
const BLKZEROOUT: u64 = 0x127f;

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
    let nr_rings = cfg.nr_submit_queues() + cfg.nr_poll_queues();
    let mut rings = Vec::with_capacity(nr_rings);
    let mut threads = Vec::new();
    for i in 0..nr_rings {
        let iopoll = i >= cfg.nr_submit_queues();
        let polled = iopoll || cfg.reaped_by_client();
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
/// outside driver uses: a spec's `file` keys parse into a [`FileConfig`].
/// Call it once before opening specs; calling it again changes nothing
/// (example: the crate docs).
///
/// ```
/// use mqblk::DeviceConfig;
/// use mqblk_file::FileConfig;
///
/// mqblk_file::register();
/// let cfg = DeviceConfig::parse("file:path=/dev/null,readonly=1,sched=mq-deadline")?;
/// assert!(cfg.driver::<FileConfig>().is_some_and(|f| f.readonly));
/// # Ok::<(), mqblk::ConfigError>(())
/// ```
pub fn register() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| mqblk::driver::register_driver_config("file", parse));
}

/// A `file:` spec's keys, typed.
fn parse(p: &SpecParams) -> Result<Box<dyn mqblk::driver::DriverConfig>, mqblk::config::ConfigError> {
    Ok(Box::new(FileConfig::from_params(p)?))
}

/// The `file:` driver: what a [`FileConfig`] opens. Programs usually let
/// the device open it ([`register`], `Device::builder`); a driver may also
/// be made first and handed over.
///
/// ```
/// use mqblk::config::SpecParams;
/// use mqblk::Device;
/// use mqblk_file::{FileConfig, FileDriver};
///
/// let path = std::env::temp_dir().join(format!("mqblk-file-driver-{}.img", std::process::id()));
/// let driver = FileDriver::new(FileConfig::new(path.to_str().unwrap()).create(true).size_bytes(64 << 10))?;
/// let dev = Device::with_driver(Box::new(driver))?;
/// assert_eq!((dev.driver_name(), dev.limits().capacity_bytes), ("file", 64 << 10));
/// drop(dev);
///
/// // From a spec's keys; the file now exists.
/// let driver = FileDriver::from_params(&SpecParams::parse(&format!("file:path={}", path.display()))?)?;
/// assert_eq!(Device::with_driver(Box::new(driver))?.limits().capacity_bytes, 64 << 10);
/// std::fs::remove_file(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
    /// A file device from a `file:` spec's keys (`FileConfig::from_params`).
    pub fn from_params(p: &SpecParams) -> Result<Self, Error> {
        Self::new(FileConfig::from_params(p)?)
    }

    /// A file device; `cfg` is checked first (`FileConfig::validate`).
    pub fn new(cfg: FileConfig) -> Result<Self, Error> {
        cfg.validate()?;
        let (file, blockdev, size_bytes, lbs) = open_sized(&cfg)?;
        if cfg.single_issuer && !cfg.reaped_by_client() {
            return Err(Error::Setup(
                "file: single_issuer=1 needs reap=client (a completion thread would issue too)".into(),
            ));
        }
        if cfg.nr_poll_queues() > 0 && !cfg.direct {
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
        if d.cfg.nr_poll_queues() > 0 {
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
        let res = self.rings[self.cfg.nr_submit_queues()].probe_read(&iov);
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

impl FileDriver {
    /// Files: a write zeroes with REQ_NOUNMAP keeps its blocks
    /// (FALLOC_FL_ZERO_RANGE), done inline as the block devices' ioctls
    /// are; where the file system has no ZERO_RANGE (tmpfs), zeros are
    /// written, which keeps the blocks too. A plain write zeroes punches
    /// a hole through the ring instead (sqe.rs).
    fn zero_range(&self, rq: &Rq) -> Status {
        let (pos, len) = (rq.pos_bytes(), rq.len_bytes());
        let mode = libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: fallocate on our own descriptor; no memory is passed.
        if unsafe { libc::fallocate(self.file.as_raw_fd(), mode, pos as i64, len as i64) } == 0 {
            return Status::Ok;
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
            return Status::from_errno(e.raw_os_error().unwrap_or(libc::EIO));
        }
        // Page aligned, for a file opened O_DIRECT.
        #[repr(align(4096))]
        struct Zeros([u8; 64 << 10]);
        static ZEROS: Zeros = Zeros([0; 64 << 10]);
        let mut at = 0;
        while at < len {
            let n = (len - at).min(ZEROS.0.len() as u64) as usize;
            if let Err(e) = std::os::unix::fs::FileExt::write_all_at(&self.file, &ZEROS.0[..n], pos + at) {
                return Status::from_errno(e.raw_os_error().unwrap_or(libc::EIO));
            }
            at += n as u64;
        }
        Status::Ok
    }
}

impl Driver for FileDriver {
    fn name(&self) -> &str {
        "file"
    }

    fn tag_set(&self) -> TagSetConfig {
        let mut t = TagSetConfig::new(self.rings.len(), self.cfg.queue_depth);
        t.poll_queues = self.cfg.nr_poll_queues();
        t.submitter_reaps = self.cfg.reaped_by_client();
        t
    }

    fn limits(&self) -> QueueLimits {
        let mut l = QueueLimits::new(self.size_bytes, self.lbs);
        let lbs_sectors = self.lbs >> 9;
        let max_sectors = self.sysfs.as_ref().map_or(2048, |s| s.max_sectors.max(lbs_sectors));
        l.max_sectors = max_sectors / lbs_sectors * lbs_sectors;
        l.max_segments = MAX_SEGMENTS;
        l.max_segment_size = u32::MAX;
        l.seg_boundary_mask = u64::MAX;
        // Every ring has its buffer table (not IOPOLL ones): ublk's zero
        // copy (ring/kbuf.rs).
        l.kernel_buffers = self.rings.iter().all(|r| r.kernel_buffers);
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
        let nounmap_zeroes = rq.op() == Op::WriteZeroes && rq.flags().contains(ReqFlags::NOUNMAP);
        if (self.blockdev && matches!(rq.op(), Op::Discard | Op::WriteZeroes)) || nounmap_zeroes {
            let status = if self.blockdev { self.blockdev_range_op(&rq) } else { self.zero_range(&rq) };
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

    /// Registered buffers and the file itself always; block status for
    /// files (a block device cannot tell its holes).
    fn capabilities(&self) -> mqblk::driver::Capabilities<'_> {
        let caps = mqblk::driver::Capabilities::none().fixed_buffers(self).backing_file(self);
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
            "file/path={} direct={} size_bytes={} bs={} blockdev={} rings={} poll_queues={} fixed_ios={} kernel_buffer_ios={}",
            c.path,
            c.direct as u8,
            self.size_bytes,
            self.lbs,
            self.blockdev as u8,
            self.rings.len(),
            c.nr_poll_queues(),
            self.rings.iter().map(|r| r.fixed_ios.load(std::sync::atomic::Ordering::Relaxed)).sum::<usize>(),
            self.rings.iter().map(|r| r.kernel_ios.load(std::sync::atomic::Ordering::Relaxed)).sum::<usize>()
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

/// The file itself, for a front end whose own ring holds a request's pages
/// (ublk's auto buffer registration).
impl mqblk::driver::BackingFile for FileDriver {
    fn backing_fd(&self) -> RawFd {
        self.file.as_raw_fd()
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
