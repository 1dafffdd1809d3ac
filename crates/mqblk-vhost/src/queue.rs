//! One virtqueue served through one mqblk `Client`: pops descriptor chains,
//! parses them (request.rs), submits a bio each, and puts each completion
//! in the used ring.
//!
//! A queue runs on its own worker thread of vhost-user-backend (one thread
//! per virtqueue), woken by the guest's kick or by the client's completion
//! eventfd, both in that thread's epoll; it sleeps nowhere else. Each
//! wakeup runs `run`: pop and submit under one plug until the avail ring is
//! empty or every slot is in flight, reap what completed, and repeat while
//! either made progress; the guest is signalled once at the end if the
//! used ring's event index asks for it (VIRTIO_RING_F_EVENT_IDX).
//!
//! Answers go to the used ring in avail order (in_order.rs): a request
//! that completes before an earlier one waits for it. A server killed
//! mid-I/O then leaves a used index from which QEMU's reconnect restarts
//! the next server at exactly the requests that were in flight.
//!
//! Reads and writes move no data through the server: each data segment of
//! the request becomes one bio whose `Buf` borrows the guest's memory of
//! that segment (`Buf::borrowed` over vm-memory's host address), and the
//! request's bios, submitted under the client's plug, merge back into one
//! mqblk request (one readv/writev for the file driver). A bio completes on
//! its own; the virtio request is answered (status byte, used ring) when
//! the last of its bios completes, with the first error among them. The
//! slot holds the guest memory's `Arc` until then, so a new memory table
//! (SET_MEM_TABLE) cannot unmap what a bio still points at.
//!
//! A request whose segments cannot be lent takes the copy path: a segment
//! that is not a whole number of logical blocks, one that crosses from one
//! memory region into the next, or more segments than the client has room
//! for. Its data is copied: a write's segments into a `Buf` before
//! submission, a read's `Buf` into its segments at completion. Buffers and
//! the slots' vectors are kept for reuse, so a steady load allocates
//! nothing after warm-up.
//!
//! Relies on: request.rs (parsing, segment copies), config.rs
//! (`DiskLimits`), in_order.rs; mqblk's Client (submit, plug, do_io, completion_fd) and
//! `Buf::borrowed`; vhost-user-backend's `VringMutex`, virtio-queue's
//! `Queue` and vm-memory's host addresses.

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;

use mqblk::{Bio, Buf, Client, Completion, Status};
use vhost_user_backend::{VringMutex, VringT};
use virtio_bindings::virtio_blk::{VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_OK, VIRTIO_BLK_S_UNSUPP};
use virtio_queue::QueueT;
use vm_memory::{Bytes, GuestAddress, GuestMemoryAtomic, GuestMemoryBackend, GuestMemoryMmap};

use crate::config::DiskLimits;
use crate::in_order::{self, InOrderUsed};
use crate::request::{self, Kind, Request, Segment, ID_BYTES};

/// The guest memory type served.
pub type Mem = GuestMemoryMmap<()>;
/// The vring type served.
pub type Vring = VringMutex<GuestMemoryAtomic<Mem>>;

/// Counts of one queue's life.
#[derive(Debug, Default, Clone, Copy)]
pub struct QueueStats {
    pub requests: u64,
    /// Requests answered with IOERR or UNSUPP.
    pub errors: u64,
    /// Chains with no status byte, given back with nothing written.
    pub dropped: u64,
}

/// A request in flight: what its completion needs.
struct Slot {
    head: u16,
    /// The chain's position in the avail ring: its turn in the used ring.
    avail_pos: u16,
    status: GuestAddress,
    kind: Kind,
    /// The request's data segments in the guest (request::parse).
    data: Vec<Segment>,
    /// Bios of the request submitted and not yet completed: one per data
    /// segment when lent, one bounce bio on the copy path.
    bios_left: u32,
    /// The first error among its bios (VIRTIO_BLK_S_OK until one fails).
    code: u8,
    /// The guest memory its bios borrow (None on the copy path): kept
    /// mapped until the last bio completes.
    lent: Option<Arc<Mem>>,
}

