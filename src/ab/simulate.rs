//! What `jsbench ab` can detect, simulated from measured noise with the
//! very judge that runs it.
//!
//! Planted regressions measure power one effect at a time, five minutes a
//! try. The A/A comparisons already made hold this machine's noise: every
//! pair's NEW/BASE ratio per metric. A simulated comparison draws, for each
//! judged metric, as many pairs as a real one got (with replacement, from
//! every A/A comparison pooled), moves one metric's NEW side by a planted
//! factor in its worse direction, and judges the pairs with
//! [`super::judge::judge_metrics`] at every look a real comparison takes
//! (interim looks at 8, 16, ... pairs, then the final one). Power is the
//! share of simulated comparisons that call the planted metric regressed;
//! a false alarm, a regression called with nothing planted. The ratios are
//! drawn as recorded, never centred: an A/A comparison's own offset (an
//! order effect, a drifting host) is what a real comparison meets too, and
//! a pool centred on its median could not show a false alarm it causes.
//! A draw picks one recorded comparison, then resamples that comparison's
//! pairs, so the offsets between comparisons stay in the simulated ones.
//!
//! What it cannot know: tails a real comparison judges from merged
//! histograms are judged here from their per-pair ratios (more noise, so
//! less power than a real run has); an effect that changes the noise as
//! well as the centre; and the correlation between metrics of one pair.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};

use super::AbReport;
use super::judge::{self, Judgement, Look, PairedVerdict, Rule, Tails, Track};
use crate::record::metrics::Direction;
use crate::system::error::UsageError;

/// A judged metric's A/A ratios, per recorded comparison and uncentred,
/// and how many pairs a comparison gave it.
struct Pool {
    template: Judgement,
    runs: Vec<Vec<f64>>,
    pairs: usize,
}

impl Pool {
    fn ratios(&self) -> Vec<f64> {
        self.runs.concat()
    }

    /// Pair `i` of simulated comparison `seed`: from the one recorded
    /// comparison that comparison drew.
    fn draw(&self, seed: u64, metric: u64, i: u64) -> f64 {
        let pick = |u: f64, n: usize| ((u * n as f64) as usize).min(n - 1);
        let run = &self.runs[pick(
            crate::record::random::unit(seed, metric, u64::MAX),
            self.runs.len(),
        )];
        run[pick(crate::record::random::unit(seed, metric, i), run.len())]
    }
}

/// What to simulate.
pub struct Options<'a> {
    /// A/A comparisons' folders.
    pub folders: &'a [PathBuf],
    pub runs: usize,
    pub effects: &'a [f64],
    /// Patterns (scenario/variant/metric) that keep a judged metric; empty
    /// keeps every one.
    pub only: &'a [String],
    /// Pairs per metric instead of what the comparisons gave.
    pub pairs: Option<usize>,
}

