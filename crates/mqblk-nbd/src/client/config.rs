//! The `nbd:` driver's typed configuration, [`NbdConfig`]: the keys of
//! the table in mod.rs, parsed once from a spec, checked as a whole
//! (the URI included), printed back as the keys that differ from their
//! defaults, and opened as an `NbdDriver` (mqblk's `DriverConfig`).
//!
//! Relies on: mqblk's spec grammar; uri.rs; driver.rs (`NbdDriver`).

use mqblk::config::{check_range, ConfigError, SpecParams, SpecWriter};
use mqblk::driver::{Driver, DriverConfig};

use super::driver::NbdDriver;
use super::uri::NbdUri;

/// The keys an `nbd:` spec accepts.
pub const NBD_KEYS: &[&str] = &["uri", "connections", "queue_depth", "timeout_ms", "structured", "tls_psk"];

const CONNECTIONS: (u64, u64) = (1, 64);
const QUEUE_DEPTH: (u64, u64) = (1, 1024);
/// Up to an hour; the default is the kernel's 30 s request timeout.
const TIMEOUT_MS: (u64, u64) = (1, 3_600_000);
const DEFAULT_TIMEOUT_MS: u64 = 30_000;
const DEFAULT_QUEUE_DEPTH: u32 = 128;

/// An `nbd:` spec's parameters.
///
/// ```
/// use mqblk::config::SpecParams;
/// use mqblk::driver::DriverConfig;
/// use mqblk::Device;
/// use mqblk_nbd::client::NbdConfig;
///
/// let cfg = NbdConfig::new("nbd+unix:///disk?socket=/run/nbd.sock").connections(4).timeout_ms(5000);
/// assert_eq!(Device::builder(cfg.clone()).to_string(),
///            "nbd:uri=nbd+unix:///disk?socket=/run/nbd.sock,connections=4,timeout_ms=5000");
/// let p = SpecParams::parse("nbd:uri=nbd://host/x,queue_depth=32")?;
/// assert_eq!(NbdConfig::from_params(&p)?.queue_depth, 32);
/// assert!(NbdConfig::new("http://x").validate().unwrap_err().to_string().contains("uri"));
/// # Ok::<(), mqblk::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NbdConfig {
    /// `uri`: the export (nbd://, nbd+unix://; nbds://, nbds+unix:// with
    /// `tls_psk`).
    pub uri: String,
    /// `connections`: sockets, one per hardware queue.
    pub connections: usize,
    /// `queue_depth`: tags per hardware queue (requests in flight per
    /// connection).
    pub queue_depth: u32,
    /// `timeout_ms`: a request in flight longer fails with EIO (waiting
    /// for a reconnect included).
    pub timeout_ms: u64,
    /// `structured`: ask for structured replies (sparse reads, error
    /// messages); 0 forces simple replies.
    pub structured: bool,
    /// `tls_psk`: a PSK file (psktool's `identity:hexkey` lines) for
    /// nbds:// URIs: the key of the URI's user, or the file's first.
    pub tls_psk: Option<String>,
}

impl NbdConfig {
    /// The defaults for `uri`.
    pub fn new(uri: &str) -> Self {
        Self {
            uri: uri.to_string(),
            connections: 1,
            queue_depth: DEFAULT_QUEUE_DEPTH,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            structured: true,
            tls_psk: None,
        }
    }

    mqblk::setters! { connections: usize, queue_depth: u32, timeout_ms: u64, structured: bool }

