//! The paired ratios as a picture, and the report.html around it: one row
//! per judged metric, every pair's NEW/BASE ratio a dot, the interval a
//! bar coloured by its verdict, the estimate a tick, the threshold a band.
//! A reader sees at once which intervals clear their band, and how much
//! the pairs scatter.

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::coord::Shift;
use plotters::prelude::*;

use super::AbReport;
use super::judge::{Judgement, PairedVerdict};
use crate::report::charts::draw::Ticked;
use crate::report::fonts::{self, FAMILY};
use crate::report::html::{Html, Trusted};

const WIDTH: u32 = 1100;
const ROW: u32 = 22;
const LABELS: u32 = 470;

/// How far the x axis reaches either side of 1 at most: ratios beyond
/// are drawn at the edge.
const REACH: f64 = 4.0;

fn colour(verdict: PairedVerdict) -> RGBColor {
    match verdict {
        PairedVerdict::Regressed | PairedVerdict::MissingInNew => RGBColor(213, 94, 0),
        PairedVerdict::Improved => RGBColor(0, 158, 115),
        PairedVerdict::Unchanged => RGBColor(0, 114, 178),
        _ => RGBColor(230, 159, 0),
    }
}

/// The judged metrics in the table's order, less those missing in NEW
/// (no ratio to draw).
fn rows(report: &AbReport) -> Vec<&Judgement> {
    let mut rows: Vec<&Judgement> = report
        .judged()
        .filter(|m| m.verdict != PairedVerdict::MissingInNew)
        .collect();
    rows.sort_by_key(|m| super::render::order(m));
    rows
}

/// The x range in log units: every ratio and interval end, at least ±10%.
fn extent(rows: &[&Judgement]) -> (f64, f64) {
    let mut lo: f64 = (1.0f64 / 1.1).ln();
    let mut hi: f64 = 1.1f64.ln();
    for m in rows {
        for r in m.ratios.iter().chain(m.low.iter()).chain(m.high.iter()) {
            if *r > 0.0 && r.is_finite() {
                lo = lo.min(r.ln());
                hi = hi.max(r.ln());
            }
        }
    }
    let reach = REACH.ln();
    (lo.max(-reach) - 0.02, hi.min(reach) + 0.02)
}

fn tick_label(log: f64) -> String {
    let change = (log.exp() - 1.0) * 100.0;
    if change.abs() < 0.05 {
        "0".into()
    } else {
        format!("{change:+.0}%")
    }
}

