//! The client's handshake (doc/proto.md, "Fixed newstyle negotiation"):
//! the server's greeting, NBD_OPT_STRUCTURED_REPLY, and NBD_OPT_GO with
//! NBD_INFO_BLOCK_SIZE, falling back to NBD_OPT_EXPORT_NAME for a server
//! that does not know NBD_OPT_GO. What it learns is an [`ExportInfo`].
//!
//! Runs once per connection, and again on each reconnect; it allocates
//! freely (it is not the I/O path).
//!
//! Relies on: proto.rs (magics, options, replies, info types).

use std::io::{Read, Write};

use crate::proto::*;

/// NBD_REP_ERR_TLS_REQD: the server wants NBD_OPT_STARTTLS first.
const REP_ERR_TLS_REQD: u32 = (1 << 31) + 5;
/// The oldstyle greeting's magic, after NBDMAGIC.
const OLDSTYLE_MAGIC: u64 = 0x0000_4202_8186_1253;
/// Largest option reply read (an error message, a description).
const MAX_REPLY_BYTES: u32 = 64 * 1024;
/// What a client assumes without NBD_INFO_BLOCK_SIZE (doc/proto.md: a
/// minimum of 1 byte, 4 KiB preferred, a maximum of 32 MiB).
const DEFAULT_BLOCK_SIZES: (u32, u32, u32) = (1, 4096, 32 << 20);

/// What the server said about the export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportInfo {
    pub size: u64,
    /// Transmission flags (TF_*).
    pub flags: u16,
    pub min_block: u32,
    pub preferred_block: u32,
    pub max_block: u32,
    /// Structured replies were negotiated.
    pub structured: bool,
}

impl ExportInfo {
    pub fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }
}

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("server broke the handshake: {0}")]
    Protocol(String),
    #[error("the server has no export named '{0}'")]
    NoExport(String),
    #[error("the server requires TLS: give an nbds:// URI and tls_psk=FILE")]
    TlsRequired,
    #[error("the server refused option {option} (reply {reply:#x}): {message}")]
    Refused { option: u32, reply: u32, message: String },
}

fn protocol(msg: impl Into<String>) -> HandshakeError {
    HandshakeError::Protocol(msg.into())
}

/// Negotiates export `name` on a fresh stream; structured replies are
/// asked for if `structured`.
pub fn handshake(s: &mut (impl Read + Write), name: &str, structured: bool) -> Result<ExportInfo, HandshakeError> {
    let no_zeroes = greet(s)?;
    negotiate(s, name, structured, no_zeroes)
}

/// The server's greeting and the client's flags; returns whether the
/// server dropped the zero padding (NO_ZEROES).
pub(crate) fn greet(s: &mut (impl Read + Write)) -> Result<bool, HandshakeError> {
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting[..16])?;
    let (magic, second) = (be64(&greeting[0..8]), be64(&greeting[8..16]));
    if magic != NBDMAGIC {
        return Err(protocol(format!("bad greeting magic {magic:#018x} (not an NBD server?)")));
    }
    if second == OLDSTYLE_MAGIC {
        return Err(protocol("oldstyle negotiation (only fixed newstyle is supported)"));
    }
    if second != IHAVEOPT {
        return Err(protocol(format!("bad newstyle magic {second:#018x}")));
    }
    s.read_exact(&mut greeting[16..18])?;
    let server_flags = u16::from_be_bytes([greeting[16], greeting[17]]);
    if server_flags & FLAG_FIXED_NEWSTYLE == 0 {
        return Err(protocol("the server does not offer fixed newstyle negotiation"));
    }
    let no_zeroes = server_flags & FLAG_NO_ZEROES != 0;
    let client_flags = FLAG_C_FIXED_NEWSTYLE | if no_zeroes { FLAG_C_NO_ZEROES } else { 0 };
    s.write_all(&client_flags.to_be_bytes())?;
    Ok(no_zeroes)
}

