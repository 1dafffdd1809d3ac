//! reply.rs against malformed and well-formed input: every broken
//! reply is named, never a panic.

use super::*;

fn simple(error: u32, cookie: u64) -> Vec<u8> {
    let mut b = Vec::new();
    simple_reply(&mut b, error, cookie);
    b
}

fn chunk(flags: u16, ty: u16, cookie: u64, len: u32) -> ChunkHeader {
    let mut b = Vec::new();
    chunk_header(&mut b, flags, ty, cookie, len);
    match parse_header(&b, true).unwrap() {
        ReplyHeader::Chunk(c) => c,
        other => panic!("{other:?}"),
    }
}

const READ: Asked = Asked { is_read: true, offset: 4096, length: 8192 };
const WRITE: Asked = Asked { is_read: false, offset: 4096, length: 8192 };

#[test]
fn headers_parse_and_bad_magic_is_named() {
    let b = simple(5, 0x1234);
    assert_eq!(header_len(b[..4].try_into().unwrap(), false), Ok(16));
    assert_eq!(parse_header(&b, false), Ok(ReplyHeader::Simple { error: 5, cookie: 0x1234 }));
    let c = chunk(REPLY_FLAG_DONE, REPLY_TYPE_NONE, 9, 0);
    assert_eq!((c.cookie, c.done(), c.length), (9, true, 0));
    assert_eq!(header_len([0xde, 0xad, 0xbe, 0xef], true), Err(ReplyError::BadMagic(0xdead_beef)));
    let mut s = Vec::new();
    chunk_header(&mut s, 0, REPLY_TYPE_NONE, 1, 0);
    assert_eq!(parse_header(&s, false), Err(ReplyError::UnnegotiatedChunk), "no chunks unless negotiated");
    assert!(ReplyError::BadMagic(1).to_string().contains("bad reply magic"));
}

#[test]
fn data_and_holes_must_fall_inside_the_request() {
    let h = chunk(0, REPLY_TYPE_OFFSET_DATA, 1, 8 + 4096);
    assert_eq!(chunk_fixed_len(&h, &READ), Ok(8));
    let at = |off: u64| off.to_be_bytes();
    assert_eq!(parse_chunk(&h, &at(8192), &READ), Ok(Chunk::Data { at: 4096, len: 4096 }));
    // Starts before, ends after, or lies wholly past the request.
    for off in [0, 4095, 8193, 4096 + 8192, u64::MAX - 10] {
        let e = parse_chunk(&h, &at(off), &READ).unwrap_err();
        assert!(matches!(e, ReplyError::ChunkPastRequest { .. }), "{off}: {e}");
    }
    let big = chunk(0, REPLY_TYPE_OFFSET_DATA, 1, 8 + 8193);
    assert!(matches!(parse_chunk(&big, &at(4096), &READ), Err(ReplyError::ChunkPastRequest { .. })));
    let empty = chunk(0, REPLY_TYPE_OFFSET_DATA, 1, 8);
    assert!(matches!(chunk_fixed_len(&empty, &READ), Err(ReplyError::BadChunkLength { .. })), "no data byte");
    let hole = chunk(REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_HOLE, 1, 12);
    let mut fixed = at(4096).to_vec();
    fixed.extend_from_slice(&8192u32.to_be_bytes());
    assert_eq!(parse_chunk(&hole, &fixed, &READ), Ok(Chunk::Hole { at: 0, len: 8192 }));
    fixed[8..].copy_from_slice(&0u32.to_be_bytes());
    assert!(matches!(parse_chunk(&hole, &fixed, &READ), Err(ReplyError::ChunkPastRequest { .. })), "empty hole");
    let long_hole = chunk(0, REPLY_TYPE_OFFSET_HOLE, 1, 16);
    assert!(matches!(chunk_fixed_len(&long_hole, &READ), Err(ReplyError::BadChunkLength { .. })));
}