impl Slot {
    fn new(seg_max: u32) -> Self {
        Self {
            head: 0,
            avail_pos: 0,
            status: GuestAddress(0),
            kind: Kind::Flush,
            data: Vec::with_capacity(seg_max as usize + 2),
            bios_left: 0,
            code: VIRTIO_BLK_S_OK as u8,
            lent: None,
        }
    }
}

pub struct VirtQueue {
    index: u16,
    client: Client,
    completion_fd: RawFd,
    disk: DiskLimits,
    id: [u8; ID_BYTES],
    slots: Vec<Slot>,
    free_slots: Vec<u16>,
    free_bufs: Vec<Buf>,
    done: Vec<Completion>,
    /// Bios prepared while the vring is locked, submitted after.
    pending: Vec<(u16, Bio)>,
    /// The requests (slots) those bios belong to: the plug's tag hint.
    pending_requests: u32,
    /// Bios the device refused at submission: (slot, status, buffer).
    rejected: Vec<(u16, Status, Option<Buf>)>,
    /// Answers waiting for their turn in the used ring.
    used: InOrderUsed,
    /// Whether the ring's next used position was read from the guest's
    /// used ring since the ring (re)started (`start_ring`).
    ring_started: bool,
    /// The vring, kept from the first event so `stop` can finish requests.
    vring: Option<Vring>,
    stats: QueueStats,
}

impl VirtQueue {
    /// A queue of `depth` requests in flight at most, over `client`.
    pub fn new(index: u16, mut client: Client, depth: u16, disk: DiskLimits, id: &str) -> Result<Self, mqblk::Error> {
        assert!(depth > 0, "a queue needs at least one slot");
        let completion_fd = client.completion_fd()?;
        let capacity = client.capacity();
        let mut id_bytes = [0u8; ID_BYTES];
        let n = id.len().min(ID_BYTES);
        id_bytes[..n].copy_from_slice(&id.as_bytes()[..n]);
        let slots = (0..depth).map(|_| Slot::new(disk.seg_max)).collect();
        Ok(Self {
            index,
            client,
            completion_fd,
            disk,
            id: id_bytes,
            slots,
            free_slots: (0..depth).rev().collect(),
            free_bufs: Vec::with_capacity(usize::from(depth)),
            done: Vec::with_capacity(usize::from(depth)),
            pending: Vec::with_capacity(capacity),
            pending_requests: 0,
            rejected: Vec::with_capacity(capacity),
            used: InOrderUsed::default(),
            ring_started: false,
            vring: None,
            stats: QueueStats::default(),
        })
    }

    /// The client's completion eventfd, for the worker's epoll.
    pub fn completion_fd(&self) -> RawFd {
        self.completion_fd
    }

    pub fn stats(&self) -> QueueStats {
        self.stats
    }

    pub fn in_flight(&self) -> usize {
        self.client.in_flight()
    }

    /// Empties the completion eventfd (level-triggered in epoll).
    pub fn drain_eventfd(&self) {
        let mut count: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from the client's eventfd,
        // which is non-blocking and lives as long as the client.
        let _ = unsafe { libc::read(self.completion_fd, std::ptr::addr_of_mut!(count).cast(), 8) };
    }

    /// Serves the queue until nothing more can be done now: the avail ring
    /// empty (or every slot in flight) and no completion waiting. `mem` is
    /// the guest memory now (the backend's `GuestMemoryAtomic` snapshot);
    /// requests whose bios borrow it keep its `Arc`.
    pub fn run(&mut self, vring: &Vring, mem: &Arc<Mem>) -> io::Result<()> {
        if self.vring.is_none() {
            self.vring = Some(vring.clone());
        }
        self.client.disarm_completion_fd();
        let mut used = 0;
        loop {
            let popped = self.pop_and_submit(vring, mem)?;
            let reaped = self.reap(mem, 0)?;
            let published = self.publish(vring)?;
            used += published;
            if popped == 0 && reaped == 0 && published == 0 {
                break;
            }
        }
        if used > 0 && vring.needs_notification().map_err(io::Error::other)? {
            vring.signal_used_queue()?;
        }
        Ok(())
    }

