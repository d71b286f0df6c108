//! The change-point method on synthetic series with known answers: steps
//! of several sizes at a known noise, two steps, slow drift, and pure
//! noise (normal and heavy-tailed), whose false-positive rate must stay
//! within the rate docs/history.md states. All series are seeded, so each
//! test gives the same verdict every run, and each can fail: a detector
//! that saw nothing would fail the step tests, one that saw everything
//! the noise tests.

use super::analyse::{self, Rule};
use super::changepoint::{Settings, best_split, detect};
use super::load::{Measured, Record};
use super::series;
use crate::compare::Failure;
use crate::record::metrics::Direction;
use crate::record::random;

use random::normal;

/// `n` values around 100 with noise `sigma` (relative to 100), plus `step`
/// (a fraction of 100) from index `at` on.
fn stepped(seed: u64, n: usize, sigma: f64, at: usize, step: f64) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let level = if i >= at { 100.0 * (1.0 + step) } else { 100.0 };
            level + 100.0 * sigma * normal(seed, i as u64)
        })
        .collect()
}

/// Every value its own commit: a split may fall anywhere.
fn every(n: usize) -> Vec<bool> {
    vec![true; n]
}

fn settings() -> Settings {
    Settings::default()
}

/// How many of `trials` seeded series of `n` show any change point.
fn false_positives(trials: u64, n: usize, noise: impl Fn(u64, u64) -> f64) -> usize {
    false_positives_by_commit(trials, n, 1, noise)
}

/// The same with `runs` runs of each commit (splits only between commits).
fn false_positives_by_commit(
    trials: u64,
    n: usize,
    runs: usize,
    noise: impl Fn(u64, u64) -> f64,
) -> usize {
    let starts: Vec<bool> = (0..n).map(|i| i % runs == 0).collect();
    (0..trials)
        .filter(|&seed| {
            let values: Vec<f64> = (0..n as u64).map(|i| 100.0 + noise(seed, i)).collect();
            !detect(&values, &starts, &settings(), seed).is_empty()
        })
        .count()
}

/// The rate docs/history.md states: at most alpha, with room for the
/// binomial spread of `trials` draws (three standard deviations).
fn allowed(alpha: f64, trials: u64) -> f64 {
    alpha + 3.0 * (alpha * (1.0 - alpha) / trials as f64).sqrt()
}

#[test]
fn pure_normal_noise_shows_change_points_at_most_at_the_stated_rate() {
    let trials = 600;
    let found = false_positives(trials, 30, |s, i| 2.0 * normal(s, i));
    let rate = found as f64 / trials as f64;
    assert!(
        rate <= allowed(settings().alpha, trials),
        "{found} of {trials} noise series showed a change point ({rate:.3})"
    );
}

#[test]
fn noise_over_commits_of_four_runs_each_is_held_to_the_same_rate() {
    // scripts/history-commits.sh's shape: every commit run in rounds.
    let trials = 600;
    let found = false_positives_by_commit(trials, 40, 4, |s, i| 2.0 * normal(s, i));
    let rate = found as f64 / trials as f64;
    assert!(
        rate <= allowed(settings().alpha, trials),
        "{found} of {trials} noise histories of 10 commits x 4 runs showed a change point ({rate:.3})"
    );
}

#[test]
fn commits_with_noise_of_their_own_are_held_to_the_same_rate() {
    // Runs of one commit share its build and the machine's state of the
    // moment: a level of their own, here half and then as large as the
    // run-to-run noise. Shuffling runs singly flagged 6.3% and 27.5% of
    // such histories at a stated 1%; whole commits are exchangeable.
    let trials = 600;
    for commit in [0.5, 1.0] {
        let found = false_positives_by_commit(trials, 40, 4, |s, i| {
            2.0 * (normal(s, i) + commit * normal(s ^ 0x5eed_c0de, 1_000 + i / 4))
        });
        let rate = found as f64 / trials as f64;
        eprintln!("commit noise {commit} x run noise: {rate:.4}");
        assert!(
            rate <= allowed(settings().alpha, trials),
            "commit noise {commit}: {found} of {trials} histories of 10 commits x 4 runs \
             showed a change point ({rate:.3})"
        );
    }
}

#[test]
fn heavy_tailed_noise_is_held_to_the_same_rate() {
    // A benchmark's noise: mostly tight, now and then a slow run (an
    // exponential tail). The permutation test assumes no distribution.
    let trials = 600;
    let found = false_positives(trials, 24, |s, i| {
        -5.0 * random::unit(s, i, 3).max(1e-12).ln()
    });
    let rate = found as f64 / trials as f64;
    assert!(
        rate <= allowed(settings().alpha, trials),
        "{found} of {trials} heavy-tailed series showed a change point ({rate:.3})"
    );
}

