//! The statistics of paired differences: the Hodges–Lehmann estimate of
//! their centre, its confidence interval and one-sided tests from the
//! Wilcoxon signed-rank distribution; the sign test for yes-or-no
//! outcomes per pair; Holm's and Tarone's corrections for many tests.
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

/// Above this many pairs the signed-rank distribution is taken as normal
/// (with a continuity correction): exact counts cost n³/2 operations, and
/// at 300 pairs the normal form is within a few parts in a thousand of
/// them in the tails that matter here.
const MAX_EXACT: usize = 300;

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

/// The mean and standard deviation of the signed-rank sum of `n` pairs
/// under the null, for its normal form.
fn normal_form(n: usize) -> (f64, f64) {
    let mean = (n * (n + 1) / 2) as f64 / 2.0;
    let sd = (n as f64 * (n as f64 + 1.0) * (2.0 * n as f64 + 1.0) / 24.0).sqrt();
    (mean, sd)
}

/// `P(W <= k)` for the signed-rank sum `W` of `n` pairs under the null.
fn signed_rank_cdf(n: usize, k: usize) -> f64 {
    let max = n * (n + 1) / 2;
    if k >= max {
        return 1.0;
    }
    if n > MAX_EXACT {
        let (mean, sd) = normal_form(n);
        return normal_cdf((k as f64 + 0.5 - mean) / sd);
    }
    let counts = signed_rank_counts(n);
    let total = 2f64.powi(n as i32);
    counts[..=k].iter().sum::<f64>() / total
}

