//! The figures docs/history.md quotes for `jsbench history`'s change-point
//! method, larger than the test suite can afford: its false-positive rate
//! on pure noise (4,000 seeded series of 12, 24 and 48 runs) and how often
//! it finds a step of 1 to 4 standard deviations at the step's place (400
//! series per cell), for the shapes of history this project keeps.
//!
//! `cargo bench --bench changepoint_power` (about a minute in a release
//! build). Seeded: two runs print the same table.

use jsbench::history::changepoint::{Settings, detect};
use jsbench::record::random::normal;

fn main() {
    let settings = Settings::default();
    let trials = 4_000u64;
    for n in [12usize, 24, 48] {
        let starts = vec![true; n];
        let found = (0..trials)
            .filter(|&seed| {
                let values: Vec<f64> = (0..n as u64).map(|i| normal(seed, i)).collect();
                !detect(&values, &starts, &settings, seed).is_empty()
            })
            .count();
        println!(
            "pure noise, {n} runs: a change point in {found} of {trials} = {:.4} (alpha {})",
            found as f64 / trials as f64,
            settings.alpha
        );
    }
    // (runs before, runs after, runs a commit): the last is the real
    // history's shape here, ten commits of four runs, the step halfway.
    for (before, after, runs) in [(12usize, 12usize, 1), (20, 4, 1), (10, 3, 1), (20, 20, 4)] {
        let starts: Vec<bool> = (0..before + after).map(|i| i % runs == 0).collect();
        for sigmas in [1.0, 1.5, 2.0, 2.5, 3.0, 4.0] {
            let hits = (0..400u64)
                .filter(|&seed| {
                    let values: Vec<f64> = (0..before + after)
                        .map(|i| normal(seed, i as u64) + if i >= before { sigmas } else { 0.0 })
                        .collect();
                    detect(&values, &starts, &settings, seed)
                        .iter()
                        .any(|s| s.index.abs_diff(before) <= 1)
                })
                .count();
            println!(
                "{before}+{after} runs ({runs} a commit), step {sigmas} sigma: found in {:.2}",
                hits as f64 / 400.0
            );
        }
    }
}
