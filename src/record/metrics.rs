//! Named, unit-carrying, direction-aware numbers: the unit of comparison
//! between runs. Everything a scenario reports ends up as a [`Metric`].

use names::Pace;
use serde::{Deserialize, Serialize};

use crate::record::histogram::LatencySummary;
use crate::record::names;
use crate::record::signed::Signed;
use crate::record::spread::Spread;

/// Which way is better, so `compare` can call a change a regression.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Higher,
    Lower,
    /// Context, not a figure of merit (a configured rate, a count of variants).
    #[default]
    None,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    pub name: String,
    pub unit: String,
    /// The median of `repetitions` when the profile repeats its scenarios,
    /// so readers that know nothing of repetitions read the right number.
    pub value: f64,
    pub direction: Direction,
    /// Every repetition's value in run order (`repeat = N`); empty for a
    /// single run, and in summaries written before repetitions existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repetitions: Vec<f64>,
    /// How the repetitions scatter; `None` for a single run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<Spread>,
}

/// Whether a metric is a figure of merit judged when nobody says which
/// (no `--only`, no `[ab] judge`): a rate, CPU per message, or a latency
/// percentile from p50 to p99.9. Beyond p99.9, maxima, drain times, counts
/// and ratios move by tens of percent between runs of one build here;
/// judged too, two such runs would regress somewhere every time. `jsbench
/// ab` and `jsbench compare` judge by this one rule.
pub fn judged_by_default(name: &str, unit: &str, direction: Direction) -> bool {
    if direction == Direction::None {
        return false;
    }
    match unit {
        "msg/s" | "MB/s" => true,
        "us" | "ms" | "s" => {
            name.ends_with("cpu_per_msg")
                || [".p50", ".p90", ".p99", ".p99.9"]
                    .iter()
                    .any(|p| name.ends_with(p))
        }
        _ => false,
    }
}

impl Metric {
    pub fn new(name: impl Into<String>, unit: &str, value: f64, direction: Direction) -> Self {
        Metric {
            name: name.into(),
            unit: unit.to_string(),
            value,
            direction,
            repetitions: Vec::new(),
            spread: None,
        }
    }
}

/// A count of things: context for a reader, never better or worse by
/// itself (invariants judge counts).
pub fn count(name: impl Into<String>, value: u64) -> Metric {
    Metric::new(name, "count", value as f64, Direction::None)
}

/// A phase's rate (msg/s) and throughput (MB/s), both better higher:
/// every phase that moves messages reports its pace in these two.
pub fn rate_and_throughput(pace: Pace, msgs_per_s: f64, bytes_per_s: f64) -> [Metric; 2] {
    [
        Metric::new(pace.rate, "msg/s", msgs_per_s, Direction::Higher),
        Metric::new(
            pace.throughput,
            "MB/s",
            bytes_per_s / 1e6,
            Direction::Higher,
        ),
    ]
}

/// `value / base`, 0 when there is no base: a ratio against a variant that
/// measured nothing must not read as infinitely worse.
pub fn ratio(name: impl Into<String>, value: f64, base: f64, direction: Direction) -> Metric {
    let r = if base > 0.0 { value / base } else { 0.0 };
    Metric::new(name, "ratio", r, direction)
}

/// The percentile metrics of one latency histogram: `<name>.p50` ... `<name>.max`, in µs.
/// None for an empty histogram: a run that recorded nothing has no latency,
/// and a 0 µs would read as a perfect one.
pub fn latency_metrics(name: &str, s: &LatencySummary) -> Vec<Metric> {
    if s.count == 0 {
        return Vec::new();
    }
    let values = [
        s.p50_us, s.p90_us, s.p99_us, s.p999_us, s.p9999_us, s.max_us, s.mean_us,
    ];
    names::QUANTILES
        .iter()
        .zip(values)
        .map(|(q, value)| Metric::new(names::quantile(name, q), "us", value, Direction::Lower))
        .collect()
}

/// The percentiles [`latency_metrics`] gives, of a signed distribution
/// (µs, early negative), plus its `min`. Shown, never judged: neither
/// direction is better, so a judge takes the magnitude instead.
pub fn signed_latency_metrics(name: &str, s: &Signed) -> Vec<Metric> {
    if s.count() == 0 {
        return Vec::new();
    }
    let quantiles = [0.50, 0.90, 0.99, 0.999, 0.9999].map(|q| s.quantile_ns(q) as f64);
    let last = [s.max_ns() as f64, s.mean_ns()];
    let ns = [s.min_ns() as f64].into_iter().chain(quantiles).chain(last);
    std::iter::once(&"min")
        .chain(names::QUANTILES)
        .zip(ns)
        .map(|(q, ns)| Metric::new(names::quantile(name, q), "us", ns / 1e3, Direction::None))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_histogram_has_no_latency_metrics() {
        assert!(latency_metrics("e2e", &LatencySummary::default()).is_empty());
    }

    #[test]
    fn latency_metrics_are_lower_is_better_microseconds() {
        let s = LatencySummary {
            count: 3,
            p50_us: 1.0,
            max_us: 9.0,
            ..Default::default()
        };
        let ms = latency_metrics("e2e", &s);
        assert_eq!(ms[0].name, "e2e.p50");
        assert_eq!(ms[0].value, 1.0);
        assert!(
            ms.iter()
                .all(|m| m.unit == "us" && m.direction == Direction::Lower)
        );
        assert!(ms.iter().any(|m| m.name == "e2e.max" && m.value == 9.0));
    }
}
