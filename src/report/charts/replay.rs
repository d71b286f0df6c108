//! Replay pacing: how a replay at the original pace tracked its recording.
//! Each chart keys on data only original-pace replays record (the series
//! timelines, the signed gap-error histograms, the per-class metrics), so
//! instant replays and other scenarios simply have none.

use crate::replay::pacing::{
    self, GAP_CLASSES, GAP_ERROR_BY_GAP, GAP_ERROR_EARLY, GAP_ERROR_LATE, Signed,
};
use crate::report::data::ScenarioData;

use super::{Axis, Chart, ONE, Scale, Series, Unit, per_variant, span};
use crate::record::histogram::Recorder;

/// Points on the signed distribution curve.
const CURVE_POINTS: usize = 201;

/// Replayed minus original elapsed time against the time into the
/// recording, one line per replay: the original and replayed timestamps of
/// the same messages, as their difference (at chart scale the two would
/// lie on top of each other).
pub fn drift(s: &ScenarioData) -> Option<Chart> {
    let series = per_variant(s, ONE, |v, ()| {
        let original = v.timelines.get(pacing::SERIES_ORIGINAL)?;
        pacing::drift_points(original, v.timelines.get(pacing::SERIES_REPLAYED)?)
    });
    let end = span(&series, |p| p.0).1;
    let chart = Chart::of(
        s,
        "replay_drift",
        "Replay pacing, drift against the recording",
        "For sampled messages of each replay at the original pace: when it was replayed minus \
         when it was originally stored, both counted from the replay's first message, against \
         the time into the recording. A line rising by 1 ms per second replays 0.1% slow; a \
         falling one runs ahead (the server delivers gaps of 1 ms and less back to back). \
         Dotted: perfect pacing.",
        (
            Axis::new(
                "original time since the first replayed message (s)",
                Scale::Linear,
                Unit::Number,
            ),
            Axis::new(
                "replayed minus original elapsed time",
                Scale::Linear,
                Unit::Micros,
            ),
        ),
        series,
    );
    chart.map(|c| c.with([zero_line(0.0, end)]))
}

/// The signed gap error by percentile, one line per replay, from its
/// early and late histograms.
pub fn gap_error(s: &ScenarioData) -> Option<Chart> {
    let series = per_variant(s, ONE, |v, ()| {
        let late = s.histogram(v, GAP_ERROR_LATE);
        let early = s.histogram(v, GAP_ERROR_EARLY);
        if late.is_none() && early.is_none() {
            return None;
        }
        let part = |r: Option<&Recorder>| r.cloned().unwrap_or_default();
        Some(signed_curve(&Signed::from_parts(part(late), part(early))))
    });
    let chart = Chart::of(
        s,
        "replay_gap_error",
        "Replay pacing, gap error by percentile",
        "Per replayed message at the original pace: the gap to the message before it as \
         replayed minus the same gap as recorded (negative: early, positive: late), all messages \
         of a replay sorted from most early to most late. Dotted: no error.",
        (
            Axis::new("percentile of messages", Scale::Linear, Unit::Quantile),
            Axis::new(
                "gap error (replayed minus original gap)",
                Scale::Linear,
                Unit::Micros,
            ),
        ),
        series,
    );
    chart.map(|c| c.with([zero_line(0.0, 1.0)]))
}

/// The gap error's magnitude (p99 solid, p50 dashed) per class of original
/// gap, one colour per replay, against a 1 ms line: from which gap on
/// pacing holds.
pub fn gap_error_by_gap(s: &ScenarioData) -> Option<Chart> {
    let families = [("abs_p99", "p99", false), ("abs_p50", "p50", true)];
    let series = per_variant(s, &families, |v, stat| {
        let points: Vec<(f64, f64)> = GAP_CLASSES
            .iter()
            .filter_map(|c| {
                let m = v.metric(&format!("{GAP_ERROR_BY_GAP}.{}.{stat}", c.name))?;
                Some((class_middle_us(c.above_ns, c.up_to_ns), m.value))
            })
            .collect();
        (points.len() >= 2).then_some(points)
    });
    let series: Vec<Series> = series.into_iter().map(Series::marked).collect();
    let (lo, hi) = span(&series, |p| p.0);
    let chart = Chart::of(
        s,
        "replay_gap_error_by_gap",
        "Replay pacing, error by gap size",
        "The gap error's magnitude for each class of original gap (plotted at the class's \
         middle), per replay at the original pace: 99th percentile solid, median dashed. Where a \
         line stays under the dotted 1 ms, gaps of that size are reproduced within 1 ms. Gaps of \
         1 ms and less are not paced by the server at all: their error is the gap itself.",
        (
            Axis::new("original gap (log scale)", Scale::Log, Unit::Micros),
            Axis::new("|gap error| (log scale)", Scale::Log, Unit::Micros),
        ),
        series,
    );
    chart.map(|c| {
        c.with([Series::reference(
            "1 ms",
            vec![(lo, 1_000.0), (hi, 1_000.0)],
        )])
    })
}

/// Where a class is drawn: the middle of its range on a log axis (the
/// first class, from zero, at half its upper edge; the last, open-ended
/// one at twice its lower edge).
fn class_middle_us(above_ns: u64, up_to_ns: u64) -> f64 {
    let (a, b) = (above_ns as f64 / 1e3, up_to_ns as f64 / 1e3);
    if above_ns == 0 {
        b / 2.0
    } else if up_to_ns == u64::MAX {
        a * 2.0
    } else {
        (a * b).sqrt()
    }
}

/// (quantile, signed µs) over the whole distribution.
fn signed_curve(s: &Signed) -> Vec<(f64, f64)> {
    (0..CURVE_POINTS)
        .map(|i| {
            let q = i as f64 / (CURVE_POINTS - 1) as f64;
            (q, s.quantile_ns(q) as f64 / 1e3)
        })
        .collect()
}

fn zero_line(from: f64, to: f64) -> Series {
    Series::reference("perfect pacing", vec![(from, 0.0), (to, 0.0)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_sit_in_their_middle() {
        assert_eq!(class_middle_us(0, 1_000_000), 500.0);
        assert!((class_middle_us(1_000_000, 4_000_000) - 2_000.0).abs() < 1e-9);
        assert_eq!(class_middle_us(100_000_000, u64::MAX), 200_000.0);
    }

    #[test]
    fn the_signed_curve_runs_from_most_early_to_most_late() {
        let mut s = Signed::new();
        for v in [-2_000_000i64, -1_000, 0, 500_000, 3_000_000] {
            s.record(v);
        }
        let curve = signed_curve(&s);
        assert_eq!(curve.len(), CURVE_POINTS);
        assert!(curve.windows(2).all(|w| w[0].1 <= w[1].1), "non-decreasing");
        assert!((curve[0].1 + 2_000.0).abs() < 5.0, "{}", curve[0].1);
        assert!((curve[CURVE_POINTS - 1].1 - 3_000.0).abs() < 5.0);
    }
}
