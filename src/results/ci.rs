//! The results in the formats CI tools already read, written to `ci/` in
//! every results folder: github-action-benchmark's custom JSON (one file
//! per direction, as that action needs a tool per file) and Bencher Metric
//! Format.
//!
//! Only figures of merit go out: a metric whose direction is `none` (a
//! configured rate, a count of injected duplicates) is context, and a
//! dashboard would chart it as if it could regress. A variant that broke
//! an invariant goes out too, marked: left out, a change that both slows
//! a path and breaks a guarantee would show on a dashboard as a gap, not
//! as the jump it is. Each variant also goes out as `invariants_failed`
//! (0 when all held), the mark a tool can chart and set a threshold on. A
//! variant that could not complete (an error) has no figures to chart.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

use super::summary::Summary;
use super::write_atomic;
use crate::record::metrics::{Direction, Metric};

/// The folder inside a results folder.
pub const DIR: &str = "ci";
/// github-action-benchmark, `tool: customBiggerIsBetter`.
pub const BIGGER_IS_BETTER: &str = "customBiggerIsBetter.json";
/// github-action-benchmark, `tool: customSmallerIsBetter`.
pub const SMALLER_IS_BETTER: &str = "customSmallerIsBetter.json";
/// Bencher Metric Format, for `bencher run --adapter json --file`.
pub const BENCHER: &str = "bencher.json";

/// One entry of github-action-benchmark's custom format.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActionBenchmark {
    /// `<scenario>/<variant>/<metric>`: the action draws one chart per name.
    pub name: String,
    pub unit: String,
    pub value: f64,
    /// `± MAD` of the repetitions; absent for a single run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range: Option<String>,
    /// The repetitions behind a median, shown in the chart's tooltip.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra: Option<String>,
}

/// One measure of one benchmark in Bencher Metric Format.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BencherMetric {
    pub value: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lower_value: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upper_value: Option<f64>,
}

/// Benchmark name -> measure slug -> metric.
pub type BencherReport = BTreeMap<String, BTreeMap<String, BencherMetric>>;

/// Writes the three files into `dir/ci/`.
pub fn write(dir: &Path, summary: &Summary) -> Result<()> {
    let ci = dir.join(DIR);
    std::fs::create_dir_all(&ci).with_context(|| format!("creating {}", ci.display()))?;
    let (bigger, smaller) = github_action_benchmark(summary);
    for (file, entries) in [(BIGGER_IS_BETTER, bigger), (SMALLER_IS_BETTER, smaller)] {
        let json = serde_json::to_vec_pretty(&entries).context("serialising CI results")?;
        write_atomic(&ci.join(file), &json)?;
    }
    let json = serde_json::to_vec_pretty(&bencher(summary)).context("serialising CI results")?;
    write_atomic(&ci.join(BENCHER), &json)
}

/// One figure that goes out: its benchmark name, the metric, and the
/// invariants its variant broke (empty when all held).
struct Tracked {
    name: String,
    metric: Metric,
    broken: Vec<String>,
}

impl Tracked {
    /// What a tool shows beside a figure of a variant that broke an
    /// invariant, so nobody reads it as a healthy run's.
    fn mark(&self) -> Option<String> {
        (!self.broken.is_empty()).then(|| {
            format!(
                "INVARIANTS BROKEN ({}): the guarantees did not hold in this run",
                self.broken.join(", ")
            )
        })
    }
}

/// The metrics worth tracking, with their benchmark names, and each
/// completed variant's count of broken invariants after its metrics.
fn tracked(summary: &Summary) -> Vec<Tracked> {
    let mut out = Vec::new();
    for (s, v) in summary.variants().filter(|(_, v)| v.error.is_none()) {
        let broken: Vec<String> = v
            .invariants
            .iter()
            .filter(|i| !i.passed)
            .map(|i| i.name.clone())
            .collect();
        let failed = Metric::new(
            "invariants_failed",
            "invariants",
            broken.len() as f64,
            Direction::Lower,
        );
        let figures = v
            .metrics
            .iter()
            .filter(|m| m.direction != Direction::None && m.value.is_finite())
            .chain([&failed]);
        for m in figures {
            out.push(Tracked {
                name: format!("{}/{}/{}", s.name, v.name, m.name),
                metric: m.clone(),
                broken: broken.clone(),
            });
        }
    }
    out
}

