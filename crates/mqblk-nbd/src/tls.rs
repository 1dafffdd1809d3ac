//! TLS for NBD connections (the spec's NBD_OPT_STARTTLS): the server's
//! TLS settings with nbdkit's option names and meanings (`--tls=off|on|
//! require`, `--tls-psk=FILE`, `--tls-certificates=DIR`,
//! `--tls-verify-peer`), the PSK file's parser, and the stream a
//! connection runs over once upgraded.
//!
//! Why OpenSSL (the `openssl` crate) and not rustls: the NBD clients that
//! matter (libnbd's nbdinfo and nbdcopy, qemu's tls-creds-psk) speak
//! GnuTLS's PSK: an identity and a key from a psktool file, offered as a
//! TLS 1.3 external PSK (or a TLS 1.2 PSK cipher suite). rustls has no
//! external PSK; OpenSSL's server PSK callback serves both versions
//! (TLS 1.3 with its SHA-256 suites, which GnuTLS offers). Certificates
//! go through the same library, so one TLS stack serves both.
//!
//! Settings (as nbdkit): `on` lets clear clients in and upgrades those
//! that ask; `require` answers every option before STARTTLS with
//! NBD_REP_ERR_TLS_REQD (handshake.rs). A PSK file has psktool's
//! `username:hexkey` lines; it is read once, when the server starts. A
//! certificate directory holds ca-cert.pem, server-cert.pem and
//! server-key.pem; with verify-peer a client must show a certificate
//! that ca-cert.pem signed.
//!
//! The upgraded stream reports the plaintext OpenSSL has decrypted and
//! not yet handed out (`Stream::buffered_bytes`): poll(2) on the socket
//! cannot see it, so the option loop and transmission ask before they
//! wait. Its socket is not written to directly: the zero-copy read paths
//! (direct sendmsg, splice) are off on it (`Stream::is_tls`).
//!
//! Relies on: OpenSSL (libssl 1.1.1 or later: TLS 1.3 PSK through the
//! server PSK callback); conn.rs's Stream.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};

use openssl::ssl::{
    HandshakeError, Ssl, SslContext, SslFiletype, SslMethod, SslSessionCacheMode, SslStream, SslVerifyMode, SslVersion,
};
use openssl::x509::X509Name;

use crate::conn::Stream;
use crate::Error;

/// How long the TLS handshake may wait on the client (a client that
/// stalls mid-handshake would otherwise hold its thread, and a stop, for
/// good; the option phase's own waits watch the stop handle instead).
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Longest PSK identity accepted (OpenSSL's PSK_MAX_IDENTITY_LEN in 1.1.1).
const MAX_IDENTITY_BYTES: usize = 128;
/// Longest PSK accepted (OpenSSL's PSK_MAX_PSK_LEN in 1.1.1; psktool
/// makes 32-byte keys unless told).
const MAX_KEY_BYTES: usize = 256;

/// Whether connections may, or must, use TLS (nbdkit's `--tls`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsMode {
    /// No TLS: NBD_OPT_STARTTLS is refused (NBD_REP_ERR_POLICY).
    #[default]
    Off,
    /// Clients may upgrade with NBD_OPT_STARTTLS; clear clients are served.
    On,
    /// Every option before NBD_OPT_STARTTLS (except ABORT) is refused
    /// with NBD_REP_ERR_TLS_REQD: no export is reachable in clear.
    Require,
}

impl std::str::FromStr for TlsMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(Self::Off),
            "on" => Ok(Self::On),
            "require" => Ok(Self::Require),
            _ => Err(format!("--tls={s}: expected off, on or require")),
        }
    }
}

/// Where a TLS server's credentials come from.
#[derive(Debug, Clone)]
pub enum Credentials {
    /// psktool's `username:hexkey` file.
    Psk(PathBuf),
    /// A directory with ca-cert.pem, server-cert.pem and server-key.pem;
    /// `verify_peer`: clients must show a certificate ca-cert.pem signed.
    Certificates { dir: PathBuf, verify_peer: bool },
}

