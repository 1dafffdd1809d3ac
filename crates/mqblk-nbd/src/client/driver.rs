//! `NbdDriver`: a remote NBD export as an mqblk driver. One connection
//! per hardware queue, each with its receiving thread; the export's
//! transmission flags and block sizes become the queue limits.
//!
//! Relies on: conn.rs (sending, timeouts, reconnecting), rx.rs (the
//! threads), handshake.rs (`ExportInfo`), config.rs.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;

use mqblk::driver::{Driver, Hctx, QueueRqResult, Rq, TimedOutRq, TimeoutAction};
use mqblk::{Error, Op, QueueLimits, Status, TagSetConfig};

use super::config::NbdConfig;
use super::conn::{command_of, Conn, Target};
use super::handshake::ExportInfo;
use super::rx;
use super::tls::load_psk;
use crate::proto::*;

/// Physical segments per request: a bio's most (BIO_MAX_VECS), each an
/// iovec of the sendmsg or recvmsg, of any length or address.
const MAX_SEGMENTS: u32 = mqblk::BIO_MAX_VECS as u32;
/// The largest read or write sent, whatever the server allows (the
/// protocol's default maximum payload).
const MAX_TRANSFER_BYTES: u32 = 32 << 20;

/// The `nbd:` driver (example: the module docs, mod.rs).
pub struct NbdDriver {
    cfg: NbdConfig,
    info: ExportInfo,
    limits: QueueLimits,
    conns: Vec<Arc<Conn>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl NbdDriver {
    /// Connects `cfg.connections` times and negotiates each; errors say
    /// which connection failed and why (unreachable, no such export,
    /// exports that differ between connections, block sizes mqblk cannot
    /// use).
    pub fn open(cfg: &NbdConfig) -> Result<Self, Error> {
        use mqblk::driver::DriverConfig;
        cfg.validate()?;
        let uri = cfg.parsed_uri()?;
        let timeout = Duration::from_millis(cfg.timeout_ms);
        // nbds://: the key of the URI's user (or the file's first key).
        let psk = match &cfg.tls_psk {
            Some(file) => Some(load_psk(file, uri.user.as_deref()).map_err(|e| Error::Setup(format!("nbd: {e}")))?),
            None => None,
        };
        let target = Arc::new(Target { uri, structured: cfg.structured, timeout, psk });
        let setup = |what: String| Error::Setup(format!("nbd: {}: {what}", target.uri));
        let mut first = Vec::with_capacity(cfg.connections);
        for i in 0..cfg.connections {
            first.push(target.connect().map_err(|e| setup(format!("connection {i}: {e}")))?);
        }
        let info = first[0].1;
        if let Some((i, (_, other))) = first.iter().enumerate().find(|(_, (_, other))| *other != info) {
            return Err(setup(format!("connection {i} found another export ({other:?}, not {info:?})")));
        }
        let limits = limits_of(&info).map_err(setup)?;
        if cfg.connections > 1 && !info.has(TF_CAN_MULTI_CONN) {
            log::warn!(
                "nbd: {}: {} connections, but the server does not offer multi-conn: a flush covers only its own connection's writes",
                target.uri,
                cfg.connections
            );
        }
        if info.has(TF_READ_ONLY) {
            log::info!("nbd: {}: read-only export: writes fail with EOPNOTSUPP", target.uri);
        }
        let mut conns = Vec::with_capacity(first.len());
        let mut threads = Vec::with_capacity(first.len());
        for (index, (link, _)) in first.into_iter().enumerate() {
            let conn = Arc::new(Conn::new(
                index,
                target.clone(),
                info,
                link.handle(),
                link.fd(),
                cfg.queue_depth,
                MAX_SEGMENTS as usize,
            ));
            let rx_conn = conn.clone();
            let thread = std::thread::Builder::new()
                .name(format!("nbd-rx{index}"))
                .spawn(move || rx::run(rx_conn, link))
                .map_err(|e| Error::Setup(format!("nbd: cannot start a receiving thread: {e}")))?;
            conns.push(conn);
            threads.push(thread);
        }
        Ok(Self { cfg: cfg.clone(), info, limits, conns, threads: Mutex::new(threads) })
    }

    /// What the server said about the export.
    pub fn export_info(&self) -> ExportInfo {
        self.info
    }
}

/// The queue limits of an export: the logical block size is the server's
/// minimum block size (at least 512), the physical one its preferred
/// size, the largest request its maximum (at most 32 MiB); flush, FUA,
/// trim and write zeroes as its transmission flags offer them (none of
/// the writing ones on a read-only export).
pub(crate) fn limits_of(info: &ExportInfo) -> Result<QueueLimits, String> {
    let lbs = info.min_block.max(512);
    if lbs > 65536 {
        return Err(format!("minimum block size {} is larger than mqblk's largest (65536)", info.min_block));
    }
    let capacity = info.size / u64::from(lbs) * u64::from(lbs);
    if capacity == 0 {
        return Err(format!("the export ({} bytes) has no whole block of {lbs} bytes", info.size));
    }
    let max_bytes = info.max_block.min(MAX_TRANSFER_BYTES) / lbs * lbs;
    if max_bytes == 0 {
        return Err(format!("maximum block size {} is below the block size {lbs}", info.max_block));
    }
    let mut l = QueueLimits::new(capacity, lbs);
    l.physical_block_size = info.preferred_block.clamp(lbs, 65536);
    l.max_sectors = max_bytes >> 9;
    l.max_segments = MAX_SEGMENTS;
    l.max_segment_size = u32::MAX;
    l.seg_boundary_mask = u64::MAX;
    l.write_cache = info.has(TF_SEND_FLUSH);
    l.fua = info.has(TF_SEND_FUA);
    l.rotational = info.has(TF_ROTATIONAL);
    // A command's length is 32 bits: the largest whole number of blocks.
    let lbs_sectors = lbs >> 9;
    let max_range = (u32::MAX >> 9) / lbs_sectors * lbs_sectors;
    if !info.has(TF_READ_ONLY) {
        if info.has(TF_SEND_TRIM) {
            l.max_discard_sectors = max_range;
        }
        if info.has(TF_SEND_WRITE_ZEROES) {
            l.max_write_zeroes_sectors = max_range;
        }
    }
    Ok(l)
}

impl Driver for NbdDriver {
    fn name(&self) -> &str {
        "nbd"
    }