/// NBD_OPT_STARTTLS: after its acknowledgement the TLS handshake starts
/// on the same stream (tls.rs), and the options go on inside it.
pub(crate) fn starttls(s: &mut (impl Read + Write)) -> Result<(), HandshakeError> {
    send_option(s, OPT_STARTTLS, &[])?;
    match read_option_reply(s, OPT_STARTTLS)? {
        (REP_ACK, _) => Ok(()),
        (reply, payload) => Err(refusal(OPT_STARTTLS, reply, &payload, "")),
    }
}

/// The options after the greeting (and STARTTLS): structured replies if
/// `structured`, then NBD_OPT_GO for export `name`.
pub(crate) fn negotiate(
    s: &mut (impl Read + Write),
    name: &str,
    structured: bool,
    no_zeroes: bool,
) -> Result<ExportInfo, HandshakeError> {
    let structured = structured && negotiate_structured(s)?;
    let mut data = Vec::with_capacity(name.len() + 8);
    data.extend_from_slice(&(name.len() as u32).to_be_bytes());
    data.extend_from_slice(name.as_bytes());
    data.extend_from_slice(&1u16.to_be_bytes());
    data.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    send_option(s, OPT_GO, &data)?;
    let (mut export, mut sizes) = (None, None);
    loop {
        let (reply, payload) = read_option_reply(s, OPT_GO)?;
        match reply {
            REP_INFO => read_info(&payload, &mut export, &mut sizes)?,
            REP_ACK => break,
            REP_ERR_UNSUP => return export_name(s, name, no_zeroes, structured),
            _ => return Err(refusal(OPT_GO, reply, &payload, name)),
        }
    }
    let (size, flags) = export.ok_or_else(|| protocol("NBD_OPT_GO acknowledged without NBD_INFO_EXPORT"))?;
    let (min_block, preferred_block, max_block) = sizes.unwrap_or(DEFAULT_BLOCK_SIZES);
    check_block_sizes(min_block, preferred_block, max_block)?;
    Ok(ExportInfo { size, flags, min_block, preferred_block, max_block, structured })
}

/// NBD_OPT_STRUCTURED_REPLY: true if acknowledged, false if refused.
fn negotiate_structured(s: &mut (impl Read + Write)) -> Result<bool, HandshakeError> {
    send_option(s, OPT_STRUCTURED_REPLY, &[])?;
    let (reply, _) = read_option_reply(s, OPT_STRUCTURED_REPLY)?;
    match reply {
        REP_ACK => Ok(true),
        r if r & (1 << 31) != 0 => Ok(false),
        r => Err(protocol(format!("reply {r:#x} to NBD_OPT_STRUCTURED_REPLY"))),
    }
}

/// The old way in, for servers without NBD_OPT_GO: the export's size and
/// flags follow at once (then 124 zero bytes unless NO_ZEROES).
fn export_name(
    s: &mut (impl Read + Write),
    name: &str,
    no_zeroes: bool,
    structured: bool,
) -> Result<ExportInfo, HandshakeError> {
    send_option(s, OPT_EXPORT_NAME, name.as_bytes())?;
    let mut b = [0u8; 10 + 124];
    let len = if no_zeroes { 10 } else { b.len() };
    s.read_exact(&mut b[..len]).map_err(|e| match e.kind() {
        // The server closes the connection for an unknown name.
        std::io::ErrorKind::UnexpectedEof => HandshakeError::NoExport(name.to_string()),
        _ => e.into(),
    })?;
    let (min_block, preferred_block, max_block) = DEFAULT_BLOCK_SIZES;
    let flags = u16::from_be_bytes([b[8], b[9]]);
    Ok(ExportInfo { size: be64(&b[..8]), flags, min_block, preferred_block, max_block, structured })
}