/// (bigger is better, smaller is better) entries, in summary order.
pub fn github_action_benchmark(summary: &Summary) -> (Vec<ActionBenchmark>, Vec<ActionBenchmark>) {
    let mut bigger = Vec::new();
    let mut smaller = Vec::new();
    for t in tracked(summary) {
        let m = &t.metric;
        let repetitions = (!m.repetitions.is_empty()).then(|| {
            let values: Vec<String> = m.repetitions.iter().map(|v| number(*v)).collect();
            format!(
                "median of {} repetitions: {}",
                m.repetitions.len(),
                values.join(", ")
            )
        });
        let extra: Vec<String> = t.mark().into_iter().chain(repetitions).collect();
        let entry = ActionBenchmark {
            name: t.name.clone(),
            unit: m.unit.clone(),
            value: m.value,
            range: m.spread.map(|s| format!("± {}", number(s.mad))),
            extra: (!extra.is_empty()).then(|| extra.join("; ")),
        };
        match m.direction {
            Direction::Higher => bigger.push(entry),
            _ => smaller.push(entry),
        }
    }
    (bigger, smaller)
}

/// Bencher Metric Format: value the median, lower and upper the min and
/// max of the repetitions, units converted by [`bencher_measure`]. The
/// format has no room for a note, so a broken variant is marked only by
/// its `invariants_failed` benchmark.
pub fn bencher(summary: &Summary) -> BencherReport {
    let mut report = BencherReport::new();
    for t in tracked(summary) {
        let m = &t.metric;
        let (slug, factor) = bencher_measure(&m.unit, m.direction);
        report.entry(t.name).or_default().insert(
            slug,
            BencherMetric {
                value: m.value * factor,
                lower_value: m.spread.map(|s| s.min * factor),
                upper_value: m.spread.map(|s| s.max * factor),
            },
        );
    }
    report
}

/// Which Bencher measure a jsbench metric goes to, and the factor into
/// that measure's unit. Bencher's built-in measures are `latency` in
/// nanoseconds and `throughput` in operations per second, and a threshold
/// belongs to a measure, so each measure must hold one direction only:
///
/// | jsbench unit, direction | measure | factor |
/// |---|---|---|
/// | `us`, lower | `latency` (ns) | 1,000 |
/// | `ms`, lower | `latency` (ns) | 1,000,000 |
/// | `s`, lower | `latency` (ns) | 1,000,000,000 |
/// | `msg/s`, higher | `throughput` (ops/s: a message is an operation) | 1 |
/// | any other | `<unit slug>-higher-is-better` or `-lower-is-better`, e.g. `mb-per-s-higher-is-better`, `ratio-lower-is-better` | 1 |
///
/// Bencher creates a measure named by an unknown slug on first upload.
pub fn bencher_measure(unit: &str, direction: Direction) -> (String, f64) {
    match (unit, direction) {
        ("us", Direction::Lower) => ("latency".into(), 1e3),
        ("ms", Direction::Lower) => ("latency".into(), 1e6),
        ("s", Direction::Lower) => ("latency".into(), 1e9),
        ("msg/s", Direction::Higher) => ("throughput".into(), 1.0),
        _ => {
            let way = match direction {
                Direction::Higher => "higher",
                _ => "lower",
            };
            (format!("{}-{way}-is-better", slug(unit)), 1.0)
        }
    }
}

/// `MB/s` -> `mb-per-s`: what Bencher accepts as a slug.
fn slug(unit: &str) -> String {
    let mut out = String::new();
    for c in unit.to_lowercase().replace('/', "-per-").chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    let out = out.trim_end_matches('-').to_string();
    if out.is_empty() { "value".into() } else { out }
}

