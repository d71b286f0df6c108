//! How faithfully a replay reproduced the timing of its recording.
//!
//! Input: per delivered message, in delivery order, its original time (the
//! server's timestamp from the message metadata: ground truth) and its
//! replayed time (when jsbench received it). Output, per message *i* ≥ 1:
//!
//! - **gap error**: replayed inter-arrival minus original inter-arrival,
//!   `(r[i] - r[i-1]) - (o[i] - o[i-1])`;
//! - **drift**: replayed elapsed minus original elapsed since the first
//!   message, `(r[i] - r[0]) - (o[i] - o[0])`: the gap errors summed up;
//!
//! and the total duration ratio, the gap error per class of original gap
//! (the server paces gaps above 1 ms only, so one number over all gaps
//! would hide where pacing starts), and a sampled series of (original,
//! replayed) elapsed times for a chart.
//!
//! Both errors are signed: early is negative, late positive. HdrHistogram
//! holds non-negative values at a relative precision, so an offset would
//! cost all precision near zero; a [`Signed`] distribution keeps two
//! histograms instead, late values and early magnitudes, and answers signed
//! quantiles from both. The same analysis compares a recording's intended
//! send times with its server timestamps (how well the pattern was recorded).

use crate::record::histogram::Recorder;
use crate::record::timeline::Timeline;

pub use crate::record::signed::Signed;

/// A range of original gaps, `(above_ns, up_to_ns]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GapClass {
    /// Names metrics: `gap_error_by_gap.<name>.abs_p99`.
    pub name: &'static str,
    pub above_ns: u64,
    pub up_to_ns: u64,
}

/// The classes gap errors are reported in. The first is what the server
/// does not pace at all (it delivers gaps of 1 ms and less back to back,
/// measured on 2.15.1); the finer steps above it show where its pacing
/// starts to hold.
pub const GAP_CLASSES: &[GapClass] = &[
    class("le_1ms", 0, 1_000_000),
    class("1ms_1500us", 1_000_000, 1_500_000),
    class("1500us_2ms", 1_500_000, 2_000_000),
    class("2ms_3ms", 2_000_000, 3_000_000),
    class("3ms_5ms", 3_000_000, 5_000_000),
    class("5ms_10ms", 5_000_000, 10_000_000),
    class("10ms_100ms", 10_000_000, 100_000_000),
    class("gt_100ms", 100_000_000, u64::MAX),
];

const fn class(name: &'static str, above_ns: u64, up_to_ns: u64) -> GapClass {
    GapClass {
        name,
        above_ns,
        up_to_ns,
    }
}

/// The class of an original gap (a negative gap, the server clock stepping
/// back, counts as zero).
pub fn gap_class(gap_ns: i64) -> usize {
    let gap = gap_ns.max(0) as u64;
    GAP_CLASSES
        .iter()
        .position(|c| gap <= c.up_to_ns && (gap > c.above_ns || c.above_ns == 0))
        .unwrap_or(GAP_CLASSES.len() - 1)
}

/// Points in the (original, replayed) series: enough for a smooth line at
/// chart width, few enough to keep summary.json small.
pub const SERIES_POINTS: usize = 200;

/// Timeline names the series is stored under in a variant's `timelines`:
/// `counts[k]` is sample *k*'s elapsed time since the first message in µs,
/// original and replayed; `origin_ns` is the first message's server
/// timestamp and `bucket_ns` is 1 (a bucket is a sample, not a time span).
/// Replayed gap against recorded gap, signed µs; `.late` and `.early`
/// histograms, and by class of gap.
pub const GAP_ERROR: &str = "gap_error";
pub const GAP_ERROR_LATE: &str = "gap_error.late";
pub const GAP_ERROR_EARLY: &str = "gap_error.early";
pub const GAP_ERROR_BY_GAP: &str = "gap_error_by_gap";
/// The smallest recorded gap a replay kept within 1 ms.
pub const SMALLEST_GAP_WITHIN_1MS: &str = "smallest_gap_within_1ms";
pub const SERIES_ORIGINAL: &str = "pacing.original_us";
pub const SERIES_REPLAYED: &str = "pacing.replayed_us";