#[test]
fn chunks_that_do_not_answer_the_command_are_refused() {
    let data = chunk(0, REPLY_TYPE_OFFSET_DATA, 1, 100);
    assert!(matches!(chunk_fixed_len(&data, &WRITE), Err(ReplyError::UnexpectedChunk { .. })));
    let bs = chunk(0, REPLY_TYPE_BLOCK_STATUS, 1, 12);
    assert!(matches!(chunk_fixed_len(&bs, &READ), Err(ReplyError::UnexpectedChunk { .. })));
    let unknown = chunk(0, 77, 1, 0);
    assert!(matches!(chunk_fixed_len(&unknown, &READ), Err(ReplyError::UnexpectedChunk { ty: 77, .. })));
    let none = chunk(0, REPLY_TYPE_NONE, 1, 0);
    assert_eq!(parse_chunk(&none, &[], &WRITE), Err(ReplyError::NoneNotDone));
    let none_payload = chunk(REPLY_FLAG_DONE, REPLY_TYPE_NONE, 1, 4);
    assert!(matches!(chunk_fixed_len(&none_payload, &WRITE), Err(ReplyError::BadChunkLength { .. })));
}

#[test]
fn error_chunks_carry_an_errno_and_a_bounded_message() {
    let fixed = |errno: u32, msg_len: u16| {
        let mut f = errno.to_be_bytes().to_vec();
        f.extend_from_slice(&msg_len.to_be_bytes());
        f
    };
    let e = chunk(REPLY_FLAG_DONE, REPLY_TYPE_ERROR, 1, 6 + 5);
    assert_eq!(chunk_fixed_len(&e, &WRITE), Ok(6));
    assert_eq!(parse_chunk(&e, &fixed(ENOSPC, 5), &WRITE), Ok(Chunk::Error { errno: ENOSPC, msg_len: 5, skip: 5 }));
    assert!(matches!(parse_chunk(&e, &fixed(ENOSPC, 6), &WRITE), Err(ReplyError::BadErrorMessage { .. })));
    assert_eq!(parse_chunk(&e, &fixed(0, 5), &WRITE), Err(ReplyError::ZeroError));
    let with_offset = chunk(REPLY_FLAG_DONE, REPLY_TYPE_ERROR_OFFSET, 1, 6 + 2 + 8);
    assert_eq!(chunk_fixed_len(&with_offset, &READ), Ok(14));
    let mut f = fixed(EIO, 2);
    f.extend_from_slice(&[0; 8]);
    assert_eq!(parse_chunk(&with_offset, &f, &READ), Ok(Chunk::Error { errno: EIO, msg_len: 2, skip: 10 }));
    let huge = chunk(REPLY_FLAG_DONE, REPLY_TYPE_ERROR, 1, 6 + 5000);
    assert!(matches!(parse_chunk(&huge, &fixed(EIO, 5000), &READ), Err(ReplyError::BadErrorMessage { .. })));
    let future_error = chunk(REPLY_FLAG_DONE, (1 << 15) + 99, 1, 6);
    assert_eq!(chunk_fixed_len(&future_error, &READ), Ok(6), "unknown error types read as errors");
    let short = chunk(REPLY_FLAG_DONE, REPLY_TYPE_ERROR, 1, 3);
    assert!(matches!(chunk_fixed_len(&short, &READ), Err(ReplyError::BadChunkLength { .. })));
}

#[test]
fn a_reply_ends_covered_or_with_its_first_error() {
    let mut p = Progress::default();
    p.add(&Chunk::Data { at: 0, len: 4096 });
    assert_eq!(p.finish(&READ), Err(ReplyError::ShortRead { got: 4096, len: 8192 }));
    p.add(&Chunk::Hole { at: 4096, len: 4096 });
    assert_eq!(p.finish(&READ), Ok(Status::Ok));
    p.add(&Chunk::Data { at: 0, len: 1 });
    assert!(matches!(p.finish(&READ), Err(ReplyError::ShortRead { .. })), "overlap counted past the length");
    let mut e = Progress::default();
    e.add(&Chunk::Error { errno: ENOSPC, msg_len: 0, skip: 0 });
    e.add(&Chunk::Error { errno: EIO, msg_len: 0, skip: 0 });
    assert_eq!(e.finish(&WRITE), Ok(Status::NoSpc), "the first error wins");
    assert_eq!(Progress::default().finish(&WRITE), Ok(Status::Ok));
}

#[test]
fn wire_errnos_map_to_statuses() {
    let cases = [
        (0, Status::Ok),
        (EPERM, Status::Target),
        (EIO, Status::IoErr),
        (ENOMEM, Status::Resource),
        (EINVAL, Status::Invalid),
        (ENOSPC, Status::NoSpc),
        (EOVERFLOW, Status::Invalid),
        (ENOTSUP, Status::NotSupp),
        (ESHUTDOWN, Status::Offline),
        (12345, Status::IoErr),
    ];
    for (errno, status) in cases {
        assert_eq!(status_of(errno), status, "errno {errno}");
    }
}
