//! Unprivileged devices (UBLK_F_UNPRIVILEGED_DEV): a ublk device added and
//! served by a user without CAP_SYS_ADMIN (Documentation/block/ublk.rst,
//! "Unprivileged ublk").
//!
//! The kernel's rules (ublk_drv.c, Linux 6.12), which this module and
//! ctrl.rs follow:
//! - ADD_DEV from a caller without CAP_SYS_ADMIN must ask for
//!   UBLK_F_UNPRIVILEGED_DEV (else EPERM); from one with it, the flag is
//!   dropped and the device is privileged. The kernel records the caller's
//!   uid and gid as the device's owner (`owner_uid`, `owner_gid`).
//! - An unprivileged device gets no user recovery (the kernel drops
//!   UBLK_F_USER_RECOVERY and _REISSUE) and no user copy or zero copy
//!   (EINVAL), so no zoned device, which needs user copy. At most
//!   `ublks_max` (64) exist at once (EACCES beyond).
//! - Its control commands carry /dev/ublkcN and the kernel checks the
//!   caller's access to that node (ctrl.rs); opening /dev/ublkbN needs,
//!   besides the node's mode, the owner's uid and gid; its partitions are
//!   not scanned.
//! - /dev/ublkcN (at ADD_DEV) and /dev/ublkbN (at START_DEV) are created
//!   owned by root. The administrator's udev rule gives them to the owner
//!   (scripts/ublk-chown.sh), so the server waits for each to become
//!   readable and writable by it, `NODE_WAIT` at most.
//!
//! Relies on: uapi.rs, error.rs; libc (faccessat).

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::time::{Duration, Instant};

use mqblk::QueueLimits;

use crate::error::Error;
use crate::recovery::Recovery;
use crate::uapi;

/// How long the server waits for the udev rule to give it a device node.
/// udev runs the rule within a second on an idle machine; the guest test's
/// stand-in for it took up to 16 s under qemu TCG beside other builds, and
/// a minute still fails an unattended start without the rule in time.
pub const NODE_WAIT: Duration = Duration::from_secs(60);

/// How long a privileged server waits for /dev/ublkcN to appear (devtmpfs
/// creates it at once; the wait covers a /dev that udev populates).
const PRIVILEGED_NODE_WAIT: Duration = Duration::from_secs(2);

/// Between two looks at a node.
const NODE_POLL: Duration = Duration::from_millis(20);

/// Refuses, before ADD_DEV, what the kernel refuses or silently drops for
/// an unprivileged device, so that the error names the option.
pub fn check_options(limits: &QueueLimits, recovery: Recovery) -> Result<(), Error> {
    if recovery != Recovery::Off {
        return Err(Error::BadOption(
            "--unprivileged with --recovery: the kernel keeps no unprivileged device for recovery (it drops \
             UBLK_F_USER_RECOVERY); add it as root for recovery"
                .into(),
        ));
    }
    if limits.zoned.is_some() {
        return Err(Error::BadOption(
            "--unprivileged with a zoned device: zoned ublk needs UBLK_F_USER_COPY, which the kernel refuses for \
             unprivileged devices; serve it as root"
                .into(),
        ));
    }
    Ok(())
}

/// Checks the kernel's feature bits against those the device needs, with
/// a missing UBLK_F_UNPRIVILEGED_DEV named on its own.
pub fn check_features(features: u64, needed: u64) -> Result<(), Error> {
    let missing = needed & !features;
    if missing & uapi::UBLK_F_UNPRIVILEGED_DEV != 0 {
        return Err(Error::NoUnprivileged { offered: uapi::feature_names(features).join(", ") });
    }
    if missing != 0 {
        return Err(Error::MissingFeature {
            missing: uapi::feature_names(missing).join(", "),
            offered: uapi::feature_names(features).join(", "),
        });
    }
    Ok(())
}