    /// Waits for every request in flight and puts it in the used ring (the
    /// vring is being stopped: GET_VRING_BASE), then signals the guest.
    pub fn finish_in_flight(&mut self, mem: &Mem) -> io::Result<()> {
        let Some(vring) = self.vring.clone() else { return Ok(()) };
        while self.client.in_flight() > 0 {
            self.reap(mem, 1)?;
        }
        self.publish(&vring)?;
        debug_assert_eq!(self.used.held(), 0, "every answer published once nothing is in flight");
        self.ring_started = false;
        vring.signal_used_queue()
    }

    /// Waits for every request in flight and drops the answers (the guest
    /// is gone). The guest memory the bios borrowed is let go only after
    /// the last of them completed.
    pub fn abandon_in_flight(&mut self) {
        self.client.drain();
        for slot in &mut self.slots {
            slot.bios_left = 0;
            slot.lent = None;
        }
        self.free_slots = (0..self.slots.len() as u16).rev().collect();
        self.used.clear();
        self.ring_started = false;
        self.vring = None;
    }

    /// Pops chains while slots are free and submits their bios under one
    /// plug; returns the chains popped. A broken ring is an error (see
    /// `pop`); the bios prepared before it are still submitted, so no slot
    /// is left holding an unsent request.
    fn pop_and_submit(&mut self, vring: &Vring, mem: &Arc<Mem>) -> io::Result<usize> {
        let popped = self.pop(vring, mem);
        self.submit_pending(mem);
        popped
    }

    /// Puts the answers whose turn has come in the used ring (in_order.rs);
    /// returns how many.
    fn publish(&mut self, vring: &Vring) -> io::Result<usize> {
        if self.used.held() == 0 {
            return Ok(0);
        }
        let mut state = vring.get_mut();
        self.used.publish(|head, used_len| state.add_used(head, used_len)).map_err(io::Error::other)
    }

    /// Pops chains while slots are free and the in-order window has room,
    /// parses each and prepares its bios (`start`); returns the chains
    /// popped.
    ///
    /// An avail index that moved while no chain can be read from the ring
    /// (more than a ring ahead of ours, or an avail ring partly outside
    /// guest memory), a head index past the table, or rings outside guest
    /// memory make the ring unusable: virtio-queue then pops nothing (or
    /// refuses the used entry), and the error returned here ends the
    /// queue's worker until the guest resets the device, as vhost does with
    /// a ring it cannot parse.
    fn pop(&mut self, vring: &Vring, mem: &Arc<Mem>) -> io::Result<usize> {
        let mut popped = 0;
        let mut state = vring.get_mut();
        // A completion event may come after the frontend stopped the ring
        // (GET_VRING_BASE): its rings must not be touched then.
        if !state.get_queue().ready() {
            return Ok(0);
        }
        if !self.ring_started {
            in_order::start_ring(self.index, state.get_queue_mut(), &**mem)?;
            self.ring_started = true;
        }
        self.used.sync(state.get_queue().size(), state.get_queue().next_used());
        // Whether the last re-enabling of notifications found the avail
        // index moved (chains published after the last pop found none).
        let mut avail_moved = false;
        loop {
            state.disable_notification().map_err(io::Error::other)?;
            let mut popped_now = 0;
            while let Some(&slot_id) = self.free_slots.last() {
                let pos = state.get_queue().next_avail();
                if !self.used.has_room(pos) {
                    break;
                }
                let Some(chain) = state.get_queue_mut().pop_descriptor_chain(&**mem) else { break };
                self.free_slots.pop();
                popped_now += 1;
                self.stats.requests += 1;
                let head = chain.head_index();
                let parsed = request::parse(chain, &**mem, &self.disk, &mut self.slots[usize::from(slot_id)].data);
                if let Some(used_len) = self.start(slot_id, head, pos, parsed, mem) {
                    self.free_slots.push(slot_id);
                    self.used.hold(pos, head, used_len);
                }
            }
            popped += popped_now;
            // The index moved, yet with slots free nothing could be popped:
            // asking again would spin on the same broken ring.
            if avail_moved && popped_now == 0 {
                return Err(unreadable_avail(self.index, state.get_queue(), mem));
            }
            // Out of slots or of window: notifications stay off; the
            // requests in flight run us again when they complete.
            let full = self.free_slots.is_empty() || !self.used.has_room(state.get_queue().next_avail());
            if full || !state.enable_notification().map_err(io::Error::other)? {
                break;
            }
            avail_moved = true;
        }
        Ok(popped)
    }

