//! A vhost-user-blk backend: any mqblk device as the virtio-blk disk of a
//! QEMU guest (`-device vhost-user-blk-pci`, guest memory shared with
//! `memory-backend-memfd,share=on`).
//!
//! Modules, bottom up: config.rs (features and configuration space from
//! the device's limits), request.rs (a descriptor chain to a typed
//! request), queue.rs (one virtqueue through one mqblk `Client`),
//! backend.rs (vhost-user-backend's trait), server.rs (the socket, one
//! connection at a time, stop), error.rs.
//!
//! Built on rust-vmm's crates: vhost (the vhost-user protocol),
//! vhost-user-backend (the daemon and one epoll worker per queue),
//! virtio-queue (split rings, descriptor chains, indirect tables) and
//! vm-memory (the guest's memory, mapped from the fds QEMU sends).
#![deny(unsafe_op_in_unsafe_fn)]

pub mod backend;
pub mod config;
pub mod error;
pub mod queue;
pub mod request;
pub mod server;

pub use config::DiskLimits;
pub use error::Error;
pub use server::{Options, Server, Stopper, Summary};
