//! One virtqueue served through one mqblk `Client`: pops descriptor chains,
//! parses them (request.rs), submits a bio each, and puts each completion
//! in the used ring.
//!
//! A queue runs on its own worker thread of vhost-user-backend (one thread
//! per virtqueue), woken by the guest's kick or by the client's completion
//! eventfd, both in that thread's epoll; it sleeps nowhere else. On a
//! device whose clients reap their own ring (file `reap=client`) that
//! eventfd is the ring's (server.rs `check_reaping_clients`), and the
//! reap in `run` polls the ring: a read the kernel completes inside the
//! submission (a page cache hit) is answered in the same pass. Each
//! wakeup runs `run`: pop and submit under one plug until the avail ring is
//! empty, every slot is in flight or a read or write of 128 KiB or more
//! was started (`ANSWER_EARLY_BYTES`), reap what completed, put the
//! answers in the used ring and signal the guest if the used ring's event
//! index asks for it (VIRTIO_RING_F_EVENT_IDX), and repeat while any of it
//! made progress.
//!
//! Answers go to the used ring in avail order (in_order.rs): a request
//! that completes before an earlier one waits for it. A server killed
//! mid-I/O then leaves a used index from which QEMU's reconnect restarts
//! the next server at exactly the requests that were in flight.
//!
//! Reads and writes move no data through the server: a request's data
//! segments become one bio whose segments borrow the guest's memory
//! (slot.rs: `Buf::borrowed` over vm-memory's host addresses, a vectored
//! bio in the slot's kept `Vec<Buf>`). The block layer splits it only
//! where the device's limits need it and completes it once, with the
//! first error; the request is answered (status byte, used ring) then.
//! The slot holds the guest memory's `Arc` until then, so a new memory
//! table (SET_MEM_TABLE) cannot unmap what the bio still points at.
//!
//! A request whose segments cannot be lent takes the copy path: a segment
//! that is not a whole number of logical blocks, one that crosses from one
//! memory region into the next, or more segments than a bio of the slot
//! holds. Its data is copied: a write's segments into a `Buf` before
//! submission, a read's `Buf` into its segments at completion. Buffers and
//! the slots' vectors are kept for reuse, so a steady load allocates
//! nothing after warm-up.
//!
//! Relies on: request.rs (parsing, segment copies), slot.rs (a request in
//! flight, lending), config.rs (`DiskLimits`), in_order.rs; mqblk's Client
//! (submit, plug, do_io, completion_fd); vhost-user-backend's
//! `VringMutex`, virtio-queue's `Queue`.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use mqblk::{Bio, BioVec, Buf, Client, Completion, ReqFlags, Status};
use vhost_user_backend::VringT;
use virtio_bindings::virtio_blk::{VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_OK, VIRTIO_BLK_S_UNSUPP};
use virtio_queue::QueueT;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::chain::ChainReader;
use crate::config::DiskLimits;
use crate::in_order::{self, InOrderUsed};
use crate::request::{self, Kind, Request, ID_BYTES};
use crate::slot::Slot;
pub use crate::vring::Vring;

/// A read or write of this many bytes or more is submitted, and answered
/// if it completed, before the next chain is popped. The plug would issue
/// it at once anyway (it flushes after a request of BLK_PLUG_FLUSH_SIZE,
/// 128 KiB, as the kernel's `blk_add_rq_to_plug`), and a file's buffered
/// read of cached pages completes inside that issue, its copy done by this
/// thread: answering each at once lets the guest refill its queue while
/// the next is copied, where answering the batch at its end left the
/// guest idle for all of the batch's copies.
const ANSWER_EARLY_BYTES: u64 = 128 << 10;

/// The guest memory type served.
pub type Mem = GuestMemoryMmap<()>;

/// Counts of one queue's life.
#[derive(Debug, Default, Clone, Copy)]
pub struct QueueStats {
    pub requests: u64,
    /// Requests answered with IOERR or UNSUPP.
    pub errors: u64,
    /// Chains with no status byte, given back with nothing written.
    pub dropped: u64,
    /// Reads and writes whose data segments were lent as one bio.
    pub lent: u64,
    /// The data segments of those requests.
    pub lent_segments: u64,
    /// Reads and writes that took the copy path.
    pub bounced: u64,
}

