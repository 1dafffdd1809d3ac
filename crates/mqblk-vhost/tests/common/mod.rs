//! A test frontend: what QEMU does over the socket, with a guest whose
//! memory is a memfd this process maps too, so a test lays out rings and
//! requests itself, then breaks what it means to break. And a logger that
//! keeps every line, so a test can read the reason the server gave.

#![allow(dead_code)] // each test file uses part of it

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use mqblk::Device;
use mqblk_vhost::{Options, Server, Stopper, Summary};
use vhost::vhost_user::message::{VhostUserHeaderFlag, VhostUserProtocolFeatures};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use virtio_bindings::virtio_ring::VIRTIO_RING_F_EVENT_IDX;
use vmm_sys_util::eventfd::EventFd;

/// The guest's memory: one region at guest address 0.
pub const MEM_BYTES: u64 = 1 << 20;
pub const QUEUE_SIZE: u16 = 16;
pub const DESC_TABLE: u64 = 0;
pub const AVAIL: u64 = 0x1000;
pub const USED: u64 = 0x2000;
/// Request headers, 0x100 bytes a descriptor slot; the status byte at +0x80.
pub const HEADERS: u64 = 0x4000;
/// Data buffers, 0x1000 a descriptor slot, from here.
pub const DATA: u64 = 0x10000;

pub const VIRTIO_BLK_T_IN: u32 = 0;
pub const NEXT: u16 = 1;
pub const WRITE: u16 = 2;

/// Keeps every log line of this process (tests share it: each looks for
/// its own reason).
struct Capture;

static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, record: &log::Record) {
        let line = format!("{} {}: {}", record.level(), record.target(), record.args());
        eprintln!("{line}");
        LINES.lock().unwrap_or_else(|e| e.into_inner()).push(line);
    }
    fn flush(&self) {}
}

/// Starts keeping log lines (once per process).
pub fn capture_logs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        static LOGGER: Capture = Capture;
        log::set_logger(&LOGGER).expect("the only logger");
        log::set_max_level(log::LevelFilter::Info);
    });
}

/// The log lines containing `text`.
pub fn logged(text: &str) -> Vec<String> {
    LINES.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|l| l.contains(text)).cloned().collect()
}

/// A server of a memory-backed null disk on a socket of its own, served
/// on a thread.
pub struct Served {
    pub socket: PathBuf,
    dir: PathBuf,
    stopper: Stopper,
    thread: std::thread::JoinHandle<Result<Summary, mqblk_vhost::Error>>,
}

