//! The one renderer: a [`Chart`] onto any plotters backend, so the SVG in
//! report.html and the PNG beside it are the same picture.

use std::path::Path;

use anyhow::{Result, anyhow};
use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::{Chart, Stroke};
use crate::report::fonts::{self, FAMILY};

/// Pixel size of every chart: wide enough for a legend beside the lines,
/// small enough to sit two abreast in an issue.
pub const SIZE: (u32, u32) = (960, 540);

/// Okabe-Ito colours: distinguishable with the common colour-vision
/// deficiencies (yellow left out: unreadable on white).
const PALETTE: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
];

const REFERENCE: RGBColor = RGBColor(110, 110, 110);

pub fn to_svg(chart: &Chart) -> Result<String> {
    fonts::ensure_registered()?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        draw(&root, chart)?;
    }
    Ok(svg)
}

pub fn to_png(chart: &Chart, path: &Path) -> Result<()> {
    fonts::ensure_registered()?;
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    draw(&root, chart)
}

/// Draws into an RGB buffer (`SIZE.0 * SIZE.1 * 3` bytes): what the PNG
/// holds, for tests that look at pixels.
#[cfg(test)]
pub fn to_rgb(chart: &Chart) -> Result<Vec<u8>> {
    fonts::ensure_registered()?;
    let mut buffer = vec![0u8; (SIZE.0 * SIZE.1 * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buffer, SIZE).into_drawing_area();
        draw(&root, chart)?;
    }
    Ok(buffer)
}

fn plot_err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("plotting failed: {e}")
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, chart: &Chart) -> Result<()> {
    root.fill(&WHITE).map_err(plot_err)?;

    // Everything in drawing space (see axis.rs): linear coordinates whatever
    // the scales, ticks chosen there.
    let (xs, ys) = (chart.x.scale, chart.y.scale);
    let series: Vec<Vec<(f64, f64)>> = chart
        .series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .map(|&(x, y)| (xs.forward(x), ys.forward(y)))
                .collect()
        })
        .collect();
    let extent = |pick: fn(&(f64, f64)) -> f64| {
        series
            .iter()
            .flatten()
            .map(pick)
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            })
    };
    let (x_lo, x_hi) = extent(|p| p.0);
    let (y_lo, y_hi) = extent(|p| p.1);
    if !(x_lo.is_finite() && y_lo.is_finite()) {
        return Err(anyhow!("chart {} has no points to draw", chart.stem));
    }
    // Ranges are computed from the data's own units so padding and
    // "from zero" mean what they say.
    let (x0, x1) = xs.range(xs.inverse(x_lo), xs.inverse(x_hi), false);
    let (y0, y1) = ys.range(ys.inverse(y_lo), ys.inverse(y_hi), chart.y_from_zero);
    let x_ticks = xs.ticks(x0, x1);
    let y_ticks = ys.ticks(y0, y1);

    let mut cc = ChartBuilder::on(root)
        .caption(&chart.title, (FAMILY, 24))
        .margin(18)
        .margin_right(44)
        .x_label_area_size(56)
        .y_label_area_size(90)
        .build_cartesian_2d(Ticked::new(x0..x1, x_ticks), Ticked::new(y0..y1, y_ticks))
        .map_err(plot_err)?;
    let x_label = |t: &f64| chart.x.unit.label(xs.inverse(*t));
    let y_label = |t: &f64| chart.y.unit.label(ys.inverse(*t));
    cc.configure_mesh()
        .x_desc(chart.x.label.as_str())
        .y_desc(chart.y.label.as_str())
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .label_style((FAMILY, 15))
        .axis_desc_style((FAMILY, 16))
        .bold_line_style(BLACK.mix(0.12))
        .light_line_style(TRANSPARENT)
        .draw()
        .map_err(plot_err)?;

    for (s, points) in chart.series.iter().zip(&series) {
        let (colour, width) = match s.stroke {
            Stroke::Reference => (REFERENCE, 1),
            _ => (PALETTE[s.colour % PALETTE.len()], 2),
        };
        let style = colour.stroke_width(width);
        let points_of = || points.iter().copied();
        let anno = match s.stroke {
            Stroke::Solid => cc.draw_series(LineSeries::new(points_of(), style)),
            Stroke::Dashed => cc.draw_series(DashedLineSeries::new(points_of(), 7, 5, style)),
            Stroke::Reference => cc.draw_series(DashedLineSeries::new(points_of(), 3, 3, style)),
        }
        .map_err(plot_err)?;
        // Two segments either way: touching for a solid line, apart for a
        // dashed one, so the legend shows which is which.
        let gap = if s.stroke == Stroke::Solid { 0 } else { 5 };
        anno.label(s.label.as_str()).legend(move |(x, y)| {
            EmptyElement::at((x, y))
                + PathElement::new(vec![(0, 0), (8, 0)], style)
                + PathElement::new(vec![(8 + gap, 0), (16 + gap, 0)], style)
        });
        if s.markers {
            cc.draw_series(points.iter().map(|&p| Circle::new(p, 4, colour.filled())))
                .map_err(plot_err)?;
        }
    }

    cc.configure_series_labels()
        .position(legend_corner(&series, (x0, x1), (y0, y1)))
        .margin(12)
        .label_font((FAMILY, 14))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)?;
    Ok(())
}

