//! Errors of the block layer's API edges. Operating errors are values;
//! programmer errors (broken invariants) panic.

use crate::bio::{Bio, Op};
use crate::status::Status;

/// Why a bio was refused at submission, before reaching any driver. The
/// device is never touched by a refused bio.
///
/// ```
/// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
/// # ram::register();
/// use mqblk::{Bio, Buf, Device, Error, Status, SubmitError};
///
/// let dev = Device::open("ram:size=64,irqmode=0,bs=4096")?;
/// let mut client = dev.client();
/// let refused = client.submit(Bio::write(512, Buf::new(4096)), 1).unwrap_err();
/// let SubmitError::Misaligned { offset, logical_block_size, .. } = refused.error else { panic!() };
/// assert_eq!((offset, logical_block_size), (512, 4096));
/// assert_eq!((refused.error.status(), refused.error.errno()), (Status::Invalid, libc::EINVAL));
/// assert_eq!(refused.to_string(), refused.error.to_string());
///
/// // A discard on a device without discard support.
/// let refused = client.submit(Bio::discard(0, 4096), 2).unwrap_err();
/// assert_eq!(refused.error, SubmitError::NotSupported { op: mqblk::Op::Discard });
///
/// // The blocking helpers return it inside an `Error`.
/// let err = client.write_at(&[0; 512], 0).unwrap_err();
/// assert!(matches!(err, Error::Submit(SubmitError::Misaligned { .. })));
/// assert_eq!(err.errno(), libc::EINVAL);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubmitError {
    #[error("I/O of {len} bytes at offset {offset} goes past the end of the device ({capacity} bytes)")]
    OutOfRange { offset: u64, len: u64, capacity: u64 },
    #[error(
        "I/O at offset {offset} of {len} bytes is not aligned to the logical block size of {logical_block_size} bytes"
    )]
    Misaligned { offset: u64, len: u64, logical_block_size: u32 },
    #[error("{op:?} at offset {offset} does not name a zone of this device (zones are {zone_bytes} bytes)")]
    NotZoneStart { op: Op, offset: u64, zone_bytes: u64 },
    #[error("zero-length {op:?} I/O")]
    ZeroLength { op: Op },
    #[error("I/O of {len} bytes exceeds the largest bio of {max} bytes")]
    TooLarge { len: u64, max: u64 },
    #[error("{op:?} is not supported by this device")]
    NotSupported { op: Op },
    #[error("{op:?} needs data segments of the I/O's length ({len} bytes), got {buf_len:?}")]
    BadBuffer { op: Op, len: u64, buf_len: Option<usize> },
    #[error("a bio of {nr} segments: at most {max} (BIO_MAX_VECS)")]
    TooManySegments { nr: usize, max: usize },
    #[error("segment {index} of {len} bytes is not a positive multiple of the logical block size of {logical_block_size} bytes")]
    BadSegment { index: usize, len: usize, logical_block_size: u32 },
    #[error(
        "the bio's segments cannot be split within the queue's segment limits: at byte {at} of the bio no logical \
         block fits in one request (max_segments {max_segments}, seg_boundary_mask {seg_boundary_mask:#x})"
    )]
    Unsplittable { at: u64, max_segments: u32, seg_boundary_mask: u64 },
    #[error("{op:?} of {len} bytes over a kernel buffer refused: {reason}")]
    KernelBuffer { op: Op, len: u64, reason: &'static str },
    #[error("the client already has {max} I/Os in flight (its completion ring capacity): reap some with do_io first")]
    TooManyInFlight { max: usize },
    #[error("no free tag and NOWAIT was set")]
    Again,
    #[error("the device has no reserved tags (its driver's tag set reserves none)")]
    NoReservedTags,
}

impl SubmitError {
    /// The status a kernel would complete such a bio with.
    pub fn status(&self) -> Status {
        match self {
            SubmitError::NotSupported { .. } | SubmitError::NoReservedTags => Status::NotSupp,
            SubmitError::Again | SubmitError::TooManyInFlight { .. } => Status::Again,
            SubmitError::OutOfRange { .. } => Status::IoErr,
            _ => Status::Invalid,
        }
    }

    /// The errno of that status.
    pub fn errno(&self) -> i32 {
        self.status().errno()
    }
}

/// A refused submission: the error and the bio, given back with its buffer
/// (examples: [`SubmitError`], [`Client::submit`](crate::Client::submit)).
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct Rejected {
    /// Why.
    pub error: SubmitError,
    /// The bio, untouched.
    pub bio: Bio,
}

/// Errors of the blocking helpers and device set-up.
///
/// ```
/// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
/// # ram::register();
/// use mqblk::{Device, Error, Status};
///
/// let err = Device::open("ram:size=64,irqmode=3").unwrap_err();
/// assert!(matches!(err, Error::Config(_)));
/// assert_eq!(err.errno(), libc::EINVAL);
/// assert!(err.to_string().contains("irqmode"));
///
/// let dev = Device::open("ram:size=64,irqmode=0")?;
/// let err = dev.client().read_at(&mut [0; 512], 64 << 20).unwrap_err(); // past the end
/// assert_eq!(err.errno(), libc::EIO);
/// assert_eq!(Error::Status(Status::Medium).errno(), libc::ENODATA);
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The bio was refused before it reached the driver.
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// The I/O ended with this status.
    #[error("I/O failed: {0}")]
    Status(Status),
    /// A bad spec or config value, named.
    #[error("device configuration: {0}")]
    Config(#[from] crate::config::ConfigError),
    /// The device or its driver could not start.
    #[error("device set-up: {0}")]
    Setup(String),
    /// A resource is taken by another client (errno EBUSY).
    #[error("busy: {0}")]
    Busy(String),
    /// An error of the operating system.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Error {
    /// The errno a POSIX caller would see.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Submit(e) => e.errno(),
            Error::Status(s) => s.errno(),
            Error::Config(_) | Error::Setup(_) => libc::EINVAL,
            Error::Busy(_) => libc::EBUSY,
            Error::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}