impl Served {
    pub fn start(test: &str) -> Self {
        capture_logs();
        mqblk_null::register();
        let dir = std::env::temp_dir().join(format!("mqblk-vhost-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("vhost.sock");
        let dev = Device::open("null:gb=1,memory_backed=1,irqmode=0").unwrap();
        let server = Server::new(dev, &socket, Options { queues: 1, ..Options::default() }).unwrap();
        let stopper = server.stopper();
        let thread = std::thread::spawn(move || server.run());
        Self { socket, dir, stopper, thread }
    }

    /// Stops the server; its summary.
    pub fn stop(self) -> Summary {
        self.stopper.stop();
        let summary = self.thread.join().expect("server thread").expect("server");
        let _ = std::fs::remove_dir_all(&self.dir);
        summary
    }
}

/// A memfd of `bytes` bytes mapped shared into this process.
pub struct Memfd {
    pub file: File,
    pub ptr: *mut u8,
    pub len: usize,
}

impl Memfd {
    pub fn new(bytes: u64) -> Self {
        // SAFETY: a NUL-terminated name; the fd returned is ours to own.
        let fd = unsafe { libc::memfd_create(c"mqblk-test-guest".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
        // SAFETY: a fresh fd nobody else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(bytes).unwrap();
        let len = bytes as usize;
        // SAFETY: maps a live fd; unmapped in Drop.
        let ptr = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        assert_ne!(ptr, libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
        Self { file, ptr: ptr.cast(), len }
    }

    /// Writes `bytes` at guest address `at`.
    pub fn write(&self, at: u64, bytes: &[u8]) {
        assert!(at as usize + bytes.len() <= self.len, "inside the mapping");
        // SAFETY: inside the live mapping (checked); the server reads it
        // concurrently only as plain bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(at as usize), bytes.len()) };
    }

    /// Reads `N` bytes at guest address `at`.
    pub fn read<const N: usize>(&self, at: u64) -> [u8; N] {
        assert!(at as usize + N <= self.len, "inside the mapping");
        let mut out = [0u8; N];
        // SAFETY: as in `write`.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(at as usize), out.as_mut_ptr(), N) };
        out
    }

    /// This process's address of guest address `at` (the frontend's
    /// "user address" vhost-user speaks in).
    pub fn user_addr(&self, at: u64) -> u64 {
        self.ptr as u64 + at
    }
}

impl Drop for Memfd {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// A frontend connected and negotiated as QEMU does (every message
/// acknowledged, EVENT_IDX off so every answer signals), with its guest.
pub struct Guest {
    pub fe: Frontend,
    /// The socket, to see the server hang up.
    stream: UnixStream,
    pub mem: Memfd,
    pub kick: EventFd,
    pub call: EventFd,
    pub err: EventFd,
    /// The next avail index.
    avail: u16,
}

impl Guest {
    pub fn connect(socket: &Path, mem: Memfd) -> Self {
        let stream = UnixStream::connect(socket).expect("connect");
        let mut fe = Frontend::from_stream(stream.try_clone().unwrap(), 1);
        fe.set_owner().unwrap();
        let features = fe.get_features().unwrap() & !(1 << VIRTIO_RING_F_EVENT_IDX);
        fe.set_features(features).unwrap();
        let protocol = fe.get_protocol_features().unwrap();
        assert!(protocol.contains(VhostUserProtocolFeatures::REPLY_ACK));
        fe.set_protocol_features(protocol).unwrap();
        fe.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
        let eventfd = || EventFd::new(0).unwrap();
        Self { fe, stream, mem, kick: eventfd(), call: eventfd(), err: eventfd(), avail: 0 }
    }

    /// SET_MEM_TABLE of one region: `size` bytes of the memfd from file
    /// offset 0 at guest address 0.
    pub fn set_mem_table(&self, size: u64) -> vhost::Result<()> {
        let region = VhostUserMemoryRegionInfo {
            guest_phys_addr: 0,
            memory_size: size,
            userspace_addr: self.mem.user_addr(0),
            mmap_offset: 0,
            mmap_handle: self.mem.file.as_raw_fd(),
        };
        self.fe.set_mem_table(&[region]).map(|_| ())
    }

    /// Sets up queue 0 as QEMU does, with the given size and base, its
    /// rings at DESC_TABLE, AVAIL and USED (the used ring at `used`).
    pub fn start_ring_at(&mut self, size: u16, base: u16, used: u64) -> vhost::Result<()> {
        self.fe.set_vring_num(0, size)?;
        let config = VringConfigData {
            queue_max_size: QUEUE_SIZE,
            queue_size: size,
            flags: 0,
            desc_table_addr: self.mem.user_addr(DESC_TABLE),
            used_ring_addr: self.mem.user_addr(used),
            avail_ring_addr: self.mem.user_addr(AVAIL),
            log_addr: None,
        };
        self.fe.set_vring_addr(0, &config)?;
        self.fe.set_vring_base(0, base)?;
        self.fe.set_vring_call(0, &self.call)?;
        self.fe.set_vring_err(0, &self.err)?;
        self.fe.set_vring_kick(0, &self.kick)?;
        self.fe.set_vring_enable(0, true)?;
        self.avail = base;
        Ok(())
    }

    /// A whole memory table and a ring of QUEUE_SIZE from 0.
    pub fn start(&mut self) {
        self.set_mem_table(self.mem.len as u64).expect("memory table");
        self.start_ring_at(QUEUE_SIZE, 0, USED).expect("ring");
    }

    /// Writes descriptor `index` of the ring's table.
    pub fn desc(&self, index: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let mut d = [0u8; 16];
        d[0..8].copy_from_slice(&addr.to_le_bytes());
        d[8..12].copy_from_slice(&len.to_le_bytes());
        d[12..14].copy_from_slice(&flags.to_le_bytes());
        d[14..16].copy_from_slice(&next.to_le_bytes());
        self.mem.write(DESC_TABLE + 16 * u64::from(index), &d);
    }

    /// A read of 4 KiB at `sector` into `data`, in descriptors `first` to
    /// `first + 2`: header, data, status (at the header's slot + 0x80).
    pub fn read_chain(&self, first: u16, sector: u64, data: u64) {
        let header = HEADERS + 0x100 * u64::from(first);
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&VIRTIO_BLK_T_IN.to_le_bytes());
        h[8..16].copy_from_slice(&sector.to_le_bytes());
        self.mem.write(header, &h);
        self.mem.write(header + 0x80, &[0xff]);
        self.desc(first, header, 16, NEXT, first + 1);
        self.desc(first + 1, data, 4096, NEXT | WRITE, first + 2);
        self.desc(first + 2, header + 0x80, 1, WRITE, 0);
    }

    /// Publishes the chain at `head` and kicks.
    pub fn offer(&mut self, head: u16) {
        let slot = u64::from(self.avail % QUEUE_SIZE);
        self.mem.write(AVAIL + 4 + 2 * slot, &head.to_le_bytes());
        self.avail = self.avail.wrapping_add(1);
        self.set_avail_idx(self.avail);
        self.kick.write(1).unwrap();
    }

    /// Writes the avail ring's index (no kick).
    pub fn set_avail_idx(&self, idx: u16) {
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        self.mem.write(AVAIL + 2, &idx.to_le_bytes());
    }

    /// Waits for the server's signal that answers are in the used ring;
    /// the used index.
    pub fn wait_used(&self) -> u16 {
        self.call.read().unwrap();
        u16::from_le_bytes(self.mem.read(USED + 2))
    }

    /// Used ring entry `i`: (head, length).
    pub fn used(&self, i: u16) -> (u32, u32) {
        let e: [u8; 8] = self.mem.read(USED + 4 + 8 * u64::from(i % QUEUE_SIZE));
        (u32::from_le_bytes(e[0..4].try_into().unwrap()), u32::from_le_bytes(e[4..8].try_into().unwrap()))
    }

    /// The status byte of the chain whose header is in slot `first`.
    pub fn status(&self, first: u16) -> u8 {
        self.mem.read::<1>(HEADERS + 0x100 * u64::from(first) + 0x80)[0]
    }

    /// Waits until the server hangs up (this side reads end of file).
    pub fn wait_hang_up(&mut self) {
        let mut byte = [0u8; 1];
        let n = self.stream.read(&mut byte).unwrap_or(0);
        assert_eq!(n, 0, "the server sent something instead of hanging up");
    }
}
