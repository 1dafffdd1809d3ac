//! fio's report options of the command line: `--output-format` (normal,
//! terse, json, json+, or a comma list of them), `--minimal` (terse),
//! `--terse-version` (2..=5, default 3) and `--output=FILE`. As in fio, a
//! run prints each chosen format once, terse first, then JSON, then the
//! normal report, whatever order they were named in (fio's output
//! buffers, flushed in that order); json+ is JSON with each latency's
//! bins.

use super::options::{err, OptionError};

/// The report options' names (parse.rs' command-line options).
pub const OUTPUT_OPTIONS: &[&str] = &["output-format", "output", "terse-version", "minimal"];

/// Which reports a run prints, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputOptions {
    pub terse: bool,
    pub json: bool,
    /// json+: the JSON report's latencies carry fio's bins.
    pub json_plus: bool,
    pub normal: bool,
    pub terse_version: u32,
    /// `--output=FILE`: the report goes there instead of stdout.
    pub file: Option<String>,
}

impl Default for OutputOptions {
    fn default() -> Self {
        Self { terse: false, json: false, json_plus: false, normal: true, terse_version: 3, file: None }
    }
}

impl OutputOptions {
    /// Sets one report option (`value`: its value, None for a bare
    /// `--minimal`); false if `key` is none of them.
    pub(super) fn set(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionError> {
        let v = || value.ok_or_else(|| OptionError(format!("--{key}: needs a value")));
        match key {
            "output-format" => self.set_formats(v()?)?,
            "minimal" => {
                if value.is_some() {
                    return err("--minimal: takes no value");
                }
                (self.terse, self.json, self.json_plus, self.normal) = (true, false, false, false);
            }
            "terse-version" => {
                self.terse_version = match v()? {
                    "2" => 2,
                    "3" => 3,
                    "4" => 4,
                    "5" => 5,
                    o => return err(format!("--terse-version: bad value '{o}' (accepted: 2, 3, 4, 5)")),
                }
            }
            "output" => {
                let path = v()?;
                if path.is_empty() {
                    return err("--output: needs a file name");
                }
                self.file = Some(path.to_string());
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `--output-format=LIST`: replaces the formats chosen before, as fio.
    fn set_formats(&mut self, list: &str) -> Result<(), OptionError> {
        let (mut terse, mut json, mut json_plus, mut normal) = (false, false, false, false);
        for name in list.split(',') {
            match name {
                "normal" => normal = true,
                "terse" | "minimal" | "csv" => terse = true,
                "json" => json = true,
                "json+" => (json, json_plus) = (true, true),
                o => {
                    return err(format!(
                    "--output-format: bad value '{o}' (accepted: normal, terse, json, json+, or a comma list of them)"
                ))
                }
            }
        }
        (self.terse, self.json, self.json_plus, self.normal) = (terse, json, json_plus, normal);
        Ok(())
    }

    /// Whether the run draws its progress bar: only for a normal report
    /// alone on a terminal (a machine-read report stays clean).
    pub fn progress_bar(&self) -> bool {
        self.normal && !self.terse && !self.json && self.file.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(opts: &[(&str, Option<&str>)]) -> Result<OutputOptions, OptionError> {
        let mut o = OutputOptions::default();
        for (k, v) in opts {
            assert!(o.set(k, *v)?, "{k} is a report option");
        }
        Ok(o)
    }

    #[test]
    fn a_list_of_formats_replaces_the_default() {
        let o = parsed(&[("output-format", Some("json,normal"))]).unwrap();
        assert!(o.json && o.normal && !o.terse && !o.json_plus);
        let o = parsed(&[("output-format", Some("json+"))]).unwrap();
        assert!(o.json && o.json_plus && !o.normal);
        let o = parsed(&[("minimal", None), ("terse-version", Some("5"))]).unwrap();
        assert!(o.terse && !o.normal && o.terse_version == 5);
        assert_eq!(parsed(&[]).unwrap().terse_version, 3);
    }

    #[test]
    fn bad_values_name_the_option() {
        let e = parsed(&[("output-format", Some("json,xml"))]).unwrap_err();
        assert!(e.0.contains("--output-format") && e.0.contains("'xml'"), "{e}");
        let e = parsed(&[("terse-version", Some("6"))]).unwrap_err();
        assert!(e.0.contains("--terse-version"), "{e}");
        assert!(parsed(&[("output-format", None)]).unwrap_err().0.contains("needs a value"));
    }
}