impl QueueStats {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &QueueStats) {
        self.requests += other.requests;
        self.errors += other.errors;
        self.dropped += other.dropped;
        self.lent += other.lent;
        self.lent_segments += other.lent_segments;
        self.bounced += other.bounced;
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
    /// Reads the descriptors of the chains popped.
    chains: ChainReader,
    free_bufs: Vec<Buf>,
    done: Vec<Completion>,
    /// Bios prepared while the vring is locked, submitted after: one per
    /// request (slot).
    pending: Vec<(u16, Bio)>,
    /// Bios the device refused at submission: (slot, status, segments).
    rejected: Vec<(u16, Status, BioVec)>,
    /// Answers waiting for their turn in the used ring.
    used: InOrderUsed,
    /// Whether the ring's next used position was read from the guest's
    /// used ring since the ring (re)started (`start_ring`).
    ring_started: bool,
    /// The vring, kept from the first event so `stop` can finish requests.
    vring: Option<Vring>,
    /// Set when an access to guest memory faulted (its file shrank:
    /// memory.rs, guard.rs); read before any answer is published.
    faulted: Arc<AtomicBool>,
    stats: QueueStats,
}

impl VirtQueue {
    /// A queue of `depth` requests in flight at most, over `client`, which
    /// has room for a bio per request (`Client::capacity`).
    pub fn new(index: u16, mut client: Client, depth: u16, disk: DiskLimits, id: &str) -> Result<Self, mqblk::Error> {
        assert!(depth > 0, "a queue needs at least one slot");
        let capacity = client.capacity();
        assert!(capacity >= usize::from(depth), "a client of {capacity} bios for {depth} requests of one bio each");
        // The fd alone wakes the worker, also on a device whose clients
        // reap their rings (server.rs `check_reaping_clients`).
        let completion_fd = client.standalone_completion_fd()?;
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
            chains: ChainReader::new(disk.max_descriptors()),
            free_bufs: Vec::with_capacity(usize::from(depth)),
            done: Vec::with_capacity(usize::from(depth)),
            pending: Vec::with_capacity(usize::from(depth)),
            rejected: Vec::with_capacity(usize::from(depth)),
            used: InOrderUsed::default(),
            ring_started: false,
            vring: None,
            faulted: Arc::new(AtomicBool::new(false)),
            stats: QueueStats::default(),
        })
    }

    /// Watches `faulted`, the flag of the guest memory's SIGBUS guard
    /// (memory.rs `MemoryWatch::faulted`), instead of a flag of its own.
    pub fn watch_memory_faults(&mut self, faulted: Arc<AtomicBool>) {
        self.faulted = faulted;
    }

    /// Whether an access to the guest's memory faulted: its file shrank.
    pub fn memory_faulted(&self) -> bool {
        // Acquire: pairs with the handler's Release store (guard.rs).
        self.faulted.load(Ordering::Acquire)
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
        loop {
            let popped = self.pop_and_submit(vring, mem)?;
            let reaped = self.reap(mem, 0)?;
            // The requests served so far touched guest memory (parsing,
            // copies, the device's own access to lent segments): none is
            // answered if any of it faulted.
            if self.memory_faulted() {
                return Err(self.fail_after_memory_fault());
            }
            let published = self.publish(vring, mem)?;
            // Signalled as answers are published, not once at the end: a
            // pass that stopped after a large request (`pop`) lets the guest
            // refill its queue while the next one is served. The event
            // index makes a signal rare while the guest is still busy with
            // the last one. Ring accesses go through `mem`, the checked
            // memory (memory.rs), never the vring's own.
            if published > 0 && vring.get_mut().get_queue_mut().needs_notification(&**mem).map_err(io::Error::other)? {
                vring.signal_used_queue()?;
            }
            if popped == 0 && reaped == 0 && published == 0 {
                break;
            }
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
        if self.memory_faulted() {
            return Err(self.fail_after_memory_fault());
        }
        self.publish(&vring, mem)?;
        debug_assert_eq!(self.used.held(), 0, "every answer published once nothing is in flight");
        self.ring_started = false;
        vring.signal_used_queue()
    }

    /// Waits for every request in flight and drops the answers (the guest
    /// is gone). The guest memory a bio borrowed is let go only after it
    /// completed; the slots' vectors and bounce buffers are kept.
    pub fn abandon_in_flight(&mut self) {
        while self.client.in_flight() > 0 {
            self.done.clear();
            // As Client::drain: an error here is a device's, and waiting
            // again is all there is to do.
            let _ = self.client.do_io(&mut self.done, 1, self.slots.len(), None);
            for c in &mut self.done {
                let slot = &mut self.slots[c.user_data as usize];
                if let Some(bounce) = slot.take_back(c.segs.take()) {
                    self.free_bufs.push(bounce);
                }
            }
        }
        for slot in &mut self.slots {
            slot.in_flight = false;
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
    fn publish(&mut self, vring: &Vring, mem: &Mem) -> io::Result<usize> {
        if self.used.held() == 0 {
            return Ok(0);
        }
        let mut state = vring.get_mut();
        let queue = state.get_queue_mut();
        let index = self.index;
        self.used
            .publish(|head, used_len| queue.add_used(mem, head, used_len))
            .map_err(|e| io::Error::other(format!("queue {index}: cannot put an answer in the used ring: {e}")))
    }

    /// The requests not yet answered fail (none is published: what they
    /// read or wrote of guest memory may be an anonymous page standing in
    /// for the file's), and the error that ends the connection.
    fn fail_after_memory_fault(&mut self) -> io::Error {
        let failed = self.used.held() + self.client.in_flight();
        self.stats.errors += failed as u64;
        self.used.clear();
        io::Error::other(format!(
            "queue {}: the frontend's memory file shrank under its mapping (a guest memory access faulted past \
             its end): {failed} requests failed, connection ended",
            self.index
        ))
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
        in_order::check_size(self.index, vring.asked_size(), state.get_queue())?;
        if !self.ring_started {
            in_order::start_ring(self.index, state.get_queue_mut(), &**mem)?;
            self.ring_started = true;
        }
        self.used.sync(state.get_queue().size(), state.get_queue().next_used());
        // Whether the last re-enabling of notifications found the avail
        // index moved (chains published after the last pop found none).
        let mut avail_moved = false;
        loop {
            state.get_queue_mut().disable_notification(&**mem).map_err(io::Error::other)?;
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
                // Its descriptors, read by chain.rs (an indirect table in one copy).
                let queue = state.get_queue();
                let descs = self.chains.chain(mem, GuestAddress(queue.desc_table()), queue.size(), head);
                let parsed = request::parse(descs, mem, &self.disk, &mut self.slots[usize::from(slot_id)].data);
                // Parsed from an anonymous page standing in for the file's
                // if the ring, the table or the header faulted: not started.
                if self.memory_faulted() {
                    self.free_slots.push(slot_id);
                    self.stats.errors += 1;
                    return Err(self.fail_after_memory_fault());
                }
                if let Some(used_len) = self.start(slot_id, head, pos, parsed, mem) {
                    self.free_slots.push(slot_id);
                    self.used.hold(pos, head, used_len);
                } else if self.slots[usize::from(slot_id)].kind.data_bytes() >= ANSWER_EARLY_BYTES {
                    // Submitted, reaped and answered before the next pop
                    // (`run`); notifications stay off meanwhile.
                    return Ok(popped + popped_now);
                }
            }
            popped += popped_now;
            // The index moved, yet with slots free nothing could be popped:
            // asking again would spin on the same broken ring.
            if avail_moved && popped_now == 0 {
                return Err(in_order::unreadable_avail(self.index, state.get_queue(), &**mem));
            }
            // Out of slots or of window: notifications stay off; the
            // requests in flight run us again when they complete.
            let full = self.free_slots.is_empty() || !self.used.has_room(state.get_queue().next_avail());
            if full || !state.get_queue_mut().enable_notification(&**mem).map_err(io::Error::other)? {
                break;
            }
            avail_moved = true;
        }
        Ok(popped)
    }

    /// Submits the bios `start` prepared, under one plug (the driver gets
    /// them as one list); a bio the device refuses completes at once with
    /// its error.
    fn submit_pending(&mut self, mem: &Mem) {
        if self.pending.is_empty() {
            return;
        }
        let Self { client, pending, rejected, .. } = self;
        let nr_ios = pending.len() as u32;
        client.with_plug(nr_ios, |client| {
            for (slot_id, bio) in pending.drain(..) {
                if let Err(r) = client.submit(bio, u64::from(slot_id)) {
                    let r = *r;
                    log::debug!("request refused by the device: {}", r.error);
                    rejected.push((slot_id, Status::from_errno(r.error.errno()), r.bio.segs));
                }
            }
        });
        while let Some((slot_id, status, segs)) = self.rejected.pop() {
            self.bio_done(slot_id, status, segs, mem);
        }
    }

    /// Starts the request parsed into slot `slot_id`: its bio goes to
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
        let block = self.disk.logical_block_size;
        let slot = &mut self.slots[usize::from(slot_id)];
        let bio = match req.kind {
            Kind::GetId => {
                let written = request::write_segments(&**mem, &slot.data, &self.id).unwrap_or(0);
                return Some(self.answer(req.status, VIRTIO_BLK_S_OK as u8, written as u32, mem));
            }
            Kind::Flush if !self.disk.write_cache => {
                return Some(self.answer(req.status, VIRTIO_BLK_S_OK as u8, 0, mem))
            }
            Kind::Flush => Bio::flush(),
            Kind::Discard { offset, len } => Bio::discard(offset, len),
            Kind::WriteZeroes { offset, len, unmap } => {
                Bio::write_zeroes(offset, len).with_flags(if unmap { ReqFlags::NONE } else { ReqFlags::NOUNMAP })
            }
            Kind::Read { offset, len } | Kind::Write { offset, len } => {
                let write = matches!(req.kind, Kind::Write { .. });
                if let Some(bio) = slot.lend(offset, write, block, mem) {
                    self.stats.lent += 1;
                    self.stats.lent_segments += slot.data.len() as u64;
                    bio
                } else {
                    self.stats.bounced += 1;
                    match self.bounce(slot_id, offset, len, write, mem) {
                        Ok(bio) => bio,
                        Err(error) => {
                            let refused = request::Refused { error, status: Some(req.status) };
                            return Some(self.answer_refused(refused, mem));
                        }
                    }
                }
            }
        };
        self.pending.push((slot_id, bio));
        let slot = &mut self.slots[usize::from(slot_id)];
        (slot.head, slot.avail_pos, slot.status, slot.kind) = (head, avail_pos, req.status, req.kind);
        slot.in_flight = true;
        None
    }

    /// The copy path's bio for the read or write of slot `slot_id`: a kept
    /// buffer of `len` bytes at disk byte `offset`, holding a write's data.
    fn bounce(
        &mut self,
        slot_id: u16,
        offset: u64,
        len: u64,
        write: bool,
        mem: &Mem,
    ) -> Result<Bio, request::ParseError> {
        let mut buf = self.take_buf(len as usize);
        if !write {
            return Ok(Bio::read(offset, buf));
        }
        if let Err(e) = request::read_segments(mem, &self.slots[usize::from(slot_id)].data, 0, &mut buf) {
            self.free_bufs.push(buf);
            return Err(e);
        }
        Ok(Bio::write(offset, buf))
    }

    /// The bio of slot `slot_id` completed (or was refused) with `status`
    /// and gave back `segs`: the request is answered (a read on the copy
    /// path copied into the guest first) and its answer waits for its turn
    /// in the used ring.
    fn bio_done(&mut self, slot_id: u16, status: Status, segs: BioVec, mem: &Mem) {
        let slot = &mut self.slots[usize::from(slot_id)];
        assert!(slot.in_flight, "a completion for slot {slot_id}, which has no bio in flight");
        slot.in_flight = false;
        let bounce = slot.take_back(segs);
        let (head, avail_pos, status_addr) = (slot.head, slot.avail_pos, slot.status);
        let mut code = virtio_status(status);
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
        // The bio's last use of the mapping is over.
        slot.lent = None;
        if let Some(b) = bounce {
            self.free_bufs.push(b);
        }
        self.free_slots.push(slot_id);
        let used_len = self.answer(status_addr, code, written, mem);
        self.used.hold(avail_pos, head, used_len);
    }

    /// Reaps completions (waiting for `min`) and answers each request
    /// (`bio_done`); returns how many.
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
                let (slot_id, status, segs) = (c.user_data as u16, c.status, c.segs.take());
                self.bio_done(slot_id, status, segs, mem);
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
