//! An NBD server (the NetworkBlockDevice protocol, fixed newstyle) over
//! mqblk devices, so that QEMU, libnbd's tools, fio and the Linux nbd
//! client can use anything mqblk emulates or fronts.
//!
//! - proto.rs: the wire format, as pure functions;
//! - conn.rs: one connection, its exports and its stream;
//! - handshake.rs: the greeting and option haggling (NBD_OPT_*);
//! - transmission.rs: requests, submission under a plug, and (structured)
//!   replies;
//! - server.rs: listening on TCP or a Unix socket, a thread per
//!   connection, and a clean stop;
//! - tls.rs: TLS settings (nbdkit's), the PSK file, the upgraded stream;
//! - stop.rs: the stop handle that ends a server from another thread;
//! - error.rs: the library's error type;
//! - client/: the `nbd:` driver, the protocol's client side (an NBD
//!   export as an mqblk device).
//!
//! ```no_run
//! use mqblk_nbd::{Export, Listen, Server};
//! # fn main() -> Result<(), mqblk_nbd::Error> {
//! let export = Export::open("", "null:size=64,memory_backed=1", false)?;
//! let server = Server::new(Listen::tcp("127.0.0.1:10809")?, vec![export])?;
//! let stop = server.stop_handle(); // give it to a signal-handling thread
//! server.run()?; // returns once `stop.stop()` was called
//! # Ok(())
//! # }
//! ```
//!
//! Messages go through the `log` crate (target `mqblk_nbd`): connections
//! closed and refused at `warn`/`info`, connections opened at `debug`.

pub mod client;
pub mod conn;
mod error;
mod handshake;
pub mod proto;
mod server;
pub mod sparse;
mod splice;
mod stop;
mod tls;
mod transmission;

pub use conn::Export;
pub use error::Error;
pub use server::{Listen, Server, DEFAULT_MAX_CONNECTIONS};
pub use stop::StopHandle;
pub use tls::{parse_psk_file, Credentials, Tls, TlsMode};
