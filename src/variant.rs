//! What one variant produced, the guarantees checked on it, and where it
//! goes as soon as it is done. Scenarios make these; workers annotate them;
//! the results writer stores them.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::profile::CommonPlan;
use crate::record::histogram::Recorder;
use crate::record::ledger::LedgerCounts;
use crate::record::metrics::Metric;
use crate::record::names;
use crate::record::timeline::Timeline;
use crate::streams::provision::StreamPlacement;

/// A delivery guarantee checked after a variant, with the evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Invariant {
    pub name: String,
    /// Whether it held; `true` for a check that does not apply (it cannot
    /// fail), which every reader shows as "not applicable", never as a pass.
    pub passed: bool,
    pub detail: String,
    /// `false` when nothing the check could catch can happen in this
    /// variant (no ids, so the server can flag no duplicate).
    #[serde(default = "yes", skip_serializing_if = "is_yes")]
    pub applicable: bool,
    /// The check compares jsbench's own counters only, with no record of
    /// the server's behind it: it catches jsbench's bugs, not the server's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub client_side: bool,
}

fn yes() -> bool {
    true
}

fn is_yes(b: &bool) -> bool {
    *b
}

impl Invariant {
    pub fn check(name: &str, passed: bool, detail: impl Into<String>) -> Self {
        Invariant {
            name: name.to_string(),
            passed,
            detail: detail.into(),
            applicable: true,
            client_side: false,
        }
    }

    /// `actual == expected`, with both in the evidence.
    pub fn equal(name: &str, actual: u64, expected: u64) -> Self {
        Invariant::check(
            name,
            actual == expected,
            format!("{actual} (expected {expected})"),
        )
    }

    /// A check that cannot apply to this variant, and why.
    pub fn not_applicable(name: &str, why: impl Into<String>) -> Self {
        Invariant {
            applicable: false,
            ..Invariant::check(name, true, why)
        }
    }

    /// Marks a check that reads only jsbench's own counters.
    pub fn client_side(self) -> Self {
        Invariant {
            client_side: true,
            ..self
        }
    }

    /// How a reader names its state: held, FAILED or not applicable.
    pub fn state(&self) -> &'static str {
        match (self.applicable, self.passed) {
            (false, _) => "not applicable",
            (true, true) => "held",
            (true, false) => "FAILED",
        }
    }
}

/// Everything one variant produced: what the results writer stores.
#[derive(Debug, Clone, Default)]
pub struct VariantResult {
    pub name: String,
    /// The settings that distinguish this variant (rate, sizes, counts).
    pub params: BTreeMap<String, serde_json::Value>,
    pub metrics: Vec<Metric>,
    pub histograms: Vec<(String, Recorder)>,
    pub ledger: LedgerCounts,
    pub invariants: Vec<Invariant>,
    /// Problems that do not break a guarantee but weaken a number (a
    /// generator that fell behind, a server log warning).
    pub warnings: Vec<String>,
    pub timelines: BTreeMap<String, Timeline>,
    /// Set when the variant could not complete; what was measured stays.
    pub error: Option<String>,
    /// Set when the variant ran and broke nothing but could not answer its
    /// question (a search where nothing held down to its floor): never a
    /// pass, and not a failure of the server either.
    pub inconclusive: Option<String>,
    pub elapsed: Duration,
    /// Where the variant's streams were placed (leader, replicas).
    pub streams: Vec<StreamPlacement>,
    /// A variant of many streams and durables: each one's own figures.
    pub parts: Vec<Part>,
}

/// One stream or durable of a variant with many, with its own figures:
/// a row of the variant's parts table.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Part {
    /// `stream` or `durable`.
    pub kind: String,
    pub name: String,
    /// Column name and value, in column order.
    pub values: Vec<(String, serde_json::Value)>,
}

impl Part {
    pub fn new(kind: &str, name: &str) -> Self {
        Part {
            kind: kind.to_string(),
            name: name.to_string(),
            values: Vec::new(),
        }
    }

    pub fn set(&mut self, column: &str, value: impl Serialize) {
        self.values.push((
            column.to_string(),
            serde_json::to_value(value).expect("plain values serialise"),
        ));
    }
}

impl VariantResult {
    /// The names of the invariants that failed, in the order checked.
    pub fn broken(&self) -> Vec<&str> {
        self.invariants
            .iter()
            .filter(|i| !i.passed)
            .map(|i| i.name.as_str())
            .collect()
    }

    pub fn new(name: impl Into<String>) -> Self {
        VariantResult {
            name: name.into(),
            ..Default::default()
        }
    }

    /// A latency histogram: its percentile metrics (`<name>.p50` ...) and
    /// the histogram itself; nothing for an empty one.
    pub fn latency(&mut self, name: &str, recorder: &Recorder) {
        if recorder.count() > 0 {
            self.latency_kept(name, recorder);
        }
    }