fn read_info(
    payload: &[u8],
    export: &mut Option<(u64, u16)>,
    sizes: &mut Option<(u32, u32, u32)>,
) -> Result<(), HandshakeError> {
    if payload.len() < 2 {
        return Err(protocol("NBD_REP_INFO without an info type"));
    }
    let be32 = |at: usize| u32::from_be_bytes(payload[at..at + 4].try_into().expect("4 bytes"));
    match u16::from_be_bytes([payload[0], payload[1]]) {
        INFO_EXPORT if payload.len() == 12 => {
            *export = Some((be64(&payload[2..10]), u16::from_be_bytes([payload[10], payload[11]])))
        }
        INFO_BLOCK_SIZE if payload.len() == 14 => *sizes = Some((be32(2), be32(6), be32(10))),
        INFO_EXPORT | INFO_BLOCK_SIZE => return Err(protocol(format!("NBD_REP_INFO of {} bytes", payload.len()))),
        _ => {} // names and descriptions: not needed
    }
    Ok(())
}

/// doc/proto.md's rules for NBD_INFO_BLOCK_SIZE.
fn check_block_sizes(min: u32, preferred: u32, max: u32) -> Result<(), HandshakeError> {
    // Lenient where the limits do not depend on it: the device's own
    // block sizes come from the minimum and the maximum alone.
    let ok = min.is_power_of_two() && min <= 65536 && preferred.is_power_of_two() && preferred >= min && max >= min;
    if ok {
        Ok(())
    } else {
        Err(protocol(format!("bad block sizes: minimum {min}, preferred {preferred}, maximum {max}")))
    }
}

fn refusal(option: u32, reply: u32, payload: &[u8], name: &str) -> HandshakeError {
    match reply {
        REP_ERR_UNKNOWN => HandshakeError::NoExport(name.to_string()),
        REP_ERR_TLS_REQD => HandshakeError::TlsRequired,
        r if r & (1 << 31) != 0 => {
            HandshakeError::Refused { option, reply, message: String::from_utf8_lossy(payload).into_owned() }
        }
        r => protocol(format!("unexpected reply {r:#x} to option {option}")),
    }
}

