//! One small inline SVG per series: every run's value (a dot that links to
//! that run's report.html), each segment's median, the change points, the
//! latest segment's noise band and the runs that broke a check. Drawn by
//! hand rather than by plotters: a chart this small is a few dozen
//! elements, and links on the dots are what makes it a history.

use std::fmt::Write as _;

use super::analyse::Analysed;
use super::series::Event;
use crate::report::html::escape;
use crate::report::page::format_value;

pub const WIDTH: f64 = 460.0;
pub const HEIGHT: f64 = 170.0;
const LEFT: f64 = 92.0;
const RIGHT: f64 = 10.0;
const TOP: f64 = 14.0;
const BOTTOM: f64 = 22.0;

/// The report's palette (report.html's charts): blue dots, green medians,
/// orange change points; a failed check is red.
pub const DOT: &str = "#0072b2";
pub const MEDIAN: &str = "#009e73";
pub const CHANGE: &str = "#d55e00";
pub const BAND: &str = "#56b4e9";
pub const EVENT: &str = "#cc0000";

/// What a dot links to and says on hover, per run position.
pub struct RunLabel {
    pub commit: String,
    pub title: String,
    pub href: Option<String>,
}

/// The chart of one series over `runs` run positions.
pub fn svg(a: &Analysed, runs: &[RunLabel], events: &[&Event]) -> String {
    let scale = Scale::new(a, runs.len());
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg class="trend" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img">"#
    );
    let _ = write!(
        out,
        r##"<rect x="0.5" y="0.5" width="{}" height="{}" fill="#ffffff" stroke="#e0e0e0"/>"##,
        WIDTH - 1.0,
        HEIGHT - 1.0
    );
    band(&mut out, a, &scale);
    axes(&mut out, a, runs, &scale);
    for &(start, end, m) in &a.segments {
        let (x0, x1) = (
            scale.x(a.series.points[start].0),
            scale.x(a.series.points[end - 1].0),
        );
        let y = scale.y(m);
        let _ = write!(
            out,
            r#"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{MEDIAN}" stroke-width="2"/>"#,
            x0 - 3.0,
            x1 + 3.0
        );
    }
    for c in &a.changes {
        let x = scale.x(c.position) - scale.step / 2.0;
        let (change, p) = (c.change * 100.0, c.p_value);
        let title = escape(&format!("change point: {change:+.1}% (p = {p:.3})")).into_owned();
        let _ = write!(
            out,
            r#"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="{CHANGE}" stroke-width="2" stroke-dasharray="5,3"><title>{title}</title></line>"#,
            HEIGHT - BOTTOM,
        );
    }
    dots(&mut out, a, runs, &scale);
    for e in events {
        let (commit, f) = (&runs[e.position].commit, &e.failure);
        let title = escape(&format!("{commit} broke {}: {}", f.check, f.detail)).into_owned();
        let _ = write!(
            out,
            r#"<path d="M{:.1} {:.1} l5 -9 l-10 0 z" fill="{EVENT}"><title>{title}</title></path>"#,
            scale.x(e.position),
            TOP + 9.0,
        );
    }
    out.push_str("</svg>");
    out
}

/// Positions to pixels.
struct Scale {
    low: f64,
    high: f64,
    step: f64,
}

impl Scale {
    fn new(a: &Analysed, runs: usize) -> Scale {
        let mut values: Vec<f64> = a.series.values();
        // A band below zero for a quantity that cannot be negative (a
        // latency with a long tail of noise) is drawn down to zero only.
        let floor = if values.iter().all(|v| *v >= 0.0) {
            0.0
        } else {
            f64::NEG_INFINITY
        };
        if let Some((lo, hi)) = a.band {
            values.extend([lo.max(floor), hi]);
        }
        let low = values.iter().copied().fold(f64::INFINITY, f64::min);
        let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let pad = ((high - low) * 0.08).max(high.abs() * 0.01).max(1e-9);
        Scale {
            low: (low - pad).max(floor),
            high: high + pad,
            step: (WIDTH - LEFT - RIGHT) / runs.max(1) as f64,
        }
    }

    fn x(&self, position: usize) -> f64 {
        LEFT + self.step * (position as f64 + 0.5)
    }

    fn y(&self, value: f64) -> f64 {
        let plot = HEIGHT - TOP - BOTTOM;
        TOP + plot * (1.0 - (value - self.low) / (self.high - self.low))
    }
}

fn band(out: &mut String, a: &Analysed, scale: &Scale) {
    let (Some((lo, hi)), Some(&(start, _, _))) = (a.band, a.segments.last()) else {
        return;
    };
    let x0 = scale.x(a.series.points[start].0) - scale.step / 2.0;
    let x1 = WIDTH - RIGHT;
    let (y0, y1) = (scale.y(hi), scale.y(lo.max(scale.low)));
    let _ = write!(
        out,
        r#"<rect x="{x0:.1}" y="{y0:.1}" width="{:.1}" height="{:.1}" fill="{BAND}" fill-opacity="0.25"><title>noise band: ±2σ around the latest segment's median</title></rect>"#,
        (x1 - x0).max(1.0),
        (y1 - y0).max(1.0)
    );
}

fn axes(out: &mut String, a: &Analysed, runs: &[RunLabel], scale: &Scale) {
    let unit = &a.series.unit;
    for value in [scale.low, scale.high] {
        let y = scale.y(value);
        let _ = write!(
            out,
            r##"<text x="{:.1}" y="{:.1}" font-size="11" font-family="sans-serif" text-anchor="end" fill="#444444">{}</text>"##,
            LEFT - 4.0,
            y + 4.0,
            escape(&format_value(value, unit))
        );
    }
    if let (Some(first), Some(last)) = (runs.first(), runs.last()) {
        let y = HEIGHT - 6.0;
        let _ = write!(
            out,
            r##"<text x="{LEFT}" y="{y}" font-size="11" font-family="monospace" fill="#444444">{}</text><text x="{:.1}" y="{y}" font-size="11" font-family="monospace" text-anchor="end" fill="#444444">{}</text>"##,
            escape(&first.commit),
            WIDTH - RIGHT,
            escape(&last.commit)
        );
    }
}

fn dots(out: &mut String, a: &Analysed, runs: &[RunLabel], scale: &Scale) {
    for &(position, value) in &a.series.points {
        let run = &runs[position];
        let title = format!("{}: {}", run.title, format_value(value, &a.series.unit));
        let title = escape(&title);
        let dot = format!(
            r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{DOT}"><title>{title}</title></circle>"#,
            scale.x(position),
            scale.y(value)
        );
        match &run.href {
            Some(href) => {
                let _ = write!(out, r#"<a href="{}">{dot}</a>"#, escape(href));
            }
            None => out.push_str(&dot),
        }
    }
}
