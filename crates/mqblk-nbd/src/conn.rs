//! One NBD connection: the exports it serves, the stream it runs over,
//! and its two phases in turn, the handshake and option haggling
//! (handshake.rs) and then transmission (transmission.rs).
//!
//! Relies on: handshake.rs, transmission.rs, tls.rs (the upgraded
//! stream), proto.rs's transmission flags, and mqblk's Device (open,
//! limits).

use std::io::{Read, Write};
use std::os::fd::AsRawFd;

use mqblk::{Device, DeviceConfig};

use crate::proto::*;
use crate::transmission::Transmission;
use crate::{handshake, Error, StopHandle, Tls};

/// An export: a name and the device behind it.
#[derive(Clone)]
pub struct Export {
    pub name: String,
    pub description: String,
    pub device: Device,
    pub read_only: bool,
    /// Large reads by the device's direct access where it offers it
    /// (`Device::read_direct`: a memory-backed null device lends its pages,
    /// which go to the socket with one copy fewer); on by default.
    pub direct_reads: bool,
    /// On a Unix socket, direct reads go to the socket by reference
    /// (vmsplice and splice: no copy by the server; splice.rs) where the
    /// device can lend its pages until the client has read them; on by
    /// default. Off: they are copied into the socket.
    pub splice_reads: bool,
}

impl Export {
    /// An export of the device `spec` opens (`null:` and `file:` specs,
    /// or a driver registered by name), described by its spec.
    pub fn open(name: &str, spec: &str, read_only: bool) -> Result<Self, Error> {
        mqblk_null::register();
        mqblk_file::register();
        let config = DeviceConfig::parse(spec)
            .map_err(|source| Error::Device { spec: spec.to_string(), source: source.into() })?;
        Self::new(name, &config, read_only)
    }

    /// An export of the device `config` builds, described by its spec.
    pub fn new(name: &str, config: &DeviceConfig, read_only: bool) -> Result<Self, Error> {
        let spec = config.to_string();
        let device = config.build().map_err(|source| Error::Device { spec: spec.clone(), source })?;
        Ok(Self {
            name: name.to_string(),
            description: spec,
            device,
            read_only,
            direct_reads: true,
            splice_reads: true,
        })
    }

    /// Transmission flags, true to the device's capabilities.
    pub fn transmission_flags(&self) -> u16 {
        let l = self.device.limits();
        let mut f = TF_HAS_FLAGS | TF_SEND_FLUSH | TF_SEND_FUA | TF_SEND_DF | TF_CAN_MULTI_CONN | TF_SEND_CACHE;
        if self.read_only {
            f |= TF_READ_ONLY;
        }
        if l.rotational {
            f |= TF_ROTATIONAL;
        }
        if l.max_discard_sectors > 0 && !self.read_only {
            f |= TF_SEND_TRIM;
        }
        if l.max_write_zeroes_sectors > 0 && !self.read_only {
            f |= TF_SEND_WRITE_ZEROES | TF_SEND_FAST_ZERO;
        }
        f
    }

    pub(crate) fn size(&self) -> u64 {
        self.device.limits().capacity_bytes
    }

    pub(crate) fn block_size(&self) -> u32 {
        self.device.limits().logical_block_size
    }
}

/// A stream the connection runs over: a TCP or Unix socket, or TLS over
/// one after NBD_OPT_STARTTLS (tls.rs). Its fd is polled for readiness.
pub trait Stream: Read + Write + AsRawFd + Send {
    /// Bytes the stream has taken from its socket and not yet returned
    /// (a TLS record's rest): poll(2) on the fd cannot see them.
    fn buffered_bytes(&self) -> usize {
        0
    }
    /// Whether the socket carries TLS records: its fd must then not be
    /// written to directly (no zero-copy read replies).
    fn is_tls(&self) -> bool {
        false
    }
}
impl Stream for std::net::TcpStream {}
impl Stream for std::os::unix::net::UnixStream {}

/// Runs one connection to its end (the client's disconnect or abort, or
/// `stop`), with TLS as `tls` says. Errors are the reason it closed.
pub fn serve_connection(s: Box<dyn Stream>, exports: &[Export], tls: &Tls, stop: &StopHandle) -> Result<(), Error> {
    let (s, Some((export, opts))) = handshake::handshake(s, exports, tls, stop)? else { return Ok(()) };
    Transmission::new(s, export, opts)?.run(stop)
}
