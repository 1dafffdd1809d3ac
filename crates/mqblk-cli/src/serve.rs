//! `mqblk serve`: an NBD server over mqblk devices (crates/mqblk-nbd).
//!
//! `--device SPEC [--export NAME]` may repeat: each device is an export
//! (the first one's default name is the empty string, NBD's default
//! export). TCP on 127.0.0.1:10809 unless `--listen ADDR` or `--unix PATH`;
//! SIGINT or SIGTERM stop it cleanly: connections finish their in-flight
//! requests, then every writable device is flushed. TLS with nbdkit's
//! options and meanings: `--tls=off|on|require`, `--tls-psk=FILE`,
//! `--tls-certificates=DIR`, `--tls-verify-peer` (mqblk-nbd's tls.rs).

use std::path::PathBuf;

use mqblk::{Bio, DeviceConfig};
use mqblk_nbd::{Credentials, Export, Listen, Server, Tls, TlsMode};

/// An NBD server (fixed newstyle) over mqblk devices.
///
/// Each --device is an export, named by an --export after it (default: the
/// empty string, NBD's default export, for the first; exportN for the
/// others). TCP on 127.0.0.1:10809 unless --listen or --unix. SIGINT or
/// SIGTERM stop it cleanly: connections finish their in-flight requests,
/// then every writable device is flushed.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// A device to export: driver:key=value,... (repeats: one export each).
    #[arg(long, value_name = "SPEC")]
    device: Vec<String>,
    /// The name of the export of the --device before it.
    #[arg(long, value_name = "NAME")]
    export: Vec<String>,
    /// The TCP address to listen on [default: 127.0.0.1:10809].
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Listen on a Unix socket at PATH instead of TCP.
    #[arg(long, value_name = "PATH")]
    unix: Option<String>,
    /// Refuse writes on every export.
    #[arg(long)]
    read_only: bool,
    /// A control socket at PATH for `mqblk control PATH ...`: power cuts
    /// and live attributes (bad blocks) of the exports' devices.
    #[arg(long, value_name = "PATH")]
    control: Option<std::path::PathBuf>,
    /// The permissions of the Unix and control sockets, in octal: who
    /// may connect (only their owner unless told otherwise).
    #[arg(long, value_name = "MODE", default_value = "600")]
    socket_mode: String,
    /// Connections served at once.
    #[arg(long, value_name = "N", default_value_t = 16)]
    max_connections: usize,
    /// Serve every read as a bio, even where the device offers direct
    /// access (a memory-backed null device lends its pages to reads of
    /// 64 KiB and more, written to the socket with one copy fewer).
    #[arg(long)]
    no_direct_reads: bool,
    /// On a Unix socket, copy direct reads into the socket instead of
    /// handing it the device's pages by reference (vmsplice and splice,
    /// kept unchanged until the client has read them).
    #[arg(long)]
    no_splice: bool,
    /// TLS, as nbdkit's --tls: off (STARTTLS refused), on (clients may
    /// upgrade; clear ones are served too) or require (nothing but
    /// STARTTLS in clear). on and require need --tls-psk or
    /// --tls-certificates.
    #[arg(long, value_name = "MODE", default_value = "off")]
    tls: String,
    /// Pre-shared keys: psktool's username:hexkey lines
    /// (`psktool -u alice -p FILE`), read at start.
    #[arg(long, value_name = "FILE")]
    tls_psk: Option<PathBuf>,
    /// X.509 credentials: DIR/ca-cert.pem, DIR/server-cert.pem and
    /// DIR/server-key.pem.
    #[arg(long, value_name = "DIR")]
    tls_certificates: Option<PathBuf>,
    /// Require a client certificate signed by DIR/ca-cert.pem (with
    /// --tls-certificates).
    #[arg(long)]
    tls_verify_peer: bool,
}

/// The TLS setting the --tls options ask for: None when off; Err says
/// which combination is wrong.
fn tls_setting(
    mode: &str,
    psk: Option<PathBuf>,
    certificates: Option<PathBuf>,
    verify_peer: bool,
) -> Result<Option<(TlsMode, Credentials)>, String> {
    let mode: TlsMode = mode.parse()?;
    if mode == TlsMode::Off {
        let given = [(psk.is_some(), "--tls-psk"), (certificates.is_some(), "--tls-certificates")]
            .into_iter()
            .chain([(verify_peer, "--tls-verify-peer")])
            .find(|(given, _)| *given);
        return match given {
            Some((_, option)) => Err(format!("{option} needs --tls=on or --tls=require (TLS is off by default)")),
            None => Ok(None),
        };
    }
    let flag = if mode == TlsMode::On { "on" } else { "require" };
    let credentials = match (psk, certificates) {
        (None, None) => return Err(format!("--tls={flag} needs --tls-psk=FILE or --tls-certificates=DIR")),
        (Some(_), Some(_)) => return Err("--tls-psk and --tls-certificates: choose one".into()),
        (Some(_), None) if verify_peer => {
            return Err(
                "--tls-verify-peer checks client certificates: it needs --tls-certificates, not --tls-psk".into()
            )
        }
        (Some(file), None) => Credentials::Psk(file),
        (None, Some(dir)) => Credentials::Certificates { dir, verify_peer },
    };
    Ok(Some((mode, credentials)))
}

