//! The experiments' charts: what a panel shows (our medians with their
//! min-max spread over the rounds, the source's figures beside them,
//! categorical cases as labelled bars, points where the jobs outnumber the
//! CPUs marked), drawn to SVG and PNG.
//!
//! Relies on plotters for the drawing (`draw`) and resvg for the PNG
//! (`png`), both with the system's sans-serif font (`font`; Debian:
//! fonts-dejavu-core).

mod draw;

pub use draw::thousands;
mod font;
mod png;

use std::path::Path;

/// Whose figures a series carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Measured here: medians, with the spread over the rounds.
    Measured,
    /// Printed in the source thread, as printed (same units as ours).
    Source,
}

/// One series of a panel.
#[derive(Debug, Clone)]
pub struct Series {
    pub label: String,
    /// (x, median): on a categorical panel x is the category's index.
    pub points: Vec<(f64, f64)>,
    /// (min, max) over the rounds for each point, or empty.
    pub spread: Vec<(f64, f64)>,
    pub origin: Origin,
}

impl Series {
    /// Our medians (add the spread with `with_spread`).
    pub fn measured(label: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series { label: label.into(), points, spread: Vec::new(), origin: Origin::Measured }
    }

    /// The source's figures, as it printed them.
    pub fn source(label: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series { label: label.into(), points, spread: Vec::new(), origin: Origin::Source }
    }

    /// The min-max over the rounds, one pair per point.
    pub fn with_spread(mut self, spread: Vec<(f64, f64)>) -> Series {
        assert_eq!(spread.len(), self.points.len(), "one (min, max) per point of '{}'", self.label);
        self.spread = spread;
        self
    }
}

/// A panel's horizontal axis.
#[derive(Debug, Clone)]
pub enum XAxis {
    /// A number (jobs, block size); points at or past `oversubscribed_from`
    /// ran more threads than the machine has CPUs and are marked.
    Numeric { oversubscribed_from: Option<f64> },
    /// Named cases, drawn as bars grouped by case (x = index).
    Categories(Vec<String>),
}

/// One panel of a chart.
#[derive(Debug, Clone)]
pub struct Panel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x: XAxis,
    pub series: Vec<Series>,
    /// A logarithmic value axis (numeric panels): series whose values lie
    /// a decade or more apart stay readable side by side.
    pub log_y: bool,
}

impl Panel {
    /// A panel over a numeric axis.
    pub fn numeric(title: impl Into<String>, x_label: impl Into<String>, y_label: impl Into<String>) -> Panel {
        Panel {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            x: XAxis::Numeric { oversubscribed_from: None },
            series: Vec::new(),
            log_y: false,
        }
    }

    /// A panel of named cases (bars).
    pub fn categories(title: impl Into<String>, y_label: impl Into<String>, names: Vec<String>) -> Panel {
        Panel {
            title: title.into(),
            x_label: String::new(),
            y_label: y_label.into(),
            x: XAxis::Categories(names),
            series: Vec::new(),
            log_y: false,
        }
    }

    /// Marks the points at or past `x` as run with more threads than CPUs
    /// (count every thread that runs: the jobs and the device's own); the
    /// shade starts halfway between the last point before `x` and `x`.
    pub fn oversubscribed_from(mut self, x: f64) -> Panel {
        assert!(matches!(self.x, XAxis::Numeric { .. }), "only a numeric axis marks oversubscribed points");
        self.x = XAxis::Numeric { oversubscribed_from: Some(x) };
        self
    }

    /// Puts the values on a logarithmic axis (ticks at 1, 2 and 5 times
    /// each power of ten); values that are not positive are not drawn.
    pub fn log_values(mut self) -> Panel {
        assert!(matches!(self.x, XAxis::Numeric { .. }), "only a numeric panel has a logarithmic value axis");
        self.log_y = true;
        self
    }

    pub fn with(mut self, series: Series) -> Panel {
        self.series.push(series);
        self
    }
}

/// Writes the panels, `columns` to a row, as SVG to `svg_path` and PNG to
/// `png_path`.
pub fn write_chart(panels: &[Panel], columns: usize, svg_path: &Path, png_path: &Path) -> Result<(), String> {
    let svg = draw::chart(panels, columns)?;
    std::fs::write(svg_path, &svg).map_err(|e| format!("{}: {e}", svg_path.display()))?;
    png::write(&svg, png_path).map_err(|e| format!("{}: {e}", png_path.display()))
}
