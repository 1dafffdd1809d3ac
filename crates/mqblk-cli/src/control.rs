//! The control socket of a running server (`mqblk serve --control PATH`)
//! and its client (`mqblk control PATH COMMAND...`): faults and power cuts
//! on live devices, from outside the process.
//!
//! One request per connection: a line of words, answered by one line,
//! `ok[ VALUE]` or `error: WHAT`. Commands:
//! - `power_cut [EXPORT]`: the device's volatile write cache is lost
//!   (`Device::power_cut`); answers `ok lost_pages=N`.
//! - `power_off [EXPORT]`: the same, and every later change is dropped
//!   until `power_on [EXPORT]` (answers `ok dropped=N`), so a file system
//!   mounted on it can be unmounted without writing past the cut.
//! - `set KEY VALUE [EXPORT]`: a live attribute (`Device::set_attr`, e.g.
//!   `set badblocks +2048-2055`).
//! - `get KEY [EXPORT]`: its value (`Device::attr`).
//!
//! EXPORT is an export's name (default: the first export, whatever its
//! name). A request that is refused changes nothing.
//!
//! Relies on: mqblk's `Device` (the calls above), std's Unix sockets; a
//! thread of its own, so the NBD server's loop is untouched.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mqblk::Device;

/// The commands, for messages.
const COMMANDS: &str = "power_cut, power_off, power_on, set, get";

/// Longest request line accepted.
const MAX_LINE: usize = 4096;

/// A running control socket; `close` (or drop) stops it and removes the
/// socket file.
pub(crate) struct Control {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Control {
    /// `--control PATH` of a front end serving one device (`ublk add`,
    /// `vhost add`): the socket if a path is given, its error as bad input.
    pub(crate) fn for_one_device(
        path: Option<&Path>,
        device: &Device,
        mode: u32,
    ) -> Result<Option<Self>, (u8, String)> {
        path.map(|path| Self::start(path, vec![(String::new(), device.clone())], mode)).transpose().map_err(|e| (2, e))
    }

    /// Listens on `path`, a socket of permissions `mode`, for the
    /// `(name, device)` exports.
    pub(crate) fn start(path: &Path, exports: Vec<(String, Device)>, mode: u32) -> Result<Self, String> {
        let listener = mqblk::socket_mode::bind_with_mode(mode, || UnixListener::bind(path))
            .map_err(|e| format!("--control {}: {e}", path.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stopped.load(Ordering::Acquire) {
                    break;
                }
                match conn {
                    Ok(conn) => serve_one(conn, &exports),
                    Err(e) => log::warn!("control: accept: {e}"),
                }
            }
        });
        Ok(Self { path: path.to_path_buf(), stop, thread: Some(thread) })
    }

    pub(crate) fn close(mut self) {
        self.shut();
    }

    fn shut(&mut self) {
        let Some(thread) = self.thread.take() else { return };
        self.stop.store(true, Ordering::Release);
        // Wake the accept loop with a connection of our own.
        let _ = UnixStream::connect(&self.path);
        let _ = thread.join();
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        self.shut();
    }
}

/// Reads one request line, answers it, closes.
fn serve_one(conn: UnixStream, exports: &[(String, Device)]) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut line = String::new();
    let reply = match BufReader::new((&conn).take(MAX_LINE as u64 + 1)).read_line(&mut line) {
        Ok(_) if line.len() > MAX_LINE => format!("error: request longer than {MAX_LINE} bytes"),
        Ok(0) => return, // a connection that said nothing (our own wake-up)
        Ok(_) => match execute(line.trim_end_matches(['\n', '\r']), exports) {
            Ok(value) => value.map_or("ok".to_string(), |v| format!("ok {v}")),
            Err(e) => format!("error: {e}"),
        },
        Err(e) => format!("error: cannot read the request: {e}"),
    };
    log::info!("control: {} -> {reply}", line.trim_end());
    let _ = (&conn).write_all(format!("{reply}\n").as_bytes());
    // Read what is left of an over-long request (bounded) before closing:
    // closing on unread bytes resets the connection, and the client would
    // lose the reply.
    let _ = conn.shutdown(std::net::Shutdown::Write);
    let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
    let _ = std::io::copy(&mut (&conn).take(1 << 20), &mut std::io::sink());
}

/// Runs one command; Ok(Some(value)) for a reply that carries one.
fn execute(line: &str, exports: &[(String, Device)]) -> Result<Option<String>, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let device = |name: Option<&&str>| -> Result<&Device, String> {
        match name {
            None => Ok(&exports.first().ok_or("no exports")?.1),
            Some(n) => exports.iter().find(|(e, _)| e == n).map(|(_, d)| d).ok_or_else(|| {
                let names: Vec<String> = exports.iter().map(|(e, _)| format!("'{e}'")).collect();
                format!("no export '{n}' (exports: {})", names.join(", "))
            }),
        }
    };
    let power = |name: Option<&&str>| {
        device(name)?.power().ok_or_else(|| {
            "a power cut needs a volatile write cache, and this export has none (null: cache_size=MiB with \
             memory_backed=1)"
                .to_string()
        })
    };
    let attrs = |name: Option<&&str>| {
        device(name)?.attributes().ok_or_else(|| "this export's device has no live attributes".to_string())
    };
    match words.as_slice() {
        ["power_cut", rest @ ..] if rest.len() <= 1 => {
            let lost = power(rest.first())?.cut().map_err(|e| e.to_string())?;
            Ok(Some(format!("lost_pages={lost}")))
        }
        ["power_off", rest @ ..] if rest.len() <= 1 => {
            let lost = power(rest.first())?.off().map_err(|e| e.to_string())?;
            Ok(Some(format!("lost_pages={lost}")))
        }
        ["power_on", rest @ ..] if rest.len() <= 1 => {
            let dropped = power(rest.first())?.on().map_err(|e| e.to_string())?;
            Ok(Some(format!("dropped={dropped}")))
        }
        ["set", key, value, rest @ ..] if rest.len() <= 1 => {
            attrs(rest.first())?.set(key, value).map_err(|e| e.to_string())?;
            Ok(None)
        }
        ["get", key, rest @ ..] if rest.len() <= 1 => {
            Ok(Some(attrs(rest.first())?.get(key).map_err(|e| e.to_string())?))
        }
        [cmd @ ("power_cut" | "power_off" | "power_on" | "set" | "get"), ..] => Err(format!(
            "usage: power_cut|power_off|power_on [EXPORT] | set KEY VALUE [EXPORT] | get KEY [EXPORT] \
             (bad arguments to '{cmd}')"
        )),
        [] => Err(format!("empty request (commands: {COMMANDS})")),
        [other, ..] => Err(format!("unknown command '{other}' (commands: {COMMANDS})")),
    }
}