/// The (device spec, export name) pairs: each --export names the last
/// --device before it on the command line.
fn exports(args: &ServeArgs, matches: &clap::ArgMatches) -> Result<Vec<(String, Option<String>)>, String> {
    let device_at: Vec<usize> = matches.indices_of("device").map(Iterator::collect).unwrap_or_default();
    let mut exports: Vec<(String, Option<String>)> = args.device.iter().map(|d| (d.clone(), None)).collect();
    let export_at = matches.indices_of("export").into_iter().flatten();
    for (name, at) in args.export.iter().zip(export_at) {
        let i = device_at.iter().rposition(|&d| d < at).ok_or("--export names the --device before it")?;
        exports[i].1 = Some(name.clone());
    }
    Ok(exports)
}

/// Runs `mqblk serve`; `matches` are serve's, for the order of the
/// --device and --export options. Err((exit code, message)).
pub fn run(args: ServeArgs, matches: &clap::ArgMatches) -> Result<String, (u8, String)> {
    init_logger("serve");
    let bad = |e: String| (2u8, e);
    let exports = exports(&args, matches).map_err(bad)?;
    let mode = mqblk::socket_mode::parse_socket_mode(&args.socket_mode).map_err(bad)?;
    let ServeArgs { listen, unix, read_only, max_connections: max_conn, control, no_direct_reads, no_splice, .. } =
        args;
    if exports.is_empty() {
        return Err(bad("serve needs --device SPEC (see mqblk serve --help)".into()));
    }
    let tls = match tls_setting(&args.tls, args.tls_psk, args.tls_certificates, args.tls_verify_peer).map_err(bad)? {
        Some((mode, credentials)) => Tls::new(mode, &credentials).map_err(nbd_error)?,
        None => Tls::off(),
    };
    let mut list = Vec::new();
    for (i, (spec, name)) in exports.iter().enumerate() {
        let name = name.clone().unwrap_or_else(|| if i == 0 { String::new() } else { format!("export{i}") });
        let mut export = Export::new(&name, &fast_config(spec).map_err(bad)?, read_only).map_err(nbd_error)?;
        export.direct_reads = !no_direct_reads;
        export.splice_reads = !no_splice;
        list.push(export);
    }
    let listener = match (listen, unix) {
        (Some(_), Some(_)) => return Err(bad("--listen and --unix: choose one".into())),
        (_, Some(path)) => Listen::unix_with_mode(path, mode).map_err(nbd_error)?,
        (addr, None) => Listen::tcp(addr.as_deref().unwrap_or("127.0.0.1:10809")).map_err(nbd_error)?,
    };
    // Devices to flush and blktraces to end once stopped (the server owns
    // the exports).
    let held: Vec<Export> = list.clone();
    let control = match control {
        Some(path) => {
            let devices = list.iter().map(|e| (e.name.clone(), e.device.clone())).collect();
            Some(crate::control::Control::start(&path, devices, mode).map_err(bad)?)
        }
        None => None,
    };
    let server = Server::new(listener, list).map_err(nbd_error)?.max_connections(max_conn).tls(tls);
    let stop = server.stop_handle();
    let signals = stop_on_signals(move || stop.stop())?;
    let served = server.run();
    signals.close();
    if let Some(c) = control {
        c.close();
    }
    served.map_err(nbd_error)?;
    for e in held.iter().filter(|e| !e.read_only) {
        e.device.client().submit_and_wait(Bio::flush()).map_err(|err| (1, format!("flush of '{}': {err}", e.name)))?;
    }
    for e in &held {
        if let Some(line) = crate::blktrace_stop_line(&e.device) {
            eprintln!("{}", line.map_err(|err| (1, format!("export '{}': {err}", e.name)))?);
        }
    }
    Ok("mqblk serve: stopped; devices flushed\n".into())
}

/// A null export completes inline (`irqmode=0`) unless its spec names
/// `irqmode`: null_blk's default, a softirq emulated by a completion
/// thread per queue, only hands each request from that thread back to the
/// connection that waits for it. Measured on a memory-backed export
/// (docs/results/serve-null-irqmode.txt, fio's nbd engine, 4k randread
/// QD32, 5 alternating rounds): 1.25x the IOPS with one client, 2.73x
/// with two, 3.1M context switches fewer and a fifth less server CPU. File exports keep their
/// completion threads: reaping in the connections gained nothing there
/// (docs/results/serve-default-reap.txt).
pub(crate) fn fast_config(spec: &str) -> Result<DeviceConfig, String> {
    crate::register_drivers();
    let mut cfg = DeviceConfig::parse(spec).map_err(|e| format!("cannot open device '{spec}': {e}"))?;
    if let Some(null) = cfg.driver_mut::<mqblk_null::NullConfig>() {
        if null.irqmode.is_none() {
            log::info!("a null export completes inline (irqmode=0): name irqmode in its spec to choose");
            null.irqmode = Some(mqblk_null::IrqMode::None);
        }
    }
    Ok(cfg)
}

