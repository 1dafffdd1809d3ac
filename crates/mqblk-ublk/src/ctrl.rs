//! The control device, /dev/ublk-control: each control command (ADD_DEV,
//! SET_PARAMS, START_DEV, STOP_DEV, DEL_DEV, GET_DEV_INFO, GET_PARAMS,
//! GET_FEATURES, START_USER_RECOVERY, END_USER_RECOVERY) is one IORING_OP_URING_CMD on a private SQE128 ring,
//! submitted and waited for on the calling thread.
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

/// An open /dev/ublk-control with its ring.
pub struct Control {
    file: File,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
}

impl Control {
    /// Opens /dev/ublk-control. A missing node means the kernel has no
    /// ublk (CONFIG_BLK_DEV_UBLK, module ublk_drv).
    pub fn open() -> Result<Self, Error> {
        let file = OpenOptions::new().read(true).write(true).open(uapi::CONTROL_PATH).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                Error::NoUblk
            } else {
                Error::Open { path: uapi::CONTROL_PATH.into(), source: e }
            }
        })?;
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .build(4)
            .map_err(|e| Error::Ring { what: "the control ring (SQE128)", source: e })?;
        Ok(Self { file, ring })
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

    fn cmd_for(dev_id: u32) -> CtrlCmd {
        CtrlCmd { dev_id, queue_id: u16::MAX, ..CtrlCmd::default() }
    }

    /// The UBLK_F_* bits the kernel supports (GET_FEATURES, Linux 6.5+).
    pub fn features(&mut self) -> Result<u64, Error> {
        let mut features = 0u64;
        let cmd = CtrlCmd {
            len: uapi::UBLK_FEATURES_LEN,
            addr: std::ptr::addr_of_mut!(features) as u64,
            ..Self::cmd_for(u32::MAX)
        };
        match self.run(uapi::UBLK_U_CMD_GET_FEATURES, cmd) {
            Ok(_) => Ok(features),
            Err(e) => Err(Error::NoGetFeatures(e)),
        }
    }

    /// ADD_DEV: creates /dev/ublkcN; returns the kernel's answer (the id,
    /// the queue count it granted, the flags).
    pub fn add(&mut self, mut info: DevInfo) -> Result<DevInfo, Error> {
        let cmd = CtrlCmd {
            len: size_of::<DevInfo>() as u16,
            addr: std::ptr::addr_of_mut!(info) as u64,
            ..Self::cmd_for(info.dev_id)
        };
        let wanted = info.dev_id;
        self.run(uapi::UBLK_U_CMD_ADD_DEV, cmd).map_err(|e| Error::Command {
            cmd: "ADD_DEV",
            dev_id: wanted,
            source: e,
        })?;
        Ok(info)
    }

    /// SET_PARAMS (before START_DEV).
    pub fn set_params(&mut self, dev_id: u32, params: &Params) -> Result<(), Error> {
        let mut params = *params;
        params.len = size_of::<Params>() as u32;
        let cmd = CtrlCmd {
            len: size_of::<Params>() as u16,
            addr: std::ptr::addr_of_mut!(params) as u64,
            ..Self::cmd_for(dev_id)
        };
        self.run(uapi::UBLK_U_CMD_SET_PARAMS, cmd).map_err(|e| Error::Command {
            cmd: "SET_PARAMS",
            dev_id,
            source: e,
        })?;
        Ok(())
    }

    /// GET_PARAMS.
    pub fn params(&mut self, dev_id: u32) -> Result<Params, Error> {
        let mut params = Params { len: size_of::<Params>() as u32, ..Params::default() };
        let cmd = CtrlCmd {
            len: size_of::<Params>() as u16,
            addr: std::ptr::addr_of_mut!(params) as u64,
            ..Self::cmd_for(dev_id)
        };
        self.run(uapi::UBLK_U_CMD_GET_PARAMS, cmd).map_err(|e| Error::Command {
            cmd: "GET_PARAMS",
            dev_id,
            source: e,
        })?;
        Ok(params)
    }

    /// GET_DEV_INFO.
    pub fn info(&mut self, dev_id: u32) -> Result<DevInfo, Error> {
        let mut info = DevInfo::default();
        let cmd = CtrlCmd {
            len: size_of::<DevInfo>() as u16,
            addr: std::ptr::addr_of_mut!(info) as u64,
            ..Self::cmd_for(dev_id)
        };
        self.run(uapi::UBLK_U_CMD_GET_DEV_INFO, cmd).map_err(|e| Error::Command {
            cmd: "GET_DEV_INFO",
            dev_id,
            source: e,
        })?;
        Ok(info)
    }

    /// START_DEV: waits until every queue has fetched all its tags, then
    /// adds /dev/ublkbN (reading its partition table through the queues).
    pub fn start(&mut self, dev_id: u32, server_pid: i32) -> Result<(), Error> {
        let cmd = CtrlCmd { data: [server_pid as u64], ..Self::cmd_for(dev_id) };
        self.run(uapi::UBLK_U_CMD_START_DEV, cmd).map_err(|e| Error::Command {
            cmd: "START_DEV",
            dev_id,
            source: e,
        })?;
        Ok(())
    }

    /// START_USER_RECOVERY: a recoverable device whose server died (state
    /// QUIESCED or FAIL_IO, /dev/ublkcN closed) takes a new server; EBUSY
    /// while the old one's files are still being released.
    pub fn start_recovery(&mut self, dev_id: u32) -> Result<(), Error> {
        self.run(uapi::UBLK_U_CMD_START_USER_RECOVERY, Self::cmd_for(dev_id)).map_err(|e| Error::Command {
            cmd: "START_USER_RECOVERY",
            dev_id,
            source: e,
        })?;
        Ok(())
    }

    /// END_USER_RECOVERY: waits until every queue of the new server has
    /// fetched its tags, then makes the device LIVE again with
    /// `server_pid` as its server and reissues (or fails) the held I/O.
    pub fn end_recovery(&mut self, dev_id: u32, server_pid: i32) -> Result<(), Error> {
        let cmd = CtrlCmd { data: [server_pid as u64], ..Self::cmd_for(dev_id) };
        self.run(uapi::UBLK_U_CMD_END_USER_RECOVERY, cmd).map_err(|e| Error::Command {
            cmd: "END_USER_RECOVERY",
            dev_id,
            source: e,
        })?;
        Ok(())
    }

    /// STOP_DEV: removes /dev/ublkbN (after its in-flight requests
    /// complete) and aborts every queue's pending fetch commands.
    pub fn stop(&mut self, dev_id: u32) -> Result<(), Error> {
        self.run(uapi::UBLK_U_CMD_STOP_DEV, Self::cmd_for(dev_id)).map_err(|e| Error::Command {
            cmd: "STOP_DEV",
            dev_id,
            source: e,
        })?;
        Ok(())
    }

    /// DEL_DEV: stops the device if needed, removes /dev/ublkcN and waits
    /// until the id is free, which needs every /dev/ublkcN fd closed.
    pub fn delete(&mut self, dev_id: u32) -> Result<(), Error> {
        self.run(uapi::UBLK_U_CMD_DEL_DEV, Self::cmd_for(dev_id)).map_err(|e| Error::Command {
            cmd: "DEL_DEV",
            dev_id,
            source: e,
        })?;
        Ok(())
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
