//! The summary table printed at the end of a run (and by `jsbench report`).

use std::fmt::Write as _;

use crate::consume::behaviour::Cause;
use crate::consume::fates::{self, per_cause};
use crate::record::names;
use crate::results::plain;
use crate::results::summary::{Summary, VariantReport};
use crate::scenario;
use crate::scenario::table::{Cell, Figures, Show};

/// One table per scenario, then every failed invariant, warning and error,
/// so problems are impossible to miss.
pub fn render(summary: &Summary) -> String {
    let mut out = String::new();
    for scenario in &summary.scenarios {
        let repeated = match summary.run.repeat {
            n if n > 1 => format!(", medians of {n} repetitions"),
            _ => String::new(),
        };
        let _ = writeln!(out, "\n{} ({}{repeated})", scenario.name, scenario.kind);
        let columns = scenario::columns(&scenario.kind);
        let mut rows: Vec<Vec<String>> =
            vec![columns.iter().map(|c| c.header.to_string()).collect()];
        for v in &scenario.variants {
            rows.push(columns.iter().map(|c| cell(&c.cell, v)).collect());
        }
        out.push_str(&aligned(&rows, "  "));
        for v in &scenario.variants {
            for line in comparisons(&scenario.kind, v) {
                let _ = writeln!(out, "  {}: {line}", v.name);
            }
        }
        for v in &scenario.variants {
            if let Some(e) = &v.error {
                let _ = writeln!(out, "  ERROR {}: {e}", v.name);
            }
            for i in v.invariants.iter().filter(|i| !i.passed) {
                let _ = writeln!(out, "  FAILED {}: {}: {}", v.name, i.name, i.detail);
            }
            for w in &v.warnings {
                let _ = writeln!(out, "  warning {}: {w}", v.name);
            }
            if let Some(us) = v.value(names::CLOCK_UNCERTAINTY) {
                let _ = writeln!(
                    out,
                    "  clocks {}: latencies between processes are within ±{} of the truth (worker clock offsets, corrected)",
                    v.name,
                    micros(us)
                );
            }
        }
    }
    if !summary.run.workers.is_empty() {
        out.push_str(&workers(&summary.run.workers));
    }
    // The full list is in summary.json; a killed node's peers retrying
    // their routes can fill a screen.
    let problems = &summary.run.server.log_problems;
    for line in problems.iter().take(5) {
        let _ = writeln!(out, "  server log: {line}");
    }
    if problems.len() > 5 {
        let _ = writeln!(
            out,
            "  server log: ... and {} more warning and error lines in summary.json",
            problems.len() - 5
        );
    }
    out
}

fn micros(us: f64) -> String {
    if us.abs() >= 1_000.0 {
        format!("{:.2}ms", us / 1_000.0)
    } else {
        format!("{us:.0}us")
    }
}

/// The workers of a distributed run and their clocks: the offset found
/// when each joined (then corrected), its bound, and what remained after
/// the run.
fn workers(list: &[crate::results::summary::WorkerInfo]) -> String {
    let header = [
        "worker",
        "host",
        "pid",
        "offset",
        "±",
        "RTT",
        "after run",
        "status",
    ];
    let mut rows = vec![header.map(String::from).to_vec()];
    for w in list {
        let signed = |us: f64| format!("{}{}", if us < 0.0 { "-" } else { "+" }, micros(us.abs()));
        rows.push(vec![
            w.id.clone(),
            w.host.clone(),
            w.pid.to_string(),
            signed(w.clock_offset_us),
            micros(w.clock_uncertainty_us),
            micros(w.clock_rtt_us),
            match (w.residual_offset_us, w.residual_uncertainty_us) {
                (Some(o), Some(u)) => format!("{} ± {}", signed(o), micros(u)),
                _ => "-".into(),
            },
            match &w.detail {
                Some(d) => format!("{}: {d}", w.status),
                None => w.status.clone(),
            },
        ]);
    }
    format!(
        "\nworkers (clock offset from the coordinator when each joined)\n{}",
        aligned(&rows, "  ")
    )
}

fn verdict(v: &VariantReport) -> String {
    // A variant whose every check could not apply proved nothing: it
    // never reads as a pass.
    if v.error.is_some() {
        "ERROR"
    } else if v.inconclusive.is_some() {
        "inconclusive"
    } else if v.checked_nothing() {
        "n/a"
    } else if v.passed {
        "ok"
    } else {
        "FAILED"
    }
    .into()
}

/// One variant's cell of a column, `-` where it lacks the figure.
fn cell(c: &Cell, v: &VariantReport) -> String {
    let missing = || "-".to_string();
    match *c {
        Cell::Variant => v.name.clone(),
        Cell::Verdict => verdict(v),
        Cell::Lost => {
            let mut lost = v.ledger.lost.to_string();
            if v.ledger.client_dropped > 0 {
                lost.push_str(&format!(
                    " (+{} dropped by client)",
                    v.ledger.client_dropped
                ));
            }
            if v.ledger.unattributed > 0 {
                lost.push_str(&format!(" (+{} unattributed)", v.ledger.unattributed));
            }
            lost
        }
        Cell::Metric(name, show) => v.shown(name, show),
        Cell::Quantile(histogram, q, show) => v.shown(&names::quantile(histogram, q), show),
        Cell::FirstOf(list, show) => list
            .iter()
            .find_map(|m| v.value(m))
            .map_or_else(missing, |x| show.format(x)),
        Cell::Counts(list, sep) => list
            .iter()
            .map(|m| v.value(m).map(|x| format!("{x:.0}")))
            .collect::<Option<Vec<_>>>()
            .map_or_else(missing, |parts| parts.join(sep)),
        Cell::CountAndPart(whole, part) => match (v.value(whole), v.value(part)) {
            (Some(w), Some(p)) => format!("{w:.0} ({p:.0})"),
            _ => missing(),
        },
        Cell::Param(name) => v.params.get(name).map_or_else(missing, plain),
    }
}

