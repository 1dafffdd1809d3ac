//! Panels drawn with plotters into one SVG: a numeric axis as lines with
//! min-max error bars (the source's figures as dashed grey triangles,
//! filled then hollow, the oversubscribed range shaded; the value axis
//! linear or logarithmic), named cases as
//! horizontal grouped bars (long names stay readable on the vertical axis)
//! with their values. Each panel's key sits in a strip below its plot, so
//! it never covers a point or a bar.

use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{Origin, Panel, Series, XAxis};

const PANEL_W: u32 = 600;
const PANEL_H: u32 = 380;
const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
];
const SOURCE_GREY: RGBColor = RGBColor(110, 110, 110);

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// The panels in a grid of `columns`, as SVG text.
pub fn chart(panels: &[Panel], columns: usize) -> Result<String, String> {
    super::font::ready()?;
    let columns = columns.clamp(1, panels.len().max(1));
    let rows = panels.len().div_ceil(columns).max(1);
    let height = panels.iter().map(|p| panel_height(p) + key_height(p)).max().unwrap_or(PANEL_H);
    let mut svg = String::new();
    {
        let size = (PANEL_W * columns as u32, height * rows as u32);
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(failed)?;
        for (p, area) in panels.iter().zip(root.split_evenly((rows, columns)).iter()) {
            let (plot, strip) = area.split_vertically(height - key_height(p));
            let keys = match &p.x {
                XAxis::Numeric { oversubscribed_from } => numeric(&plot, p, *oversubscribed_from)?,
                XAxis::Categories(names) => bars(&plot, p, names)?,
            };
            draw_keys(&strip, &keys)?;
        }
        root.present().map_err(failed)?;
    }
    Ok(svg)
}

fn failed<E: std::fmt::Debug>(e: E) -> String {
    format!("drawing a chart: {e:?}")
}

/// A bar panel grows with its cases so bars stay readable.
fn panel_height(p: &Panel) -> u32 {
    match &p.x {
        XAxis::Categories(names) => {
            let band = 12 + 16 * p.series.len().max(1) as u32;
            PANEL_H.max(110 + band * names.len() as u32)
        }
        XAxis::Numeric { .. } => PANEL_H,
    }
}

/// The top of a value axis: the largest median or spread, with
/// `headroom` (a fraction) above it.
fn value_top(series: &[Series], headroom: f64) -> f64 {
    let top = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1).chain(s.spread.iter().map(|r| r.1)))
        .fold(0.0, f64::max);
    if top > 0.0 {
        top * (1.0 + headroom)
    } else {
        1.0
    }
}

/// What a key entry shows beside its label.
#[derive(Clone, Copy)]
enum Mark {
    Line(RGBColor),
    Bar(RGBColor),
    Shade,
    /// A source series: filled for the first, hollow for the second.
    Triangle {
        filled: bool,
    },
}

type Keys = Vec<(String, Mark)>;

const KEY_ROW_PX: u32 = 17;
/// Labels up to this many characters share a row with another.
const KEY_TWO_COLUMN_CHARS: usize = 40;

/// The key's label for the shaded, oversubscribed range.
fn shade_label(from: f64) -> String {
    format!("jobs >= {}: more threads than CPUs", number(from))
}

/// A panel's key labels, in the order its plot pushes them.
fn key_labels(p: &Panel) -> Vec<String> {
    let shade = match p.x {
        XAxis::Numeric { oversubscribed_from: Some(from) } => Some(shade_label(from)),
        _ => None,
    };
    shade.into_iter().chain(p.series.iter().map(|s| s.label.clone())).collect()
}

/// Two entries to a row when every label is short, else one.
fn key_columns<'a>(labels: impl IntoIterator<Item = &'a String>) -> usize {
    if labels.into_iter().all(|l| l.chars().count() <= KEY_TWO_COLUMN_CHARS) {
        2
    } else {
        1
    }
}

/// The strip below a panel's plot that holds its key.
fn key_height(p: &Panel) -> u32 {
    let labels = key_labels(p);
    let rows = labels.len().div_ceil(key_columns(&labels)) as u32;
    10 + rows * KEY_ROW_PX
}

