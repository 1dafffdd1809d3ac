//! The server: one mqblk device as /dev/ublkbN, from ADD_DEV to DEL_DEV.
//!
//! Steps (`Server::run`): probe the kernel (GET_FEATURES: the features
//! this server needs must be there); ADD_DEV with the queue count, depth
//! and largest request; SET_PARAMS from the device's queue limits; open
//! /dev/ublkcN; start one queue thread per queue (queue.rs), each fetching
//! all its tags; START_DEV once every queue is ready (the kernel waits for
//! that too, and reads the partition table through the queues). Then wait
//! for a stop (a `Stopper`: SIGINT/SIGTERM in `mqblk ublk add`) or for a
//! queue to end on its own (`mqblk ublk del` from elsewhere, or a kernel
//! error). Stopping: STOP_DEV (the kernel removes /dev/ublkbN once its
//! requests are done and aborts every fetch, which ends the queue
//! threads), join the threads, close /dev/ublkcN, DEL_DEV (which waits for
//! that close). The device is flushed through mqblk at the end.
//!
//! An unprivileged device (`Options::unprivileged`, unpriv.rs) is added
//! the same way, after ADD_DEV waiting for the udev rule to give
//! /dev/ublkcN to its owner (every later command names that node), and
//! after START_DEV for /dev/ublkbN.
//!
//! `Server::recover` takes over a recoverable device whose server died
//! (recovery.rs): START_USER_RECOVERY instead of ADD_DEV and SET_PARAMS,
//! the same queues, END_USER_RECOVERY instead of START_DEV; from then on
//! it is served and stopped as one added here.
//!
//! Relies on: ctrl.rs (control commands), queue.rs (queue threads),
//! recovery.rs, unpriv.rs, uapi.rs; mqblk's Device and QueueLimits.

use std::fs::File;
use std::io;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use mqblk::{Bio, Device, QueueLimits};

use crate::affinity::{self, CpuAffinity};
use crate::ctrl::Control;
use crate::error::Error;
use crate::params::{check_zoned, max_io_bytes};
pub use crate::params::{params_for, MAX_IO_BYTES};
use crate::queue::{Queue, QueueConfig, QueueStats};
use crate::recovery::{self, Recovery};
use crate::uapi::{self, DevInfo};
use crate::unpriv;
use crate::zero_copy::ZeroCopy;

/// Features this server cannot run without.
const NEEDED_FEATURES: u64 = uapi::UBLK_F_CMD_IOCTL_ENCODE;

/// What a zoned device needs on top: the kernel's zoned ublk (Linux 6.6)
/// moves data by user copy only, since report zones fills a kernel buffer
/// (ublk_drv.c refuses UBLK_F_ZONED without UBLK_F_USER_COPY).
const ZONED_FEATURES: u64 = uapi::UBLK_F_USER_COPY | uapi::UBLK_F_ZONED;

/// The UBLK_F_* flags a device with these limits is added with.
pub fn device_flags(limits: &QueueLimits) -> u64 {
    let zoned = if limits.zoned.is_some() { ZONED_FEATURES } else { 0 };
    NEEDED_FEATURES | zoned
}

/// What to create.
#[derive(Debug, Clone)]
pub struct Options {
    /// Hardware queues of /dev/ublkbN (one thread each); the kernel caps
    /// it at the number of CPUs.
    pub queues: u16,
    /// Tags per queue.
    pub depth: u16,
    /// The device id (N of /dev/ublkbN), or None for the first free one.
    pub id: Option<u32>,
    /// What the device does if this server dies (recovery.rs).
    pub recovery: Recovery,
    /// Ask for an unprivileged device (UBLK_F_UNPRIVILEGED_DEV): what a
    /// caller without CAP_SYS_ADMIN must do; the kernel gives a caller
    /// with it a privileged device instead (unpriv.rs).
    pub unprivileged: bool,
    /// Whether reads and writes move with no copy through the server.
    pub zero_copy: ZeroCopy,
    /// Which CPUs each queue thread runs on (affinity.rs).
    pub cpu_affinity: CpuAffinity,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            queues: 1,
            depth: 64,
            id: None,
            recovery: Recovery::Off,
            unprivileged: false,
            zero_copy: ZeroCopy::Auto,
            cpu_affinity: CpuAffinity::Single,
        }
    }
}

