//! mqblk: the Linux multi-queue block layer (blk-mq) as a user-space library.
//!
//! Open a device from a spec, take a [`Client`] per thread, submit [`Bio`]s
//! and reap [`Completion`]s:
//!
//! ```
//! use mqblk::{Bio, Buf, Device};
//!
//! let dev = Device::open("null:gb=1,irqmode=0,memory_backed=1").unwrap();
//! let mut client = dev.client();
//! client.submit(Bio::write(4096, Buf::from_slice(&[0xab; 4096])), 1).unwrap();
//! let mut done = Vec::new();
//! client.do_io(&mut done, 1, 16, None).unwrap();
//! assert_eq!(done[0].user_data, 1);
//! assert!(done[0].status.is_ok());
//!
//! let mut back = [0u8; 4096];
//! client.read_at(&mut back, 4096).unwrap();
//! assert_eq!(back, [0xab; 4096]);
//! ```
//!
//! The same device from typed parts: `Device::builder().null(NullConfig::new()
//! .gb(1).irqmode(IrqMode::None).memory_backed(true)).build()` ([`DeviceBuilder`]).
//! Every fallible call of a device returns [`Error`] (a bad option is
//! `Error::Config`, naming the spec key); only `Client::submit` differs,
//! giving a refused bio back in [`Rejected`].
//!
//! Policies and drivers of your own: implement [`Elevator`], [`WakePolicy`]
//! or [`driver::Driver`] and register it by name ([`register_elevator`],
//! [`register_wake_policy`], [`register_driver`]); specs then choose it
//! (`sched=sstf`, `wake=mine`, `mine:key=value`). The mqblk-cli crate's
//! examples (sstf.rs, wake_one.rs) do it in about 100 lines each.
//!
//! The path of one I/O is described step by step in ARCHITECTURE.md.
#![deny(unsafe_op_in_unsafe_fn)]

mod bio;
mod buf;
mod client;
pub mod clock;
mod completion;
pub mod config;
mod device;
pub mod driver;
mod error;
mod hctx;
mod limits;
#[cfg(all(test, loom))]
mod loom_models;
mod merge;
mod plug;
mod queue;
mod registry;
mod request;
pub mod sbitmap;
pub mod sched;
mod status;
mod sync;
mod tag;
pub mod zoned;

pub use bio::{Bio, IoPrio, IoPrioClass, Op, ReqFlags, SECTOR_SHIFT, SECTOR_SIZE};
pub use buf::{Buf, FixedBufs, BUF_ALIGN};
pub use client::{Client, ClientStats, Completion, CompletionSink, Plug, RwCount};
pub use config::ConfigError;
pub use device::{Attrs, BlockStatusMap, Device, DeviceConfig, DirectReads, Power, RegisteredBuffers, Zones};
pub use error::{Error, Rejected, SubmitError};
pub use limits::{QueueLimits, MAX_BIO_BYTES};
pub use queue::{DeviceStats, PlugNesting, QueueConfig, Wake};
pub use sched::Sched;
pub use status::Status;
pub use tag::TagSetConfig;