/// The key, row by row.
fn draw_keys(strip: &Area, keys: &Keys) -> Result<(), String> {
    let columns = key_columns(keys.iter().map(|(l, _)| l));
    let column_px = (PANEL_W as i32 - 90) / columns as i32;
    let style = TextStyle::from(("sans-serif", 11).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    for (i, (label, mark)) in keys.iter().enumerate() {
        let x = 80 + (i % columns) as i32 * column_px;
        let y = 4 + (i / columns) as i32 * KEY_ROW_PX as i32 + KEY_ROW_PX as i32 / 2;
        match *mark {
            Mark::Line(c) => strip.draw(&PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))),
            Mark::Bar(c) => strip.draw(&Rectangle::new([(x, y - 5), (x + 16, y + 5)], c.filled())),
            Mark::Shade => {
                strip.draw(&Rectangle::new([(x, y - 5), (x + 16, y + 5)], RGBColor(0, 0, 0).mix(0.18).filled()))
            }
            Mark::Triangle { filled } => {
                let style = if filled { SOURCE_GREY.filled() } else { SOURCE_GREY.stroke_width(1) };
                strip.draw(&TriangleMarker::new((x + 8, y), 6, style))
            }
        }
        .map_err(failed)?;
        strip.draw(&Text::new(label.clone(), (x + 24, y), style.clone())).map_err(failed)?;
    }
    Ok(())
}

/// Draws a numeric panel's plot, on a linear or (`Panel::log_values`) a
/// logarithmic value axis; returns its key.
fn numeric(area: &Area, p: &Panel, oversubscribed_from: Option<f64>) -> Result<Keys, String> {
    let xs = || p.series.iter().flat_map(|s| s.points.iter().map(|q| q.0));
    let (x_lo, x_hi) = (xs().fold(f64::MAX, f64::min).min(0.0), xs().fold(0.0, f64::max).max(1.0));
    let x = (x_lo, x_hi + (x_hi - x_lo) * 0.05);
    let mut builder = ChartBuilder::on(area);
    builder.caption(&p.title, ("sans-serif", 15)).margin(12).x_label_area_size(42).y_label_area_size(70);
    if p.log_y {
        let (y_lo, y_hi) = log_range(&p.series);
        let y = (y_lo..y_hi).log_scale().with_key_points(log_ticks(y_lo, y_hi));
        let mut chart = builder.build_cartesian_2d(x.0..x.1, y).map_err(failed)?;
        numeric_body(&mut chart, p, x, (y_lo, y_hi), oversubscribed_from)
    } else {
        let y_hi = value_top(&p.series, 0.08);
        let mut chart = builder.build_cartesian_2d(x.0..x.1, 0.0..y_hi).map_err(failed)?;
        numeric_body(&mut chart, p, x, (0.0, y_hi), oversubscribed_from)
    }
}

/// A logarithmic axis's range: the smallest positive value and the largest
/// (medians and spreads), a quarter beyond each.
fn log_range(series: &[Series]) -> (f64, f64) {
    let values =
        || series.iter().flat_map(|s| s.points.iter().map(|p| p.1).chain(s.spread.iter().flat_map(|r| [r.0, r.1])));
    let lo = values().filter(|v| *v > 0.0).fold(f64::MAX, f64::min);
    let hi = values().fold(0.0, f64::max);
    if lo == f64::MAX || hi <= 0.0 {
        return (1.0, 10.0);
    }
    (lo / 1.25, (hi * 1.25).max(lo * 2.0))
}

/// Ticks of a logarithmic axis from `lo` to `hi`: 1, 2 and 5 times each
/// power of ten, or the powers alone when those would be more than a dozen.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    assert!(0.0 < lo && lo < hi, "a logarithmic axis from {lo} to {hi}");
    let mut ticks = Vec::new();
    let mut power = 10f64.powf(lo.log10().floor());
    while power <= hi {
        ticks.extend([1.0, 2.0, 5.0].iter().map(|m| m * power).filter(|v| (lo..=hi).contains(v)));
        power *= 10.0;
    }
    if ticks.len() > 12 {
        ticks.retain(|v| (v.log10() - v.log10().round()).abs() < 1e-9);
    }
    ticks
}

