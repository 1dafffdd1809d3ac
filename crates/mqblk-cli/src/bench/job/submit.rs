//! The submission side of the job loop (fio's `do_io` filling the
//! queue): chunks of I/Os under a plug, each I/O's direction, size and
//! offset (the pattern, a trimwrite's, or a zone's: zbd.rs), its bio and
//! buffer, and its slot; job/complete.rs takes each back.

use mqblk::clock::Clock;
use mqblk::{Bio, Client, ReqFlags};

use super::super::iolog::IoAction;
use super::super::stats::Dir;
use super::super::trim::Trims;
use super::super::zbd::{ZbdJob, ZoneWrite};
use super::{IoState, JobLoop, Progress, Slot, AIO_PLUG_THRESHOLD};

impl<const TIMED: bool, const REPLAY: bool, const SHAPED: bool> JobLoop<'_, TIMED, REPLAY, SHAPED> {
    /// Fills the queue to `iodepth` in chunks of up to `batch` I/Os.
    #[inline(always)]
    pub(super) fn fill_queue(&self, client: &mut Client, io: &mut IoState, p: &mut Progress) -> Result<(), String> {
        loop {
            // Every I/O in flight holds a slot: the free ones are the room
            // left below iodepth.
            debug_assert_eq!(io.free.len(), self.depth - client.in_flight());
            let ios_left = self.io_limit_count - p.issued_ios;
            let mut chunk = self.batch.min(io.free.len()).min(usize::try_from(ios_left).unwrap_or(usize::MAX));
            if let (true, Some(lt)) = (SHAPED, io.lat_target.as_ref()) {
                chunk = chunk.min(lt.qd.saturating_sub(client.in_flight())); // the depth searched
            }
            if chunk == 0 || self.submit_chunk(client, io, p, chunk)? < chunk {
                return Ok(());
            }
            if SHAPED && (p.think_due || p.paced.is_some()) {
                return Ok(()); // a stall first (run's `stall`)
            }
        }
    }

    /// One chunk of `chunk` I/Os (an io_submit call; fewer if the job's
    /// byte limit comes first): under one plug, each I/O under its own
    /// inner plug when `plug_per_io` (the kernel's direct-I/O path).
    /// Returns how many I/Os it submitted.
    #[inline(always)]
    fn submit_chunk(
        &self,
        client: &mut Client,
        io: &mut IoState,
        p: &mut Progress,
        chunk: usize,
    ) -> Result<usize, String> {
        // Like io_submit and io_uring, plug only a chunk of more than
        // AIO_PLUG_THRESHOLD I/Os: a plug cannot help one or two. Its
        // nr_ios hint is what the chunk will submit (io_submit passes its
        // own count), so no tags are batched that it cannot use.
        let plugged = self.opts.plug && chunk > AIO_PLUG_THRESHOLD;
        let mut outer;
        let c: &mut Client = if plugged {
            outer = client.plug_nr_ios(chunk as u32);
            &mut outer
        } else {
            client
        };
        let mut prev: Option<u32> = None;
        let mut in_chunk = 0;
        while in_chunk < chunk && p.issued_bytes < self.io_limit_bytes {
            let idx = io.free.pop().expect("a free slot per I/O below iodepth");
            if REPLAY {
                if !self.submit_replayed(c, idx, prev, plugged, io, p)? {
                    io.free.push(idx); // the trace is over: the slot stays free
                    break;
                }
            } else if !self.submit_one(c, idx, prev, plugged, io, p)? {
                io.free.push(idx); // held back by the job's rate
                break;
            }
            prev = Some(idx);
            in_chunk += 1;
            if SHAPED && p.think_due {
                break;
            }
        }
        if in_chunk > 0 && TIMED {
            close_slat(&self.clock, &mut io.slots, prev);
        }
        Ok(in_chunk)
    }

    /// Issues the pattern's next I/O in slot `idx`; false if the job's
    /// rate holds it back (`SHAPED` only).
    #[inline(always)]
    pub(super) fn submit_one(
        &self,
        c: &mut Client,
        idx: u32,
        prev: Option<u32>,
        plugged: bool,
        io: &mut IoState,
        p: &mut Progress,
    ) -> Result<bool, String> {
        let dir = if SHAPED {
            match self.paced_direction(io, p) {
                Some(d) => d,
                None => return Ok(false),
            }
        } else {
            Dir::of_write(p.pattern.next_is_write())
        };
        // A job of one block size per direction (the common case) reads it
        // from an array; trims have one size (reads' and writes' may vary).
        let bs = if self.sizes_vary && dir != Dir::Trim {
            p.pattern.next_len(dir == Dir::Write)
        } else {
            self.bs[dir as usize]
        };
        let Some((offset, bs)) = self.next_offset(c, dir, bs, io, p)? else {
            return Ok(false); // no zone to write yet, or none to read
        };
        let bio = self.prep_bio(idx, dir, (offset, bs), io);
        let action = match dir {
            Dir::Read => IoAction::Read,
            Dir::Write => IoAction::Write,
            Dir::Trim => IoAction::Trim,
        };

        self.issue(c, (idx, prev, plugged), bio, (dir, action, offset, bs), io)?;
        p.issued_bytes += bs;
        p.issued_ios += 1;
        if SHAPED {
            self.shaped_issued(dir, bs, io, p);
        }
        Ok(true)
    }

    /// Submits `bio` (`action` in direction `dir`, of `len_bytes` at
    /// `offset`) in slot `idx`
    /// (`plugged`: under the chunk's plug); its clock read closes the
    /// previous I/O's (`prev`) submission latency.
    #[inline(always)]
    pub(super) fn issue(
        &self,
        c: &mut Client,
        (idx, prev, plugged): (u32, Option<u32>, bool),
        bio: Bio,
        (dir, action, offset, len_bytes): (Dir, IoAction, u64, u64),
        io: &mut IoState,
    ) -> Result<(), String> {
        let t = if TIMED { self.clock.now_ns() } else { 0 };
        if let Some(prev) = prev {
            io.slots[prev as usize].slat_ns = t - io.slots[prev as usize].issue_ns;
        }
        let ioprio = bio.ioprio;
        io.slots[idx as usize] = Slot { issue_ns: t, slat_ns: 0, offset, len_bytes: len_bytes as u32, dir, ioprio };
        if let (true, Some(log)) = (SHAPED, io.iolog.as_mut()) {
            log.record(action, offset, len_bytes);
        }
        let submitted = if plugged && self.opts.plug_per_io {
            c.plug().submit(bio, u64::from(idx))
        } else {
            c.submit(bio, u64::from(idx))
        };
        if let Err(rejected) = submitted {
            return Err(format!("job '{}': submit failed: {}", self.opts.name, rejected.error));
        }
        Ok(())
    }

    /// The next I/O's offset and length: a trimwrite's (job/shaped.rs);
    /// for `zonemode=zbd` a zone's write pointer (resetting the zone first
    /// if due) or a read below one (zbd.rs); else the job's pattern.
    /// None: no zone may be written yet, or no zone holds data to read
    /// (the job's source is done).
    #[inline(always)]
    fn next_offset(
        &self,
        c: &mut Client,
        dir: Dir,
        bs: u64,
        io: &mut IoState,
        p: &mut Progress,
    ) -> Result<Option<(u64, u64)>, String> {
        if SHAPED && self.trims == Trims::ThenWrite {
            return Ok(Some((self.trimwrite_offset(dir, bs, p), bs)));
        }
        let is_write = dir == Dir::Write;
        match io.zbd.as_mut() {
            Some(zbd) if SHAPED && dir == Dir::Trim => Ok(self.next_zone_reset(zbd, bs, p)),
            Some(zbd) if SHAPED => self.next_zoned(c, zbd, is_write, bs, p),
            _ => Ok(Some((p.pattern.next_offset(bs, is_write), bs))),
        }
    }

    /// `next_offset` of a `zonemode=zbd` job's trim: a zone to reset.
    /// None when none can be now: a time-based job tries again, another
    /// ends (fio's end of file).
    #[cold]
    fn next_zone_reset(&self, zbd: &mut ZbdJob, bs: u64, p: &mut Progress) -> Option<(u64, u64)> {
        let offset = p.pattern.next_offset(bs, false);
        let zone = zbd.next_trim(offset);
        if zone.is_none() {
            if self.opts.time_based {
                std::thread::yield_now();
            } else {
                p.source_done = true;
            }
        }
        zone.map(|start| (start, bs))
    }

    /// `next_offset` of a `zonemode=zbd` job.
    #[cold]
    fn next_zoned(
        &self,
        c: &mut Client,
        zbd: &mut ZbdJob,
        is_write: bool,
        bs: u64,
        p: &mut Progress,
    ) -> Result<Option<(u64, u64)>, String> {
        if !is_write {
            let offset = p.pattern.next_offset(bs, false);
            let adjusted = zbd.adjust_read(offset, bs);
            match adjusted {
                Some((offset, len)) if !p.pattern.random => p.pattern.continue_after(offset, len),
                Some(_) => {}
                None => p.source_done = true,
            }
            return Ok(adjusted.filter(|&(_, len)| len > 0));
        }
        match zbd.next_write(&mut p.pattern, bs) {
            ZoneWrite::Wait => {
                std::thread::yield_now();
                Ok(None)
            }
            ZoneWrite::At { offset, len, reset } => {
                if let Some(zone) = reset {
                    let reset = Bio::zone_mgmt(mqblk::zoned::ZoneMgmt::Reset, zone);
                    c.submit_and_wait(reset).map_err(|e| format!("job '{}': zone reset: {e}", self.opts.name))?;
                }
                Ok(Some((offset, len)))
            }
        }
    }

    /// The bio for slot `idx` (`bs` bytes at `offset`), with its buffer
    /// (a write's filled for verify); a trim's is a discard, without one.
    #[inline(always)]
    fn prep_bio(&self, idx: u32, dir: Dir, (offset, len_bytes): (u64, u64), io: &mut IoState) -> Bio {
        let bio = match dir {
            Dir::Write => {
                let mut buf = io.write_bufs[idx as usize].take().expect("slot owns its write buffer");
                if self.sizes_vary {
                    buf.set_len(len_bytes as usize);
                }
                if SHAPED {
                    if let Some(v) = io.verifier.as_mut() {
                        v.fill(&mut buf, offset, idx as usize);
                    } else if let Some(f) = io.filler.as_mut() {
                        f.fill(&mut buf, offset);
                    }
                }
                let fua = SHAPED && io.syncer.as_mut().is_some_and(|s| s.next_write());
                Bio::write(offset, buf).with_flags(if fua {
                    self.write_flags | ReqFlags::FUA
                } else {
                    self.write_flags
                })
            }
            Dir::Read => {
                let mut buf = io.read_bufs[idx as usize].take().expect("slot owns its read buffer");
                if self.sizes_vary {
                    buf.set_len(len_bytes as usize);
                }
                Bio::read(offset, buf).with_flags(self.hipri)
            }
            // zonemode=zbd: a trim is a zone reset (zbd.rs).
            Dir::Trim if SHAPED && io.zbd.is_some() => Bio::zone_mgmt(mqblk::zoned::ZoneMgmt::Reset, offset),
            Dir::Trim => Bio::discard(offset, len_bytes),
        };
        match (SHAPED, io.cmdprio.as_mut()) {
            (true, Some(c)) => {
                let prio = c.pick(dir == Dir::Write, bio.len, self.opts.ioprio);
                bio.with_ioprio(prio)
            }
            _ => bio.with_ioprio(self.opts.ioprio),
        }
    }
}

/// Ends the open chunk: the last I/O's submission latency runs to now.
#[inline]
fn close_slat(clock: &Clock, slots: &mut [Slot], last: Option<u32>) {
    if let Some(p) = last {
        let t = clock.now_ns();
        slots[p as usize].slat_ns = t - slots[p as usize].issue_ns;
    }
}
