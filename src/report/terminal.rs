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
        let repeated = match summary.run.repeat {
            n if n > 1 => format!(", medians of {n} repetitions"),
            _ => String::new(),
        };
        let _ = writeln!(out, "\n{} ({}{repeated})", scenario.name, scenario.kind);
        let columns = columns(&scenario.kind);
        let mut rows: Vec<Vec<String>> =
            vec![columns.iter().map(|c| c.header.to_string()).collect()];
        for v in &scenario.variants {
            rows.push(columns.iter().map(|c| (c.cell)(v)).collect());
        }
        out.push_str(&table(&rows));
        for v in &scenario.variants {
            for line in comparisons(v) {
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
            if let Some(m) = v.metrics.iter().find(|m| m.name == "clock_uncertainty") {
                let _ = writeln!(
                    out,
                    "  clocks {}: latencies between processes are within ±{} of the truth (worker clock offsets, corrected)",
                    v.name,
                    micros(m.value)
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
    let mut rows = vec![
        [
            "worker",
            "host",
            "pid",
            "offset",
            "±",
            "RTT",
            "after run",
            "status",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>(),
    ];
    for w in list {
        let signed = |us: f64| {
            let text = micros(us.abs());
            if us < 0.0 {
                format!("-{text}")
            } else {
                format!("+{text}")
            }
        };
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
        table(&rows)
    )
}

struct Column {
    header: &'static str,
    cell: fn(&VariantReport) -> String,
}

fn value(v: &VariantReport, name: &str) -> Option<f64> {
    v.metric(name).map(|m| m.value)
}

fn us(v: &VariantReport, name: &str) -> String {
    value(v, name).map(format_us).unwrap_or_else(|| "-".into())
}

/// A metric in ms, shown on the µs-to-seconds scale of the latencies.
fn ms(v: &VariantReport, name: &str) -> String {
    value(v, name).map_or("-".into(), |ms| format_us(ms * 1e3))
}

/// A count, without decimals.
fn whole(v: &VariantReport, name: &str) -> String {
    value(v, name).map_or("-".into(), |x| format!("{x:.0}"))
}

fn rate(v: &VariantReport, name: &str) -> String {
    value(v, name)
        .map(format_rate)
        .unwrap_or_else(|| "-".into())
}

/// A signed microsecond metric (early is negative) with its sign.
fn signed_us(v: &VariantReport, name: &str) -> String {
    value(v, name).map_or("-".into(), |x| {
        let sign = if x < 0.0 { "-" } else { "+" };
        format!("{sign}{}", format_us(x.abs()))
    })
}

fn verdict(v: &VariantReport) -> String {
    if v.error.is_some() {
        "ERROR"
    } else if v.passed {
        "ok"
    } else {
        "FAILED"
    }
    .into()
}

/// The columns that matter for a scenario kind.
fn columns(kind: &str) -> Vec<Column> {
    let variant = Column {
        header: "variant",
        cell: |v| v.name.clone(),
    };
    let target = Column {
        header: "target/s",
        cell: |v| rate(v, "target_rate"),
    };
    let achieved = Column {
        header: "achieved/s",
        cell: |v| rate(v, "publish_rate"),
    };
    let lost = Column {
        header: "lost",
        cell: |v| match v.ledger.client_dropped {
            0 => v.ledger.lost.to_string(),
            dropped => format!("{} (+{dropped} dropped by client)", v.ledger.lost),
        },
    };
    let end = Column {
        header: "verdict",
        cell: verdict,
    };
    match kind {
        "publish" => vec![
            variant,
            target,
            achieved,
            Column {
                header: "MB/s",
                cell: |v| value(v, "publish_throughput").map_or("-".into(), |x| format!("{x:.1}")),
            },
            Column {
                header: "pubAck p50",
                cell: |v| us(v, "pub_ack_latency.p50"),
            },
            Column {
                header: "p99",
                cell: |v| us(v, "pub_ack_latency.p99"),
            },
            Column {
                header: "max",
                cell: |v| us(v, "pub_ack_latency.max"),
            },
            Column {
                header: "client/msg",
                cell: |v| {
                    value(v, "client_cpu_per_msg").map_or("-".into(), |x| format!("{x:.2}us"))
                },
            },
            Column {
                header: "server/msg",
                cell: |v| {
                    value(v, "server_cpu_per_msg").map_or("-".into(), |x| format!("{x:.2}us"))
                },
            },
            Column {
                header: "dups flagged/injected",
                cell: |v| match (
                    value(v, "duplicates_flagged"),
                    value(v, "duplicates_injected"),
                ) {
                    (Some(f), Some(i)) => format!("{f:.0}/{i:.0}"),
                    _ => "-".into(),
                },
            },
            end,
        ],
        "ack" => vec![
            variant,
            Column {
                header: "consumed/s",
                cell: |v| rate(v, "consume_rate"),
            },
            Column {
                header: "MB/s",
                cell: |v| value(v, "consume_throughput").map_or("-".into(), |x| format!("{x:.1}")),
            },
            Column {
                header: "vs explicit",
                cell: |v| {
                    value(v, "vs_explicit.throughput_ratio")
                        .map_or("-".into(), |x| format!("x{x:.2}"))
                },
            },
            Column {
                header: "double-ack p50",
                cell: |v| us(v, "double_ack_rtt.p50"),
            },
            Column {
                header: "p99",
                cell: |v| us(v, "double_ack_rtt.p99"),
            },
            lost,
            end,
        ],
        "resume" => vec![
            variant,
            Column {
                header: "unacked at crash",
                cell: |v| whole(v, "unacked_at_crash"),
            },
            Column {
                header: "redelivered",
                cell: |v| whole(v, "redelivered"),
            },
            Column {
                header: "ran twice",
                cell: |v| whole(v, "work_ran_twice"),
            },
            Column {
                header: "resumed after",
                cell: |v| ms(v, "time_to_resume"),
            },
            Column {
                header: "redelivered after",
                cell: |v| ms(v, "time_to_first_redelivery"),
            },
            Column {
                header: "e2e max after",
                cell: |v| us(v, "e2e_latency_after_rebind.max"),
            },
            lost,
            end,
        ],
        "restart" => vec![
            variant,
            Column {
                header: "faulted",
                cell: |v| {
                    v.params
                        .get("killed_node")
                        .and_then(|x| x.as_str())
                        .unwrap_or("-")
                        .to_string()
                },
            },
            Column {
                header: "outage pub",
                cell: |v| ms(v, "outage.publish"),
            },
            Column {
                header: "outage consume",
                cell: |v| ms(v, "outage.consume"),
            },
            Column {
                header: "election",
                cell: |v| ms(v, "election_gap"),
            },
            Column {
                // After the restart, or after a route fault's heal.
                header: "acks after back",
                cell: |v| match value(v, "acks_resumed_after_restart") {
                    Some(_) => ms(v, "acks_resumed_after_restart"),
                    None => ms(v, "acks_resumed_after_heal"),
                },
            },
            Column {
                header: "resends (found stored)",
                cell: |v| match (value(v, "resends"), value(v, "resends_found_stored")) {
                    (Some(r), Some(f)) => format!("{r:.0} ({f:.0})"),
                    _ => "-".into(),
                },
            },
            Column {
                header: "pubAck p99",
                cell: |v| us(v, "pub_ack_latency.p99"),
            },
            lost,
            end,
        ],
        "replay" => vec![
            variant,
            Column {
                header: "msgs",
                cell: |v| whole(v, "messages"),
            },
            Column {
                header: "first",
                cell: |v| whole(v, "first_seq"),
            },
            Column {
                header: "msg/s",
                cell: |v| {
                    ["catch_up_rate", "publish_rate", "delivery_rate"]
                        .iter()
                        .find_map(|m| value(v, m))
                        .map_or("-".into(), format_rate)
                },
            },
            Column {
                header: "MB/s",
                cell: |v| {
                    ["catch_up_throughput", "publish_throughput"]
                        .iter()
                        .find_map(|m| value(v, m))
                        .map_or("-".into(), |x| format!("{x:.1}"))
                },
            },
            Column {
                header: "to tail",
                cell: |v| ms(v, "time_to_live_tail"),
            },
            Column {
                header: "gap err p50",
                cell: |v| signed_us(v, "gap_error.p50"),
            },
            Column {
                header: "p99",
                cell: |v| signed_us(v, "gap_error.p99"),
            },
            Column {
                header: "drift end",
                cell: |v| signed_us(v, "drift.final"),
            },
            Column {
                header: "ratio",
                cell: |v| value(v, "duration_ratio").map_or("-".into(), |x| format!("x{x:.3}")),
            },
            lost,
            end,
        ],
        "backpressure" => vec![
            variant,
            Column {
                header: "max_ack_pending",
                cell: |v| {
                    v.params
                        .get("max_ack_pending")
                        .map_or("-".into(), |x| x.to_string())
                },
            },
            Column {
                header: "ack_wait",
                cell: |v| {
                    v.params
                        .get("ack_wait")
                        .and_then(|x| x.as_str())
                        .unwrap_or("-")
                        .to_string()
                },
            },
            Column {
                header: "done/s",
                cell: |v| rate(v, "throughput"),
            },
            Column {
                header: "bound/s",
                cell: |v| rate(v, "bound"),
            },
            Column {
                header: "efficiency",
                cell: |v| {
                    value(v, "efficiency").map_or("-".into(), |x| format!("{:.0}%", x * 100.0))
                },
            },
            Column {
                header: "vs measured",
                cell: |v| {
                    value(v, "efficiency_measured")
                        .map_or("-".into(), |x| format!("{:.0}%", x * 100.0))
                },
            },
            Column {
                header: "e2e p50",
                cell: |v| us(v, "e2e_latency.p50"),
            },
            Column {
                header: "p99",
                cell: |v| us(v, "e2e_latency.p99"),
            },
            Column {
                header: "at cap",
                cell: |v| {
                    value(v, "time_at_cap").map_or("-".into(), |x| format!("{:.0}%", x * 100.0))
                },
            },
            Column {
                header: "redelivered (expired)",
                cell: |v| match (value(v, "redeliveries"), value(v, "redeliveries.expired")) {
                    (Some(r), Some(e)) => format!("{r:.0} ({e:.0})"),
                    _ => "-".into(),
                },
            },
            end,
        ],
        "redelivery" => vec![
            variant,
            achieved,
            Column {
                header: "deliveries/msg",
                cell: |v| {
                    value(v, "deliveries_per_message").map_or("-".into(), |x| format!("{x:.2}"))
                },
            },
            Column {
                header: "e2e p50",
                cell: |v| us(v, "e2e_latency.p50"),
            },
            Column {
                header: "p99",
                cell: |v| us(v, "e2e_latency.p99"),
            },
            Column {
                header: "acked/termed/exhausted",
                cell: |v| match (
                    value(v, "observed.acked"),
                    value(v, "observed.termed"),
                    value(v, "observed.exhausted"),
                ) {
                    (Some(a), Some(t), Some(e)) => format!("{a:.0}/{t:.0}/{e:.0}"),
                    _ => "-".into(),
                },
            },
            Column {
                header: "advisories",
                cell: |v| match (
                    value(v, "advisories.max_deliveries"),
                    value(v, "advisories.terminated"),
                ) {
                    (Some(m), Some(t)) => format!("{m:.0}+{t:.0}"),
                    _ => "-".into(),
                },
            },
            lost,
            end,
        ],
        "dlq" => vec![
            variant,
            achieved,
            Column {
                header: "e2e p50",
                cell: |v| us(v, "e2e_latency.p50"),
            },
            Column {
                header: "p99",
                cell: |v| us(v, "e2e_latency.p99"),
            },
            Column {
                header: "in DLQ/dead",
                cell: |v| match (
                    value(v, "dead_letters.in_dlq"),
                    value(v, "dead_letters.expected"),
                ) {
                    (Some(d), Some(e)) => format!("{d:.0}/{e:.0}"),
                    _ => "-".into(),
                },
            },
            Column {
                header: "DLQ p50",
                cell: |v| us(v, "dlq_latency.p50"),
            },
            Column {
                header: "p99",
                cell: |v| us(v, "dlq_latency.p99"),
            },
            Column {
                header: "after deadline p50",
                cell: |v| us(v, "dlq_after_deadline.p50"),
            },
            Column {
                header: "p99",
                cell: |v| us(v, "dlq_after_deadline.p99"),
            },
            Column {
                header: "handler/s",
                cell: |v| rate(v, "handler_capacity"),
            },
            lost,
            end,
        ],
        _ => vec![
            variant,
            target,
            achieved,
            Column {
                header: "e2e p50",
                cell: |v| us(v, "e2e_latency.p50"),
            },
            Column {
                header: "p90",
                cell: |v| us(v, "e2e_latency.p90"),
            },
            Column {
                header: "p99",
                cell: |v| us(v, "e2e_latency.p99"),
            },
            Column {
                header: "p99.9",
                cell: |v| us(v, "e2e_latency.p99.9"),
            },
            Column {
                header: "max",
                cell: |v| us(v, "e2e_latency.max"),
            },
            Column {
                header: "pubAck p50",
                cell: |v| us(v, "pub_ack_latency.p50"),
            },
            Column {
                header: "p99",
                cell: |v| us(v, "pub_ack_latency.p99"),
            },
            lost,
            end,
        ],
    }
}

/// Ratios a variant carries, in words.
fn comparisons(v: &VariantReport) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(t) = value(v, "dedup_price.throughput_ratio") {
        let mut parts = vec![format!("throughput x{t:.2}")];
        if let Some(p) = value(v, "dedup_price.p99_ratio") {
            parts.push(format!("PubAck p99 x{p:.2}"));
        }
        if let Some(c) = value(v, "dedup_price.client_cpu_per_msg") {
            parts.push(format!("client CPU {c:+.2}us/msg"));
        }
        if let Some(s) = value(v, "dedup_price.server_cpu_per_msg") {
            parts.push(format!("server CPU {s:+.2}us/msg"));
        }
        lines.push(format!("price of dedup (vs no id): {}", parts.join(", ")));
    }
    if let Some(m) = value(v, "vs_raw.throughput_ratio") {
        lines.push(format!(
            "jsbench / its own path without measurement (raw, before and after): {m:.2}x throughput"
        ));
    }
    if let Some(m) = value(v, "vs_idiomatic.throughput_ratio") {
        lines.push(format!(
            "jsbench / idiomatic async-nats loop: {m:.2}x throughput"
        ));
    }
    if let Some(c) = value(v, "vs_core.throughput_ratio") {
        lines.push(format!("jsbench / core publish: {c:.2}x throughput"));
    }
    for cause in ["nak", "nak_delay", "ack_wait", "backoff"] {
        if let Some(n) = value(v, &format!("redeliveries.{cause}")) {
            lines.push(format!(
                "{cause} redeliveries {n:.0}: later than configured by p50 {} p99 {} max {}, early {}",
                us(v, &format!("redelivery_late.{cause}.p50")),
                us(v, &format!("redelivery_late.{cause}.p99")),
                us(v, &format!("redelivery_late.{cause}.max")),
                value(v, &format!("redelivery_early.{cause}")).unwrap_or(0.0)
            ));
        }
    }
    if v.metric("gap_error.p50").is_some() {
        let within = |q: &str| match value(v, &format!("smallest_gap_within_1ms.{q}")) {
            Some(0.0) => "every gap".to_string(),
            Some(gap) => format!("gaps above {}", format_us(gap)),
            None => "no gap size".to_string(),
        };
        lines.push(format!(
            "original pacing within 1 ms: {} by the median, {} at p99; gaps of 1 ms and less \
             are not paced (median error {})",
            within("p50"),
            within("p99"),
            signed_us(v, "gap_error_by_gap.le_1ms.p50")
        ));
    }
    if let (Some(p50), Some(p99), Some(d)) = (
        value(v, "overhead.e2e_p50_ratio"),
        value(v, "overhead.e2e_p99_ratio"),
        value(v, "overhead.deliveries_ratio"),
    ) {
        lines.push(format!(
            "overhead vs baseline: deliveries x{d:.2}, e2e p50 x{p50:.2}, p99 x{p99:.2}, completion +{}",
            ms(v, "overhead.completion_time")
        ));
    }
    if let (Some(advisory), Some(handler)) = (
        value(v, "advisory_after_deadline.p50"),
        value(v, "handler_latency.p50"),
    ) {
        lines.push(format!(
            "dead letters: advisory {} after the final deadline, handler {} to the DLQ PubAck (p50); handler capacity {}/s, {} restart(s), {} copies flagged duplicate",
            format_us(advisory),
            format_us(handler),
            rate(v, "handler_capacity"),
            value(v, "handler.restarts").unwrap_or(0.0),
            value(v, "copies.duplicates_flagged").unwrap_or(0.0)
        ));
    }
    if let (Some(p50), Some(p99)) = (
        value(v, "vs_baseline.e2e_p50_ratio"),
        value(v, "vs_baseline.e2e_p99_ratio"),
    ) {
        lines.push(format!(
            "healthy messages vs the poison-free baseline: e2e p50 x{p50:.2}, p99 x{p99:.2}"
        ));
    }
    lines
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
