//! The handshake phase of one NBD connection (the spec's "Handshake"):
//! the fixed newstyle greeting, the client's flags, then option haggling
//! (NBD_OPT_*: a function each for EXPORT_NAME, LIST, INFO and GO,
//! STRUCTURED_REPLY and the META_CONTEXT pair; ABORT, STARTTLS and
//! unknown options answered in the loop), and the export info replies of
//! INFO and GO. It ends in transmission (EXPORT_NAME or GO), or in the
//! client's ABORT or a stop.
//!
//! TLS (the spec's STARTTLS section, nbdkit's behaviour): `gate` decides
//! each option's fate under the server's TLS mode before it is handled.
//! STARTTLS is answered ACK in clear, then the TLS handshake runs on the
//! same socket and haggling goes on over it, with what was negotiated in
//! clear forgotten. With TLS required, every other option in clear but
//! ABORT is answered NBD_REP_ERR_TLS_REQD, and EXPORT_NAME (which has no
//! error reply) ends the connection: no export is reachable in clear.
//!
//! Relies on: proto.rs (wire format, option replies), conn.rs's Export
//! and Stream, tls.rs (the handshake, the upgraded stream), and the
//! StopHandle's eventfd (an idle client does not hold up a stop).

use crate::conn::{Export, Stream};
use crate::proto::*;
use crate::{Error, StopHandle, Tls, TlsMode};

/// What option haggling settled.
#[derive(Default, Clone, Copy)]
pub(crate) struct Negotiated {
    pub(crate) structured: bool,
    pub(crate) base_allocation: bool,
}

/// The stream to go on with (upgraded if the client started TLS) and,
/// when transmission starts, its export and what was negotiated.
pub(crate) type Settled<'a> = (Box<dyn Stream>, Option<(&'a Export, Negotiated)>);

/// The greeting, the client's flags and the option phase; the export is
/// Some when transmission starts, None when the client aborted or `stop`.
pub(crate) fn handshake<'a>(
    mut s: Box<dyn Stream>,
    exports: &'a [Export],
    tls: &Tls,
    stop: &StopHandle,
) -> Result<Settled<'a>, Error> {
    let io = Error::Socket;
    let mut greeting = Vec::with_capacity(18);
    greeting.extend_from_slice(&NBDMAGIC.to_be_bytes());
    greeting.extend_from_slice(&IHAVEOPT.to_be_bytes());
    greeting.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    s.write_all(&greeting).map_err(io)?;
    let mut b4 = [0u8; 4];
    if !readable_unless_stopped(&*s, stop)? {
        return Ok((s, None));
    }
    s.read_exact(&mut b4).map_err(io)?;
    let client_flags = u32::from_be_bytes(b4);
    if client_flags & FLAG_C_FIXED_NEWSTYLE == 0 {
        return Err(Error::Protocol("client does not speak fixed newstyle".into()));
    }
    if client_flags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(Error::Protocol(format!("unknown client flags {client_flags:#x}")));
    }
    let no_zeroes = client_flags & FLAG_C_NO_ZEROES != 0;
    haggle(s, exports, no_zeroes, tls, stop)
}

/// What the server's TLS mode makes of an option, before it is handled.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Handle it as usual.
    Pass,
    /// Answer this error reply and message; haggling goes on.
    Refuse(u32, &'static str),
    /// Answer ACK in clear, then the TLS handshake.
    StartTls,
    /// End the connection (EXPORT_NAME has no error reply).
    Close,
}

/// The TLS state machine of the option phase: option `opt` with
/// `data_len` bytes of data, under `mode`, TLS up or not (`tls_up`).
pub(crate) fn gate(opt: u32, data_len: usize, mode: TlsMode, tls_up: bool) -> Gate {
    if opt == OPT_STARTTLS {
        return match () {
            _ if data_len != 0 => Gate::Refuse(REP_ERR_INVALID, "STARTTLS takes no data"),
            _ if mode == TlsMode::Off => Gate::Refuse(REP_ERR_POLICY, "TLS is off on this server"),
            _ if tls_up => Gate::Refuse(REP_ERR_INVALID, "TLS is already on"),
            _ => Gate::StartTls,
        };
    }
    if mode == TlsMode::Require && !tls_up && opt != OPT_ABORT {
        if opt == OPT_EXPORT_NAME {
            return Gate::Close;
        }
        return Gate::Refuse(REP_ERR_TLS_REQD, "TLS is required: send NBD_OPT_STARTTLS first");
    }
    Gate::Pass
}