    /// Submits the bios `start` prepared, under one plug (a request's bios
    /// merge there); a bio the device refuses completes at once with its
    /// error.
    fn submit_pending(&mut self, mem: &Mem) {
        if self.pending.is_empty() {
            return;
        }
        let Self { client, pending, rejected, .. } = self;
        // The plug's tag hint counts requests: a request's bios merge.
        let nr_ios = std::mem::take(&mut self.pending_requests).max(1);
        client.with_plug(nr_ios, |client| {
            for (slot_id, bio) in pending.drain(..) {
                if let Err(r) = client.submit(bio, u64::from(slot_id)) {
                    let r = *r;
                    log::debug!("request refused by the device: {}", r.error);
                    rejected.push((slot_id, Status::from_errno(r.error.errno()), r.bio.segs.into_buf().ok()));
                }
            }
        });
        while let Some((slot_id, status, buf)) = self.rejected.pop() {
            self.bio_done(slot_id, status, buf, mem);
        }
    }

    /// Starts the request parsed into slot `slot_id`: its bios go to
    /// `pending`. Some(used length) if it was answered at once instead
    /// (refused, GET_ID, a flush with no cache to flush).
    fn start(
        &mut self,
        slot_id: u16,
        head: u16,
        avail_pos: u16,
        parsed: Result<Request, request::Refused>,
        mem: &Arc<Mem>,
    ) -> Option<u32> {
        let req = match parsed {
            Ok(req) => req,
            Err(refused) => {
                log::debug!("queue {}: request {head} refused: {}", self.index, refused.error);
                return Some(self.answer_refused(refused, mem));
            }
        };
        let data = &self.slots[usize::from(slot_id)].data;
        let bio = match req.kind {
            Kind::GetId => {
                let written = request::write_segments(&**mem, data, &self.id).unwrap_or(0);
                return Some(self.answer(req.status, VIRTIO_BLK_S_OK as u8, written as u32, mem));
            }
            Kind::Flush if !self.disk.write_cache => {
                return Some(self.answer(req.status, VIRTIO_BLK_S_OK as u8, 0, mem))
            }
            Kind::Flush => Bio::flush(),
            Kind::Discard { offset, len } => Bio::discard(offset, len),
            Kind::WriteZeroes { offset, len } => Bio::write_zeroes(offset, len),
            Kind::Read { offset, .. } if self.lend_segments(slot_id, offset, false, mem) => {
                return self.started(slot_id, head, avail_pos, req, 0);
            }
            Kind::Write { offset, .. } if self.lend_segments(slot_id, offset, true, mem) => {
                return self.started(slot_id, head, avail_pos, req, 0);
            }
            Kind::Read { offset, len } => Bio::read(offset, self.take_buf(len as usize)),
            Kind::Write { offset, len } => {
                let mut buf = self.take_buf(len as usize);
                let data = &self.slots[usize::from(slot_id)].data;
                if let Err(e) = request::read_segments(&**mem, data, 0, &mut buf) {
                    self.free_bufs.push(buf);
                    let refused = request::Refused { error: e, status: Some(req.status) };
                    return Some(self.answer_refused(refused, mem));
                }
                Bio::write(offset, buf)
            }
        };
        self.pending.push((slot_id, bio));
        self.started(slot_id, head, avail_pos, req, 1)
    }

    /// Records the request started in slot `slot_id` with `bounce_bios`
    /// bios of its own beside those `lend_segments` counted; None: it is
    /// answered when its bios complete.
    fn started(&mut self, slot_id: u16, head: u16, avail_pos: u16, req: Request, bounce_bios: u32) -> Option<u32> {
        let slot = &mut self.slots[usize::from(slot_id)];
        slot.head = head;
        slot.avail_pos = avail_pos;
        slot.status = req.status;
        slot.kind = req.kind;
        slot.code = VIRTIO_BLK_S_OK as u8;
        slot.bios_left += bounce_bios;
        debug_assert!(slot.bios_left > 0, "a started request has a bio");
        debug_assert!(bounce_bios == 0 || slot.lent.is_none(), "lent or bounced, not both");
        self.pending_requests += 1;
        None
    }

