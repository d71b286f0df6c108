//! A comparison as a terminal table, as Markdown for a pull-request
//! comment, or as JSON for tools. Every format leads with the result and
//! any invariant failure in NEW, then the metrics that changed.

use std::fmt::Write as _;

use anyhow::{Context, Result};

use super::rule::{Side, Verdict};
use super::{Comparison, Failure, JudgedBy, MetricComparison};
use crate::report::page::format_with_range;
pub use crate::report::terminal::aligned;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    Markdown,
    Json,
}

pub fn render(c: &Comparison, format: Format) -> Result<String> {
    Ok(match format {
        Format::Table => table(c),
        Format::Markdown => markdown(c),
        Format::Json => {
            let mut text = serde_json::to_string_pretty(c).context("serialising the comparison")?;
            text.push('\n');
            text
        }
    })
}

fn percent(fraction: f64) -> String {
    let p = fraction * 100.0;
    if p.fract() == 0.0 {
        format!("{p:.0}%")
    } else {
        format!("{p}%")
    }
}

fn headline(c: &Comparison) -> String {
    let regressions = c.counts.regressed;
    match c.result {
        "invariants failed" => format!(
            "FAILED: {} invariant failure(s) in NEW{}",
            c.failures.len(),
            if regressions > 0 {
                format!(", and {regressions} regression(s)")
            } else {
                String::new()
            }
        ),
        "missing in NEW" => format!(
            "FAILED: {} measurement(s) of BASE missing in NEW",
            c.missing.len()
        ),
        "regression" => format!("REGRESSION: {regressions} metric(s) regressed"),
        _ if regressions > 0 => {
            format!("{regressions} metric(s) regressed (reported only: --fail-on invariants)")
        }
        _ => "no regression".into(),
    }
}

fn run_line(role: &str, r: &super::RunRef) -> String {
    format!(
        "{role} {} (profile {}, commit {}, nats-server {}, {} repetition{}, verdict {})",
        r.path,
        r.profile,
        r.short_commit(),
        r.server_version,
        r.repeat,
        if r.repeat == 1 { "" } else { "s" },
        r.verdict
    )
}

fn rule_line(c: &Comparison) -> String {
    let patterns = c.selection.patterns.join(", ");
    let which = match c.selection.from {
        JudgedBy::Only => format!("{patterns} (--only)"),
        JudgedBy::Profile => format!("{patterns} (the profile's [ab] judge)"),
        JudgedBy::Default => {
            "the figures of merit (rates, CPU per message, latency p50 to p99.9)".to_string()
        }
    };
    format!(
        "a regression is a change beyond {} that is also outside the min..max range of both runs' repetitions; {} judged: {which}",
        percent(c.judged.threshold),
        c.counts.judged
    )
}

fn counts_line(c: &Comparison) -> String {
    let k = &c.counts;
    let mut parts = vec![
        format!("{} regressed", k.regressed),
        format!("{} improved", k.improved),
        format!("{} within noise", k.within_noise),
        format!("{} unchanged", k.unchanged),
        format!("{} context", k.context),
    ];
    if k.not_judged > 0 {
        parts.push(format!("{} not judged", k.not_judged));
    }
    if k.missing > 0 {
        parts.push(format!("{} missing in NEW", k.missing));
    }
    if k.added > 0 {
        parts.push(format!("{} new", k.added));
    }
    parts.join(", ")
}

/// A side's value, and its range when it has repetitions.
fn cell(side: Option<&Side>, unit: &str) -> String {
    match side {
        None => "–".into(),
        Some(s) => format_with_range(s.value, (s.repetitions > 1).then_some((s.min, s.max)), unit),
    }
}

fn change(m: &MetricComparison) -> String {
    match (m.base, m.new, m.change) {
        (Some(_), Some(_), Some(c)) => format!("{:+.1}%", c * 100.0),
        (Some(_), Some(_), None) => "from 0".into(),
        _ => "–".into(),
    }
}

fn verdict(m: &MetricComparison) -> String {
    match m.verdict {
        Verdict::Regressed => "REGRESSED".into(),
        other => other.label().into(),
    }
}

fn noteworthy(m: &MetricComparison) -> bool {
    matches!(
        m.verdict,
        Verdict::Regressed | Verdict::Improved | Verdict::WithinNoise | Verdict::Missing
    )
}

