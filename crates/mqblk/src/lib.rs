//! mqblk: the Linux multi-queue block layer (blk-mq) in user space, as a
//! Rust library. Applications submit I/O through per-thread clients; a
//! driver (a RAM disk, a file through io_uring, one of your own) serves
//! it; in between the block layer does what blk-mq does: tags per hardware
//! queue, plugging and merging, splitting at the device's limits, I/O
//! schedulers, polling and timeouts.
//!
//! # A first example
//!
//! Open a [`Device`] from a spec, take a [`Client`] per thread, then
//! either submit [`Bio`]s and reap their [`Completion`]s
//! ([`Client::submit`], [`Client::do_io`]) or call the blocking helpers
//! ([`Client::read_at`], [`Client::write_at`]). Offsets are byte offsets
//! on the device and lengths are in bytes, both multiples of the logical
//! block size ([`QueueLimits::logical_block_size`]).
//!
//! ```
//! # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
//! # ram::register();
//! use mqblk::{Bio, Buf, Device};
//!
//! // 64 MiB, completed inline (irqmode=0), keeping its data (memory_backed=1).
//! let dev = Device::open("ram:size=64,irqmode=0,memory_backed=1")?;
//! assert_eq!(dev.limits().capacity_bytes, 64 << 20);
//! let mut client = dev.client();
//!
//! // Asynchronous: the buffer moves into the bio, and comes back in the
//! // completion with the cookie given at submission (here 1).
//! client.submit(Bio::write(4096, Buf::from_slice(&[0xab; 4096])), 1)?;
//! let mut done = Vec::new();
//! let reaped = client.do_io(&mut done, 1, 16, None)?; // at least 1, at most 16, no timeout
//! assert_eq!((reaped, done[0].user_data), (1, 1));
//! assert!(done[0].status.is_ok());
//!
//! // Blocking: 4096 bytes at byte offset 4096, then 512 bytes at 0.
//! let mut back = [0u8; 4096];
//! client.read_at(&mut back, 4096)?;
//! assert_eq!(back, [0xab; 4096]);
//! client.write_at(&[7; 512], 0)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The examples in these docs open `ram:` devices: a RAM disk of this
//! crate's own tests (tests/common/ram.rs, with null_blk's keys), which a
//! hidden line of each example includes and registers. The block layer
//! has no driver built in: a program opens `null:` devices from the
//! mqblk-null crate (after `mqblk_null::register()`), `file:` devices
//! from mqblk-file (after `mqblk_file::register()`), or a driver of its
//! own ([`driver`]). The same device from typed parts:
//! `Device::builder(NullConfig::new().gb(1).irqmode(IrqMode::None)).build()`
//! ([`Device::builder`], [`DeviceConfig`]).
//!
//! # Where each API lives
//!
//! - The crate root: what an application uses. [`Device`] and its
//!   configuration ([`DeviceConfig`], [`QueueConfig`], [`Sched`],
//!   [`Wake`]), [`Client`] and [`Plug`], [`Bio`], [`Buf`] and
//!   [`FixedBufs`], [`Completion`], [`Status`], the errors, the stats, the
//!   limits, and the handles on what a driver offers besides I/O
//!   ([`Zones`], [`DirectReads`], [`BlockStatusMap`], [`Attrs`], [`Power`],
//!   [`RegisteredBuffers`]).
//! - [`driver`]: writing a driver ([`driver::Driver`], the request token
//!   [`driver::Rq`], capabilities, typed configs, [`driver::register_driver`]).
//! - [`sched`]: writing an I/O scheduler ([`sched::Elevator`],
//!   [`sched::register_elevator`]).
//! - [`sbitmap`]: the tag bitmap and the tag wake policies
//!   ([`sbitmap::WakePolicy`], [`sbitmap::register_wake_policy`]).
//! - [`config`]: the spec grammar, `driver:key=value,...`
//!   ([`config::SpecParams`], [`config::SpecWriter`]), for drivers'
//!   configs.
//! - [`zoned`]: the zone model of zoned devices; [`clock`]: the clocks
//!   drivers and benchmarks share.
//!
//! Every fallible call of a device returns [`Error`] (a bad option is
//! [`Error::Config`], naming the spec key); only [`Client::submit`]
//! differs, giving a refused bio back in [`Rejected`]. Policies and
//! drivers of your own are registered by name, and specs then choose them
//! (`sched=sstf`, `wake=mine`, `mine:key=value`); the mqblk-cli crate's
//! examples (sstf.rs, wake_one.rs, ramdisk.rs) each write one.
//!
//! The path of one I/O, from `submit` to its completion, is told as
//! numbered steps in ARCHITECTURE.md at the root of the repository.
#![deny(unsafe_op_in_unsafe_fn)]

mod bio;
mod buf;
mod client;
pub mod clock;
mod completion;
pub mod config;
pub mod cpus;
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
mod segment;
pub mod socket_mode;
mod status;
mod sync;
mod tag;
mod trace;
pub mod zoned;

pub use bio::{Bio, IoPrio, IoPrioClass, Op, ReqFlags, SECTOR_SHIFT, SECTOR_SIZE};
pub use buf::{BioVec, Buf, FixedBufs, KernelBuf, BIO_MAX_VECS, BUF_ALIGN};
pub use client::{Client, ClientStats, Completion, CompletionSink, Plug, RwCount};
pub use config::ConfigError;
pub use device::{Attrs, BlockStatusMap, Device, DeviceConfig, DirectReads, Power, RegisteredBuffers, Zones};
pub use error::{Error, Rejected, SubmitError};
pub use limits::{QueueLimits, MAX_BIO_BYTES};
pub use queue::{DeviceStats, PlugNesting, QueueConfig, Wake};
pub use sched::Sched;
pub use status::Status;
pub use tag::TagSetConfig;
pub use trace::TraceStats;
