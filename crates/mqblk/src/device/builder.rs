//! `Device::builder()`: a device from typed parts, the driver's config and
//! the block-layer options, with no spec string.
//!
//! ```
//! use mqblk::{Device, IrqMode, NullConfig, Sched, Wake};
//!
//! let dev = Device::builder()
//!     .null(NullConfig::new().gb(1).irqmode(IrqMode::None).memory_backed(true))
//!     .sched(Sched::MqDeadline(Default::default()))
//!     .wake(Wake::Batch)
//!     .build()
//!     .unwrap();
//! assert_eq!(dev.scheduler(), "mq-deadline");
//! dev.client().write_at(&[1u8; 4096], 0).unwrap();
//! ```
//!
//! The spec string `null:gb=1,irqmode=0,memory_backed=1,sched=mq-deadline,
//! wake=batch` builds the same device (`Device::open`); both go through the
//! same checks, whose errors name the spec key.

use super::Device;
use crate::config::{QueueOptions, Wake};
use crate::driver::Driver;
use crate::error::Error;
use crate::plug::PlugNesting;
use crate::sched::Sched;

/// Builds a [`Device`]: choose a driver (`null`, `file` or `driver`),
/// optionally block-layer options, then `build`.
#[must_use]
pub struct DeviceBuilder {
    driver: Option<Box<dyn Driver>>,
    opts: QueueOptions,
}

impl Device {
    /// A builder with no driver yet and the default block-layer options.
    pub fn builder() -> DeviceBuilder {
        DeviceBuilder { driver: None, opts: QueueOptions::default() }
    }
}

impl DeviceBuilder {
    /// Any driver.
    pub fn driver(mut self, driver: Box<dyn Driver>) -> Self {
        self.driver = Some(driver);
        self
    }

    /// The I/O scheduler (`sched=`; default none).
    pub fn sched(mut self, sched: Sched) -> Self {
        self.opts.sched = sched;
        self
    }

    /// The tag wakeup policy (`wake=`; default handoff).
    pub fn wake(mut self, wake: Wake) -> Self {
        self.opts.wake = wake;
        self
    }

    /// Which plug levels flush (`plug_nesting=`).
    pub fn plug_nesting(mut self, plug_nesting: PlugNesting) -> Self {
        self.opts.plug_nesting = plug_nesting;
        self
    }

    /// Are sync bios plugged (`plug_sync=`; default true)? False: they
    /// bypass an active plug, as blk-mq's single-queue path before 4.1.
    pub fn plug_sync(mut self, plug_sync: bool) -> Self {
        self.opts.plug_sync = plug_sync;
        self
    }

    /// Scheduler tags per hardware queue (`nr_requests=`).
    pub fn nr_requests(mut self, nr_requests: u32) -> Self {
        self.opts.nr_requests = Some(nr_requests);
        self
    }

    /// Hybrid polling sleep before spinning, in us (`hybrid_poll_delay=`).
    pub fn hybrid_poll_delay_us(mut self, delay_us: u32) -> Self {
        self.opts.hybrid_poll_delay_us = delay_us;
        self
    }

    /// All block-layer options at once.
    pub fn options(mut self, opts: QueueOptions) -> Self {
        self.opts = opts;
        self
    }

    /// Makes the driver and the device. Fails on a bad value (named as
    /// its spec key), on a driver that cannot start, or with no driver.
    pub fn build(self) -> Result<Device, Error> {
        let Some(driver) = self.driver else {
            return Err(Error::Setup("no driver: call driver() before build()".into()));
        };
        if let Some(nr_requests) = self.opts.nr_requests {
            if !(4..=65536).contains(&nr_requests) {
                return Err(crate::config::ConfigError::BadValue {
                    driver: driver.name().to_string(),
                    key: "nr_requests".into(),
                    value: nr_requests.to_string(),
                    expected: "an integer in 4..=65536".into(),
                }
                .into());
            }
        }
        Device::with_driver_options(driver, self.opts)
    }
}
