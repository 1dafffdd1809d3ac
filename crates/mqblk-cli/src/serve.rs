//! `mqblk serve`: an NBD server over mqblk devices (crates/mqblk-nbd).
//!
//! `--device SPEC [--export NAME]` may repeat: each device is an export
//! (the first one's default name is the empty string, NBD's default
//! export). TCP on 127.0.0.1:10809 unless `--listen ADDR` or `--unix PATH`;
//! SIGINT or SIGTERM stop it cleanly: connections finish their in-flight
//! requests, then every writable device is flushed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use mqblk::{Bio, Device};
use mqblk_nbd::{Export, Listen};

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
    /// Connections served at once.
    #[arg(long, value_name = "N", default_value_t = 16)]
    max_connections: usize,
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

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // An atomic store is async-signal-safe.
    STOP.store(true, Ordering::SeqCst);
}

/// Runs `mqblk serve`; `matches` are serve's, for the order of the
/// --device and --export options. Err((exit code, message)).
pub fn run(args: ServeArgs, matches: &clap::ArgMatches) -> Result<String, (u8, String)> {
    let bad = |e: String| (2u8, e);
    let exports = exports(&args, matches).map_err(bad)?;
    let ServeArgs { listen, unix, read_only, max_connections: max_conn, .. } = args;
    if exports.is_empty() {
        return Err(bad("serve needs --device SPEC (see mqblk serve --help)".into()));
    }
    let mut list = Vec::new();
    for (i, (spec, name)) in exports.iter().enumerate() {
        let device = Device::open(spec).map_err(|e| bad(format!("--device {spec}: {e}")))?;
        let name = name.clone().unwrap_or_else(|| if i == 0 { String::new() } else { format!("export{i}") });
        if list.iter().any(|e: &Export| e.name == name) {
            return Err(bad(format!("two exports are named '{name}'")));
        }
        list.push(Export { name, description: spec.clone(), device, read_only });
    }
    let listener = match (listen, unix) {
        (Some(_), Some(_)) => return Err(bad("--listen and --unix: choose one".into())),
        (_, Some(path)) => {
            let _ = std::fs::remove_file(&path);
            let l = std::os::unix::net::UnixListener::bind(&path)
                .map_err(|e| (1, format!("cannot listen on {path}: {e}")))?;
            Listen::Unix(l, path.into())
        }
        (addr, None) => {
            let addr = addr.unwrap_or_else(|| "127.0.0.1:10809".into());
            let l = std::net::TcpListener::bind(&addr).map_err(|e| (1, format!("cannot listen on {addr}: {e}")))?;
            Listen::Tcp(l)
        }
    };
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    eprintln!("mqblk serve: {} export(s), ready", list.len());
    let exports = Arc::new(list);
    mqblk_nbd::serve(listener, exports.clone(), max_conn, &STOP).map_err(|e| (1, format!("serve: {e}")))?;
    for e in exports.iter().filter(|e| !e.read_only) {
        e.device.client().submit_and_wait(Bio::flush()).map_err(|err| (1, format!("flush of '{}': {err}", e.name)))?;
    }
    Ok("mqblk serve: stopped; devices flushed\n".into())
}
