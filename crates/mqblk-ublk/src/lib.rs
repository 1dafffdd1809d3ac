//! A ublk server for mqblk devices: the Linux kernel forwards each request
//! of /dev/ublkbN to this process over io_uring, and each ublk queue hands
//! it to mqblk's block layer through its own `Client`.
//!
//! Modules: uapi.rs (the kernel ABI, by hand), ctrl.rs (the control
//! device), params.rs (the device's ublk parameters from its limits),
//! queue.rs (one thread per queue: fetch, serve, commit),
//! server.rs (the device's life: add, start, stop, delete), devices.rs
//! (list, info and delete from any process), recovery.rs
//! (a new server for a device whose server died), unpriv.rs (devices
//! added and served without root), zero_copy.rs (whether reads and writes
//! move with the request's own pages), affinity.rs (which CPUs each queue
//! thread runs on), error.rs.
//!
//! Relies on: the `io-uring` crate (UringCmd16/UringCmd80, SQE128 rings),
//! libc (mmap, eventfd reads, CPU affinity), mqblk. Linux 6.5 or later with ublk_drv.

#![deny(unsafe_op_in_unsafe_fn)]

mod affinity;
pub mod ctrl;
mod devices;
mod error;
mod params;
mod queue;
pub mod recovery;
pub mod server;
pub mod uapi;
mod unpriv;
mod zero_copy;

pub use affinity::{cpu_list, CpuAffinity};
pub use devices::{delete, info, list, Listed};
pub use error::Error;
pub use queue::QueueStats;
pub use recovery::Recovery;
pub use server::{probe, Options, Server, Started, Stopper, Summary};
pub use unpriv::NODE_WAIT;
pub use zero_copy::ZeroCopy;