/// Waits until the socket has bytes to read (or the client closed it):
/// true; or until `stop`: false. An idle client in the handshake or the
/// option phase does not hold up a stop.
fn readable_unless_stopped(s: &dyn Stream, stop: &StopHandle) -> Result<bool, Error> {
    if s.buffered_bytes() > 0 {
        return Ok(true); // decrypted already: the socket may have nothing more
    }
    loop {
        if stop.is_stopped() {
            return Ok(false);
        }
        let mut fds = [
            libc::pollfd { fd: s.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: stop.wake_fd(), events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: two valid pollfds; a stop writes the second, waking it.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Error::Io { what: "poll on a connection", source: e });
        }
        if fds[0].revents != 0 {
            return Ok(true); // data, EOF or an error: the read tells which
        }
    }
}

/// The option phase; Some(export) when transmission starts. Each option's
/// function queues its reply on `out` and returns the export when
/// transmission starts with it; the reply is written here.
fn haggle<'a>(
    mut s: Box<dyn Stream>,
    exports: &'a [Export],
    no_zeroes: bool,
    tls: &Tls,
    stop: &StopHandle,
) -> Result<Settled<'a>, Error> {
    let mut neg = Negotiated::default();
    let mut out = Vec::new();
    loop {
        let Some((opt, data)) = read_option(&mut *s, stop)? else { return Ok((s, None)) };
        out.clear();
        match gate(opt, data.len(), tls.mode(), s.is_tls()) {
            Gate::Pass => {}
            Gate::Refuse(reply, message) => {
                option_reply(&mut out, opt, reply, message.as_bytes());
                s.write_all(&out).map_err(Error::Socket)?;
                continue;
            }
            Gate::Close => return Err(Error::TlsRequired),
            Gate::StartTls => {
                option_reply(&mut out, opt, REP_ACK, &[]);
                s.write_all(&out).map_err(Error::Socket)?;
                // The client's hello, or a stop (the handshake itself
                // then runs on a client that is talking).
                if !readable_unless_stopped(&*s, stop)? {
                    return Ok((s, None));
                }
                s = tls.accept(s)?;
                // The spec: nothing negotiated in clear carries over.
                neg = Negotiated::default();
                continue;
            }
        }
        let transmit = match opt {
            OPT_EXPORT_NAME => Some(export_name(&mut out, &data, exports, no_zeroes)?),
            OPT_ABORT => {
                option_reply(&mut out, opt, REP_ACK, &[]);
                // The client is leaving: a failed write changes nothing.
                let _ = s.write_all(&out);
                return Ok((s, None));
            }
            OPT_LIST => list(&mut out, &data, exports),
            OPT_INFO | OPT_GO => info_or_go(&mut out, opt, &data, exports),
            OPT_STRUCTURED_REPLY => structured_reply(&mut out, &data, &mut neg),
            OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => meta_context(&mut out, opt, &data, exports, &mut neg),
            _ => refuse(&mut out, opt, REP_ERR_UNSUP, format!("option {opt} is not supported").as_bytes()),
        };
        s.write_all(&out).map_err(Error::Socket)?;
        if let Some(e) = transmit {
            return Ok((s, Some((e, neg))));
        }
    }
}

/// Reads one option (its header, then its data): Some((option, data)),
/// or None on `stop`.
fn read_option(s: &mut dyn Stream, stop: &StopHandle) -> Result<Option<(u32, Vec<u8>)>, Error> {
    let io = Error::Socket;
    let mut h = [0u8; 16];
    if !readable_unless_stopped(&*s, stop)? {
        return Ok(None);
    }
    s.read_exact(&mut h).map_err(io)?;
    let magic = u64::from_be_bytes(h[0..8].try_into().expect("8 bytes"));
    if magic != IHAVEOPT {
        return Err(Error::Protocol(format!("bad option magic {magic:#x}")));
    }
    let opt = u32::from_be_bytes(h[8..12].try_into().expect("4 bytes"));
    let len = u32::from_be_bytes(h[12..16].try_into().expect("4 bytes"));
    if len > MAX_OPTION_BYTES {
        return Err(Error::Protocol(format!("option {opt} of {len} bytes is over the {MAX_OPTION_BYTES}-byte limit")));
    }
    let mut data = vec![0u8; len as usize];
    s.read_exact(&mut data).map_err(io)?;
    Ok(Some((opt, data)))
}

fn find<'a>(exports: &'a [Export], name: &str) -> Option<&'a Export> {
    exports.iter().find(|e| e.name == name)
}

/// An error reply to an option; haggling goes on.
fn refuse<'a>(out: &mut Vec<u8>, opt: u32, reply: u32, message: &[u8]) -> Option<&'a Export> {
    option_reply(out, opt, reply, message);
    None
}

