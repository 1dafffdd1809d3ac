//! The differences between the Linux 6.12 default and zoned_compat=6.1
//! (the module doc), each in both modes. The rest of the state machine
//! is tests/zoned.rs's.

use mqblk::zoned::{ZoneCond, ZoneMgmt};
use mqblk::{Bio, Buf, Client, Device, Error, Status};

const ZS: u64 = 131_072; // sectors in a 64 MiB zone
const ZB: u64 = ZS * 512;

fn open(spec: &str) -> Result<Device, mqblk::Error> {
    crate::register();
    Device::open(spec)
}

fn dev(extra: &str) -> Device {
    open(&format!("null:gb=1,zoned=1,zone_size=64{extra}")).unwrap()
}

fn run(c: &mut Client, bio: Bio) -> Status {
    match c.submit_and_wait_completion(bio) {
        Ok(done) => done.status,
        Err(Error::Submit(e)) => e.status(),
        Err(e) => panic!("{e}"),
    }
}

fn write(c: &mut Client, z: u64, off: u64, sectors: u64) -> Status {
    run(c, Bio::write(z * ZB + off * 512, Buf::new((sectors * 512) as usize)))
}

fn mgmt(c: &mut Client, op: ZoneMgmt, z: u64) -> Status {
    run(c, Bio::zone_mgmt(op, z * ZB))
}

/// (condition, wp - start) of zone `z`; a report, so on 6.12 it also
/// clears the zone's mark.
fn cond(d: &Device, z: usize) -> (ZoneCond, u64) {
    let zone = d.zones().unwrap().report(0, 1 << 20).unwrap()[z];
    (zone.cond, zone.wp - zone.start)
}

#[test]
fn after_a_failed_write_6_12_refuses_writes_until_a_report_and_6_1_does_not() {
    let d = dev("");
    let mut c = d.client();
    assert_eq!(write(&mut c, 1, 8, 8), Status::IoErr, "off the write pointer");
    assert_eq!(write(&mut c, 1, 0, 8), Status::IoErr, "6.12: at the wp, but the zone waits for a report");
    assert_eq!(mgmt(&mut c, ZoneMgmt::Open, 1), Status::Ok);
    assert_eq!(write(&mut c, 1, 0, 8), Status::IoErr, "an open does not tell the wp");
    assert_eq!(cond(&d, 1), (ZoneCond::ExpOpen, 0), "nothing was written; the report clears the mark");
    assert_eq!(write(&mut c, 1, 0, 8), Status::Ok);
    assert_eq!(cond(&d, 1), (ZoneCond::ExpOpen, 8));

    let d = dev(",zoned_compat=6.1");
    let mut c = d.client();
    assert_eq!(write(&mut c, 1, 8, 8), Status::IoErr);
    assert_eq!(write(&mut c, 1, 0, 8), Status::Ok, "6.1: no zone write plug to wait on");
    assert_eq!(cond(&d, 1), (ZoneCond::ImpOpen, 8));
}

#[test]
fn reset_finish_and_reset_all_clear_the_mark_and_failed_ones_do_not() {
    let d = dev(",zone_nr_conv=1,zone_max_active=2");
    let mut c = d.client();
    for z in [1, 2, 3] {
        assert_eq!(write(&mut c, z, 8, 8), Status::IoErr);
    }
    assert_eq!(mgmt(&mut c, ZoneMgmt::Reset, 1), Status::Ok, "reset of an EMPTY zone succeeds");
    assert_eq!(write(&mut c, 1, 0, 8), Status::Ok);
    assert_eq!(mgmt(&mut c, ZoneMgmt::Finish, 2), Status::Ok);
    assert_eq!(write(&mut c, 2, ZS - 8, 8), Status::IoErr, "FULL takes no write");
    assert_eq!(mgmt(&mut c, ZoneMgmt::Reset, 2), Status::Ok);
    assert_eq!(write(&mut c, 2, 0, 8), Status::Ok);
    // Zones 1 and 2 are active: finishing EMPTY zone 3 needs a third.
    assert_eq!(mgmt(&mut c, ZoneMgmt::Finish, 3), Status::ZoneActiveResource);
    assert_eq!(write(&mut c, 3, 0, 8), Status::IoErr, "a failed finish leaves the mark");
    assert_eq!(run(&mut c, Bio::zone_reset_all()), Status::Ok);
    assert_eq!(write(&mut c, 3, 0, 8), Status::Ok, "reset all clears every mark");
    // The conventional zone has no write plug: its failures mark nothing.
    assert_eq!(run(&mut c, Bio::zone_append(0, Buf::new(4096))), Status::IoErr);
    assert_eq!(write(&mut c, 0, 8, 8), Status::Ok);
}

