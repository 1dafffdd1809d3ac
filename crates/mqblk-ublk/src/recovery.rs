//! User recovery: a device added as recoverable keeps /dev/ublkbN when its
//! server dies, and a new server takes it over (Documentation/block/
//! ublk.rst, "user recovery feature").
//!
//! Added with UBLK_F_USER_RECOVERY, a device whose server exits without
//! STOP_DEV (a crash, SIGKILL) is quiesced by the kernel instead of
//! removed: its queue stops dispatching, the requests the dead server had
//! taken are requeued (UBLK_F_USER_RECOVERY_REISSUE: mqblk's default, so
//! that acknowledged-to-be-in-flight writes are not lost) or failed, and
//! new I/O waits (or, with UBLK_F_USER_RECOVERY_FAIL_IO, Linux 6.13, fails
//! at once) until a new server sends START_USER_RECOVERY, fetches every tag
//! of every queue and sends END_USER_RECOVERY. Until then the kernel holds
//! I/O indefinitely: `mqblk ublk del N` removes the device and fails it.
//!
//! Relies on: ctrl.rs (the commands, GET_DEV_INFO2, GET_PARAMS), uapi.rs;
//! the server's queue set-up, shared with a fresh start (server.rs).

use std::time::{Duration, Instant};

use mqblk::QueueLimits;

use crate::ctrl::Control;
use crate::error::Error;
use crate::uapi::{self, DevInfo};

/// What a device does when its server dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Recovery {
    /// Removed with its server (the kernel's default).
    #[default]
    Off,
    /// Kept; the I/O the dead server held is reissued to the next one.
    Reissue,
    /// Kept; I/O fails while no server runs (Linux 6.13).
    FailIo,
}

impl Recovery {
    /// The names `--recovery` takes.
    pub const NAMES: [&'static str; 3] = ["off", "reissue", "fail_io"];

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "off" => Some(Self::Off),
            "reissue" => Some(Self::Reissue),
            "fail_io" => Some(Self::FailIo),
            _ => None,
        }
    }

    /// The UBLK_F_* bits ADD_DEV asks for.
    pub fn flags(self) -> u64 {
        match self {
            Self::Off => 0,
            Self::Reissue => uapi::UBLK_F_USER_RECOVERY | uapi::UBLK_F_USER_RECOVERY_REISSUE,
            Self::FailIo => uapi::UBLK_F_USER_RECOVERY | uapi::UBLK_F_USER_RECOVERY_FAIL_IO,
        }
    }
}

/// How long `wait_for_dead_server` waits for the kernel to notice: Linux
/// 6.1's ublk checks for a dead server every 5 s (its monitor work), later
/// ones when the server's io_uring goes; both release /dev/ublkcN after
/// the last reference to the dead process's files.
pub const DEAD_SERVER_WAIT: Duration = Duration::from_secs(30);

/// Checks that device `dev_id` can be recovered by a server of `limits`
/// (recoverable, added with the `needed` flags that device needs, the
/// same capacity and block size as the kernel knows), waits until the
/// kernel has quiesced it after its server died, and sends
/// START_USER_RECOVERY. Returns the device's info (its queue count, depth,
/// buffer size and flags, which the new server must take as they are).
pub fn start(ctrl: &mut Control, dev_id: u32, limits: &QueueLimits, needed: u64) -> Result<DevInfo, Error> {
    let info = ctrl.info(dev_id)?;
    if info.flags & uapi::UBLK_F_UNPRIVILEGED_DEV != 0 {
        return Err(Error::BadOption(format!(
            "device {dev_id} is unprivileged: the kernel keeps no unprivileged device for recovery (it drops \
             UBLK_F_USER_RECOVERY), so it cannot take a new server"
        )));
    }
    if info.flags & uapi::UBLK_F_USER_RECOVERY == 0 {
        return Err(Error::BadOption(format!(
            "device {dev_id} was not added as recoverable (mqblk ublk add --recovery=reissue): it cannot take a new server"
        )));
    }
    if info.flags & needed != needed {
        return Err(Error::BadOption(format!(
            "device {dev_id} was added with {}: --device needs {}",
            uapi::feature_names(info.flags).join(", "),
            uapi::feature_names(needed).join(", ")
        )));
    }
    check_geometry(dev_id, &ctrl.params(dev_id)?, limits)?;
    let deadline = Instant::now() + DEAD_SERVER_WAIT;
    loop {
        let state = ctrl.info(dev_id)?.state;
        let quiesced = matches!(state, uapi::UBLK_S_DEV_QUIESCED | uapi::UBLK_S_DEV_FAIL_IO);
        if quiesced {
            match ctrl.start_recovery(dev_id) {
                Ok(()) => return Ok(info),
                // The dead server's /dev/ublkcN is not released yet.
                Err(Error::Command { source, .. }) if source.raw_os_error() == Some(libc::EBUSY) => {}
                Err(e) => return Err(e),
            }
        }
        if Instant::now() >= deadline {
            return Err(Error::BadOption(format!(
                "device {dev_id} is {} after {} s: its server still runs (or the kernel has not released it); \
                 recovery takes a device whose server died",
                uapi::state_name(state),
                DEAD_SERVER_WAIT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The new server's device must be the one the kernel's /dev/ublkbN
/// describes: the same capacity and logical block size (the file systems
/// and page cache above it were built on them).
fn check_geometry(dev_id: u32, params: &uapi::Params, limits: &QueueLimits) -> Result<(), Error> {
    let basic = &params.basic;
    let block = 1u32 << basic.logical_bs_shift;
    if basic.dev_sectors != limits.capacity_sectors() || block != limits.logical_block_size {
        return Err(Error::BadOption(format!(
            "device {dev_id} has {} sectors of {block} bytes; --device has {} of {}: recovery needs the same device",
            basic.dev_sectors,
            limits.capacity_sectors(),
            limits.logical_block_size
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_names_map_to_the_kernels_flags() {
        assert_eq!(Recovery::from_name("off").unwrap().flags(), 0);
        assert_eq!(
            Recovery::from_name("reissue").unwrap().flags(),
            uapi::UBLK_F_USER_RECOVERY | uapi::UBLK_F_USER_RECOVERY_REISSUE
        );
        assert_eq!(
            Recovery::from_name("fail_io").unwrap().flags(),
            uapi::UBLK_F_USER_RECOVERY | uapi::UBLK_F_USER_RECOVERY_FAIL_IO
        );
        assert_eq!(Recovery::from_name("reissue2"), None);
        assert!(Recovery::NAMES.iter().all(|n| Recovery::from_name(n).is_some()));
    }

    #[test]
    fn a_different_device_is_refused_by_its_geometry() {
        let limits = QueueLimits::new(1 << 30, 512);
        let mut params = crate::server::params_for(&limits, 1 << 20);
        assert!(check_geometry(3, &params, &limits).is_ok());
        params.basic.dev_sectors /= 2;
        let err = check_geometry(3, &params, &limits).unwrap_err().to_string();
        assert!(err.contains("device 3 has 1048576 sectors of 512 bytes") && err.contains("2097152"), "{err}");
        params.basic.dev_sectors *= 2;
        params.basic.logical_bs_shift = 12;
        assert!(check_geometry(3, &params, &limits).is_err());
    }
}
