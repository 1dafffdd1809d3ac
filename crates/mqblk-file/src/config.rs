//! The `file:` driver's typed configuration, [`FileConfig`]: the keys of
//! the table in lib.rs, parsed once from a spec, checked as a whole,
//! printed back as the keys that differ from their defaults, and opened as
//! a `FileDriver` (mqblk's `DriverConfig`).
//!
//! Relies on: mqblk's spec grammar; lib.rs (`FileDriver`).

use mqblk::config::{check_range, ConfigError, SpecParams, SpecWriter};
use mqblk::driver::{Driver, DriverConfig};

use super::FileDriver;

/// The keys a `file:` spec accepts (the crate docs' table).
///
/// ```
/// assert!(mqblk_file::FILE_KEYS.contains(&"path"));
/// ```
pub const FILE_KEYS: &[&str] = &[
    "path",
    "direct",
    "size",
    "create",
    "queue_depth",
    "submit_queues",
    "poll_queues",
    "bs",
    "registerfiles",
    "readonly",
    "reap",
    "single_issuer",
];

const QUEUE_DEPTH: (u64, u64) = (1, 4096);
const SUBMIT_QUEUES: (u64, u64) = (1, 64);
const POLL_QUEUES: (u64, u64) = (0, 64);
const BS: (u64, u64) = (512, 65536);

/// Who reaps a ring's completions (`reap=`).
///
/// ```
/// use mqblk::{Bio, Buf, Device};
/// use mqblk_file::{FileConfig, Reap};
///
/// let path = std::env::temp_dir().join(format!("mqblk-file-reap-{}.img", std::process::id()));
/// let cfg = FileConfig::new(path.to_str().unwrap()).create(true).size_bytes(1 << 20).reap(Reap::Client);
/// let dev = Device::builder(cfg).build()?;
/// let mut client = dev.client();
/// client.submit(Bio::write(0, Buf::new(4096)), 1)?;
/// // No completion thread: this client reaps its ring in do_io.
/// let mut done = Vec::new();
/// client.do_io(&mut done, 1, 1, None)?;
/// assert!(done[0].status.is_ok());
/// drop((client, dev));
/// std::fs::remove_file(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reap {
    /// A completion thread per ring reaps it and wakes clients.
    Thread,
    /// No completion thread: a client waiting for its I/O reaps its ring
    /// itself, sleeping in io_uring_enter (fio's io_uring engine's way).
    Client,
}

/// The `file:` spec's parameters: `FileConfig::new(path)` has the defaults
/// of the module table, changed by a setter named as each field. The ring
/// layout (`reap`, `submit_queues`, `poll_queues`) stays None until chosen,
/// so that a front end whose clients reap may choose for a spec that did
/// not ([`FileConfig::reaped_by_clients`]).
///
/// ```
/// use mqblk::config::SpecParams;
/// use mqblk::Device;
/// use mqblk_file::{FileConfig, Reap};
///
/// let cfg = FileConfig::new("/tmp/disk.img")
///     .size_bytes(64 << 20)
///     .create(true)
///     .bs(4096)
///     .queue_depth(64)
///     .submit_queues(2)
///     .poll_queues(0)
///     .reap(Reap::Thread)
///     .direct(false)
///     .register_files(true)
///     .readonly(false)
///     .single_issuer(false);
/// cfg.validate()?;
/// assert_eq!((cfg.nr_submit_queues(), cfg.nr_poll_queues(), cfg.reaped_by_client()), (2, 0, false));
/// let spec = Device::builder(cfg.clone()).to_string();
/// let expected = concat!(
///     "file:path=/tmp/disk.img,size=67108864,create=1,queue_depth=64,",
///     "submit_queues=2,poll_queues=0,bs=4096,reap=thread",
/// );
/// assert_eq!(spec, expected);
/// assert_eq!(FileConfig::from_params(&SpecParams::parse(&spec)?)?, cfg);
///
/// // A front end whose clients reap chooses the ring layout for a spec that did not.
/// let mut plain = FileConfig::new("/tmp/disk.img");
/// assert_eq!((plain.nr_submit_queues(), plain.nr_poll_queues()), (1, 0));
/// assert!(plain.reaped_by_clients(4));
/// assert_eq!((plain.reap, plain.nr_submit_queues()), (Some(Reap::Client), 4));
/// assert!(!cfg.clone().reaped_by_clients(4), "this one chose");
///
/// // Checks name the key.
/// assert!(FileConfig::new("").validate().unwrap_err().to_string().contains("path"));
/// assert!(FileConfig::new("/x").bs(1000).validate().unwrap_err().to_string().contains("bs"));
/// # Ok::<(), mqblk::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileConfig {
    pub path: String,
    pub direct: bool,
    pub size_bytes: Option<u64>,
    pub create: bool,
    pub queue_depth: u32,
    /// `submit_queues` (None: 1).
    pub submit_queues: Option<usize>,
    /// `poll_queues` (None: 0).
    pub poll_queues: Option<usize>,
    pub bs: Option<u32>,
    pub register_files: bool,
    pub readonly: bool,
    /// `reap` (None: a completion thread per ring).
    pub reap: Option<Reap>,
    /// `single_issuer=1` (needs reap=client).
    pub single_issuer: bool,
}

