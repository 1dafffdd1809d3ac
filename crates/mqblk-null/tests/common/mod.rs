//! What every null_blk integration test needs: `Device::open` with the
//! drivers registered (null, and file for the tests that compare with it).
#![allow(dead_code)] // each test binary uses what it needs

/// `Device::open` with `null:` and `file:` registered.
pub fn open(spec: &str) -> Result<mqblk::Device, mqblk::Error> {
    mqblk_null::register();
    mqblk_file::register();
    mqblk::Device::open(spec)
}
