//! fio's `rw=`: the data directions of a job (reads, writes, trims,
//! sequential or random, mixed) and the `:N` after it.

use super::options::{err, OptionError};

/// The data direction pattern (`rw=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RwMode {
    Read,
    Write,
    RandRead,
    RandWrite,
    ReadWrite,
    RandRw,
    /// fio's trims (trim.rs): each I/O a discard, or a discard then a
    /// write of the block discarded.
    Trim,
    RandTrim,
    TrimWrite,
    RandTrimWrite,
}

impl RwMode {
    pub(super) fn parse(v: &str) -> Result<Self, OptionError> {
        Ok(match v {
            "read" => RwMode::Read,
            "write" => RwMode::Write,
            "randread" => RwMode::RandRead,
            "randwrite" => RwMode::RandWrite,
            "rw" | "readwrite" => RwMode::ReadWrite,
            "randrw" => RwMode::RandRw,
            "trim" => RwMode::Trim,
            "randtrim" => RwMode::RandTrim,
            "trimwrite" => RwMode::TrimWrite,
            "randtrimwrite" => RwMode::RandTrimWrite,
            _ => {
                return err(format!(
                    "rw: bad value '{v}' (accepted: read, write, randread, randwrite, rw, readwrite, randrw, trim, \
                     randtrim, trimwrite, randtrimwrite)"
                ))
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            RwMode::Read => "read",
            RwMode::Write => "write",
            RwMode::RandRead => "randread",
            RwMode::RandWrite => "randwrite",
            RwMode::ReadWrite => "rw",
            RwMode::RandRw => "randrw",
            RwMode::Trim => "trim",
            RwMode::RandTrim => "randtrim",
            RwMode::TrimWrite => "trimwrite",
            RwMode::RandTrimWrite => "randtrimwrite",
        }
    }

    pub fn is_random(self) -> bool {
        matches!(self, RwMode::RandRead | RwMode::RandWrite | RwMode::RandRw | RwMode::RandTrim | RwMode::RandTrimWrite)
    }

    /// Whether the job trims (fio's third data direction).
    pub fn trims(self) -> bool {
        matches!(self, RwMode::Trim | RwMode::RandTrim | RwMode::TrimWrite | RwMode::RandTrimWrite)
    }

    /// Share of reads in percent, given rwmixread (a trimming job reads
    /// nothing).
    pub fn read_pct(self, rwmixread: u32) -> u32 {
        match self {
            RwMode::Read | RwMode::RandRead => 100,
            RwMode::Write | RwMode::RandWrite => 0,
            RwMode::Trim | RwMode::RandTrim | RwMode::TrimWrite | RwMode::RandTrimWrite => 0,
            RwMode::ReadWrite | RwMode::RandRw => rwmixread,
        }
    }
}

/// The `:N` after `rw=` (fio's `ddir_seq_add` and `ddir_seq_nr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RwModifier {
    #[default]
    None,
    /// Sequential: bytes added to each next offset (may be negative).
    SeqAdd(i64),
    /// Random: I/Os issued one after another from each random offset.
    SeqNr(u64),
}
