//! Which metrics and checks a paired comparison judges, and its verdict on
//! each, with the false alarms of the whole comparison bounded.
//!
//! Each pair gives, per metric, the ratio NEW/BASE, judged in logs (×0.5 is
//! as far from ×1 as ×2) by signed-rank tests on the pairs
//! ([`super::stats`]) against the metric's threshold τ:
//!
//! - **regressed**: NEW is worse than BASE by more than τ/2, beyond what
//!   the pairs' noise explains (a one-sided test, corrected across metrics);
//! - **improved**: the same on the better side;
//! - **unchanged**: NEW is not worse than BASE by τ or more (a one-sided
//!   test of "worse by τ", rejected);
//! - **undecided**: neither yet: more pairs would tell.
//!
//! Between τ/2 and τ lies the indifference zone: a change there may end as
//! regressed or unchanged, and both are true statements. A regression of τ
//! is what the comparison is built to catch; one of τ/2 or less is never
//! called a regression by noise alone more often than the budget allows.
//!
//! **Error control.** Everything that can fail a run (a regression, a
//! metric gone from NEW, a check NEW breaks) is a test in one of three
//! families, which share the false-alarm rate α = 1 − confidence: metrics
//! α/2 (Holm across them), absences α/4 and checks α/4 (Tarone's
//! correction, then Bonferroni: their tests are discrete, and one that
//! cannot reach significance does not dilute the others). Across looks the
//! rate is spent, not reused: interim looks at 8, 16, 32, ... judged pairs
//! spend 1/8, 1/16, 1/32, ... of it, and the final look the remaining 3/4
//! ([`spend`]). By the union bound the chance that a comparison of two
//! identical builds fails is at most α, however many metrics and looks.
//!
//! **Passing.** A comparison passes only when every judged metric is
//! unchanged (or improved): "not worse by τ" is tested per metric at the
//! miss rate β (default 10%), spent over the looks the same way. No
//! correction across metrics is needed: passing needs every metric's test
//! to reject its "worse by τ", so a NEW that is worse by τ in any one
//! metric passes only if that metric's own test errs, at most β
//! (Berger's intersection–union test, 1982). Holding the pass to the
//! false-alarm rate instead (α/2 shared by Holm) asks of an A/A run an
//! interval five times narrower than the threshold, which no 5-minute
//! comparison on a shared machine reaches: every run would end
//! inconclusive, and a verdict nobody can get is no verdict. β = 10% is
//! the power goal turned round: a regression of τ is let through at most
//! 1 time in 10.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::stats;
use super::tails::TailEstimate;
use crate::record::metrics::{Direction, Metric};
use crate::results::summary::Summary;

/// A metric across slices: which profile, scenario, variant and name.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
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
    /// CPU time per message: where a slower build shows first on a noisy
    /// machine, since it does not wait on the other side's scheduling.
    Cost,
}

/// The rule every metric is judged by.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Rule {
    /// The change a comparison is built to catch for a rate, as a fraction
    /// (0.05 for 5%); half of it is the smallest change it calls a regression.
    pub throughput: f64,
    /// The same for a latency percentile.
    pub latency: f64,
    /// The same for CPU per message.
    #[serde(default = "default_cost")]
    pub cost: f64,
    /// 1 − the family-wise false-alarm rate: 0.99 fails at most one
    /// comparison in a hundred of identical builds.
    pub confidence: f64,
    /// The chance that NEW worse by τ in a metric passes it as unchanged
    /// (the pass's error, per metric, over every look): 0.10.
    #[serde(default = "default_miss")]
    pub miss: f64,
    /// `--only` patterns; empty judges the default set.
    pub only: Vec<String>,
}

fn default_cost() -> f64 {
    0.05
}

/// Comparisons written before the pass had its own rate held it to the
/// metrics' false-alarm rate; read back, they are judged at today's.
pub fn default_miss() -> f64 {
    0.10
}

/// Latencies below this are at the resolution of the clocks that time
/// them: their ratios are noise, so they are shown, never judged.
pub const LATENCY_FLOOR_US: f64 = 10.0;

/// The param a rate search's probes carry: they are how the answer was
/// found, not figures to compare (the search's answer is).
pub use crate::scenario::search::PROBE_PARAM;