    /// As [`Self::latency`], but an empty histogram is kept too: where the
    /// kind reports a figure whether or not anything was timed (its summary
    /// keys stay the same from run to run).
    pub fn latency_kept(&mut self, name: &str, recorder: &Recorder) {
        self.metrics.extend(crate::record::metrics::latency_metrics(
            name,
            &recorder.summary(),
        ));
        self.histograms.push((name.to_string(), recorder.clone()));
    }

    pub fn param(&mut self, key: &str, value: impl Serialize) {
        self.params.insert(
            key.to_string(),
            serde_json::to_value(value).expect("plain values serialise"),
        );
    }

    /// A warning for every histogram that clamped a value: saturated at
    /// its one-hour top, or an interval that ended before it started
    /// (clocks of two processes, or a server's against jsbench's). Called
    /// once the variant is complete, for every scenario alike.
    pub fn warn_clamped_histograms(&mut self) {
        for (name, h) in &self.histograms {
            if h.saturated() > 0 {
                self.warnings.push(format!(
                    "{name}: {} values exceeded one hour and were recorded as one hour",
                    h.saturated()
                ));
            }
            if h.negative() > 0 {
                self.warnings.push(format!(
                    "{name}: {} intervals ended before they started (the clocks behind them \
                     disagree) and were recorded as zero",
                    h.negative()
                ));
            }
        }
    }

    /// p50, p99 and max of each second of the end-to-end and PubAck
    /// latencies, as timelines (`e2e_latency.p99_us`, ...), for
    /// report.html's latency over time. Called once the variant is
    /// complete, for every scenario alike.
    pub fn add_interval_timelines(&mut self) {
        self.add_per_second(names::E2E_LATENCY);
        self.add_per_second(names::PUB_ACK_LATENCY);
    }

    /// p50, p99 and max of each second of the histogram `name` (one
    /// recorded with intervals), as timelines `<name>.p50_us` ...: a
    /// kind's own latency over time, by the same rule as the end-to-end
    /// one. Nothing for a histogram without intervals or not there.
    pub fn add_per_second(&mut self, name: &str) {
        // The last of that name, as the timelines of earlier ones would
        // be overwritten by it.
        let Some((_, h)) = self.histograms.iter().rev().find(|(n, _)| n == name) else {
            return;
        };
        // p50, p99 and max of each second, a few bytes a second.
        let mut seconds: Vec<(u64, [u64; 3])> = Vec::new();
        h.for_each_second(|second, hist| {
            let (p50, p99) = (hist.value_at_quantile(0.5), hist.value_at_quantile(0.99));
            seconds.push((second, [p50, p99, hist.max()]));
        });
        let (Some(&(first, _)), Some(&(last, _))) = (seconds.first(), seconds.last()) else {
            return;
        };
        for (k, (q, _)) in names::PER_SECOND.into_iter().enumerate() {
            let mut t = Timeline {
                origin_ns: first * crate::record::histogram::INTERVAL_NS,
                bucket_ns: crate::record::histogram::INTERVAL_NS,
                counts: vec![0; (last - first + 1) as usize],
            };
            for (second, values) in &seconds {
                // A gauge: 0 would read as "no sample".
                t.counts[(second - first) as usize] = (values[k] / 1_000).max(1);
            }
            self.timelines.insert(names::per_second(name, q), t);
        }
    }

    /// Adds the metric `name`: `value` in `unit`, better in `direction`.
    pub fn metric(
        &mut self,
        name: impl Into<String>,
        unit: &str,
        value: f64,
        direction: crate::record::metrics::Direction,
    ) {
        self.metrics.push(crate::record::metrics::Metric::new(
            name, unit, value, direction,
        ));
    }

    /// Adds the metric `name`: a time of `ns` nanoseconds, in ms, shorter
    /// better.
    pub fn ms(&mut self, name: impl Into<String>, ns: u64) {
        let direction = crate::record::metrics::Direction::Lower;
        self.metric(name, "ms", ns as f64 / 1e6, direction);
    }

    /// Adds a count of things: a whole number, no better direction.
    pub fn count(&mut self, name: impl Into<String>, value: u64) {
        self.metrics
            .push(crate::record::metrics::count(name, value));
    }

    /// The value of the metric `name`, the last of that name.
    pub fn value(&self, name: &str) -> Option<f64> {
        self.metrics
            .iter()
            .rev()
            .find(|m| m.name == name)
            .map(|m| m.value)
    }

    pub fn passed(&self) -> bool {
        self.error.is_none() && self.invariants.iter().all(|i| i.passed)
    }

    /// Finished, and no check it made could apply (or it made none): it
    /// proved nothing, so its verdict is "not applicable", never a pass.
    /// An inconclusive variant is that, whatever it checked.
    pub fn checked_nothing(&self) -> bool {
        self.error.is_none()
            && self.inconclusive.is_none()
            && self.invariants.iter().all(|i| !i.applicable)
    }
}

/// Receives each variant as soon as it is done, so a later failure or a
/// Ctrl-C never loses an earlier result.
pub trait VariantSink {
    fn record(&mut self, scenario: &CommonPlan, variant: VariantResult) -> Result<()>;
}
