//! The regression rule: when a change between two runs counts.
//!
//! A change counts (improved or regressed, by the metric's direction) only
//! if it is both
//!
//! 1. beyond the threshold (`--threshold`, 10% by default), measured as a
//!    log ratio: NEW is beyond when `|ln(new / base)| > ln(1 + threshold)`.
//!    A change and its inverse are then equally far: at 100% a rate that
//!    halves counts as a latency that doubles does, and a rate that falls
//!    to zero counts at any threshold. (The relative change
//!    `(new - base) / base` cannot fall below -100%, so a drop of a
//!    higher-is-better metric could never clear a 100% threshold.) Smaller
//!    changes do not matter enough to fail a build over, whatever their
//!    statistics; and
//! 2. outside the spread of both runs: the min..max ranges of the two
//!    runs' repetitions do not overlap, so every repetition of NEW is
//!    beyond every repetition of BASE. A change that clears the threshold
//!    but not the ranges is "within noise".
//!
//! Why whole ranges rather than "median outside the other's range": with
//! three repetitions a side, two runs of the same code have every NEW
//! repetition above every BASE one with probability 1/20, against 1/10 for
//! the median rule; with five, 1/252. The threshold cuts that further on
//! this shared machine, where throughput alone moves ±40% between runs.
//! The price is sensitivity: a run with one wild repetition hides a real
//! change until it is run again, which is the right side to err on for a
//! gate that must not cry wolf. Unpaired runs cannot do better than that;
//! `jsbench ab` pairs them ([`crate::ab`]).
//!
//! A single run (no repetitions) has a zero-width range, so the threshold
//! alone decides: fine to read, too noisy to gate on.
//!
//! Metrics whose direction is `none` are context (a configured rate, a
//! count of injected duplicates): shown, never judged.

use serde::Serialize;

use crate::record::metrics::Direction;

/// One run's view of a metric.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Side {
    /// The median of the repetitions (the value of a single run).
    pub value: f64,
    pub min: f64,
    pub max: f64,
    /// Median absolute deviation; 0 for a single run.
    pub mad: f64,
    pub repetitions: usize,
}

impl Side {
    pub fn of(metric: &crate::record::metrics::Metric) -> Side {
        let value = metric.value;
        let (min, max, mad, repetitions) = match metric.spread {
            Some(s) => (
                s.min.min(value),
                s.max.max(value),
                s.mad,
                metric.repetitions.len().max(1),
            ),
            None => (value, value, 0.0, 1),
        };
        Side {
            value,
            min,
            max,
            mad,
            repetitions,
        }
    }

    fn overlaps(&self, other: &Side) -> bool {
        self.min <= other.max && other.min <= self.max
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Beyond the threshold and outside both spreads, for the worse.
    Regressed,
    /// Beyond the threshold and outside both spreads, for the better.
    Improved,
    /// Beyond the threshold, but the runs' ranges overlap.
    WithinNoise,
    /// Within the threshold.
    Unchanged,
    /// Direction `none`, or a unit that changed: shown, not judged.
    Context,
    /// Left out of judgement by `--only`: shown for reading.
    Ignored,
    /// In BASE only (a variant that did not run, a figure not measured).
    Missing,
    /// In NEW only.
    Added,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Regressed => "regressed",
            Verdict::Improved => "improved",
            Verdict::WithinNoise => "within noise",
            Verdict::Unchanged => "unchanged",
            Verdict::Context => "context",
            Verdict::Ignored => "not judged",
            Verdict::Missing => "missing in NEW",
            Verdict::Added => "new metric",
        }
    }
}

/// The relative change from `base` to `new`; `None` when BASE is zero and
/// NEW is not (no finite ratio).
pub fn change(base: f64, new: f64) -> Option<f64> {
    if base == new {
        Some(0.0)
    } else if base == 0.0 {
        None
    } else {
        Some((new - base) / base.abs())
    }
}