fn send_option(s: &mut impl Write, option: u32, data: &[u8]) -> Result<(), HandshakeError> {
    let mut b = Vec::with_capacity(16 + data.len());
    b.extend_from_slice(&IHAVEOPT.to_be_bytes());
    b.extend_from_slice(&option.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    s.write_all(&b)?;
    Ok(())
}

/// One option reply to `option`: its type and payload.
fn read_option_reply(s: &mut impl Read, option: u32) -> Result<(u32, Vec<u8>), HandshakeError> {
    let mut h = [0u8; 20];
    s.read_exact(&mut h)?;
    let magic = be64(&h[0..8]);
    if magic != REPLY_MAGIC {
        return Err(protocol(format!("bad option reply magic {magic:#018x}")));
    }
    let be32 = |at: usize| u32::from_be_bytes(h[at..at + 4].try_into().expect("4 bytes"));
    let (answered, reply, len) = (be32(8), be32(12), be32(16));
    if answered != option {
        return Err(protocol(format!("reply to option {answered} while {option} was asked")));
    }
    if len > MAX_REPLY_BYTES {
        return Err(protocol(format!("option reply of {len} bytes")));
    }
    let mut payload = vec![0u8; len as usize];
    s.read_exact(&mut payload)?;
    Ok((reply, payload))
}

fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scripted server: what it says, and what the client wrote.
    struct Script {
        said: std::io::Cursor<Vec<u8>>,
        heard: Vec<u8>,
    }

    impl Read for Script {
        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            self.said.read(b)
        }
    }
    impl Write for Script {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.heard.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn greeting(flags: u16) -> Vec<u8> {
        let mut g = NBDMAGIC.to_be_bytes().to_vec();
        g.extend_from_slice(&IHAVEOPT.to_be_bytes());
        g.extend_from_slice(&flags.to_be_bytes());
        g
    }

    fn run(said: Vec<u8>, structured: bool) -> Result<ExportInfo, HandshakeError> {
        let mut s = Script { said: std::io::Cursor::new(said), heard: Vec::new() };
        handshake(&mut s, "exp", structured)
    }

    #[test]
    fn go_with_block_sizes_and_structured_replies() {
        let mut said = greeting(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
        option_reply(&mut said, OPT_STRUCTURED_REPLY, REP_ACK, &[]);
        let mut info = INFO_EXPORT.to_be_bytes().to_vec();
        info.extend_from_slice(&(64u64 << 20).to_be_bytes());
        info.extend_from_slice(&(TF_HAS_FLAGS | TF_SEND_FLUSH).to_be_bytes());
        option_reply(&mut said, OPT_GO, REP_INFO, &info);
        let mut bs = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
        for v in [512u32, 4096, 1 << 20] {
            bs.extend_from_slice(&v.to_be_bytes());
        }
        option_reply(&mut said, OPT_GO, REP_INFO, &bs);
        option_reply(&mut said, OPT_GO, REP_ACK, &[]);
        let i = run(said, true).unwrap();
        assert_eq!((i.size, i.min_block, i.preferred_block, i.max_block), (64 << 20, 512, 4096, 1 << 20));
        assert!(i.structured && i.has(TF_SEND_FLUSH) && !i.has(TF_READ_ONLY));
    }

    #[test]
    fn refusals_and_broken_servers_are_named() {
        let mut said = greeting(FLAG_FIXED_NEWSTYLE);
        option_reply(&mut said, OPT_GO, REP_ERR_UNKNOWN, b"no");
        assert!(matches!(run(said, false), Err(HandshakeError::NoExport(n)) if n == "exp"));
        let mut said = greeting(FLAG_FIXED_NEWSTYLE);
        option_reply(&mut said, OPT_GO, REP_ERR_TLS_REQD, &[]);
        assert!(run(said, false).unwrap_err().to_string().contains("requires TLS"));
        assert!(run(greeting(0), false).unwrap_err().to_string().contains("fixed newstyle"));
        let mut old = NBDMAGIC.to_be_bytes().to_vec();
        old.extend_from_slice(&OLDSTYLE_MAGIC.to_be_bytes());
        assert!(run(old, false).unwrap_err().to_string().contains("oldstyle"));
        let mut said = greeting(FLAG_FIXED_NEWSTYLE);
        option_reply(&mut said, OPT_GO, REP_ACK, &[]);
        assert!(run(said, false).unwrap_err().to_string().contains("without NBD_INFO_EXPORT"));
        let mut said = greeting(FLAG_FIXED_NEWSTYLE);
        option_reply(&mut said, OPT_LIST, REP_ACK, &[]);
        assert!(run(said, false).unwrap_err().to_string().contains("while 7 was asked"));
        assert!(matches!(run(greeting(FLAG_FIXED_NEWSTYLE), false), Err(HandshakeError::Io(_))), "cut short");
    }

    #[test]
    fn export_name_fallback_and_block_size_rules() {
        let mut said = greeting(FLAG_FIXED_NEWSTYLE);
        option_reply(&mut said, OPT_GO, REP_ERR_UNSUP, &[]);
        said.extend_from_slice(&(1u64 << 20).to_be_bytes());
        said.extend_from_slice(&TF_HAS_FLAGS.to_be_bytes());
        said.extend_from_slice(&[0; 124]);
        let i = run(said, false).unwrap();
        assert_eq!((i.size, i.min_block, i.max_block, i.structured), (1 << 20, 1, 32 << 20, false));
        assert!(check_block_sizes(1, 4096, 32 << 20).is_ok());
        assert!(check_block_sizes(3, 4096, 32 << 20).is_err());
        assert!(check_block_sizes(512, 256, 32 << 20).is_err());
        assert!(check_block_sizes(512, 4096, 256).is_err());
        assert!(check_block_sizes(1 << 17, 1 << 17, 1 << 20).is_err(), "blocks past 64 KiB");
    }
}