/// NBD_OPT_EXPORT_NAME: the old way into transmission. It has no error
/// reply: an unknown name ends the connection.
fn export_name<'a>(
    out: &mut Vec<u8>,
    data: &[u8],
    exports: &'a [Export],
    no_zeroes: bool,
) -> Result<&'a Export, Error> {
    let name = String::from_utf8_lossy(data).to_string();
    let Some(e) = find(exports, &name) else { return Err(Error::Protocol(format!("no export named '{name}'"))) };
    out.extend_from_slice(&e.size().to_be_bytes());
    out.extend_from_slice(&e.transmission_flags().to_be_bytes());
    if !no_zeroes {
        out.extend_from_slice(&[0u8; 124]);
    }
    Ok(e)
}

/// NBD_OPT_LIST: a SERVER reply per export, then ACK.
fn list<'a>(out: &mut Vec<u8>, data: &[u8], exports: &[Export]) -> Option<&'a Export> {
    if !data.is_empty() {
        return refuse(out, OPT_LIST, REP_ERR_INVALID, b"LIST takes no data");
    }
    for e in exports {
        let mut d = (e.name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(e.name.as_bytes());
        option_reply(out, OPT_LIST, REP_SERVER, &d);
    }
    option_reply(out, OPT_LIST, REP_ACK, &[]);
    None
}

/// NBD_OPT_INFO and NBD_OPT_GO: the export's info replies; GO then starts
/// transmission with it.
fn info_or_go<'a>(out: &mut Vec<u8>, opt: u32, data: &[u8], exports: &'a [Export]) -> Option<&'a Export> {
    let (name, infos) = match parse_info_request(data) {
        Ok(v) => v,
        Err(e) => return refuse(out, opt, REP_ERR_INVALID, e.as_bytes()),
    };
    let Some(e) = find(exports, &name) else {
        return refuse(out, opt, REP_ERR_UNKNOWN, format!("no export '{name}'").as_bytes());
    };
    info_replies(out, opt, e, &infos);
    (opt == OPT_GO).then_some(e)
}

/// NBD_OPT_STRUCTURED_REPLY: structured replies from now on.
fn structured_reply<'a>(out: &mut Vec<u8>, data: &[u8], neg: &mut Negotiated) -> Option<&'a Export> {
    if !data.is_empty() {
        return refuse(out, OPT_STRUCTURED_REPLY, REP_ERR_INVALID, b"takes no data");
    }
    neg.structured = true;
    option_reply(out, OPT_STRUCTURED_REPLY, REP_ACK, &[]);
    None
}

/// The info replies to INFO or GO: EXPORT always, NAME and DESCRIPTION
/// when asked for, BLOCK_SIZE always; then ACK.
fn info_replies(out: &mut Vec<u8>, opt: u32, e: &Export, infos: &[u16]) {
    let mut d = INFO_EXPORT.to_be_bytes().to_vec();
    d.extend_from_slice(&e.size().to_be_bytes());
    d.extend_from_slice(&e.transmission_flags().to_be_bytes());
    option_reply(out, opt, REP_INFO, &d);
    if infos.contains(&INFO_NAME) {
        let mut d = INFO_NAME.to_be_bytes().to_vec();
        d.extend_from_slice(e.name.as_bytes());
        option_reply(out, opt, REP_INFO, &d);
    }
    if infos.contains(&INFO_DESCRIPTION) {
        let mut d = INFO_DESCRIPTION.to_be_bytes().to_vec();
        d.extend_from_slice(e.description.as_bytes());
        option_reply(out, opt, REP_INFO, &d);
    }
    // Block sizes are always sent: requests must be aligned to the device's.
    let mut d = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
    let bs = e.block_size();
    for v in [bs, bs.max(4096), MAX_PAYLOAD_BYTES] {
        d.extend_from_slice(&v.to_be_bytes());
    }
    option_reply(out, opt, REP_INFO, &d);
    option_reply(out, opt, REP_ACK, &[]);
}

