//! What every null_blk integration test needs: `Device::open` with the
//! drivers registered (null, and file for the tests that compare with it).
#![allow(dead_code)] // each test binary uses what it needs

/// `Device::open` with `null:` and `file:` registered.
pub fn open(spec: &str) -> Result<mqblk::Device, mqblk::Error> {
    mqblk_null::register();
    mqblk_file::register();
    mqblk::Device::open(spec)
}

/// `cases` random cases natively; a few under Miri, which also has no
/// getcwd in its isolation for proptest's file of failing cases.
pub fn proptest_config(cases: u32) -> proptest::prelude::ProptestConfig {
    let mut config = proptest::prelude::ProptestConfig::with_cases(if cfg!(miri) { 3 } else { cases });
    if cfg!(miri) {
        config.failure_persistence = None;
    }
    config
}
