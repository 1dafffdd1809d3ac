//! One ublk queue: a thread with its own io_uring on /dev/ublkcN and its
//! own mqblk `Client`, so each kernel hardware queue of /dev/ublkbN feeds
//! mqblk's block layer (plug, scheduler, tags) as one submitter.
//!
//! The protocol per tag (ublk's classic mode, data through the server's
//! buffers): FETCH_REQ gives the kernel the tag's buffer; its CQE (result
//! 0) means a request is described in the tag's `IoDesc` (the mmapped
//! area), with a write's data already copied into the buffer. We submit
//! the matching bio to mqblk; when it completes, COMMIT_AND_FETCH_REQ
//! hands back the result (a read's data is copied out of the buffer by the
//! kernel during that command) and fetches the tag's next request. A CQE of
//! UBLK_IO_RES_ABORT (-ENODEV) ends the tag: STOP_DEV or DEL_DEV aborts
//! every pending fetch. The thread ends once every tag has ended and
//! nothing is in flight in mqblk.
//!
//! Zoned devices need user copy (UBLK_F_USER_COPY): the kernel moves no
//! data itself and FETCH/COMMIT carry no buffer address; the thread reads a
//! write's data from /dev/ublkcN (pread at `uapi::user_copy_offset`) before
//! submitting its bio, and writes a read's data there before committing.
//! Report zones is no bio: the thread asks the device and writes the
//! `struct blk_zone` entries the same way. A zone append's commit returns
//! the sector the data went to (`zone_append_lba`).
//!
//! Zero copy (UBLK_F_SUPPORT_ZERO_COPY, on a device whose driver takes
//! kernel buffers): FETCH/COMMIT carry no address, as with user copy, and
//! a read or write becomes a bio over the request's own pages
//! (`Bio::read_kernel`, `KernelBuf`): the file driver registers them in
//! its ring and reads or writes the file with them, so no byte passes
//! through the server. Should the registration fail (the completion says
//! `DevResource`), the request is served again by user copy through the
//! tag's buffer, made on the first such fallback and kept. With auto
//! registration (UBLK_F_AUTO_BUF_REG) the kernel registers the pages in
//! this queue's ring before handing the request over, and the thread reads
//! or writes the device's backing file itself, one SQE on this ring
//! (auto_reg.rs); a request the kernel could not register takes the
//! explicit path above.
//!
//! Completions of mqblk come back through the client's completion eventfd,
//! polled on the same ring (IORING_OP_POLL_ADD), so the thread sleeps in
//! one place: io_uring_enter. A device whose submitters reap their own
//! completions (file `reap=client`) has no completion thread: the ring
//! also polls the client's queue (`Client::poll_fd`, the file ring's fd)
//! and the thread reaps it, one wakeup a completion fewer. Every command of a queue must come from this
//! one thread (the kernel binds a queue to the task that fetched it).
//!
//! Nothing on the I/O path allocates: one buffer per tag of the largest
//! request (`Buf::set_len` shapes it to each request), and the CQE and
//! completion vectors are sized at start-up.
//!
//! Relies on: uapi.rs (structs, command numbers); mqblk's Client (submit,
//! plug, do_io, completion_fd) and Buf; desc.rs (the descriptor area),
//! ring.rs (the io_uring and the commands queued on it), bio.rs (the bio
//! of a request), copy.rs (user copy and zero copy), auto_reg.rs (auto
//! registration) and zones.rs (report zones).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use io_uring::{squeue, IoUring};
use mqblk::{Buf, Client, Completion, Device, KernelBuf, Op, Status, SECTOR_SHIFT};

use crate::error::Error;
use crate::uapi;

mod auto_reg;
mod bio;
mod copy;
mod desc;
mod ring;
mod zones;

use auto_reg::{table_entries, AutoReg, TRANSFER};
use bio::bio_for;
use copy::{bio_with_data, copy_out, zero_copy_bio};
use desc::DescMap;
use ring::build_ring;

