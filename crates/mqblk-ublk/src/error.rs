//! Errors of the ublk server: each names what is missing or which kernel
//! command failed, for which device, and, where the caller can act on it
//! (permissions, the kernel's limits), what to do.
//!
//! Relies on: nothing (thiserror).

use std::io;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(
        "the running kernel has no ublk: /dev/ublk-control is missing (CONFIG_BLK_DEV_UBLK; try `modprobe ublk_drv`)"
    )]
    NoUblk,
    #[error("the running kernel's ublk does not answer UBLK_U_CMD_GET_FEATURES ({0}): it is older than Linux 6.5, mqblk ublk needs 6.5 or later")]
    NoGetFeatures(#[source] io::Error),
    #[error("the running kernel's ublk lacks {missing} (it offers: {offered})")]
    MissingFeature { missing: String, offered: String },
    #[error("cannot open {path}: {source}")]
    Open { path: String, source: io::Error },
    #[error(
        "cannot open /dev/ublk-control: {source}: run as root, or ask the administrator to make it readable and \
         writable by a group you are in and to install the udev rule (README, \"ublk without root\")"
    )]
    ControlDenied { source: io::Error },
    #[error(
        "the running kernel's ublk lacks UBLK_F_UNPRIVILEGED_DEV (it offers: {offered}): a device cannot be \
         added without root on it; run `mqblk ublk add` as root"
    )]
    NoUnprivileged { offered: String },
    #[error(
        "ublk command ADD_DEV refused (EPERM): without CAP_SYS_ADMIN the kernel adds only unprivileged devices: \
         pass --unprivileged (README, \"ublk without root\"), or run as root"
    )]
    NeedsUnprivileged,
    #[error(
        "ublk command ADD_DEV refused (EACCES): the kernel's limit of unprivileged ublk devices is reached \
         (ublk_drv's ublks_max parameter, 64 by default): delete one, or ask the administrator to raise it"
    )]
    UnprivilegedLimit,
    #[error("ublk command {cmd} for device {dev_id} refused ({errno}): {why}")]
    Denied { cmd: &'static str, dev_id: u32, errno: &'static str, why: String },
    #[error(
        "{path} is still not readable and writable by you {waited_secs} s after the device was added ({source}): \
         the kernel creates it owned by root, and the administrator's udev rule (scripts/ublk-chown.sh; README, \
         \"ublk without root\") must give it to the device's owner: is the rule installed, and udev running?"
    )]
    NodeNotGiven { path: String, waited_secs: u64, source: io::Error },
    #[error("cannot set up {what}: {source}")]
    Ring { what: &'static str, source: io::Error },
    #[error("ublk command {cmd} for device {dev_id} failed: {source}")]
    Command { cmd: &'static str, dev_id: u32, source: io::Error },
    #[error("cannot map the I/O descriptors of queue {q_id}: {source}")]
    Mmap { q_id: u16, source: io::Error },
    #[error("queue {q_id}: {what}: {source}")]
    Queue { q_id: u16, what: &'static str, source: io::Error },
    #[error("bad option: {0}")]
    BadOption(String),
    #[error("device: {0}")]
    Device(#[from] mqblk::Error),
}