/// Ticks at round ratios inside the range, in log units, as many as fit
/// the axis without crowding.
fn ticks(x0: f64, x1: f64) -> Vec<f64> {
    let span = x1 - x0;
    let ratios: &[f64] = if span > 1.0 {
        &[0.25, 0.5, 0.8, 1.0, 1.25, 2.0, 4.0]
    } else if span > 0.4 {
        &[0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0]
    } else {
        &[0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25]
    };
    ratios
        .iter()
        .map(|r: &f64| r.ln())
        .filter(|l| (x0..=x1).contains(l))
        .collect()
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, report: &AbReport) -> Result<()> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("plotting failed: {e}");
    root.fill(&WHITE).map_err(err)?;
    let rows = rows(report);
    let with_profile = report.profiles.len() > 1;
    let (x0, x1) = extent(&rows);
    let n = rows.len().max(1) as f64;
    let mut chart = ChartBuilder::on(root)
        .caption(
            format!(
                "NEW/BASE per pair, with simultaneous intervals ({} judged pairs)",
                report.looks.last().map_or(0, |l| l.pairs)
            ),
            (FAMILY, 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(LABELS)
        .build_cartesian_2d(Ticked::new(x0..x1, ticks(x0, x1)), -0.5..n - 0.5)
        .map_err(err)?;
    let labels: Vec<String> = rows.iter().map(|m| m.key.label(with_profile)).collect();
    let y_label = |y: &f64| {
        let i = (n - 1.0 - y).round();
        if (n - 1.0 - y - i).abs() < 1e-6 && i >= 0.0 {
            labels.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .x_desc("change of NEW against BASE (log scale)")
        .x_label_formatter(&|x| tick_label(*x))
        .y_labels(rows.len().max(1))
        .y_label_formatter(&y_label)
        .label_style((FAMILY, 13))
        .axis_desc_style((FAMILY, 14))
        .bold_line_style(BLACK.mix(0.08))
        .light_line_style(TRANSPARENT)
        .draw()
        .map_err(err)?;
    // The first row on top.
    let row_y = |i: usize| n - 1.0 - i as f64;
    for (i, m) in rows.iter().enumerate() {
        let y = row_y(i);
        let c = colour(m.verdict);
        if let Some(t) = m.threshold {
            let band = (1.0 + t).ln();
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(-band, y - 0.4), (band, y + 0.4)],
                    RGBColor(0, 0, 0).mix(0.06).filled(),
                )))
                .map_err(err)?;
        }
        let clamp = |log: f64| log.clamp(x0, x1);
        chart
            .draw_series(
                m.ratios
                    .iter()
                    .filter(|r| **r > 0.0)
                    .map(|r| Circle::new((clamp(r.ln()), y), 3, c.mix(0.35).filled())),
            )
            .map_err(err)?;
        if let (Some(lo), Some(hi)) = (m.low, m.high) {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(clamp(lo.ln()), y), (clamp(hi.ln()), y)],
                    c.stroke_width(4),
                )))
                .map_err(err)?;
        }
        if let Some(r) = m.ratio {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(clamp(r.ln()), y - 0.35), (clamp(r.ln()), y + 0.35)],
                    BLACK.stroke_width(2),
                )))
                .map_err(err)?;
        }
    }
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(0.0, -0.5), (0.0, n - 0.5)],
            BLACK.mix(0.5).stroke_width(1),
        )))
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

fn size(report: &AbReport) -> (u32, u32) {
    (WIDTH, 90 + ROW * rows(report).len().max(1) as u32)
}

pub fn svg(report: &AbReport) -> Result<String> {
    fonts::ensure_registered()?;
    let mut out = String::new();
    draw(
        &SVGBackend::with_string(&mut out, size(report)).into_drawing_area(),
        report,
    )?;
    Ok(out)
}

/// Writes `charts/ab.svg`, `charts/ab.png` and `report.html` into `dir`.
pub fn write(dir: &Path, report: &AbReport) -> Result<()> {
    let charts = dir.join("charts");
    std::fs::create_dir_all(&charts)?;
    let svg = svg(report)?;
    std::fs::write(charts.join("ab.svg"), &svg)?;
    let png = charts.join("ab.png");
    draw(
        &BitMapBackend::new(&png, size(report)).into_drawing_area(),
        report,
    )?;
    std::fs::write(dir.join("report.html"), page(report, &svg))?;
    Ok(())
}

/// report.html: the verdict, the sides and the method, NEW's broken
/// checks, the chart, the table.
fn page(report: &AbReport, svg: &str) -> String {
    let terminal = super::render::terminal(report);
    let headline = terminal
        .lines()
        .find_map(|l| l.strip_prefix("result: "))
        .unwrap_or(&report.verdict)
        .to_string();
    let class = if report.exit_code == 0 {
        "banner verdict-passed"
    } else {
        "banner verdict-failed"
    };
    let title = format!("jsbench ab: {headline}");
    Html::page(&title, &[], crate::report::page::CSS, |h| {
        h.text_el(
            "h1",
            &[],
            &format!("jsbench ab: {}", report.profiles.join(", ")),
        );
        h.text_el("div", &[("class", class), ("id", "verdict")], &headline);
        h.el("pre", &[], |h| {
            h.text(&terminal);
        });
        h.text_el("h2", &[], "Paired ratios");
        h.text_el(
            "p",
            &[],
            "Each dot is one pair's NEW/BASE; the bar is the interval of their centre at \
             the level the metrics share at the last look (orange: undecided or regressed, \
             blue: unchanged, green: improved), the black tick its estimate, the grey band \
             the threshold. A regression is a bar wholly beyond half the band on the worse \
             side (right for a latency or a cost, left for a rate).",
        );
        h.trusted(&Trusted::inline_svg(svg));
    })
}