/// user_data of the eventfd poll (tags are below 4096).
const EVENTFD_TOKEN: u64 = u64::MAX;
/// user_data of the poll of the client's queue (`Client::poll_fd`).
const POLL_FD_TOKEN: u64 = u64::MAX - 1;

/// What one queue thread needs.
pub(crate) struct QueueConfig {
    pub q_id: u16,
    pub depth: u16,
    /// Bytes of each tag's buffer (the device's max_io_buf_bytes).
    pub buf_bytes: usize,
    /// UBLK_F_USER_COPY: data moves by pread/pwrite on /dev/ublkcN.
    pub user_copy: bool,
    /// UBLK_F_SUPPORT_ZERO_COPY: reads and writes are bios over the
    /// request's pages (user copy is their fallback).
    pub zero_copy: bool,
    /// UBLK_F_AUTO_BUF_REG: the kernel registers each request's pages in
    /// this queue's ring; reads and writes go to the device's backing
    /// file on it (auto_reg.rs).
    pub auto_buf_reg: bool,
    /// /dev/ublkcN, opened once by the server (the kernel allows one open).
    pub cdev: Arc<File>,
    pub device: Device,
    /// The CPUs the queue's thread runs on (empty: unpinned; affinity.rs).
    pub cpus: Vec<usize>,
}

/// Counts of one queue's life, for the server's summary.
#[derive(Debug, Default, Clone, Copy)]
pub struct QueueStats {
    pub requests: u64,
    pub errors: u64,
    /// Zone appends done (each returned its sector to the kernel).
    pub zone_appends: u64,
    /// Reads and writes served with the request's own pages.
    pub zero_copy_ios: u64,
    /// Zero-copy requests whose registration failed, served by copying.
    pub copy_fallbacks: u64,
    /// Of the zero-copy ones, those whose pages the kernel registered in
    /// the queue's ring (auto registration).
    pub auto_registered_ios: u64,
    /// Requests the kernel could not auto-register, served by explicit
    /// registration instead.
    pub auto_fallbacks: u64,
}

/// Where a tag is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TagState {
    /// Its fetch (or commit-and-fetch) is with the kernel.
    Fetching,
    /// Its request is in mqblk; `result_bytes` is what a success returns.
    Serving { op: Op, result_bytes: i32 },
    /// Aborted or failed: no command of it is pending.
    Ended,
}

struct Tag {
    /// The tag's buffer: here, or moved into its bio while serving.
    buf: Option<Buf>,
    /// The buffer's address as the kernel was told (0 with user copy).
    addr: u64,
    state: TagState,
}

pub(crate) struct Queue {
    q_id: u16,
    depth: u16,
    ring: IoUring<squeue::Entry>,
    cdev: Arc<File>,
    descs: DescMap,
    user_copy: bool,
    zero_copy: bool,
    /// Bytes of a tag's buffer, made when first needed under zero copy.
    buf_bytes: usize,
    /// For report zones, which is no bio.
    device: Device,
    client: Client,
    tags: Vec<Tag>,
    /// CQEs taken from the ring, processed after (user_data, result).
    cqes: Vec<(u64, i32)>,
    /// Requests to fail, found while submitting (tag, -errno).
    refused: Vec<(u16, i32)>,
    /// Report-zones requests, answered after the plug.
    reports: Vec<u16>,
    done: Vec<Completion>,
    completion_fd: RawFd,
    /// The queue the client polls itself (file `reap=client`): readable
    /// when it has completions, which this thread then reaps (`do_io`),
    /// with no completion thread between the file's ring and this one.
    poll_fd: Option<RawFd>,
    /// Tags not ended.
    live: usize,
    stats: QueueStats,
    /// Auto registration, if the device was added with it.
    auto: Option<AutoReg>,
    /// Found while taking CQEs, served after the plug: auto-registered
    /// requests to start, and transfers' CQEs (tag, result).
    auto_starts: Vec<u16>,
    transfers: Vec<(u16, i32)>,
}

