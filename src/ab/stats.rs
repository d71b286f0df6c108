//! The statistics of paired differences: the Hodges–Lehmann estimate of
//! their centre and its confidence interval from the Wilcoxon signed-rank
//! distribution.
//!
//! Why these: a slice's number is not normally distributed (a stall puts
//! one pair far out), and pairs are few (6 to 30). The signed-rank
//! interval assumes only that the differences are symmetric about their
//! centre, holds its coverage exactly for any such distribution, and shrugs
//! off a wild pair; it needs no random numbers, so the same pairs always
//! give the same verdict. The estimate is the median of the Walsh averages
//! `(d_i + d_j) / 2, i <= j`, and the interval their order statistics at
//! the signed-rank distribution's quantiles.

/// A centre and the interval around it, in the differences' own units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub estimate: f64,
    pub low: f64,
    pub high: f64,
    /// The exact coverage of `[low, high]`: at least the confidence asked
    /// for (the signed-rank distribution is discrete).
    pub coverage: f64,
}

/// How many of the `2^n` sign patterns give each signed-rank sum `0..=n(n+1)/2`.
fn signed_rank_counts(n: usize) -> Vec<f64> {
    let max = n * (n + 1) / 2;
    let mut counts = vec![0.0f64; max + 1];
    counts[0] = 1.0;
    for rank in 1..=n {
        for w in (rank..=max).rev() {
            counts[w] += counts[w - rank];
        }
    }
    counts
}

/// The largest `t` with `P(W+ <= t) <= tail` for `n` pairs, if any.
fn lower_critical(n: usize, tail: f64) -> Option<(usize, f64)> {
    let counts = signed_rank_counts(n);
    let total = 2f64.powi(n as i32);
    let mut cumulative = 0.0;
    let mut found = None;
    for (t, count) in counts.iter().enumerate() {
        cumulative += count / total;
        if cumulative <= tail {
            found = Some((t, cumulative));
        } else {
            break;
        }
    }
    found
}

/// The Hodges–Lehmann estimate of the differences' centre with its
/// signed-rank interval at `confidence` (0.99 for 99%). `None` when there
/// are too few differences for that confidence (6 pairs reach 96.9%, 8
/// reach 99.2%).
pub fn hodges_lehmann(differences: &[f64], confidence: f64) -> Option<Interval> {
    let n = differences.len();
    if n == 0 || differences.iter().any(|d| !d.is_finite()) {
        return None;
    }
    let mut walsh = Vec::with_capacity(n * (n + 1) / 2);
    for i in 0..n {
        for j in i..n {
            walsh.push((differences[i] + differences[j]) / 2.0);
        }
    }
    walsh.sort_by(f64::total_cmp);
    let m = walsh.len();
    let estimate = if m % 2 == 1 {
        walsh[m / 2]
    } else {
        (walsh[m / 2 - 1] + walsh[m / 2]) / 2.0
    };
    let (t, tail) = lower_critical(n, (1.0 - confidence) / 2.0)?;
    Some(Interval {
        estimate,
        low: walsh[t],
        high: walsh[m - 1 - t],
        coverage: 1.0 - 2.0 * tail,
    })
}

/// The fewest pairs that can reach `confidence` at all.
pub fn pairs_needed(confidence: f64) -> usize {
    (1..64)
        .find(|&n| lower_critical(n, (1.0 - confidence) / 2.0).is_some())
        .unwrap_or(64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signed_rank_distribution_is_exact() {
        // n = 3: sums 0..6 from the 8 sign patterns of ranks 1, 2, 3.
        assert_eq!(
            signed_rank_counts(3),
            vec![1.0, 1.0, 1.0, 2.0, 1.0, 1.0, 1.0]
        );
        // Textbook critical values, two-sided 5%: n = 8 -> 3, n = 10 -> 8,
        // n = 20 -> 52 (the largest t with P(W+ <= t) <= 2.5%).
        assert_eq!(lower_critical(8, 0.025).map(|c| c.0), Some(3));
        assert_eq!(lower_critical(10, 0.025).map(|c| c.0), Some(8));
        assert_eq!(lower_critical(20, 0.025).map(|c| c.0), Some(52));
        // Five pairs can never reach 95% two-sided: 2/32 > 5%.
        assert_eq!(lower_critical(5, 0.025), None);
    }

    #[test]
    fn few_pairs_cannot_claim_high_confidence() {
        assert_eq!(pairs_needed(0.95), 6);
        assert_eq!(pairs_needed(0.99), 8);
        assert!(hodges_lehmann(&[0.1; 7], 0.99).is_none());
        let i = hodges_lehmann(&[0.1; 8], 0.99).expect("8 pairs reach 99%");
        assert!(i.coverage >= 0.99, "{i:?}");
    }

    #[test]
    fn the_estimate_is_the_median_of_walsh_averages() {
        // Walsh averages of 1, 2, 4: 1, 1.5, 2, 2.5, 3, 4 -> median 2.25.
        let d = [1.0, 2.0, 4.0];
        let i = hodges_lehmann(&d, 0.5).expect("3 pairs reach 50%");
        assert!((i.estimate - 2.25).abs() < 1e-12, "{i:?}");
        assert!(i.low <= i.estimate && i.estimate <= i.high);
    }

    #[test]
    fn one_wild_pair_moves_the_estimate_little_and_the_far_bound_not_at_all() {
        let calm = [
            0.01, -0.02, 0.0, 0.015, -0.01, 0.005, 0.02, -0.005, 0.01, 0.0,
        ];
        let mut wild = calm;
        wild[3] = 5.0;
        let a = hodges_lehmann(&calm, 0.95).unwrap();
        let b = hodges_lehmann(&wild, 0.95).unwrap();
        assert!(b.estimate - a.estimate < 0.01, "{a:?} {b:?}");
        // The bound on the outlier's side follows it (the interval widens:
        // an undecided verdict, never a false one); the other stays put, so
        // a stall in one slice cannot manufacture a regression.
        assert!((b.low - a.low).abs() < 0.01, "{a:?} {b:?}");
    }

    #[test]
    fn a_clear_shift_lies_outside_zero_and_identical_pairs_collapse() {
        let shifted: Vec<f64> = (0..10).map(|i| 0.1 + 0.01 * f64::from(i % 3)).collect();
        let i = hodges_lehmann(&shifted, 0.99).unwrap();
        assert!(i.low > 0.09 && i.high < 0.13, "{i:?}");
        let same = hodges_lehmann(&[0.0; 8], 0.99).unwrap();
        assert_eq!((same.low, same.estimate, same.high), (0.0, 0.0, 0.0));
    }

    #[test]
    fn coverage_holds_for_symmetric_noise() {
        // Deterministic pseudo-random symmetric noise (a hash of the index):
        // over many samples of 10 pairs, a 90% interval must contain the
        // true centre (0) about 90% of the time, never much less.
        let mut hits = 0;
        let trials = 2000;
        for t in 0..trials as u64 {
            let d: Vec<f64> = (0..10)
                .map(|i| {
                    let x = crate::record::random::unit(7, t, i);
                    (x - 0.5) * 0.2
                })
                .collect();
            let i = hodges_lehmann(&d, 0.90).unwrap();
            hits += usize::from(i.low <= 0.0 && 0.0 <= i.high);
        }
        let rate = hits as f64 / trials as f64;
        assert!((0.88..=0.95).contains(&rate), "coverage {rate}");
    }
}