    /// A spec's keys (the block layer's are taken out before).
    pub fn from_params(p: &SpecParams) -> Result<Self, ConfigError> {
        p.check_keys(NBD_KEYS)?;
        let uri = p.raw("uri").ok_or_else(|| {
            p.conflict("uri=nbd://HOST[:PORT]/EXPORT (or nbd+unix:///EXPORT?socket=PATH) is required")
        })?;
        let cfg = Self {
            uri: uri.to_string(),
            connections: p.u64_in("connections", 1, CONNECTIONS.0, CONNECTIONS.1)? as usize,
            queue_depth: p.u64_in("queue_depth", DEFAULT_QUEUE_DEPTH.into(), QUEUE_DEPTH.0, QUEUE_DEPTH.1)? as u32,
            timeout_ms: p.u64_in("timeout_ms", DEFAULT_TIMEOUT_MS, TIMEOUT_MS.0, TIMEOUT_MS.1)?,
            structured: p.bool("structured", true)?,
            tls_psk: p.raw("tls_psk").map(str::to_string),
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// The parsed URI (after `validate`, which checks it parses).
    pub fn parsed_uri(&self) -> Result<NbdUri, ConfigError> {
        NbdUri::parse(&self.uri).map_err(|e| ConfigError::conflict("nbd", format!("uri: {e}")))
    }
}

impl DriverConfig for NbdConfig {
    fn driver_name(&self) -> &str {
        "nbd"
    }

    fn validate(&self) -> Result<(), ConfigError> {
        check_range("nbd", "connections", self.connections as u64, CONNECTIONS)?;
        check_range("nbd", "queue_depth", self.queue_depth.into(), QUEUE_DEPTH)?;
        check_range("nbd", "timeout_ms", self.timeout_ms, TIMEOUT_MS)?;
        let uri = self.parsed_uri()?;
        // TLS is by pre-shared key only (no certificates yet): both or neither.
        match (uri.tls, &self.tls_psk) {
            (true, None) => Err(ConfigError::conflict(
                "nbd",
                format!("{}: nbds:// needs tls_psk=FILE (a psktool key file)", self.uri),
            )),
            (false, Some(_)) => Err(ConfigError::conflict("nbd", "tls_psk= is for nbds:// URIs")),
            _ => Ok(()),
        }
    }

    fn write_spec(&self, w: &mut SpecWriter) {
        let d = Self::new(&self.uri);
        w.pair("uri", &self.uri);
        w.pair_if_not("connections", self.connections, d.connections);
        w.pair_if_not("queue_depth", self.queue_depth, d.queue_depth);
        w.pair_if_not("timeout_ms", self.timeout_ms, d.timeout_ms);
        w.flag_if_not("structured", self.structured, d.structured);
        if let Some(psk) = &self.tls_psk {
            w.pair("tls_psk", psk);
        }
    }

    fn open(&self) -> Result<Box<dyn Driver>, mqblk::Error> {
        Ok(Box::new(NbdDriver::open(self)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(spec: &str) -> Result<NbdConfig, ConfigError> {
        NbdConfig::from_params(&SpecParams::parse(spec)?)
    }

    #[test]
    fn keys_parse_check_and_print_back() {
        let c = parse("nbd:uri=nbd://h:1/e,connections=2,queue_depth=64,timeout_ms=100,structured=0").unwrap();
        assert_eq!((c.connections, c.queue_depth, c.timeout_ms, c.structured), (2, 64, 100, false));
        let mut w = SpecWriter::new("nbd");
        c.write_spec(&mut w);
        assert_eq!(w.finish(), "nbd:uri=nbd://h:1/e,connections=2,queue_depth=64,timeout_ms=100,structured=0");
        assert!(parse("nbd:connections=2").unwrap_err().to_string().contains("uri="));
        assert!(parse("nbd:uri=nbd://h/,connections=0").unwrap_err().to_string().contains("connections"));
        assert!(parse("nbd:uri=nbd://h/,timeout_ms=0").unwrap_err().to_string().contains("timeout_ms"));
        assert!(parse("nbd:uri=nbd://h/,bogus=1").unwrap_err().to_string().contains("bogus"));
        assert!(parse("nbd:uri=nbd+unix:///e").unwrap_err().to_string().contains("socket=PATH"));
    }

    #[test]
    fn tls_takes_an_nbds_uri_and_a_key_file_together() {
        let c = parse("nbd:uri=nbds://alice@h/e,tls_psk=/etc/keys.psk").unwrap();
        assert_eq!(c.tls_psk.as_deref(), Some("/etc/keys.psk"));
        let e = parse("nbd:uri=nbds://alice@h/e").unwrap_err().to_string();
        assert!(e.contains("needs tls_psk=FILE"), "{e}");
        let e = parse("nbd:uri=nbd://h/e,tls_psk=/etc/keys.psk").unwrap_err().to_string();
        assert!(e.contains("nbds://"), "{e}");
    }
}