/// How the queues, once each has fetched its tags, are put to work.
#[derive(Clone, Copy)]
enum Begin {
    /// START_DEV: a device just added.
    Start,
    /// END_USER_RECOVERY: a recovered device.
    EndRecovery,
}

/// The device as started, for the caller to announce.
#[derive(Debug, Clone)]
pub struct Started {
    pub dev_id: u32,
    /// The kernel made it unprivileged (owned by this process's user).
    pub unprivileged: bool,
    pub queues: u16,
    pub depth: u16,
    pub max_io_bytes: u32,
    pub flags: u64,
    /// Per queue, the CPUs its thread is pinned to (empty: unpinned).
    pub queue_cpus: Vec<Vec<usize>>,
}

/// How the server ended.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub dev_id: u32,
    pub requests: u64,
    pub errors: u64,
    pub zone_appends: u64,
    /// Reads and writes served with the request's own pages (zero copy).
    pub zero_copy_ios: u64,
    /// Of those, the ones whose registration failed, served by copying.
    pub copy_fallbacks: u64,
    /// Of the zero-copy ones, those the kernel registered itself (auto
    /// registration).
    pub auto_registered_ios: u64,
    /// Requests the kernel could not auto-register, registered by the
    /// file driver instead.
    pub auto_fallbacks: u64,
}

enum Event {
    Ready(u16),
    SetupFailed(u16, Error),
    Exited(u16),
    Stop,
}

/// Stops a running server from another thread (or a signal handler's
/// thread). Cheap to clone.
#[derive(Clone)]
pub struct Stopper(mpsc::Sender<Event>);

impl Stopper {
    pub fn stop(&self) {
        let _ = self.0.send(Event::Stop);
    }
}

pub struct Server {
    device: Device,
    opts: Options,
    events_tx: mpsc::Sender<Event>,
    events_rx: mpsc::Receiver<Event>,
}

/// Checks that the kernel offers every feature in `needed`; returns its
/// feature bits.
pub fn probe(ctrl: &mut Control, needed: u64) -> Result<u64, Error> {
    let features = ctrl.features()?;
    unpriv::check_features(features, needed)?;
    Ok(features)
}

impl Server {
    pub fn new(device: Device, opts: Options) -> Result<Self, Error> {
        if opts.queues == 0 || opts.queues > uapi::UBLK_MAX_NR_QUEUES {
            return Err(Error::BadOption(format!(
                "--queues {} (accepted: 1..={})",
                opts.queues,
                uapi::UBLK_MAX_NR_QUEUES
            )));
        }
        if opts.depth == 0 || opts.depth > uapi::UBLK_MAX_QUEUE_DEPTH {
            return Err(Error::BadOption(format!(
                "--depth {} (accepted: 1..={})",
                opts.depth,
                uapi::UBLK_MAX_QUEUE_DEPTH
            )));
        }
        check_zoned(device.limits())?;
        if opts.unprivileged {
            unpriv::check_options(device.limits(), opts.recovery)?;
        }
        let (events_tx, events_rx) = mpsc::channel();
        Ok(Self { device, opts, events_tx, events_rx })
    }

    pub fn stopper(&self) -> Stopper {
        Stopper(self.events_tx.clone())
    }