/// The largest `t` with `P(W+ <= t) <= tail` for `n` pairs, if any, and
/// that probability.
fn lower_critical(n: usize, tail: f64) -> Option<(usize, f64)> {
    if n == 0 {
        return None;
    }
    if n > MAX_EXACT {
        let (mean, sd) = normal_form(n);
        let t = (mean + normal_quantile(tail) * sd - 0.5).floor();
        if t < 0.0 {
            return None;
        }
        let t = t as usize;
        return Some((t, signed_rank_cdf(n, t)));
    }
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

/// The Walsh averages `(d_i + d_j) / 2, i <= j`, sorted.
fn walsh(differences: &[f64]) -> Vec<f64> {
    let n = differences.len();
    let mut walsh = Vec::with_capacity(n * (n + 1) / 2);
    for i in 0..n {
        for j in i..n {
            walsh.push((differences[i] + differences[j]) / 2.0);
        }
    }
    walsh.sort_by(f64::total_cmp);
    walsh
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
    let walsh = walsh(differences);
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

/// The one-sided p-value of the signed-rank test of "the centre is at
/// most `shift`" against "it is above": how often chance alone would put
/// as few Walsh averages at or below `shift`. Small when the differences
/// lie above `shift` beyond what symmetric noise explains. Averages equal
/// to `shift` count as below it, which can only make the p-value larger.
/// `None` without differences, or with one that is not finite.
pub fn p_above(differences: &[f64], shift: f64) -> Option<f64> {
    let n = differences.len();
    if n == 0 || differences.iter().any(|d| !d.is_finite()) {
        return None;
    }
    let below = walsh(differences).partition_point(|w| *w <= shift);
    Some(signed_rank_cdf(n, below))
}

/// The same test the other way: "the centre is at least `shift`" against
/// "it is below".
pub fn p_below(differences: &[f64], shift: f64) -> Option<f64> {
    let flipped: Vec<f64> = differences.iter().map(|d| -d).collect();
    p_above(&flipped, -shift)
}

/// The smallest p-value the signed-rank test can give with `n` pairs:
/// every difference on one side.
pub fn smallest_p(n: usize) -> f64 {
    signed_rank_cdf(n, 0)
}

/// One-sided exact sign test: the probability of `k` or more of `n` fair
/// coin flips coming up heads. Used for yes-or-no outcomes per pair (a
/// check broken on one side only, a metric present on one side only).
pub fn sign_test(k: usize, n: usize) -> f64 {
    if k == 0 {
        return 1.0;
    }
    // Summed in logs: n reaches the thousands with windows.
    let ln_half_n = n as f64 * 0.5f64.ln();
    let mut ln_choose = 0.0f64; // ln C(n, 0)
    let mut p = 0.0;
    for i in 0..=n {
        if i > 0 {
            ln_choose += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        if i >= k {
            p += (ln_choose + ln_half_n).exp();
        }
    }
    p.min(1.0)
}

/// Holm's step-down procedure: which of `p_values` are rejected with a
/// family-wise error rate of at most `alpha`. Valid whatever the tests'
/// dependence, and never less powerful than Bonferroni.
pub fn holm(p_values: &[f64], alpha: f64) -> Vec<bool> {
    let levels = holm_levels(p_values, alpha);
    p_values.iter().zip(levels).map(|(p, l)| *p <= l).collect()
}

/// The level each test was held to in [`holm`]: alpha / (m − rank) for a
/// rejected one, and for the others the level of the first test the
/// procedure stopped at (a smaller p-value would have had to clear that
/// one). The interval a verdict was decided on is drawn at this level.
pub fn holm_levels(p_values: &[f64], alpha: f64) -> Vec<f64> {
    let m = p_values.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p_values[a].total_cmp(&p_values[b]));
    let mut levels = vec![0.0; m];
    let mut stopped = None;
    for (rank, &i) in order.iter().enumerate() {
        let own = alpha / (m - rank) as f64;
        if stopped.is_none() && p_values[i] > own {
            stopped = Some(own);
        }
        levels[i] = stopped.unwrap_or(own);
    }
    levels
}

/// Tarone's correction for discrete tests, then Bonferroni: a test that
/// cannot reach significance whatever its outcome (too few pairs where
/// the sides differ) does not count against the others. `smallest[i]` is
/// the smallest p-value test `i` can give; returns which are rejected.
pub fn tarone(p_values: &[f64], smallest: &[f64], alpha: f64) -> Vec<bool> {
    let m = p_values.len();
    let k = (1..=m.max(1))
        .find(|&k| smallest.iter().filter(|&&s| s <= alpha / k as f64).count() <= k)
        .unwrap_or(m.max(1));
    p_values
        .iter()
        .zip(smallest)
        .map(|(&p, &s)| s <= alpha / k as f64 && p <= alpha / k as f64)
        .collect()
}

/// The standard normal distribution function (Abramowitz and Stegun
/// 7.1.26 through erfc, absolute error below 1.5e-7).
pub fn normal_cdf(x: f64) -> f64 {
    let z = x.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * z);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erfc = poly * (-z * z).exp();
    if x >= 0.0 {
        1.0 - erfc / 2.0
    } else {
        erfc / 2.0
    }
}

/// Student's t distribution function with `df` degrees of freedom: what
/// a statistic standardised by a spread estimated from `df + 1` pairs
/// follows. With few pairs its tails are far heavier than the normal's
/// (the 99.9% point is 10.2 at 3 degrees of freedom, 3.1 for the normal).
pub fn t_cdf(x: f64, df: f64) -> f64 {
    if !x.is_finite() {
        return if x > 0.0 { 1.0 } else { 0.0 };
    }
    // P(|T| > |x|) = I_{df/(df+x²)}(df/2, 1/2).
    let both = incomplete_beta(df / (df + x * x), df / 2.0, 0.5);
    if x >= 0.0 {
        1.0 - both / 2.0
    } else {
        both / 2.0
    }
}

/// The quantile of [`t_cdf`], for `p` in (0, 1): bisection, to 1e-9.
pub fn t_quantile(p: f64, df: f64) -> f64 {
    if p < 0.5 {
        return -t_quantile(1.0 - p, df);
    }
    let (mut low, mut high) = (0.0, 1.0);
    while t_cdf(high, df) < p && high < 1e12 {
        high *= 2.0;
    }
    while high - low > 1e-9 * high.max(1.0) {
        let mid = (low + high) / 2.0;
        if t_cdf(mid, df) < p {
            low = mid;
        } else {
            high = mid;
        }
    }
    (low + high) / 2.0
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, nine terms: relative error near 1e-15).
fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let t = x + 7.5;
    let sum = G[0] + (1..9).map(|i| G[i] / (x + i as f64)).sum::<f64>();
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

/// The regularised incomplete beta function I_x(a, b), by its continued
/// fraction (modified Lentz), on the side where it converges fast.
fn incomplete_beta(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let front =
        (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp();
    if x > (a + 1.0) / (a + b + 2.0) {
        return 1.0 - incomplete_beta(1.0 - x, b, a);
    }
    let tiny = 1e-300;
    let (mut c, mut d) = (1.0, 1.0 - (a + b) * x / (a + 1.0));
    d = 1.0 / if d.abs() < tiny { tiny } else { d };
    let mut f = d;
    for m in 1..300 {
        let m = m as f64;
        for numerator in [
            m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0)),
        ] {
            d = 1.0 + numerator * d;
            d = 1.0 / if d.abs() < tiny { tiny } else { d };
            c = 1.0 + numerator / c;
            c = if c.abs() < tiny { tiny } else { c };
            f *= c * d;
        }
        if (c * d - 1.0).abs() < 1e-14 {
            break;
        }
    }
    front * f / a
}

