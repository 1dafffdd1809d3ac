//! Sockets that are private by default: the front ends' Unix sockets (an
//! NBD export, a vhost-user disk, a control socket) give whoever can
//! connect the device's data or its power switch, so they are created
//! with mode 0600 unless their user asks for another (`--socket-mode`).
//!
//! The mode is set by the umask while the socket is bound, not by a chmod
//! after: a listening socket is reachable from the moment bind and listen
//! return (std's `UnixListener::bind` does both), and a chmod would leave
//! that moment open to anyone the default mode lets in.
//!
//! Relies on: umask(2), which is process-wide: while `bind_with_mode`
//! runs, files other threads create get at most the socket's permissions
//! (more private, never less); its own callers are serialised.

use std::io;
use std::sync::Mutex;

/// The mode of the front ends' sockets unless told otherwise.
pub const DEFAULT_SOCKET_MODE: u32 = 0o600;

static UMASK_LOCK: Mutex<()> = Mutex::new(());

/// Runs `bind`, which creates a socket file, so that the file gets
/// permissions `mode` (0o000 to 0o777; the file-type bits are refused).
pub fn bind_with_mode<T>(mode: u32, bind: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    if mode & !0o777 != 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("socket mode {mode:o}: only 0 to 777")));
    }
    let _serial = UMASK_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: umask only swaps the process's file-creation mask.
    let old = unsafe { libc::umask((!mode & 0o777) as libc::mode_t) };
    let bound = bind();
    // SAFETY: as above; restores the mask this call replaced.
    unsafe { libc::umask(old) };
    bound
}

/// Parses `--socket-mode`: octal permission bits ("600", "0660").
pub fn parse_socket_mode(text: &str) -> Result<u32, String> {
    match u32::from_str_radix(text.trim_start_matches("0o"), 8) {
        Ok(mode) if mode <= 0o777 => Ok(mode),
        _ => Err(format!("--socket-mode {text}: octal permission bits, 000 to 777 (e.g. 600, 660)")),
    }
}

#[cfg(all(test, not(miri)))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode_of(path: &std::path::Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn sockets_get_the_mode_asked_for_and_the_umask_comes_back() {
        let dir = std::env::temp_dir().join(format!("mqblk-socket-mode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // SAFETY: reads the mask by setting it and putting it back.
        let before = unsafe { libc::umask(0o022) };
        for mode in [0o600, 0o660, 0o666] {
            let path = dir.join(format!("s{mode:o}"));
            let _l = bind_with_mode(mode, || std::os::unix::net::UnixListener::bind(&path)).unwrap();
            assert_eq!(mode_of(&path), mode, "{mode:o}");
        }
        // SAFETY: as above.
        assert_eq!(unsafe { libc::umask(before) }, 0o022, "the mask in force before is back");
        assert!(bind_with_mode(0o1600, || Ok(())).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn socket_modes_parse_as_octal() {
        assert_eq!(parse_socket_mode("600"), Ok(0o600));
        assert_eq!(parse_socket_mode("0660"), Ok(0o660));
        for bad in ["800", "rw", "1777", ""] {
            assert!(parse_socket_mode(bad).unwrap_err().contains("octal permission bits"), "{bad}");
        }
    }
}
