//! The search for the highest rate a scenario sustains: bracket upward by
//! doubling from the lowest rate, bisect between the highest rate that
//! passed and the lowest that failed until they are within the precision,
//! then run the answer again to confirm it. A confirmation that fails
//! counts as a failure at that rate, and the search goes on below it.
//!
//! Only the order of probes lives here; what a probe is (a variant run)
//! and what passing means (schedule kept, nothing lost, SLO held) is the
//! scenario's.

/// Where a search stands.
#[derive(Debug, Clone)]
pub struct RateSearch {
    min: u64,
    max: u64,
    /// Relative width at which bisection stops, e.g. 0.05.
    precision: f64,
    /// Every probe so far: rate and whether it passed.
    tried: Vec<(u64, bool)>,
    /// A confirmation of this rate is the next probe's meaning.
    confirming: Option<u64>,
    /// The confirmed answer, or `Some(None)` when nothing passed.
    answer: Option<Option<u64>>,
}

/// Confirmations a search may fail before it gives up on confirming.
const MAX_CONFIRMATIONS: usize = 3;

impl RateSearch {
    pub fn new(min: u64, max: u64, precision: f64) -> Self {
        RateSearch {
            min: min.max(1),
            max: max.max(min.max(1)),
            precision,
            tried: Vec::new(),
            confirming: None,
            answer: None,
        }
    }

    /// The highest rate that passed, and the lowest that failed above it.
    fn bounds(&self) -> (Option<u64>, Option<u64>) {
        let fail = self.tried.iter().filter(|t| !t.1).map(|t| t.0).min();
        let pass = self
            .tried
            .iter()
            .filter(|t| t.1 && fail.is_none_or(|f| t.0 < f))
            .map(|t| t.0)
            .max();
        (pass, fail)
    }

    /// The next rate to try; `None` once the search has its answer.
    pub fn next_rate(&mut self) -> Option<u64> {
        if self.answer.is_some() {
            return None;
        }
        let (pass, fail) = self.bounds();
        let confirmations = self.tried.len() - self.distinct();
        let next = match (pass, fail) {
            (None, Some(_)) => {
                // The lowest rate failed: nothing is sustainable in range.
                self.answer = Some(None);
                return None;
            }
            (None, None) => self.min,
            (Some(p), None) if p < self.max => (p * 2).min(self.max),
            (Some(p), Some(f)) if (f - p) as f64 > self.precision * p as f64 => p + (f - p) / 2,
            (Some(p), _) => {
                if self.tried.iter().filter(|t| t.0 == p).count() > 1
                    || confirmations >= MAX_CONFIRMATIONS
                {
                    // Passed twice (found and confirmed), or confirmed
                    // often enough: the answer.
                    self.answer = Some(Some(p));
                    return None;
                }
                self.confirming = Some(p);
                p
            }
        };
        Some(next)
    }

    /// Probes that repeated a rate.
    fn distinct(&self) -> usize {
        let mut rates: Vec<u64> = self.tried.iter().map(|t| t.0).collect();
        rates.sort_unstable();
        rates.dedup();
        rates.len()
    }

    /// Records a probe of `rate`. A failed confirmation fails the rate for
    /// good: every earlier pass at it is forgotten.
    pub fn record(&mut self, rate: u64, passed: bool) {
        if self.confirming.take() == Some(rate) && !passed {
            for t in self.tried.iter_mut().filter(|t| t.0 == rate) {
                t.1 = false;
            }
        }
        self.tried.push((rate, passed));
    }

    /// Whether the rate was probed to confirm an earlier pass.
    pub fn is_confirmation(&self, rate: u64) -> bool {
        self.tried.iter().any(|t| t.0 == rate)
    }

    /// The highest sustainable rate, once found (`None` inside when even
    /// the lowest failed).
    pub fn answer(&self) -> Option<Option<u64>> {
        self.answer
    }

    /// The lowest rate that failed above the answer: where the limit was
    /// met.
    pub fn first_failure(&self) -> Option<u64> {
        self.bounds().1
    }

    pub fn tried(&self) -> &[(u64, bool)] {
        &self.tried
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(mut s: RateSearch, passes: impl Fn(u64, usize) -> bool) -> RateSearch {
        let mut n = 0;
        while let Some(rate) = s.next_rate() {
            s.record(rate, passes(rate, n));
            n += 1;
            assert!(n < 50, "the search ends: {:?}", s.tried());
        }
        s
    }

    #[test]
    fn brackets_bisects_and_confirms_below_the_knee() {
        let s = run(RateSearch::new(1000, 100_000, 0.05), |r, _| r <= 13_700);
        let answer = s.answer().unwrap().unwrap();
        assert!(
            answer <= 13_700 && answer as f64 >= 13_700.0 * 0.95,
            "{answer}"
        );
        let rates: Vec<u64> = s.tried().iter().map(|t| t.0).collect();
        // Doubling first, then halving the gap, the answer run twice.
        assert_eq!(&rates[..5], [1000, 2000, 4000, 8000, 16_000]);
        assert_eq!(rates.iter().filter(|&&r| r == answer).count(), 2);
        assert_eq!(
            s.first_failure(),
            rates.iter().copied().filter(|&r| r > 13_700).min()
        );
    }

    #[test]
    fn the_maximum_passing_is_the_answer_and_the_minimum_failing_is_none() {
        let s = run(RateSearch::new(1000, 5000, 0.05), |_, _| true);
        assert_eq!(s.answer(), Some(Some(5000)));
        assert_eq!(s.first_failure(), None);
        let s = run(RateSearch::new(1000, 5000, 0.05), |_, _| false);
        assert_eq!(s.answer(), Some(None));
        assert_eq!(s.tried(), [(1000, false)]);
    }

    #[test]
    fn a_failed_confirmation_moves_the_answer_down() {
        // 12,000 passes once and then never again: a flaky knee.
        let s = run(RateSearch::new(1000, 100_000, 0.05), |r, n| {
            r <= 11_000 || (r <= 12_000 && n < 7)
        });
        let answer = s.answer().unwrap().unwrap();
        assert!(answer <= 12_000, "{answer}: {:?}", s.tried());
        let confirmed = s.tried().iter().filter(|t| t.0 == answer && t.1).count();
        assert_eq!(confirmed, 2, "{:?}", s.tried());
    }
}