#[test]
fn a_step_of_three_noise_deviations_is_found_where_it_is() {
    // 2% noise, a 6% step after 15 of 30 runs: found within one run of
    // where it is in about 96% of series (`measure` below: 0.97 at 12+12).
    let mut hits = 0;
    for seed in 0..40 {
        let values = stepped(seed, 30, 0.02, 15, 0.06);
        let splits = detect(&values, &every(values.len()), &settings(), seed);
        if splits.iter().any(|s| s.index.abs_diff(15) <= 1) {
            hits += 1;
        }
        assert!(splits.len() <= 2, "seed {seed}: {splits:?}");
    }
    assert!(hits >= 35, "a 3-sigma step found in {hits} of 40 series");
}

#[test]
fn larger_steps_are_found_more_often_than_smaller_ones() {
    let rate = |step: f64| {
        (0..60)
            .filter(|&seed| {
                let values = stepped(seed, 24, 0.02, 12, step);
                detect(&values, &every(values.len()), &settings(), seed)
                    .iter()
                    .any(|s| s.index.abs_diff(12) <= 2)
            })
            .count()
    };
    let (small, medium, large) = (rate(0.01), rate(0.03), rate(0.08));
    assert!(
        small < medium && medium <= large,
        "{small} {medium} {large}"
    );
    assert!(large >= 58, "a 4-sigma step found in only {large} of 60");
    assert!(small <= 20, "a half-sigma step 'found' in {small} of 60");
}

#[test]
fn two_steps_are_both_found_in_order() {
    let values: Vec<f64> = stepped(7, 36, 0.01, 12, 0.05)
        .iter()
        .enumerate()
        .map(|(i, v)| if i >= 24 { v * 0.9 } else { *v })
        .collect();
    let splits: Vec<usize> = detect(&values, &every(values.len()), &settings(), 7)
        .iter()
        .map(|s| s.index)
        .collect();
    assert_eq!(splits.len(), 2, "{splits:?}");
    assert!(
        splits[0].abs_diff(12) <= 1 && splits[1].abs_diff(24) <= 1,
        "{splits:?}"
    );
}

#[test]
fn slow_drift_shows_as_change_points_that_all_point_its_way() {
    // 20% lost over 40 runs, half a percent a run, at 2% noise: no pull
    // request's pair could see one run's step, the history must.
    for seed in 0..10 {
        let values: Vec<f64> = (0..40)
            .map(|i| 100.0 * (1.0 - 0.005 * i as f64) + 2.0 * normal(seed, i as u64))
            .collect();
        let splits = detect(&values, &every(values.len()), &settings(), seed);
        assert!(!splits.is_empty(), "seed {seed}: the drift went unseen");
        let mut bounds = vec![0];
        bounds.extend(splits.iter().map(|s| s.index));
        bounds.push(values.len());
        let medians: Vec<f64> = bounds
            .windows(2)
            .map(|w| crate::record::spread::median(&values[w[0]..w[1]]).unwrap())
            .collect();
        assert!(
            medians.windows(2).all(|m| m[1] < m[0]),
            "seed {seed}: {medians:?}"
        );
    }
}

#[test]
fn the_same_series_gives_the_same_answer_twice() {
    let values = stepped(3, 40, 0.03, 25, 0.05);
    assert_eq!(
        detect(&values, &every(40), &settings(), 11),
        detect(&values, &every(40), &settings(), 11)
    );
}

#[test]
fn a_strict_level_still_finds_a_clear_step() {
    // alpha 0.001 with the default 499 permutations could never reach
    // p <= 0.001: the permutations rise to what the level needs.
    let strict = Settings {
        alpha: 0.001,
        ..settings()
    };
    let values = stepped(1, 30, 0.01, 15, 0.10);
    let splits = detect(&values, &every(30), &strict, 1);
    assert_eq!(splits.iter().map(|s| s.index).collect::<Vec<_>>(), vec![15]);
    assert!(splits[0].p_value <= 0.001, "{splits:?}");
}

#[test]
fn a_split_falls_only_between_commits() {
    // Two runs a commit; the step starts at the second run of commit 7
    // (index 15), which only the machine could do: the split goes to a
    // commit's start, 14 or 16, never inside one.
    let values = stepped(2, 30, 0.01, 15, 0.10);
    let starts: Vec<bool> = (0..30).map(|i| i % 2 == 0).collect();
    let splits = detect(&values, &starts, &settings(), 2);
    assert_eq!(splits.len(), 1, "{splits:?}");
    assert!([14, 16].contains(&splits[0].index), "{splits:?}");
    let mut nowhere = vec![false; 30];
    nowhere[0] = true;
    assert!(detect(&values, &nowhere, &settings(), 2).is_empty());
}

#[test]
fn best_split_puts_a_clean_step_exactly() {
    let values = [1.0, 1.1, 0.9, 1.0, 5.0, 5.1, 4.9, 5.0];
    assert_eq!(best_split(&values, &every(8), 2).map(|s| s.index), Some(4));
    assert_eq!(best_split(&values[..3], &every(3), 2), None);
}