#[test]
fn a_native_zone_append_is_not_held_back_and_drops_the_mark() {
    let d = dev("");
    let mut c = d.client();
    assert_eq!(write(&mut c, 1, 8, 8), Status::IoErr);
    assert_eq!(run(&mut c, Bio::zone_append(ZB, Buf::new(4096))), Status::Ok);
    assert_eq!(write(&mut c, 1, 8, 8), Status::Ok, "the append removed the zone's plug");
    assert_eq!(cond(&d, 1), (ZoneCond::ImpOpen, 16));
}

#[test]
fn zone_full_starts_sequential_zones_full_at_their_capacity_on_6_12_only() {
    let d = dev(",zone_capacity=48,zone_nr_conv=1,zone_full=1");
    assert_eq!(cond(&d, 0), (ZoneCond::NotWp, ZS));
    assert_eq!(cond(&d, 1), (ZoneCond::Full, 98_304), "wp at the capacity, not the zone's end");
    let mut c = d.client();
    assert_eq!(write(&mut c, 1, 98_304, 8), Status::IoErr);
    assert_eq!(mgmt(&mut c, ZoneMgmt::Reset, 1), Status::Ok);
    assert_eq!(write(&mut c, 1, 0, 8), Status::Ok);
    let e = open("null:gb=1,zoned=1,zone_size=64,zone_full=1,zoned_compat=6.1").unwrap_err();
    assert!(e.to_string().contains("zone_full=1 came with Linux 6.12"), "{e}");
    assert!(dev(",zone_full=0,zoned_compat=6.1").zones().unwrap().report(0, 1).unwrap()[0].cond == ZoneCond::Empty);
}

#[test]
fn zone_append_limit_is_capped_at_the_capacity_and_aligned_on_6_12() {
    let limit = |extra: &str| dev(extra).limits().zoned.unwrap().zone_append_max_sectors;
    assert_eq!(limit(",zone_capacity=48"), 98_304, "6.12 default: the capacity");
    assert_eq!(limit(",zone_capacity=48,zoned_compat=6.1"), ZS as u32, "6.1: the zone size");
    assert_eq!(limit(",bs=4096,zone_append_max_sectors=1001"), 1000, "aligned down to 8 sectors");
    assert_eq!(limit(",zone_capacity=1,zone_append_max_sectors=4000"), 2048, "at most the capacity");
    assert_eq!(limit(",zone_capacity=1,zone_append_max_sectors=4000,zoned_compat=6.1"), 4000);
    assert_eq!(limit(",bs=4096,zone_append_max_sectors=7"), ZS as u32, "below one block: the default");
}

#[test]
fn a_smaller_last_zone_with_a_smaller_capacity_is_refused_in_both_modes() {
    for compat in ["", ",zoned_compat=6.1"] {
        let spec = format!("null:gb=3,zoned=1,zone_size=2048,zone_capacity=1500{compat}");
        let e = open(&spec).unwrap_err();
        assert!(e.to_string().contains("smaller last zone"), "{spec}: {e}");
        let runt = open(&format!("null:gb=3,zoned=1,zone_size=2048{compat}")).unwrap();
        let zones = runt.zones().unwrap().report(0, 4).unwrap();
        assert_eq!((zones.len(), zones[1].len, zones[1].capacity), (2, 2_097_152, 2_097_152), "{spec}");
    }
}

/// zone_lock=global is null_blk before "null_blk: improve zone locking":
/// its device `zone_lock` was the only lock a command took (without
/// memory backing). Under it a zone's own lock stays free; under per-zone
/// locks it is the one taken.
#[test]
fn under_the_global_zone_lock_no_zone_lock_is_taken() {
    use super::{NullZoned, ZoneLock, ZonedConfig};

    for memory_backed in [false, true] {
        for (lock, zone_locked) in [(ZoneLock::Global, false), (ZoneLock::PerZone, true)] {
            let cfg = ZonedConfig::new().zone_size_mb(64).zone_lock(lock);
            let z = NullZoned::new(&cfg, 1 << 30, 512, memory_backed).unwrap();
            let global = z.lock_global();
            assert_eq!(global.is_some(), lock == ZoneLock::Global);
            let st = z.lock_zone(3);
            assert_eq!(st.cond, ZoneCond::Empty);
            assert_eq!(z.zones[3].is_locked(), zone_locked, "{lock:?}, memory_backed={memory_backed}");
            drop(st);
            assert!(!z.zones[3].is_locked(), "{lock:?}: released");
            drop(global);
            let mut out = Vec::new();
            z.report(3 * ZS, 2, &mut out);
            assert_eq!(out.len(), 2);
            assert!(z.zones.iter().all(|m| !m.is_locked()), "{lock:?}: a report leaves every zone lock free");
        }
    }
}