/// `mqblk control PATH WORDS...`: sends one request, prints the reply;
/// an `error:` reply is an Err (exit 1).
pub(crate) fn request(path: &Path, words: &[String]) -> Result<String, (u8, String)> {
    if words.is_empty() {
        return Err((
            2,
            "control needs a command: power_cut [EXPORT] | set KEY VALUE [EXPORT] | get KEY [EXPORT]".into(),
        ));
    }
    let mut conn = UnixStream::connect(path).map_err(|e| (1, format!("{}: {e}", path.display())))?;
    conn.write_all(format!("{}\n", words.join(" ")).as_bytes()).map_err(|e| (1, format!("send: {e}")))?;
    conn.shutdown(std::net::Shutdown::Write).map_err(|e| (1, format!("send: {e}")))?;
    let mut reply = String::new();
    conn.read_to_string(&mut reply).map_err(|e| (1, format!("receive: {e}")))?;
    match reply.strip_prefix("error: ") {
        Some(e) => Err((1, e.trim_end().to_string())),
        None => Ok(reply),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exports() -> Vec<(String, Device)> {
        vec![
            ("".into(), {
                crate::register_drivers();
                Device::open("null:size=4,memory_backed=1,cache_size=1,irqmode=0").unwrap()
            }),
            ("plain".into(), Device::open("null:size=4,irqmode=0").unwrap()),
        ]
    }

    #[test]
    fn commands_act_on_the_named_export_and_bad_ones_change_nothing() {
        let e = exports();
        e[0].1.client().write_at(&[1; 4096], 0).unwrap();
        assert_eq!(execute("power_cut", &e).unwrap().unwrap(), "lost_pages=1");
        assert!(execute("power_cut plain", &e).unwrap_err().contains("needs a volatile write cache"));
        assert!(execute("power_on", &e).unwrap_err().contains("the power is on"));
        assert_eq!(execute("power_off", &e).unwrap().unwrap(), "lost_pages=0");
        e[0].1.client().write_at(&[2; 4096], 0).unwrap();
        assert_eq!(execute("power_on", &e).unwrap().unwrap(), "dropped=1");
        execute("set badblocks +8-15 plain", &e).unwrap();
        assert_eq!(execute("get badblocks plain", &e).unwrap().unwrap(), "8-15");
        assert_eq!(execute("get badblocks", &e).unwrap().unwrap(), "", "the first export is untouched");
        for (line, says) in [
            ("", "empty request"),
            ("reboot", "unknown command 'reboot'"),
            ("set badblocks", "bad arguments to 'set'"),
            ("power_cut a b", "bad arguments to 'power_cut'"),
            ("get badblocks nosuch", "no export 'nosuch' (exports: '', 'plain')"),
            ("set badblocks +9-1 plain", "ends before it starts"),
            ("set color red plain", "no attribute 'color'"),
        ] {
            let err = execute(line, &e).unwrap_err();
            assert!(err.contains(says), "{line:?}: {err}");
        }
        assert_eq!(execute("get badblocks plain", &e).unwrap().unwrap(), "8-15", "nothing changed");
    }

    #[test]
    fn the_socket_answers_one_line_per_connection() {
        let dir = std::env::temp_dir().join(format!("mqblk-control-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ctl");
        let control = Control::start(&path, exports(), mqblk::socket_mode::DEFAULT_SOCKET_MODE).unwrap();
        let ok = request(&path, &["set".into(), "badblocks".into(), "+0-7".into()]).unwrap();
        assert_eq!(ok, "ok\n");
        assert_eq!(request(&path, &["get".into(), "badblocks".into()]).unwrap(), "ok 0-7\n");
        let (code, e) = request(&path, &["bogus".into()]).unwrap_err();
        assert_eq!(
            (code, e.as_str()),
            (1, "unknown command 'bogus' (commands: power_cut, power_off, power_on, set, get)")
        );
        // An over-long line is refused, not buffered without bound.
        let mut conn = UnixStream::connect(&path).unwrap();
        conn.write_all(&vec![b'x'; MAX_LINE + 10]).unwrap();
        conn.shutdown(std::net::Shutdown::Write).unwrap();
        let mut reply = String::new();
        conn.read_to_string(&mut reply).unwrap();
        assert!(reply.starts_with("error: request longer than"), "{reply}");
        control.close();
        assert!(!path.exists(), "the socket file is removed");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
