//! Which metrics a paired comparison judges, and its verdict on each.
//!
//! Each pair of slices gives, per metric, the ratio NEW/BASE. A metric's
//! verdict rests on the confidence interval of the centre of its log
//! ratios ([`super::stats`]), against a threshold:
//!
//! - **regressed** when the whole interval lies beyond the threshold on
//!   the worse side (a drop for a rate, a rise for a latency): the change
//!   is real *and* larger than the threshold;
//! - **improved**, the same on the better side;
//! - **unchanged** when the whole interval lies within the threshold: any
//!   change is smaller than it;
//! - **undecided** otherwise: more pairs would tell.
//!
//! Log ratios make the judgement symmetric (×0.5 is as far from ×1 as ×2)
//! and pairing makes it sharp: noise that moves both slices of a pair (a
//! neighbour's load, a warm cache) cancels in their ratio.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::stats::{self, Interval};
use crate::record::metrics::{Direction, Metric};
use crate::results::summary::Summary;

/// A metric across slices: which profile, scenario, variant and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Key {
    pub profile: String,
    pub scenario: String,
    pub variant: String,
    pub metric: String,
}

impl Key {
    /// `scenario/variant/metric`, with the profile in front when a
    /// comparison runs several.
    pub fn label(&self, with_profile: bool) -> String {
        let short = format!("{}/{}/{}", self.scenario, self.variant, self.metric);
        if with_profile {
            format!("{}:{short}", self.profile)
        } else {
            short
        }
    }
}

/// What kind of number a metric is, for its threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// A rate (msg/s, MB/s).
    Throughput,
    /// A latency percentile (p50, p90, p99, p99.9).
    Latency,
}

/// The rule every metric is judged by.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Rule {
    /// Smallest change that counts for a rate, as a fraction (0.03 for 3%).
    pub throughput: f64,
    /// The same for a latency percentile.
    pub latency: f64,
    /// Confidence of each interval (0.99): held at every look.
    pub confidence: f64,
    /// `--only` patterns; empty judges the default set.
    pub only: Vec<String>,
}

/// Latencies below this are at the resolution of the clocks that time
/// them: their ratios are noise, so they are shown, never judged.
pub const LATENCY_FLOOR_US: f64 = 10.0;

impl Rule {
    /// The class a metric is judged in, or `None` for a metric shown only:
    /// by default rates and latency percentiles p50 to p99.9 with a
    /// direction; with `--only`, any directional metric that matches.
    pub fn class(&self, key: &Key, metric: &Metric) -> Option<Class> {
        if metric.direction == Direction::None {
            return None;
        }
        let class = match metric.unit.as_str() {
            "msg/s" | "MB/s" => Class::Throughput,
            "us" | "ms" | "s" => Class::Latency,
            _ if !self.only.is_empty() => Class::Throughput,
            _ => return None,
        };
        if !self.only.is_empty() {
            return self.selects(key).then_some(class);
        }
        if class == Class::Latency {
            let percentile = [".p50", ".p90", ".p99", ".p99.9"]
                .iter()
                .any(|p| key.metric.ends_with(p));
            if !percentile {
                return None;
            }
        }
        Some(class)
    }

    fn selects(&self, key: &Key) -> bool {
        self.only.iter().any(|p| {
            if p.contains('/') {
                crate::compare::glob(p, &key.label(false))
            } else {
                crate::compare::glob(p, &key.metric)
            }
        })
    }