impl Rule {
    /// The class a metric is judged in, or `None` for a metric shown only:
    /// by default rates, latency percentiles p50 to p99.9 and CPU per
    /// message, each with a direction; with `--only`, any directional
    /// metric that matches.
    pub fn class(&self, key: &Key, metric: &Metric) -> Option<Class> {
        if metric.direction == Direction::None {
            return None;
        }
        let class = match metric.unit.as_str() {
            "msg/s" | "MB/s" => Class::Throughput,
            "us" | "ms" | "s" if key.metric.ends_with("cpu_per_msg") => Class::Cost,
            "us" | "ms" | "s" => Class::Latency,
            _ if !self.only.is_empty() => Class::Throughput,
            _ => return None,
        };
        if !self.only.is_empty() {
            return self.selects(key).then_some(class);
        }
        crate::record::metrics::judged_by_default(&key.metric, &metric.unit, metric.direction)
            .then_some(class)
    }

    /// Whether a pattern selects the metric: `*` a wildcard, with a `/`
    /// matching `scenario/variant/metric`, else the metric's name.
    pub fn pattern_selects(pattern: &str, key: &Key) -> bool {
        if pattern.contains('/') {
            crate::compare::glob(pattern, &key.label(false))
        } else {
            crate::compare::glob(pattern, &key.metric)
        }
    }

    fn selects(&self, key: &Key) -> bool {
        self.only.iter().any(|p| Self::pattern_selects(p, key))
    }

    pub fn threshold(&self, class: Class) -> f64 {
        match class {
            Class::Throughput => self.throughput,
            Class::Latency => self.latency,
            Class::Cost => self.cost,
        }
    }

    /// The family-wise false-alarm rate.
    pub fn alpha(&self) -> f64 {
        1.0 - self.confidence
    }
}

/// Which look at the pairs this is: interim looks come at 8, 16, 32, ...
/// judged pairs; the final one when the budget or `--pairs` ends the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Look {
    pub pairs: usize,
    /// The interim look's number (1 at 8 pairs, 2 at 16, ...); `None` for
    /// the final look.
    pub interim: Option<u32>,
    /// The false-alarm rate this look spends, of every family together.
    pub alpha: f64,
    /// The miss rate this look spends on "unchanged" verdicts.
    #[serde(default)]
    pub miss: f64,
}

/// The first interim look, in judged pairs.
pub const FIRST_LOOK: usize = 8;

impl Look {
    /// The interim look at `pairs`, if one falls there.
    pub fn interim(pairs: usize, rule: &Rule) -> Option<Look> {
        if pairs < FIRST_LOOK
            || !pairs.is_multiple_of(FIRST_LOOK)
            || !(pairs / FIRST_LOOK).is_power_of_two()
        {
            return None;
        }
        let number = (pairs / FIRST_LOOK).trailing_zeros() + 1;
        Some(Look {
            pairs,
            interim: Some(number),
            alpha: spend(rule.alpha(), Some(number)),
            miss: spend(rule.miss, Some(number)),
        })
    }

    pub fn last(pairs: usize, rule: &Rule) -> Look {
        Look {
            pairs,
            interim: None,
            alpha: spend(rule.alpha(), None),
            miss: spend(rule.miss, None),
        }
    }

    /// The metric family's share: Holm across the judged metrics at it.
    pub fn metrics_alpha(&self) -> f64 {
        self.alpha / 2.0
    }

    /// Absences' and checks' shares.
    pub fn missing_alpha(&self) -> f64 {
        self.alpha / 4.0
    }

    pub fn checks_alpha(&self) -> f64 {
        self.alpha / 4.0
    }
}

