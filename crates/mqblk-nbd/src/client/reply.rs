//! The client's side of transmission replies (doc/proto.md, "Simple reply
//! message" and "Structured reply chunk message"): reply headers, the
//! fixed part of each chunk checked against the request it answers, the
//! end of a reply, and the NBD errno each becomes as a block-layer
//! status. Pure functions over byte slices, so malformed input is tested
//! and fuzzed without a socket; the receiving thread (rx.rs) reads the
//! bytes and moves data, these decide what the bytes mean.
//!
//! Anything that breaks the protocol is a [`ReplyError`]: the stream can
//! no longer be trusted, so the connection ends (and its requests are
//! retried on the next one, or fail).
//!
//! Relies on: proto.rs (magics, chunk types, wire errnos).

use mqblk::Status;

use crate::proto::*;

/// A simple reply's header: magic, error, cookie.
pub const SIMPLE_REPLY_BYTES: usize = 16;
/// A structured reply chunk's header: magic, flags, type, cookie, length.
pub const CHUNK_HEADER_BYTES: usize = 20;
/// The shortest reply header: what may be read past the end of a payload
/// without taking bytes of a later reply's payload.
pub const MIN_REPLY_BYTES: usize = SIMPLE_REPLY_BYTES;
/// An error chunk's message is at most this long (doc/proto.md: 4096).
pub const MAX_ERROR_MESSAGE: u32 = 4096;
/// NBD_REPLY_TYPE_ERROR_OFFSET: an error at an offset of the request.
pub const REPLY_TYPE_ERROR_OFFSET: u16 = (1 << 15) + 2;

/// A reply broke the protocol; the connection ends with this reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplyError {
    #[error("bad reply magic {0:#010x}")]
    BadMagic(u32),
    #[error("a structured reply chunk arrived, but structured replies were not negotiated")]
    UnnegotiatedChunk,
    #[error("reply to unknown cookie {0:#018x} (no such request in flight)")]
    UnknownCookie(u64),
    #[error("chunk type {ty} is not a reply to {what}")]
    UnexpectedChunk { ty: u16, what: &'static str },
    #[error("chunk type {ty} with a payload of {len} bytes (its fixed part needs {need})")]
    BadChunkLength { ty: u16, len: u32, need: u32 },
    #[error("chunk of {len} bytes at offset {offset} is outside the request ({req_offset}, {req_len} bytes)")]
    ChunkPastRequest { offset: u64, len: u64, req_offset: u64, req_len: u32 },
    #[error("error chunk with message length {msg_len} in a payload of {len} bytes")]
    BadErrorMessage { msg_len: u16, len: u32 },
    #[error("error chunk with error 0")]
    ZeroError,
    #[error("NONE chunk without the DONE flag")]
    NoneNotDone,
    #[error("read reply ended with {got} of {len} bytes received")]
    ShortRead { got: u64, len: u32 },
}

/// A reply's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyHeader {
    Simple { error: u32, cookie: u64 },
    Chunk(ChunkHeader),
}

impl ReplyHeader {
    pub fn cookie(&self) -> u64 {
        match self {
            ReplyHeader::Simple { cookie, .. } => *cookie,
            ReplyHeader::Chunk(c) => c.cookie,
        }
    }
}

/// A structured reply chunk's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    pub flags: u16,
    pub ty: u16,
    pub cookie: u64,
    /// Payload bytes after the header.
    pub length: u32,
}

impl ChunkHeader {
    /// The last chunk of its reply.
    pub fn done(&self) -> bool {
        self.flags & REPLY_FLAG_DONE != 0
    }
}

/// The request a reply answers, as far as checking the reply goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Asked {
    pub is_read: bool,
    pub offset: u64,
    pub length: u32,
}