    /// Creates and serves the device until stopped; `on_started` runs once
    /// /dev/ublkbN exists.
    pub fn run(self, on_started: impl FnOnce(&Started)) -> Result<Summary, Error> {
        let mut ctrl = Control::open()?;
        let limits = self.device.limits().clone();
        let unprivileged_flag = if self.opts.unprivileged { uapi::UBLK_F_UNPRIVILEGED_DEV } else { 0 };
        let flags = device_flags(&limits) | self.opts.recovery.flags() | unprivileged_flag;
        let features = probe(&mut ctrl, flags)?;
        let backing_file = self.device.backing_fd().is_some();
        let flags = flags | self.opts.zero_copy.flags(features, &limits, self.opts.unprivileged, backing_file)?;
        let max_io = max_io_bytes(&limits);
        let wanted = DevInfo {
            nr_hw_queues: self.opts.queues,
            queue_depth: self.opts.depth,
            max_io_buf_bytes: max_io,
            dev_id: self.opts.id.unwrap_or(u32::MAX),
            ublksrv_pid: std::process::id() as i32,
            flags,
            ..DevInfo::default()
        };
        let info = ctrl.add(wanted)?;
        let dev_id = info.dev_id;
        let unprivileged = info.flags & uapi::UBLK_F_UNPRIVILEGED_DEV != 0;
        if self.opts.unprivileged && !unprivileged {
            log::warn!("device {dev_id} is privileged: the kernel adds one for a caller with CAP_SYS_ADMIN even when asked for an unprivileged one");
        }
        // The kernel drops UBLK_F_UNPRIVILEGED_DEV for a privileged caller
        // (above); any other flag it did not grant is missing.
        let flags = flags & !uapi::UBLK_F_UNPRIVILEGED_DEV;
        if info.flags & flags != flags {
            let _ = delete_quietly(&mut ctrl, dev_id);
            return Err(Error::MissingFeature {
                missing: uapi::feature_names(flags & !info.flags).join(", "),
                offered: uapi::feature_names(info.flags).join(", "),
            });
        }
        // From here on the device exists: every failure deletes it. An
        // unprivileged device's next command names /dev/ublkcN, which
        // must be ours first: open it (waiting for the udev rule) now.
        let result = unpriv::open_char_device(dev_id, unprivileged).and_then(|cdev| {
            ctrl.set_params(dev_id, &params_for(&limits, info.max_io_buf_bytes))?;
            self.serve_added(&mut ctrl, &info, Begin::Start, cdev, on_started)
        });
        self.end(&mut ctrl, dev_id, result)
    }

    /// Takes over recoverable device `dev_id`, whose server died, and
    /// serves it until stopped, as `run` serves a device it added (and
    /// deletes it the same way at the end, or on a failure).
    pub fn recover(self, dev_id: u32, on_started: impl FnOnce(&Started)) -> Result<Summary, Error> {
        let mut ctrl = Control::open()?;
        let limits = self.device.limits().clone();
        probe(&mut ctrl, device_flags(&limits))?;
        let info = recovery::start(&mut ctrl, dev_id, &limits, device_flags(&limits))?;
        // The device keeps the data path it was added with.
        let zero_copy = info.flags & uapi::UBLK_F_SUPPORT_ZERO_COPY != 0;
        let auto_buf_reg = info.flags & uapi::UBLK_F_AUTO_BUF_REG != 0;
        let result = if zero_copy && !limits.kernel_buffers {
            Err(Error::BadOption(format!(
                "device {dev_id} was added with zero copy: --device must take kernel buffers (a file: device)"
            )))
        } else if auto_buf_reg && self.device.backing_fd().is_none() {
            Err(Error::BadOption(format!(
                "device {dev_id} was added with auto buffer registration: --device must be one file (a file: device)"
            )))
        } else {
            unpriv::open_char_device(dev_id, ctrl.is_unprivileged(dev_id))
                .and_then(|cdev| self.serve_added(&mut ctrl, &info, Begin::EndRecovery, cdev, on_started))
        };
        self.end(&mut ctrl, dev_id, result)
    }