fn record(i: usize, commit: &str, value: f64, failures: Vec<Failure>) -> Record {
    Record {
        format: super::load::FORMAT.into(),
        id: format!("run-{i}"),
        started_at: format!("2026-01-01T00:{:02}:00Z", i),
        commit: Some(commit.into()),
        dirty: false,
        host: "x86_64 cpu, 2 cores, 8 GiB".into(),
        profile: "ci".into(),
        server_version: "2.15.1".into(),
        verdict: "passed".into(),
        kind: "run".into(),
        report: None,
        metrics: vec![
            Measured {
                scenario: "publish".into(),
                variant: "max".into(),
                metric: "publish_rate".into(),
                unit: "msg/s".into(),
                direction: Direction::Higher,
                value,
            },
            Measured {
                scenario: "publish".into(),
                variant: "max".into(),
                metric: "target_rate".into(),
                unit: "msg/s".into(),
                direction: Direction::None,
                value: 0.0,
            },
        ],
        failures,
        judged: Vec::new(),
    }
}

fn analysed_rates(step: f64) -> Vec<analyse::Analysed> {
    let records: Vec<Record> = stepped(5, 20, 0.01, 12, step)
        .into_iter()
        .enumerate()
        .map(|(i, v)| record(i, &format!("c{i:02}"), 1000.0 * v, Vec::new()))
        .collect();
    let mut notes = Vec::new();
    let ordered = series::order(&records, None, &mut notes);
    let groups = series::group(&records, &ordered);
    let rule = Rule {
        settings: settings(),
        threshold: 0.05,
        window: 100,
    };
    analyse::analyse(&groups[0], &records, &rule)
}

#[test]
fn a_rate_that_falls_beyond_the_threshold_fails_and_one_that_rises_does_not() {
    let fell = analysed_rates(-0.10);
    assert_eq!(fell.len(), 1, "the direction-less metric is not analysed");
    let change = fell[0].changes.last().expect("the fall is a change point");
    assert!(change.regression && fell[0].failed, "{change:?}");
    assert_eq!(change.before_commit.as_deref(), Some("c11"));
    assert_eq!(change.after_commit.as_deref(), Some("c12"));
    assert!((change.change + 0.10).abs() < 0.03, "{change:?}");

    let rose = analysed_rates(0.10);
    assert!(!rose[0].changes.is_empty() && !rose[0].failed);
    let small = analysed_rates(-0.04);
    assert!(
        !small[0].failed,
        "a fall within the 5% threshold fails nothing"
    );
}

#[test]
fn a_regression_must_survive_the_false_discovery_control_across_series() {
    let fell = analysed_rates(-0.10);
    let p = fell[0].changes.last().unwrap().p_value;
    let mut alone = fell.clone();
    analyse::control_discoveries(alone.iter_mut(), 0.01, &mut Vec::new());
    assert!(alone[0].failed, "alone, the fall fails the history");
    // Among 99 more gating series without a change, p >= 1/500 (the
    // permutations resolved only the series' own 1%) is no discovery at
    // 1% over 100 series.
    let mut quiet = fell[0].clone();
    quiet.changes.clear();
    quiet.failed = false;
    let mut many = vec![fell[0].clone()];
    many.extend(std::iter::repeat_n(quiet, 99));
    let mut notes = Vec::new();
    analyse::control_discoveries(many.iter_mut(), 0.01, &mut notes);
    assert!(!many[0].failed, "p = {p}");
    assert!(notes[0].contains("Benjamini"), "{notes:?}");
    // Permutations that resolve 1% / 100 find the same fall significant.
    let resolved = Settings {
        resolve: 0.0001,
        ..settings()
    };
    let values = stepped(5, 20, 0.01, 12, -0.10);
    let splits = detect(&values, &every(20), &resolved, 5);
    assert!(
        splits.iter().any(|s| s.index == 12 && s.p_value <= 0.0001),
        "{splits:?}"
    );
    many[0].failed = true;
    many[0].changes.last_mut().unwrap().p_value = splits[0].p_value;
    analyse::control_discoveries(many.iter_mut(), 0.01, &mut Vec::new());
    assert!(many[0].failed);
}

#[test]
fn broken_checks_are_events_on_their_variants_series() {
    let failure = Failure {
        scenario: "publish".into(),
        variant: "max".into(),
        check: "lost = 0".into(),
        detail: "2 (expected 0)".into(),
    };
    let records: Vec<Record> = (0..6)
        .map(|i| {
            let f = if i == 4 {
                vec![failure.clone()]
            } else {
                Vec::new()
            };
            record(i, "c", 1000.0, f)
        })
        .collect();
    let groups = series::group(&records, &series::order(&records, None, &mut Vec::new()));
    assert_eq!(groups[0].events.len(), 1);
    assert_eq!(groups[0].events[0].position, 4);
    assert!(
        groups[0]
            .series
            .iter()
            .all(|s| groups[0].events[0].touches(s))
    );
}

#[test]
fn different_machines_never_share_a_series() {
    let mut records: Vec<Record> = (0..8).map(|i| record(i, "c", 1000.0, Vec::new())).collect();
    records[3].host = "aarch64 other, 4 cores, 16 GiB".into();
    let groups = series::group(&records, &series::order(&records, None, &mut Vec::new()));
    assert_eq!(groups.len(), 2);
    assert_eq!(groups.iter().map(|g| g.runs.len()).sum::<usize>(), 8);
}