/// Everything measured about one replay's timing.
#[derive(Debug, Clone, Default)]
pub struct Pacing {
    pub messages: u64,
    pub gap_error: Signed,
    pub drift: Signed,
    /// Drift at the last message.
    pub final_drift_ns: i64,
    /// Gap error per [`GAP_CLASSES`] entry.
    pub by_gap: Vec<Signed>,
    /// The original gaps themselves, for context.
    pub original_gaps: Recorder,
    pub original_span_ns: u64,
    pub replayed_span_ns: u64,
    /// Sampled (original elapsed, replayed elapsed), ns, evenly spread over
    /// the original time; always holds the last message.
    pub series: Vec<(u64, u64)>,
}

impl Pacing {
    /// Replayed duration over original duration; `None` without a span.
    pub fn duration_ratio(&self) -> Option<f64> {
        (self.original_span_ns > 0)
            .then(|| self.replayed_span_ns as f64 / self.original_span_ns as f64)
    }

    /// The lower edge of the smallest gap class from which on every class
    /// with at least `min_count` gaps has the `quantile` of its gap error
    /// magnitude within `tolerance_ns`: scanning down from the largest
    /// gaps, the first class that misses stops the scan. `None` when the
    /// largest populated class already misses, or no class has enough gaps.
    pub fn smallest_gap_within(
        &self,
        tolerance_ns: u64,
        quantile: f64,
        min_count: u64,
    ) -> Option<u64> {
        let mut smallest = None;
        for (class, errors) in GAP_CLASSES.iter().zip(&self.by_gap).rev() {
            if errors.count() < min_count {
                continue;
            }
            if errors.magnitude().quantile(quantile) > tolerance_ns {
                break;
            }
            smallest = Some(class.above_ns);
        }
        smallest
    }

    /// The series as the two timelines it is stored as.
    pub fn series_timelines(&self, origin_ns: u64) -> [(String, Timeline); 2] {
        let timeline = |pick: fn(&(u64, u64)) -> u64| Timeline {
            origin_ns,
            bucket_ns: 1,
            counts: self
                .series
                .iter()
                .map(|p| (pick(p) + 500) / 1_000)
                .collect(),
        };
        [
            (SERIES_ORIGINAL.to_string(), timeline(|p| p.0)),
            (SERIES_REPLAYED.to_string(), timeline(|p| p.1)),
        ]
    }
}

/// Analyses `(original_ns, replayed_ns)` per message, in delivery order.
pub fn analyse(pairs: &[(u64, u64)]) -> Pacing {
    let mut p = Pacing {
        messages: pairs.len() as u64,
        by_gap: vec![Signed::new(); GAP_CLASSES.len()],
        ..Default::default()
    };
    let Some(&(o0, r0)) = pairs.first() else {
        return p;
    };
    let diff = |a: u64, b: u64| a as i64 - b as i64;
    for w in pairs.windows(2) {
        let ((o_prev, r_prev), (o, r)) = (w[0], w[1]);
        let original_gap = diff(o, o_prev);
        let error = diff(r, r_prev) - original_gap;
        p.gap_error.record(error);
        p.by_gap[gap_class(original_gap)].record(error);
        p.original_gaps.record(original_gap.max(0) as u64);
        p.drift.record(diff(r, r0) - diff(o, o0));
    }
    let (o_last, r_last) = pairs[pairs.len() - 1];
    p.final_drift_ns = diff(r_last, r0) - diff(o_last, o0);
    p.original_span_ns = o_last.saturating_sub(o0);
    p.replayed_span_ns = r_last.saturating_sub(r0);
    p.series = sample(pairs);
    p
}

/// At most [`SERIES_POINTS`] pairs, as elapsed times since the first
/// message: every message when there are no more than that, else the first
/// message at or after each of evenly spaced original times.
fn sample(pairs: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let (o0, r0) = pairs[0];
    let elapsed = |&(o, r): &(u64, u64)| (o.saturating_sub(o0), r.saturating_sub(r0));
    if pairs.len() <= SERIES_POINTS {
        return pairs.iter().map(elapsed).collect();
    }
    let span = pairs[pairs.len() - 1].0.saturating_sub(o0);
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(SERIES_POINTS);
    let mut i = 0;
    for k in 0..SERIES_POINTS as u64 {
        let at = span as u128 * u128::from(k) / (SERIES_POINTS as u128 - 1);
        while i + 1 < pairs.len() && u128::from(pairs[i].0.saturating_sub(o0)) < at {
            i += 1;
        }
        let point = elapsed(&pairs[i]);
        if out.last() != Some(&point) {
            out.push(point);
        }
    }
    let last = elapsed(&pairs[pairs.len() - 1]);
    if out.last() != Some(&last) {
        out.push(last);
    }
    out
}

