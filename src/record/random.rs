//! Seeded, stateless randomness: the same seed and inputs give the same
//! answer on every run and every thread, so a plan (which messages are
//! retried, how large each is, which fail) is known before the run and
//! identical across runs of a profile.

/// splitmix64: a fast, well-mixed 64-bit hash.
#[inline]
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A uniform number in `[0, 1)` for the pair `(a, b)` under `seed`.
#[inline]
pub fn unit(seed: u64, a: u64, b: u64) -> f64 {
    let h = mix(seed ^ mix(a ^ mix(b)));
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// A standard normal number for index `i` under `seed` (Box-Muller over
/// two [`unit`] draws): the noise of the change-point method's synthetic
/// series, in its tests and in benches/changepoint_power.rs alike.
pub fn normal(seed: u64, i: u64) -> f64 {
    let u1 = unit(seed, i, 1).max(1e-12);
    let u2 = unit(seed, i, 2);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// A uniform integer in `0..n` (n > 0) for `(a, b)` under `seed`.
#[inline]
pub fn below(seed: u64, a: u64, b: u64, n: u64) -> u64 {
    (unit(seed, a, b) * n as f64) as u64 % n.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_deterministic_and_roughly_uniform() {
        assert_eq!(unit(7, 1, 2), unit(7, 1, 2));
        assert_ne!(unit(7, 1, 2), unit(8, 1, 2));
        let n = 100_000;
        let below_half = (0..n).filter(|&i| unit(42, 3, i) < 0.5).count();
        assert!(
            (below_half as f64 / n as f64 - 0.5).abs() < 0.01,
            "{below_half}"
        );
        assert!((0..1000).all(|i| below(1, 2, i, 7) < 7));
    }
}