/// A server's TLS setting: the mode and, unless off, the credentials
/// loaded into an OpenSSL context shared by every connection.
#[derive(Clone, Default)]
pub struct Tls {
    mode: TlsMode,
    context: Option<SslContext>,
}

impl Tls {
    /// No TLS (the default).
    pub fn off() -> Self {
        Self::default()
    }

    /// TLS `mode` (on or require) with `credentials`; Err names the file
    /// or line that is wrong.
    ///
    /// ```
    /// use mqblk_nbd::{Credentials, Export, Listen, Server, Tls, TlsMode};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let psk = std::env::temp_dir().join(format!("mqblk-doc-{}.psk", std::process::id()));
    /// std::fs::write(&psk, "alice:5f3c1a0b9d8e7f6a5b4c3d2e1f0a9b8c\n")?; // as `psktool -u alice -p FILE`
    /// let tls = Tls::new(TlsMode::Require, &Credentials::Psk(psk.clone()))?;
    /// let export = Export::open("", "null:size=64,memory_backed=1", false)?;
    /// let server = Server::new(Listen::tcp("127.0.0.1:0")?, vec![export])?.tls(tls);
    /// # drop(server);
    /// # std::fs::remove_file(psk)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(mode: TlsMode, credentials: &Credentials) -> Result<Self, Error> {
        if mode == TlsMode::Off {
            return Err(Error::TlsSetup("TLS credentials given with TLS off".into()));
        }
        let context = match credentials {
            Credentials::Psk(path) => psk_context(path)?,
            Credentials::Certificates { dir, verify_peer } => certificate_context(dir, *verify_peer)?,
        };
        Ok(Self { mode, context: Some(context) })
    }

    pub fn mode(&self) -> TlsMode {
        self.mode
    }

    /// The TLS handshake on `s`, whose client was just told yes to
    /// NBD_OPT_STARTTLS; the stream the connection goes on with.
    pub(crate) fn accept(&self, s: Box<dyn Stream>) -> Result<Box<dyn Stream>, Error> {
        let context = self.context.as_ref().expect("STARTTLS is accepted only with TLS on");
        let ssl = Ssl::new(context).map_err(|e| Error::TlsHandshake(e.to_string()))?;
        let fd = s.as_raw_fd();
        set_timeouts(fd, HANDSHAKE_TIMEOUT)?;
        let stream = ssl.accept(Corked::new(s)).map_err(|e| {
            Error::TlsHandshake(match e {
                HandshakeError::SetupFailure(e) => e.to_string(),
                HandshakeError::Failure(m) | HandshakeError::WouldBlock(m) => m.error().to_string(),
            })
        })?;
        // Transmission blocks on the socket as a clear connection does.
        set_timeouts(fd, std::time::Duration::ZERO)?;
        Ok(Box::new(TlsStream { ssl: stream, joined: Vec::with_capacity(RECORD_BYTES) }))
    }
}

/// Sets the socket's receive and send timeouts (zero: none).
fn set_timeouts(fd: RawFd, timeout: std::time::Duration) -> Result<(), Error> {
    let tv = libc::timeval { tv_sec: timeout.as_secs() as libc::time_t, tv_usec: timeout.subsec_micros() as _ };
    for option in [libc::SO_RCVTIMEO, libc::SO_SNDTIMEO] {
        // SAFETY: setsockopt on the connection's socket with a live
        // timeval of the size given.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                option,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(Error::Io {
                what: "socket timeout for the TLS handshake",
                source: std::io::Error::last_os_error(),
            });
        }
    }
    Ok(())
}