/// Where the shade of the oversubscribed range starts: halfway between the
/// last point below `from` and `from`, so it covers exactly the points at
/// or past `from` (the axis's start when none is below).
fn shade_start(p: &Panel, from: f64, x_lo: f64) -> f64 {
    let below = p.series.iter().flat_map(|s| s.points.iter().map(|q| q.0)).filter(|x| *x < from);
    below.fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x)))).map_or(x_lo, |x| (x + from) / 2.0)
}

/// A numeric panel's mesh, shade and series on `chart`, whose value axis
/// spans `y` (on a logarithmic axis, values that are not positive are left
/// out).
fn numeric_body<Y>(
    chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<RangedCoordf64, Y>>,
    p: &Panel,
    x: (f64, f64),
    y: (f64, f64),
    oversubscribed_from: Option<f64>,
) -> Result<Keys, String>
where
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let mut keys = Keys::new();
    let xs = || p.series.iter().flat_map(|s| s.points.iter().map(|q| q.0));
    // Counts (jobs) get whole-number ticks, one per unit up to 16.
    let whole = xs().all(|x| x.fract() == 0.0);
    let x_ticks = if whole && x.1 - x.0 <= 16.0 { (x.1 - x.0) as usize + 1 } else { 10 };
    let x_text = |v: &f64| if whole && v.fract() != 0.0 { String::new() } else { number(*v) };
    chart
        .configure_mesh()
        .x_desc(p.x_label.as_str())
        .y_desc(p.y_label.as_str())
        .x_labels(x_ticks)
        .x_label_formatter(&x_text)
        .y_label_formatter(&|v| number(*v))
        .label_style(("sans-serif", 12))
        .axis_desc_style(("sans-serif", 13))
        .bold_line_style(RGBColor(225, 225, 225))
        .light_line_style(WHITE)
        .draw()
        .map_err(failed)?;
    if let Some(from) = oversubscribed_from {
        let shade = RGBColor(0, 0, 0).mix(0.07).filled();
        let start = shade_start(p, from, x.0);
        chart.draw_series(std::iter::once(Rectangle::new([(start, y.0), (x.1, y.1)], shade))).map_err(failed)?;
        keys.push((shade_label(from), Mark::Shade));
    }
    let shown = |v: f64| !p.log_y || v > 0.0;
    let mut sources = 0;
    for (i, s) in p.series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let points = || s.points.iter().copied().filter(|q| shown(q.1));
        match s.origin {
            Origin::Measured => {
                chart.draw_series(LineSeries::new(points(), color.stroke_width(2))).map_err(failed)?;
                keys.push((s.label.clone(), Mark::Line(color)));
                chart.draw_series(points().map(|q| Circle::new(q, 3, color.filled()))).map_err(failed)?;
                let bars = s.points.iter().zip(&s.spread).filter(|(q, r)| shown(q.1) && shown(r.0));
                chart
                    .draw_series(bars.map(|(&(x, y), &(lo, hi))| ErrorBar::new_vertical(x, lo, y, hi, color, 8)))
                    .map_err(failed)?;
            }
            Origin::Source => {
                let dashed = DashedLineSeries::new(points(), 5, 4, SOURCE_GREY.stroke_width(1));
                chart.draw_series(dashed).map_err(failed)?;
                let filled = sources == 0;
                sources += 1;
                let style = if filled { SOURCE_GREY.filled() } else { SOURCE_GREY.stroke_width(1) };
                chart.draw_series(points().map(|q| TriangleMarker::new(q, 6, style))).map_err(failed)?;
                keys.push((s.label.clone(), Mark::Triangle { filled }));
            }
        }
    }
    Ok(keys)
}