/// NBD_OPT_LIST_META_CONTEXT and NBD_OPT_SET_META_CONTEXT: only
/// base:allocation is offered.
fn meta_context<'a>(
    out: &mut Vec<u8>,
    opt: u32,
    data: &[u8],
    exports: &[Export],
    neg: &mut Negotiated,
) -> Option<&'a Export> {
    if opt == OPT_SET_META_CONTEXT && !neg.structured {
        return refuse(out, opt, REP_ERR_INVALID, b"SET_META_CONTEXT needs structured replies");
    }
    let (name, queries) = match parse_meta_request(data) {
        Ok(v) => v,
        Err(e) => return refuse(out, opt, REP_ERR_INVALID, e.as_bytes()),
    };
    if !exports.iter().any(|e| e.name == name) {
        return refuse(out, opt, REP_ERR_UNKNOWN, format!("no export '{name}'").as_bytes());
    }
    // LIST with no query lists everything; "base:" selects the namespace.
    let matches = |q: &str| q == BASE_ALLOCATION || (opt == OPT_LIST_META_CONTEXT && q == "base:");
    let selected = if queries.is_empty() { opt == OPT_LIST_META_CONTEXT } else { queries.iter().any(|q| matches(q)) };
    if opt == OPT_SET_META_CONTEXT {
        neg.base_allocation = selected;
    }
    if selected {
        let mut d = BASE_ALLOCATION_ID.to_be_bytes().to_vec();
        d.extend_from_slice(BASE_ALLOCATION.as_bytes());
        option_reply(out, opt, REP_META_CONTEXT, &d);
    }
    option_reply(out, opt, REP_ACK, &[]);
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Credentials;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    fn option(out: &mut Vec<u8>, opt: u32, data: &[u8]) {
        out.extend_from_slice(&IHAVEOPT.to_be_bytes());
        out.extend_from_slice(&opt.to_be_bytes());
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        out.extend_from_slice(data);
    }

    /// NBD_OPT_GO (or INFO) for the default export, no info requests.
    const GO_DEFAULT: [u8; 6] = [0; 6];

    /// A server's TLS setting in `mode`, with a PSK file written for it.
    fn tls(mode: TlsMode, test: &str) -> Tls {
        if mode == TlsMode::Off {
            return Tls::off();
        }
        let path = std::env::temp_dir().join(format!("mqblk-handshake-{test}-{}.psk", std::process::id()));
        std::fs::write(&path, "alice:000102030405060708090a0b0c0d0e0f\n").unwrap();
        let tls = Tls::new(mode, &Credentials::Psk(path.clone())).unwrap();
        std::fs::remove_file(path).unwrap();
        tls
    }

    /// What the handshake returned (the export's name if transmission
    /// started), its option replies (option, reply type), and the bytes
    /// after them that are not replies.
    type Outcome = (Result<Option<String>, Error>, Vec<(u32, u32)>, Vec<u8>);

    /// Runs the handshake on one end of a socket pair fed the client
    /// flags and `options` (then EOF): what the handshake returned (the
    /// export's name if transmission started), and the server's option
    /// replies as (option, reply type) after the 18-byte greeting, with
    /// any bytes that did not parse as replies.
    fn run(mode: TlsMode, test: &str, options: &[u8]) -> Outcome {
        let exports = vec![Export::open("", "null:size=1,memory_backed=1", false).unwrap()];
        let (mut client, server) = UnixStream::pair().unwrap();
        let mut input = (FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes().to_vec();
        input.extend_from_slice(options);
        client.write_all(&input).unwrap();
        client.shutdown(std::net::Shutdown::Write).unwrap();
        let stop = StopHandle::new().unwrap();
        let tls = tls(mode, test);
        let result =
            handshake(Box::new(server), &exports, &tls, &stop).map(|(_, settled)| settled.map(|(e, _)| e.name.clone()));
        // A server that closed with client bytes unread resets the
        // connection: what arrived before the reset is what it sent.
        let mut wire = Vec::new();
        let mut chunk = [0u8; 4096];
        while let Ok(n @ 1..) = client.read(&mut chunk) {
            wire.extend_from_slice(&chunk[..n]);
        }
        assert_eq!(&wire[..8], &NBDMAGIC.to_be_bytes(), "the greeting");
        let mut rest = &wire[18..];
        let mut replies = Vec::new();
        while rest.len() >= 20 && rest[..8] == REPLY_MAGIC.to_be_bytes() {
            let word = |at: usize| u32::from_be_bytes(rest[at..at + 4].try_into().unwrap());
            let (opt, reply, len) = (word(8), word(12), word(16) as usize);
            replies.push((opt, reply));
            rest = &rest[20 + len..];
        }
        (result, replies, rest.to_vec())
    }

    #[test]
    fn gate_is_the_tls_state_machine_of_the_option_phase() {
        use TlsMode::*;
        let tls_reqd = Gate::Refuse(REP_ERR_TLS_REQD, "TLS is required: send NBD_OPT_STARTTLS first");
        for opt in [OPT_LIST, OPT_INFO, OPT_GO, OPT_STRUCTURED_REPLY, OPT_SET_META_CONTEXT, 99] {
            assert_eq!(gate(opt, 0, Require, false), tls_reqd, "option {opt} in clear");
            assert_eq!(gate(opt, 0, Require, true), Gate::Pass, "option {opt} under TLS");
            assert_eq!(gate(opt, 0, On, false), Gate::Pass, "option {opt} in clear, TLS optional");
            assert_eq!(gate(opt, 0, Off, false), Gate::Pass, "option {opt}, TLS off");
        }
        assert_eq!(gate(OPT_EXPORT_NAME, 0, Require, false), Gate::Close, "no error reply exists: close");
        assert_eq!(gate(OPT_EXPORT_NAME, 0, Require, true), Gate::Pass);
        assert_eq!(gate(OPT_ABORT, 0, Require, false), Gate::Pass, "a client may leave in clear");
        assert_eq!(gate(OPT_STARTTLS, 0, Require, false), Gate::StartTls);
        assert_eq!(gate(OPT_STARTTLS, 0, On, false), Gate::StartTls);
        assert_eq!(gate(OPT_STARTTLS, 0, On, true), Gate::Refuse(REP_ERR_INVALID, "TLS is already on"));
        assert_eq!(gate(OPT_STARTTLS, 0, Off, false), Gate::Refuse(REP_ERR_POLICY, "TLS is off on this server"));
        assert_eq!(gate(OPT_STARTTLS, 4, Require, false), Gate::Refuse(REP_ERR_INVALID, "STARTTLS takes no data"));
    }

    #[test]
    fn required_tls_answers_every_clear_option_tls_reqd_and_reaches_no_export() {
        let mut o = Vec::new();
        for opt in [OPT_LIST, OPT_STRUCTURED_REPLY, 99] {
            option(&mut o, opt, &[]);
        }
        option(&mut o, OPT_INFO, &GO_DEFAULT);
        option(&mut o, OPT_GO, &GO_DEFAULT);
        option(&mut o, OPT_ABORT, &[]);
        let (result, replies, rest) = run(TlsMode::Require, "reqd", &o);
        assert!(matches!(result, Ok(None)), "ABORT ends the handshake: {result:?}");
        let reqd = REP_ERR_TLS_REQD;
        let want = [
            (OPT_LIST, reqd),
            (OPT_STRUCTURED_REPLY, reqd),
            (99, reqd),
            (OPT_INFO, reqd),
            (OPT_GO, reqd),
            (OPT_ABORT, REP_ACK),
        ];
        assert_eq!(replies, want);
        assert!(rest.is_empty());
    }

    #[test]
    fn required_tls_closes_on_export_name_in_clear() {
        let mut o = Vec::new();
        option(&mut o, OPT_EXPORT_NAME, b"");
        let (result, replies, rest) = run(TlsMode::Require, "export-name", &o);
        assert!(matches!(result, Err(Error::TlsRequired)), "{result:?}");
        assert!(replies.is_empty() && rest.is_empty(), "nothing but the greeting: no export size or flags");
    }

    #[test]
    fn optional_tls_serves_clear_clients_and_off_refuses_starttls() {
        let mut o = Vec::new();
        option(&mut o, OPT_GO, &GO_DEFAULT);
        let (result, replies, _) = run(TlsMode::On, "on", &o);
        assert_eq!(result.unwrap(), Some(String::new()), "GO in clear reaches the export");
        assert_eq!(replies.last(), Some(&(OPT_GO, REP_ACK)));
        let mut o = Vec::new();
        option(&mut o, OPT_STARTTLS, &[]);
        option(&mut o, OPT_STARTTLS, b"data");
        option(&mut o, OPT_GO, &GO_DEFAULT);
        let (result, replies, _) = run(TlsMode::Off, "off", &o);
        assert_eq!(result.unwrap(), Some(String::new()));
        assert_eq!(replies[..2], [(OPT_STARTTLS, REP_ERR_POLICY), (OPT_STARTTLS, REP_ERR_INVALID)]);
    }

    #[test]
    fn starttls_is_acknowledged_in_clear_before_the_tls_handshake() {
        let mut o = Vec::new();
        option(&mut o, OPT_STARTTLS, b"x");
        option(&mut o, OPT_STARTTLS, &[]);
        // Not a TLS ClientHello: the handshake fails after the ACK.
        o.extend_from_slice(&[0u8; 64]);
        let (result, replies, _) = run(TlsMode::Require, "starttls", &o);
        assert!(matches!(result, Err(Error::TlsHandshake(_))), "{result:?}");
        assert_eq!(replies[..2], [(OPT_STARTTLS, REP_ERR_INVALID), (OPT_STARTTLS, REP_ACK)]);
    }
}
