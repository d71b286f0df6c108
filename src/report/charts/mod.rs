//! Charts: what each scenario's data looks like as a picture.
//!
//! A chart is first described as data ([`Chart`]: axes, series of points
//! in the data's own units) by a small *chart function*, and only then
//! drawn, by one renderer ([`draw`]) for every chart, as SVG (inlined in
//! report.html) and PNG (for slides, issues and chat). Keeping the two
//! apart means the data preparation is tested without pixels, and a new
//! chart never touches plotters.
//!
//! # Adding a chart
//!
//! Write a function `fn(&ScenarioData) -> Option<Chart>` that returns
//! `None` unless the scenario carries the data it needs (look the data up
//! by scenario kind, histogram name, metric name or timeline name), and
//! add it to [`CATALOGUE`]. A scenario that has not recorded that data has
//! no such chart; nothing else changes. The builders in [`latency`] are the
//! examples: [`latency::percentile_chart`] turns any set of histograms into
//! a nines-axis distribution, [`latency::sweep_chart`] any metrics into a
//! curve over the variants' achieved rates.
//!
//! The catalogue draws latency distributions (e2e, PubAck, send lag, the
//! DLQ's final delivery to persistence), latency and throughput over time,
//! latency against throughput, replay pacing (drift and gap error) and
//! the servers' CPU and memory. Two figures the design asks for have their
//! data recorded but no chart yet:
//!
//! - redelivery delay against expected, per cause: the `redelivery_delay`
//!   histograms per cause (consume::fates) through `percentile_chart`,
//!   with the configured delay as a [`Stroke::Reference`] series;
//! - the MaxAckPending curve: backpressure's consume rate against the
//!   variant parameter `max_ack_pending`, with its Little's-law `bound` as
//!   a reference series.

pub mod axis;
pub mod draw;
pub mod latency;
pub mod replay;
pub mod server;

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

pub use axis::{Axis, Scale, Unit};

use super::data::ScenarioData;
use crate::results::summary::VariantReport;

/// A chart as data: everything the renderer needs, nothing drawn yet.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// File name without extension, unique within a results folder:
    /// `<scenario>.<chart>`.
    pub stem: String,
    pub title: String,
    /// One sentence under the chart in report.html: how to read it.
    pub caption: String,
    pub x: Axis,
    pub y: Axis,
    /// Whether a linear y axis starts at zero (rates do; nothing else needs to).
    pub y_from_zero: bool,
    pub series: Vec<Series>,
}

/// One line of a chart, in data units (the axes' scales map them).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    /// Index into the palette: series that belong together (one variant's
    /// intended-send and actual-send latency) share a colour.
    pub colour: usize,
    pub stroke: Stroke,
    /// Marks each point: for curves through few points (one per variant).
    pub markers: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stroke {
    Solid,
    /// The same quantity measured another way (actual-send latency, the
    /// consumer's side of a throughput pair).
    Dashed,
    /// A bound or an expectation to compare against, not a measurement.
    Reference,
}

impl Chart {
    /// The chart `<scenario>.<key>`, titled `<scenario>: <title>`; a linear
    /// y axis starts at zero. `None` when there is no series to draw.
    pub fn of(
        s: &ScenarioData,
        key: &str,
        title: &str,
        caption: &str,
        (x, y): (Axis, Axis),
        series: Vec<Series>,
    ) -> Option<Chart> {
        (!series.is_empty()).then(|| Chart {
            stem: safe_stem(&format!("{}.{key}", s.name())),
            title: format!("{}: {title}", s.name()),
            caption: caption.into(),
            y_from_zero: y.scale == Scale::Linear,
            x,
            y,
            series,
        })
    }

    /// The chart with `more` series drawn after its own (reference lines).
    pub fn with(mut self, more: impl IntoIterator<Item = Series>) -> Chart {
        self.series.extend(more);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.series.iter().all(|s| s.points.is_empty())
    }
}

impl Series {
    /// A line through `points`, its points unmarked.
    pub fn line(
        label: impl Into<String>,
        points: Vec<(f64, f64)>,
        colour: usize,
        stroke: Stroke,
    ) -> Series {
        Series {
            label: label.into(),
            points,
            colour,
            stroke,
            markers: false,
        }
    }

