//! The control device, /dev/ublk-control: each control command (ADD_DEV,
//! SET_PARAMS, START_DEV, STOP_DEV, DEL_DEV, GET_DEV_INFO(2), GET_PARAMS,
//! GET_FEATURES, START_USER_RECOVERY, END_USER_RECOVERY) is one
//! IORING_OP_URING_CMD on a private SQE128 ring, submitted and waited for
//! on the calling thread.
//!
//! Unprivileged devices (UBLK_F_UNPRIVILEGED_DEV; Documentation/block/
//! ublk.rst): the kernel lets anyone send their commands but checks the
//! caller's access to the device's /dev/ublkcN (read for GET_DEV_INFO(2)
//! and GET_PARAMS, read and write for the rest), so each command names that
//! node at the start of its buffer, `dev_path_len` bytes long, with the
//! command's own data after it (`WithPath`). GET_DEV_INFO2 takes the path
//! for every device, so `info` uses it, and learns from the answer's flags
//! whether the device's other commands must carry it. `Control` remembers
//! the devices it has seen to be unprivileged (ADD_DEV's answer, an
//! `info`), and every command for one of them carries the path.
//!
//! Relies on: uapi.rs for the command numbers and structs; the io-uring
//! crate's `UringCmd80`. The kernel reads and writes the buffers named in
//! a command only while that command runs, and `run` waits for it.

use std::fs::{File, OpenOptions};
use std::io;
use std::mem::size_of;
use std::os::fd::AsRawFd;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::error::Error;
use crate::uapi::{self, CtrlCmd, DevInfo, Params};

/// Bytes the device path takes at the start of a command's buffer: the
/// path, NUL-padded (the kernel copies `dev_path_len` bytes and reads
/// them as a C string). "/dev/ublkc" and the largest id, 2^20 - 1, fit,
/// and 32 keeps the data after it 8-byte aligned.
pub const DEV_PATH_BYTES: usize = 32;

/// A command's buffer for an unprivileged device: /dev/ublkcN, then the
/// command's own data (nothing for START_DEV and the like: `T = ()`).
#[repr(C)]
#[derive(Clone, Copy)]
struct WithPath<T: Copy> {
    path: [u8; DEV_PATH_BYTES],
    payload: T,
}

/// /dev/ublkcN of device `dev_id`, NUL-padded to `DEV_PATH_BYTES`.
fn dev_path_bytes(dev_id: u32) -> [u8; DEV_PATH_BYTES] {
    let path = uapi::char_path(dev_id);
    assert!(path.len() < DEV_PATH_BYTES, "{path} longer than the path buffer");
    let mut out = [0u8; DEV_PATH_BYTES];
    out[..path.len()].copy_from_slice(path.as_bytes());
    out
}

/// An open /dev/ublk-control with its ring.
pub struct Control {
    file: File,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    /// Devices seen to be unprivileged: their commands carry the path.
    unprivileged: Vec<u32>,
}

