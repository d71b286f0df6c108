//! Counts per time bucket (per second by default): throughput over time, the
//! picture that shows a stall which an average hides.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// Start of bucket 0, ns on [`crate::record::clock`].
    pub origin_ns: u64,
    pub bucket_ns: u64,
    pub counts: Vec<u64>,
}

/// Per second from 0.
impl Default for Timeline {
    fn default() -> Self {
        Timeline::per_second(0)
    }
}

impl Timeline {
    pub fn per_second(origin_ns: u64) -> Self {
        Timeline {
            origin_ns,
            bucket_ns: 1_000_000_000,
            counts: Vec::new(),
        }
    }

    /// Counts one event at `now_ns`; events before the origin land in bucket 0.
    #[inline]
    pub fn mark(&mut self, now_ns: u64) {
        let i = (now_ns.saturating_sub(self.origin_ns) / self.bucket_ns) as usize;
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += 1;
    }

    pub fn merge(&mut self, other: &Timeline) {
        debug_assert_eq!(self.bucket_ns, other.bucket_ns);
        debug_assert_eq!(self.origin_ns, other.origin_ns);
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (m, t) in self.counts.iter_mut().zip(&other.counts) {
            *m += t;
        }
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_by_second_and_merges() {
        let mut a = Timeline::per_second(10_000_000_000);
        a.mark(10_000_000_000);
        a.mark(10_999_999_999);
        a.mark(12_500_000_000);
        let mut b = Timeline::per_second(10_000_000_000);
        b.mark(11_000_000_000);
        b.mark(5); // before the origin
        a.merge(&b);
        assert_eq!(a.counts, vec![3, 1, 1]);
        assert_eq!(a.total(), 5);
    }
}
