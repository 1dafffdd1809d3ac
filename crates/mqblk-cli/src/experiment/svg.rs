//! A small SVG line chart writer for experiment plots. plotters needs a font
//! file at run time to lay out text (it panics without one, as on a bare
//! container); this writer emits `<text>` and lets the viewer render it.

use std::fmt::Write as _;

/// One line of a chart.
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// One panel: a title, axis labels and its series.
pub struct Panel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
}

const COLORS: &[&str] = &["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];
const W: f64 = 420.0;
const H: f64 = 300.0;
const PAD_L: f64 = 60.0;
const PAD_B: f64 = 45.0;
const PAD_T: f64 = 30.0;
const PAD_R: f64 = 15.0;

fn nice_max(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * mag).find(|m| *m >= v).unwrap_or(10.0 * mag)
}

/// A panel's plot area at (`ox`, `oy`) and its scales.
struct Frame {
    ox: f64,
    oy: f64,
    /// Plot width and height, inside the padding.
    pw: f64,
    ph: f64,
    x_max: f64,
    y_max: f64,
}

impl Frame {
    fn sx(&self, x: f64) -> f64 {
        self.ox + PAD_L + x / self.x_max * self.pw
    }

    fn sy(&self, y: f64) -> f64 {
        self.oy + PAD_T + self.ph - y / self.y_max * self.ph
    }
}

fn panel(out: &mut String, p: &Panel, ox: f64, oy: f64) {
    let pts = p.series.iter().flat_map(|s| s.points.iter());
    let x_max = nice_max(pts.clone().map(|q| q.0).fold(0.0, f64::max));
    let y_max = nice_max(pts.map(|q| q.1).fold(0.0, f64::max));
    let (pw, ph) = (W - PAD_L - PAD_R, H - PAD_T - PAD_B);
    let f = Frame { ox, oy, pw, ph, x_max, y_max };
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" font-size="14" text-anchor="middle">{}</text>"#,
        ox + W / 2.0,
        oy + 18.0,
        p.title
    );
    let _ = writeln!(
        out,
        r##"<rect x="{}" y="{}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>"##,
        ox + PAD_L,
        oy + PAD_T
    );
    axes(out, p, &f);
    series(out, p, &f);
}

/// The ticks, grid lines and axis labels.
fn axes(out: &mut String, p: &Panel, f: &Frame) {
    let (ox, oy, pw, ph) = (f.ox, f.oy, f.pw, f.ph);
    for i in 0..=4 {
        let (xv, yv) = (f.x_max * i as f64 / 4.0, f.y_max * i as f64 / 4.0);
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" font-size="10" text-anchor="middle">{}</text>"#,
            f.sx(xv),
            oy + H - PAD_B + 14.0,
            fmt(xv)
        );
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" font-size="10" text-anchor="end">{}</text>"#,
            ox + PAD_L - 4.0,
            f.sy(yv) + 3.0,
            fmt(yv)
        );
        let _ = writeln!(
            out,
            r##"<line x1="{}" x2="{}" y1="{y}" y2="{y}" stroke="#ddd"/>"##,
            ox + PAD_L,
            ox + PAD_L + pw,
            y = f.sy(yv)
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" font-size="11" text-anchor="middle">{}</text>"#,
        ox + PAD_L + pw / 2.0,
        oy + H - 8.0,
        p.x_label
    );
    let _ = writeln!(
        out,
        r#"<text x="{x}" y="{y}" font-size="11" text-anchor="middle" transform="rotate(-90 {x} {y})">{}</text>"#,
        p.y_label,
        x = ox + 14.0,
        y = oy + PAD_T + ph / 2.0
    );
}

/// Each series: its line, its points and its legend entry.
fn series(out: &mut String, p: &Panel, f: &Frame) {
    for (i, s) in p.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let path: Vec<String> = s.points.iter().map(|(x, y)| format!("{:.1},{:.1}", f.sx(*x), f.sy(*y))).collect();
        let _ =
            writeln!(out, r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#, path.join(" "));
        for (x, y) in &s.points {
            let _ = writeln!(out, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#, f.sx(*x), f.sy(*y));
        }
        let ly = f.oy + PAD_T + 12.0 + 14.0 * i as f64;
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{ly}" font-size="11" fill="{color}">{}</text>"#,
            f.ox + PAD_L + 8.0,
            s.label
        );
    }
}

fn fmt(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if v >= 10.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Panels laid out in a grid of `columns`.
pub fn chart(panels: &[Panel], columns: usize) -> String {
    let rows = panels.len().div_ceil(columns.max(1));
    let (w, h) = (W * columns as f64, H * rows as f64);
    let mut out =
        format!(r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif">"#);
    out.push('\n');
    let _ = writeln!(out, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    for (i, p) in panels.iter().enumerate() {
        panel(&mut out, p, W * (i % columns) as f64, H * (i / columns) as f64);
    }
    out.push_str("</svg>\n");
    out
}

/// Renders a chart written by `chart` to PNG (the repository page shows
/// PNG, not SVG), with the system's fonts for the text.
pub fn write_png(svg_text: &str, path: &std::path::Path) -> Result<(), String> {
    let mut options = resvg::usvg::Options::default();
    let db = options.fontdb_mut();
    db.load_system_fonts();
    // "sans-serif" maps to Arial by default, rarely installed on Linux: use
    // the first sans face the system has (Debian: fonts-dejavu-core).
    let sans = db
        .faces()
        .flat_map(|f| f.families.iter().map(|(name, _)| name.clone()))
        .find(|name| name.contains("Sans") && !name.contains("Mono"));
    if let Some(family) = sans {
        db.set_sans_serif_family(family);
    }
    let tree = resvg::usvg::Tree::from_str(svg_text, &options).map_err(|e| format!("bad SVG: {e}"))?;
    let size = tree.size().to_int_size();
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or_else(|| format!("cannot make a {}x{} image", size.width(), size.height()))?;
    pixmap.fill(resvg::tiny_skia::Color::WHITE);
    resvg::render(&tree, resvg::tiny_skia::Transform::identity(), &mut pixmap.as_mut());
    pixmap.save_png(path).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_has_a_line_per_series() {
        let p = Panel {
            title: "t".into(),
            x_label: "jobs".into(),
            y_label: "IOPS".into(),
            series: vec![
                Series { label: "a".into(), points: vec![(1.0, 10.0), (48.0, 20.0)] },
                Series { label: "b".into(), points: vec![(1.0, 5.0), (48.0, 7.0)] },
            ],
        };
        let svg = chart(&[p], 1);
        assert!(svg.starts_with("<svg"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains(">a</text>") && svg.contains(">b</text>"));
    }
}