/// Reads every A/A comparison, pools each judged metric's ratios and prints
/// the table: what share of simulated A/A comparisons fail and pass; per
/// metric, how often a change of its threshold still passes, its power
/// against each planted effect, and the smallest effect flagged in 9 runs
/// of 10.
pub fn command(options: &Options) -> Result<String> {
    let (runs, effects) = (options.runs, options.effects);
    let reports: Vec<AbReport> = options
        .folders
        .iter()
        .map(|f| {
            let path = f.join("ab.json");
            let text = crate::results::read_capped(&path, crate::results::MAX_JSON_BYTES)?;
            serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))
        })
        .collect::<Result<_>>()?;
    let Some(first) = reports.first() else {
        return Err(UsageError("ab-simulate needs at least one ab folder".into()).into());
    };
    let rule = first.rule.clone();
    let mut pools = pool(&reports);
    if !options.only.is_empty() {
        pools.retain(|k, _| options.only.iter().any(|p| crate::compare::glob(p, k)));
    }
    if let Some(n) = options.pairs {
        pools.values_mut().for_each(|p| p.pairs = n);
    }
    if pools.is_empty() {
        return Err(
            UsageError("the ab folders judged no metric: nothing to simulate".into()).into(),
        );
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} A/A comparison(s) pooled; {runs} simulated comparisons per row; false-alarm rate {:.2}%, miss rate {:.0}%; pairs per metric as the comparisons got them (median)\n",
        reports.len(),
        rule.alpha() * 100.0,
        rule.miss * 100.0
    );
    let keys: Vec<String> = pools.keys().cloned().collect();
    let (any_alarm, aa_passed) = false_alarms(&pools, &rule, runs);
    let _ = writeln!(
        out,
        "simulated A/A comparisons: {:.1}% fail (a false alarm), {:.1}% pass, the rest end inconclusive\n",
        any_alarm * 100.0,
        aa_passed * 100.0
    );
    let _ = writeln!(
        out,
        "| metric | pairs | spread | passed when worse by τ | {} | flagged 9 in 10 from |",
        effects
            .iter()
            .map(|e| format!("{:+}%", e * 100.0))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|{}---:|",
        "---:|".repeat(effects.len())
    );
    for key in &keys {
        let p = &pools[key];
        let powers: Vec<f64> = effects
            .iter()
            .map(|&e| power(&pools, key, e, &rule, runs))
            .collect();
        let smallest = smallest_flagged(&pools, key, &rule, runs / 4);
        let _ = writeln!(
            out,
            "| `{key}` | {} | {} | {:.1}% | {} | {} |",
            p.pairs,
            judge::spread(&logs(&p.ratios()))
                .map_or("–".into(), |s| format!("{:.1}%", s * 100.0)),
            passed_at_threshold(&pools, key, &rule, runs) * 100.0,
            powers
                .iter()
                .map(|p| format!("{:.0}%", p * 100.0))
                .collect::<Vec<_>>()
                .join(" | "),
            smallest.map_or("none up to ×3".into(), |s| format!("{:+.0}%", s * 100.0)),
        );
    }
    Ok(out)
}

fn logs(ratios: &[f64]) -> Vec<f64> {
    ratios
        .iter()
        .filter(|r| **r > 0.0)
        .map(|r| r.ln())
        .collect()
}

/// Every judged metric's ratios, comparison by comparison; its pairs are
/// the median a comparison gave it.
fn pool(reports: &[AbReport]) -> BTreeMap<String, Pool> {
    let mut pools: BTreeMap<String, (Pool, Vec<usize>)> = BTreeMap::new();
    for r in reports {
        for m in r.metrics.iter().filter(|m| m.class.is_some()) {
            let (pool, counts) = pools
                .entry(m.key.label(reports[0].profiles.len() > 1))
                .or_insert_with(|| {
                    let template = m.clone();
                    let runs = Vec::new();
                    (
                        Pool {
                            template,
                            runs,
                            pairs: 1,
                        },
                        Vec::new(),
                    )
                });
            let run: Vec<f64> = (m.ratios.iter().copied())
                .filter(|r| r.is_finite() && *r > 0.0)
                .collect();
            if !run.is_empty() {
                pool.runs.push(run);
            }
            counts.push(m.ratios.len());
        }
    }
    pools
        .into_iter()
        .filter(|(_, (pool, _))| !pool.runs.is_empty())
        .map(|(k, (mut pool, mut counts))| {
            counts.sort_unstable();
            pool.pairs = counts[counts.len() / 2].max(1);
            (k, pool)
        })
        .collect()
}

/// What one simulated comparison ended with.
struct Outcome {
    /// Whether each metric was called regressed at some look.
    flagged: BTreeMap<String, bool>,
    /// Whether it passed: at a look every judged metric decided, none
    /// failing (the look where a real comparison stops with exit 0).
    passed: bool,
}

