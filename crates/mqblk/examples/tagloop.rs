//! Profiling target: uncontended sbitmap get + clear in a loop.
use mqblk::sbitmap::{AllocHint, Sbitmap};
fn main() {
    let sb = Sbitmap::new(128, None, false);
    let mut hint = AllocHint::new(0);
    let n = 200_000_000u64;
    let t = std::time::Instant::now();
    for _ in 0..n {
        let bit = sb.get(&mut hint).unwrap();
        sb.clear(std::hint::black_box(bit), Some(&mut hint));
    }
    println!("{:.2} ns per get+clear", t.elapsed().as_nanos() as f64 / n as f64);
}
