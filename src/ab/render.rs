//! A paired comparison as a terminal table and as Markdown for a CI job
//! summary: the verdict first, then NEW's broken checks, then the judged
//! metrics, failing and undecided ones on top.

use std::fmt::Write as _;

use super::judge::{Judgement, PairedVerdict};
use super::{AbReport, Stopped};
use crate::compare::Failure;
use crate::compare::render::{aligned, failure_lines, failure_list, md};
use crate::report::page::format_value;
use crate::results::metadata::short_commit;

fn percent(fraction: f64) -> String {
    format!("{:.1}%", fraction * 100.0).replace(".0%", "%")
}

/// NEW/BASE as a signed change: ×0.95 is "-5.0%".
fn change(ratio: f64) -> String {
    format!("{:+.1}%", (ratio - 1.0) * 100.0)
}

fn headline(r: &AbReport) -> String {
    let regressed = r.count(PairedVerdict::Regressed);
    let failing = r.failing_checks().count();
    match r.verdict.as_str() {
        "invariants failed" => format!(
            "FAILED: {failing} check(s) NEW breaks where BASE holds them, beyond chance{}",
            if regressed > 0 {
                format!(", and {regressed} regression(s)")
            } else {
                String::new()
            }
        ),
        "missing in NEW" => format!(
            "FAILED: {} metric(s) BASE measures and NEW, systematically, does not",
            r.count(PairedVerdict::MissingInNew)
        ),
        "regression" => format!("REGRESSION: {regressed} metric(s) regressed"),
        "interrupted" => "interrupted: the pairs so far are judged below".into(),
        "failed" => "FAILED: a slice could not run (see the error)".into(),
        "bad input" => "BAD INPUT: a pattern selects no metric (see the note)".into(),
        "inconclusive" => format!(
            "INCONCLUSIVE: {} judged metric(s) undecided{}; nothing passed",
            r.judged().filter(|m| !m.verdict.decided()).count(),
            match r.open_checks().count() {
                0 => String::new(),
                n => format!(", {n} check(s) NEW breaks more often than BASE, undecided"),
            }
        ),
        _ => "no regression: every judged metric decided".into(),
    }
}

fn stopped(r: &AbReport) -> &'static str {
    match r.stopped {
        Some(Stopped::Decided) => "every judged metric decided",
        Some(Stopped::Budget) => "budget spent",
        Some(Stopped::Pairs) => "--pairs reached",
        Some(Stopped::Interrupted) => "interrupted",
        Some(Stopped::Failed) => "NEW failed: more pairs could not change it",
        Some(Stopped::SliceFailed) => "a slice failed",
        Some(Stopped::BadInput) => "a pattern matched no metric",
        None => "running",
    }
}

fn side_line(role: &str, s: &super::SideInfo) -> String {
    let what = match &s.server {
        Some(server) => format!("nats-server {server}"),
        None => format!("jsbench {}", s.jsbench),
    };
    let commit = short_commit(s.git_commit.as_deref(), false);
    format!(
        "{role} {what} (jsbench {} {commit}, nats-server {})",
        s.jsbench_version.as_deref().unwrap_or("?"),
        s.server_version.as_deref().unwrap_or("?")
    )
}

fn method_line(r: &AbReport) -> String {
    format!(
        "{} judged pair(s) of {} in ABBA order after a warm-up pair, against {}, {:.0}s ({}); per metric the NEW/BASE ratio of the pairs (Hodges–Lehmann); regressed when worse than half the threshold beyond chance, unchanged when not worse by the threshold ({} for rates and CPU per message, {} for latency percentiles; the interval's worse end, one-sided, a change of the threshold passing at most {:.0} time(s) in 100 per metric); at most {} false alarm(s) in 100 comparisons of identical builds, over every metric, check and look (Holm, Tarone, looks at 8, 16, 32, ... pairs)",
        r.looks.last().map_or(0, |l| l.pairs),
        if r.mode == "windows" {
            "warm turns"
        } else {
            "slices"
        },
        r.target,
        r.elapsed_s,
        stopped(r),
        percent(r.rule.throughput),
        percent(r.rule.latency),
        r.rule.miss * 100.0,
        format!("{:.2}", r.rule.alpha() * 100.0)
            .trim_end_matches('0')
            .trim_end_matches('.'),
    )
}

/// NEW's broken checks that count: those it breaks where BASE does not,
/// beyond chance.
fn failing(r: &AbReport) -> Vec<Failure> {
    r.failing_checks()
        .map(|c| Failure {
            scenario: c.scenario.clone(),
            variant: c.variant.clone(),
            check: c.check.clone(),
            detail: format!(
                "broken by NEW alone in {} pair(s), by BASE alone in {}: {}",
                c.new_only, c.base_only, c.detail
            ),
        })
        .collect()
}

/// A row's rank: what fails first, then what is open, then the rest.
pub(super) fn order(m: &Judgement) -> u8 {
    match m.verdict {
        PairedVerdict::MissingInNew => 0,
        PairedVerdict::Regressed => 1,
        PairedVerdict::Undecided | PairedVerdict::TooFewPairs => 2,
        PairedVerdict::Improved => 3,
        PairedVerdict::Unchanged => 4,
        PairedVerdict::NotJudged => 5,
    }
}

