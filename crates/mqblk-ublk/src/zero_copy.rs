//! `ZeroCopy`: whether a device's reads and writes move with the request's
//! own pages (UBLK_F_SUPPORT_ZERO_COPY), and what that needs: the kernel's
//! registration of a request's pages from any task, a driver that takes
//! kernel buffers (mqblk's file driver registers them in its own rings),
//! a device neither zoned nor unprivileged. Where the kernel also offers
//! auto registration (UBLK_F_AUTO_BUF_REG: it registers each request's
//! pages in the ublk queue's own ring as it hands the request over) and
//! the device's data is one file (`Device::backing_fd`), the queue reads
//! and writes that file on its own ring, one SQE a request, and the
//! explicit registration is the fallback. The queue's side is queue.rs,
//! queue/auto_reg.rs and queue/copy.rs; the file driver's, mqblk-file's
//! ring/kbuf.rs.
//!
//! Relies on: uapi.rs (flags, their names); the device's `QueueLimits`.

use mqblk::QueueLimits;

use crate::error::Error;
use crate::uapi;

/// What zero copy needs of the kernel: registering a request's pages in an
/// io_uring buffer table ("ublk: zc register/unregister bvec", 6.15), from
/// any task ("ublk: allow UBLK_IO_(UN)REGISTER_IO_BUF on any task",
/// announced by BUF_REG_OFF_DAEMON): mqblk's file driver registers them in
/// its own rings, not in the ublk queue's.
const ZERO_COPY_FEATURES: u64 = uapi::UBLK_F_SUPPORT_ZERO_COPY | uapi::UBLK_F_BUF_REG_OFF_DAEMON;

/// Whether the device's data moves with no copy through the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZeroCopy {
    /// Where the kernel and the device's driver both can (and the device
    /// is neither zoned nor unprivileged); else the copying path.
    Auto,
    /// Always: refused, naming what is missing, where it cannot be.
    On,
    /// As `On`, but never auto registration: every request's pages are
    /// registered by the file driver in its own ring (to compare the two,
    /// or for a kernel whose auto registration misbehaves).
    Explicit,
    /// Never: the kernel copies through the server's buffers.
    Off,
}

