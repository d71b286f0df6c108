//! Median and spread of a metric measured in several repetitions.
//!
//! A profile with `repeat = N` runs each scenario N times. The number a
//! reader sees (`value`) is the median, because a 2-core machine shared with
//! other work produces the occasional repetition that is far off in one
//! direction, and a mean would follow it. The spread keeps min and max (what
//! `compare`'s regression rule uses: a change must clear the whole range of
//! both runs) and the median absolute deviation, MAD, as the typical
//! distance of a repetition from the median.
//!
//! Why MAD rather than a standard deviation or an interquartile range: with
//! the 3 to 5 repetitions a CI budget allows, one outlier doubles a standard
//! deviation, and quartiles of 3 values depend on the interpolation rule
//! more than on the data. MAD ignores one outlier in three and is defined
//! from two values on (half the range). It is unscaled (not multiplied by
//! 1.4826), so it reads directly in the metric's unit.

use serde::{Deserialize, Serialize};

/// How far a metric's repetitions scatter, in the metric's unit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub min: f64,
    pub max: f64,
    /// Median absolute deviation from the median (unscaled).
    pub mad: f64,
}

impl Spread {
    /// The spread of `values`; `None` when none is finite. Non-finite
    /// values (a rate over a zero-length window) are left out rather than
    /// poisoning the rest.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let finite = finite_sorted(values);
        let center = median_of_sorted(&finite)?;
        let deviations: Vec<f64> = finite.iter().map(|v| (v - center).abs()).collect();
        let mad = median(&deviations)?;
        Some(Spread {
            min: finite[0],
            max: finite[finite.len() - 1],
            mad,
        })
    }
}

/// The median of the finite values (the mean of the middle two for an even
/// count); `None` when there is none.
pub fn median(values: &[f64]) -> Option<f64> {
    median_of_sorted(&finite_sorted(values))
}

fn finite_sorted(values: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v
}

fn median_of_sorted(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[7.0]), Some(7.0));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn median_and_mad_ignore_one_outlier_in_three() {
        // A neighbour's burst makes one repetition five times slower.
        let s = Spread::of(&[200.0, 1000.0, 210.0]).unwrap();
        assert_eq!(median(&[200.0, 1000.0, 210.0]), Some(210.0));
        assert_eq!(s.min, 200.0);
        assert_eq!(s.max, 1000.0);
        // Deviations 10, 790, 0: the typical repetition is 10 away.
        assert_eq!(s.mad, 10.0);
    }

    #[test]
    fn mad_of_two_values_is_half_their_range() {
        let s = Spread::of(&[100.0, 120.0]).unwrap();
        assert_eq!((s.min, s.max, s.mad), (100.0, 120.0, 10.0));
    }

    #[test]
    fn one_value_has_no_spread() {
        let s = Spread::of(&[5.0]).unwrap();
        assert_eq!((s.min, s.max, s.mad), (5.0, 5.0, 0.0));
    }

    #[test]
    fn non_finite_values_are_left_out() {
        let s = Spread::of(&[f64::NAN, 2.0, f64::INFINITY, 4.0]).unwrap();
        assert_eq!((s.min, s.max, s.mad), (2.0, 4.0, 1.0));
        assert_eq!(Spread::of(&[f64::NAN]), None);
        assert_eq!(median(&[f64::NAN, 1.0]), Some(1.0));
    }
}