impl Control {
    /// Opens /dev/ublk-control. A missing node means the kernel has no
    /// ublk (CONFIG_BLK_DEV_UBLK, module ublk_drv); a refused open, a
    /// caller the administrator has not let in.
    pub fn open() -> Result<Self, Error> {
        let file = OpenOptions::new().read(true).write(true).open(uapi::CONTROL_PATH).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => Error::NoUblk,
            io::ErrorKind::PermissionDenied => Error::ControlDenied { source: e },
            _ => Error::Open { path: uapi::CONTROL_PATH.into(), source: e },
        })?;
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .build(4)
            .map_err(|e| Error::Ring { what: "the control ring (SQE128)", source: e })?;
        Ok(Self { file, ring, unprivileged: Vec::new() })
    }

    /// Whether device `dev_id`'s commands carry its path (it was seen to
    /// be unprivileged).
    pub fn is_unprivileged(&self, dev_id: u32) -> bool {
        self.unprivileged.contains(&dev_id)
    }

    /// Records what the kernel said device `dev_id`'s flags are.
    fn note_flags(&mut self, dev_id: u32, flags: u64) {
        let unprivileged = flags & uapi::UBLK_F_UNPRIVILEGED_DEV != 0;
        if unprivileged && !self.is_unprivileged(dev_id) {
            self.unprivileged.push(dev_id);
        } else if !unprivileged {
            self.unprivileged.retain(|&id| id != dev_id);
        }
    }

    /// Runs one control command and returns the kernel's result (>= 0) or
    /// the errno it failed with.
    fn run(&mut self, op: u32, cmd: CtrlCmd) -> Result<i32, io::Error> {
        let sqe = opcode::UringCmd80::new(types::Fd(self.file.as_raw_fd()), op).cmd(cmd.to_bytes()).build();
        // SAFETY: the SQE names only buffers the caller keeps alive until
        // this function returns (`cmd.addr`), and we wait for its CQE below.
        unsafe { self.ring.submission().push(&sqe) }.map_err(|_| io::Error::other("control ring full"))?;
        loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {
                    // A signal: the command may still be running; wait on.
                    if !self.ring.completion().is_empty() {
                        break;
                    }
                }
                Err(e) => return Err(e),
            }
        }
        let cqe = self.ring.completion().next().ok_or_else(|| io::Error::other("no completion"))?;
        let res = cqe.result();
        if res < 0 {
            Err(io::Error::from_raw_os_error(-res))
        } else {
            Ok(res)
        }
    }

    /// Runs command `op` for device `dev_id` with `data` inline and
    /// `payload` as its buffer (`()`: none), which the kernel may fill;
    /// with `with_path`, the buffer starts with /dev/ublkcN.
    fn run_dev<T: Copy>(
        &mut self,
        op: u32,
        dev_id: u32,
        data: u64,
        payload: &mut T,
        with_path: bool,
    ) -> Result<i32, io::Error> {
        let base = CtrlCmd { dev_id, queue_id: u16::MAX, data: [data], ..CtrlCmd::default() };
        if !with_path {
            let len = size_of::<T>();
            let addr = if len == 0 { 0 } else { payload as *mut T as u64 };
            return self.run(op, CtrlCmd { len: len as u16, addr, ..base });
        }
        let mut buf = WithPath { path: dev_path_bytes(dev_id), payload: *payload };
        let cmd = CtrlCmd {
            len: size_of::<WithPath<T>>() as u16,
            addr: std::ptr::addr_of_mut!(buf) as u64,
            dev_path_len: DEV_PATH_BYTES as u16,
            ..base
        };
        let result = self.run(op, cmd);
        *payload = buf.payload;
        result
    }

    /// `run_dev` with the path when device `dev_id` needs it, and its
    /// errors named for `cmd`.
    fn dev_cmd<T: Copy>(
        &mut self,
        op: u32,
        cmd: &'static str,
        dev_id: u32,
        data: u64,
        payload: &mut T,
    ) -> Result<(), Error> {
        let with_path = self.is_unprivileged(dev_id);
        self.run_dev(op, dev_id, data, payload, with_path).map_err(|e| command_error(cmd, dev_id, e))?;
        Ok(())
    }

    /// The UBLK_F_* bits the kernel supports (GET_FEATURES, Linux 6.5+).
    pub fn features(&mut self) -> Result<u64, Error> {
        let mut features = 0u64;
        let cmd = CtrlCmd {
            len: uapi::UBLK_FEATURES_LEN,
            addr: std::ptr::addr_of_mut!(features) as u64,
            dev_id: u32::MAX,
            queue_id: u16::MAX,
            ..CtrlCmd::default()
        };
        match self.run(uapi::UBLK_U_CMD_GET_FEATURES, cmd) {
            Ok(_) => Ok(features),
            Err(e) => Err(Error::NoGetFeatures(e)),
        }
    }

    /// ADD_DEV: creates /dev/ublkcN; returns the kernel's answer (the id,
    /// the queue count it granted, the flags: a caller with CAP_SYS_ADMIN
    /// gets a privileged device even when it asked for an unprivileged
    /// one, and the kernel records the caller as the owner).
    pub fn add(&mut self, mut info: DevInfo) -> Result<DevInfo, Error> {
        let cmd = CtrlCmd {
            dev_id: info.dev_id,
            queue_id: u16::MAX,
            len: size_of::<DevInfo>() as u16,
            addr: std::ptr::addr_of_mut!(info) as u64,
            ..CtrlCmd::default()
        };
        let wanted = info.dev_id;
        let unprivileged = info.flags & uapi::UBLK_F_UNPRIVILEGED_DEV != 0;
        self.run(uapi::UBLK_U_CMD_ADD_DEV, cmd).map_err(|e| match e.raw_os_error() {
            Some(libc::EPERM) if !unprivileged => Error::NeedsUnprivileged,
            Some(libc::EACCES) if unprivileged => Error::UnprivilegedLimit,
            _ => Error::Command { cmd: "ADD_DEV", dev_id: wanted, source: e },
        })?;
        self.note_flags(info.dev_id, info.flags);
        Ok(info)
    }

    /// SET_PARAMS (before START_DEV).
    pub fn set_params(&mut self, dev_id: u32, params: &Params) -> Result<(), Error> {
        let mut params = *params;
        params.len = size_of::<Params>() as u32;
        self.dev_cmd(uapi::UBLK_U_CMD_SET_PARAMS, "SET_PARAMS", dev_id, 0, &mut params)
    }

    /// GET_PARAMS.
    pub fn params(&mut self, dev_id: u32) -> Result<Params, Error> {
        let mut params = Params { len: size_of::<Params>() as u32, ..Params::default() };
        self.dev_cmd(uapi::UBLK_U_CMD_GET_PARAMS, "GET_PARAMS", dev_id, 0, &mut params)?;
        Ok(params)
    }

    /// GET_DEV_INFO2, which works for every device (the path it carries
    /// is checked for unprivileged ones, and only root may ask about a
    /// privileged one); remembers whether the device is unprivileged.
    /// Without a /dev/ublkcN to name (ENOENT: a /dev without the node),
    /// root's GET_DEV_INFO, which takes no path, answers for a privileged
    /// device.
    pub fn info(&mut self, dev_id: u32) -> Result<DevInfo, Error> {
        let mut info = DevInfo::default();
        match self.run_dev(uapi::UBLK_U_CMD_GET_DEV_INFO2, dev_id, 0, &mut info, true) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                self.run_dev(uapi::UBLK_U_CMD_GET_DEV_INFO, dev_id, 0, &mut info, false)
                    .map_err(|e| command_error("GET_DEV_INFO", dev_id, e))?;
            }
            Err(e) => return Err(command_error("GET_DEV_INFO2", dev_id, e)),
        }
        self.note_flags(dev_id, info.flags);
        Ok(info)
    }

    /// GET_QUEUE_AFFINITY: the CPUs the kernel maps to queue `q_id` (set
    /// when the device was added).
    pub fn queue_cpus(&mut self, dev_id: u32, q_id: u16) -> Result<Vec<usize>, Error> {
        let mut mask: mqblk::cpus::CpuMask = [0; 16];
        self.dev_cmd(uapi::UBLK_U_CMD_GET_QUEUE_AFFINITY, "GET_QUEUE_AFFINITY", dev_id, u64::from(q_id), &mut mask)?;
        Ok(mqblk::cpus::cpus_of(&mask))
    }

    /// START_DEV: waits until every queue has fetched all its tags, then
    /// adds /dev/ublkbN (reading its partition table through the queues,
    /// unless a queue's server is unprivileged).
    pub fn start(&mut self, dev_id: u32, server_pid: i32) -> Result<(), Error> {
        self.dev_cmd(uapi::UBLK_U_CMD_START_DEV, "START_DEV", dev_id, server_pid as u64, &mut ())
    }

    /// START_USER_RECOVERY: a recoverable device whose server died (state
    /// QUIESCED or FAIL_IO, /dev/ublkcN closed) takes a new server; EBUSY
    /// while the old one's files are still being released.
    pub fn start_recovery(&mut self, dev_id: u32) -> Result<(), Error> {
        self.dev_cmd(uapi::UBLK_U_CMD_START_USER_RECOVERY, "START_USER_RECOVERY", dev_id, 0, &mut ())
    }

    /// END_USER_RECOVERY: waits until every queue of the new server has
    /// fetched its tags, then makes the device LIVE again with
    /// `server_pid` as its server and reissues (or fails) the held I/O.
    pub fn end_recovery(&mut self, dev_id: u32, server_pid: i32) -> Result<(), Error> {
        self.dev_cmd(uapi::UBLK_U_CMD_END_USER_RECOVERY, "END_USER_RECOVERY", dev_id, server_pid as u64, &mut ())
    }

    /// STOP_DEV: removes /dev/ublkbN (after its in-flight requests
    /// complete) and aborts every queue's pending fetch commands.
    pub fn stop(&mut self, dev_id: u32) -> Result<(), Error> {
        self.dev_cmd(uapi::UBLK_U_CMD_STOP_DEV, "STOP_DEV", dev_id, 0, &mut ())
    }

    /// DEL_DEV: stops the device if needed, removes /dev/ublkcN and waits
    /// until the id is free, which needs every /dev/ublkcN fd closed.
    pub fn delete(&mut self, dev_id: u32) -> Result<(), Error> {
        self.dev_cmd(uapi::UBLK_U_CMD_DEL_DEV, "DEL_DEV", dev_id, 0, &mut ())
    }
}

