//! TLS for the `nbd:` driver (`nbds://` URIs): pre-shared keys from a
//! psktool file (`identity:hexkey` lines, what nbdkit's and qemu-nbd's
//! `--tls-psk` read), the TLS handshake after NBD_OPT_STARTTLS (OpenSSL,
//! through the openssl crate), and the session both of a connection's
//! threads use afterwards.
//!
//! One OpenSSL session must not be used by two threads at once, and the
//! sender and the receiver each need it: the session sits under a lock,
//! the socket is nonblocking, and a party that would wait (OpenSSL's
//! WANT_READ / WANT_WRITE) drops the lock and sleeps in poll(2) first, so
//! neither ever waits for the socket while holding it. Encryption copies
//! the data in any case: a TLS connection has no zero-copy path, and each
//! iovec is one `SSL_write` or `SSL_read`.
//!
//! Relies on: the openssl crate; sock.rs's `Stream`.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use openssl::ssl::{ErrorCode, SslConnector, SslMethod, SslStream, SslVerifyMode};
use parking_lot::Mutex;

use super::sock::Stream;

/// A pre-shared key and the identity it belongs to.
#[derive(Clone, PartialEq, Eq)]
pub struct Psk {
    pub identity: String,
    pub key: Vec<u8>,
}

impl std::fmt::Debug for Psk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Psk {{ identity: {:?}, key: {} bytes }}", self.identity, self.key.len())
    }
}

/// Reads `file` (psktool's format) and takes the key of `identity`, or
/// the first key when the URI named no user.
pub fn load_psk(file: &str, identity: Option<&str>) -> Result<Psk, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("tls_psk={file}: {e}"))?;
    parse_psk(&text, identity).map_err(|e| format!("tls_psk={file}: {e}"))
}

fn parse_psk(text: &str, identity: Option<&str>) -> Result<Psk, String> {
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let (id, hex) = line.trim().split_once(':').ok_or_else(|| format!("line {}: not identity:hexkey", n + 1))?;
        if identity.is_some_and(|want| want != id) {
            continue;
        }
        let bytes = hex.as_bytes();
        if bytes.is_empty() || bytes.len() % 2 != 0 {
            return Err(format!("line {}: the key is not whole bytes of hex", n + 1));
        }
        let key = bytes
            .chunks(2)
            .map(|pair| std::str::from_utf8(pair).ok().and_then(|h| u8::from_str_radix(h, 16).ok()))
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(|| format!("line {}: the key is not hex", n + 1))?;
        return Ok(Psk { identity: id.to_string(), key });
    }
    Err(match identity {
        Some(id) => format!("no key for identity '{id}'"),
        None => "no keys".to_string(),
    })
}

/// A connection's TLS session, shared by its sender and its receiver.
pub(crate) struct TlsSession {
    ssl: Mutex<SslStream<Stream>>,
    fd: RawFd,
}

impl TlsSession {
    /// The TLS handshake with `psk` on `stream`, where NBD_OPT_STARTTLS
    /// was just acknowledged (the stream is still blocking, with the
    /// handshake's time limits).
    pub(crate) fn connect(stream: Stream, psk: &Psk) -> Result<Self, String> {
        let mut builder = SslConnector::builder(SslMethod::tls_client()).map_err(|e| format!("TLS setup: {e}"))?;
        builder.set_verify(SslVerifyMode::NONE); // a PSK proves both ends; there is no certificate
        builder.set_cipher_list("PSK").map_err(|e| format!("TLS setup: {e}"))?;
        let psk_for_callback = psk.clone();
        builder.set_psk_client_callback(move |_ssl, _hint, identity, key| {
            let id = psk_for_callback.identity.as_bytes();
            if id.len() + 1 > identity.len() || psk_for_callback.key.len() > key.len() {
                return Err(openssl::error::ErrorStack::get());
            }
            identity[..id.len()].copy_from_slice(id);
            identity[id.len()] = 0;
            key[..psk_for_callback.key.len()].copy_from_slice(&psk_for_callback.key);
            Ok(psk_for_callback.key.len())
        });
        let config = builder.build().configure().map_err(|e| format!("TLS setup: {e}"))?;
        let fd = stream.as_raw_fd();
        let ssl = config
            .verify_hostname(false)
            .use_server_name_indication(false)
            .connect("", stream)
            .map_err(|e| format!("TLS handshake: {e}"))?;
        Ok(Self { ssl: Mutex::new(ssl), fd })
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.fd
    }

