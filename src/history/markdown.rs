//! The history as Markdown for a CI job summary: the result first, then per
//! machine and profile the change points (newest first), the series whose
//! latest value left their noise band, and the broken checks.

use std::fmt::Write as _;

use super::Outcome;
use super::analyse::Analysed;
use super::load::Record;
use super::page::short;
use crate::compare::render::md;
use crate::report::page::format_value;

pub fn render(outcome: &Outcome, records: &[Record]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## jsbench history\n\n{}\n", outcome.headline);
    for note in &outcome.notes {
        let _ = writeln!(out, "- {}", md(note));
    }
    if !outcome.notes.is_empty() {
        out.push('\n');
    }
    for (group, analysed) in &outcome.groups {
        let _ = writeln!(
            out,
            "### {} on {}\n\n{} runs; E-Divisive means over the newest {} of each series, a change point at p ≤ {}, regressions beyond {:.1}% fail.\n",
            md(&group.profile),
            md(&group.host),
            group.runs.len(),
            outcome.rule.window,
            outcome.rule.settings.alpha,
            outcome.rule.threshold * 100.0
        );
        let rows = change_rows(analysed);
        if rows.is_empty() {
            let _ = writeln!(out, "No change points.\n");
        } else {
            let _ = writeln!(out, "| series | commits | before | after | change | p | |");
            let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---|");
            for row in rows {
                let cells: Vec<String> = row.iter().map(|c| md(c)).collect();
                let _ = writeln!(out, "| {} |", cells.join(" | "));
            }
            out.push('\n');
        }
        outside_band(&mut out, analysed);
        if !group.events.is_empty() {
            let _ = writeln!(
                out,
                "**Broken checks**\n\n| run | scenario / variant | check | detail |\n|---|---|---|---|"
            );
            for e in &group.events {
                let r = &records[group.runs[e.position]];
                let _ = writeln!(
                    out,
                    "| {} | {}/{} | {} | {} |",
                    short(r.commit.as_deref(), r.dirty),
                    md(&e.failure.scenario),
                    md(&e.failure.variant),
                    md(&e.failure.check),
                    md(&e.failure.detail)
                );
            }
            out.push('\n');
        }
    }
    out
}

fn outside_band(out: &mut String, analysed: &[Analysed]) {
    let outside: Vec<&Analysed> = analysed
        .iter()
        .filter(|a| a.latest_outside_band())
        .collect();
    if outside.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "Latest value outside its series' noise band (not a change point yet: too few runs after it to test):\n"
    );
    for a in outside {
        let (lo, hi) = a.band.unwrap_or_default();
        let _ = writeln!(
            out,
            "- {}: {} (band {} – {})",
            md(&a.series.label()),
            format_value(a.latest.unwrap_or_default(), &a.series.unit),
            format_value(lo, &a.series.unit),
            format_value(hi, &a.series.unit)
        );
    }
    out.push('\n');
}

/// A row per change point, newest first: series, commit range, medians
/// before and after, change, p-value, and what it means.
pub fn change_rows(analysed: &[Analysed]) -> Vec<Vec<String>> {
    let mut rows: Vec<(usize, Vec<String>)> = Vec::new();
    for a in analysed {
        let newest = a.changes.len().saturating_sub(1);
        for (i, c) in a.changes.iter().enumerate() {
            let meaning = match (c.regression, a.failed && i == newest) {
                (true, true) => "**regression** (fails)",
                (true, false) => "regression",
                (false, _) => "improvement",
            };
            let unit = &a.series.unit;
            rows.push((
                c.position,
                vec![
                    a.series.label(),
                    format!(
                        "{}..{}",
                        short(c.before_commit.as_deref(), false),
                        short(c.after_commit.as_deref(), false)
                    ),
                    format_value(c.before, unit),
                    format_value(c.after, unit),
                    format!("{:+.1}%", c.change * 100.0),
                    format!("{:.3}", c.p_value),
                    meaning.to_string(),
                ],
            ));
        }
    }
    rows.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1[0].cmp(&b.1[0])));
    rows.into_iter().map(|r| r.1).collect()
}