    fn tag_set(&self) -> TagSetConfig {
        TagSetConfig::new(self.conns.len(), self.cfg.queue_depth)
    }

    fn limits(&self) -> QueueLimits {
        self.limits.clone()
    }

    fn queue_rq(&self, hctx: &Hctx, rq: Rq, last: bool) -> QueueRqResult {
        let conn = &self.conns[hctx.index()];
        let refused = match command_of(&rq, &self.info) {
            Some(_) if self.info.has(TF_READ_ONLY) && matches!(rq.op(), Op::Write | Op::Discard | Op::WriteZeroes) => {
                Some(Status::NotSupp)
            }
            Some((cmd, flags)) => {
                return match conn.issue(rq, cmd, flags, last) {
                    Ok(()) => QueueRqResult::Queued,
                    Err(rq) => QueueRqResult::Busy(rq),
                };
            }
            // Without a write cache on the server there is nothing to flush.
            None if rq.op() == Op::Flush => Some(Status::Ok),
            None => Some(Status::NotSupp),
        };
        if last {
            conn.commit();
        }
        rq.complete(refused.expect("every other case returned"));
        QueueRqResult::Queued
    }

    fn commit_rqs(&self, hctx: &Hctx) {
        self.conns[hctx.index()].commit();
    }

    fn timeout(&self, _hctx: &Hctx, rq: TimedOutRq) -> TimeoutAction {
        self.conns[rq.hctx_index].timeout(rq.tag)
    }

    fn rq_timeout(&self) -> Option<Duration> {
        Some(Duration::from_millis(self.cfg.timeout_ms))
    }

    /// Stops each connection's thread, which fails what it still holds.
    fn shutdown(&self) {
        for conn in &self.conns {
            conn.stop();
        }
        for thread in self.threads.lock().drain(..) {
            let _ = thread.join();
        }
    }

    fn show(&self, out: &mut String) {
        let i = &self.info;
        let _ = writeln!(
            out,
            "nbd/uri={} size={} flags={:#x} block_sizes={}/{}/{} structured={} connections={} timeout_ms={}",
            self.cfg.uri,
            i.size,
            i.flags,
            i.min_block,
            i.preferred_block,
            i.max_block,
            u8::from(i.structured),
            self.conns.len(),
            self.cfg.timeout_ms
        );
        for c in &self.conns {
            let s = &c.stats;
            let _ = writeln!(
                out,
                "nbd/conn{}: up={} lost={} reconnects={} timeouts={} early_replies={}",
                c.index,
                u8::from(c.is_up()),
                s.lost.load(Ordering::Relaxed),
                s.reconnects.load(Ordering::Relaxed),
                s.timeouts.load(Ordering::Relaxed),
                s.early_replies.load(Ordering::Relaxed)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(flags: u16, sizes: (u32, u32, u32)) -> ExportInfo {
        let (min_block, preferred_block, max_block) = sizes;
        ExportInfo { size: (64 << 20) + 100, flags, min_block, preferred_block, max_block, structured: true }
    }

    #[test]
    fn limits_follow_flags_and_block_sizes() {
        let all = TF_HAS_FLAGS | TF_SEND_FLUSH | TF_SEND_FUA | TF_SEND_TRIM | TF_SEND_WRITE_ZEROES;
        let l = limits_of(&info(all, (1, 4096, 32 << 20))).unwrap();
        assert_eq!((l.logical_block_size, l.physical_block_size, l.capacity_bytes), (512, 4096, 64 << 20));
        assert_eq!(l.max_sectors, 65536);
        assert!(l.write_cache && l.fua && l.max_discard_sectors > 0 && l.max_write_zeroes_sectors > 0);
        let l = limits_of(&info(all | TF_READ_ONLY, (4096, 4096, 1 << 20))).unwrap();
        assert_eq!((l.logical_block_size, l.max_sectors), (4096, 2048));
        assert_eq!((l.max_discard_sectors, l.max_write_zeroes_sectors), (0, 0), "read-only: nothing that writes");
        let l = limits_of(&info(TF_HAS_FLAGS, (512, 512, u32::MAX))).unwrap();
        assert!(!l.write_cache && !l.fua && l.max_discard_sectors == 0);
        assert_eq!(l.max_sectors, MAX_TRANSFER_BYTES >> 9, "capped");
    }

    #[test]
    fn unusable_exports_are_refused_with_the_reason() {
        assert!(limits_of(&info(0, (1 << 17, 1 << 17, 1 << 20))).unwrap_err().contains("minimum block size"));
        assert!(limits_of(&info(0, (1, 1, 256))).unwrap_err().contains("maximum block size"));
        let tiny = ExportInfo { size: 100, ..info(0, (512, 4096, 1 << 20)) };
        assert!(limits_of(&tiny).unwrap_err().contains("no whole block"));
    }
}