/// Named cases top to bottom, a bar per series in each case's band.
fn bars(area: &Area, p: &Panel, names: &[String]) -> Result<Keys, String> {
    let mut keys = Keys::new();
    let n = names.len().max(1);
    let k = p.series.len().max(1) as f64;
    // Room right of the longest bar for its value.
    let x_hi = value_top(&p.series, 0.15);
    let longest = names.iter().map(|s| s.chars().count()).max().unwrap_or(4) as u32;
    let mut chart = ChartBuilder::on(area)
        .caption(&p.title, ("sans-serif", 15))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size((longest * 7 + 12).clamp(60, 300))
        .build_cartesian_2d(0.0..x_hi, -0.5..(n as f64 - 0.5))
        .map_err(failed)?;
    // Case i sits at y = n - 1 - i, so the first case is on top.
    let name_at = |v: &f64| {
        let r = v.round();
        let i = n as f64 - 1.0 - r;
        if (v - r).abs() < 1e-6 && (0.0..n as f64).contains(&i) {
            names.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_formatter(&name_at)
        .x_desc(p.y_label.as_str())
        .x_label_formatter(&|v| number(*v))
        .label_style(("sans-serif", 12))
        .axis_desc_style(("sans-serif", 13))
        .bold_line_style(RGBColor(225, 225, 225))
        .light_line_style(WHITE)
        .draw()
        .map_err(failed)?;
    let band = 0.8 / k;
    for (j, s) in p.series.iter().enumerate() {
        let color = match s.origin {
            Origin::Measured => PALETTE[j % PALETTE.len()],
            Origin::Source => SOURCE_GREY,
        };
        let centre = |case: f64| (n as f64 - 1.0 - case) + 0.4 - band * (j as f64 + 0.5);
        let rects = s.points.iter().map(|&(case, v)| {
            let c = centre(case);
            Rectangle::new([(0.0, c - band * 0.42), (v, c + band * 0.42)], color.mix(0.85).filled())
        });
        chart.draw_series(rects).map_err(failed)?;
        keys.push((s.label.clone(), Mark::Bar(color)));
        let spread = s.points.iter().zip(&s.spread);
        chart
            .draw_series(
                spread.map(|(&(case, v), &(lo, hi))| ErrorBar::new_horizontal(centre(case), lo, v, hi, BLACK, 6)),
            )
            .map_err(failed)?;
        let style = TextStyle::from(("sans-serif", 10).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        let values = s.points.iter().enumerate().map(|(i, &(case, v))| {
            let end = s.spread.get(i).map_or(v, |r| r.1.max(v));
            Text::new(number(v), (end + x_hi * 0.01, centre(case)), style.clone())
        });
        chart.draw_series(values).map_err(failed)?;
    }
    Ok(keys)
}

/// `v` rounded to a whole number, thousands separated: 149426 -> "149,426".
pub fn thousands(v: f64) -> String {
    let digits = format!("{}", v.abs().round() as u64);
    let mut out = String::from(if v <= -0.5 { "-" } else { "" });
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// An axis or bar value at round precision, thousands separated, no SI
/// suffix (an axis named "KIOPS" reads "15", not "15.0k").
pub fn number(v: f64) -> String {
    let a = v.abs();
    if a >= 10_000.0 {
        thousands(v)
    } else if a >= 100.0 || v == v.round() {
        format!("{v:.0}")
    } else {
        let places = if a >= 1.0 { 2 } else { 3 };
        let s = format!("{v:.places$}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_written() {
        assert_eq!(number(15_000.0), "15,000");
        assert_eq!(number(1_361_000.0), "1,361,000");
        assert_eq!(number(250.4), "250");
        assert_eq!(number(2.5), "2.5");
        assert_eq!(number(1.25), "1.25");
        assert_eq!(number(0.0), "0");
        assert_eq!(number(0.125), "0.125");
        assert_eq!(number(-12_345.0), "-12,345");
        assert_eq!(
            (thousands(149_426.0), thousands(999.0), thousands(17_654.6)),
            ("149,426".into(), "999".into(), "17,655".into())
        );
    }

    fn sample() -> Vec<Panel> {
        let jobs = Panel::numeric("jobs panel", "jobs", "IOPS")
            .oversubscribed_from(4.0)
            .with(
                Series::measured("per-zone", vec![(1.0, 10.0), (8.0, 20.0)])
                    .with_spread(vec![(9.0, 11.0), (18.0, 21.0)]),
            )
            .with(Series::source("source", vec![(8.0, 25.0)]));
        let cases = Panel::categories("cases panel", "x idle", vec!["idle".into(), "bfq without limits".into()])
            .with(Series::measured("mqblk", vec![(0.0, 1.0), (1.0, 51.8)]).with_spread(vec![(1.0, 1.0), (50.0, 53.0)]))
            .with(Series::source("source", vec![(0.0, 1.0), (1.0, 75.0)]));
        vec![jobs, cases]
    }

    #[test]
    fn chart_draws_every_series_spread_and_case_name() {
        let svg = chart(&sample(), 2).expect("a sans-serif font (fonts-dejavu-core)");
        assert!(svg.starts_with("<svg"));
        for text in [
            "jobs panel",
            "cases panel",
            "per-zone",
            "source",
            "bfq without limits",
            "idle",
            "51.8",
            "more threads than CPUs",
        ] {
            assert!(svg.contains(text), "no '{text}' in the chart");
        }
        // Two lines of the numeric panel (measured, dashed source) and the
        // bars of the categorical one.
        assert!(svg.matches("<polyline").count() >= 2, "lines missing");
        assert!(svg.matches("<rect").count() >= 4, "bars missing");
    }

    /// The y of the SVG text element that reads `label`.
    fn text_y(svg: &str, label: &str) -> f64 {
        let escaped = label.replace('>', "&gt;");
        let end = svg.find(&format!(">\n{escaped}\n<")).unwrap_or_else(|| panic!("no text '{label}'"));
        let start = svg[..end].rfind("<text").expect("a text element");
        let attr = &svg[start..end];
        let y = &attr[attr.find(" y=\"").expect("a y attribute") + 4..];
        y[..y.find('"').unwrap()].parse().unwrap()
    }

    #[test]
    fn keys_sit_below_the_plots_they_name() {
        let svg = chart(&sample(), 2).unwrap();
        let plot_bottom = PANEL_H as f64;
        for label in ["per-zone", "source", "mqblk", "jobs >= 4: more threads than CPUs"] {
            assert!(text_y(&svg, label) > plot_bottom, "key '{label}' drawn over the plot");
        }
        assert!(text_y(&svg, "jobs panel") < plot_bottom, "the title stays on the plot");
        // Three short labels: two to a row, so two rows.
        assert_eq!(key_height(&sample()[0]), 10 + 2 * KEY_ROW_PX);
    }

    #[test]
    fn log_ticks_are_one_two_five_per_decade() {
        assert_eq!(log_ticks(150.0, 30_000.0), vec![200.0, 500.0, 1_000.0, 2_000.0, 5_000.0, 10_000.0, 20_000.0]);
        // Seven decades: the powers of ten alone.
        assert_eq!(log_ticks(0.5, 2e7), vec![1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6, 1e7]);
    }

    #[test]
    fn the_shade_starts_between_the_last_point_before_it_and_it() {
        let panel = |xs: &[f64]| {
            Panel::numeric("p", "jobs", "v").with(Series::measured("s", xs.iter().map(|&x| (x, 1.0)).collect()))
        };
        assert_eq!(shade_start(&panel(&[1.0, 2.0, 4.0, 8.0]), 3.0, 0.0), 2.5);
        assert_eq!(shade_start(&panel(&[1.0, 24.0, 48.0]), 2.0, 0.0), 1.5);
        // Every point oversubscribed: from the axis's start.
        assert_eq!(shade_start(&panel(&[1.0, 18.0]), 1.0, 0.0), 0.0);
    }

    #[test]
    fn a_log_panel_draws_series_a_decade_apart() {
        let panel = Panel::numeric("log panel", "jobs", "switches/s")
            .log_values()
            .oversubscribed_from(2.0)
            .with(
                Series::measured("ours", vec![(1.0, 300.0), (48.0, 900.0)])
                    .with_spread(vec![(250.0, 350.0), (0.0, 950.0)]),
            )
            .with(Series::source("source", vec![(1.0, 5_000.0), (48.0, 19_000.0)]));
        let svg = chart(&[panel], 1).unwrap();
        for text in ["log panel", "ours", "source", "1000", "10,000", "more threads than CPUs"] {
            assert!(svg.contains(text), "no '{text}' in the chart");
        }
    }

    #[test]
    fn png_is_written() {
        let dir = std::env::temp_dir().join(format!("mqblk-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (svg, png) = (dir.join("c.svg"), dir.join("c.png"));
        super::super::write_chart(&sample(), 2, &svg, &png).unwrap();
        let bytes = std::fs::read(&png).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        assert!(bytes.len() > 10_000, "an empty image ({} bytes)", bytes.len());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