/// The exit code and message for a server error: 2 for what the command
/// line asked wrongly (a device spec, two exports of one name), else 1.
fn nbd_error(e: mqblk_nbd::Error) -> (u8, String) {
    let code = match e {
        mqblk_nbd::Error::Device { .. }
        | mqblk_nbd::Error::DuplicateExport { .. }
        | mqblk_nbd::Error::NoExports
        | mqblk_nbd::Error::TlsSetup(_) => 2,
        _ => 1,
    };
    (code, e.to_string())
}

/// SIGINT and SIGTERM stop a server: a thread waits for them (signal-
/// hook's handler only writes to a pipe) and calls `stop`. The returned
/// handle's `close` ends that thread. Shared with `mqblk ublk add`.
pub(crate) fn stop_on_signals(
    stop: impl FnOnce() + Send + 'static,
) -> Result<signal_hook::iterator::Handle, (u8, String)> {
    let mut signals = signal_hook::iterator::Signals::new([libc::SIGINT, libc::SIGTERM])
        .map_err(|e| (1, format!("cannot handle SIGINT and SIGTERM: {e}")))?;
    let handle = signals.handle();
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            log::info!("signal {signal}: stopping");
            stop();
        }
    });
    Ok(handle)
}

/// Messages of a server (`log`) go to stderr as `mqblk COMMAND: ...`:
/// info and up by default, or as MQBLK_LOG (else RUST_LOG) says, in
/// env_logger's syntax (`debug`, `mqblk_nbd=debug`). Shared with `mqblk ublk`.
pub(crate) fn init_logger(command: &'static str) {
    use std::io::Write;
    let filters = std::env::var("MQBLK_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "warn,mqblk_nbd=info,mqblk_ublk=info,mqblk_vhost=info,mqblk=info".into());
    let _ = env_logger::Builder::new()
        .parse_filters(&filters)
        .format(move |buf, record| match record.level() {
            log::Level::Info => writeln!(buf, "mqblk {command}: {}", record.args()),
            level => writeln!(buf, "mqblk {command}: {}: {}", level.as_str().to_lowercase(), record.args()),
        })
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::{fast_config, tls_setting};
    use mqblk_nbd::{Credentials, TlsMode};
    use std::path::PathBuf;

    #[test]
    fn tls_options_combine_as_nbdkit_means_them_or_say_what_is_wrong() {
        let p = |s: &str| Some(PathBuf::from(s));
        assert!(tls_setting("off", None, None, false).unwrap().is_none());
        let (mode, c) = tls_setting("require", p("k.psk"), None, false).unwrap().unwrap();
        assert_eq!(mode, TlsMode::Require);
        assert!(matches!(c, Credentials::Psk(f) if f == std::path::Path::new("k.psk")));
        let (mode, c) = tls_setting("on", None, p("d"), true).unwrap().unwrap();
        assert_eq!(mode, TlsMode::On);
        assert!(matches!(c, Credentials::Certificates { verify_peer: true, .. }));
        let err = |m, psk, certs, verify| tls_setting(m, psk, certs, verify).unwrap_err();
        assert_eq!(err("require", None, None, false), "--tls=require needs --tls-psk=FILE or --tls-certificates=DIR");
        assert_eq!(err("on", None, None, false), "--tls=on needs --tls-psk=FILE or --tls-certificates=DIR");
        assert_eq!(err("on", p("k"), p("d"), false), "--tls-psk and --tls-certificates: choose one");
        assert!(err("on", p("k"), None, true).contains("it needs --tls-certificates, not --tls-psk"));
        assert_eq!(
            err("off", p("k"), None, false),
            "--tls-psk needs --tls=on or --tls=require (TLS is off by default)"
        );
        assert!(err("off", None, None, true).starts_with("--tls-verify-peer needs --tls=on"));
        assert_eq!(err("maybe", None, None, false), "--tls=maybe: expected off, on or require");
    }

    #[test]
    fn null_exports_complete_inline_unless_their_spec_chose() {
        let spec = |s: &str| fast_config(s).unwrap().to_string();
        assert_eq!(spec("null:gb=1,memory_backed=1"), "null:gb=1,irqmode=0,memory_backed=1");
        assert_eq!(spec("null:"), "null:irqmode=0");
        assert_eq!(spec("null"), "null:irqmode=0");
        assert_eq!(spec("null:gb=1,irqmode=1"), "null:gb=1,irqmode=1");
        assert_eq!(spec("null:irqmode=2,completion_nsec=5000"), "null:irqmode=2,completion_nsec=5000");
        assert_eq!(spec("file:path=/x"), "file:path=/x");
        assert!(fast_config("nullx:a=1").unwrap_err().contains("unknown device driver 'nullx'"));
    }
}