/// How long a header is, from its first four bytes (the magic).
pub fn header_len(magic: [u8; 4], structured: bool) -> Result<usize, ReplyError> {
    match u32::from_be_bytes(magic) {
        SIMPLE_REPLY_MAGIC => Ok(SIMPLE_REPLY_BYTES),
        STRUCTURED_REPLY_MAGIC if structured => Ok(CHUNK_HEADER_BYTES),
        STRUCTURED_REPLY_MAGIC => Err(ReplyError::UnnegotiatedChunk),
        other => Err(ReplyError::BadMagic(other)),
    }
}

/// Parses a whole header (`header_len` bytes of it).
pub fn parse_header(b: &[u8], structured: bool) -> Result<ReplyHeader, ReplyError> {
    let magic: [u8; 4] = b[..4].try_into().expect("a header starts with its magic");
    let len = header_len(magic, structured)?;
    assert_eq!(b.len(), len, "parse_header takes the whole header");
    let be16 = |at: usize| u16::from_be_bytes([b[at], b[at + 1]]);
    let be32 = |at: usize| u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"));
    let be64 = |at: usize| u64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    Ok(if len == SIMPLE_REPLY_BYTES {
        ReplyHeader::Simple { error: be32(4), cookie: be64(8) }
    } else {
        ReplyHeader::Chunk(ChunkHeader { flags: be16(4), ty: be16(6), cookie: be64(8), length: be32(16) })
    })
}

/// What one chunk carries for its request, once its fixed part is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunk {
    /// `len` data bytes follow, for the request's bytes from `at` on
    /// (relative to the request's offset).
    Data { at: u32, len: u32 },
    /// The request's bytes from `at`, `len` of them, read as zeros.
    Hole { at: u32, len: u32 },
    /// The request failed with wire errno `errno`; `skip` bytes follow
    /// (the message, and an ERROR_OFFSET's offset) and are read and dropped.
    Error { errno: u32, msg_len: u16, skip: u32 },
    /// Nothing (the end of a reply to a command without data).
    None,
}

/// The length of a chunk's fixed part, checked against its type and the
/// request: read that many bytes, then call [`parse_chunk`].
pub fn chunk_fixed_len(h: &ChunkHeader, asked: &Asked) -> Result<usize, ReplyError> {
    let need = match h.ty {
        REPLY_TYPE_NONE if h.length == 0 => 0,
        REPLY_TYPE_NONE => return Err(ReplyError::BadChunkLength { ty: h.ty, len: h.length, need: 0 }),
        REPLY_TYPE_OFFSET_DATA if asked.is_read => 9, // offset, then at least one byte
        REPLY_TYPE_OFFSET_HOLE if asked.is_read => 12,
        REPLY_TYPE_OFFSET_DATA | REPLY_TYPE_OFFSET_HOLE => {
            return Err(ReplyError::UnexpectedChunk { ty: h.ty, what: "a command without read data" })
        }
        REPLY_TYPE_BLOCK_STATUS => return Err(ReplyError::UnexpectedChunk { ty: h.ty, what: "a request we sent" }),
        REPLY_TYPE_ERROR => 6,
        REPLY_TYPE_ERROR_OFFSET => 14,
        // Other error types: an errno and a message, as doc/proto.md asks
        // clients to read unknown error types.
        ty if ty & (1 << 15) != 0 => 6,
        ty => return Err(ReplyError::UnexpectedChunk { ty, what: "anything (unknown type)" }),
    };
    if h.length < need {
        return Err(ReplyError::BadChunkLength { ty: h.ty, len: h.length, need });
    }
    if h.ty == REPLY_TYPE_OFFSET_HOLE && h.length != 12 {
        return Err(ReplyError::BadChunkLength { ty: h.ty, len: h.length, need: 12 });
    }
    // The data byte of OFFSET_DATA's minimum is not part of its fixed part.
    Ok(if h.ty == REPLY_TYPE_OFFSET_DATA { 8 } else { need as usize })
}

