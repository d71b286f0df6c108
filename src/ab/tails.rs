//! Tail percentiles judged from histograms merged over the pairs.
//!
//! A slice's or a window's own p99 rests on the few samples beyond it
//! (75 of 7,500 at 5k msg/s for 1.5 s) and moves with whether a stall fell
//! into that window: the per-pair ratios of p99 scattered by 50–67% here.
//! Merging every pair's histogram per side first puts thousands of
//! samples behind each side's percentile, so the ratio of the two merged
//! percentiles is what is judged. Its uncertainty comes from resampling
//! the pairs (the bootstrap: pairs drawn with replacement, each side's
//! chosen windows merged again), which keeps whatever makes windows differ
//! (stalls, drift) in the spread, and keeps pairs paired.

use std::collections::BTreeMap;

use anyhow::Result;

use crate::record::histogram::Recorder;

/// Which histogram: profile, scenario, variant and its name.
pub type HistKey = (String, String, String, String);

/// One side's histograms of one pair, base64 as the sides send them.
pub type PairHistograms = BTreeMap<HistKey, String>;

/// Resamples: enough for a stable spread; the p-values come from the
/// normal form of the resampled log ratios, not from counting them.
const RESAMPLES: usize = 1_000;

/// A window's histogram as indices into the merged values, with counts:
/// a resample sums these, weighted by how often it drew the pair.
#[derive(Debug, Clone)]
struct Window {
    counts: Vec<(usize, u64)>,
    total: u64,
}

/// The merged-histogram view of one histogram across the pairs.
#[derive(Debug, Clone)]
pub struct Merged {
    /// Every distinct value any window recorded, ascending (ns).
    values: Vec<u64>,
    /// Per pair with both sides: BASE's and NEW's windows.
    pairs: Vec<(Window, Window)>,
}

/// What a merged percentile says, in logs of NEW/BASE.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TailEstimate {
    /// ln(NEW's merged percentile / BASE's).
    pub log_ratio: f64,
    /// The resampled log ratios' standard deviation.
    pub sd: f64,
    /// Samples merged on each side, and how many lie beyond the percentile.
    pub samples: (u64, u64),
    pub beyond: (u64, u64),
    /// The median window's sample count: a window with fewer than
    /// 10 / (1 - q) cannot resolve its own percentile.
    pub window_samples: u64,
    pub pairs: usize,
}

impl TailEstimate {
    /// The log ratio's standard error and its degrees of freedom: the
    /// resampled spread of a statistic over n pairs falls short of the
    /// usual standard error by sqrt((n − 1)/n), which is put back, and a
    /// spread from n pairs has n − 1 degrees of freedom.
    pub fn standard_error(&self) -> (f64, f64) {
        let n = self.pairs.max(2) as f64;
        let df = n - 1.0;
        ((self.sd * (n / df).sqrt()).max(1e-9), df)
    }
}

impl Merged {
    /// The pairs that hold `key` on both sides, decoded; `None` when no
    /// pair does. A histogram that does not decode is an error naming it.
    pub fn of(
        pairs: &[(&PairHistograms, &PairHistograms)],
        key: &HistKey,
    ) -> Result<Option<Merged>> {
        let mut decoded: Vec<(Recorder, Recorder)> = Vec::new();
        for (b, n) in pairs {
            if let (Some(b), Some(n)) = (b.get(key), n.get(key)) {
                let name = || format!("histogram {}/{}/{}/{}", key.0, key.1, key.2, key.3);
                let b = Recorder::from_base64(b).map_err(|e| e.context(name()))?;
                let n = Recorder::from_base64(n).map_err(|e| e.context(name()))?;
                decoded.push((b, n));
            }
        }
        if decoded.is_empty() {
            return Ok(None);
        }
        let mut values: Vec<u64> = decoded
            .iter()
            .flat_map(|(b, n)| [b, n])
            .flat_map(|r| r.histogram().iter_recorded().map(|v| v.value_iterated_to()))
            .collect();
        values.sort_unstable();
        values.dedup();
        let window = |r: &Recorder| {
            let counts: Vec<(usize, u64)> = r
                .histogram()
                .iter_recorded()
                .map(|v| {
                    let at = values
                        .binary_search(&v.value_iterated_to())
                        .expect("every recorded value was collected");
                    (at, v.count_at_value())
                })
                .collect();
            Window {
                total: counts.iter().map(|c| c.1).sum(),
                counts,
            }
        };
        let pairs = decoded
            .iter()
            .map(|(b, n)| (window(b), window(n)))
            .collect();
        Ok(Some(Merged { values, pairs }))
    }

