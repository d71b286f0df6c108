//! Intended send times of irregular arrival patterns, as offsets from the
//! schedule's start.
//!
//! A Poisson process has no closed form for "when is message *j* due": each
//! time is the sum of the gaps before it. The offsets are therefore computed
//! once, before the publishers start, and the pacer only looks them up; the
//! steady pattern keeps its closed form (`j / rate`) and needs no table.
//! Random gaps come from a seeded hash of the message number, so the same
//! profile gives the same pattern on every run and every machine.

use std::time::Duration;

use super::ArrivalPlan;
use crate::record::random;

/// More offsets than this are refused (80 MB of table): a pattern that dense
/// belongs to a steady rate.
pub const MAX_ARRIVALS: u64 = 10_000_000;

/// Offsets (ns from the start) of every message a pattern sends within
/// `span`, or `None` for the steady pattern, and for a Poisson pattern
/// without a rate.
pub fn arrival_offsets(plan: &ArrivalPlan, rate: Option<u64>, span: Duration) -> Option<Vec<u64>> {
    Some(Arrivals::new(plan, rate, span)?.collect())
}

/// How many messages a pattern sends within `span` (the steady pattern:
/// `rate × span`, rounded), without building the table.
pub fn arrival_count(plan: &ArrivalPlan, rate: Option<u64>, span: Duration) -> u64 {
    match Arrivals::new(plan, rate, span) {
        Some(a) => a.count() as u64,
        None => rate.map_or(0, |r| (r as f64 * span.as_secs_f64()).round() as u64),
    }
}

/// The offsets of a pattern, one message at a time.
struct Arrivals<'a> {
    plan: &'a ArrivalPlan,
    /// Mean gap of a Poisson pattern, ns.
    mean_gap_ns: f64,
    span_ns: u64,
    /// Offset of the next message.
    next_ns: u64,
    /// Messages produced so far.
    j: u64,
}

impl<'a> Arrivals<'a> {
    fn new(plan: &'a ArrivalPlan, rate: Option<u64>, span: Duration) -> Option<Self> {
        let mean_gap_ns = match plan {
            ArrivalPlan::Steady => return None,
            ArrivalPlan::Poisson { .. } => 1e9 / rate.filter(|r| *r > 0)? as f64,
            _ => 0.0,
        };
        Some(Arrivals {
            plan,
            mean_gap_ns,
            span_ns: span.as_nanos().min(u128::from(u64::MAX)) as u64,
            next_ns: 0,
            j: 0,
        })
    }

    /// The gap after message `j`, sent at `at_ns`.
    fn gap_after(&self, j: u64, at_ns: u64) -> u64 {
        match self.plan {
            // Never built for steady (see `new`): it has a closed form.
            ArrivalPlan::Steady => 0,
            ArrivalPlan::Poisson { seed } => {
                // Inverse transform of a uniform draw: -ln(1 - u) · mean.
                let u = random::unit(*seed, 0xA771_7A15, j);
                (-(1.0 - u).ln() * self.mean_gap_ns) as u64
            }
            ArrivalPlan::Bursts {
                size,
                spacing,
                pause,
            } => {
                if (j + 1).is_multiple_of((*size).max(1)) {
                    pause.as_nanos() as u64
                } else {
                    spacing.as_nanos() as u64
                }
            }
            ArrivalPlan::Gaps(gaps) => gaps
                .get((j % gaps.len().max(1) as u64) as usize)
                .map_or(0, |g| g.as_nanos() as u64),
            ArrivalPlan::Steps(steps) => {
                // The step the message falls in; the last one holds after.
                let mut start = 0u64;
                let mut rate = steps.last().map_or(1, |s| s.0);
                for &(r, t) in steps {
                    let end = start + t.as_nanos() as u64;
                    if at_ns < end {
                        rate = r;
                        break;
                    }
                    start = end;
                }
                (1e9 / rate.max(1) as f64) as u64
            }
            ArrivalPlan::Ramp { from, to } => {
                let progress = at_ns as f64 / self.span_ns.max(1) as f64;
                let rate = *from as f64 + (*to as f64 - *from as f64) * progress.min(1.0);
                (1e9 / rate.max(1.0)) as u64
            }
        }
    }
}

