//! The regression rule: when a change between two runs counts.
//!
//! A change counts (improved or regressed, by the metric's direction) only
//! if it is both
//!
//! 1. larger than the threshold, relative to BASE's value (`--threshold`,
//!    10% by default): smaller changes do not matter enough to fail a
//!    build over, whatever their statistics; and
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
//! gate that must not cry wolf.
//!
//! A single run (no repetitions) has a zero-width range, so the threshold
//! alone decides: fine to read, too noisy to gate on.
//!
//! Metrics whose direction is `none` are context (a configured rate, a
//! count of injected duplicates): shown, never judged.

use serde::Serialize;

use crate::metrics::Direction;

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
    pub fn of(metric: &crate::metrics::Metric) -> Side {
        match metric.spread {
            Some(s) => Side {
                value: metric.value,
                min: s.min.min(metric.value),
                max: s.max.max(metric.value),
                mad: s.mad,
                repetitions: metric.repetitions.len().max(1),
            },
            None => Side {
                value: metric.value,
                min: metric.value,
                max: metric.value,
                mad: 0.0,
                repetitions: 1,
            },
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

/// Judges one metric. `threshold` is a fraction (0.1 for 10%).
pub fn judge(direction: Direction, base: &Side, new: &Side, threshold: f64) -> Verdict {
    if direction == Direction::None {
        return Verdict::Context;
    }
    let beyond = match change(base.value, new.value) {
        Some(c) => c.abs() > threshold,
        None => true,
    };
    if !beyond {
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
    use crate::metrics::Metric;
    use crate::spread::Spread;

    fn side(values: &[f64]) -> Side {
        let mut m = Metric::new(
            "m",
            "us",
            crate::spread::median(values).unwrap(),
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
    fn negative_values_keep_their_direction() {
        // A CPU-per-message difference that was negative and grew.
        assert_eq!(
            judge(Direction::Lower, &side(&[-1.0]), &side(&[-0.5]), T),
            Verdict::Regressed
        );
    }
}