    /// The merged percentile `q` of NEW against BASE's, with the spread
    /// of resampled pairs. `None` when a side recorded nothing.
    pub fn estimate(&self, q: f64) -> Option<TailEstimate> {
        let n = self.pairs.len();
        let all = vec![1u32; n];
        let (b, n_q) = self.quantiles(&all, q)?;
        let observed = (n_q as f64 / b as f64).ln();
        let mut resampled = Vec::with_capacity(RESAMPLES);
        for r in 0..RESAMPLES as u64 {
            let mut weights = vec![0u32; n];
            for i in 0..n as u64 {
                let u = crate::record::random::unit(0xB007, r, i);
                weights[((u * n as f64) as usize).min(n - 1)] += 1;
            }
            if let Some((b, n_q)) = self.quantiles(&weights, q) {
                resampled.push((n_q as f64 / b as f64).ln());
            }
        }
        let mean = resampled.iter().sum::<f64>() / resampled.len().max(1) as f64;
        let sd = (resampled.iter().map(|x| (x - mean).powi(2)).sum::<f64>()
            / resampled.len().saturating_sub(1).max(1) as f64)
            .sqrt();
        let total = |side: fn(&(Window, Window)) -> &Window| -> u64 {
            self.pairs.iter().map(|p| side(p).total).sum()
        };
        let (samples_b, samples_n) = (total(|p| &p.0), total(|p| &p.1));
        let mut sizes: Vec<u64> = self
            .pairs
            .iter()
            .flat_map(|(b, n)| [b.total, n.total])
            .collect();
        sizes.sort_unstable();
        let beyond = |s: u64| ((1.0 - q) * s as f64).round() as u64;
        Some(TailEstimate {
            log_ratio: observed,
            sd,
            samples: (samples_b, samples_n),
            beyond: (beyond(samples_b), beyond(samples_n)),
            window_samples: sizes[sizes.len() / 2],
            pairs: self.pairs.len(),
        })
    }

    /// Each side's percentile `q` of the windows merged with `weights`
    /// (how often a resample drew each pair).
    fn quantiles(&self, weights: &[u32], q: f64) -> Option<(u64, u64)> {
        let side = |pick: fn(&(Window, Window)) -> &Window| -> Option<u64> {
            let mut dense = vec![0u64; self.values.len()];
            let mut total = 0u64;
            for (pair, &w) in self.pairs.iter().zip(weights) {
                if w == 0 {
                    continue;
                }
                let window = pick(pair);
                for &(at, count) in &window.counts {
                    dense[at] += count * u64::from(w);
                }
                total += window.total * u64::from(w);
            }
            if total == 0 {
                return None;
            }
            // HdrHistogram's rule: the smallest value with at least
            // q of the samples at or below it.
            let wanted = ((q * total as f64).ceil() as u64).max(1);
            let mut seen = 0u64;
            for (at, &count) in dense.iter().enumerate() {
                seen += count;
                if seen >= wanted {
                    return Some(self.values[at].max(1));
                }
            }
            self.values.last().copied()
        };
        Some((side(|p| &p.0)?, side(|p| &p.1)?))
    }
}