/// Parses a chunk's fixed part (`chunk_fixed_len` bytes), checking that
/// data and holes fall inside the request.
pub fn parse_chunk(h: &ChunkHeader, fixed: &[u8], asked: &Asked) -> Result<Chunk, ReplyError> {
    let be64 = |at: usize| u64::from_be_bytes(fixed[at..at + 8].try_into().expect("8 bytes"));
    let be32 = |at: usize| u32::from_be_bytes(fixed[at..at + 4].try_into().expect("4 bytes"));
    let inside = |offset: u64, len: u64| -> Result<u32, ReplyError> {
        let rel = offset.wrapping_sub(asked.offset);
        if offset < asked.offset || rel > u64::from(asked.length) || len > u64::from(asked.length) - rel || len == 0 {
            return Err(ReplyError::ChunkPastRequest { offset, len, req_offset: asked.offset, req_len: asked.length });
        }
        Ok(rel as u32)
    };
    match h.ty {
        REPLY_TYPE_NONE if !h.done() => Err(ReplyError::NoneNotDone),
        REPLY_TYPE_NONE => Ok(Chunk::None),
        REPLY_TYPE_OFFSET_DATA => {
            let len = h.length - 8;
            Ok(Chunk::Data { at: inside(be64(0), u64::from(len))?, len })
        }
        REPLY_TYPE_OFFSET_HOLE => {
            let len = be32(8);
            Ok(Chunk::Hole { at: inside(be64(0), u64::from(len))?, len })
        }
        ty => {
            let errno = be32(0);
            let msg_len = u16::from_be_bytes([fixed[4], fixed[5]]);
            let extra = if ty == REPLY_TYPE_ERROR_OFFSET { 8 } else { 0 };
            if u32::from(msg_len) > MAX_ERROR_MESSAGE || 6 + u32::from(msg_len) + extra != h.length {
                return Err(ReplyError::BadErrorMessage { msg_len, len: h.length });
            }
            if errno == 0 {
                return Err(ReplyError::ZeroError);
            }
            Ok(Chunk::Error { errno, msg_len, skip: u32::from(msg_len) + extra })
        }
    }
}

/// A structured reply, chunk by chunk: the bytes of a read it covered and
/// the first error. Reset when a request is sent (again).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    pub got: u64,
    pub errno: u32,
}

impl Progress {
    /// Counts what a chunk contributed.
    pub fn add(&mut self, chunk: &Chunk) {
        match *chunk {
            Chunk::Data { len, .. } | Chunk::Hole { len, .. } => self.got += u64::from(len),
            Chunk::Error { errno, .. } if self.errno == 0 => self.errno = errno,
            Chunk::Error { .. } | Chunk::None => {}
        }
    }

    /// The request's status once its last chunk is in: an error chunk's
    /// errno, or success if a read was covered (more than its length means
    /// chunks overlapped, less that some never came: both break the
    /// protocol).
    pub fn finish(&self, asked: &Asked) -> Result<Status, ReplyError> {
        if self.errno != 0 {
            return Ok(status_of(self.errno));
        }
        if asked.is_read && self.got != u64::from(asked.length) {
            return Err(ReplyError::ShortRead { got: self.got, len: asked.length });
        }
        Ok(Status::Ok)
    }
}

/// The block-layer status a wire errno becomes. EPERM is the server
/// refusing (a read-only export, a policy): the target's own error.
pub fn status_of(errno: u32) -> Status {
    match errno {
        0 => Status::Ok,
        EPERM => Status::Target,
        ENOMEM => Status::Resource,
        EINVAL | EOVERFLOW => Status::Invalid,
        ENOSPC => Status::NoSpc,
        ENOTSUP => Status::NotSupp,
        // The server is going away: this connection cannot carry it.
        ESHUTDOWN => Status::Offline,
        _ => Status::IoErr,
    }
}

#[cfg(test)]
#[path = "reply_tests.rs"]
mod tests;