impl FileConfig {
    /// The defaults of the module table, on `path`.
    pub fn new(path: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            direct: false,
            size_bytes: None,
            create: false,
            queue_depth: 128,
            submit_queues: None,
            poll_queues: None,
            bs: None,
            register_files: true,
            readonly: false,
            reap: None,
            single_issuer: false,
        }
    }

    /// Device size in bytes (`size=`; default: the file's).
    pub fn size_bytes(mut self, size_bytes: u64) -> Self {
        self.size_bytes = Some(size_bytes);
        self
    }

    /// Logical block size (`bs=`).
    pub fn bs(mut self, bs: u32) -> Self {
        self.bs = Some(bs);
        self
    }

    /// Hardware queues, a ring each (`submit_queues=`).
    pub fn submit_queues(mut self, n: usize) -> Self {
        self.submit_queues = Some(n);
        self
    }

    /// Poll queues, IOPOLL rings (`poll_queues=`).
    pub fn poll_queues(mut self, n: usize) -> Self {
        self.poll_queues = Some(n);
        self
    }

    /// Who reaps the rings (`reap=`).
    pub fn reap(mut self, reap: Reap) -> Self {
        self.reap = Some(reap);
        self
    }

    mqblk::setters! {
        direct: bool,
        create: bool,
        queue_depth: u32,
        register_files: bool,
        readonly: bool,
        single_issuer: bool,
    }

    /// Hardware queues (rings) in effect: `submit_queues`, else 1.
    pub fn nr_submit_queues(&self) -> usize {
        self.submit_queues.unwrap_or(1)
    }

    /// Poll queues in effect: `poll_queues`, else 0.
    pub fn nr_poll_queues(&self) -> usize {
        self.poll_queues.unwrap_or(0)
    }

    /// Whether clients reap the rings (`reap=client`).
    pub fn reaped_by_client(&self) -> bool {
        self.reap == Some(Reap::Client)
    }

    /// The fast layout for `nr_clients` clients that reap (they wait in
    /// `do_io`, or on a completion fd, which is then registered with their
    /// ring): `reap=client` and a ring per client, as fio's io_uring engine
    /// runs, unless the config chose its ring layout (`reap`,
    /// `submit_queues` or `poll_queues`). The driver's own default (a
    /// completion thread per ring waking the clients) suits any client, but
    /// costs about half the IOPS of a tmpfs file at QD32 (BENCHMARKS.md,
    /// "The C library"). `mqblk bench` and the C library, whose clients
    /// reap, open file devices this way. Returns whether it chose.
    pub fn reaped_by_clients(&mut self, nr_clients: usize) -> bool {
        if self.reap.is_some() || self.submit_queues.is_some() || self.poll_queues.is_some() {
            return false;
        }
        self.reap = Some(Reap::Client);
        self.submit_queues = Some(nr_clients.clamp(1, SUBMIT_QUEUES.1 as usize));
        true
    }

    /// Parses a `file:` spec's keys (the block layer's are taken out
    /// before), then `validate`.
    pub fn from_params(p: &SpecParams) -> Result<Self, ConfigError> {
        p.check_keys(FILE_KEYS)?;
        let path = p.raw("path").ok_or_else(|| p.conflict("path=... is required (a file or a block device)"))?;
        let optional = |key: &str, (min, max): (u64, u64)| -> Result<Option<u64>, ConfigError> {
            p.is_set(key).then(|| p.u64_in(key, 0, min, max)).transpose()
        };
        let cfg = Self {
            path: path.to_string(),
            direct: p.bool("direct", false)?,
            size_bytes: parse_bytes(p, "size")?,
            create: p.bool("create", false)?,
            queue_depth: p.u64_in("queue_depth", 128, QUEUE_DEPTH.0, QUEUE_DEPTH.1)? as u32,
            submit_queues: optional("submit_queues", SUBMIT_QUEUES)?.map(|n| n as usize),
            poll_queues: optional("poll_queues", POLL_QUEUES)?.map(|n| n as usize),
            bs: optional("bs", BS)?.map(|n| n as u32),
            register_files: p.bool("registerfiles", true)?,
            readonly: p.bool("readonly", false)?,
            reap: match p.raw("reap") {
                None => None,
                Some(_) => Some(match p.choice("reap", "thread", &["thread", "client"])? {
                    "client" => Reap::Client,
                    _ => Reap::Thread,
                }),
            },
            single_issuer: p.bool("single_issuer", false)?,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks every value, as a spec's parse would: errors name the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.path.is_empty() {
            return Err(ConfigError::conflict("file", "path=... is required (a file or a block device)"));
        }
        check_range("file", "queue_depth", self.queue_depth.into(), QUEUE_DEPTH)?;
        check_range("file", "submit_queues", self.nr_submit_queues() as u64, SUBMIT_QUEUES)?;
        check_range("file", "poll_queues", self.nr_poll_queues() as u64, POLL_QUEUES)?;
        if let Some(bs) = self.bs {
            check_range("file", "bs", bs.into(), BS)?;
            if !bs.is_power_of_two() {
                return Err(ConfigError::conflict("file", format!("bs={bs} is not a power of two")));
            }
        }
        if self.path.contains(',') {
            return Err(ConfigError::BadValue {
                driver: "file".into(),
                key: "path".into(),
                value: self.path.clone(),
                expected: "a path without ',' (it separates a spec's keys)".into(),
            });
        }
        Ok(())
    }
}