/// The percentile a metric names, for the tails judged merged: p99 and
/// p99.9 of a latency histogram `<name>.p99`, `<name>.p99.9`.
pub fn tail_of(metric: &str) -> Option<(&str, f64)> {
    if let Some(name) = metric.strip_suffix(".p99.9") {
        return Some((name, 0.999));
    }
    metric.strip_suffix(".p99").map(|name| (name, 0.99))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram(values: impl Iterator<Item = u64>) -> String {
        let mut r = Recorder::new();
        for v in values {
            r.record(v);
        }
        r.to_base64()
    }

    fn key() -> HistKey {
        (
            "ci".into(),
            "latency".into(),
            "rate-5000".into(),
            "e2e_latency".into(),
        )
    }

    /// A window of 1,000 samples: 1 ms apart from a tail of `tail` ns in
    /// every fiftieth sample (so the p99 lies in it), the tail a factor
    /// `stall` larger in every fifth window (a stall that falls into some
    /// windows only).
    fn window(seed: u64, tail: u64, stall: u64) -> String {
        histogram((0..1_000u64).map(move |i| {
            let jitter = (crate::record::random::unit(seed, i, 1) * 100_000.0) as u64;
            if i.is_multiple_of(50) {
                tail * if seed.is_multiple_of(5) { stall } else { 1 } + jitter
            } else {
                1_000_000 + jitter
            }
        }))
    }

    fn pairs(n: u64, base_tail: u64, new_tail: u64) -> Vec<(PairHistograms, PairHistograms)> {
        (0..n)
            .map(|i| {
                let b = BTreeMap::from([(key(), window(2 * i, base_tail, 4))]);
                let n = BTreeMap::from([(key(), window(2 * i + 1, new_tail, 4))]);
                (b, n)
            })
            .collect()
    }

    fn estimate(p: &[(PairHistograms, PairHistograms)], q: f64) -> TailEstimate {
        let refs: Vec<(&PairHistograms, &PairHistograms)> = p.iter().map(|(b, n)| (b, n)).collect();
        Merged::of(&refs, &key())
            .unwrap()
            .unwrap()
            .estimate(q)
            .unwrap()
    }

    #[test]
    fn the_merged_percentile_finds_a_tail_that_doubled() {
        let same = estimate(&pairs(30, 5_000_000, 5_000_000), 0.99);
        assert!(same.log_ratio.abs() < 0.2, "{same:?}");
        let doubled = estimate(&pairs(30, 5_000_000, 10_000_000), 0.99);
        assert!((doubled.log_ratio - 2f64.ln()).abs() < 0.3, "{doubled:?}");
        assert!(doubled.log_ratio / doubled.sd > 2.5, "{doubled:?}");
        assert_eq!(doubled.samples, (30_000, 30_000));
        assert_eq!(doubled.beyond, (300, 300));
        assert!(
            doubled.sd > 0.0,
            "stalls in some windows spread the resamples"
        );
        assert_eq!(doubled.window_samples, 1_000);
    }

    #[test]
    fn pairs_without_both_sides_are_left_out_and_none_is_none() {
        let mut p = pairs(4, 5_000_000, 5_000_000);
        p[1].1.clear();
        let refs: Vec<(&PairHistograms, &PairHistograms)> = p.iter().map(|(b, n)| (b, n)).collect();
        let m = Merged::of(&refs, &key()).unwrap().unwrap();
        assert_eq!(m.pairs.len(), 3);
        let other = ("x".into(), "y".into(), "z".into(), "w".into());
        assert!(Merged::of(&refs, &other).unwrap().is_none());
    }

    /// A/A: both sides' windows drawn alike, 200 samples each, a stall
    /// (its tail 4x) in a window by chance one time in five. The share of
    /// runs whose one-sided p-value for "NEW's p99 is higher" falls at or
    /// below `level`, in the normal form and referred to t.
    fn false_alarms(runs: u64, pairs: u64, level: f64) -> (f64, f64) {
        let window = |seed: u64| {
            let stall = crate::record::random::unit(seed, 0, 7) < 0.2;
            histogram((0..200u64).map(move |i| {
                let u = crate::record::random::unit(seed, i, 1);
                let tail = if i.is_multiple_of(50) {
                    5_000_000
                } else {
                    1_000_000
                };
                (tail as f64 * if stall && tail > 1_000_000 { 4.0 } else { 1.0 } * (1.0 + u / 10.0))
                    as u64
            }))
        };
        let (mut normal, mut t) = (0u64, 0u64);
        for run in 0..runs {
            let p: Vec<(PairHistograms, PairHistograms)> = (0..pairs)
                .map(|i| {
                    let seed = 1_000_003 * run + 2 * i;
                    (
                        BTreeMap::from([(key(), window(seed))]),
                        BTreeMap::from([(key(), window(seed + 1))]),
                    )
                })
                .collect();
            let e = estimate(&p, 0.99);
            if 1.0 - crate::ab::stats::normal_cdf(e.log_ratio / e.sd.max(1e-9)) <= level {
                normal += 1;
            }
            let (se, df) = e.standard_error();
            if 1.0 - crate::ab::stats::t_cdf(e.log_ratio / se, df) <= level {
                t += 1;
            }
        }
        (normal as f64 / runs as f64, t as f64 / runs as f64)
    }

    #[test]
    fn tails_referred_to_t_keep_their_false_alarm_rate() {
        // 300 A/A runs of 4 pairs at a level of 5%: a rate that holds
        // stays under 8% (5% plus 2.5 binomial sds); the normal form
        // flagged about twice its level.
        let (normal, t) = false_alarms(300, 4, 0.05);
        eprintln!("A/A, 4 pairs, level 5%: normal form {normal:.3}, t {t:.3}");
        assert!(t <= 0.08, "t: {t}, normal form: {normal}");
        assert!(normal > t, "t: {t}, normal form: {normal}");
    }

    #[test]
    fn only_p99_and_p999_are_tails() {
        assert_eq!(tail_of("e2e_latency.p99"), Some(("e2e_latency", 0.99)));
        assert_eq!(tail_of("e2e_latency.p99.9"), Some(("e2e_latency", 0.999)));
        assert_eq!(tail_of("e2e_latency.p50"), None);
    }
}
