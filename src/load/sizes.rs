//! Payload sizes per message, drawn from the profile's distribution by a
//! seeded hash of the message number: a retry has its original's size, and
//! every run of a profile sends the same sizes.

use crate::profile::SizePlan;
use crate::record::random;

#[inline]
pub fn message_size(plan: &SizePlan, seed: u64, publisher: u16, message: u64) -> usize {
    match *plan {
        SizePlan::Fixed(n) => n,
        SizePlan::Uniform { min, max } => {
            min + random::below(
                seed ^ 0x5123,
                u64::from(publisher),
                message,
                (max - min + 1) as u64,
            ) as usize
        }
        SizePlan::Exponential { mean, min, max } => {
            let u = random::unit(seed ^ 0x5124, u64::from(publisher), message);
            let x = -(mean as f64) * (1.0 - u).ln();
            (x as usize).clamp(min, max)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_their_distribution() {
        assert_eq!(message_size(&SizePlan::Fixed(128), 1, 0, 5), 128);
        let uniform = SizePlan::Uniform { min: 100, max: 200 };
        let sizes: Vec<usize> = (0..10_000)
            .map(|m| message_size(&uniform, 1, 0, m))
            .collect();
        assert!(sizes.iter().all(|s| (100..=200).contains(s)));
        let mean = sizes.iter().sum::<usize>() as f64 / sizes.len() as f64;
        assert!((mean - 150.0).abs() < 2.0, "{mean}");
        assert!(
            sizes.contains(&100) && sizes.contains(&200),
            "both ends reachable"
        );

        let exp = SizePlan::Exponential {
            mean: 1_000,
            min: 24,
            max: 100_000,
        };
        let sizes: Vec<usize> = (0..20_000).map(|m| message_size(&exp, 2, 0, m)).collect();
        let mean = sizes.iter().sum::<usize>() as f64 / sizes.len() as f64;
        assert!((mean - 1_000.0).abs() < 50.0, "{mean}");
        assert_eq!(message_size(&exp, 2, 0, 77), message_size(&exp, 2, 0, 77));
    }
}