/// Opens /dev/ublkcN for the server. An unprivileged server waits, up to
/// `NODE_WAIT`, for the node to exist and for the udev rule to give it to
/// the owner (until then the open is refused); a privileged one only for
/// it to exist.
pub fn open_char_device(dev_id: u32, unprivileged: bool) -> Result<File, Error> {
    let path = uapi::char_path(dev_id);
    let limit = if unprivileged { NODE_WAIT } else { PRIVILEGED_NODE_WAIT };
    let deadline = Instant::now() + limit;
    loop {
        let e = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => return Ok(f),
            Err(e) => e,
        };
        let not_given = unprivileged && e.kind() == io::ErrorKind::PermissionDenied;
        let waitable = e.kind() == io::ErrorKind::NotFound || not_given;
        if !waitable || Instant::now() >= deadline {
            return Err(if unprivileged && waitable {
                Error::NodeNotGiven { path, waited_secs: limit.as_secs(), source: e }
            } else {
                Error::Open { path, source: e }
            });
        }
        std::thread::sleep(NODE_POLL);
    }
}

/// Waits, up to `NODE_WAIT`, until this process may read and write
/// /dev/ublkbN (the udev rule has given it to the owner). Returns whether
/// it may; the device is served either way (root can use it, and the
/// administrator can still fix the node).
pub fn wait_for_block_node(dev_id: u32) -> bool {
    let path = uapi::block_path(dev_id);
    let deadline = Instant::now() + NODE_WAIT;
    loop {
        if may_read_and_write(&path) {
            return true;
        }
        if Instant::now() >= deadline {
            log::warn!(
                "{path} is still not readable and writable by you {} s after START_DEV: the kernel creates it \
                 owned by root, and the administrator's udev rule (scripts/ublk-chown.sh; README, \"ublk without \
                 root\") must give it to the device's owner",
                NODE_WAIT.as_secs()
            );
            return false;
        }
        std::thread::sleep(NODE_POLL);
    }
}

/// Whether the effective user may open `path` for reading and writing,
/// by the node's mode and owner (faccessat with AT_EACCESS): without
/// opening it, so that a block device is not opened on our behalf.
fn may_read_and_write(path: &str) -> bool {
    let Ok(c_path) = CString::new(path) else { return false };
    // SAFETY: `c_path` is a NUL-terminated string that lives across the
    // call; faccessat only reads it.
    let rc = unsafe { libc::faccessat(libc::AT_FDCWD, c_path.as_ptr(), libc::R_OK | libc::W_OK, libc::AT_EACCESS) };
    rc == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_kernel_refuses_unprivileged_devices_is_refused_by_option() {
        let plain = QueueLimits::new(1 << 30, 512);
        assert!(check_options(&plain, Recovery::Off).is_ok());
        let err = check_options(&plain, Recovery::Reissue).unwrap_err().to_string();
        assert!(err.contains("--recovery") && err.contains("UBLK_F_USER_RECOVERY"), "{err}");
        let mut zoned = plain.clone();
        zoned.zoned = Some(mqblk::zoned::ZonedLimits {
            zone_sectors: 1 << 17,
            nr_zones: 16,
            max_open_zones: 0,
            max_active_zones: 0,
            zone_append_max_sectors: 256,
        });
        let err = check_options(&zoned, Recovery::Off).unwrap_err().to_string();
        assert!(err.contains("zoned") && err.contains("UBLK_F_USER_COPY"), "{err}");
    }

    #[test]
    fn a_kernel_without_unprivileged_devices_is_named() {
        let needed = uapi::UBLK_F_CMD_IOCTL_ENCODE | uapi::UBLK_F_UNPRIVILEGED_DEV;
        assert!(check_features(needed | uapi::UBLK_F_USER_COPY, needed).is_ok());
        let err = check_features(uapi::UBLK_F_CMD_IOCTL_ENCODE, needed).unwrap_err();
        assert!(matches!(err, Error::NoUnprivileged { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains("UBLK_F_UNPRIVILEGED_DEV") && text.contains("as root"), "{text}");
        let err = check_features(uapi::UBLK_F_UNPRIVILEGED_DEV, needed).unwrap_err();
        assert!(matches!(err, Error::MissingFeature { .. }), "{err}");
    }
}