impl Iterator for Arrivals<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        if self.next_ns >= self.span_ns || self.j >= MAX_ARRIVALS {
            return None;
        }
        let at = self.next_ns;
        self.next_ns = at.saturating_add(self.gap_after(self.j, at));
        self.j += 1;
        Some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gaps(offsets: &[u64]) -> Vec<u64> {
        offsets.windows(2).map(|w| w[1] - w[0]).collect()
    }

    #[test]
    fn steady_has_no_table_but_a_count() {
        let span = Duration::from_secs(2);
        assert_eq!(arrival_offsets(&ArrivalPlan::Steady, Some(100), span), None);
        assert_eq!(arrival_count(&ArrivalPlan::Steady, Some(100), span), 200);
    }

    #[test]
    fn poisson_has_the_mean_rate_exponential_gaps_and_repeats_per_seed() {
        let plan = ArrivalPlan::Poisson { seed: 7 };
        let span = Duration::from_secs(100);
        let offsets = arrival_offsets(&plan, Some(1_000), span).unwrap();
        assert_eq!(offsets[0], 0, "the first message at the start");
        assert!(offsets.windows(2).all(|w| w[0] <= w[1]), "never backwards");
        assert!(
            *offsets.last().unwrap() < 100_000_000_000,
            "inside the span"
        );
        let n = offsets.len() as f64;
        assert!((n - 100_000.0).abs() < 1_500.0, "about rate × span: {n}");
        let g = gaps(&offsets);
        let mean = g.iter().sum::<u64>() as f64 / g.len() as f64;
        assert!((mean - 1e6).abs() < 2e4, "mean gap 1 ms: {mean}");
        // Exponential: P(gap > mean) = 1/e, P(gap > 3·mean) = e^-3.
        let above = |t: f64| g.iter().filter(|&&x| x as f64 > t).count() as f64 / g.len() as f64;
        assert!((above(1e6) - (-1f64).exp()).abs() < 0.01, "{}", above(1e6));
        assert!((above(3e6) - (-3f64).exp()).abs() < 0.005, "{}", above(3e6));
        assert!(above(0.0) > 0.99, "gaps are not zero");
        assert_eq!(arrival_offsets(&plan, Some(1_000), span).unwrap(), offsets);
        assert_eq!(
            arrival_count(&plan, Some(1_000), span),
            offsets.len() as u64
        );
        let other = arrival_offsets(&ArrivalPlan::Poisson { seed: 8 }, Some(1_000), span);
        assert_ne!(
            other.unwrap()[..10],
            offsets[..10],
            "another seed, another pattern"
        );
        assert_eq!(arrival_offsets(&plan, None, span), None, "needs a rate");
    }

    #[test]
    fn bursts_are_spaced_and_paused() {
        let plan = ArrivalPlan::Bursts {
            size: 3,
            spacing: Duration::from_millis(1),
            pause: Duration::from_millis(100),
        };
        let offsets = arrival_offsets(&plan, None, Duration::from_millis(250)).unwrap();
        let ms: Vec<u64> = offsets.iter().map(|o| o / 1_000_000).collect();
        assert_eq!(ms, [0, 1, 2, 102, 103, 104, 204, 205, 206]);
    }

    #[test]
    fn explicit_gaps_repeat_in_order_until_the_span_ends() {
        let plan = ArrivalPlan::Gaps(vec![
            Duration::from_millis(1),
            Duration::from_millis(2),
            Duration::from_millis(10),
        ]);
        let offsets = arrival_offsets(&plan, None, Duration::from_millis(30)).unwrap();
        let ms: Vec<u64> = offsets.iter().map(|o| o / 1_000_000).collect();
        assert_eq!(ms, [0, 1, 3, 13, 14, 16, 26, 27, 29]);
        assert_eq!(arrival_count(&plan, None, Duration::from_millis(30)), 9);
    }

    #[test]
    fn steps_hold_each_rate_for_its_time_and_a_ramp_climbs() {
        let plan = ArrivalPlan::Steps(vec![
            (10, Duration::from_secs(1)),
            (100, Duration::from_secs(1)),
        ]);
        let offsets = arrival_offsets(&plan, None, Duration::from_secs(3)).unwrap();
        let in_second = |s: u64| offsets.iter().filter(|&&o| o / 1_000_000_000 == s).count();
        // 10 in the first second, 100 in the second, and the last rate holds.
        assert_eq!((in_second(0), in_second(1), in_second(2)), (10, 100, 100));
        let ramp = ArrivalPlan::Ramp { from: 100, to: 300 };
        let offsets = arrival_offsets(&ramp, None, Duration::from_secs(2)).unwrap();
        let first: usize = offsets.iter().filter(|&&o| o < 1_000_000_000).count();
        let second = offsets.len() - first;
        // Mean rates 150 and 250 over the two halves.
        assert!((145..=155).contains(&first), "{first}");
        assert!((245..=255).contains(&second), "{second}");
    }

    #[test]
    fn gapless_patterns_stop_at_the_cap() {
        let plan = ArrivalPlan::Gaps(vec![Duration::ZERO]);
        assert_eq!(
            arrival_count(&plan, None, Duration::from_secs(1)),
            MAX_ARRIVALS
        );
    }
}