/// A device command's failure, with the kernel's two refusals explained:
/// EPERM, a privileged device and a caller without CAP_SYS_ADMIN (or a
/// path that is not the device's node); EACCES, an unprivileged device
/// whose /dev/ublkcN the caller may not read and write.
pub fn command_error(cmd: &'static str, dev_id: u32, source: io::Error) -> Error {
    let node = uapi::char_path(dev_id);
    match source.raw_os_error() {
        Some(libc::EPERM) => Error::Denied {
            cmd,
            dev_id,
            errno: "EPERM",
            why: format!(
                "device {dev_id} is privileged (added by root, without --unprivileged): only root (CAP_SYS_ADMIN) \
                 may query or control it (or {node} is not its node)"
            ),
        },
        Some(libc::EACCES) => Error::Denied {
            cmd,
            dev_id,
            errno: "EACCES",
            why: format!(
                "device {dev_id} is unprivileged, and you may not read and write {node}, whose access the kernel \
                 checks: it belongs to another user, or the udev rule has not given the node to its owner \
                 (README, \"ublk without root\")"
            ),
        },
        _ => Error::Command { cmd, dev_id, source },
    }
}

/// The ids of the ublk devices that exist now (from /dev/ublkcN nodes, or
/// /sys/class/ublk-char when /dev lacks them).
pub fn device_ids() -> Vec<u32> {
    let mut ids: Vec<u32> = Vec::new();
    for dir in ["/sys/class/ublk-char", "/dev"] {
        let Ok(entries) = std::fs::read_dir(dir) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_prefix("ublkc")).and_then(|n| n.parse().ok()) else {
                continue;
            };
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    ids.sort_unstable();
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_leads_the_buffer_nul_padded() {
        let path = dev_path_bytes(12);
        assert_eq!(&path[..12], b"/dev/ublkc12");
        assert!(path[12..].iter().all(|&b| b == 0));
        // The largest id the kernel hands out (MINORBITS = 20) still fits.
        assert!(uapi::char_path((1 << 20) - 1).len() < DEV_PATH_BYTES);
    }

    #[test]
    fn the_payload_follows_the_path_at_dev_path_len() {
        // The kernel moves `addr` on by `dev_path_len` and reads the
        // command's own data there.
        assert_eq!(std::mem::offset_of!(WithPath<DevInfo>, payload), DEV_PATH_BYTES);
        assert_eq!(std::mem::offset_of!(WithPath<Params>, payload), DEV_PATH_BYTES);
        assert_eq!(size_of::<WithPath<DevInfo>>(), DEV_PATH_BYTES + size_of::<DevInfo>());
        assert_eq!(size_of::<WithPath<()>>(), DEV_PATH_BYTES, "a command without data carries the path only");
    }

    #[test]
    fn refusals_say_who_may_control_the_device() {
        let eperm = command_error("DEL_DEV", 0, io::Error::from_raw_os_error(libc::EPERM)).to_string();
        assert!(eperm.contains("DEL_DEV") && eperm.contains("EPERM") && eperm.contains("only root"), "{eperm}");
        let eacces = command_error("STOP_DEV", 3, io::Error::from_raw_os_error(libc::EACCES)).to_string();
        assert!(eacces.contains("/dev/ublkc3") && eacces.contains("another user"), "{eacces}");
        let other = command_error("STOP_DEV", 3, io::Error::from_raw_os_error(libc::ENODEV));
        assert!(matches!(other, Error::Command { .. }));
    }
}
