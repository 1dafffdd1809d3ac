//! `mqblk serve`: an NBD server over mqblk devices (crates/mqblk-nbd).
//!
//! `--device SPEC [--export NAME]` may repeat: each device is an export
//! (the first one's default name is the empty string, NBD's default
//! export). TCP on 127.0.0.1:10809 unless `--listen ADDR` or `--unix PATH`;
//! SIGINT or SIGTERM stop it cleanly: connections finish their in-flight
//! requests, then every writable device is flushed.

use mqblk::Bio;
use mqblk_nbd::{Export, Listen, Server};

pub const USAGE: &str = "\
  serve --device SPEC [--export NAME] [--device SPEC --export NAME ...]
        [--listen ADDR] [--unix PATH] [--read-only] [--max-connections N]
        An NBD server (fixed newstyle) over the devices; TCP 127.0.0.1:10809 by default.
";

pub fn run(args: &[String]) -> Result<String, (u8, String)> {
    init_logger();
    let bad = |e: String| (2u8, e);
    let mut exports: Vec<(String, Option<String>)> = Vec::new();
    let (mut listen, mut unix, mut read_only, mut max_conn) = (None, None, false, 16usize);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (key, inline) = match a.split_once('=') {
            Some((k, v)) => (k, Some(v.to_string())),
            None => (a.as_str(), None),
        };
        let mut value =
            || inline.clone().or_else(|| it.next().cloned()).ok_or_else(|| bad(format!("{key} needs a value")));
        match key {
            "--device" => exports.push((value()?, None)),
            "--export" => {
                let name = value()?;
                let last = exports.last_mut().ok_or_else(|| bad("--export names the --device before it".into()))?;
                last.1 = Some(name);
            }
            "--listen" => listen = Some(value()?),
            "--unix" => unix = Some(value()?),
            "--read-only" => read_only = true,
            "--max-connections" => {
                max_conn = value()?.parse().map_err(|_| bad("--max-connections needs a number".into()))?
            }
            other => return Err(bad(format!("unknown option '{other}'\n{USAGE}"))),
        }
    }
    if exports.is_empty() {
        return Err(bad(format!("serve needs --device SPEC\n{USAGE}")));
    }
    let mut list = Vec::new();
    for (i, (spec, name)) in exports.iter().enumerate() {
        let name = name.clone().unwrap_or_else(|| if i == 0 { String::new() } else { format!("export{i}") });
        list.push(Export::open(&name, spec, read_only).map_err(nbd_error)?);
    }
    let listener = match (listen, unix) {
        (Some(_), Some(_)) => return Err(bad("--listen and --unix: choose one".into())),
        (_, Some(path)) => Listen::unix(path).map_err(nbd_error)?,
        (addr, None) => Listen::tcp(addr.as_deref().unwrap_or("127.0.0.1:10809")).map_err(nbd_error)?,
    };
    // Devices to flush once stopped (the server owns the exports).
    let writable: Vec<Export> = list.iter().filter(|e| !e.read_only).cloned().collect();
    let server = Server::new(listener, list).map_err(nbd_error)?.max_connections(max_conn);
    let signals = stop_on_signals(server.stop_handle())?;
    let served = server.run();
    signals.close();
    served.map_err(nbd_error)?;
    for e in &writable {
        e.device.client().submit_and_wait(Bio::flush()).map_err(|err| (1, format!("flush of '{}': {err}", e.name)))?;
    }
    Ok("mqblk serve: stopped; devices flushed\n".into())
}

/// The exit code and message for a server error: 2 for what the command
/// line asked wrongly (a device spec, two exports of one name), else 1.
fn nbd_error(e: mqblk_nbd::Error) -> (u8, String) {
    let code = match e {
        mqblk_nbd::Error::Device { .. } | mqblk_nbd::Error::DuplicateExport { .. } | mqblk_nbd::Error::NoExports => 2,
        _ => 1,
    };
    (code, e.to_string())
}

/// SIGINT and SIGTERM stop the server: a thread waits for them (signal-
/// hook's handler only writes to a pipe) and calls `stop`. The returned
/// handle's `close` ends that thread.
fn stop_on_signals(stop: mqblk_nbd::StopHandle) -> Result<signal_hook::iterator::Handle, (u8, String)> {
    let mut signals = signal_hook::iterator::Signals::new([libc::SIGINT, libc::SIGTERM])
        .map_err(|e| (1, format!("cannot handle SIGINT and SIGTERM: {e}")))?;
    let handle = signals.handle();
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            log::info!("signal {signal}: stopping");
            stop.stop();
        }
    });
    Ok(handle)
}

/// Messages of the server (`log`) go to stderr as `mqblk serve: ...`:
/// info and up by default, or as MQBLK_LOG (else RUST_LOG) says, in
/// env_logger's syntax (`debug`, `mqblk_nbd=debug`).
fn init_logger() {
    use std::io::Write;
    let filters = std::env::var("MQBLK_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "warn,mqblk_nbd=info,mqblk=info".into());
    let _ = env_logger::Builder::new()
        .parse_filters(&filters)
        .format(|buf, record| match record.level() {
            log::Level::Info => writeln!(buf, "mqblk serve: {}", record.args()),
            level => writeln!(buf, "mqblk serve: {}: {}", level.as_str().to_lowercase(), record.args()),
        })
        .try_init();
}
