//! The `nbd:` driver: a remote NBD export (nbdkit, qemu-nbd, another
//! `mqblk serve`) as an mqblk device, the client side of the protocol
//! whose server is the rest of this crate. It lives here, not in a crate
//! of its own, because it shares proto.rs's wire constants and parsers;
//! it uses nothing else of the server and only mqblk's public driver
//! API, as an outside driver would, so the block layer still knows no
//! driver (as Linux keeps drivers/block/nbd.c apart from the protocol's
//! servers).
//!
//! | key | default | meaning |
//! |---|---|---|
//! | uri | (required) | `nbd://HOST[:PORT]/EXPORT` or `nbd+unix:///EXPORT?socket=PATH` (uri.rs); `nbds://`, `nbds+unix://`: TLS, with `tls_psk` |
//! | connections | 1 | sockets, one per hardware queue (Linux nbd's nr_hw_queues = connections) |
//! | queue_depth | 128 | tags per hardware queue: requests in flight per connection |
//! | timeout_ms | 30000 | a request not answered within it fails with EIO, waiting for a reconnect included |
//! | structured | 1 | ask for structured replies; 0: simple replies only |
//! | tls_psk | none | with an `nbds` URI: a psktool key file (`identity:hexkey` lines); the key of the URI's user (`nbds://alice@host/`), else the file's first |
//!
//! The export's transmission flags and NBD_INFO_BLOCK_SIZE become the
//! queue limits (driver.rs `limits_of`): read-only (writes fail with
//! EOPNOTSUPP), flush, FUA, trim, write zeroes, size and block sizes. A
//! request's segments go out with its header in one `sendmsg` (writes)
//! and a read's data lands in its segments (`recvmsg`); requests are
//! matched to replies by cookie (driver tag and a generation). A lost
//! connection is reconnected in the background and its requests sent
//! again; a request still unanswered after `timeout_ms` fails with EIO.
//!
//! ```no_run
//! use mqblk::Device;
//!
//! mqblk_nbd::client::register(); // `nbd:` specs now open NBD exports
//! let dev = Device::open("nbd:uri=nbd+unix:///?socket=/tmp/nbd.sock,connections=2")?;
//! assert_eq!(dev.nr_hw_queues(), 2);
//! dev.client().write_at(&[1; 4096], 0)?;
//! # Ok::<(), mqblk::Error>(())
//! ```
//!
//! - uri.rs: NBD URIs;
//! - config.rs: `NbdConfig`, the spec's keys, typed;
//! - handshake.rs: fixed newstyle negotiation, client side;
//! - reply.rs: transmission replies, parsed and checked (pure);
//! - slot.rs: a tag's request and who may touch its buffers;
//! - conn.rs: a connection's sending side, timeouts, reconnection;
//! - rx.rs: a connection's receiving thread;
//! - sock.rs: connecting, sendmsg and recvmsg;
//! - tls.rs: pre-shared keys and the TLS session (OpenSSL);
//! - link.rs: a connection's stream, plain or TLS;
//! - driver.rs: `NbdDriver`, the `Driver` implementation.
//!
//! TLS (NBD_OPT_STARTTLS, then TLS with a pre-shared key, as nbdkit's and
//! qemu-nbd's `--tls-psk`) copies every byte through encryption: each
//! iovec is one `SSL_write` or `SSL_read` (tls.rs).
//!
//! Relies on: mqblk's driver API; proto.rs; the openssl crate (tls.rs).

mod config;
mod conn;
mod driver;
mod handshake;
mod link;
pub mod reply;
mod rx;
mod slot;
mod sock;
mod tls;
mod uri;

pub use config::{NbdConfig, NBD_KEYS};
pub use driver::NbdDriver;
pub use handshake::{handshake, ExportInfo, HandshakeError};
pub use tls::{load_psk, Psk};
pub use uri::{Endpoint, NbdUri, DEFAULT_PORT};

/// Registers the `nbd:` driver (once; later calls do nothing).
pub fn register() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| mqblk::driver::register_driver_config("nbd", parse));
}

fn parse(p: &mqblk::config::SpecParams) -> Result<Box<dyn mqblk::driver::DriverConfig>, mqblk::config::ConfigError> {
    Ok(Box::new(NbdConfig::from_params(p)?))
}
