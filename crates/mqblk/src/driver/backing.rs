//! `BackingFile`: a driver whose data is one file this process holds open
//! (mqblk's file driver), byte for byte at the device's offsets, which a
//! front end with an io_uring of its own may read and write directly.
//!
//! Why a front end would: ublk's auto buffer registration (UBLK_F_AUTO_BUF_REG,
//! "ublk: register buffer to local io_uring with provided buf index via
//! UBLK_F_AUTO_BUF_REG", Linux 6.16) puts each request's pages in the ublk
//! queue's own ring, and only that ring can name them: the transfer has to
//! be that ring's READ_FIXED or WRITE_FIXED on the file. Such I/O passes no
//! mqblk scheduler, statistics or trace; the front end keeps its own
//! counts, and the kernel above it has its block layer already.
//!
//! Relies on: nothing; caps.rs lists it among a driver's capabilities.

use std::os::fd::RawFd;

/// A driver's backing file (example: mqblk_file's driver).
///
/// ```
/// use std::os::fd::{AsRawFd, RawFd};
/// use mqblk::driver::{BackingFile, Capabilities, Driver, Hctx, QueueRqResult, Rq};
/// use mqblk::{Device, QueueLimits, Status, TagSetConfig};
///
/// struct OnFile(std::fs::File);
///
/// impl Driver for OnFile {
///     fn name(&self) -> &str { "on-file" }
///     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 8) }
///     fn limits(&self) -> QueueLimits { QueueLimits::new(1 << 20, 512) }
///     fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
///         rq.complete(Status::Ok);
///         QueueRqResult::Queued
///     }
///     fn capabilities(&self) -> Capabilities<'_> {
///         Capabilities::none().backing_file(self)
///     }
/// }
///
/// impl BackingFile for OnFile {
///     fn backing_fd(&self) -> RawFd {
///         self.0.as_raw_fd()
///     }
/// }
///
/// let file = std::fs::File::open("/dev/null")?;
/// let fd = file.as_raw_fd();
/// let dev = Device::with_driver(Box::new(OnFile(file)))?;
/// assert_eq!(dev.backing_fd(), Some(fd));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait BackingFile: Send + Sync {
    /// The file, open as long as the driver lives; device byte N is the
    /// file's byte N, and the device's limits (logical block size, direct
    /// I/O alignment, read-only) hold for it as for the device.
    fn backing_fd(&self) -> RawFd;
}
