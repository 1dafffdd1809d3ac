//! Blocking helpers over a client: `read_at`, `write_at` and
//! `submit_and_wait` submit one bio and wait for it, while the client's
//! other I/O keeps flowing (its completions are kept for later `do_io`s).
//!
//! Relies on: the client's submission (submit.rs) and reaping (reap.rs).

use crate::buf::Buf;
use crate::error::Error;
use crate::request::{Bio, ORIGIN_BLOCKING};
use crate::status::Status;

use super::{Client, Completion};

impl Client {
    /// Reads `buf.len()` bytes at `offset`, waiting for the result. Other
    /// I/Os of this client keep flowing and are returned by later `do_io`s.
    pub fn read_at(&mut self, buf: &mut [u8], offset: u64) -> Result<(), Error> {
        let bounce = self.take_bounce(buf.len());
        let done = self.blocking(Bio::read(offset, bounce))?;
        let data = done.buf.expect("read completion carries its buffer");
        if done.status.is_ok() {
            buf.copy_from_slice(&data);
        }
        self.bounce = Some(data);
        status_result(done.status)
    }

    /// Writes `buf` at `offset`, waiting for the result.
    pub fn write_at(&mut self, buf: &[u8], offset: u64) -> Result<(), Error> {
        let mut bounce = self.take_bounce(buf.len());
        bounce.copy_from_slice(buf);
        let done = self.blocking(Bio::write(offset, bounce))?;
        self.bounce = done.buf;
        status_result(done.status)
    }

    /// Submits any bio and waits for it (flush, discard, write zeroes ...).
    pub fn submit_and_wait(&mut self, bio: Bio) -> Result<Option<Buf>, Error> {
        let done = self.blocking(bio)?;
        status_result(done.status)?;
        Ok(done.buf)
    }

    /// Submits any bio and waits for its completion, whatever its status
    /// (zone appends: the completion carries `append_offset`).
    pub fn submit_and_wait_completion(&mut self, bio: Bio) -> Result<Completion, Error> {
        self.blocking(bio)
    }

    fn take_bounce(&mut self, len: usize) -> Buf {
        match self.bounce.take() {
            Some(b) if b.len() == len => b,
            _ => Buf::new(len),
        }
    }

    fn blocking(&mut self, bio: Bio) -> Result<Completion, Error> {
        self.submit_inner(bio, 0, ORIGIN_BLOCKING, false).map_err(|r| Error::Submit(r.error))?;
        let mut scratch = Vec::new();
        loop {
            let n = self.reap_ring(&mut |c| scratch.push(c), usize::MAX);
            self.backlog.extend(scratch.drain(..n));
            if let Some(done) = self.blocking_done.take() {
                self.in_flight -= 1;
                return Ok(done);
            }
            self.sleep_for_completions(None);
        }
    }
}

fn status_result(status: Status) -> Result<(), Error> {
    if status.is_ok() {
        Ok(())
    } else {
        Err(Error::Status(status))
    }
}