    /// The line with each of its points marked.
    pub fn marked(self) -> Series {
        Series {
            markers: true,
            ..self
        }
    }

    /// A bound or an expectation to compare against.
    pub fn reference(label: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series::line(label, points, 0, Stroke::Reference)
    }
}

/// The lowest and the highest x (`pick` = `|p| p.0`) or y of every point,
/// the highest at least zero.
pub fn span(series: &[Series], pick: fn(&(f64, f64)) -> f64) -> (f64, f64) {
    series
        .iter()
        .flat_map(|s| s.points.iter().map(pick))
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        })
}

/// One unnamed family, solid: a series per variant.
pub const ONE: &[((), &str, bool)] = &[((), "", false)];

/// A series per variant (coloured by its place among them) and family
/// `(F, label, dashed)`: the `points` of what the variant recorded of the
/// family, labelled by the variant's name and the family's label; none
/// where `points` finds nothing to draw.
pub fn per_variant<F: Copy>(
    s: &ScenarioData,
    families: &[(F, &str, bool)],
    points: impl Fn(&VariantReport, F) -> Option<Vec<(f64, f64)>>,
) -> Vec<Series> {
    let mut series = Vec::new();
    for (i, v) in s.variants().iter().enumerate() {
        for &(family, label, dashed) in families {
            if let Some(points) = points(v, family) {
                let label = if label.is_empty() {
                    v.name.clone()
                } else {
                    format!("{} {label}", v.name)
                };
                let stroke = if dashed {
                    Stroke::Dashed
                } else {
                    Stroke::Solid
                };
                series.push(Series::line(label, points, i, stroke));
            }
        }
    }
    series
}

/// A chart function: the chart for a scenario, if it has the data.
pub type ChartFn = fn(&ScenarioData) -> Option<Chart>;

/// Every chart jsbench draws by a function of its own, in the order
/// report.html shows them (after [`latency::COMMON`], the latency charts
/// declared as data).
pub const CATALOGUE: &[ChartFn] = &[
    latency::throughput_over_time,
    latency::latency_vs_throughput,
    replay::drift,
    replay::gap_error,
    replay::gap_error_by_gap,
    server::memory,
    server::cpu,
];

/// The charts of one scenario: every common latency chart and catalogue
/// entry that has data, then the ones its kind declares.
pub fn charts_for(scenario: &ScenarioData) -> Vec<Chart> {
    let common = latency::of_specs(scenario, latency::COMMON);
    let kind = latency::of_specs(scenario, crate::scenario::charts(scenario.kind()));
    common
        .into_iter()
        .chain(CATALOGUE.iter().filter_map(|f| f(scenario)))
        .chain(kind)
        .filter(|c| !c.is_empty())
        .collect()
}

/// Draws `chart` and writes `<stem>.svg` and `<stem>.png` into `dir`: the
/// SVG text (for inlining) and where the files went.
pub fn render(chart: &Chart, dir: &Path) -> Result<(String, [PathBuf; 2])> {
    let svg = draw::to_svg(chart).with_context(|| format!("drawing {}.svg", chart.stem))?;
    let svg_path = dir.join(format!("{}.svg", chart.stem));
    fs::write(&svg_path, &svg).with_context(|| format!("writing {}", svg_path.display()))?;
    let png_path = dir.join(format!("{}.png", chart.stem));
    draw::to_png(chart, &png_path).with_context(|| format!("drawing {}", png_path.display()))?;
    Ok((svg, [svg_path, png_path]))
}

/// A name safe as a file name and an HTML id, whatever a hand-edited
/// summary holds: letters, digits, `-`, `_` and `.` stay, the rest become `_`.
pub fn safe_stem(text: &str) -> String {
    let stem: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    // No hidden files, no "..".
    stem.trim_start_matches('.').replace("..", "_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems_are_safe_file_names() {
        assert_eq!(safe_stem("latency.e2e_latency"), "latency.e2e_latency");
        assert_eq!(safe_stem("../a b/c"), "_a_b_c");
        assert_eq!(safe_stem("x..y"), "x_y");
    }
}
