//! Change points in one series by E-Divisive means (Matteson and James, "A
//! Nonparametric Approach for Multiple Change Point Analysis of
//! Multivariate Data", JASA 2014), the method MongoDB's CI adopted (Daly et
//! al., ICPE 2020) and that Hunter (now Apache Otava) grew out of.
//!
//! Why this one: it assumes no distribution (a benchmark's noise is skewed
//! and heavy-tailed, so a t-test's normality would be a fiction), it finds
//! any number of changes by splitting one segment at a time, and each split
//! carries a permutation p-value, so the false-positive rate in pure noise
//! is the significance level by construction, not by a tuned threshold.
//! Hunter replaced the permutations with a t-test because random
//! permutations gave a different answer on each run; here they are drawn
//! from a seeded generator ([`crate::record::random`]), so the same history
//! always gives the same change points.
//!
//! The statistic is the one of the paper with α = 1 and the split's far end
//! κ at the segment's end (as E-Divisive implementations for CI do): for a
//! segment split into X (m points) and Y (k points),
//! `q = m·k/(m+k) · (2/(m·k)·Σ|x−y| − Σ|x−x'|/C(m,2) − Σ|y−y'|/C(k,2))`.
//! The best split of each segment is found in O(n²) by moving one point at
//! a time from Y to X and updating the three sums.

use crate::record::random;

/// How hard to look and how sure to be.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// The significance level of each split: in a series of pure noise, the
    /// chance of reporting any change point.
    pub alpha: f64,
    /// Permutations per test, at least 5/alpha − 1; the smallest p-value
    /// is 1/(permutations+1).
    pub permutations: usize,
    /// The fewest points on either side of a split.
    pub min_size: usize,
    /// Seeds the permutations (mixed with the series' own seed).
    pub seed: u64,
    /// The smallest p-value the permutations must be able to show: below
    /// `alpha` when the series' answers are held together across many
    /// series (a false-discovery control asks p ≤ alpha / series).
    pub resolve: f64,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            alpha: 0.01,
            permutations: 499,
            min_size: 3,
            seed: 36,
            resolve: 0.01,
        }
    }
}

/// One accepted split: the series changes between `index - 1` and `index`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Split {
    pub index: usize,
    pub statistic: f64,
    /// The permutation p-value: (1 + permutations at least as large) /
    /// (1 + permutations).
    pub p_value: f64,
}

/// The change points of `values`, in index order. A split before index `i`
/// is considered only where `boundaries[i]` (a new commit starts there;
/// all true when every value is its own commit). `series_seed` tells series
/// apart, so two series of one history do not share permutations.
pub fn detect(
    values: &[f64],
    boundaries: &[bool],
    settings: &Settings,
    series_seed: u64,
) -> Vec<Split> {
    let min = settings.min_size.max(2);
    let mut bounds = vec![0, values.len()];
    let mut found = Vec::new();
    for step in 0u64.. {
        let Some((start, split)) = best_of_segments(values, boundaries, &bounds, min) else {
            break;
        };
        let seed = random::mix(settings.seed ^ random::mix(series_seed ^ step));
        let Some(p_value) = permutation_p(
            values,
            boundaries,
            &bounds,
            min,
            split.statistic,
            settings,
            seed,
        ) else {
            break;
        };
        let index = start + split.index;
        found.push(Split {
            index,
            statistic: split.statistic,
            p_value,
        });
        let at = bounds.partition_point(|&b| b < index);
        bounds.insert(at, index);
    }
    found.sort_by_key(|s| s.index);
    found
}

/// The best split over all segments: (the segment's start, the split
/// within it).
fn best_of_segments(
    values: &[f64],
    boundaries: &[bool],
    bounds: &[usize],
    min: usize,
) -> Option<(usize, Split)> {
    bounds
        .windows(2)
        .filter_map(|w| {
            best_split(&values[w[0]..w[1]], &boundaries[w[0]..w[1]], min).map(|s| (w[0], s))
        })
        .max_by(|a, b| a.1.statistic.total_cmp(&b.1.statistic))
}

