//! [`Device`]: the public, cloneable handle on a request queue (queue/):
//! open one from a spec or typed configs, take a [`Client`] per thread,
//! read its limits and stats, switch its scheduler, and ask it for the
//! capabilities its driver offers (caps.rs).
//!
//! Relies on: queue/ (the request queue), client/ (clients), driver/ (the
//! driver and its capabilities), config.rs (typed configs and specs).

mod caps;
mod config;
mod direct;
mod zones;

use std::sync::Arc;
use std::time::Duration;

use crate::client::Client;
use crate::driver::Driver;
use crate::error::Error;
use crate::limits::QueueLimits;
use crate::queue::{DeviceStats, QueueConfig, RequestQueue};
use crate::sched::Sched;
use crate::sync::Ordering;
use crate::tag::TagSetConfig;
use crate::trace::TraceStats;

pub use caps::{Attrs, BlockStatusMap, Power, RegisteredBuffers};
pub use config::DeviceConfig;
pub use direct::DirectReads;
pub use zones::Zones;

/// A block device: a cheap, cloneable handle on a request queue. When the
/// last handle and the last client are gone, the device is shut down
/// (its threads joined, a backing file flushed and unlocked) before that
/// drop returns.
///
/// ```
/// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
/// # ram::register();
/// use mqblk::Device;
///
/// let dev = Device::open("ram:size=64,submit_queues=2,poll_queues=0,hw_queue_depth=32,bs=4096")?;
/// assert_eq!(dev.driver_name(), "ram");
/// assert_eq!((dev.limits().capacity_bytes, dev.limits().logical_block_size), (64 << 20, 4096));
/// assert_eq!((dev.nr_hw_queues(), dev.tag_set().queue_depth), (2, 32));
///
/// let other = dev.clone(); // the same device
/// let mut client = other.client();
/// client.write_at(&[0; 4096], 0)?;
/// assert_eq!(dev.stats().completed, 1);
/// assert_eq!(dev.busy_tags(), 0, "nothing in flight");
/// assert!(dev.show_stats().contains("hctx0"));
/// # Ok::<(), mqblk::Error>(())
/// ```
pub struct Device {
    pub(crate) q: Arc<RequestQueue>,
}

impl Clone for Device {
    fn clone(&self) -> Self {
        self.q.get_user();
        Self { q: self.q.clone() }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.q.put_user();
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("driver", &self.q.driver.name())
            .field("limits", &self.q.limits)
            .field("tag_set", &self.q.tag_set)
            .finish()
    }
}

impl Device {
    /// Opens a device from a spec such as
    /// `null:irqmode=2,completion_nsec=20000,memory_backed=1`.
    /// Block-layer keys (`wake=`, `sched=` and its tunables, ...) may appear
    /// in any driver's spec. The driver is one registered by name
    /// ([`register_driver`](crate::driver::register_driver); mqblk-null's `register` adds `null`).
    ///
    /// ```
    /// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
    /// # ram::register();
    /// use mqblk::{ConfigError, Device, Error};
    ///
    /// let dev = Device::open("ram:size=64,irqmode=0,sched=mq-deadline,read_expire=100")?;
    /// assert_eq!(dev.scheduler(), "mq-deadline");
    ///
    /// // Errors name the key and what it accepts.
    /// let Err(Error::Config(e)) = Device::open("ram:size=64,irqmod=0") else { panic!() };
    /// assert!(matches!(e, ConfigError::UnknownKey { ref key, .. } if key == "irqmod"));
    /// assert!(e.to_string().contains("did you mean 'irqmode'?"));
    /// assert!(matches!(Device::open("nosuch:gb=1"), Err(Error::Config(ConfigError::UnknownDriver { .. }))));
    /// # Ok::<(), mqblk::Error>(())
    /// ```
    pub fn open(spec: &str) -> Result<Device, Error> {
        DeviceConfig::parse(spec)?.build()
    }

    /// A device over any driver, with the default block-layer options.
    ///
    /// ```
    /// use mqblk::driver::{Driver, Hctx, QueueRqResult, Rq};
    /// use mqblk::{Device, QueueConfig, QueueLimits, Sched, Status, TagSetConfig};
    ///
    /// /// Completes every request at once.
    /// struct Nop;
    ///
    /// impl Driver for Nop {
    ///     fn name(&self) -> &str { "nop" }
    ///     fn tag_set(&self) -> TagSetConfig { TagSetConfig::new(1, 16) }
    ///     fn limits(&self) -> QueueLimits { QueueLimits::new(1 << 20, 512) }
    ///     fn queue_rq(&self, _hctx: &Hctx, rq: Rq, _last: bool) -> QueueRqResult {
    ///         rq.complete(Status::Ok);
    ///         QueueRqResult::Queued
    ///     }
    /// }
    ///
    /// let dev = Device::with_driver(Box::new(Nop))?;
    /// assert_eq!((dev.driver_name(), dev.scheduler()), ("nop", "none".to_string()));
    /// // With block-layer options of its own.
    /// let opts = QueueConfig::default().sched(Sched::Kyber(Default::default()));
    /// let dev = Device::with_driver_options(Box::new(Nop), opts)?;
    /// assert_eq!(dev.scheduler(), "kyber");
    /// dev.client().write_at(&[0; 512], 0)?;
    /// # Ok::<(), mqblk::Error>(())
    /// ```
    pub fn with_driver(driver: Box<dyn Driver>) -> Result<Device, Error> {
        Self::with_driver_options(driver, QueueConfig::default())
    }

