//! Errors of the vhost-user-blk server: each names the step that failed.
//!
//! Relies on: nothing (thiserror).

use std::io;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("cannot listen on {path}: {source}")]
    Listen { path: String, source: vhost::vhost_user::Error },
    #[error("{what}: {source}")]
    Io { what: &'static str, source: io::Error },
    #[error("vhost-user: {0}")]
    Daemon(String),
    #[error("bad option: {0}")]
    BadOption(String),
    #[error("device: {0}")]
    Device(#[from] mqblk::Error),
}