fn table(c: &Comparison) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", run_line("BASE", &c.base));
    let _ = writeln!(out, "{}", run_line("NEW ", &c.new));
    let _ = writeln!(out, "{}", rule_line(c));
    failure_lines(
        &mut out,
        "FAILED in NEW (a broken guarantee is never noise)",
        &c.failures,
    );
    failure_lines(
        &mut out,
        "MISSING in NEW (a number that disappears is never noise)",
        &c.missing,
    );
    // A table per scenario and variant, in the metrics' order.
    let same_variant = |a: &MetricComparison, b: &MetricComparison| {
        (&a.scenario, &a.variant) == (&b.scenario, &b.variant)
    };
    for group in c.metrics.chunk_by(same_variant) {
        let _ = writeln!(out, "\n{} / {}", group[0].scenario, group[0].variant);
        let header = ["metric", "base", "new", "change", "verdict"];
        let mut rows = vec![header.map(String::from).to_vec()];
        rows.extend(group.iter().map(|m| {
            vec![
                m.metric.clone(),
                cell(m.base.as_ref(), &m.unit),
                cell(m.new.as_ref(), &m.unit),
                change(m),
                verdict(m),
            ]
        }));
        out.push_str(&aligned(&rows, "  "));
    }
    let _ = writeln!(out, "\n{}", counts_line(c));
    let _ = writeln!(out, "result: {} (exit {})", headline(c), c.exit_code);
    let _ = writeln!(out, "        {}", c.unpaired);
    out
}

/// The terminal's list of what failed in NEW under `heading`; nothing when
/// nothing did. Shared with `ab`.
pub fn failure_lines(out: &mut String, heading: &str, failures: &[Failure]) {
    if failures.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n{heading}:");
    for f in failures {
        let _ = writeln!(
            out,
            "  {}/{}: {}: {}",
            f.scenario, f.variant, f.check, f.detail
        );
    }
}

/// A markdown list of what failed in NEW under a bold title; nothing when
/// nothing did. Shared with `ab`'s job summary.
pub fn failure_list(out: &mut String, title: &str, failures: &[Failure]) {
    if failures.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n**{title}** (never noise):\n");
    for f in failures {
        let _ = writeln!(
            out,
            "- `{}/{}`: **{}**: {}",
            md(&f.scenario),
            md(&f.variant),
            md(&f.check),
            md(&f.detail)
        );
    }
}

/// Markdown cells must not break the table, nor carry HTML into a PR
/// comment or a job summary (names come from profiles, results and
/// workers): `<`, `>` and `&` become entities, control characters spaces.
pub fn md(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '|' => out.push_str("\\|"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn markdown_rows(out: &mut String, metrics: &[&MetricComparison]) {
    let _ = writeln!(
        out,
        "| scenario / variant | metric | base | new | change | verdict |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---|");
    for m in metrics {
        let verdict = match m.verdict {
            Verdict::Regressed => "**regressed**".to_string(),
            other => other.label().to_string(),
        };
        let _ = writeln!(
            out,
            "| {} / {} | `{}` | {} | {} | {} | {} |",
            md(&m.scenario),
            md(&m.variant),
            md(&m.metric),
            md(&cell(m.base.as_ref(), &m.unit)),
            md(&cell(m.new.as_ref(), &m.unit)),
            change(m),
            verdict
        );
    }
}

fn markdown(c: &Comparison) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "### jsbench compare: {}\n", headline(c));
    let _ = writeln!(out, "_{}_\n", md(&c.unpaired));
    let _ = writeln!(out, "- {}", md(&run_line("BASE", &c.base)));
    let _ = writeln!(out, "- {}", md(&run_line("NEW", &c.new)));
    let _ = writeln!(out, "- {}", rule_line(c));
    for note in &c.notes {
        let _ = writeln!(out, "- note: {}", md(note));
    }
    failure_list(&mut out, "Invariant failures in NEW", &c.failures);
    failure_list(&mut out, "Missing in NEW", &c.missing);
    let changed: Vec<&MetricComparison> = c.metrics.iter().filter(|m| noteworthy(m)).collect();
    let _ = writeln!(out, "\n{}\n", counts_line(c));
    if !changed.is_empty() {
        markdown_rows(&mut out, &changed);
        out.push('\n');
    }
    let all: Vec<&MetricComparison> = c.metrics.iter().collect();
    if !all.is_empty() {
        let _ = writeln!(
            out,
            "<details><summary>All {} metrics</summary>\n",
            all.len()
        );
        markdown_rows(&mut out, &all);
        let _ = writeln!(out, "\n</details>");
    }
    out
}