impl DriverConfig for FileConfig {
    fn driver_name(&self) -> &str {
        "file"
    }

    fn validate(&self) -> Result<(), ConfigError> {
        FileConfig::validate(self)
    }

    fn write_spec(&self, w: &mut SpecWriter) {
        let d = FileConfig::new("");
        w.pair("path", &self.path);
        w.flag_if_not("direct", self.direct, d.direct);
        if let Some(size) = self.size_bytes {
            w.pair("size", size);
        }
        w.flag_if_not("create", self.create, d.create);
        w.pair_if_not("queue_depth", self.queue_depth, d.queue_depth);
        if let Some(n) = self.submit_queues {
            w.pair("submit_queues", n);
        }
        if let Some(n) = self.poll_queues {
            w.pair("poll_queues", n);
        }
        if let Some(bs) = self.bs {
            w.pair("bs", bs);
        }
        w.flag_if_not("registerfiles", self.register_files, d.register_files);
        w.flag_if_not("readonly", self.readonly, d.readonly);
        if let Some(reap) = self.reap {
            w.pair("reap", if reap == Reap::Client { "client" } else { "thread" });
        }
        w.flag_if_not("single_issuer", self.single_issuer, d.single_issuer);
    }

    fn open(&self) -> Result<Box<dyn Driver>, mqblk::Error> {
        Ok(Box::new(FileDriver::new(self.clone())?))
    }
}

/// "4096", "64k", "1g": bytes.
fn parse_bytes(p: &SpecParams, key: &str) -> Result<Option<u64>, ConfigError> {
    let Some(v) = p.raw(key) else { return Ok(None) };
    let (num, shift) = match v.chars().last().map(|c| c.to_ascii_lowercase()) {
        Some('k') => (&v[..v.len() - 1], 10),
        Some('m') => (&v[..v.len() - 1], 20),
        Some('g') => (&v[..v.len() - 1], 30),
        Some('t') => (&v[..v.len() - 1], 40),
        _ => (v, 0),
    };
    let bad = || ConfigError::BadValue {
        driver: p.driver.clone(),
        key: key.into(),
        value: v.into(),
        expected: "a byte count such as 1048576, 64k, 4g".into(),
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    n.checked_mul(1 << shift).map(Some).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(spec: &str) -> FileConfig {
        FileConfig::from_params(&SpecParams::parse(spec).unwrap()).unwrap()
    }

    #[test]
    fn a_plain_file_config_gets_a_reaped_ring_per_client() {
        let mut c = parse("file:path=/x");
        assert!(c.reaped_by_clients(2));
        assert_eq!((c.reap, c.submit_queues), (Some(Reap::Client), Some(2)));
        let mut c = parse("file:path=/x,direct=1");
        assert!(c.reaped_by_clients(0));
        assert_eq!(c.submit_queues, Some(1), "at least one ring");
        let mut c = parse("file:path=/x");
        assert!(c.reaped_by_clients(500));
        assert_eq!(c.submit_queues, Some(64), "at most the largest submit_queues");
        // A path that merely contains a key's name names no key.
        assert!(parse("file:path=/reap=thread").reaped_by_clients(1));
    }

    #[test]
    fn a_config_that_chose_its_rings_is_left_alone() {
        for spec in ["file:path=/x,reap=thread", "file:path=/x,submit_queues=3", "file:path=/x,poll_queues=1"] {
            let mut c = parse(spec);
            let before = c.clone();
            assert!(!c.reaped_by_clients(4), "{spec}");
            assert_eq!(c, before, "{spec}");
        }
    }

    #[test]
    fn a_config_prints_as_its_spec() {
        for spec in ["file:path=/x", "file:path=/x,direct=1,size=65536,queue_depth=32,reap=client,submit_queues=2"] {
            let c = parse(spec);
            let mut w = SpecWriter::new("file");
            c.write_spec(&mut w);
            assert_eq!(parse(&w.finish()), c, "{spec}");
        }
        let e = FileConfig::new("/x").queue_depth(0).validate().unwrap_err().to_string();
        assert!(e.contains("queue_depth"), "{e}");
    }
}
