//! A series' change points with what a reader needs of each: the commits it
//! falls between, its size against the segment before, its significance,
//! whether it is a regression by the metric's direction; and the series'
//! own noise band, the latest value held against it, and the exit rule.

use super::changepoint::{self, Settings};
use super::load::Record;
use super::series::{Group, Series};
use crate::compare::Selection;
use crate::record::metrics::Direction;
use crate::record::spread::median;

/// How a history is judged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rule {
    pub settings: Settings,
    /// A regression fails the exit status only beyond this relative change
    /// (0.05 for 5%).
    pub threshold: f64,
    /// The newest runs each series is analysed over: older history is
    /// drawn, not tested, so a long history costs the same each time.
    pub window: usize,
}

/// One change point.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// Position (in the group's runs) of the first run after the change.
    pub position: usize,
    /// The last commit before and the first after: the range to bisect.
    pub before_commit: Option<String>,
    pub after_commit: Option<String>,
    /// Medians of the segments on either side.
    pub before: f64,
    pub after: f64,
    /// (after − before) / |before|.
    pub change: f64,
    pub p_value: f64,
    pub regression: bool,
}

/// A series with its findings.
#[derive(Debug, Clone)]
pub struct Analysed {
    pub series: Series,
    pub changes: Vec<Change>,
    /// Segments between change points: (first point, end point), indexes
    /// into `series.points`, with the segment's median.
    pub segments: Vec<(usize, usize, f64)>,
    /// The latest segment's median ± 2 robust standard deviations of the
    /// series' noise (its values around their segment medians).
    pub band: Option<(f64, f64)>,
    pub latest: Option<f64>,
    /// Figures of merit fail the exit status; context is drawn only.
    pub gating: bool,
    /// The newest change point is a regression beyond the threshold.
    pub failed: bool,
}

impl Analysed {
    pub fn latest_outside_band(&self) -> bool {
        match (self.latest, self.band) {
            (Some(v), Some((lo, hi))) => v < lo || v > hi,
            _ => false,
        }
    }
}

/// Every series of a group with a direction (figures of merit and the
/// metrics jsbench marks better one way); direction-less context is left
/// out. The seed of each series is its group and label.
pub fn analyse(group: &Group, records: &[Record], rule: &Rule) -> Vec<Analysed> {
    analysed_series(group)
        .map(|s| analyse_series(group, s, records, rule))
        .collect()
}

/// The series a group's analysis covers: those with a direction and points.
fn analysed_series(group: &Group) -> impl Iterator<Item = &Series> {
    group
        .series
        .iter()
        .filter(|s| s.direction != Direction::None && !s.points.is_empty())
}

/// Whether a series' regression fails the history.
fn gates(group: &Group, s: &Series, records: &[Record]) -> bool {
    selection(group, records).selects((&s.scenario, &s.variant, &s.metric), &s.unit, s.direction)
}

fn analyse_series(group: &Group, s: &Series, records: &[Record], rule: &Rule) -> Analysed {
    let values = s.values();
    let skip = values.len().saturating_sub(rule.window.max(1));
    let seed = changepoint::seed_of(&format!("{}\n{}\n{}", group.host, group.profile, s.label()));
    // A change in the code can only fall between two commits: runs of one
    // commit are replicates, and a split among them is the machine's.
    let commit_of = |point: usize| &records[group.runs[s.points[point].0]].commit;
    let median = |values: &[f64]| median(values).unwrap_or(f64::NAN);
    let boundaries: Vec<bool> = (skip..values.len())
        .map(|i| i == skip || commit_of(i) != commit_of(i - 1))
        .collect();
    let found = changepoint::detect(&values[skip..], &boundaries, &rule.settings, seed);
    let splits: Vec<usize> = found.iter().map(|sp| sp.index + skip).collect();
    let p_values: Vec<f64> = found.iter().map(|sp| sp.p_value).collect();
    let mut bounds = vec![0];
    bounds.extend(&splits);
    bounds.push(values.len());
    let segments: Vec<(usize, usize, f64)> = bounds
        .windows(2)
        .map(|w| (w[0], w[1], median(&values[w[0]..w[1]])))
        .collect();
    let changes: Vec<Change> = splits
        .iter()
        .zip(&p_values)
        .enumerate()
        .map(|(k, (&at, &p_value))| {
            let (before, after) = (segments[k].2, segments[k + 1].2);
            let change = relative(before, after);
            Change {
                position: s.points[at].0,
                before_commit: commit_of(at - 1).clone(),
                after_commit: commit_of(at).clone(),
                before,
                after,
                change,
                p_value,
                regression: worse(s.direction, change),
            }
        })
        .collect();
    let gating = gates(group, s, records);
    let failed = gating
        && changes
            .last()
            .is_some_and(|c| c.regression && c.change.abs() > rule.threshold);
    let sigma = noise(&values, &segments);
    let band = segments
        .last()
        .map(|&(_, _, m)| (m - 2.0 * sigma, m + 2.0 * sigma));
    Analysed {
        series: s.clone(),
        changes,
        segments,
        band,
        latest: values.last().copied(),
        gating,
        failed,
    }
}

