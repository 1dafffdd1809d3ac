//! Blocking helpers over a client: `read_at`, `write_at` and
//! `submit_and_wait` submit one bio and wait for it, while the client's
//! other I/O keeps flowing (its completions are kept for later `do_io`s).
//!
//! Relies on: the client's submission (submit.rs) and reaping (reap.rs).

use crate::buf::{BioVec, Buf};
use crate::error::Error;
use crate::request::{Bio, ORIGIN_BLOCKING};
use crate::status::Status;

use super::{Client, Completion};

impl Client {
    /// Reads `buf.len()` bytes at `offset`, waiting for the result. Other
    /// I/Os of this client keep flowing and are returned by later `do_io`s.
    ///
    /// ```
    /// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
    /// # ram::register();
    /// use mqblk::{Bio, Buf, Device};
    ///
    /// let dev = Device::open("ram:size=64,irqmode=0,memory_backed=1")?;
    /// let mut client = dev.client();
    /// client.submit(Bio::write(1 << 20, Buf::from_slice(&[5; 512])), 9)?;
    /// client.write_at(&[3; 1024], 0)?;
    /// let mut back = [0; 1024];
    /// client.read_at(&mut back, 0)?;
    /// assert_eq!(back, [3; 1024]);
    ///
    /// // The asynchronous write's completion waits for the next do_io.
    /// let mut done = Vec::new();
    /// client.do_io(&mut done, 1, 1, None)?;
    /// assert_eq!(done[0].user_data, 9);
    /// // A refused read is an error.
    /// assert!(client.read_at(&mut back[..100], 0).is_err(), "not a whole block");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read_at(&mut self, buf: &mut [u8], offset: u64) -> Result<(), Error> {
        let bounce = self.take_bounce(buf.len());
        let done = self.blocking(Bio::read(offset, bounce))?;
        let data = done.segs.into_buf().expect("read completion carries its buffer");
        if done.status.is_ok() {
            buf.copy_from_slice(&data);
        }
        self.bounce = Some(data);
        status_result(done.status)
    }

    /// Writes `buf` at `offset`, waiting for the result (example:
    /// [`Client::read_at`]).
    pub fn write_at(&mut self, buf: &[u8], offset: u64) -> Result<(), Error> {
        let mut bounce = self.take_bounce(buf.len());
        bounce.copy_from_slice(buf);
        let done = self.blocking(Bio::write(offset, bounce))?;
        self.bounce = done.segs.into_buf().ok();
        status_result(done.status)
    }

    /// Submits any bio and waits for it (flush, discard, write zeroes ...);
    /// returns the bio's segments. A failed I/O is `Error::Status`.
    ///
    /// ```
    /// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
    /// # ram::register();
    /// use mqblk::{Bio, Buf, Device};
    ///
    /// let dev = Device::open("ram:size=64,irqmode=0,memory_backed=1,discard=1")?;
    /// let mut client = dev.client();
    /// let segs = client.submit_and_wait(Bio::write(0, Buf::from_slice(&[9; 4096])))?;
    /// assert_eq!(segs.len_bytes(), 4096, "the buffer comes back");
    /// assert!(client.submit_and_wait(Bio::discard(0, 4096))?.is_empty());
    /// client.submit_and_wait(Bio::flush())?;
    /// let data = client.submit_and_wait(Bio::read(0, Buf::new(4096)))?.into_buf().unwrap();
    /// assert!(data.iter().all(|&b| b == 0), "discarded blocks read zeros here");
    ///
    /// // Any status, as a completion.
    /// let done = client.submit_and_wait_completion(Bio::write_zeroes(0, 8192))?;
    /// assert!(done.status.is_ok() && done.segs.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn submit_and_wait(&mut self, bio: Bio) -> Result<BioVec, Error> {
        let done = self.blocking(bio)?;
        status_result(done.status)?;
        Ok(done.segs)
    }

    /// Submits any bio and waits for its completion, whatever its status
    /// (zone appends: the completion carries `append_offset`; examples:
    /// [`Client::submit_and_wait`],
    /// [`Rq::set_append_sector`](crate::driver::Rq::set_append_sector)).
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
