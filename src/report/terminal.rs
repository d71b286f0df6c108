//! The summary table printed at the end of a run (and by `jsbench report`).

use std::fmt::Write as _;

use crate::results::summary::{Summary, VariantReport};

/// Formats microseconds with a unit that keeps three significant digits.
pub fn format_us(us: f64) -> String {
    if us < 1_000.0 {
        format!("{us:.0}us")
    } else if us < 1_000_000.0 {
        format!("{:.2}ms", us / 1_000.0)
    } else {
        format!("{:.2}s", us / 1_000_000.0)
    }
}

fn format_rate(rate: f64) -> String {
    if rate >= 10_000.0 {
        format!("{:.1}k", rate / 1_000.0)
    } else {
        format!("{rate:.0}")
    }
}

/// One table per scenario, then every failed invariant, warning and error,
/// so problems are impossible to miss.
pub fn render(summary: &Summary) -> String {
    let mut out = String::new();
    for scenario in &summary.scenarios {
        let _ = writeln!(out, "\n{} ({})", scenario.name, scenario.kind);
        let header = [
            "variant",
            "target/s",
            "achieved/s",
            "e2e p50",
            "p90",
            "p99",
            "p99.9",
            "max",
            "pubAck p50",
            "p99",
            "lost",
            "verdict",
        ];
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
        for v in &scenario.variants {
            rows.push(row(v));
        }
        out.push_str(&table(&rows));
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
        }
    }
    for line in &summary.run.server.log_problems {
        let _ = writeln!(out, "  server log: {line}");
    }
    out
}

fn row(v: &VariantReport) -> Vec<String> {
    let value = |name: &str| v.metric(name).map(|m| m.value);
    let us = |name: &str| value(name).map(format_us).unwrap_or_else(|| "-".into());
    let rate = |name: &str| value(name).map(format_rate).unwrap_or_else(|| "-".into());
    let verdict = if v.error.is_some() {
        "ERROR"
    } else if v.passed {
        "ok"
    } else {
        "FAILED"
    };
    vec![
        v.name.clone(),
        rate("target_rate"),
        rate("publish_rate"),
        us("e2e_latency.p50"),
        us("e2e_latency.p90"),
        us("e2e_latency.p99"),
        us("e2e_latency.p99.9"),
        us("e2e_latency.max"),
        us("pub_ack_latency.p50"),
        us("pub_ack_latency.p99"),
        v.ledger.lost.to_string(),
        verdict.into(),
    ]
}

/// Left-aligned first column, right-aligned numbers.
fn table(rows: &[Vec<String>]) -> String {
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
        out.push_str("  ");
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

    #[test]
    fn microseconds_pick_a_readable_unit() {
        assert_eq!(format_us(212.4), "212us");
        assert_eq!(format_us(1_234.0), "1.23ms");
        assert_eq!(format_us(2_500_000.0), "2.50s");
    }

    #[test]
    fn table_aligns_columns() {
        let rows = vec![
            vec!["a".to_string(), "1".to_string()],
            vec!["long".to_string(), "100".to_string()],
        ];
        assert_eq!(table(&rows), "  a       1\n  long  100\n");
    }
}
