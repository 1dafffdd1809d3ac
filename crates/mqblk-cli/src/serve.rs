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

pub const USAGE: &str = "\
  serve --device SPEC [--export NAME] [--device SPEC --export NAME ...]
        [--listen ADDR] [--unix PATH] [--read-only] [--max-connections N]
        An NBD server (fixed newstyle) over the devices; TCP 127.0.0.1:10809 by default.
";

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // An atomic store is async-signal-safe.
    STOP.store(true, Ordering::SeqCst);
}

pub fn run(args: &[String]) -> Result<String, (u8, String)> {
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