impl Queue {
    /// Maps the descriptors, makes the ring, the client and the buffers.
    pub(crate) fn new(cfg: QueueConfig) -> Result<Self, Error> {
        let QueueConfig { q_id, depth, buf_bytes, user_copy, zero_copy, auto_buf_reg, cdev, device, .. } = cfg;
        let descs = DescMap::map(&cdev, q_id, depth)?;
        let entries = (u32::from(depth) + 1).next_power_of_two();
        let ring = build_ring(entries).map_err(|e| Error::Queue { q_id, what: "io_uring_setup", source: e })?;
        let auto = if auto_buf_reg {
            let fd = device.backing_fd().ok_or_else(|| {
                Error::BadOption(
                    "auto buffer registration needs a device whose data is one file (a file: device)".into(),
                )
            })?;
            let table = AutoReg::new(&ring, fd, depth, table_entries(depth));
            Some(table.map_err(|e| Error::Queue { q_id, what: "registering a sparse buffer table", source: e })?)
        } else {
            None
        };
        let mut client = device.client_with_capacity(usize::from(depth));
        let poll_fd = client.poll_fd();
        let completion_fd = client.completion_fd().map_err(Error::Device)?;
        let tags = (0..depth)
            .map(|_| {
                // Zero copy needs a buffer only for a fallback (made then).
                let buf = (!zero_copy).then(|| Buf::new(buf_bytes));
                // User copy requires FETCH and COMMIT to carry no address.
                let addr = match &buf {
                    Some(buf) if !user_copy => buf.as_ptr() as u64,
                    _ => 0,
                };
                Tag { buf, addr, state: TagState::Fetching }
            })
            .collect();
        let capacity = usize::from(depth) * 2 + 2;
        Ok(Self {
            q_id,
            depth,
            ring,
            cdev,
            descs,
            user_copy,
            zero_copy,
            buf_bytes,
            device,
            client,
            tags,
            cqes: Vec::with_capacity(capacity),
            refused: Vec::with_capacity(usize::from(depth)),
            reports: Vec::with_capacity(usize::from(depth)),
            done: Vec::with_capacity(usize::from(depth)),
            completion_fd,
            poll_fd,
            live: usize::from(depth),
            stats: QueueStats::default(),
            auto,
            auto_starts: Vec::with_capacity(usize::from(depth)),
            transfers: Vec::with_capacity(usize::from(depth)),
        })
    }

    /// Submits FETCH_REQ for every tag and the eventfd poll. Errors the
    /// kernel gives at once (a bad queue, a bad buffer) are reported here,
    /// before the server waits in START_DEV for this queue.
    pub(crate) fn fetch_all(&mut self) -> Result<(), Error> {
        for tag in 0..self.depth {
            let addr = self.tags[usize::from(tag)].addr;
            self.push_io_cmd(uapi::UBLK_U_IO_FETCH_REQ, tag, 0, addr)?;
        }
        self.arm_eventfd()?;
        self.arm_poll_fd()?;
        self.ring.submit().map_err(|e| Error::Queue { q_id: self.q_id, what: "submitting FETCH_REQ", source: e })?;
        if let Some(cqe) = self.ring.completion().next() {
            let source = io::Error::from_raw_os_error(-cqe.result());
            return Err(Error::Queue { q_id: self.q_id, what: "FETCH_REQ refused", source });
        }
        Ok(())
    }

