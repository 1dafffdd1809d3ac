//! A null device from typed configs (`Device::builder(NullConfig)`, and a
//! file device from `FileConfig`): the same checks as a spec's, with errors
//! naming the spec key, and the same device.

use mqblk::{Device, DeviceConfig};
use mqblk_file::FileConfig;
use mqblk_null::{IrqMode, NullConfig};

#[test]
fn typed_values_are_checked_like_spec_keys() {
    let e = Device::builder(NullConfig::new().bs(1000)).build().unwrap_err().to_string();
    assert!(e.contains("'bs'"), "{e}");
    let e = Device::builder(NullConfig::new().irqmode(IrqMode::None).hw_queue_depth(0)).build();
    assert!(e.unwrap_err().to_string().contains("hw_queue_depth"));
    let e = Device::builder(NullConfig::new().discard(true)).build().unwrap_err().to_string();
    assert!(e.contains("memory_backed"), "{e}");
    let e = Device::builder(FileConfig::new("/nonexistent/x").queue_depth(0)).build();
    assert!(e.unwrap_err().to_string().contains("queue_depth"));
    let e = Device::builder(NullConfig::new().gb(1)).nr_requests(2).build().unwrap_err().to_string();
    assert!(e.contains("nr_requests") && e.contains("4..=65536"), "the queue's values are checked too: {e}");
}

#[test]
fn a_built_device_matches_its_spec() {
    mqblk_null::register();
    let built =
        Device::builder(NullConfig::new().gb(2).bs(4096).submit_queues(2).max_sectors(255).irqmode(IrqMode::None))
            .sched("bfq,limit_depths=0".parse().unwrap())
            .nr_requests(16)
            .build()
            .unwrap();
    let spec = "null:gb=2,bs=4096,submit_queues=2,irqmode=0,sched=bfq,limit_depths=0,nr_requests=16";
    let opened = Device::open(spec).unwrap();
    assert_eq!(built.limits(), opened.limits());
    assert_eq!(built.tag_set(), opened.tag_set());
    assert_eq!(built.scheduler(), "bfq");
    assert_eq!(built.limits().max_sectors, 248, "aligned down to the block size, as a spec's");
}

#[test]
fn a_parsed_config_is_adjusted_by_type_and_prints_the_change() {
    mqblk_null::register();
    let mut cfg = DeviceConfig::parse("null:gb=1,memory_backed=1").unwrap();
    assert!(cfg.driver::<FileConfig>().is_none(), "a null spec has a NullConfig");
    let null = cfg.driver_mut::<NullConfig>().unwrap();
    assert_eq!(null.irqmode, None, "not chosen by the spec");
    null.irqmode = Some(IrqMode::None);
    cfg.queue_mut().sched = "mq-deadline,fifo_batch=4".parse().unwrap();
    assert_eq!(cfg.to_string(), "null:gb=1,irqmode=0,memory_backed=1,sched=mq-deadline,fifo_batch=4");
    let dev = cfg.build().unwrap();
    assert_eq!(dev.scheduler(), "mq-deadline");
    assert!(dev.show_stats().contains("irqmode=0"), "{}", dev.show_stats());
}