/// The false-alarm rate a look may spend out of `alpha`: interim look `j`
/// spends `alpha / 2^(j+2)` (1/8, 1/16, ...: together less than a quarter),
/// the final look three quarters. The early looks can stop a comparison
/// whose answer is already plain; most of the rate is kept for the last,
/// where the pairs are most.
pub fn spend(alpha: f64, interim: Option<u32>) -> f64 {
    match interim {
        Some(j) => alpha / 2f64.powi(j as i32 + 2),
        None => alpha * 0.75,
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PairedVerdict {
    Regressed,
    Improved,
    Unchanged,
    /// Neither regressed nor within the threshold yet: more pairs would tell.
    Undecided,
    /// Fewer pairs than any decision at this look's rate needs.
    TooFewPairs,
    /// Shown for reading: no direction, not selected, a probe, below the
    /// latency floor, or a unit that differs between the sides.
    #[default]
    NotJudged,
    /// Present in BASE's slices and absent from NEW's more often than
    /// chance allows.
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

    pub fn decided(self) -> bool {
        !matches!(self, PairedVerdict::Undecided | PairedVerdict::TooFewPairs)
    }

    pub fn fails(self) -> bool {
        matches!(self, PairedVerdict::Regressed | PairedVerdict::MissingInNew)
    }
}

/// One metric's values across the pairs.
#[derive(Debug, Clone)]
pub struct Track {
    pub key: Key,
    pub unit: String,
    pub direction: Direction,
    pub class: Option<Class>,
    /// BASE's and NEW's value in each pair, where measured.
    pub pairs: Vec<(Option<f64>, Option<f64>)>,
    /// Why it is not judged, when its class alone does not say.
    pub why_not: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Judgement {
    pub key: Key,
    pub unit: String,
    pub direction: Direction,
    pub class: Option<Class>,
    pub threshold: Option<f64>,
    /// NEW/BASE of each pair with both.
    pub ratios: Vec<f64>,
    pub base_median: Option<f64>,
    pub new_median: Option<f64>,
    /// The Hodges–Lehmann estimate of NEW/BASE and its interval at this
    /// look's miss rate per side (`coverage`): unchanged when its worse end
    /// lies within the threshold.
    pub ratio: Option<f64>,
    pub low: Option<f64>,
    pub high: Option<f64>,
    pub coverage: Option<f64>,
    /// The interval the verdict was decided on, at `decided_coverage`:
    /// for a regression or improvement (or neither), the level the metric
    /// was tested at after Holm and the looks, far stricter than the
    /// pass's, so an interval wholly beyond τ/2 at the pass's coverage can
    /// still be undecided; for "unchanged", the pass's own interval.
    pub decided_low: Option<f64>,
    pub decided_high: Option<f64>,
    pub decided_coverage: Option<f64>,
    /// One-sided p-values: worse by more than τ/2; better by more than
    /// τ/2; worse by τ or more (rejected: unchanged).
    pub p_worse: Option<f64>,
    pub p_better: Option<f64>,
    pub p_within: Option<f64>,
    /// The pairs' log ratios' spread (interquartile range / 1.349).
    pub spread: Option<f64>,
    /// The smallest regression this many pairs would flag in 9 runs of 10,
    /// at the final look's rate, as a fraction (0.07 for 7%).
    pub detectable: Option<f64>,
    /// About how many pairs would decide it, when it is undecided.
    pub pairs_to_decide: Option<usize>,
    /// Pairs in which each side measured it.
    #[serde(default)]
    pub present: (usize, usize),
    /// Why it is not judged, where its class does not say.
    pub why_not: Option<String>,
    /// For a tail judged from merged histograms: the samples behind it.
    pub tail: Option<TailReport>,
    pub verdict: PairedVerdict,
}

/// A tail percentile judged from the pairs' histograms merged per side:
/// how many samples each side's percentile rests on, and whether a single
/// window could have resolved it at all.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TailReport {
    pub pairs: usize,
    pub samples: (u64, u64),
    pub beyond: (u64, u64),
    pub window_samples: u64,
    /// A window holds fewer than 10 / (1 - q) samples: its own percentile
    /// rests on under ten, which is why the windows are merged first.
    pub windows_too_short: bool,
}

/// Tail percentiles estimated from merged histograms, by metric.
pub type Tails = BTreeMap<Key, (f64, TailEstimate)>;

/// Every metric of the pairs, in the order first seen. A count missing
/// from a variant a side ran is zero; probes of a rate search are shown,
/// not judged; a unit that differs between the sides is not judged.
pub fn tracks(pairs: &[(&[Summary], &[Summary])], rule: &Rule) -> Vec<Track> {
    #[derive(Default)]
    struct Side {
        metrics: BTreeMap<Key, Metric>,
        /// (profile, scenario, variant) that ran.
        variants: BTreeSet<(String, String, String)>,
        probes: BTreeSet<(String, String, String)>,
    }
    let index = |summaries: &[Summary]| -> Side {
        let mut side = Side::default();
        for s in summaries {
            for (sc, v) in s.variants() {
                let id = (s.run.profile.name.clone(), sc.name.clone(), v.name.clone());
                if v.params.contains_key(PROBE_PARAM) {
                    side.probes.insert(id.clone());
                }
                side.variants.insert(id);
                for m in &v.metrics {
                    let key = Key {
                        profile: s.run.profile.name.clone(),
                        scenario: sc.name.clone(),
                        variant: v.name.clone(),
                        metric: m.name.clone(),
                    };
                    side.metrics.insert(key, m.clone());
                }
            }
        }
        side
    };
    let indexed: Vec<(Side, Side)> = pairs.iter().map(|(b, n)| (index(b), index(n))).collect();
    let mut order: Vec<Key> = Vec::new();
    let mut tracks: BTreeMap<Key, Track> = BTreeMap::new();
    let mut units: BTreeMap<Key, (BTreeSet<String>, BTreeSet<String>)> = BTreeMap::new();
    for (i, (base, new)) in indexed.iter().enumerate() {
        for (key, m) in base.metrics.iter().chain(new.metrics.iter()) {
            let id = (
                key.profile.clone(),
                key.scenario.clone(),
                key.variant.clone(),
            );
            let track = tracks.entry(key.clone()).or_insert_with(|| {
                order.push(key.clone());
                let probe = base.probes.contains(&id) || new.probes.contains(&id);
                Track {
                    key: key.clone(),
                    unit: m.unit.clone(),
                    direction: m.direction,
                    class: if probe { None } else { rule.class(key, m) },
                    pairs: vec![(None, None); pairs.len()],
                    why_not: probe.then(|| "a rate search's probe".to_string()),
                }
            });
            let value = |side: &Side| match side.metrics.get(key) {
                Some(m) => Some(m.value),
                // A count a variant did not report is a count of none.
                None if m.unit == "count" && side.variants.contains(&id) => Some(0.0),
                None => None,
            };
            track.pairs[i] = (value(base), value(new));
            let u = units.entry(key.clone()).or_default();
            u.0.extend(base.metrics.get(key).map(|m| m.unit.clone()));
            u.1.extend(new.metrics.get(key).map(|m| m.unit.clone()));
        }
    }
    for (key, (b, n)) in units {
        if !b.is_empty() && !n.is_empty() && b != n {
            let t = tracks.get_mut(&key).expect("every unit seen has a track");
            t.class = None;
            t.why_not = Some(format!(
                "its unit differs: BASE {}, NEW {}",
                b.into_iter().collect::<Vec<_>>().join("/"),
                n.into_iter().collect::<Vec<_>>().join("/")
            ));
        }
    }
    order
        .into_iter()
        .filter_map(|k| tracks.remove(&k))
        .collect()
}

/// A log ratio NEW/BASE; a side at zero is far off rather than infinite,
/// so a rate that fell to nothing still reads as a regression.
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

fn to_us(value: f64, unit: &str) -> f64 {
    match unit {
        "ms" => value * 1e3,
        "s" => value * 1e6,
        _ => value,
    }
}

/// The log ratios in the worse direction: a rise for a latency or a cost,
/// a fall for a rate.
fn worse_logs(direction: Direction, logs: &[f64]) -> Vec<f64> {
    match direction {
        Direction::Higher => logs.iter().map(|d| -d).collect(),
        _ => logs.to_vec(),
    }
}

/// The interquartile range over 1.349: the spread of normal noise, which
/// one wild pair does not move.
pub fn spread(values: &[f64]) -> Option<f64> {
    if values.len() < 4 {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let q = |f: f64| {
        let x = f * (v.len() - 1) as f64;
        let (i, frac) = (x.floor() as usize, x.fract());
        v[i] + (v[(i + 1).min(v.len() - 1)] - v[i]) * frac
    };
    Some((q(0.75) - q(0.25)) / 1.349)
}

/// Hodges–Lehmann's efficiency against the mean under normal noise: its
/// standard error is that of a mean of 0.955 n pairs.
const HL_EFFICIENCY: f64 = 0.955;

/// The whole comparison's metric verdicts at `look`: each judged metric's
/// tests, Holm across them for regressions and improvements, and the
/// absences tested on their own.
/// `tails` holds the tail percentiles (p99, p99.9) whose histograms the
/// pairs carry, with their quantile: those are judged merged.
pub fn judge_metrics(tracks: &[Track], rule: &Rule, look: &Look, tails: &Tails) -> Vec<Judgement> {
    let mut out: Vec<Judgement> = tracks.iter().map(|t| describe(t, rule)).collect();
    let judged: Vec<usize> = (0..out.len()).filter(|&i| out[i].class.is_some()).collect();
    let m = judged.len().max(1);
    let alpha = look.metrics_alpha();
    // Each metric's tests and interval at the family's Bonferroni level.
    for &i in &judged {
        let level = alpha / m as f64;
        match tails.get(&out[i].key) {
            Some((q, tail)) => test_tail(&mut out[i], *q, tail, rule, level, look.miss),
            None => test(&mut out[i], tracks[i].direction, rule, level, look.miss),
        }
    }
    let tested: Vec<usize> = judged
        .iter()
        .copied()
        .filter(|&i| out[i].p_worse.is_some())
        .collect();
    let p = |f: fn(&Judgement) -> Option<f64>| -> Vec<f64> {
        tested.iter().map(|&i| f(&out[i]).unwrap_or(1.0)).collect()
    };
    let worse_levels = stats::holm_levels(&p(|j| j.p_worse), alpha);
    let better_levels = stats::holm_levels(&p(|j| j.p_better), alpha);
    let regressed = stats::holm(&p(|j| j.p_worse), alpha);
    let improved = stats::holm(&p(|j| j.p_better), alpha);
    for (k, &i) in tested.iter().enumerate() {
        let j = &mut out[i];
        // Not even the most lenient test at this look can reject: the
        // per-pair test's floor, held against tails too, whose spread from
        // so few pairs is itself too uncertain to flag a change.
        let pairs = j.tail.as_ref().map_or(j.ratios.len(), |t| t.pairs);
        let hopeless = stats::smallest_p(pairs) > alpha;
        let may_reject = j.tail.is_none() || !hopeless;
        j.verdict = if regressed[k] && may_reject {
            PairedVerdict::Regressed
        } else if improved[k] && may_reject {
            PairedVerdict::Improved
        } else if j.p_within.is_some_and(|p| p <= look.miss) {
            // Intersection–union: each metric at β, no correction.
            PairedVerdict::Unchanged
        } else if hopeless {
            PairedVerdict::TooFewPairs
        } else {
            PairedVerdict::Undecided
        };
        let leans_better = j.p_better.unwrap_or(1.0) < j.p_worse.unwrap_or(1.0);
        let level = match j.verdict {
            PairedVerdict::Regressed => worse_levels[k],
            PairedVerdict::Improved => better_levels[k],
            _ if leans_better => better_levels[k],
            _ => worse_levels[k],
        };
        decided_interval(j, &tracks[i], tails, level);
    }
    // Judged, but no pair measured it on both sides.
    for &i in &judged {
        if out[i].p_worse.is_none() {
            out[i].verdict = PairedVerdict::TooFewPairs;
        }
    }
    missing(tracks, &mut out, look.missing_alpha());
    out
}

/// Where the verdict was decided: the pass's interval for "unchanged",
/// else the interval at the level the regression and improvement tests
/// were held to (`level` per side), from the same method as the pass's
/// (the signed-rank interval, or t for merged tails). None where these
/// pairs cannot reach that coverage, which is itself why it is undecided.
fn decided_interval(j: &mut Judgement, track: &Track, tails: &Tails, level: f64) {
    if j.verdict == PairedVerdict::Unchanged {
        (j.decided_low, j.decided_high) = (j.low, j.high);
        j.decided_coverage = j.coverage;
        return;
    }
    let wanted = 1.0 - 2.0 * level;
    let (low, high, coverage) = match tails.get(&track.key) {
        Some((_, tail)) => {
            let (sd, df) = tail.standard_error();
            let z = stats::t_quantile(1.0 - level, df);
            let (low, high) = (tail.log_ratio - z * sd, tail.log_ratio + z * sd);
            (Some(low.exp()), Some(high.exp()), wanted)
        }
        None => {
            let logs: Option<Vec<f64>> = j.ratios.iter().map(|&r| log_ratio(1.0, r)).collect();
            // The signed-rank interval's coverage is discrete: the one it
            // reached, at least the one wanted.
            match logs.and_then(|l| stats::hodges_lehmann(&l, wanted)) {
                Some(i) => (Some(i.low.exp()), Some(i.high.exp()), i.coverage),
                None => (None, None, wanted),
            }
        }
    };
    (j.decided_low, j.decided_high) = (low, high);
    j.decided_coverage = Some(coverage);
}

/// A metric as the pairs show it, before any test: its medians, ratios,
/// class and threshold (none below the latency floor).
fn describe(track: &Track, rule: &Rule) -> Judgement {
    let both: Vec<(f64, f64)> = track
        .pairs
        .iter()
        .filter_map(|&(b, n)| Some((b?, n?)))
        .collect();
    let bases: Vec<f64> = track.pairs.iter().filter_map(|p| p.0).collect();
    let news: Vec<f64> = track.pairs.iter().filter_map(|p| p.1).collect();
    let base_median = crate::record::spread::median(&bases);
    let new_median = crate::record::spread::median(&news);
    let mut j = Judgement {
        key: track.key.clone(),
        unit: track.unit.clone(),
        direction: track.direction,
        class: track.class,
        threshold: track.class.map(|c| rule.threshold(c)),
        // A side at zero is far off, not a pair to drop: dropped, a
        // metric that rose from nothing lost its strongest pairs.
        ratios: both
            .iter()
            .filter_map(|&(b, n)| log_ratio(b, n))
            .map(f64::exp)
            .collect(),
        base_median,
        new_median,
        present: (bases.len(), news.len()),
        why_not: track.why_not.clone(),
        ..Judgement::default()
    };
    // Under the clocks' resolution on both sides: ratios of noise.
    let floor = |m: Option<f64>| m.is_none_or(|m| to_us(m, &track.unit) < LATENCY_FLOOR_US);
    if track.class == Some(Class::Latency) && floor(base_median) && floor(new_median) {
        j.class = None;
        j.threshold = None;
        j.why_not = Some(format!(
            "below {LATENCY_FLOOR_US} µs on both sides, the clocks' resolution"
        ));
    }
    j
}

/// A judged metric's one-sided tests at the regression's `level` and the
/// pass's `pass` rate, its interval (whose worse end is the pass's bound:
/// unchanged when it lies below τ), its spread and what more pairs would buy.
fn test(j: &mut Judgement, direction: Direction, rule: &Rule, level: f64, pass: f64) {
    let Some(class) = j.class else { return };
    let tau = rule.threshold(class);
    let logs: Option<Vec<f64>> = j.ratios.iter().map(|&r| log_ratio(1.0, r)).collect();
    let Some(logs) = logs.filter(|l| !l.is_empty()) else {
        return;
    };
    let worse = worse_logs(direction, &logs);
    let half = (1.0 + tau / 2.0).ln();
    let full = (1.0 + tau).ln();
    j.p_worse = stats::p_above(&worse, half);
    j.p_better = stats::p_below(&worse, -half);
    j.p_within = stats::p_below(&worse, full);
    if let Some(i) = stats::hodges_lehmann(&logs, 1.0 - 2.0 * pass) {
        j.ratio = Some(i.estimate.exp());
        j.low = Some(i.low.exp());
        j.high = Some(i.high.exp());
        j.coverage = Some(i.coverage);
    } else if let Some(i) = stats::hodges_lehmann(&logs, 0.0) {
        j.ratio = Some(i.estimate.exp());
    }
    j.spread = spread(&logs);
    if let (Some(sigma), Some(ratio)) = (j.spread, j.ratio) {
        let n = logs.len() as f64;
        let est = match direction {
            Direction::Higher => -ratio.ln(),
            _ => ratio.ln(),
        };
        let se = sigma / (HL_EFFICIENCY * n).sqrt();
        decide_with(j, est, se, n, (half, full), (level, pass));
    }
}

/// What more pairs would buy, from an estimate `est` (in logs, worse
/// positive) with standard error `se` over `n` pairs: the regression these
/// pairs flag in 9 runs of 10, and the pairs until the decision nearer the
/// estimate (unchanged below τ/2, else regressed) would clear on average.
fn decide_with(
    j: &mut Judgement,
    est: f64,
    se: f64,
    n: f64,
    (half, full): (f64, f64),
    (level, pass): (f64, f64),
) {
    let z_fail = stats::normal_quantile(1.0 - level);
    let z_pass = stats::normal_quantile(1.0 - pass);
    j.detectable = Some((half + (z_fail + stats::normal_quantile(0.9)) * se).exp() - 1.0);
    let (gap, z) = if est < half {
        (full - est, z_pass)
    } else {
        (est - half, z_fail)
    };
    if gap > 0.0 && se > 0.0 {
        let needed = n * (z * se / gap).powi(2);
        j.pairs_to_decide = Some(needed.ceil().max(n) as usize);
    }
}

/// A tail percentile judged from merged histograms: the ratio of NEW's
/// merged percentile to BASE's, its spread from resampled pairs, and
/// one-sided t tests with pairs − 1 degrees of freedom. The spread comes
/// from as few as 4 pairs, so it is itself uncertain: in the normal form
/// A/A runs flagged 3.5% at a level of 0.375% (4 pairs); referred to t,
/// with the bootstrap's shortfall of sqrt((n − 1)/n) put back, the rate
/// holds (the simulation in tails.rs's tests).
fn test_tail(j: &mut Judgement, q: f64, tail: &TailEstimate, rule: &Rule, level: f64, pass: f64) {
    let Some(class) = j.class else { return };
    let tau = rule.threshold(class);
    let half = (1.0 + tau / 2.0).ln();
    let full = (1.0 + tau).ln();
    // Latencies: worse is up.
    let worse = tail.log_ratio;
    let (sd, df) = tail.standard_error();
    let above = |shift: f64| 1.0 - stats::t_cdf((worse - shift) / sd, df);
    j.p_worse = Some(above(half));
    j.p_better = Some(stats::t_cdf((worse + half) / sd, df));
    j.p_within = Some(stats::t_cdf((worse - full) / sd, df));
    let z = stats::t_quantile(1.0 - pass, df);
    j.ratio = Some(worse.exp());
    j.low = Some((worse - z * sd).exp());
    j.high = Some((worse + z * sd).exp());
    j.coverage = Some(1.0 - 2.0 * pass);
    j.spread = Some(sd * (tail.pairs as f64).sqrt());
    decide_with(j, worse, sd, tail.pairs as f64, (half, full), (level, pass));
    j.tail = Some(TailReport {
        pairs: tail.pairs,
        samples: tail.samples,
        beyond: tail.beyond,
        window_samples: tail.window_samples,
        windows_too_short: (tail.window_samples as f64) < 10.0 / (1.0 - q),
    });
}

/// Metrics present in BASE's slices and absent from NEW's: a sign test on
/// the pairs where only one side measured it, Tarone-corrected across the
/// judged metrics. A metric that appears only when something happens (a
/// redelivery, a reconnect) is absent from one side now and then by chance;
/// only a systematic absence fails.
fn missing(tracks: &[Track], out: &mut [Judgement], alpha: f64) {
    let judged: Vec<usize> = (0..out.len()).filter(|&i| out[i].class.is_some()).collect();
    let tests: Vec<(usize, f64, f64)> = judged
        .iter()
        .map(|&i| {
            // Pairs where only BASE measured it (`true`), or only NEW.
            let only = |base: bool| {
                let pairs = tracks[i].pairs.iter();
                pairs
                    .filter(|(b, n)| b.is_some() == base && n.is_some() != base)
                    .count()
            };
            let (only_base, only_new) = (only(true), only(false));
            let n = only_base + only_new;
            (i, stats::sign_test(only_base, n), 0.5f64.powi(n as i32))
        })
        .collect();
    let p: Vec<f64> = tests.iter().map(|t| t.1).collect();
    let smallest: Vec<f64> = tests.iter().map(|t| t.2).collect();
    for (k, rejected) in stats::tarone(&p, &smallest, alpha).into_iter().enumerate() {
        if rejected {
            out[tests[k].0].verdict = PairedVerdict::MissingInNew;
        }
    }
}

/// A check (an invariant, or a variant's error) across the pairs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckJudgement {
    pub profile: String,
    pub scenario: String,
    pub variant: String,
    pub check: String,
    /// Pairs in which only NEW broke it, only BASE, and both.
    pub new_only: usize,
    pub base_only: usize,
    pub both: usize,
    /// One-sided sign test on the pairs where only one side broke it.
    pub p: f64,
    pub verdict: CheckVerdict,
    /// What NEW (or else BASE) said when it broke it, the first time.
    pub detail: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckVerdict {
    /// NEW breaks it where BASE does not, more often than chance allows.
    FailsInNew,
    /// Broken on both sides: the environment's, not a build's.
    Environment,
    /// Broken by BASE only.
    BaseOnly,
    /// Broken by NEW in more pairs than by BASE, not yet more often than
    /// chance allows: the comparison stays open (never passes) until
    /// enough pairs decide it.
    Suspect,
}

impl CheckVerdict {
    pub fn label(self) -> &'static str {
        match self {
            CheckVerdict::FailsInNew => "fails in NEW",
            CheckVerdict::Environment => "broken on both sides",
            CheckVerdict::BaseOnly => "broken in BASE only",
            CheckVerdict::Suspect => "broken in NEW more often than in BASE, not yet decided",
        }
    }

    /// A check that keeps the comparison from passing or stopping early.
    pub fn open(self) -> bool {
        self == CheckVerdict::Suspect
    }
}

/// How many more pairs in which NEW alone breaks a check (and BASE keeps
/// it) its sign test needs to reach `level`: what an open check waits for.
pub fn pairs_to_fail(new_only: usize, base_only: usize, level: f64) -> usize {
    (0..=1000)
        .find(|x| stats::sign_test(new_only + x, new_only + base_only + x) <= level)
        .unwrap_or(1000)
}

/// Every check either side broke in any pair, judged in pairs: NEW fails a
/// check when it breaks it where BASE does not more often than chance
/// allows (a sign test on those pairs, Tarone-corrected across checks).
pub fn judge_checks(pairs: &[(&[Summary], &[Summary])], look: &Look) -> Vec<CheckJudgement> {
    type CheckKey = (String, String, String, String);
    let broken = |summaries: &[Summary]| -> BTreeMap<CheckKey, String> {
        let mut out = BTreeMap::new();
        for s in summaries {
            for f in crate::compare::failures_of(s) {
                out.entry((s.run.profile.name.clone(), f.scenario, f.variant, f.check))
                    .or_insert(f.detail);
            }
        }
        out
    };
    // Per check: pairs broken by NEW only, BASE only, both; what each said.
    type Tally = (usize, usize, usize, Option<String>, Option<String>);
    let mut seen: BTreeMap<CheckKey, Tally> = BTreeMap::new();
    for (b, n) in pairs {
        let (b, n) = (broken(b), broken(n));
        let keys: BTreeSet<&CheckKey> = b.keys().chain(n.keys()).collect();
        for key in keys {
            let e = seen.entry(key.clone()).or_default();
            match (b.get(key), n.get(key)) {
                (Some(_), Some(_)) => e.2 += 1,
                (None, Some(_)) => e.0 += 1,
                (Some(_), None) => e.1 += 1,
                (None, None) => {}
            }
            e.3 = e.3.take().or_else(|| n.get(key).cloned());
            e.4 = e.4.take().or_else(|| b.get(key).cloned());
        }
    }
    let mut out: Vec<CheckJudgement> = seen
        .into_iter()
        .map(
            |((profile, scenario, variant, check), (new_only, base_only, both, nd, bd))| {
                CheckJudgement {
                    profile,
                    scenario,
                    variant,
                    check,
                    new_only,
                    base_only,
                    both,
                    p: stats::sign_test(new_only, new_only + base_only),
                    verdict: CheckVerdict::Suspect,
                    detail: nd.or(bd).unwrap_or_default(),
                }
            },
        )
        .collect();
    let p: Vec<f64> = out.iter().map(|c| c.p).collect();
    let smallest: Vec<f64> = out
        .iter()
        .map(|c| 0.5f64.powi((c.new_only + c.base_only) as i32))
        .collect();
    let rejected = stats::tarone(&p, &smallest, look.checks_alpha());
    for (c, rejected) in out.iter_mut().zip(rejected) {
        // NEW ahead of BASE is open whatever BASE also broke: 9 pairs
        // broken by NEW alone against 1 by BASE is not the environment's.
        c.verdict = if rejected {
            CheckVerdict::FailsInNew
        } else if c.new_only > c.base_only {
            CheckVerdict::Suspect
        } else if c.new_only == 0 && c.both == 0 {
            CheckVerdict::BaseOnly
        } else {
            CheckVerdict::Environment
        };
    }
    out
}

#[cfg(test)]
pub(crate) mod tests;
