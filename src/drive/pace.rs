//! What the publishers have sent while the publish phase runs, and the
//! rate since the last look: what the progress bar and the live counters
//! show, for a one-stream variant and a fan-out alike.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::load::{Publisher, PublisherProgress};
use crate::system::progress::VariantBar;

pub(super) struct Pace {
    sent: Vec<Arc<PublisherProgress>>,
    started: Instant,
    last: (Instant, u64),
}

impl Pace {
    pub fn of(publishers: &[Publisher]) -> Pace {
        Pace {
            sent: publishers.iter().map(|p| p.progress.clone()).collect(),
            started: Instant::now(),
            last: (Instant::now(), 0),
        }
    }

    /// What this process's publishers have sent so far.
    pub fn local_sent(&self) -> u64 {
        self.sent
            .iter()
            .map(|p| p.sent.load(Ordering::Relaxed))
            .sum()
    }

    /// Shows `sent` and `received` (the whole variant's) on the bar and
    /// the live counters, with the rate since the last look.
    pub fn show(&mut self, bar: &VariantBar, sent: u64, received: u64, in_flight: u64) {
        let now = Instant::now();
        let rate = sent.saturating_sub(self.last.1) as f64
            / now.duration_since(self.last.0).as_secs_f64().max(1e-3);
        self.last = (now, sent);
        crate::system::live::progress(sent, received, in_flight);
        bar.update(self.started.elapsed(), sent, received, rate);
    }
}
