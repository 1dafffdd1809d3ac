//! fio's verify state (`verify_state_save`, `verify_state_load`): what a
//! job that wrote with verify had done when it exited, so that a later
//! `verify_only` run checks only the writes that completed (after a crash
//! or a stop part way, the rest of the region holds older data).
//!
//! fio's meaning, mqblk's own format: a text file named like fio's,
//! `local-JOBNAME-INDEX-verify.state` in the working directory (`/` in the
//! name becomes `.`), of lines `mqblk-verify-state 1`, `job NAME`,
//! `index N`, `issued N` (the writes issued: sequence numbers 1..=N),
//! `incomplete S...` (those that did not complete), then `crc32c X` over
//! the lines before it, so a torn or edited file is refused.

use std::path::PathBuf;

const TITLE: &str = "mqblk-verify-state 1";

/// A job's write progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyState {
    pub name: String,
    pub index: usize,
    /// Writes issued: sequence numbers 1..=issued.
    pub issued: u64,
    /// Of those, the writes that did not complete (failed or in flight).
    pub incomplete: Vec<u64>,
}

impl VerifyState {
    /// fio's file name for job `name`, clone `index`.
    pub fn path(name: &str, index: usize) -> PathBuf {
        PathBuf::from(format!("local-{}-{index}-verify.state", name.replace('/', ".")))
    }

    /// Whether write `seq` completed.
    pub fn completed(&self, seq: u64) -> bool {
        seq <= self.issued && !self.incomplete.contains(&seq)
    }

    fn body(&self) -> String {
        let incomplete: Vec<String> = self.incomplete.iter().map(u64::to_string).collect();
        format!(
            "{TITLE}\njob {}\nindex {}\nissued {}\nincomplete {}\n",
            self.name,
            self.index,
            self.issued,
            incomplete.join(" ")
        )
    }

    /// Writes the state file (synced: it must survive what follows).
    pub fn save(&self) -> Result<PathBuf, String> {
        use std::io::Write;
        let path = Self::path(&self.name, self.index);
        let body = self.body();
        let text = format!("{body}crc32c {:08x}\n", crc32c::crc32c(body.as_bytes()));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&path)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()
        };
        write().map_err(|e| format!("verify_state_save: {}: {e}", path.display()))?;
        Ok(path)
    }

    /// Reads job `name`'s (clone `index`) state file.
    pub fn load(name: &str, index: usize) -> Result<Self, String> {
        let path = Self::path(name, index);
        let text = std::fs::read_to_string(&path).map_err(|e| format!("verify_state_load: {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("verify_state_load: {}: {e}", path.display()))
    }

    fn parse(text: &str) -> Result<Self, String> {
        let body_end = text.rfind("crc32c ").ok_or("no crc32c line: not a verify state file")?;
        let (body, crc_line) = text.split_at(body_end);
        let crc = u32::from_str_radix(crc_line["crc32c ".len()..].trim(), 16).map_err(|_| "a bad crc32c line")?;
        if crc != crc32c::crc32c(body.as_bytes()) {
            return Err("the state is corrupt (its crc32c does not match)".into());
        }
        let mut lines = body.lines();
        if lines.next() != Some(TITLE) {
            return Err(format!("not a verify state file (its first line is not '{TITLE}')"));
        }
        let mut field = |key: &str| -> Result<String, String> {
            let line = lines.next().unwrap_or_default();
            let value = line.strip_prefix(key).and_then(|r| r.strip_prefix(' ').or(Some(r).filter(|r| r.is_empty())));
            value.map(str::to_string).ok_or_else(|| format!("expected '{key} ...', found '{line}'"))
        };
        let number = |s: String| s.parse::<u64>().map_err(|_| format!("'{s}' is not a number"));
        let name = field("job")?;
        let index = number(field("index")?)? as usize;
        let issued = number(field("issued")?)?;
        let incomplete =
            field("incomplete")?.split_whitespace().map(|s| number(s.to_string())).collect::<Result<_, _>>()?;
        Ok(Self { name, index, issued, incomplete })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_reads_back_and_says_which_writes_completed() {
        let s = VerifyState { name: "w".into(), index: 2, issued: 10, incomplete: vec![9, 4] };
        let text = format!("{}crc32c {:08x}\n", s.body(), crc32c::crc32c(s.body().as_bytes()));
        let back = VerifyState::parse(&text).unwrap();
        assert_eq!(back, s);
        assert!(back.completed(1) && back.completed(10) && !back.completed(4) && !back.completed(11));
        let none = VerifyState { incomplete: vec![], ..s };
        let text = format!("{}crc32c {:08x}\n", none.body(), crc32c::crc32c(none.body().as_bytes()));
        assert_eq!(VerifyState::parse(&text).unwrap(), none);
    }

    #[test]
    fn a_torn_state_is_refused() {
        let s = VerifyState { name: "w".into(), index: 0, issued: 10, incomplete: vec![] };
        let text = format!("{}crc32c {:08x}\n", s.body(), crc32c::crc32c(s.body().as_bytes()));
        assert!(VerifyState::parse(&text.replace("issued 10", "issued 11")).unwrap_err().contains("corrupt"));
        assert!(VerifyState::parse("garbage").is_err());
    }

    #[test]
    fn the_file_is_named_as_fios() {
        assert_eq!(VerifyState::path("a/b", 3), PathBuf::from("local-a.b-3-verify.state"));
    }
}