/// One simulated comparison: each metric's pairs drawn, `plant` (metric,
/// factor in its worse direction) applied, judged look by look until a
/// failure or a pass, as a real comparison stops.
fn simulate(
    pools: &BTreeMap<String, Pool>,
    plant: Option<(&str, f64)>,
    rule: &Rule,
    seed: u64,
) -> Outcome {
    let drawn: Vec<(&String, Vec<f64>)> = pools
        .iter()
        .enumerate()
        .map(|(m, (key, p))| {
            let worse = match (plant, p.template.direction) {
                (Some((k, f)), Direction::Higher) if k == key => 1.0 / f,
                (Some((k, f)), _) if k == key => f,
                _ => 1.0,
            };
            let ratios = (0..p.pairs as u64)
                .map(|i| p.draw(seed, m as u64, i) * worse)
                .collect();
            (key, ratios)
        })
        .collect();
    let total: usize = drawn.iter().map(|(_, r)| r.len()).sum();
    let mut flagged: BTreeMap<String, bool> = pools.keys().map(|k| (k.clone(), false)).collect();
    // The looks of a real comparison, by its total pairs; each metric has
    // the share of its pairs the comparison had reached by then.
    let mut looks: Vec<Look> = (1..=total).filter_map(|n| Look::interim(n, rule)).collect();
    looks.push(Look::last(total, rule));
    for look in looks {
        let tracks: Vec<Track> = drawn
            .iter()
            .map(|(key, ratios)| {
                let p = &pools[*key];
                let upto = (ratios.len() * look.pairs)
                    .div_ceil(total.max(1))
                    .min(ratios.len());
                Track {
                    key: p.template.key.clone(),
                    unit: p.template.unit.clone(),
                    direction: p.template.direction,
                    class: p.template.class,
                    // At BASE's own level: a latency floor reads the values.
                    pairs: ratios[..upto]
                        .iter()
                        .map(|&r| {
                            let b = p.template.base_median.unwrap_or(1.0);
                            (Some(b), Some(b * r))
                        })
                        .collect(),
                    why_not: None,
                }
            })
            .collect();
        let judged = judge::judge_metrics(&tracks, rule, &look, &Tails::new());
        for ((key, _), j) in drawn.iter().zip(&judged) {
            if j.verdict == PairedVerdict::Regressed {
                flagged.insert((*key).clone(), true);
            }
        }
        if judged.iter().any(|j| j.verdict.fails()) {
            break;
        }
        let live = || judged.iter().filter(|j| j.class.is_some());
        if live().count() > 0 && live().all(|j| j.verdict.decided()) {
            return Outcome {
                flagged,
                passed: true,
            };
        }
    }
    Outcome {
        flagged,
        passed: false,
    }
}

/// The shares of simulated A/A comparisons with any metric regressed, and
/// that passed.
fn false_alarms(pools: &BTreeMap<String, Pool>, rule: &Rule, runs: usize) -> (f64, f64) {
    let outcomes: Vec<Outcome> = (0..runs as u64)
        .map(|r| simulate(pools, None, rule, 0xA11A + r))
        .collect();
    let share =
        |f: fn(&Outcome) -> bool| outcomes.iter().filter(|o| f(o)).count() as f64 / runs as f64;
    (
        share(|o| o.flagged.values().any(|f| *f)),
        share(|o| o.passed),
    )
}

/// The share of simulated comparisons that pass when `key` is worse by
/// its whole threshold: the miss rate the pass promises to hold.
fn passed_at_threshold(pools: &BTreeMap<String, Pool>, key: &str, rule: &Rule, runs: usize) -> f64 {
    let tau = pools[key].template.threshold.unwrap_or(rule.throughput);
    let passed = (0..runs as u64)
        .filter(|&r| simulate(pools, Some((key, 1.0 + tau)), rule, 0x7A0 + r).passed)
        .count();
    passed as f64 / runs as f64
}

/// The share of simulated comparisons that call `key` regressed when it
/// is `effect` worse.
fn power(pools: &BTreeMap<String, Pool>, key: &str, effect: f64, rule: &Rule, runs: usize) -> f64 {
    let hits = (0..runs as u64)
        .filter(|&r| simulate(pools, Some((key, 1.0 + effect)), rule, 0xB0B + r).flagged[key])
        .count();
    hits as f64 / runs as f64
}