    /// After serving: DEL_DEV whatever happened, then flush the device.
    fn end(&self, ctrl: &mut Control, dev_id: u32, result: Result<Summary, Error>) -> Result<Summary, Error> {
        let deleted = delete_quietly(ctrl, dev_id);
        if let (Err(_), Err(e)) = (&result, &deleted) {
            // The first error is the one returned; say what is left behind
            // (an unprivileged device whose node the udev rule never gave
            // us cannot be deleted by us).
            log::warn!(
                "device {dev_id} is left behind ({e}): delete it with `mqblk ublk del {dev_id}` as root, or as its \
                 owner once {} is theirs",
                uapi::char_path(dev_id)
            );
        }
        let mut summary = result?;
        deleted?;
        summary.dev_id = dev_id;
        // What the kernel acknowledged with a flush reached mqblk; make the
        // device's own cache durable too before the device goes.
        if self.device.limits().write_cache {
            self.device.client().submit_and_wait(Bio::flush())?;
        }
        Ok(summary)
    }

    fn serve_added(
        &self,
        ctrl: &mut Control,
        info: &DevInfo,
        begin: Begin,
        cdev: File,
        on_started: impl FnOnce(&Started),
    ) -> Result<Summary, Error> {
        let dev_id = info.dev_id;
        let cdev = Arc::new(cdev);
        let mut threads = Vec::new();
        let queue_cpus = self.queue_cpus(ctrl, info);
        for q_id in 0..info.nr_hw_queues {
            let cfg = QueueConfig {
                q_id,
                depth: info.queue_depth,
                buf_bytes: info.max_io_buf_bytes as usize,
                // Zero copy implies user copy: FETCH and COMMIT carry no
                // address, and a request whose registration fails is
                // copied through /dev/ublkcN.
                user_copy: info.flags & (uapi::UBLK_F_USER_COPY | uapi::UBLK_F_SUPPORT_ZERO_COPY) != 0,
                zero_copy: info.flags & uapi::UBLK_F_SUPPORT_ZERO_COPY != 0,
                auto_buf_reg: info.flags & uapi::UBLK_F_AUTO_BUF_REG != 0,
                cdev: cdev.clone(),
                device: self.device.clone(),
                cpus: queue_cpus[usize::from(q_id)].clone(),
            };
            threads.push(spawn_queue(cfg, self.events_tx.clone())?);
        }
        drop(cdev);
        let outcome = self.start_and_wait(ctrl, info, begin, &mut threads, queue_cpus, on_started);
        // Stop whatever happened: aborts the fetches the threads wait on.
        if let Err(e) = ctrl.stop(dev_id) {
            log::debug!("STOP_DEV: {e}");
        }
        let mut summary = Summary { dev_id, ..Summary::default() };
        let mut first_error = outcome.err();
        for thread in threads {
            match thread.join() {
                Ok(Ok(stats)) => {
                    summary.requests += stats.requests;
                    summary.errors += stats.errors;
                    summary.zone_appends += stats.zone_appends;
                    summary.zero_copy_ios += stats.zero_copy_ios;
                    summary.copy_fallbacks += stats.copy_fallbacks;
                    summary.auto_registered_ios += stats.auto_registered_ios;
                    summary.auto_fallbacks += stats.auto_fallbacks;
                }
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(_) => {
                    first_error.get_or_insert(Error::Queue {
                        q_id: u16::MAX,
                        what: "a queue thread panicked",
                        source: io::Error::other("panic"),
                    });
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(summary),
        }
    }

    /// Per queue, the CPUs its thread is to be pinned to under
    /// `Options::cpu_affinity`: of those the kernel maps to the queue, the
    /// ones this process may use (none, or either affinity unknown: left
    /// unpinned, with a warning).
    fn queue_cpus(&self, ctrl: &mut Control, info: &DevInfo) -> Vec<Vec<usize>> {
        let mode = self.opts.cpu_affinity;
        let unpinned = vec![Vec::new(); usize::from(info.nr_hw_queues)];
        if mode == CpuAffinity::Off {
            return unpinned;
        }
        let allowed = match mqblk::cpus::allowed_cpus() {
            Ok(allowed) => allowed,
            Err(e) => {
                log::warn!("the queue threads stay unpinned: reading the server's CPU affinity: {e}");
                return unpinned;
            }
        };
        let mut all = Vec::new();
        for q_id in 0..info.nr_hw_queues {
            // Where the kernel will not say (more CPUs than the mask
            // holds), the queue runs unpinned rather than not at all.
            let mapped = match ctrl.queue_cpus(info.dev_id, q_id) {
                Ok(mapped) => mapped,
                Err(e) => {
                    log::warn!("queue {q_id}: its thread stays unpinned: {e}");
                    all.push(Vec::new());
                    continue;
                }
            };
            let cpus = mode.choose(&mapped, &allowed);
            if cpus.is_empty() {
                log::warn!(
                    "queue {q_id}: the kernel maps {} to it, none of which this process may use ({}): its thread \
                     stays unpinned",
                    affinity::cpu_list(&mapped),
                    affinity::cpu_list(&allowed)
                );
            }
            all.push(cpus);
        }
        all
    }

    /// Waits for every queue to be ready, starts the device, then waits
    /// for a stop or a queue's end.
    fn start_and_wait(
        &self,
        ctrl: &mut Control,
        info: &DevInfo,
        begin: Begin,
        threads: &mut [JoinHandle<Result<QueueStats, Error>>],
        queue_cpus: Vec<Vec<usize>>,
        on_started: impl FnOnce(&Started),
    ) -> Result<(), Error> {
        let mut ready = 0;
        while ready < threads.len() {
            match self.events_rx.recv() {
                Ok(Event::Ready(q_id)) => {
                    log::debug!("queue {q_id} fetched its tags");
                    ready += 1;
                }
                Ok(Event::SetupFailed(_, e)) => return Err(e),
                Ok(Event::Exited(q_id)) => {
                    log::warn!("queue {q_id} ended before the device started");
                    return Ok(());
                }
                Ok(Event::Stop) | Err(_) => return Ok(()),
            }
        }
        let pid = std::process::id() as i32;
        match begin {
            Begin::Start => ctrl.start(info.dev_id, pid)?,
            Begin::EndRecovery => ctrl.end_recovery(info.dev_id, pid)?,
        }
        let unprivileged = ctrl.is_unprivileged(info.dev_id);
        if unprivileged {
            // Announce /dev/ublkbN once its owner can open it.
            unpriv::wait_for_block_node(info.dev_id);
        }
        on_started(&Started {
            dev_id: info.dev_id,
            unprivileged,
            queues: info.nr_hw_queues,
            depth: info.queue_depth,
            max_io_bytes: info.max_io_buf_bytes,
            flags: info.flags,
            queue_cpus,
        });
        match self.events_rx.recv() {
            Ok(Event::Exited(q_id)) => log::info!("queue {q_id} ended: the device was stopped or deleted"),
            Ok(Event::SetupFailed(q_id, e)) => log::error!("queue {q_id}: {e}"),
            Ok(Event::Stop) | Ok(Event::Ready(_)) | Err(_) => {}
        }
        Ok(())
    }
}

/// DEL_DEV, where "already gone" is success: ENODEV, or for an
/// unprivileged device ENOENT, since its DEL_DEV names /dev/ublkcN, which
/// the kernel removes first when another process deletes the device.
fn delete_quietly(ctrl: &mut Control, dev_id: u32) -> Result<(), Error> {
    let unprivileged = ctrl.is_unprivileged(dev_id);
    match ctrl.delete(dev_id) {
        Err(Error::Command { source, .. }) if source.raw_os_error() == Some(libc::ENODEV) => Ok(()),
        Err(Error::Command { source, .. }) if unprivileged && source.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        other => other,
    }
}

fn spawn_queue(cfg: QueueConfig, events: mpsc::Sender<Event>) -> Result<JoinHandle<Result<QueueStats, Error>>, Error> {
    let q_id = cfg.q_id;
    std::thread::Builder::new()
        .name(format!("ublk-q{q_id}"))
        .spawn(move || {
            if let Err(e) = mqblk::cpus::pin_current_thread(&cfg.cpus) {
                log::warn!("queue {q_id}: pinning its thread to {}: {e}", affinity::cpu_list(&cfg.cpus));
            }
            let setup = Queue::new(cfg).and_then(|mut q| q.fetch_all().map(|()| q));
            let queue = match setup {
                Ok(q) => q,
                Err(e) => {
                    // The server reports it (and stops the device).
                    let _ = events.send(Event::SetupFailed(q_id, e));
                    return Ok(QueueStats::default());
                }
            };
            let _ = events.send(Event::Ready(q_id));
            let result = queue.serve();
            let _ = events.send(Event::Exited(q_id));
            result
        })
        .map_err(|e| Error::Queue { q_id, what: "spawning its thread", source: e })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_out_of_range_are_refused() {
        let device = {
            mqblk_null::register();
            Device::open("null:gb=1").unwrap()
        };
        for (queues, depth) in [(0, 64), (1, 0), (1, 4097), (4097, 1)] {
            let opts = Options { queues, depth, ..Options::default() };
            assert!(matches!(Server::new(device.clone(), opts), Err(Error::BadOption(_))), "{queues} x {depth}");
        }
    }

    #[test]
    fn zoned_devices_get_user_copy_and_zoned_params() {
        let device = {
            mqblk_null::register();
            Device::open("null:gb=1,zoned=1,zone_size=64,zone_max_open=3,zone_max_active=5").unwrap()
        };
        let limits = device.limits();
        assert_eq!(device_flags(limits), uapi::UBLK_F_CMD_IOCTL_ENCODE | uapi::UBLK_F_USER_COPY | uapi::UBLK_F_ZONED);
        let p = params_for(limits, max_io_bytes(limits));
        assert_eq!(p.types & uapi::UBLK_PARAM_TYPE_ZONED, uapi::UBLK_PARAM_TYPE_ZONED);
        assert_eq!(p.basic.chunk_sectors, 64 * 2048, "the zone size, in sectors");
        assert_eq!(
            (p.basic.max_sectors, max_io_bytes(limits)),
            (255, 131_072),
            "null_blk's max_sectors, in a 128 KiB buffer"
        );
        assert_eq!((p.zoned.max_open_zones, p.zoned.max_active_zones), (3, 5));
        assert!(p.zoned.max_zone_append_sectors > 0 && p.zoned.max_zone_append_sectors <= p.basic.max_sectors);
        assert!(Server::new(device.clone(), Options::default()).is_ok());

        let plain = {
            mqblk_null::register();
            Device::open("null:gb=1").unwrap()
        };
        assert_eq!(device_flags(plain.limits()), uapi::UBLK_F_CMD_IOCTL_ENCODE);
        assert_eq!(params_for(plain.limits(), MAX_IO_BYTES as u32).types & uapi::UBLK_PARAM_TYPE_ZONED, 0);
    }

    #[test]
    fn zoned_geometry_ublk_cannot_carry_is_refused_by_name() {
        let mut limits = QueueLimits::new(1 << 30, 512);
        limits.zoned = Some(mqblk::zoned::ZonedLimits {
            zone_sectors: 1 << 17,
            nr_zones: 16,
            max_open_zones: 0,
            max_active_zones: 0,
            zone_append_max_sectors: 0,
        });
        let err = check_zoned(&limits).unwrap_err().to_string();
        assert!(err.contains("zone append"), "{err}");
        limits.zoned.as_mut().unwrap().zone_append_max_sectors = 256;
        assert!(check_zoned(&limits).is_ok());
        limits.capacity_bytes += 4096;
        let err = check_zoned(&limits).unwrap_err().to_string();
        assert!(err.contains("not a whole number"), "{err}");
    }
}