/// A number without float noise: up to 4 significant decimals, no
/// trailing zeros.
fn number(x: f64) -> String {
    let text = if x.abs() >= 1000.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.4}")
    };
    without_trailing_zeros(text)
}

/// A formatted number without the zeros (and point) its decimals end in.
pub fn without_trailing_zeros(text: String) -> String {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::summary::Summary;

    /// A summary with one repeated variant that passed, one that broke an
    /// invariant, one that could not complete, and metrics in both
    /// directions and none.
    pub(crate) fn fixture() -> Summary {
        let metric = |name: &str, unit: &str, value: f64, direction: &str, reps: &[f64]| {
            let mut m = serde_json::json!({
                "name": name, "unit": unit, "value": value, "direction": direction,
            });
            if !reps.is_empty() {
                let s = crate::record::spread::Spread::of(reps).unwrap();
                m["repetitions"] = serde_json::json!(reps);
                m["spread"] = serde_json::to_value(s).unwrap();
            }
            m
        };
        let held = |name: &str, passed: bool| serde_json::json!({"name": name, "passed": passed, "detail": ""});
        let variant =
            |name: &str, invariants: Vec<serde_json::Value>, metrics: Vec<serde_json::Value>| {
                let passed = invariants.iter().all(|i| i["passed"] == true);
                serde_json::json!({
                    "name": name, "passed": passed, "params": {}, "metrics": metrics,
                    "histograms": [], "ledger": crate::record::ledger::LedgerCounts::default(),
                    "invariants": invariants, "warnings": [], "timelines": {}, "error": null,
                    "elapsed_s": 1.0,
                })
            };
        let mut errored = variant(
            "rate-9000",
            vec![],
            vec![metric("publish_rate", "msg/s", 10.0, "higher", &[])],
        );
        errored["passed"] = false.into();
        errored["error"] = "could not connect".into();
        let json = serde_json::json!({
            "schema_version": 1,
            "run": {
                "id": "r", "started_at": "t", "finished_at": null,
                "tool": {"name": "jsbench", "version": "0", "git_commit": null, "git_dirty": false},
                "server": {"mode": "embedded", "version": "2.15.1", "urls": "u", "server_name": "s",
                           "cluster": null, "jetstream_domain": null, "storage": "file", "replicas": 1},
                "host": {"os": "linux", "arch": "x86_64", "cores": 2, "memory_bytes": null,
                         "cpu_model": null, "hostname": null},
                "profile": {"name": "ci", "source": "ci", "description": "", "text": ""},
                "repeat": 3,
            },
            "scenarios": [{
                "name": "latency", "kind": "latency",
                "variants": [
                    variant("rate-1000", vec![held("lost = 0", true)], vec![
                        metric("target_rate", "msg/s", 1000.0, "none", &[]),
                        metric("publish_rate", "msg/s", 999.5, "higher", &[999.0, 999.5, 1000.0]),
                        metric("publish_throughput", "MB/s", 0.128, "higher", &[]),
                        metric("e2e_latency.p50", "us", 201.0, "lower", &[199.0, 201.0, 230.0]),
                        metric("drain_time", "ms", 2.5, "lower", &[]),
                        metric("overhead.e2e_p99_ratio", "ratio", 1.05, "lower", &[]),
                    ]),
                    variant("rate-5000", vec![held("lost = 0", false), held("in order", false)], vec![
                        metric("e2e_latency.p50", "us", 999.0, "lower", &[]),
                    ]),
                    errored,
                ],
            }],
            "verdict": "failed",
        });
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn github_action_benchmark_files_split_by_direction() {
        let (bigger, smaller) = github_action_benchmark(&fixture());
        let expected_bigger = r#"[
  {
    "name": "latency/rate-1000/publish_rate",
    "unit": "msg/s",
    "value": 999.5,
    "range": "± 0.5",
    "extra": "median of 3 repetitions: 999, 999.5, 1000"
  },
  {
    "name": "latency/rate-1000/publish_throughput",
    "unit": "MB/s",
    "value": 0.128
  }
]"#;
        let expected_smaller = r#"[
  {
    "name": "latency/rate-1000/e2e_latency.p50",
    "unit": "us",
    "value": 201.0,
    "range": "± 2",
    "extra": "median of 3 repetitions: 199, 201, 230"
  },
  {
    "name": "latency/rate-1000/drain_time",
    "unit": "ms",
    "value": 2.5
  },
  {
    "name": "latency/rate-1000/overhead.e2e_p99_ratio",
    "unit": "ratio",
    "value": 1.05
  },
  {
    "name": "latency/rate-1000/invariants_failed",
    "unit": "invariants",
    "value": 0.0
  },
  {
    "name": "latency/rate-5000/e2e_latency.p50",
    "unit": "us",
    "value": 999.0,
    "extra": "INVARIANTS BROKEN (lost = 0, in order): the guarantees did not hold in this run"
  },
  {
    "name": "latency/rate-5000/invariants_failed",
    "unit": "invariants",
    "value": 2.0,
    "extra": "INVARIANTS BROKEN (lost = 0, in order): the guarantees did not hold in this run"
  }
]"#;
        assert_eq!(
            serde_json::to_string_pretty(&bigger).unwrap(),
            expected_bigger
        );
        assert_eq!(
            serde_json::to_string_pretty(&smaller).unwrap(),
            expected_smaller
        );
    }

    #[test]
    fn bencher_metric_format_converts_units() {
        let expected = r#"{
  "latency/rate-1000/drain_time": {
    "latency": {
      "value": 2500000.0
    }
  },
  "latency/rate-1000/e2e_latency.p50": {
    "latency": {
      "value": 201000.0,
      "lower_value": 199000.0,
      "upper_value": 230000.0
    }
  },
  "latency/rate-1000/invariants_failed": {
    "invariants-lower-is-better": {
      "value": 0.0
    }
  },
  "latency/rate-1000/overhead.e2e_p99_ratio": {
    "ratio-lower-is-better": {
      "value": 1.05
    }
  },
  "latency/rate-1000/publish_rate": {
    "throughput": {
      "value": 999.5,
      "lower_value": 999.0,
      "upper_value": 1000.0
    }
  },
  "latency/rate-1000/publish_throughput": {
    "mb-per-s-higher-is-better": {
      "value": 0.128
    }
  },
  "latency/rate-5000/e2e_latency.p50": {
    "latency": {
      "value": 999000.0
    }
  },
  "latency/rate-5000/invariants_failed": {
    "invariants-lower-is-better": {
      "value": 2.0
    }
  }
}"#;
        assert_eq!(
            serde_json::to_string_pretty(&bencher(&fixture())).unwrap(),
            expected
        );
    }

    #[test]
    fn unknown_units_get_a_slug_that_keeps_their_direction() {
        assert_eq!(
            bencher_measure("count", Direction::Lower),
            ("count-lower-is-better".into(), 1.0)
        );
        assert_eq!(
            bencher_measure("us", Direction::Higher),
            ("us-higher-is-better".into(), 1.0)
        );
        assert_eq!(
            bencher_measure("", Direction::Higher).0,
            "value-higher-is-better"
        );
        assert_eq!(slug("MB/s"), "mb-per-s");
        assert_eq!(slug("msgs / s!"), "msgs-per-s");
    }

    #[test]
    fn files_are_written_into_ci() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &fixture()).unwrap();
        for file in [BIGGER_IS_BETTER, SMALLER_IS_BETTER, BENCHER] {
            let text = std::fs::read_to_string(dir.path().join(DIR).join(file)).unwrap();
            serde_json::from_str::<serde_json::Value>(&text).unwrap();
        }
    }
}