/// How many of a group's series gate the exit.
pub fn gating_series(group: &Group, records: &[Record]) -> usize {
    analysed_series(group)
        .filter(|s| gates(group, s, records))
        .count()
}

/// Benjamini–Hochberg over every gating series at `alpha`: each series'
/// newest change point is one test (p = 1 without one), and a regression
/// fails the history only if its p-value survives the false-discovery
/// control. A history has about 157 gating series: at 1% each, one of
/// them would show a change in most histories of pure noise.
pub fn control_discoveries<'a>(
    analysed: impl Iterator<Item = &'a mut Analysed>,
    alpha: f64,
    notes: &mut Vec<String>,
) {
    let mut gating: Vec<&mut Analysed> = analysed.filter(|a| a.gating).collect();
    let p = |a: &Analysed| a.changes.last().map_or(1.0, |c| c.p_value);
    gating.sort_by(|a, b| p(a).total_cmp(&p(b)));
    let m = gating.len();
    let passed = (1..=m)
        .rev()
        .find(|&k| p(gating[k - 1]) <= k as f64 / m as f64 * alpha)
        .unwrap_or(0);
    for (k, a) in gating.into_iter().enumerate() {
        if a.failed && k >= passed {
            a.failed = false;
            notes.push(format!(
                "{}: its newest change point (p = {:.4}) is a regression, but not significant \
                 across the {m} series that gate the exit (Benjamini–Hochberg at {alpha})",
                a.series.label(),
                p(a)
            ));
        }
    }
}

/// The metrics whose regression fails the history: the newest run's
/// profile's `[ab] judge`, else the figures of merit (rates, CPU per
/// message, latency p50 to p99.9), the rule `compare` and `ab` judge by.
fn selection(group: &Group, records: &[Record]) -> Selection {
    let newest = group.runs.last().map(|&i| records[i].judged.clone());
    Selection::new(&[], newest.unwrap_or_default())
}

/// Whether a relative change is for the worse, by the metric's direction.
pub fn worse(direction: Direction, change: f64) -> bool {
    match direction {
        Direction::Higher => change < 0.0,
        Direction::Lower => change > 0.0,
        Direction::None => false,
    }
}

/// (after − before) / |before|; 0 when before is 0 and so is after.
pub fn relative(before: f64, after: f64) -> f64 {
    if before == 0.0 {
        if after == 0.0 {
            0.0
        } else {
            f64::INFINITY.copysign(after)
        }
    } else {
        (after - before) / before.abs()
    }
}

/// A robust standard deviation of the values around their segments'
/// medians: 1.4826 × the median absolute residual (the normal's σ for
/// normal noise, and unmoved by a few outliers).
fn noise(values: &[f64], segments: &[(usize, usize, f64)]) -> f64 {
    let residuals: Vec<f64> = segments
        .iter()
        .flat_map(|&(a, b, m)| values[a..b].iter().map(move |v| (v - m).abs()))
        .collect();
    1.4826 * median(&residuals).unwrap_or(f64::NAN)
}