    /// Transmission: no time limits, and nonblocking (the module docs).
    pub(crate) fn start_transmission(&self) -> io::Result<()> {
        self.ssl.lock().get_mut().set_transmission_nonblocking()
    }

    /// Encrypts and sends every byte of `iov`, advancing its entries.
    ///
    /// # Safety
    /// As `sock::send_all`: each iovec describes memory valid for reads
    /// for the whole call.
    pub(crate) unsafe fn send_all(&self, iov: &mut [libc::iovec]) -> io::Result<()> {
        for v in iov.iter_mut() {
            // SAFETY: the caller's promise for this iovec.
            let bytes = unsafe { std::slice::from_raw_parts(v.iov_base.cast::<u8>(), v.iov_len) };
            let mut done = 0;
            while done < bytes.len() {
                let wait = match self.ssl.lock().ssl_write(&bytes[done..]) {
                    Ok(n) => {
                        done += n;
                        continue;
                    }
                    Err(e) if e.code() == ErrorCode::WANT_WRITE => libc::POLLOUT,
                    Err(e) if e.code() == ErrorCode::WANT_READ => libc::POLLIN,
                    Err(e) => return Err(into_io(e)),
                };
                self.wait(wait, true)?;
            }
            v.iov_len = 0;
        }
        Ok(())
    }

    /// Receives and decrypts into the first iovec what is there (at
    /// least a byte; with `dontwait`, WouldBlock instead of waiting).
    /// 0: the peer closed.
    ///
    /// # Safety
    /// As `sock::recv_some`: the iovecs are writable memory nothing else
    /// touches during the call.
    pub(crate) unsafe fn recv_some(&self, iov: &mut [libc::iovec], dontwait: bool) -> io::Result<usize> {
        let Some(v) = iov.iter().find(|v| v.iov_len > 0) else { return Ok(0) };
        // SAFETY: the caller's promise for this iovec.
        let buf = unsafe { std::slice::from_raw_parts_mut(v.iov_base.cast::<u8>(), v.iov_len) };
        loop {
            let wait = match self.ssl.lock().ssl_read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.code() == ErrorCode::ZERO_RETURN => return Ok(0),
                Err(e) if e.code() == ErrorCode::WANT_READ => libc::POLLIN,
                Err(e) if e.code() == ErrorCode::WANT_WRITE => libc::POLLOUT,
                Err(e) => return Err(into_io(e)),
            };
            if dontwait && wait == libc::POLLIN {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            self.wait(wait, false)?;
        }
    }

    /// TLS's close_notify, best effort (the socket is nonblocking: what
    /// does not fit now is not waited for).
    pub(crate) fn close_notify(&self) {
        let _ = self.ssl.lock().shutdown();
    }

    /// Sleeps until the socket is ready for `events` (or shut down). A
    /// sender waiting for data to read (a TLS 1.3 key update) wakes every
    /// 100 ms: the receiver may have consumed what it waited for.
    fn wait(&self, events: libc::c_short, sender: bool) -> io::Result<()> {
        let mut p = libc::pollfd { fd: self.fd, events, revents: 0 };
        let timeout_ms = if sender && events == libc::POLLIN { 100 } else { -1 };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut p, 1, timeout_ms) } < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        Ok(())
    }
}

/// The option haggling after STARTTLS, over the session while it is
/// still blocking.
impl io::Read for &TlsSession {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        self.ssl.lock().read(b)
    }
}

impl io::Write for &TlsSession {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.ssl.lock().write(b)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.ssl.lock().flush()
    }
}

fn into_io(e: openssl::ssl::Error) -> io::Error {
    match e.into_io_error() {
        Ok(io) => io,
        Err(e) => io::Error::other(format!("TLS: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psk_files_as_psktool_writes_them() {
        let text = "alice:00ff10\nbob:abcd\n";
        assert_eq!(parse_psk(text, None).unwrap(), Psk { identity: "alice".into(), key: vec![0, 255, 16] });
        assert_eq!(parse_psk(text, Some("bob")).unwrap().key, vec![0xab, 0xcd]);
        assert!(parse_psk(text, Some("carol")).unwrap_err().contains("no key for identity 'carol'"));
        assert!(parse_psk("alice:abc\n", None).unwrap_err().contains("whole bytes"));
        assert!(parse_psk("alice:zz\n", None).unwrap_err().contains("not hex"));
        assert!(parse_psk("nocolon\n", None).unwrap_err().contains("identity:hexkey"));
        assert!(!format!("{:?}", parse_psk(text, None).unwrap()).contains("00ff10"), "keys stay out of logs");
    }
}
