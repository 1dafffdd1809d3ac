//! The NBD request and option parsers on arbitrary bytes: no panic, and
//! whatever parses is within the bounds the parsers promise.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mqblk_nbd::proto::{parse_info_request, parse_meta_request, parse_request, REQUEST_BYTES};

fuzz_target!(|data: &[u8]| {
    if let Ok((name, infos)) = parse_info_request(data) {
        // The name and the info list both came out of `data`.
        assert!(name.len() + 2 * infos.len() + 6 <= data.len());
    }
    if let Ok((name, queries)) = parse_meta_request(data) {
        let bytes: usize = queries.iter().map(|q| q.len() + 4).sum();
        assert!(name.len() + bytes + 8 <= data.len());
    }
    if data.len() >= REQUEST_BYTES {
        let header: &[u8; REQUEST_BYTES] = data[..REQUEST_BYTES].try_into().expect("length checked");
        let _ = parse_request(header);
    }
});