    pub fn threshold(&self, class: Class) -> f64 {
        match class {
            Class::Throughput => self.throughput,
            Class::Latency => self.latency,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PairedVerdict {
    Regressed,
    Improved,
    Unchanged,
    /// The interval straddles the threshold: more pairs would tell.
    Undecided,
    /// Fewer pairs than the confidence needs.
    TooFewPairs,
    /// Shown for reading: no direction, not selected, or below the floor.
    NotJudged,
    /// Measured in BASE's slices, never in NEW's.
    MissingInNew,
}

impl PairedVerdict {
    pub fn label(self) -> &'static str {
        match self {
            PairedVerdict::Regressed => "regressed",
            PairedVerdict::Improved => "improved",
            PairedVerdict::Unchanged => "unchanged",
            PairedVerdict::Undecided => "undecided",
            PairedVerdict::TooFewPairs => "too few pairs",
            PairedVerdict::NotJudged => "not judged",
            PairedVerdict::MissingInNew => "missing in NEW",
        }
    }

    /// Whether more pairs could change it.
    pub fn decided(self) -> bool {
        !matches!(self, PairedVerdict::Undecided | PairedVerdict::TooFewPairs)
    }

    /// Whether it fails the comparison.
    pub fn fails(self) -> bool {
        matches!(self, PairedVerdict::Regressed | PairedVerdict::MissingInNew)
    }
}

/// One metric's values, pair by pair (`None` where a slice lacked it).
#[derive(Debug, Clone)]
pub struct Track {
    pub key: Key,
    pub unit: String,
    pub direction: Direction,
    pub class: Option<Class>,
    pub pairs: Vec<(Option<f64>, Option<f64>)>,
}

/// The judgement of one metric.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Judgement {
    pub key: Key,
    pub unit: String,
    pub direction: Direction,
    pub class: Option<Class>,
    /// The threshold it was judged against (a fraction), when judged.
    pub threshold: Option<f64>,
    /// NEW/BASE per pair where both slices measured it (and BASE is not 0).
    pub ratios: Vec<f64>,
    /// Median BASE and NEW values, for reading.
    pub base_median: Option<f64>,
    pub new_median: Option<f64>,
    /// Hodges–Lehmann estimate of the ratio, and its interval.
    pub ratio: Option<f64>,
    pub low: Option<f64>,
    pub high: Option<f64>,
    pub coverage: Option<f64>,
    pub verdict: PairedVerdict,
}

/// Every metric of the pairs' summaries, in BASE's order.
pub fn tracks(pairs: &[(&[Summary], &[Summary])], rule: &Rule) -> Vec<Track> {
    let mut order: Vec<Key> = Vec::new();
    let mut tracks: BTreeMap<Key, Track> = BTreeMap::new();
    let index = |summaries: &[Summary]| -> BTreeMap<Key, Metric> {
        let mut out = BTreeMap::new();
        for s in summaries {
            for (sc, v) in s.variants() {
                for m in &v.metrics {
                    let key = Key {
                        profile: s.run.profile.name.clone(),
                        scenario: sc.name.clone(),
                        variant: v.name.clone(),
                        metric: m.name.clone(),
                    };
                    out.insert(key, m.clone());
                }
            }
        }
        out
    };
    let indexed: Vec<_> = pairs.iter().map(|(b, n)| (index(b), index(n))).collect();
    for (i, (base, new)) in indexed.iter().enumerate() {
        for (key, m) in base.iter().chain(new.iter()) {
            let track = tracks.entry(key.clone()).or_insert_with(|| {
                order.push(key.clone());
                Track {
                    key: key.clone(),
                    unit: m.unit.clone(),
                    direction: m.direction,
                    class: rule.class(key, m),
                    pairs: vec![(None, None); pairs.len()],
                }
            });
            track.pairs[i] = (
                base.get(key).map(|m| m.value),
                new.get(key).map(|m| m.value),
            );
        }
    }
    order
        .into_iter()
        .filter_map(|k| tracks.remove(&k))
        .collect()
}

/// How far NEW is from BASE, in log units: `ln(new / base)`; equal values
/// (zeros included) are 0; a zero on one side only is far beyond any
/// threshold; negative values have no ratio.
fn log_ratio(base: f64, new: f64) -> Option<f64> {
    const FAR: f64 = 20.0;
    if base == new {
        Some(0.0)
    } else if base < 0.0 || new < 0.0 {
        None
    } else if base == 0.0 {
        Some(FAR)
    } else if new == 0.0 {
        Some(-FAR)
    } else {
        Some((new / base).ln())
    }
}

/// Judges one metric over the pairs so far.
pub fn judge(track: &Track, rule: &Rule) -> Judgement {
    let both: Vec<(f64, f64)> = track
        .pairs
        .iter()
        .filter_map(|&(b, n)| Some((b?, n?)))
        .collect();
    let bases: Vec<f64> = track.pairs.iter().filter_map(|p| p.0).collect();
    let news: Vec<f64> = track.pairs.iter().filter_map(|p| p.1).collect();
    let base_median = crate::record::spread::median(&bases);
    let mut j = Judgement {
        key: track.key.clone(),
        unit: track.unit.clone(),
        direction: track.direction,
        class: track.class,
        threshold: track.class.map(|c| rule.threshold(c)),
        ratios: both
            .iter()
            .map(|&(b, n)| n / b)
            .filter(|r| r.is_finite())
            .collect(),
        base_median,
        new_median: crate::record::spread::median(&news),
        ratio: None,
        low: None,
        high: None,
        coverage: None,
        verdict: PairedVerdict::NotJudged,
    };
    if !bases.is_empty() && news.is_empty() {
        j.verdict = PairedVerdict::MissingInNew;
        return j;
    }
    let Some(class) = track.class else {
        return j;
    };
    if class == Class::Latency
        && base_median.is_some_and(|m| to_us(m, &track.unit) < LATENCY_FLOOR_US)
    {
        j.class = None;
        j.threshold = None;
        return j;
    }
    let logs: Option<Vec<f64>> = both.iter().map(|&(b, n)| log_ratio(b, n)).collect();
    let Some(logs) = logs else {
        j.class = None;
        j.threshold = None;
        return j;
    };
    let Some(interval) = stats::hodges_lehmann(&logs, rule.confidence) else {
        j.verdict = PairedVerdict::TooFewPairs;
        return j;
    };
    j.ratio = Some(interval.estimate.exp());
    j.low = Some(interval.low.exp());
    j.high = Some(interval.high.exp());
    j.coverage = Some(interval.coverage);
    j.verdict = verdict(track.direction, &interval, rule.threshold(class));
    j
}

fn to_us(value: f64, unit: &str) -> f64 {
    match unit {
        "ms" => value * 1e3,
        "s" => value * 1e6,
        _ => value,
    }
}

/// The verdict of an interval of log ratios against a threshold.
fn verdict(direction: Direction, interval: &Interval, threshold: f64) -> PairedVerdict {
    let limit = (1.0 + threshold).ln();
    // "Worse" is positive: a rise for lower-is-better, a drop otherwise.
    let (low, high) = match direction {
        Direction::Higher => (-interval.high, -interval.low),
        _ => (interval.low, interval.high),
    };
    if low > limit {
        PairedVerdict::Regressed
    } else if high < -limit {
        PairedVerdict::Improved
    } else if -limit <= low && high <= limit {
        PairedVerdict::Unchanged
    } else {
        PairedVerdict::Undecided
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> Rule {
        Rule {
            throughput: 0.03,
            latency: 0.05,
            confidence: 0.99,
            only: Vec::new(),
        }
    }

    fn track(metric: &str, unit: &str, direction: Direction, pairs: &[(f64, f64)]) -> Track {
        let key = Key {
            profile: "ci".into(),
            scenario: "s".into(),
            variant: "v".into(),
            metric: metric.into(),
        };
        let m = Metric::new(metric, unit, 1.0, direction);
        Track {
            class: rule().class(&key, &m),
            key,
            unit: unit.into(),
            direction,
            pairs: pairs.iter().map(|&(b, n)| (Some(b), Some(n))).collect(),
        }
    }

    /// `n` pairs whose NEW/BASE ratios wobble by ±1% around `ratio`.
    fn pairs(n: usize, base: f64, ratio: f64) -> Vec<(f64, f64)> {
        (0..n)
            .map(|i| {
                let wobble = [1.0, 1.01, 0.99, 1.005, 0.995][i % 5];
                (base, base * ratio * wobble)
            })
            .collect()
    }

    #[test]
    fn a_rate_drop_beyond_the_threshold_regresses_and_a_rise_improves() {
        let down = track(
            "publish_rate",
            "msg/s",
            Direction::Higher,
            &pairs(10, 1e5, 0.90),
        );
        assert_eq!(judge(&down, &rule()).verdict, PairedVerdict::Regressed);
        let up = track(
            "publish_rate",
            "msg/s",
            Direction::Higher,
            &pairs(10, 1e5, 1.10),
        );
        assert_eq!(judge(&up, &rule()).verdict, PairedVerdict::Improved);
    }

    #[test]
    fn a_latency_rise_beyond_the_threshold_regresses() {
        let up = track(
            "e2e_latency.p99",
            "us",
            Direction::Lower,
            &pairs(10, 800.0, 1.15),
        );
        let j = judge(&up, &rule());
        assert_eq!(j.verdict, PairedVerdict::Regressed);
        let ratio = j.ratio.unwrap();
        assert!((1.13..1.17).contains(&ratio), "{j:?}");
        assert!(j.low.unwrap() > 1.05, "{j:?}");
    }

    #[test]
    fn the_judgement_is_symmetric_in_log_ratio() {
        // Halving a rate is as far as doubling a latency: both regress at
        // a 90% threshold, and neither at 110%.
        let halved = track(
            "publish_rate",
            "msg/s",
            Direction::Higher,
            &pairs(10, 1e5, 0.5),
        );
        let doubled = track(
            "e2e_latency.p50",
            "us",
            Direction::Lower,
            &pairs(10, 500.0, 2.0),
        );
        let strict = Rule {
            throughput: 0.9,
            latency: 0.9,
            ..rule()
        };
        let lax = Rule {
            throughput: 1.1,
            latency: 1.1,
            ..rule()
        };
        assert_eq!(judge(&halved, &strict).verdict, PairedVerdict::Regressed);
        assert_eq!(judge(&doubled, &strict).verdict, PairedVerdict::Regressed);
        assert_eq!(judge(&halved, &lax).verdict, PairedVerdict::Unchanged);
        assert_eq!(judge(&doubled, &lax).verdict, PairedVerdict::Unchanged);
    }

    #[test]
    fn small_or_noisy_changes_are_unchanged_or_undecided_never_regressed() {
        let flat = track(
            "publish_rate",
            "msg/s",
            Direction::Higher,
            &pairs(10, 1e5, 1.0),
        );
        assert_eq!(judge(&flat, &rule()).verdict, PairedVerdict::Unchanged);
        // At the threshold itself: the interval straddles it.
        let edge = track(
            "publish_rate",
            "msg/s",
            Direction::Higher,
            &pairs(10, 1e5, 0.97),
        );
        assert_eq!(judge(&edge, &rule()).verdict, PairedVerdict::Undecided);
        // Wild noise around no change.
        let noisy: Vec<(f64, f64)> = [1.3, 0.7, 1.2, 0.8, 1.25, 0.75, 1.1, 0.9, 1.0, 1.05]
            .iter()
            .map(|r| (1e5, 1e5 * r))
            .collect();
        let noisy = track("publish_rate", "msg/s", Direction::Higher, &noisy);
        assert_eq!(judge(&noisy, &rule()).verdict, PairedVerdict::Undecided);
    }

    #[test]
    fn too_few_pairs_decide_nothing() {
        let t = track(
            "publish_rate",
            "msg/s",
            Direction::Higher,
            &pairs(7, 1e5, 0.5),
        );
        assert_eq!(judge(&t, &rule()).verdict, PairedVerdict::TooFewPairs);
        assert!(!PairedVerdict::TooFewPairs.decided());
    }

    #[test]
    fn only_rates_and_latency_percentiles_are_judged_by_default() {
        let r = rule();
        let class = |metric: &str, unit: &str, direction| {
            let key = Key {
                profile: "p".into(),
                scenario: "s".into(),
                variant: "v".into(),
                metric: metric.into(),
            };
            r.class(&key, &Metric::new(metric, unit, 1.0, direction))
        };
        assert_eq!(
            class("publish_rate", "msg/s", Direction::Higher),
            Some(Class::Throughput)
        );
        assert_eq!(
            class("e2e_latency.p99.9", "us", Direction::Lower),
            Some(Class::Latency)
        );
        assert_eq!(class("e2e_latency.max", "us", Direction::Lower), None);
        assert_eq!(class("e2e_latency.mean", "us", Direction::Lower), None);
        assert_eq!(class("target_rate", "msg/s", Direction::None), None);
        assert_eq!(class("lost", "count", Direction::Lower), None);
        let only = Rule {
            only: vec!["*.max".into()],
            ..rule()
        };
        let key = Key {
            profile: "p".into(),
            scenario: "s".into(),
            variant: "v".into(),
            metric: "e2e_latency.max".into(),
        };
        let max = Metric::new("e2e_latency.max", "us", 1.0, Direction::Lower);
        assert_eq!(only.class(&key, &max), Some(Class::Latency));
    }

    #[test]
    fn latencies_at_the_clock_resolution_are_not_judged() {
        let tiny = track("send_lag.p50", "us", Direction::Lower, &pairs(10, 0.1, 3.0));
        let j = judge(&tiny, &rule());
        assert_eq!(j.verdict, PairedVerdict::NotJudged);
        assert_eq!(j.class, None);
    }

    #[test]
    fn a_metric_missing_in_new_fails_and_a_zero_rate_regresses() {
        let mut missing = track(
            "publish_rate",
            "msg/s",
            Direction::Higher,
            &pairs(8, 1e5, 1.0),
        );
        for p in &mut missing.pairs {
            p.1 = None;
        }
        let j = judge(&missing, &rule());
        assert_eq!(j.verdict, PairedVerdict::MissingInNew);
        assert!(j.verdict.fails());
        let zero = track(
            "publish_rate",
            "msg/s",
            Direction::Higher,
            &pairs(8, 1e5, 0.0),
        );
        assert_eq!(judge(&zero, &rule()).verdict, PairedVerdict::Regressed);
    }
}