    /// Prepares one bio per data segment of slot `slot_id`, each over the
    /// guest's own memory of its segment (no copy), the first at disk byte
    /// `offset`, and keeps `mem` in the slot. Returns false, preparing
    /// nothing, if a segment cannot be lent: a length that is not a whole
    /// number of logical blocks (the device would refuse the bio), a range
    /// not inside one memory region (vm-memory maps each on its own), or
    /// more segments than the client has room for; the request then takes
    /// the copy path.
    fn lend_segments(&mut self, slot_id: u16, mut offset: u64, write: bool, mem: &Arc<Mem>) -> bool {
        let Self { slots, pending, client, disk, .. } = self;
        let slot = &mut slots[usize::from(slot_id)];
        debug_assert_eq!((slot.bios_left, slot.lent.is_none()), (0, true), "a free slot");
        let room = client.capacity().saturating_sub(client.in_flight() + pending.len());
        let block = disk.logical_block_size;
        if slot.data.is_empty()
            || slot.data.len() > room
            || slot.data.iter().any(|seg| seg.len == 0 || seg.len % block != 0)
        {
            return false;
        }
        let first = pending.len();
        for seg in &slot.data {
            let Ok(host) = mem.get_slice(seg.addr, seg.len as usize) else {
                // Crosses a region boundary (request.rs checked the range is
                // guest memory): nothing of this request is submitted yet.
                pending.truncate(first);
                return false;
            };
            debug_assert_eq!(host.len(), seg.len as usize);
            // The guest is not trusted to keep virtio's promise that the
            // chain's buffers are the device's until they are in the used
            // ring: it may write its buffers while a bio uses them, or name
            // the same memory twice. That is accepted, as for any memory
            // shared with another process, because what is lent is plain
            // bytes: every u8 value is valid, no driver or block-layer code
            // decides anything about memory safety from data bytes (the null
            // driver copies them in or out with memcpy, the file driver
            // hands their address to the kernel), and the lent range is
            // never reached through a Rust reference outside the bio. A
            // guest racing its own buffers gets back or stores mixed bytes
            // of its own, as with a DMA device; no other memory is touched.
            //
            // `host` maps `seg.len` initialised, read-write bytes of one
            // guest memory region (get_slice checked the whole range lies in
            // it), and they stay mapped while the bio lives: the slot keeps
            // `mem`'s Arc, which owns the mappings, until its last bio
            // completes (`bio_done`) or is drained (`abandon_in_flight`); a
            // SET_MEM_TABLE meanwhile only swaps the GuestMemoryAtomic.
            // SAFETY: valid, mapped bytes for the bio's life (above); guest races accepted.
            let buf = unsafe { Buf::borrowed(host.ptr_guard_mut().as_ptr(), seg.len as usize) };
            pending.push((slot_id, if write { Bio::write(offset, buf) } else { Bio::read(offset, buf) }));
            offset += u64::from(seg.len);
        }
        slot.bios_left = (pending.len() - first) as u32;
        slot.lent = Some(Arc::clone(mem));
        true
    }