/// Where the legend hides the least of the lines: a corner, or the middle
/// of either side when every corner is busy (a sweep's curves often run
/// along both the top and the bottom). Lines are sampled along their
/// segments in plot-relative coordinates, so a line crossing a box counts
/// even when none of its points lies inside.
fn legend_corner(
    series: &[Vec<(f64, f64)>],
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
) -> SeriesLabelPosition {
    // The share of the plot a legend covers, roughly, from its edge.
    const W: f64 = 0.35;
    const H: f64 = 0.45;
    // The middle of either side, from m0 to m1.
    let (m0, m1) = (0.5 - H / 2.0, 0.5 + H / 2.0);
    // (position, x from, x to, y from, y to), in preference order when tied.
    let boxes = [
        (SeriesLabelPosition::UpperLeft, 0.0, W, 1.0 - H, 1.0),
        (SeriesLabelPosition::UpperRight, 1.0 - W, 1.0, 1.0 - H, 1.0),
        (SeriesLabelPosition::LowerRight, 1.0 - W, 1.0, 0.0, H),
        (SeriesLabelPosition::LowerLeft, 0.0, W, 0.0, H),
        (SeriesLabelPosition::MiddleLeft, 0.0, W, m0, m1),
        (SeriesLabelPosition::MiddleRight, 1.0 - W, 1.0, m0, m1),
    ];
    let relative = |(x, y): (f64, f64)| ((x - x0) / (x1 - x0), (y - y0) / (y1 - y0));
    let samples: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|points| {
            let single = (points.len() == 1).then(|| relative(points[0]));
            points
                .windows(2)
                .flat_map(move |w| {
                    let (a, b) = (relative(w[0]), relative(w[1]));
                    (0..=16).map(move |i| {
                        let t = f64::from(i) / 16.0;
                        (a.0 + (b.0 - a.0) * t, a.1 + (b.1 - a.1) * t)
                    })
                })
                .chain(single)
        })
        .collect();
    boxes
        .into_iter()
        .min_by_key(|&(_, xa, xb, ya, yb)| {
            samples
                .iter()
                .filter(|(x, y)| (xa..=xb).contains(x) && (ya..=yb).contains(y))
                .count()
        })
        .map_or(SeriesLabelPosition::UpperLeft, |(p, ..)| p)
}

/// A linear coordinate with the tick positions axis.rs chose. (plotters'
/// own `with_key_points` wrapper loses the label formatter on f64 axes.)
pub(crate) struct Ticked {
    inner: RangedCoordf64,
    ticks: Vec<f64>,
}

impl Ticked {
    pub(crate) fn new(range: Range<f64>, ticks: Vec<f64>) -> Self {
        Ticked {
            inner: range.into(),
            ticks,
        }
    }
}

impl Ranged for Ticked {
    // Labels always come from the chart's formatter; this only satisfies
    // the mesh's requirement for a default.
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // Bold grid lines at the ticks; no light ones.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.inner.range()
    }
}