/// What a variant's figures say together, in words: its redeliveries by
/// cause against their configured delays (any kind that plans them), then
/// its kind's own lines.
fn comparisons(kind: &str, v: &VariantReport) -> Vec<String> {
    let mut lines = Vec::new();
    for cause in Cause::ALL {
        let name = |family| per_cause(family, cause);
        let late = |q| {
            v.shown(
                &names::quantile(&name(fates::REDELIVERY_LATE), q),
                Show::SignedUs,
            )
        };
        if let Some(n) = v.value(&name(fates::REDELIVERIES)) {
            lines.push(format!(
                "{} redeliveries {n:.0}: later than configured by min {} p50 {} p99 {} max {}, early {}",
                cause.name(),
                late("min"),
                late("p50"),
                late("p99"),
                late("max"),
                v.value(&name(fates::REDELIVERY_EARLY)).unwrap_or(0.0)
            ));
        }
    }
    lines.extend(scenario::lines(kind, v));
    lines
}

impl Figures for VariantReport {
    fn value(&self, name: &str) -> Option<f64> {
        self.metric(name).map(|m| m.value)
    }
}

/// Columns padded to their widest cell, each line after `indent`:
/// left-aligned first column, right-aligned numbers. Shared with `compare`
/// and `ab`.
pub fn aligned(rows: &[Vec<String>], indent: &str) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        out.push_str(indent);
        for (c, cell) in r.iter().enumerate() {
            if c == 0 {
                let _ = write!(out, "{cell:<w$}", w = widths[c]);
            } else {
                let _ = write!(out, "  {cell:>w$}", w = widths[c]);
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::latency;
    use crate::scenario::table::format_us;

    #[test]
    fn microseconds_pick_a_readable_unit() {
        assert_eq!(format_us(212.4), "212us");
        assert_eq!(format_us(1_234.0), "1.23ms");
        assert_eq!(format_us(2_500_000.0), "2.50s");
    }

    #[test]
    fn hops_and_traced_hops_get_a_line_each_with_their_ratios() {
        use crate::record::metrics::{Direction, Metric};
        let us = |name: String, x: f64| Metric::new(&name, "us", x, Direction::Lower);
        let q = |name: &str, p50: f64, p99: f64| {
            [
                us(names::quantile(name, "p50"), p50),
                us(names::quantile(name, "p99"), p99),
            ]
        };
        let mut v: VariantReport = serde_json::from_value(serde_json::json!({
            "name": "rate-1000", "passed": true, "params": {}, "metrics": [],
            "histograms": [],
            "ledger": crate::record::ledger::LedgerCounts::default(), "invariants": [], "warnings": [],
            "timelines": {}, "error": null, "elapsed_s": 1.0
        }))
        .unwrap();
        assert!(comparisons("latency", &v).is_empty());
        v.metrics.extend(q(latency::INGEST_LATENCY, 70.0, 332.0));
        v.metrics.extend(q(latency::DELIVER_LATENCY, 106.0, 425.0));
        v.metrics.extend(q(names::E2E_LATENCY_ACTUAL, 178.0, 700.0));
        v.metrics.push(Metric::new(
            latency::MEAN_SUM_RATIO,
            "ratio",
            1.0,
            Direction::None,
        ));
        let lines = comparisons("latency", &v);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("ingest (send to stored stamp) p50 70us p99 332us")
                && lines[0].contains("means' sum / total 1.00"),
            "{}",
            lines[0]
        );
        v.metrics.push(Metric::new(
            latency::SAMPLED,
            "msgs",
            1100.0,
            Direction::None,
        ));
        v.metrics
            .extend(q(latency::CLIENT_TO_INGRESS, 284.0, 3805.0));
        v.metrics
            .extend(q(latency::INGRESS_TO_STORED, 808.0, 4977.0));
        v.metrics.push(Metric::new(
            latency::SUM_VS_INGEST,
            "ratio",
            2.0,
            Direction::None,
        ));
        let traced = comparisons("latency", &v).pop().unwrap();
        assert!(
            traced.starts_with("traced (1100 sampled): client to ingress p50 284us")
                && !traced.contains("route")
                && traced.ends_with("means' sum / ingest 2.00"),
            "{traced}"
        );
        v.metrics.extend(q(latency::ROUTE, 430.0, 3389.0));
        let traced = comparisons("latency", &v).pop().unwrap();
        assert!(
            traced.contains("route to the leader p50 430us p99 3.39ms"),
            "{traced}"
        );
    }

    #[test]
    fn table_aligns_columns() {
        let rows = vec![
            vec!["a".to_string(), "1".to_string()],
            vec!["long".to_string(), "100".to_string()],
        ];
        assert_eq!(aligned(&rows, "  "), "  a       1\n  long  100\n");
    }
}