impl ZeroCopy {
    pub const NAMES: [&'static str; 4] = ["auto", "on", "explicit", "off"];

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "auto" => Some(Self::Auto),
            "on" => Some(Self::On),
            "explicit" => Some(Self::Explicit),
            "off" => Some(Self::Off),
            _ => None,
        }
    }

    /// The zero-copy flags for a device of `limits` (whose data is one
    /// file if `backing_file`) added with `features` offered:
    /// UBLK_F_SUPPORT_ZERO_COPY, with UBLK_F_AUTO_BUF_REG where the kernel
    /// offers it and the device is one file (not for `Explicit`), or
    /// nothing; Err names why `On` or `Explicit` cannot be.
    pub fn flags(
        self,
        features: u64,
        limits: &QueueLimits,
        unprivileged: bool,
        backing_file: bool,
    ) -> Result<u64, Error> {
        let zero_copy = self.flag(features, limits, unprivileged)?;
        let auto =
            zero_copy != 0 && self != Self::Explicit && backing_file && features & uapi::UBLK_F_AUTO_BUF_REG != 0;
        Ok(if auto { zero_copy | uapi::UBLK_F_AUTO_BUF_REG } else { zero_copy })
    }

    /// UBLK_F_SUPPORT_ZERO_COPY or nothing (`flags` without auto
    /// registration); Err names why `On` cannot be.
    fn flag(self, features: u64, limits: &QueueLimits, unprivileged: bool) -> Result<u64, Error> {
        let why_not = if features & ZERO_COPY_FEATURES != ZERO_COPY_FEATURES {
            Some(format!(
                "the kernel does not offer {} (Linux 6.16 or later does)",
                uapi::feature_names(ZERO_COPY_FEATURES & !features).join(" and ")
            ))
        } else if !limits.kernel_buffers {
            Some(
                "the device's driver does not take kernel buffers (a file: device does, without IOPOLL poll queues)"
                    .into(),
            )
        } else if limits.zoned.is_some() {
            Some("a zoned device moves its data by user copy".into())
        } else if unprivileged {
            Some("the kernel refuses zero copy on an unprivileged device".into())
        } else {
            None
        };
        match (self, why_not) {
            (ZeroCopy::Off, _) | (ZeroCopy::Auto, Some(_)) => Ok(0),
            (_, None) => Ok(uapi::UBLK_F_SUPPORT_ZERO_COPY),
            (ZeroCopy::On, Some(why)) => Err(Error::BadOption(format!("--zero-copy on: {why}"))),
            (ZeroCopy::Explicit, Some(why)) => Err(Error::BadOption(format!("--zero-copy explicit: {why}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_registration_where_the_kernel_offers_it_and_the_device_is_one_file() {
        const LINUX_7_3: u64 = 0x1f_ffff;
        const LINUX_6_15: u64 = 0x1f_ffff & !(uapi::UBLK_F_AUTO_BUF_REG | uapi::UBLK_F_BUF_REG_OFF_DAEMON);
        let mut limits = QueueLimits::new(1 << 30, 512);
        limits.kernel_buffers = true;
        let (zc, auto) = (uapi::UBLK_F_SUPPORT_ZERO_COPY, uapi::UBLK_F_AUTO_BUF_REG);
        assert_eq!(ZeroCopy::Auto.flags(LINUX_7_3, &limits, false, true).unwrap(), zc | auto);
        assert_eq!(ZeroCopy::On.flags(LINUX_7_3, &limits, false, true).unwrap(), zc | auto);
        assert_eq!(ZeroCopy::Explicit.flags(LINUX_7_3, &limits, false, true).unwrap(), zc, "never auto");
        assert_eq!(ZeroCopy::On.flags(LINUX_7_3, &limits, false, false).unwrap(), zc, "no backing file");
        assert_eq!(ZeroCopy::On.flags(LINUX_7_3 & !auto, &limits, false, true).unwrap(), zc, "6.15's zero copy");
        assert_eq!(ZeroCopy::Off.flags(LINUX_7_3, &limits, false, true).unwrap(), 0);
        assert_eq!(
            ZeroCopy::Auto.flags(LINUX_6_15, &limits, false, true).unwrap(),
            0,
            "no registration off the daemon"
        );
        let e = ZeroCopy::Explicit.flags(LINUX_6_15, &limits, false, true).unwrap_err().to_string();
        assert!(e.contains("--zero-copy explicit:") && e.contains("BUF_REG_OFF_DAEMON"), "{e}");
    }

    #[test]
    fn zero_copy_needs_the_kernel_the_driver_and_a_plain_privileged_device() {
        const LINUX_7_3: u64 = 0x1f_ffff; // GET_FEATURES in Debian's 7.3.4
        const LINUX_6_12: u64 = 0x1fe;
        let mut limits = QueueLimits::new(1 << 30, 512);
        limits.kernel_buffers = true;
        let zc = uapi::UBLK_F_SUPPORT_ZERO_COPY;
        assert_eq!(ZeroCopy::Auto.flag(LINUX_7_3, &limits, false).unwrap(), zc);
        assert_eq!(ZeroCopy::On.flag(LINUX_7_3, &limits, false).unwrap(), zc);
        assert_eq!(ZeroCopy::Off.flag(LINUX_7_3, &limits, false).unwrap(), 0);
        assert_eq!(ZeroCopy::Auto.flag(LINUX_6_12, &limits, false).unwrap(), 0, "the copying path");
        let e = ZeroCopy::On.flag(LINUX_6_12, &limits, false).unwrap_err().to_string();
        assert!(e.contains("UBLK_F_SUPPORT_ZERO_COPY and UBLK_F_BUF_REG_OFF_DAEMON"), "{e}");
        // 6.15 has the registration, not yet from another task.
        let e = ZeroCopy::On.flag(LINUX_7_3 & !uapi::UBLK_F_BUF_REG_OFF_DAEMON, &limits, false).unwrap_err();
        assert!(e.to_string().contains("BUF_REG_OFF_DAEMON") && !e.to_string().contains("SUPPORT_ZERO_COPY"), "{e}");
        assert!(ZeroCopy::On.flag(LINUX_7_3, &limits, true).unwrap_err().to_string().contains("unprivileged"));
        limits.kernel_buffers = false;
        assert_eq!(ZeroCopy::Auto.flag(LINUX_7_3, &limits, false).unwrap(), 0);
        assert!(ZeroCopy::On.flag(LINUX_7_3, &limits, false).unwrap_err().to_string().contains("kernel buffers"));
        assert_eq!(ZeroCopy::from_name("auto"), Some(ZeroCopy::Auto));
        assert_eq!(ZeroCopy::from_name("explicit"), Some(ZeroCopy::Explicit));
        assert_eq!(ZeroCopy::from_name("yes"), None);
    }
}