/// Whether NEW lies beyond `threshold` from BASE, on the log ratio (see
/// the module notes). Equal values never do; a zero on one side only
/// always does; a negative value (a signed difference) has no ratio, and
/// the relative change on |BASE| stands in.
pub fn beyond(base: f64, new: f64, threshold: f64) -> bool {
    if base == new {
        false
    } else if base > 0.0 && new > 0.0 {
        (new / base).ln().abs() > (1.0 + threshold).ln()
    } else if base >= 0.0 && new >= 0.0 {
        true
    } else {
        change(base, new).is_none_or(|c| c.abs() > threshold)
    }
}

/// Judges one metric. `threshold` is a fraction (0.1 for 10%).
pub fn judge(direction: Direction, base: &Side, new: &Side, threshold: f64) -> Verdict {
    if direction == Direction::None {
        return Verdict::Context;
    }
    if !beyond(base.value, new.value, threshold) {
        return Verdict::Unchanged;
    }
    if base.overlaps(new) {
        return Verdict::WithinNoise;
    }
    let worse = match direction {
        Direction::Higher => new.value < base.value,
        _ => new.value > base.value,
    };
    if worse {
        Verdict::Regressed
    } else {
        Verdict::Improved
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::metrics::Metric;
    use crate::record::spread::Spread;

    fn side(values: &[f64]) -> Side {
        let mut m = Metric::new(
            "m",
            "us",
            crate::record::spread::median(values).unwrap(),
            Direction::Lower,
        );
        if values.len() > 1 {
            m.repetitions = values.to_vec();
            m.spread = Spread::of(values);
        }
        Side::of(&m)
    }

    const T: f64 = 0.10;

    #[test]
    fn latency_up_beyond_threshold_and_both_spreads_regresses() {
        let base = side(&[200.0, 205.0, 210.0]);
        let new = side(&[240.0, 250.0, 245.0]);
        assert_eq!(judge(Direction::Lower, &base, &new, T), Verdict::Regressed);
        assert_eq!(judge(Direction::Lower, &new, &base, T), Verdict::Improved);
    }

    #[test]
    fn throughput_down_beyond_threshold_and_both_spreads_regresses() {
        let base = side(&[1000.0, 1010.0, 990.0]);
        let new = side(&[800.0, 820.0, 810.0]);
        assert_eq!(judge(Direction::Higher, &base, &new, T), Verdict::Regressed);
        assert_eq!(judge(Direction::Higher, &new, &base, T), Verdict::Improved);
    }

    #[test]
    fn a_change_inside_the_threshold_is_unchanged_however_clean() {
        let base = side(&[200.0, 200.0, 200.0]);
        let new = side(&[219.0, 219.0, 219.0]);
        assert_eq!(judge(Direction::Lower, &base, &new, T), Verdict::Unchanged);
        // The threshold is strict: exactly 10% is not beyond it.
        let new = side(&[220.0]);
        assert_eq!(
            judge(Direction::Lower, &side(&[200.0]), &new, T),
            Verdict::Unchanged
        );
        // A bigger threshold absorbs a bigger change.
        let new = side(&[240.0, 240.0, 240.0]);
        assert_eq!(
            judge(Direction::Lower, &base, &new, 0.25),
            Verdict::Unchanged
        );
    }

    #[test]
    fn a_change_beyond_the_threshold_but_inside_a_spread_is_noise() {
        // NEW's median is 30% up, but one BASE repetition was as slow.
        let base = side(&[200.0, 205.0, 262.0]);
        let new = side(&[255.0, 260.0, 270.0]);
        assert_eq!(
            judge(Direction::Lower, &base, &new, T),
            Verdict::WithinNoise
        );
        // One fast NEW repetition reaches into BASE's range.
        let base = side(&[200.0, 205.0, 210.0]);
        let new = side(&[209.0, 260.0, 270.0]);
        assert_eq!(
            judge(Direction::Lower, &base, &new, T),
            Verdict::WithinNoise
        );
        // Improvements need the same evidence.
        assert_eq!(
            judge(Direction::Lower, &new, &base, T),
            Verdict::WithinNoise
        );
    }

    #[test]
    fn single_runs_are_judged_by_the_threshold_alone() {
        assert_eq!(
            judge(Direction::Lower, &side(&[200.0]), &side(&[230.0]), T),
            Verdict::Regressed
        );
        assert_eq!(
            judge(Direction::Higher, &side(&[200.0]), &side(&[230.0]), T),
            Verdict::Improved
        );
    }

    #[test]
    fn context_metrics_are_never_judged() {
        let base = side(&[1000.0]);
        let new = side(&[5000.0]);
        assert_eq!(judge(Direction::None, &base, &new, T), Verdict::Context);
        assert_eq!(judge(Direction::None, &new, &base, T), Verdict::Context);
    }

    #[test]
    fn from_zero_any_change_is_beyond_the_threshold() {
        assert_eq!(change(0.0, 0.0), Some(0.0));
        assert_eq!(change(0.0, 1.0), None);
        assert_eq!(change(-2.0, -1.0), Some(0.5));
        assert_eq!(
            judge(Direction::Lower, &side(&[0.0, 0.0]), &side(&[3.0, 4.0]), T),
            Verdict::Regressed
        );
        assert_eq!(
            judge(Direction::Lower, &side(&[0.0, 0.0]), &side(&[0.0, 0.0]), T),
            Verdict::Unchanged
        );
    }

    #[test]
    fn at_the_ci_threshold_a_halved_rate_and_a_doubled_latency_both_count() {
        // scripts/ci-compare.sh judges at 100%: ln 2 either way.
        const CI: f64 = 1.0;
        let rate = |v: f64| side(&[v]);
        assert_eq!(
            judge(Direction::Higher, &rate(1000.0), &rate(490.0), CI),
            Verdict::Regressed
        );
        assert_eq!(
            judge(Direction::Higher, &rate(1000.0), &rate(0.0), CI),
            Verdict::Regressed,
            "a rate that falls to zero regresses at any threshold"
        );
        assert_eq!(
            judge(Direction::Higher, &rate(1000.0), &rate(510.0), CI),
            Verdict::Unchanged
        );
        assert_eq!(
            judge(Direction::Higher, &rate(490.0), &rate(1000.0), CI),
            Verdict::Improved
        );
        let latency = |v: f64| side(&[v]);
        assert_eq!(
            judge(Direction::Lower, &latency(200.0), &latency(410.0), CI),
            Verdict::Regressed
        );
        assert_eq!(
            judge(Direction::Lower, &latency(200.0), &latency(390.0), CI),
            Verdict::Unchanged
        );
        assert_eq!(
            judge(Direction::Lower, &latency(410.0), &latency(200.0), CI),
            Verdict::Improved
        );
        // Exactly double (or half) is at the threshold, not beyond it.
        assert!(!beyond(1000.0, 500.0, CI));
        assert!(!beyond(200.0, 400.0, CI));
    }

    #[test]
    fn the_judgement_is_symmetric_in_the_ratio() {
        // x0.8 is as far as x1.25, whichever way round.
        for (base, new) in [(100.0, 80.0), (80.0, 100.0), (100.0, 125.0), (125.0, 100.0)] {
            assert!(beyond(base, new, 0.24), "{base} -> {new} at 24%");
            assert!(!beyond(base, new, 0.26), "{base} -> {new} at 26%");
        }
    }

    #[test]
    fn negative_values_keep_their_direction() {
        // A CPU-per-message difference that was negative and grew.
        assert_eq!(
            judge(Direction::Lower, &side(&[-1.0]), &side(&[-0.5]), T),
            Verdict::Regressed
        );
    }
}
