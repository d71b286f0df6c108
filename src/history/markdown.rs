//! The history as Markdown for a CI job summary: the result first, then per
//! machine and profile the change points (newest first), the series whose
//! latest value left their noise band, and the broken checks.

use std::fmt::Write as _;

use super::Outcome;
use super::analyse::Analysed;
use super::load::Record;
use super::table::change_rows;
use crate::compare::render::md;
use crate::report::page::format_value;
use crate::results::metadata::short_commit;

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
                let mut cells: Vec<String> = row.iter().map(|c| md(c)).collect();
                if let Some(last) = cells.last_mut().filter(|c| c.ends_with("(fails)")) {
                    *last = format!("**{last}**");
                }
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
                    short_commit(r.commit.as_deref(), r.dirty),
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
    // The judged series only: a CI summary is read, and 150 context and
    // tail series would bury them (history.html flags every one).
    let outside: Vec<&Analysed> = analysed
        .iter()
        .filter(|a| a.gating && a.latest_outside_band())
        .collect();
    if outside.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "Judged series whose latest value is outside their noise band (not a change point yet: too few runs after it to test):\n"
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
