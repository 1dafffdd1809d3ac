//! A vhost-user-blk backend: any mqblk device as the virtio-blk disk of a
//! QEMU guest (`-device vhost-user-blk-pci`, guest memory shared with
//! `memory-backend-memfd,share=on`).
//!
//! Modules, bottom up: config.rs (features and configuration space from
//! the device's limits), guard.rs (a SIGBUS guard over guest mappings
//! whose file may shrink), memory.rs (each memory table checked against
//! its files and guarded before the queues read it), vring.rs (the vring,
//! keeping the queue size asked and the error eventfd), chain.rs (a
//! chain's descriptors, an indirect table read in one copy), regions.rs
//! (guest memory regions, the last one kept), request.rs (a descriptor
//! chain to a typed request), in_order.rs (answers put in the used ring
//! in avail order), slot.rs (a request in flight; its data segments lent
//! as one bio), queue.rs (one virtqueue through one mqblk `Client`),
//! backend.rs (vhost-user-backend's trait), server.rs (the socket, one
//! connection at a time, stop), error.rs.
//!
//! Built on rust-vmm's crates: vhost (the vhost-user protocol),
//! vhost-user-backend (the daemon and one epoll worker per queue),
//! virtio-queue (split rings, descriptor chains, indirect tables) and
//! vm-memory (the guest's memory, mapped from the fds QEMU sends).
//!
//! Serving a device: `Server::new` listens on the socket (QEMU may start
//! from then on), `run` serves one QEMU after another until a `Stopper`
//! stops it (`mqblk vhost add` stops on SIGINT and SIGTERM).
//!
//! ```
//! use mqblk::Device;
//! use mqblk_vhost::{Options, Server};
//!
//! mqblk_null::register();
//! let socket = std::env::temp_dir().join(format!("mqblk-vhost-doc-{}.sock", std::process::id()));
//! let device = Device::open("null:gb=1,memory_backed=1,irqmode=0")?;
//! let server = Server::new(device, &socket, Options { queues: 2, ..Options::default() })?;
//! assert_eq!(server.disk().capacity_bytes, 1 << 30);
//! // QEMU: -chardev socket,id=vh0,path=SOCKET -device vhost-user-blk-pci,chardev=vh0,num-queues=2
//! let stopper = server.stopper();
//! stopper.stop(); // from a signal handler's thread, say
//! let summary = server.run()?;
//! assert_eq!(summary.connections, 0);
//! # let _ = std::fs::remove_file(&socket);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]

pub mod backend;
mod chain;
pub mod config;
pub mod error;
mod guard;
pub mod in_order;
pub mod memory;
pub mod queue;
mod regions;
pub mod request;
pub mod server;
mod slot;
pub mod vring;

pub use config::DiskLimits;
pub use error::Error;
pub use server::{Options, Server, Stopper, Summary};