/// The standard normal quantile (Acklam's rational approximation, relative
/// error below 1.2e-9), for `p` in (0, 1).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    let low = 0.024_25;
    if p < low {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else if p <= 1.0 - low {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        -normal_quantile(1.0 - p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_t_distribution_matches_its_tables() {
        // Two-sided 5% and one-sided 0.1% points, from the printed tables.
        for (df, q975, q999) in [
            (1.0, 12.706, 318.31),
            (3.0, 3.182, 10.215),
            (7.0, 2.365, 4.785),
            (30.0, 2.042, 3.385),
        ] {
            assert!((t_quantile(0.975, df) - q975).abs() < 2e-3, "{df}");
            assert!(
                (t_quantile(0.999, df) - q999).abs() < 2e-2 * q999 / 10.0,
                "{df}"
            );
            assert!((t_cdf(q975, df) - 0.975).abs() < 1e-4, "{df}");
        }
        assert!((t_cdf(0.0, 5.0) - 0.5).abs() < 1e-12);
        // Many degrees of freedom: the normal.
        assert!((t_cdf(1.96, 1e6) - normal_cdf(1.96)).abs() < 1e-5);
    }

    /// The fewest pairs that can reach `confidence` at all.
    fn pairs_needed(confidence: f64) -> usize {
        (1..64)
            .find(|&n| lower_critical(n, (1.0 - confidence) / 2.0).is_some())
            .unwrap_or(64)
    }

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

    #[test]
    fn a_one_sided_p_value_is_small_only_beyond_its_shift() {
        let d: Vec<f64> = (0..20).map(|i| 0.05 + 0.001 * f64::from(i % 5)).collect();
        assert!(p_above(&d, 0.0).unwrap() < 1e-5);
        assert!(p_above(&d, 0.1).unwrap() > 0.99);
        assert!(p_below(&d, 0.1).unwrap() < 1e-5);
        // Every difference on the shift itself: no evidence either way.
        assert_eq!(p_above(&[0.0; 10], 0.0), Some(1.0));
        assert_eq!(p_above(&[], 0.0), None);
    }

    #[test]
    fn the_p_value_agrees_with_the_interval() {
        // The 1 - 2a interval excludes s from below exactly when the test
        // of "at most s" rejects at a.
        for t in 0..50u64 {
            let d: Vec<f64> = (0..15)
                .map(|i| crate::record::random::unit(3, t, i) - 0.3)
                .collect();
            let i = hodges_lehmann(&d, 0.9).unwrap();
            // The exact tail, with room for the last bits of two sums.
            let tail = (1.0 - i.coverage) / 2.0 * (1.0 + 1e-9);
            for s in [-0.2, 0.0, 0.1, 0.2, 0.4] {
                let rejects = p_above(&d, s).unwrap() <= tail;
                assert_eq!(rejects, i.low > s, "t {t} s {s} {i:?}");
            }
        }
    }

    #[test]
    fn the_normal_form_takes_over_smoothly_from_the_exact_counts() {
        let n = MAX_EXACT;
        let max = n * (n + 1) / 2;
        for k in [max / 2 - 2000, max / 2 - 500, max / 2] {
            let exact = signed_rank_cdf(n, k);
            let mean = max as f64 / 2.0;
            let sd = (n as f64 * (n as f64 + 1.0) * (2.0 * n as f64 + 1.0) / 24.0).sqrt();
            let normal = normal_cdf((k as f64 + 0.5 - mean) / sd);
            assert!((exact - normal).abs() < 0.002, "k {k}: {exact} {normal}");
        }
        assert!(hodges_lehmann(&vec![0.01; MAX_EXACT + 10], 0.99).is_some());
    }

    #[test]
    fn the_sign_test_is_exact() {
        assert_eq!(sign_test(0, 5), 1.0);
        assert!((sign_test(5, 5) - 1.0 / 32.0).abs() < 1e-12);
        assert!((sign_test(4, 5) - 6.0 / 32.0).abs() < 1e-12);
        assert!(sign_test(2000, 2000) < 1e-300);
    }

    #[test]
    fn holm_steps_down_and_tarone_drops_what_cannot_reject() {
        assert_eq!(holm(&[0.001, 0.04, 0.03], 0.05), vec![true, false, false]);
        assert_eq!(holm(&[0.001, 0.02, 0.04], 0.05), vec![true, true, true]);
        assert_eq!(holm(&[], 0.05), Vec::<bool>::new());
        // Nine tests that can never reach 0.05/2 leave the tenth at 0.05/1.
        let mut p = vec![1.0; 10];
        let mut smallest = vec![0.25; 10];
        p[0] = 0.03;
        smallest[0] = 1e-6;
        assert!(tarone(&p, &smallest, 0.05)[0]);
        assert!(!holm(&p, 0.05)[0], "Holm over all ten would not reject");
    }

    #[test]
    fn the_normal_functions_are_accurate() {
        assert!((normal_cdf(1.959_964) - 0.975).abs() < 1e-6);
        assert!((normal_cdf(-2.326_348) - 0.01).abs() < 1e-6);
        for p in [1e-6, 0.001, 0.025, 0.3, 0.5, 0.9, 0.999] {
            // The distribution function is good to 1.5e-7 absolute.
            assert!((normal_cdf(normal_quantile(p)) - p).abs() < 2e-7, "{p}");
        }
    }
}
