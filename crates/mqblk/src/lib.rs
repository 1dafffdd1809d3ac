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
//! The path of one I/O is described step by step in ARCHITECTURE.md.
#![deny(unsafe_op_in_unsafe_fn)]

mod bio;
mod buf;
mod client;
pub mod clock;
mod completion;
pub mod config;
pub mod driver;
mod error;
pub mod fixed;
mod hctx;
mod limits;
#[cfg(all(test, loom))]
mod loom_models;
mod merge;
pub mod plug;
mod queue;
mod request;
mod ring;
pub mod sbitmap;
pub mod sched;
mod status;
mod sync;
mod tag;
mod timeout;
pub mod zoned;

pub use buf::{Buf, BUF_ALIGN};
pub use client::{Client, ClientStats, Completion, RwCount};
pub use config::{ConfigError, QueueOptions};
pub use error::{Error, Rejected, SubmitError};
pub use fixed::FixedBufs;
pub use hctx::Hctx;
pub use plug::{Plug, PlugNesting};
pub use queue::{Device, DeviceStats, QueueLimits, DEFAULT_MAX_SECTORS, DEFAULT_MAX_SEGMENTS, MAX_BIO_BYTES};
pub use request::{op_is_sync, Bio, IoPrio, IoPrioClass, Op, ReqFlags, Rq, RqList, SECTOR_SHIFT, SECTOR_SIZE};
pub use status::Status;
pub use tag::TagSetConfig;