/// Whether a TLS stream has more to read without waiting: plaintext it
/// decrypted already, or bytes on its socket (a record, which arrives
/// whole from a client that sent it whole).
pub(crate) fn more_to_read(s: &dyn Stream) -> bool {
    if s.buffered_bytes() > 0 {
        return true;
    }
    let mut fd = libc::pollfd { fd: s.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, no timeout.
    unsafe { libc::poll(&mut fd, 1, 0) > 0 }
}

/// A context common to both kinds of credentials: TLS 1.2 and up, no
/// session tickets or cache (an NBD connection lasts; nothing to resume).
fn base_context() -> Result<openssl::ssl::SslContextBuilder, Error> {
    let setup = |e: openssl::error::ErrorStack| Error::TlsSetup(format!("OpenSSL: {e}"));
    let mut b = SslContext::builder(SslMethod::tls_server()).map_err(setup)?;
    b.set_min_proto_version(Some(SslVersion::TLS1_2)).map_err(setup)?;
    b.set_session_cache_mode(SslSessionCacheMode::OFF);
    b.set_num_tickets(0).map_err(setup)?;
    Ok(b)
}

fn psk_context(path: &Path) -> Result<SslContext, Error> {
    let text =
        std::fs::read_to_string(path).map_err(|e| Error::TlsSetup(format!("--tls-psk {}: {e}", path.display())))?;
    let keys = parse_psk_file(&text).map_err(|e| Error::TlsSetup(format!("--tls-psk {}: {e}", path.display())))?;
    let mut b = base_context()?;
    b.set_psk_server_callback(move |_ssl, identity, psk| {
        // An unknown identity gets no key (0): the handshake then fails,
        // as there is no certificate to fall back to.
        let Some(key) = identity.and_then(|id| keys.get(id)) else {
            let who = identity.map(String::from_utf8_lossy).unwrap_or_default();
            log::warn!("TLS: unknown PSK identity '{who}' (the handshake fails next)");
            return Ok(0);
        };
        // Keys were checked against MAX_KEY_BYTES; OpenSSL's buffer is at least that.
        let n = key.len().min(psk.len());
        psk[..n].copy_from_slice(&key[..n]);
        Ok(n)
    });
    Ok(b.build())
}

fn certificate_context(dir: &Path, verify_peer: bool) -> Result<SslContext, Error> {
    let file = |name: &str| {
        let p = dir.join(name);
        match std::fs::metadata(&p) {
            Ok(_) => Ok(p),
            Err(e) => Err(Error::TlsSetup(format!("--tls-certificates: {}: {e}", p.display()))),
        }
    };
    let (ca, cert, key) = (file("ca-cert.pem")?, file("server-cert.pem")?, file("server-key.pem")?);
    let bad = |p: &Path, e: openssl::error::ErrorStack| Error::TlsSetup(format!("{}: {e}", p.display()));
    let mut b = base_context()?;
    b.set_certificate_chain_file(&cert).map_err(|e| bad(&cert, e))?;
    b.set_private_key_file(&key, SslFiletype::PEM).map_err(|e| bad(&key, e))?;
    b.check_private_key()
        .map_err(|e| Error::TlsSetup(format!("{} does not match {}: {e}", key.display(), cert.display())))?;
    b.set_ca_file(&ca).map_err(|e| bad(&ca, e))?;
    if verify_peer {
        // The CA's name goes into the certificate request, so that a
        // client holding several certificates picks the right one.
        b.set_client_ca_list(X509Name::load_client_ca_file(&ca).map_err(|e| bad(&ca, e))?);
        b.set_verify(SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT);
    }
    Ok(b.build())
}

/// Parses psktool's PSK file: a `username:hexkey` line per identity
/// (blank lines skipped). Err names the line and what is wrong with it.
///
/// ```
/// let keys = mqblk_nbd::parse_psk_file("alice:00ff\n").unwrap();
/// assert_eq!(keys[&b"alice"[..]], [0x00, 0xff]);
/// assert_eq!(mqblk_nbd::parse_psk_file("alice:00ff\nbob").unwrap_err(),
///            "line 2: expected username:hexkey (psktool's format), found no ':'");
/// ```
pub fn parse_psk_file(text: &str) -> Result<HashMap<Vec<u8>, Vec<u8>>, String> {
    let mut keys = HashMap::new();
    let mut first_line = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let Some((user, hex)) = line.split_once(':') else {
            return Err(format!("line {n}: expected username:hexkey (psktool's format), found no ':'"));
        };
        if user.is_empty() {
            return Err(format!("line {n}: the username is empty"));
        }
        if user.len() > MAX_IDENTITY_BYTES {
            return Err(format!("line {n}: the username is over {MAX_IDENTITY_BYTES} bytes"));
        }
        let key = parse_hex(hex.trim()).map_err(|e| format!("line {n} (user '{user}'): {e}"))?;
        if let Some(earlier) = first_line.insert(user.to_string(), n) {
            return Err(format!("line {n}: user '{user}' is already on line {earlier}"));
        }
        keys.insert(user.as_bytes().to_vec(), key);
    }
    if keys.is_empty() {
        return Err("no keys in the file (psktool -u USERNAME -p FILE makes one)".into());
    }
    Ok(keys)
}

