//! Errors of the ublk server: each names what is missing or which kernel
//! command failed, for which device.
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
