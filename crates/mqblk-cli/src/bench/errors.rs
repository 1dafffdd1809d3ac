//! fio's error policy (`continue_on_error`, `ignore_error`, `error_dump`):
//! which failed I/Os end a job and which it counts and goes past.
//!
//! The rules are fio's (HOWTO "Error handling", io_u.c's
//! `td_non_fatal_error`): by default the first error ends the job; with
//! `continue_on_error` covering the I/O's kind (read, write, verify) a
//! non-fatal error (EIO, EILSEQ) is counted and the job goes on, and
//! `ignore_error` replaces that kind's non-fatal list with its own. A job
//! that went on reports `total_err` and `first_error`; `error_dump`
//! (default on) prints each error as it happens, fatal or not.

use super::options::{err, OptionError};

/// The kinds of error fio's policy tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    Read = 0,
    Write = 1,
    /// A block that read back wrong (EILSEQ).
    Verify = 2,
}

/// A job's error policy, with fio's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorOptions {
    /// `continue_on_error`, per kind.
    pub continue_on: [bool; 3],
    /// `ignore_error`: each kind's non-fatal errnos (None: EIO, EILSEQ).
    pub ignore: [Option<Vec<i32>>; 3],
    /// `error_dump` (default 1).
    pub dump: bool,
}

impl Default for ErrorOptions {
    fn default() -> Self {
        Self { continue_on: [false; 3], ignore: [None, None, None], dump: true }
    }
}

/// The option names (options.rs' `job_options` adds them).
pub const ERROR_OPTIONS: &[&str] = &["continue_on_error", "ignore_error", "error_dump"];

/// Errno names `ignore_error` accepts, besides numbers.
const ERRNOS: &[(&str, i32)] = &[
    ("EPERM", libc::EPERM),
    ("ENOENT", libc::ENOENT),
    ("EINTR", libc::EINTR),
    ("EIO", libc::EIO),
    ("ENXIO", libc::ENXIO),
    ("E2BIG", libc::E2BIG),
    ("EBADF", libc::EBADF),
    ("EAGAIN", libc::EAGAIN),
    ("ENOMEM", libc::ENOMEM),
    ("EACCES", libc::EACCES),
    ("EFAULT", libc::EFAULT),
    ("EBUSY", libc::EBUSY),
    ("EEXIST", libc::EEXIST),
    ("ENODEV", libc::ENODEV),
    ("EINVAL", libc::EINVAL),
    ("EFBIG", libc::EFBIG),
    ("ENOSPC", libc::ENOSPC),
    ("ESPIPE", libc::ESPIPE),
    ("EROFS", libc::EROFS),
    ("ERANGE", libc::ERANGE),
    ("ENODATA", libc::ENODATA),
    ("EILSEQ", libc::EILSEQ),
    ("EOPNOTSUPP", libc::EOPNOTSUPP),
    ("ETIMEDOUT", libc::ETIMEDOUT),
    ("ECANCELED", libc::ECANCELED),
    ("EREMOTEIO", libc::EREMOTEIO),
    ("EDQUOT", libc::EDQUOT),
    ("EBADMSG", libc::EBADMSG),
    ("ENOLINK", libc::ENOLINK),
    ("ENOTSUP", libc::ENOTSUP),
];

fn errno(key: &str, v: &str) -> Result<i32, OptionError> {
    if let Some(&(_, e)) = ERRNOS.iter().find(|(name, _)| *name == v) {
        return Ok(e);
    }
    v.parse::<i32>()
        .ok()
        .filter(|e| *e > 0)
        .ok_or_else(|| OptionError(format!("{key}: bad error '{v}' (an errno name such as ENOSPC, or its number)")))
}

impl ErrorOptions {
    /// Sets one option; false if `key` is none of them.
    pub(super) fn set(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionError> {
        match key {
            "continue_on_error" => {
                let v = value.unwrap_or("all");
                self.continue_on = match v {
                    "none" | "0" => [false, false, false],
                    "read" => [true, false, false],
                    "write" => [false, true, false],
                    "io" => [true, true, false],
                    "verify" => [false, false, true],
                    "all" | "1" => [true, true, true],
                    _ => {
                        return err(format!(
                            "continue_on_error: bad value '{v}' (accepted: none, read, write, io, verify, all, 0, 1)"
                        ))
                    }
                }
            }
            "ignore_error" => {
                let v = value.ok_or_else(|| OptionError("ignore_error: needs a value (ignore_error=R,W,V)".into()))?;
                let lists: Vec<&str> = v.split(',').collect();
                if lists.len() > 3 {
                    return err(format!("ignore_error: bad value '{v}' (at most three lists: reads, writes, verify)"));
                }
                for (kind, list) in lists.iter().enumerate().filter(|(_, l)| !l.is_empty()) {
                    let errnos = list.split(':').map(|e| errno(key, e.trim())).collect::<Result<Vec<_>, _>>()?;
                    self.ignore[kind] = Some(errnos);
                }
            }
            "error_dump" => self.dump = super::values::parse_flag(key, value)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Whether a job goes on past an error `errno` of `kind`.
    pub fn continues(&self, kind: ErrorKind, errno: i32) -> bool {
        let k = kind as usize;
        match &self.ignore[k] {
            // ignore_error overrides continue_on_error for its kind.
            Some(list) => list.contains(&errno),
            None => self.continue_on[k] && (errno == libc::EIO || errno == libc::EILSEQ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(set: &[(&str, Option<&str>)]) -> ErrorOptions {
        let mut o = ErrorOptions::default();
        for (k, v) in set {
            assert!(o.set(k, *v).unwrap(), "{k}");
        }
        o
    }

    #[test]
    fn by_default_every_error_ends_the_job() {
        let o = ErrorOptions::default();
        assert!(!o.continues(ErrorKind::Read, libc::EIO));
        assert!(o.dump);
    }

    #[test]
    fn continue_on_error_covers_non_fatal_errors_of_its_kinds() {
        let o = opts(&[("continue_on_error", Some("write"))]);
        assert!(o.continues(ErrorKind::Write, libc::EIO));
        assert!(o.continues(ErrorKind::Write, libc::EILSEQ));
        assert!(!o.continues(ErrorKind::Write, libc::ENOSPC), "ENOSPC is fatal unless ignored");
        assert!(!o.continues(ErrorKind::Read, libc::EIO));
        let bare = opts(&[("continue_on_error", None)]);
        assert!(bare.continues(ErrorKind::Verify, libc::EILSEQ), "a bare flag is all");
        assert!(ErrorOptions::default().set("continue_on_error", Some("some")).unwrap_err().0.contains("accepted"));
    }

    /// examples/enospc-pressure.fio: `ignore_error=,ENOSPC` ignores ENOSPC
    /// on writes, and only there.
    #[test]
    fn ignore_error_lists_replace_a_kinds_non_fatal_errors() {
        let o = opts(&[("continue_on_error", Some("write")), ("ignore_error", Some(",ENOSPC:122"))]);
        assert!(o.continues(ErrorKind::Write, libc::ENOSPC));
        assert!(o.continues(ErrorKind::Write, libc::EDQUOT));
        assert!(!o.continues(ErrorKind::Write, libc::EIO), "the list replaced EIO");
        assert!(!o.continues(ErrorKind::Read, libc::ENOSPC));
        assert!(ErrorOptions::default().set("ignore_error", Some("EWHAT")).unwrap_err().0.contains("errno name"));
    }
}