fn parse_hex(hex: &str) -> Result<Vec<u8>, String> {
    if hex.is_empty() {
        return Err("the key is empty".into());
    }
    if hex.len() % 2 != 0 {
        return Err(format!("the key has an odd number ({}) of hex digits", hex.len()));
    }
    if hex.len() / 2 > MAX_KEY_BYTES {
        return Err(format!("the key is over {MAX_KEY_BYTES} bytes"));
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            let pair = hex.get(i..i + 2).ok_or("the key is not hex")?;
            u8::from_str_radix(pair, 16).map_err(|_| format!("the key is not hex ('{pair}')"))
        })
        .collect()
}

/// A connection's stream once TLS is up: OpenSSL over the clear one.
struct TlsStream {
    ssl: SslStream<Corked>,
    /// A reply's header and the start of its data, for one record.
    joined: Vec<u8>,
}

/// A TLS record's most plaintext: a short first buffer (a reply's header)
/// and the start of the next one go out in one record of up to this.
const RECORD_BYTES: usize = 16 << 10;

/// Ciphertext gathered before a write(2) while a reply is corked: eight
/// records. OpenSSL hands its socket one record at a time, so a 1 MiB
/// read reply was 64 write(2)s; nbdkit corks GnuTLS (gnutls_record_cork)
/// for the same reason.
const CORK_BYTES: usize = 128 << 10;

impl TlsStream {
    /// Encrypts all of `bufs` into corked records, then sends them: a
    /// reply goes out in CORK_BYTES write(2)s, not one per record. A
    /// short first buffer (a reply's header) shares a record with the
    /// start of the next one, not a record of its own.
    fn write_corked(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        let mut rest = bufs.iter().map(|b| &b[..]).filter(|b| !b.is_empty()).peekable();
        self.ssl.get_mut().corked = true;
        let sent = (|| {
            let mut total = 0;
            while let Some(b) = rest.next() {
                let (s, joined) = (&mut self.ssl, &mut self.joined);
                match rest.peek_mut() {
                    Some(next) if b.len() < RECORD_BYTES / 4 => {
                        let take = next.len().min(RECORD_BYTES - b.len());
                        joined.clear();
                        joined.extend_from_slice(b);
                        joined.extend_from_slice(&next[..take]);
                        s.write_all(joined)?;
                        *next = &next[take..];
                        total += joined.len();
                    }
                    _ => {
                        s.write_all(b)?;
                        total += b.len();
                    }
                }
            }
            Ok(total)
        })();
        let corked = self.ssl.get_mut();
        corked.corked = false;
        corked.drain()?;
        sent
    }
}

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.ssl.read(buf)
    }
}