    /// Serves requests until every tag was aborted and nothing is in
    /// flight.
    pub(crate) fn serve(mut self) -> Result<QueueStats, Error> {
        while self.live > 0 || self.client.in_flight() > 0 {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                // A signal, or a full CQ ring: reap and go on.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EBUSY)) => {}
                Err(e) => return Err(Error::Queue { q_id: self.q_id, what: "io_uring_enter", source: e }),
            }
            // Awake, and reaping before the next sleep: completions that
            // come inline with our submissions need no eventfd wakeup.
            self.client.disarm_completion_fd();
            self.cqes.clear();
            self.cqes.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
            self.handle_cqes()?;
            self.reap_and_commit()?;
        }
        Ok(self.stats)
    }

    /// Turns the CQEs just taken into bios, submitted under one plug;
    /// requests that cannot be served are committed with an error.
    fn handle_cqes(&mut self) -> Result<(), Error> {
        let auto = self.auto.is_some();
        let Self {
            cqes,
            client,
            tags,
            descs,
            live,
            stats,
            q_id,
            refused,
            reports,
            user_copy,
            zero_copy,
            cdev,
            auto_starts,
            transfers,
            ..
        } = self;
        let (mut eventfd_fired, mut poll_fd_fired) = (false, false);
        let nr_ios = u32::try_from(cqes.len()).unwrap_or(u32::MAX).max(1);
        client.with_plug(nr_ios, |client| {
            for &(user_data, res) in cqes.iter() {
                if user_data == EVENTFD_TOKEN {
                    eventfd_fired = true;
                    continue;
                }
                if user_data == POLL_FD_TOKEN {
                    poll_fd_fired = true;
                    continue;
                }
                if user_data & TRANSFER != 0 {
                    transfers.push(((user_data & !TRANSFER) as u16, res));
                    continue;
                }
                let Some(tag) = tags.get_mut(user_data as usize) else {
                    log::error!("queue {q_id}: a CQE for tag {user_data}, beyond the queue");
                    continue;
                };
                if tag.state != TagState::Fetching {
                    log::error!("queue {q_id}: a CQE for tag {user_data} in state {:?}", tag.state);
                    continue;
                }
                let tag_id = user_data as u16;
                if res != uapi::UBLK_IO_RES_OK {
                    if res != uapi::UBLK_IO_RES_ABORT {
                        let e = io::Error::from_raw_os_error(-res);
                        log::error!("queue {q_id}: tag {tag_id}: command failed: {e}");
                    }
                    tag.state = TagState::Ended;
                    *live -= 1;
                    continue;
                }
                stats.requests += 1;
                let desc = descs.get(tag_id);
                if desc.op() == uapi::UBLK_IO_OP_REPORT_ZONES {
                    reports.push(tag_id);
                    continue;
                }
                if auto && matches!(desc.op(), uapi::UBLK_IO_OP_READ | uapi::UBLK_IO_OP_WRITE) {
                    if desc.flags() & uapi::UBLK_IO_F_NEED_REG_BUF == 0 && desc.nr_sectors > 0 {
                        auto_starts.push(tag_id);
                        continue;
                    }
                    // The kernel could not register the pages: the
                    // explicit path below registers them in the file
                    // driver's ring.
                    stats.auto_fallbacks += 1;
                }
                let zero_copied = if *zero_copy {
                    zero_copy_bio(&desc, KernelBuf { fd: cdev.as_raw_fd(), q_id: *q_id, tag: tag_id })
                } else {
                    None
                };
                let parsed = match zero_copied {
                    Some(parsed) => parsed,
                    None => bio_with_data(&desc, tag, *user_copy, cdev, *q_id, tag_id),
                };
                let (bio, result_bytes) = match parsed {
                    Ok(parsed) => parsed,
                    Err(errno) => {
                        log::debug!(
                            "queue {q_id}: tag {tag_id}: op {} of {} sectors at {} refused: {}",
                            desc.op(),
                            desc.nr_sectors,
                            desc.start_sector,
                            io::Error::from_raw_os_error(errno)
                        );
                        refused.push((tag_id, -errno));
                        continue;
                    }
                };
                tag.state = TagState::Serving { op: bio.op, result_bytes };
                if let Err(rejected) = client.submit(bio, user_data) {
                    let rejected = *rejected;
                    log::debug!("queue {q_id}: tag {tag_id}: refused by the device: {}", rejected.error);
                    if let Ok(buf) = rejected.bio.segs.into_buf() {
                        tag.buf = Some(buf);
                    }
                    tag.state = TagState::Fetching;
                    refused.push((tag_id, -rejected.error.errno()));
                }
            }
        });
        self.commit_refused_and_reports()?;
        self.serve_auto_registered()?;
        if eventfd_fired {
            self.drain_eventfd();
            self.arm_eventfd()?;
        }
        if poll_fd_fired {
            // Submitted with the next io_uring_enter, after `reap_and_commit`
            // emptied the queue: it fires again only for new completions.
            self.arm_poll_fd()?;
        }
        Ok(())
    }

    /// Commits what `handle_cqes` answers itself: the errors of refused
    /// requests, and zone reports (no bio).
    fn commit_refused_and_reports(&mut self) -> Result<(), Error> {
        // Refused requests: commit their errors (the commit fetches again,
        // so the tag stays Fetching).
        while let Some((tag, result)) = self.refused.pop() {
            self.stats.errors += 1;
            self.push_commit(tag, result, 0)?;
        }
        while let Some(tag) = self.reports.pop() {
            let result = self.report_zones(tag);
            if result < 0 {
                self.stats.errors += 1;
            }
            self.push_commit(tag, result, 0)?;
        }
        Ok(())
    }

    /// Reaps mqblk's completions and commits each (COMMIT_AND_FETCH_REQ);
    /// the commits go to the kernel with the next io_uring_enter.
    fn reap_and_commit(&mut self) -> Result<(), Error> {
        let depth = usize::from(self.depth);
        loop {
            self.done.clear();
            let got = self.client.do_io(&mut self.done, 0, depth, None).map_err(Error::Device)?;
            for i in 0..got {
                let c = &mut self.done[i];
                let tag_id = c.user_data as u16;
                let zero_copied = c.segs.kernel_buf().is_some();
                let buf = c.segs.take().into_buf().ok();
                let (status, append_offset) = (c.status, c.append_offset);
                if zero_copied && status == Status::DevResource {
                    self.copy_instead(tag_id)?;
                    continue;
                }
                self.stats.zero_copy_ios += u64::from(zero_copied);
                let Some(tag) = self.tags.get_mut(usize::from(tag_id)) else { continue };
                let TagState::Serving { op, result_bytes } = tag.state else {
                    log::error!("queue {}: a completion for tag {tag_id} in state {:?}", self.q_id, tag.state);
                    continue;
                };
                if let Some(buf) = buf {
                    // The same buffer comes back; should a driver ever hand
                    // another one, the commit tells the kernel its address.
                    if !self.user_copy {
                        tag.addr = buf.as_ptr() as u64;
                    }
                    tag.buf = Some(buf);
                }
                tag.state = TagState::Fetching;
                let mut result = if status.is_ok() { result_bytes } else { -status.errno() };
                if result >= 0 && self.user_copy && op == Op::Read && !zero_copied {
                    result = copy_out(&self.cdev, self.q_id, tag_id, tag.buf.as_deref().unwrap_or(&[]))
                        .map_or_else(|errno| -errno, |()| result);
                }
                // A zone append's commit names the sector its data went to.
                let mut zone_append_lba = 0;
                if result >= 0 && op == Op::ZoneAppend {
                    match append_offset {
                        Some(offset) => {
                            zone_append_lba = offset >> SECTOR_SHIFT;
                            self.stats.zone_appends += 1;
                        }
                        None => result = -libc::EIO,
                    }
                }
                if result < 0 {
                    self.stats.errors += 1;
                }
                self.push_commit(tag_id, result, zone_append_lba)?;
            }
            if got < depth {
                return Ok(());
            }
        }
    }
}
