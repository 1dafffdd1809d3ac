//! Commands about devices that exist, from any process: `list`, `info`,
//! `delete` (`mqblk ublk list`, `info`, `del`). Each asks GET_DEV_INFO2
//! first, which answers for any device the caller may query and says
//! whether it is unprivileged (then its commands name /dev/ublkcN:
//! ctrl.rs); the kernel's refusals come back as `Error::Denied`.
//!
//! Relies on: ctrl.rs.

use crate::ctrl::Control;
use crate::error::Error;
use crate::uapi::DevInfo;

/// A ublk device as `list` finds it.
#[derive(Debug, Clone)]
pub enum Listed {
    /// Its info, as GET_DEV_INFO2 answers.
    Visible(DevInfo),
    /// A device the kernel would not describe to this caller: a privileged
    /// device (EPERM, for a caller without CAP_SYS_ADMIN), or another
    /// user's unprivileged device (EACCES on its /dev/ublkcN).
    Hidden { dev_id: u32, why: &'static str },
}

/// Every ublk device, for `mqblk ublk list`: those this caller may query
/// with their info, the others by id.
pub fn list() -> Result<Vec<Listed>, Error> {
    let mut ctrl = Control::open()?;
    let mut out = Vec::new();
    for id in crate::ctrl::device_ids() {
        match ctrl.info(id) {
            Ok(info) => out.push(Listed::Visible(info)),
            Err(Error::Command { source, .. }) if source.raw_os_error() == Some(libc::ENODEV) => {}
            Err(Error::Denied { errno, .. }) => {
                let why = if errno == "EPERM" { "privileged" } else { "not yours" };
                out.push(Listed::Hidden { dev_id: id, why });
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Device `id`'s info (GET_DEV_INFO2), for `mqblk ublk info`.
pub fn info(id: u32) -> Result<DevInfo, Error> {
    Control::open()?.info(id)
}

/// Deletes device `id` (`mqblk ublk del`): its server, if any, sees its
/// queues aborted and exits; DEL_DEV returns once /dev/ublkcN is closed.
/// GET_DEV_INFO2 first says whether DEL_DEV must name /dev/ublkcN (an
/// unprivileged device), and refuses a caller the kernel would refuse.
pub fn delete(id: u32) -> Result<(), Error> {
    let mut ctrl = Control::open()?;
    match ctrl.info(id) {
        Ok(_) => {}
        Err(e @ Error::Denied { .. }) => return Err(e),
        Err(Error::Command { source, .. }) if source.raw_os_error() == Some(libc::ENODEV) => {
            return Err(Error::Command { cmd: "DEL_DEV", dev_id: id, source });
        }
        // Deleting needs no info: try as for a privileged device.
        Err(e) => log::debug!("device {id}: {e}"),
    }
    ctrl.delete(id)
}
