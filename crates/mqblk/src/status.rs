//! `Status`: how an I/O ended, shaped like the kernel's `blk_status_t`.
//!
//! Each value maps to the errno the kernel reports to user space for it
//! (block/blk-core.c's `blk_errors` table), so callers that speak POSIX
//! (the NBD server, the io_uring driver) translate in one place.

use std::fmt;

/// Completion status of a request, like `blk_status_t`.
///
/// ```
/// use mqblk::Status;
///
/// assert!(Status::Ok.is_ok() && Status::Ok.to_io_error().is_none());
/// assert_eq!((Status::Medium.name(), Status::Medium.errno()), ("MEDIUM", libc::ENODATA));
/// assert_eq!(Status::from_errno(libc::ENOSPC), Status::NoSpc);
/// assert_eq!(Status::from_errno(libc::EROFS), Status::IoErr, "anything else");
/// assert_eq!(Status::Timeout.to_io_error().unwrap().raw_os_error(), Some(libc::ETIMEDOUT));
/// assert!(Status::IoErr.to_string().starts_with("IOERR ("));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum Status {
    /// Success.
    Ok = 0,
    /// Operation not supported by the device (EOPNOTSUPP).
    NotSupp,
    /// The request timed out (ETIMEDOUT).
    Timeout,
    /// No space left (ENOSPC).
    NoSpc,
    /// Transport error (ENOLINK).
    Transport,
    /// Target error (EREMOTEIO).
    Target,
    /// Medium error (ENODATA).
    Medium,
    /// Integrity/protection error (EILSEQ).
    Protection,
    /// Out of resources, retry later (ENOMEM).
    Resource,
    /// Device resource busy, retry later (EBUSY).
    DevResource,
    /// Would block under NOWAIT (EAGAIN).
    Again,
    /// Device offline (ENODEV).
    Offline,
    /// Invalid request: out of range, misaligned, too large (EINVAL).
    Invalid,
    /// Generic I/O error (EIO).
    IoErr,
    /// Too many open zones (ETOOMANYREFS).
    ZoneOpenResource,
    /// Too many active zones (EOVERFLOW).
    ZoneActiveResource,
}

impl Status {
    /// The errno the kernel returns to user space for this status (0 for Ok).
    pub fn errno(self) -> i32 {
        match self {
            Status::Ok => 0,
            Status::NotSupp => libc::EOPNOTSUPP,
            Status::Timeout => libc::ETIMEDOUT,
            Status::NoSpc => libc::ENOSPC,
            Status::Transport => libc::ENOLINK,
            Status::Target => libc::EREMOTEIO,
            Status::Medium => libc::ENODATA,
            Status::Protection => libc::EILSEQ,
            Status::Resource => libc::ENOMEM,
            Status::DevResource => libc::EBUSY,
            Status::Again => libc::EAGAIN,
            Status::Offline => libc::ENODEV,
            Status::Invalid => libc::EINVAL,
            Status::IoErr => libc::EIO,
            Status::ZoneOpenResource => libc::ETOOMANYREFS,
            Status::ZoneActiveResource => libc::EOVERFLOW,
        }
    }

    /// The status stored as `self as u8` (anything unknown reads as IoErr).
    pub(crate) fn from_u8(v: u8) -> Status {
        const ALL: [Status; 16] = [
            Status::Ok,
            Status::NotSupp,
            Status::Timeout,
            Status::NoSpc,
            Status::Transport,
            Status::Target,
            Status::Medium,
            Status::Protection,
            Status::Resource,
            Status::DevResource,
            Status::Again,
            Status::Offline,
            Status::Invalid,
            Status::IoErr,
            Status::ZoneOpenResource,
            Status::ZoneActiveResource,
        ];
        ALL.get(v as usize).copied().unwrap_or(Status::IoErr)
    }

    /// The kernel's name for it (`BLK_STS_*` without the prefix).
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::NotSupp => "NOTSUPP",
            Status::Timeout => "TIMEOUT",
            Status::NoSpc => "NOSPC",
            Status::Transport => "TRANSPORT",
            Status::Target => "TARGET",
            Status::Medium => "MEDIUM",
            Status::Protection => "PROTECTION",
            Status::Resource => "RESOURCE",
            Status::DevResource => "DEV_RESOURCE",
            Status::Again => "AGAIN",
            Status::Offline => "OFFLINE",
            Status::Invalid => "INVAL",
            Status::IoErr => "IOERR",
            Status::ZoneOpenResource => "ZONE_OPEN_RESOURCE",
            Status::ZoneActiveResource => "ZONE_ACTIVE_RESOURCE",
        }
    }

    /// Is it `Ok`?
    pub fn is_ok(self) -> bool {
        self == Status::Ok
    }

    /// The status an errno from the kernel becomes (the inverse of
    /// `errno`, as blk_status_to_errno's table read backwards; anything
    /// else is an I/O error).
    pub fn from_errno(errno: i32) -> Status {
        match errno {
            0 => Status::Ok,
            libc::EOPNOTSUPP => Status::NotSupp,
            libc::ETIMEDOUT => Status::Timeout,
            libc::ENOSPC | libc::EDQUOT | libc::EFBIG => Status::NoSpc,
            libc::ENOLINK => Status::Transport,
            libc::EREMOTEIO => Status::Target,
            libc::ENODATA => Status::Medium,
            libc::EILSEQ => Status::Protection,
            libc::ENOMEM => Status::Resource,
            libc::EBUSY => Status::DevResource,
            libc::EAGAIN => Status::Again,
            libc::ENODEV | libc::ENXIO => Status::Offline,
            libc::EINVAL => Status::Invalid,
            libc::ETOOMANYREFS => Status::ZoneOpenResource,
            libc::EOVERFLOW => Status::ZoneActiveResource,
            _ => Status::IoErr,
        }
    }

    /// As an `io::Error` (None for Ok).
    pub fn to_io_error(self) -> Option<std::io::Error> {
        (self != Status::Ok).then(|| std::io::Error::from_raw_os_error(self.errno()))
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Status::Ok {
            return f.write_str("OK");
        }
        write!(f, "{} ({})", self.name(), std::io::Error::from_raw_os_error(self.errno()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u8_round_trip() {
        for v in 0..16u8 {
            assert_eq!(Status::from_u8(v) as u8, v);
        }
        assert_eq!(Status::from_u8(200), Status::IoErr);
    }

    #[test]
    fn zone_statuses_map_like_the_kernel() {
        assert_eq!(Status::IoErr.errno(), libc::EIO);
        assert_eq!(Status::ZoneOpenResource.errno(), libc::ETOOMANYREFS);
        assert_eq!(Status::ZoneActiveResource.errno(), libc::EOVERFLOW);
        assert!(Status::Ok.to_io_error().is_none());
    }

    #[test]
    fn errno_round_trip() {
        for v in 0..16u8 {
            let s = Status::from_u8(v);
            assert_eq!(Status::from_errno(s.errno()), s, "{s:?}");
        }
        assert_eq!(Status::from_errno(libc::EROFS), Status::IoErr);
    }
}