/// The split of `x` with the largest statistic, at least `min` points on
/// each side and only where `allowed`; `None` when `x` is too short to
/// split or allows no split.
pub fn best_split(x: &[f64], allowed: &[bool], min: usize) -> Option<Split> {
    let n = x.len();
    if n < 2 * min || min < 2 {
        return None;
    }
    let pair_sum = |a: &[f64], b: &[f64]| -> f64 {
        a.iter()
            .map(|p| b.iter().map(|q| (p - q).abs()).sum::<f64>())
            .sum()
    };
    let within = |a: &[f64]| -> f64 { pair_sum(a, a) / 2.0 };
    let (mut left, mut right, mut cross) = (
        within(&x[..min]),
        within(&x[min..]),
        pair_sum(&x[..min], &x[min..]),
    );
    let mut best: Option<Split> = None;
    for tau in min..=n - min {
        let (m, k) = (tau as f64, (n - tau) as f64);
        let between = 2.0 * cross / (m * k);
        let inside = left / (m * (m - 1.0) / 2.0) + right / (k * (k - 1.0) / 2.0);
        let statistic = m * k / (m + k) * (between - inside);
        if allowed.get(tau).copied().unwrap_or(true) && best.is_none_or(|b| statistic > b.statistic)
        {
            best = Some(Split {
                index: tau,
                statistic,
                p_value: 1.0,
            });
        }
        if tau < n - min {
            // x[tau] moves from the right part to the left.
            let to_left: f64 = x[..tau].iter().map(|q| (x[tau] - q).abs()).sum();
            let to_right: f64 = x[tau + 1..].iter().map(|q| (x[tau] - q).abs()).sum();
            left += to_left;
            right -= to_right;
            cross += to_right - to_left;
        }
    }
    best
}

/// The permutation test of the current best split: every segment's
/// commits shuffled within it, each commit's runs kept together (the
/// segments found so far stay apart), the best statistic of any segment
/// taken each time. Runs of one commit share its build and the machine's
/// state of the moment, so they are not exchangeable one by one: shuffled
/// singly, 600 histories of 10 commits of 4 runs with no change showed a
/// change point in 6.3% (commit noise half the run noise) and 27.5%
/// (equal) at a stated 1%; shuffled by commit, 1.0% and 0.7% (the test
/// `commits_with_noise_of_their_own_are_held_to_the_same_rate`). `None` when not
/// significant; it stops as soon as it cannot be, so noise costs few
/// permutations.
fn permutation_p(
    values: &[f64],
    boundaries: &[bool],
    bounds: &[usize],
    min: usize,
    observed: f64,
    settings: &Settings,
    seed: u64,
) -> Option<f64> {
    // Enough permutations that the level can be reached at all, with room
    // to spare: at least 5/alpha (499 at the default 0.01).
    let total = settings
        .permutations
        .max((5.0 / settings.alpha).ceil() as usize - 1)
        .max((1.0 / settings.resolve.min(settings.alpha)).ceil() as usize - 1);
    // Significant iff (1 + exceed) / (1 + total) <= alpha.
    let allowed = settings.alpha * (total + 1) as f64 - 1.0;
    if allowed < 0.0 {
        return None;
    }
    let mut exceed = 0usize;
    // Each segment's commits: (first run, end), in order.
    let commits: Vec<Vec<(usize, usize)>> = bounds
        .windows(2)
        .map(|w| {
            let starts: Vec<usize> = (w[0]..w[1])
                .filter(|&i| i == w[0] || boundaries[i])
                .collect();
            let ends = starts.iter().skip(1).copied().chain([w[1]]);
            starts.iter().copied().zip(ends).collect()
        })
        .collect();
    let (mut part, mut starts, mut order) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..total as u64 {
        let mut largest = f64::NEG_INFINITY;
        for (segment, blocks) in commits.iter().enumerate() {
            order.clear();
            order.extend_from_slice(blocks);
            shuffle(&mut order, seed, round, segment as u64);
            part.clear();
            starts.clear();
            for &(from, to) in &order {
                starts.extend((from..to).map(|i| i == from));
                part.extend_from_slice(&values[from..to]);
            }
            if let Some(s) = best_split(&part, &starts, min) {
                largest = largest.max(s.statistic);
            }
        }
        if largest >= observed {
            exceed += 1;
            if exceed as f64 > allowed {
                return None;
            }
        }
    }
    Some((1 + exceed) as f64 / (1 + total) as f64)
}

/// Fisher–Yates, drawn from the seeded generator.
fn shuffle<T>(part: &mut [T], seed: u64, round: u64, segment: u64) {
    for i in (1..part.len()).rev() {
        let j = random::below(seed, round, (segment << 32) | i as u64, i as u64 + 1) as usize;
        part.swap(i, j);
    }
}

/// A stable 64-bit seed for a series' name (FNV-1a), so each series gets
/// its own permutations and the same ones on every run.
pub fn seed_of(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