    /// One bio of slot `slot_id` completed (or was refused) with `status`;
    /// if it was the request's last, the request is answered (a read on
    /// the copy path copied into the guest first) and its answer waits for
    /// its turn in the used ring.
    fn bio_done(&mut self, slot_id: u16, status: Status, buf: Option<Buf>, mem: &Mem) {
        let slot = &mut self.slots[usize::from(slot_id)];
        assert!(slot.bios_left > 0, "a completion for slot {slot_id}, which has no bio in flight");
        slot.bios_left -= 1;
        if !status.is_ok() && slot.code == VIRTIO_BLK_S_OK as u8 {
            slot.code = virtio_status(status);
        }
        // A lent buffer is the guest's memory: nothing to give back.
        let bounce = buf.and_then(|b| b.end_borrow().err());
        if slot.bios_left > 0 {
            debug_assert!(bounce.is_none(), "a bounced request has one bio");
            return;
        }
        let (head, avail_pos, status_addr, mut code) = (slot.head, slot.avail_pos, slot.status, slot.code);
        let mut written = 0u32;
        if let (Kind::Read { len, .. }, VIRTIO_BLK_S_OK) = (slot.kind, u32::from(code)) {
            match &bounce {
                Some(b) => match request::write_segments(mem, &slot.data, b) {
                    Ok(n) => written = n as u32,
                    Err(_) => code = VIRTIO_BLK_S_IOERR as u8,
                },
                // The device wrote the guest's memory itself.
                None => written = len as u32,
            }
        }
        // Last use of the mapping by this request's bios.
        slot.lent = None;
        if let Some(b) = bounce {
            self.free_bufs.push(b);
        }
        self.free_slots.push(slot_id);
        let used_len = self.answer(status_addr, code, written, mem);
        self.used.hold(avail_pos, head, used_len);
    }

    /// Reaps completions (waiting for `min`) and answers each request whose
    /// last bio completed (`bio_done`); returns how many bios.
    fn reap(&mut self, mem: &Mem, min: usize) -> io::Result<usize> {
        let mut total = 0;
        loop {
            self.done.clear();
            let max = self.slots.len();
            let got = self
                .client
                .do_io(&mut self.done, min.min(self.client.in_flight()), max, None)
                .map_err(io::Error::other)?;
            for i in 0..got {
                let c = &mut self.done[i];
                let (slot_id, status, buf) = (c.user_data as u16, c.status, c.segs.take().into_buf().ok());
                self.bio_done(slot_id, status, buf, mem);
            }
            total += got;
            if got < max {
                return Ok(total);
            }
        }
    }

    /// Writes the status byte; returns the used length (data written + 1).
    fn answer(&mut self, status: GuestAddress, code: u8, written: u32, mem: &Mem) -> u32 {
        if code != VIRTIO_BLK_S_OK as u8 {
            self.stats.errors += 1;
        }
        if mem.write_obj(code, status).is_err() {
            log::warn!("queue {}: status byte at {:#x} not writable", self.index, status.0);
            self.stats.dropped += 1;
            return written;
        }
        written + 1
    }

    fn answer_refused(&mut self, refused: request::Refused, mem: &Mem) -> u32 {
        match refused.status {
            Some(status) => self.answer(status, refused.error.status(), 0, mem),
            None => {
                log::warn!("queue {}: a chain with no usable status byte: {}", self.index, refused.error);
                self.stats.errors += 1;
                self.stats.dropped += 1;
                0
            }
        }
    }

    /// A buffer of `len` bytes: a kept one if large enough.
    fn take_buf(&mut self, len: usize) -> Buf {
        let mut buf = match self.free_bufs.pop() {
            Some(b) if b.capacity() >= len => b,
            _ => Buf::new(len.next_power_of_two().max(4096)),
        };
        buf.set_len(len);
        buf
    }
}

/// The error for an avail index that moved while no chain could be popped:
/// it is more than a ring ahead of ours (a driver never has more chains
/// than the ring), or the avail ring's entries are outside guest memory.
fn unreadable_avail(index: u16, queue: &virtio_queue::Queue, mem: &Mem) -> io::Error {
    let next = queue.next_avail();
    match queue.avail_idx(mem, std::sync::atomic::Ordering::Acquire) {
        Ok(avail) if (avail - std::num::Wrapping(next)).0 > queue.size() => io::Error::other(format!(
            "queue {index}: avail index {} is more than a ring ({}) ahead of {next}",
            avail.0,
            queue.size()
        )),
        _ => io::Error::other(format!("queue {index}: avail index moved past {next} but no chain could be read")),
    }
}

/// The virtio-blk status for an mqblk completion status.
pub fn virtio_status(status: Status) -> u8 {
    match status {
        Status::Ok => VIRTIO_BLK_S_OK as u8,
        Status::NotSupp => VIRTIO_BLK_S_UNSUPP as u8,
        _ => VIRTIO_BLK_S_IOERR as u8,
    }
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