fn rows(r: &AbReport, with_profile: bool) -> Vec<Vec<String>> {
    let mut judged: Vec<&Judgement> = r.judged().collect();
    judged.sort_by_key(|m| order(m));
    judged
        .into_iter()
        .map(|m| {
            let value = |v: Option<f64>| v.map_or("–".into(), |v| format_value(v, &m.unit));
            let range = |low: Option<f64>, high: Option<f64>| match (low, high) {
                (Some(l), Some(h)) => format!("{} .. {}", change(l), change(h)),
                _ => "–".into(),
            };
            // The interval the verdict was decided on, at its coverage;
            // the pass's beside it only where it differs, so an undecided
            // row shows why (its decided interval reaches within τ/2).
            let decided = match m.decided_coverage {
                Some(c) => format!(
                    "{} at {}",
                    range(m.decided_low, m.decided_high),
                    coverage(c)
                ),
                None => "–".into(),
            };
            let pass = if (m.decided_low, m.decided_high) == (m.low, m.high) {
                "same".into()
            } else {
                match m.coverage {
                    Some(c) => format!("{} at {}", range(m.low, m.high), coverage(c)),
                    None => range(m.low, m.high),
                }
            };
            vec![
                m.key.label(with_profile),
                value(m.base_median),
                value(m.new_median),
                m.ratio.map_or("–".into(), change),
                decided,
                pass,
                m.ratios.len().to_string(),
                match m.verdict {
                    PairedVerdict::Regressed => "REGRESSED".into(),
                    v => v.label().into(),
                },
            ]
        })
        .collect()
}

const HEADER: [&str; 8] = [
    "metric",
    "base",
    "new",
    "change",
    "decided on",
    "pass interval",
    "pairs",
    "verdict",
];

/// A coverage with the digits that tell it apart from 100%.
fn coverage(c: f64) -> String {
    let miss = (1.0 - c) * 100.0;
    let decimals = if miss <= 0.0 {
        1
    } else {
        (-(miss.log10().floor()) as i32 + 1).clamp(1, 6) as usize
    };
    format!("{:.*}%", decimals, c * 100.0)
}

fn counts(r: &AbReport) -> String {
    [
        PairedVerdict::Regressed,
        PairedVerdict::Improved,
        PairedVerdict::Unchanged,
        PairedVerdict::Undecided,
        PairedVerdict::TooFewPairs,
        PairedVerdict::MissingInNew,
    ]
    .iter()
    .filter_map(|v| {
        let n = r.count(*v);
        (n > 0 || matches!(v, PairedVerdict::Regressed | PairedVerdict::Unchanged))
            .then(|| format!("{n} {}", v.label()))
    })
    .collect::<Vec<_>>()
    .join(", ")
}

pub fn terminal(r: &AbReport) -> String {
    let with_profile = r.profiles.len() > 1;
    let mut out = String::new();
    let _ = writeln!(out, "{}", side_line("BASE", &r.base));
    let _ = writeln!(out, "{}", side_line("NEW ", &r.new));
    let _ = writeln!(out, "{}", method_line(r));
    for note in &r.notes {
        let _ = writeln!(out, "note: {note}");
    }
    failure_lines(
        &mut out,
        "FAILED in NEW (broken where BASE holds, beyond chance)",
        &failing(r),
    );
    let mut table = vec![HEADER.map(String::from).to_vec()];
    table.extend(rows(r, with_profile));
    let _ = writeln!(out);
    out.push_str(&aligned(&table, "  "));
    let _ = writeln!(out, "\n{}", counts(r));
    let _ = writeln!(out, "result: {} (exit {})", headline(r), r.exit_code);
    out
}

pub fn markdown(r: &AbReport) -> String {
    let with_profile = r.profiles.len() > 1;
    let mut out = String::new();
    let _ = writeln!(out, "### jsbench ab: {}\n", headline(r));
    let _ = writeln!(out, "- {}", md(&side_line("BASE", &r.base)));
    let _ = writeln!(out, "- {}", md(&side_line("NEW", &r.new)));
    let _ = writeln!(out, "- {}", md(&method_line(r)));
    for note in &r.notes {
        let _ = writeln!(out, "- note: {}", md(note));
    }
    failure_list(&mut out, "Checks NEW breaks where BASE holds", &failing(r));
    let _ = writeln!(out, "\n{}\n", counts(r));
    let _ = writeln!(out, "| {} |", HEADER.join(" | "));
    let _ = writeln!(out, "|---|---:|---:|---:|---|---|---:|---|");
    for row in rows(r, with_profile) {
        let mut cells: Vec<String> = row.iter().map(|c| md(c)).collect();
        cells[0] = format!("`{}`", cells[0]);
        if cells[7] == "REGRESSED" {
            cells[7] = "**regressed**".into();
        }
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    out
}