    /// A device over any driver with the given block-layer options
    /// (example: [`Device::with_driver`]).
    pub fn with_driver_options(driver: Box<dyn Driver>, opts: QueueConfig) -> Result<Device, Error> {
        opts.validate()?;
        Ok(Device { q: RequestQueue::new(driver, opts)? })
    }

    /// A client whose completion ring holds one hardware queue's depth
    /// (example: [`Client`]).
    pub fn client(&self) -> Client {
        self.client_with_capacity(self.q.tag_set.queue_depth as usize)
    }

    /// A client that may have up to `capacity` I/Os outstanding (rounded up
    /// to a power of two). Clients are spread over the hardware queues
    /// (example: [`Client`]).
    pub fn client_with_capacity(&self, capacity: usize) -> Client {
        assert!(capacity > 0, "client capacity must be positive");
        let shared = self.q.acquire_client(capacity);
        let seq = self.q.client_seq.fetch_add(1, Ordering::Relaxed);
        self.q.get_user();
        Client::new(self.q.clone(), shared, seq)
    }

    /// What the device looks like: capacity, block sizes, request limits.
    pub fn limits(&self) -> &QueueLimits {
        &self.q.limits
    }

    /// The hardware queues and tags its driver asked for.
    pub fn tag_set(&self) -> &TagSetConfig {
        &self.q.tag_set
    }

    /// Hardware queues, poll queues included.
    pub fn nr_hw_queues(&self) -> usize {
        self.q.nr_hw_queues()
    }

    /// The driver's name (`Driver::name`).
    pub fn driver_name(&self) -> &str {
        self.q.driver.name()
    }

    /// Device-wide counters (example: [`DeviceStats`]).
    pub fn stats(&self) -> DeviceStats {
        self.q.stats()
    }

    /// Tags currently allocated over all hardware queues (a snapshot).
    pub fn busy_tags(&self) -> u32 {
        self.q.hctxs.iter().map(|h| h.tags.busy()).sum()
    }

    /// The scheduler in use (`none`, `mq-deadline`, `kyber`, `bfq`).
    pub fn scheduler(&self) -> String {
        self.q.sched_name.lock().clone()
    }

    /// Switches the I/O scheduler of the live device, like writing
    /// `queue/scheduler` (whose string form, `"bfq,limit_depths=0"`,
    /// parses into a [`Sched`]). In-flight requests drain first (new
    /// submissions wait); none is lost. The device's `nr_requests` (its
    /// spec's, or the default) stays. Fails, leaving the scheduler as it
    /// was, on a bad tunable, or if the queue does not drain within 30 s
    /// (a thread holding requests in a plug).
    ///
    /// ```
    /// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
    /// # ram::register();
    /// use mqblk::{Device, Sched};
    ///
    /// let dev = Device::open("ram:size=64,irqmode=0")?;
    /// assert_eq!(dev.scheduler(), "none");
    /// dev.set_scheduler("bfq,slice_idle=0".parse()?)?;
    /// assert_eq!(dev.scheduler(), "bfq");
    /// dev.client().write_at(&[0; 4096], 0)?;
    /// assert_eq!(dev.stats().nr_requests, 128, "2 x min(queue_depth, 128) scheduler tags");
    /// dev.set_scheduler(Sched::None)?;
    /// assert_eq!(dev.stats().nr_requests, 0, "no scheduler, no scheduler tags");
    ///
    /// let dev = Device::open("ram:size=64,irqmode=0,nr_requests=16")?;
    /// dev.set_scheduler("mq-deadline".parse()?)?;
    /// assert_eq!(dev.stats().nr_requests, 16, "the configured nr_requests stays");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_scheduler(&self, sched: Sched) -> Result<(), Error> {
        self.q.set_scheduler(&sched, Duration::from_secs(30))
    }

    /// A debugfs-like dump of every hardware queue and sbitmap.
    pub fn show_stats(&self) -> String {
        self.q.show()
    }

    /// Ends the blktrace of a device opened with `blktrace=DIR`: every
    /// event recorded so far is written to DIR/NAME.blktrace.N (NAME the
    /// driver's name), ready for `blkparse -D DIR -i NAME`; later events
    /// are not. None if the device is not traced. Idempotent: the last
    /// handle's drop ends the trace too, without the stats.
    ///
    /// ```
    /// # mod ram { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/ram.rs")); }
    /// # ram::register();
    /// use mqblk::Device;
    ///
    /// let dir = std::env::temp_dir().join(format!("mqblk-doc-trace-{}", std::process::id()));
    /// let dev = Device::open(&format!("ram:size=64,irqmode=0,blktrace={}", dir.display()))?;
    /// dev.client().write_at(&[1; 4096], 0)?;
    /// let stats = dev.blktrace_stop().expect("traced")?;
    /// assert_eq!((stats.events, stats.dropped, stats.files), (4, 0, 1), "Q, G, D, C on one stream");
    /// assert_eq!(std::fs::metadata(dir.join("ram.blktrace.0"))?.len(), 4 * 48 + 64, "and the thread's name");
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn blktrace_stop(&self) -> Option<Result<TraceStats, Error>> {
        self.q.trace().map(|t| t.stop().map_err(Error::Io))
    }
}