/// The smallest effect (on a grid from 2% to +200%) flagged in 9 of 10.
fn smallest_flagged(
    pools: &BTreeMap<String, Pool>,
    key: &str,
    rule: &Rule,
    runs: usize,
) -> Option<f64> {
    const GRID: [f64; 14] = [
        0.02, 0.03, 0.05, 0.07, 0.10, 0.15, 0.20, 0.25, 0.30, 0.40, 0.50, 0.75, 1.0, 2.0,
    ];
    GRID.into_iter()
        .find(|&e| power(pools, key, e, rule, runs.max(20)) >= 0.9)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ab::judge::tests::rule;
    use crate::ab::judge::{Class, Key};

    fn pool(metric: &str, unit: &str, direction: Direction, class: Class, wobble: f64) -> Pool {
        let key = Key {
            profile: "ci".into(),
            scenario: "s".into(),
            variant: "v".into(),
            metric: metric.into(),
        };
        let template = Judgement {
            key,
            unit: unit.into(),
            direction,
            class: Some(class),
            base_median: Some(500.0),
            verdict: PairedVerdict::Unchanged,
            ..Judgement::default()
        };
        let ratios: Vec<f64> = (0..40)
            .map(|i| 1.0 + wobble * f64::from(i % 9 - 4) / 4.0)
            .collect();
        Pool {
            template,
            runs: ratios.chunks(8).map(<[f64]>::to_vec).collect(),
            pairs: 24,
        }
    }

    #[test]
    fn a_planted_regression_is_found_and_nothing_planted_is_quiet() {
        let rule = rule();
        let pools = BTreeMap::from([
            (
                "rate".to_string(),
                pool(
                    "publish_rate",
                    "msg/s",
                    Direction::Higher,
                    Class::Throughput,
                    0.02,
                ),
            ),
            (
                "p50".to_string(),
                pool(
                    "e2e_latency.p50",
                    "us",
                    Direction::Lower,
                    Class::Latency,
                    0.02,
                ),
            ),
        ]);
        let (alarms, passed) = false_alarms(&pools, &rule, 50);
        assert_eq!(alarms, 0.0);
        // Spread of a few percent over 24 pairs: identical builds pass.
        assert!(passed >= 0.9, "A/A passed {passed}");
        // Worse by the whole threshold: the pass lets it through at most
        // about β (10%) of the time.
        assert!(passed_at_threshold(&pools, "rate", &rule, 50) <= 0.2);
        assert_eq!(power(&pools, "rate", 0.20, &rule, 50), 1.0);
        assert_eq!(power(&pools, "p50", 0.30, &rule, 50), 1.0);
        // Within the noise and under half the threshold: never flagged.
        assert_eq!(power(&pools, "rate", 0.01, &rule, 50), 0.0);
        assert!(smallest_flagged(&pools, "rate", &rule, 20).is_some_and(|e| e <= 0.10));
    }

    /// A/A comparisons that each found NEW 6% slower (an order effect, a
    /// host warming up): a real comparison on that machine raises that
    /// false alarm, and so must the simulation. Centred on the pool's
    /// median, as it was, the offset vanished and the rate read 0%.
    #[test]
    fn an_offset_every_recorded_comparison_shares_is_a_false_alarm_not_noise() {
        let mut offset = pool(
            "publish_rate",
            "msg/s",
            Direction::Higher,
            Class::Throughput,
            0.02,
        );
        for run in &mut offset.runs {
            run.iter_mut().for_each(|r| *r *= 0.94);
        }
        let pools = BTreeMap::from([("rate".to_string(), offset)]);
        let (alarms, passed) = false_alarms(&pools, &rule(), 50);
        assert!(alarms >= 0.9, "false alarms {alarms}");
        assert!(passed <= 0.1, "passed {passed}");
    }

    /// Comparisons that differ from each other (one +3% off, the next −3%)
    /// are drawn one at a time, so a simulated comparison meets one
    /// offset, as a real one does, not their average.
    #[test]
    fn a_simulated_comparison_draws_its_pairs_from_one_recorded_comparison() {
        let mut spread = pool(
            "publish_rate",
            "msg/s",
            Direction::Higher,
            Class::Throughput,
            0.0,
        );
        spread.runs = vec![vec![1.03; 8], vec![0.97; 8]];
        for seed in 0..20 {
            let drawn: Vec<f64> = (0..24).map(|i| spread.draw(seed, 0, i)).collect();
            assert!(
                drawn.iter().all(|r| *r == drawn[0]),
                "seed {seed}: {drawn:?}"
            );
        }
    }
}