impl Write for TlsStream {
    /// Blocking SSL_write: all of it is sent, or it fails.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_corked(&[std::io::IoSlice::new(buf)])
    }
    /// std's default writes the first buffer alone: a reply's header
    /// would be a TLS record (and a write(2)) of its own.
    fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        self.write_corked(bufs)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.ssl.flush()
    }
}

/// The socket under OpenSSL. Corked, it gathers the records OpenSSL
/// writes (up to CORK_BYTES) and sends them together; uncorked (the
/// handshake, the close_notify) it passes every write through.
struct Corked {
    inner: Box<dyn Stream>,
    out: Vec<u8>,
    corked: bool,
}

impl Corked {
    fn new(inner: Box<dyn Stream>) -> Self {
        Self { inner, out: Vec::with_capacity(CORK_BYTES), corked: false }
    }

    /// Sends what is gathered.
    fn drain(&mut self) -> std::io::Result<()> {
        let r = self.inner.write_all(&self.out);
        self.out.clear();
        r
    }
}

impl Read for Corked {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf)
    }
}

impl Write for Corked {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if !self.corked {
            return self.inner.write(buf);
        }
        if self.out.len() + buf.len() > CORK_BYTES {
            self.drain()?;
        }
        if buf.len() > CORK_BYTES {
            return self.inner.write(buf);
        }
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.drain()?;
        self.inner.flush()
    }
}

impl AsRawFd for TlsStream {
    /// The socket, for poll(2) only: its bytes are TLS records.
    fn as_raw_fd(&self) -> RawFd {
        self.ssl.get_ref().inner.as_raw_fd()
    }
}

impl Stream for TlsStream {
    fn buffered_bytes(&self) -> usize {
        self.ssl.ssl().pending()
    }
    fn is_tls(&self) -> bool {
        true
    }
}

impl Drop for TlsStream {
    /// A close_notify alert, so that the client sees a clean end rather
    /// than a truncation (it may be gone already: then nothing to do).
    fn drop(&mut self) {
        let _ = self.ssl.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psk_file_lines_parse_to_identities_and_keys() {
        let keys = parse_psk_file("alice:00ff10\n\nbob:ABCDEF\r\n").unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[&b"alice"[..]], vec![0x00, 0xff, 0x10]);
        assert_eq!(keys[&b"bob"[..]], vec![0xab, 0xcd, 0xef]);
    }

    #[test]
    fn psk_file_errors_name_the_line() {
        let err = |t: &str| parse_psk_file(t).unwrap_err();
        assert_eq!(err("alice:00\nbob"), "line 2: expected username:hexkey (psktool's format), found no ':'");
        assert_eq!(err(":00"), "line 1: the username is empty");
        assert_eq!(err("alice:0g"), "line 1 (user 'alice'): the key is not hex ('0g')");
        assert_eq!(err("alice:abc"), "line 1 (user 'alice'): the key has an odd number (3) of hex digits");
        assert_eq!(err("alice:"), "line 1 (user 'alice'): the key is empty");
        assert_eq!(err("alice:00\n\nalice:11"), "line 3: user 'alice' is already on line 1");
        assert!(err("").contains("no keys"));
        assert!(err(&format!("a:{}", "00".repeat(MAX_KEY_BYTES + 1))).contains("over 256 bytes"));
        assert!(err(&format!("{}:00", "u".repeat(MAX_IDENTITY_BYTES + 1))).contains("username is over"));
        assert!(err("alice:é").contains("not hex"), "a multi-byte character is not hex, not a panic");
    }

    #[test]
    fn modes_parse_as_nbdkit_spells_them() {
        assert_eq!("off".parse::<TlsMode>(), Ok(TlsMode::Off));
        assert_eq!("on".parse::<TlsMode>(), Ok(TlsMode::On));
        assert_eq!("require".parse::<TlsMode>(), Ok(TlsMode::Require));
        assert_eq!("yes".parse::<TlsMode>().unwrap_err(), "--tls=yes: expected off, on or require");
    }

