//! A distribution of signed nanoseconds (early negative, late positive).
//! HdrHistogram holds non-negative values at a relative precision, so an
//! offset would cost all precision near zero; [`Signed`] keeps late values
//! and early magnitudes in two histograms and answers signed quantiles from
//! both. Replay's pacing errors and redelivery lateness are recorded so.

use crate::record::histogram::Recorder;

/// A distribution of signed nanoseconds: late (≥ 0) and early (< 0, kept as
/// magnitudes) in two histograms.
#[derive(Debug, Clone, Default)]
pub struct Signed {
    late: Recorder,
    early: Recorder,
    sum_ns: i128,
    min_ns: i64,
    max_ns: i64,
}

impl Signed {
    pub fn new() -> Self {
        Self::default()
    }

    #[inline]
    pub fn record(&mut self, ns: i64) {
        if self.count() == 0 {
            (self.min_ns, self.max_ns) = (ns, ns);
        } else {
            self.min_ns = self.min_ns.min(ns);
            self.max_ns = self.max_ns.max(ns);
        }
        self.sum_ns += i128::from(ns);
        if ns >= 0 {
            self.late.record(ns as u64);
        } else {
            self.early.record(ns.unsigned_abs());
        }
    }

    pub fn count(&self) -> u64 {
        self.late.count() + self.early.count()
    }

    /// Values ≥ 0, ns.
    pub fn late(&self) -> &Recorder {
        &self.late
    }

    /// Magnitudes of values < 0, ns.
    pub fn early(&self) -> &Recorder {
        &self.early
    }

    pub fn mean_ns(&self) -> f64 {
        match self.count() {
            0 => 0.0,
            n => self.sum_ns as f64 / n as f64,
        }
    }

    /// Smallest (most early) value, exact; 0 when empty.
    pub fn min_ns(&self) -> i64 {
        self.min_ns
    }

    /// Largest (most late) value, exact; 0 when empty.
    pub fn max_ns(&self) -> i64 {
        self.max_ns
    }

    /// The signed value at quantile `q` of all values, to the histograms'
    /// three significant digits; 0 when empty. The early values come first
    /// in signed order, largest magnitude first.
    pub fn quantile_ns(&self, q: f64) -> i64 {
        let (early, late) = (self.early.count(), self.late.count());
        let n = early + late;
        if n == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).clamp(1, n);
        if rank <= early {
            // The (early - rank + 1)-th smallest magnitude.
            let r = early - rank + 1;
            -(self.early.quantile(r as f64 / early as f64) as i64)
        } else {
            let r = rank - early;
            self.late.quantile(r as f64 / late as f64) as i64
        }
    }

    /// The distribution of magnitudes, early and late together.
    pub fn magnitude(&self) -> Recorder {
        let mut all = self.late.clone();
        all.merge(&self.early);
        all
    }

    /// Rebuilds a distribution from its two histograms (a results folder
    /// read back); the exact extremes and mean are then histogram estimates.
    pub fn from_parts(late: Recorder, early: Recorder) -> Self {
        let h = |r: &Recorder| r.histogram().mean() * r.count() as f64;
        let sum = h(&late) - h(&early);
        let min_ns = if early.count() > 0 {
            -(early.histogram().max() as i64)
        } else {
            late.histogram().min() as i64
        };
        let max_ns = if late.count() > 0 {
            late.histogram().max() as i64
        } else {
            -(early.histogram().min() as i64)
        };
        Signed {
            late,
            early,
            sum_ns: sum as i128,
            min_ns,
            max_ns,
        }
    }
}
