//! What the NBD server's integration tests share: a client's handshake.

use std::io::{Read, Write};

/// Negotiates fixed newstyle with NO_ZEROES and NBD_OPT_GO to the default
/// export (the empty name, no info requests) on `s`, checking the greeting
/// and the replies: in transmission on return.
pub fn go(s: &mut (impl Read + Write)) {
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).unwrap();
    assert_eq!(&greeting[..8], b"NBDMAGIC");
    s.write_all(&3u32.to_be_bytes()).unwrap();
    let mut opt = b"IHAVEOPT".to_vec();
    opt.extend_from_slice(&7u32.to_be_bytes()); // NBD_OPT_GO
    opt.extend_from_slice(&6u32.to_be_bytes());
    opt.extend_from_slice(&[0; 6]);
    s.write_all(&opt).unwrap();
    loop {
        let mut h = [0u8; 20];
        s.read_exact(&mut h).unwrap();
        let reply = u32::from_be_bytes(h[12..16].try_into().unwrap());
        let mut data = vec![0u8; u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize];
        s.read_exact(&mut data).unwrap();
        assert!(reply == 1 || reply == 3, "GO answered {reply:#x}");
        if reply == 1 {
            return; // NBD_REP_ACK
        }
    }
}
