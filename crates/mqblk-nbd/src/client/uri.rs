//! NBD URIs (the NBD project's doc/uri.md, as libnbd and qemu read them):
//! `nbd://host[:port][/export]`, `nbd+unix:///export?socket=PATH`, and
//! their TLS forms `nbds://`, `nbds+unix://`, parsed into where to
//! connect and which export to ask for.
//!
//! Relies on: nothing but std; pure, so tests cover it without sockets.

use std::fmt;

/// The NBD port (IANA): what `nbd://host/` connects to.
pub const DEFAULT_PORT: u16 = 10809;

/// Where the server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A TCP host (a name, an IPv4 address, or an IPv6 address without
    /// its brackets) and port.
    Tcp { host: String, port: u16 },
    /// A Unix socket's path.
    Unix { path: String },
}

/// A parsed NBD URI.
///
/// ```
/// use mqblk_nbd::client::{Endpoint, NbdUri};
///
/// let u = NbdUri::parse("nbd+unix:///disk?socket=/run/nbd.sock")?;
/// assert_eq!((u.export.as_str(), u.tls), ("disk", false));
/// assert_eq!(u.endpoint, Endpoint::Unix { path: "/run/nbd.sock".into() });
/// let t = NbdUri::parse("nbds://alice@[::1]:10810/a%20b")?;
/// assert_eq!((t.export.as_str(), t.tls, t.user.as_deref()), ("a b", true, Some("alice")));
/// assert_eq!(t.endpoint, Endpoint::Tcp { host: "::1".into(), port: 10810 });
/// assert!(NbdUri::parse("http://x/").unwrap_err().contains("nbd://"));
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NbdUri {
    pub endpoint: Endpoint,
    /// The export name (percent-decoded; empty: the server's default).
    pub export: String,
    /// `nbds` schemes: the connection must use TLS.
    pub tls: bool,
    /// The URI's user (`nbds://alice@host/`): the TLS PSK identity.
    pub user: Option<String>,
}

impl NbdUri {
    /// Parses an NBD URI; Err says what is wrong with it.
    pub fn parse(uri: &str) -> Result<Self, String> {
        let (scheme, rest) = uri.split_once("://").ok_or_else(|| not_nbd(uri))?;
        let (tls, unix) = match scheme {
            "nbd" => (false, false),
            "nbds" => (true, false),
            "nbd+unix" => (false, true),
            "nbds+unix" => (true, true),
            _ => return Err(not_nbd(uri)),
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let export = percent_decode(path).ok_or_else(|| format!("{uri}: bad %-escape in the export name"))?;
        let (user, hostport) = match authority.rsplit_once('@') {
            Some((user, hostport)) => (Some(percent_decode(user).ok_or("bad %-escape in the user")?), hostport),
            None => (None, authority),
        };
        let mut socket = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("socket", path)) => {
                    socket = Some(percent_decode(path).ok_or_else(|| format!("{uri}: bad %-escape in socket="))?)
                }
                Some(("tls-psk-file", _)) => {
                    return Err(format!("{uri}: give the PSK file as the spec's tls_psk=FILE, not in the URI"))
                }
                _ => return Err(format!("{uri}: unknown query parameter '{pair}' (accepted: socket=PATH)")),
            }
        }
        let endpoint = if unix {
            if !hostport.is_empty() {
                return Err(format!("{uri}: a Unix socket URI has no host ({scheme}:///EXPORT?socket=PATH)"));
            }
            let path = socket.ok_or_else(|| format!("{uri}: {scheme} needs ?socket=PATH"))?;
            Endpoint::Unix { path }
        } else {
            if socket.is_some() {
                return Err(format!("{uri}: socket= is for nbd+unix:// URIs"));
            }
            let (host, port) = split_host_port(hostport).map_err(|e| format!("{uri}: {e}"))?;
            Endpoint::Tcp { host, port }
        };
        Ok(Self { endpoint, export, tls, user })
    }
}

impl fmt::Display for NbdUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = if self.tls { "s" } else { "" };
        match &self.endpoint {
            Endpoint::Tcp { host, port } if host.contains(':') => write!(f, "nbd{s}://[{host}]:{port}/{}", self.export),
            Endpoint::Tcp { host, port } => write!(f, "nbd{s}://{host}:{port}/{}", self.export),
            Endpoint::Unix { path } => write!(f, "nbd{s}+unix:///{}?socket={path}", self.export),
        }
    }
}

fn not_nbd(uri: &str) -> String {
    format!("'{uri}' is not an NBD URI (nbd://HOST[:PORT]/EXPORT or nbd+unix:///EXPORT?socket=PATH)")
}

/// `host`, `host:port`, `[v6]`, `[v6]:port`.
fn split_host_port(s: &str) -> Result<(String, u16), String> {
    let (host, port) = if let Some(v6) = s.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or("unclosed [ in the host")?;
        (host, after.strip_prefix(':'))
    } else {
        match s.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (s, None),
        }
    };
    if host.is_empty() {
        return Err("no host (nbd://HOST[:PORT]/EXPORT)".into());
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => p.parse::<u16>().ok().filter(|&p| p > 0).ok_or_else(|| format!("bad port '{p}'"))?,
    };
    Ok((host.to_string(), port))
}

/// Decodes %XX escapes; None on a malformed escape or bytes that are not
/// UTF-8 (export names are UTF-8 on the wire).
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_forms_and_default_port() {
        let u = NbdUri::parse("nbd://example.org").unwrap();
        assert_eq!(u.endpoint, Endpoint::Tcp { host: "example.org".into(), port: DEFAULT_PORT });
        assert_eq!(u.export, "");
        let u = NbdUri::parse("nbd://127.0.0.1:1234/exp").unwrap();
        assert_eq!(u.endpoint, Endpoint::Tcp { host: "127.0.0.1".into(), port: 1234 });
        assert_eq!(u.to_string(), "nbd://127.0.0.1:1234/exp");
        assert_eq!(NbdUri::parse(&u.to_string()).unwrap(), u, "printed back, parsed the same");
    }

    #[test]
    fn unix_needs_a_socket_and_no_host() {
        assert!(NbdUri::parse("nbd+unix:///x").unwrap_err().contains("socket=PATH"));
        assert!(NbdUri::parse("nbd+unix://h/x?socket=/s").unwrap_err().contains("no host"));
        let u = NbdUri::parse("nbd+unix:///?socket=/tmp/s").unwrap();
        assert_eq!((u.export.as_str(), u.to_string().as_str()), ("", "nbd+unix:///?socket=/tmp/s"));
    }

    #[test]
    fn malformed_uris_name_the_problem() {
        assert!(NbdUri::parse("nbd://h:0/").unwrap_err().contains("bad port"));
        assert!(NbdUri::parse("nbd://h:99999/").unwrap_err().contains("bad port"));
        assert!(NbdUri::parse("nbd://[::1/").unwrap_err().contains("unclosed"));
        assert!(NbdUri::parse("nbd:///e").unwrap_err().contains("no host"));
        assert!(NbdUri::parse("nbd://h/%zz").unwrap_err().contains("%-escape"));
        assert!(NbdUri::parse("nbd://h/?x=1").unwrap_err().contains("unknown query"));
        assert!(NbdUri::parse("nbd://h/?socket=/s").unwrap_err().contains("nbd+unix"));
    }
}