    #[test]
    fn missing_credentials_name_the_file() {
        let dir = std::env::temp_dir().join(format!("mqblk-tls-none-{}", std::process::id()));
        let e = Tls::new(TlsMode::Require, &Credentials::Psk(dir.join("keys.psk"))).err().unwrap();
        assert!(e.to_string().contains("keys.psk"), "{e}");
        let e =
            Tls::new(TlsMode::On, &Credentials::Certificates { dir: dir.clone(), verify_peer: false }).err().unwrap();
        assert!(e.to_string().contains("ca-cert.pem"), "{e}");
    }

    /// A socket that counts the write(2)s made on it.
    struct Counting(std::os::unix::net::UnixStream, std::sync::Arc<std::sync::atomic::AtomicUsize>);
    impl Read for Counting {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.0.read(buf)
        }
    }
    impl Write for Counting {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.0.write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl AsRawFd for Counting {
        fn as_raw_fd(&self) -> RawFd {
            self.0.as_raw_fd()
        }
    }
    impl Stream for Counting {}

    /// A read reply as transmission sends it (a short header, then data
    /// past several records, by write_all_vectored), then a lone write:
    /// the client gets every byte once and in order (write_vectored's
    /// count must be what it sent, the joined record included), and the
    /// corked records leave in a few write(2)s, not one per record.
    #[test]
    fn a_reply_arrives_whole_in_order_and_in_few_socket_writes() {
        use openssl::ssl::{SslConnector, SslVerifyMode};
        let dir = std::env::temp_dir().join(format!("mqblk-tls-cork-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = [0x5au8; 32];
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        std::fs::write(dir.join("keys.psk"), format!("alice:{hex}\n")).unwrap();
        let tls = Tls::new(TlsMode::Require, &Credentials::Psk(dir.join("keys.psk"))).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();

        let header = [7u8; 16];
        let data: Vec<u8> = (0..(1usize << 20) + 12_345).map(|i| (i * 31 % 251) as u8).collect();
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let writes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = writes.clone();
        let (h, d) = (header, data.clone());
        let server = std::thread::spawn(move || {
            let mut s = tls.accept(Box::new(Counting(a, counted.clone()))).unwrap();
            let after_handshake = counted.load(std::sync::atomic::Ordering::Relaxed);
            crate::transmission::write_all_vectored(&mut *s, &h, &d).unwrap();
            assert_eq!(s.write(b"end").unwrap(), 3);
            counted.load(std::sync::atomic::Ordering::Relaxed) - after_handshake
        });

        let mut builder = SslConnector::builder(SslMethod::tls_client()).unwrap();
        builder.set_verify(SslVerifyMode::NONE);
        builder.set_psk_client_callback(move |_ssl, _hint, identity, psk| {
            identity[..6].copy_from_slice(b"alice\0");
            psk[..key.len()].copy_from_slice(&key);
            Ok(key.len())
        });
        let config = builder.build().configure().unwrap();
        let mut client = config.verify_hostname(false).use_server_name_indication(false).connect("", b).unwrap();
        let mut got = vec![0u8; header.len() + data.len() + 3];
        client.read_exact(&mut got).unwrap();
        assert_eq!(got[..16], header);
        assert!(got[16..16 + data.len()] == data[..], "the data arrived altered");
        assert_eq!(&got[16 + data.len()..], b"end");

        let socket_writes = server.join().unwrap();
        // 1 MiB and 12 KiB of plaintext is 66 records; corked, about 9
        // write(2)s of CORK_BYTES, and one for "end".
        let most = (header.len() + data.len()).div_ceil(CORK_BYTES - (16 << 10)) + 1;
        assert!(socket_writes <= most, "{socket_writes} socket writes for one reply and a word (at most {most})");
    }
}
