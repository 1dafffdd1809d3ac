//! The server's error type: what went wrong setting up exports or the
//! listener, in the accept loop, or on one connection (the reason it
//! closed).

/// An error of the NBD server library. Each variant names what is wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Binding or listening on a TCP address or a Unix socket path failed
    /// (address in use, no such interface, permission ...).
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: String,
        #[source]
        source: std::io::Error,
    },
    /// An export's device spec did not open.
    #[error("cannot open device '{spec}': {source}")]
    Device {
        spec: String,
        #[source]
        source: mqblk::Error,
    },
    /// Two exports share a name (clients choose exports by name).
    #[error("two exports are named '{name}'")]
    DuplicateExport { name: String },
    /// A server needs at least one export.
    #[error("no exports to serve")]
    NoExports,
    /// A system call of the server itself failed (poll, eventfd).
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// TLS settings that cannot be used: an unreadable or malformed PSK
    /// file (the line named), a certificate or key OpenSSL refused.
    #[error("{0}")]
    TlsSetup(String),
    /// A connection's TLS handshake failed (a wrong key, an unknown PSK
    /// identity, no client certificate where one is required ...).
    #[error("TLS handshake: {0}")]
    TlsHandshake(String),
    /// A client asked for an export in clear (NBD_OPT_EXPORT_NAME, which
    /// has no error reply) where TLS is required: the connection closed.
    #[error("a client asked for an export in clear, and TLS is required")]
    TlsRequired,
    /// A connection's socket failed (most often: the client went away).
    #[error("socket: {0}")]
    Socket(#[source] std::io::Error),
    /// The client broke the protocol; the string says how. The
    /// connection is closed (the stream cannot be trusted any more).
    #[error("client broke the protocol: {0}")]
    Protocol(String),
    /// A connection's mqblk client failed (its completion eventfd, or
    /// reaping completions).
    #[error("{what}: {source}")]
    Client {
        what: &'static str,
        #[source]
        source: mqblk::Error,
    },
}
