//! The option and request parsers take any bytes without panicking and
//! accept exactly what they produce (property tests, run with the unit
//! tests; the cargo-fuzz targets in fuzz/ go further, see scripts/fuzz.sh).

use mqblk_nbd::proto::*;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn parsers_never_panic(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = parse_info_request(&data);
        let _ = parse_meta_request(&data);
        let mut h = [0u8; REQUEST_BYTES];
        let n = data.len().min(REQUEST_BYTES);
        h[..n].copy_from_slice(&data[..n]);
        let _ = parse_request(&h);
    }

    #[test]
    fn info_requests_round_trip(name in "[a-z0-9/]{0,40}", infos in proptest::collection::vec(0u16..4, 0..8)) {
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&(infos.len() as u16).to_be_bytes());
        for i in &infos {
            d.extend_from_slice(&i.to_be_bytes());
        }
        prop_assert_eq!(parse_info_request(&d).unwrap(), (name, infos));
    }

    #[test]
    fn meta_requests_round_trip(name in "[a-z]{0,10}", queries in proptest::collection::vec("[a-z:]{0,20}", 0..5)) {
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
        for q in &queries {
            d.extend_from_slice(&(q.len() as u32).to_be_bytes());
            d.extend_from_slice(q.as_bytes());
        }
        prop_assert_eq!(parse_meta_request(&d).unwrap(), (name, queries));
    }
}