/// (original elapsed s, drift µs) from a variant's stored series timelines;
/// `None` unless both are there and agree in length.
pub fn drift_points(original: &Timeline, replayed: &Timeline) -> Option<Vec<(f64, f64)>> {
    if original.counts.len() != replayed.counts.len() || original.counts.is_empty() {
        return None;
    }
    Some(
        original
            .counts
            .iter()
            .zip(&replayed.counts)
            .map(|(&o, &r)| (o as f64 / 1e6, r as f64 - o as f64))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn signed_quantiles_put_early_values_first() {
        let mut s = Signed::new();
        for v in [-300_000i64, -100_000, 0, 200_000, 400_000] {
            s.record(v);
        }
        assert_eq!(s.count(), 5);
        assert_eq!(s.min_ns(), -300_000);
        assert_eq!(s.max_ns(), 400_000);
        assert_eq!(s.mean_ns(), 40_000.0);
        let near = |a: i64, b: i64| (a - b).abs() <= b.abs() / 500 + 1;
        assert!(near(s.quantile_ns(0.0), -300_000), "{}", s.quantile_ns(0.0));
        assert!(near(s.quantile_ns(0.2), -300_000), "{}", s.quantile_ns(0.2));
        assert!(near(s.quantile_ns(0.4), -100_000), "{}", s.quantile_ns(0.4));
        assert_eq!(s.quantile_ns(0.6), 0);
        assert!(near(s.quantile_ns(0.8), 200_000), "{}", s.quantile_ns(0.8));
        assert!(near(s.quantile_ns(1.0), 400_000), "{}", s.quantile_ns(1.0));
        assert_eq!(s.early().count(), 2);
        assert_eq!(s.late().count(), 3);
        assert_eq!(s.magnitude().count(), 5);
        assert_eq!(Signed::new().quantile_ns(0.5), 0);
    }

    #[test]
    fn signed_survives_its_two_histograms() {
        let mut s = Signed::new();
        for v in [-5_000i64, 1_000, 3_000] {
            s.record(v);
        }
        let back = Signed::from_parts(s.late().clone(), s.early().clone());
        assert_eq!(back.count(), 3);
        assert!((back.min_ns() + 5_000).abs() < 10, "{}", back.min_ns());
        assert!((back.max_ns() - 3_000).abs() < 10, "{}", back.max_ns());
        assert!((back.mean_ns() + 333.3).abs() < 5.0, "{}", back.mean_ns());
        assert_eq!(back.quantile_ns(0.5), s.quantile_ns(0.5));
    }

    #[test]
    fn gap_error_and_drift_of_a_replay() {
        // Original gaps 2, 2, 10 ms; replayed 3, 2, 9 ms.
        let pairs = [
            (100 * MS, 5_000 * MS),
            (102 * MS, 5_003 * MS),
            (104 * MS, 5_005 * MS),
            (114 * MS, 5_014 * MS),
        ];
        let p = analyse(&pairs);
        assert_eq!(p.messages, 4);
        assert_eq!(p.gap_error.count(), 3);
        assert_eq!(p.gap_error.min_ns(), -(MS as i64));
        assert_eq!(p.gap_error.max_ns(), MS as i64);
        // Drift: 1, 1, 0 ms.
        assert_eq!(p.drift.max_ns(), MS as i64);
        assert_eq!(p.drift.min_ns(), 0);
        assert_eq!(p.final_drift_ns, 0);
        assert_eq!(p.original_span_ns, 14 * MS);
        assert_eq!(p.replayed_span_ns, 14 * MS);
        assert_eq!(p.duration_ratio(), Some(1.0));
        // Two 2 ms gaps (class 1500us_2ms) and one 10 ms gap (5ms_10ms).
        let counts: Vec<u64> = p.by_gap.iter().map(Signed::count).collect();
        assert_eq!(counts, [0, 0, 2, 0, 0, 1, 0, 0]);
        assert_eq!(p.original_gaps.count(), 3);
    }

    #[test]
    fn a_replay_that_skips_small_gaps_runs_short() {
        // The server delivers gaps of 1 ms and less back to back.
        let original: Vec<u64> = (0..11).map(|i| i * MS / 2).collect();
        let pairs: Vec<(u64, u64)> = original.iter().map(|&o| (o, 7 * MS)).collect();
        let p = analyse(&pairs);
        assert_eq!(p.duration_ratio(), Some(0.0));
        assert_eq!(p.final_drift_ns, -5 * MS as i64);
        assert_eq!(p.by_gap[0].count(), 10);
        let median = p.gap_error.quantile_ns(0.5);
        assert!((median + 500_000).abs() < 500, "{median}");
        assert_eq!(p.drift.max_ns(), -(MS as i64 / 2));
    }

    #[test]
    fn classes_cover_every_gap_once() {
        assert_eq!(gap_class(-5), 0);
        assert_eq!(gap_class(0), 0);
        assert_eq!(gap_class(1_000_000), 0);
        assert_eq!(gap_class(1_000_001), 1);
        assert_eq!(gap_class(2_000_000), 2);
        assert_eq!(gap_class(100_000_001), 7);
        assert_eq!(gap_class(i64::MAX), 7);
        for w in GAP_CLASSES.windows(2) {
            assert_eq!(w[0].up_to_ns, w[1].above_ns, "contiguous");
        }
    }

    #[test]
    fn smallest_gap_within_stops_at_the_first_class_that_misses() {
        let mut p = Pacing {
            by_gap: vec![Signed::new(); GAP_CLASSES.len()],
            ..Default::default()
        };
        let fill = |s: &mut Signed, error: i64| (0..100).for_each(|_| s.record(error));
        fill(&mut p.by_gap[0], -400_000); // unpaced, but within 1 ms
        fill(&mut p.by_gap[1], 1_100_000); // 1-1.5 ms gaps: 1.1 ms late
        fill(&mut p.by_gap[2], 900_000);
        fill(&mut p.by_gap[3], 300_000);
        fill(&mut p.by_gap[5], 200_000);
        p.by_gap[7].record(5_000_000); // too few to count
        assert_eq!(p.smallest_gap_within(MS, 0.99, 20), Some(1_500_000));
        assert_eq!(p.smallest_gap_within(250_000, 0.99, 20), Some(5_000_000));
        assert_eq!(p.smallest_gap_within(100_000, 0.99, 20), None);
        // Unpaced gaps pass at the median too: the scan reaches zero.
        assert_eq!(p.smallest_gap_within(1_200_000, 0.5, 20), Some(0));
    }

    #[test]
    fn the_series_samples_evenly_in_original_time_and_ends_at_the_last_message() {
        let pairs: Vec<(u64, u64)> = (0..10_000u64).map(|i| (i * MS, i * MS + i)).collect();
        let p = analyse(&pairs);
        assert_eq!(p.series.len(), SERIES_POINTS);
        assert_eq!(p.series[0], (0, 0));
        assert_eq!(*p.series.last().unwrap(), (9_999 * MS, 9_999 * MS + 9_999));
        let [(o_name, o), (r_name, r)] = p.series_timelines(123);
        assert_eq!(
            (o_name.as_str(), r_name.as_str()),
            (SERIES_ORIGINAL, SERIES_REPLAYED)
        );
        assert_eq!(o.origin_ns, 123);
        let points = drift_points(&o, &r).unwrap();
        assert_eq!(points.len(), SERIES_POINTS);
        let (t, drift_us) = *points.last().unwrap();
        assert!((t - 9.999).abs() < 1e-9, "{t}");
        assert!((drift_us - 10.0).abs() < 1.0, "9999 ns late: {drift_us}");
        // Few messages: every one of them.
        let short = analyse(&pairs[..3]);
        assert_eq!(short.series.len(), 3);
        assert!(analyse(&[]).series.is_empty());
    }
}
