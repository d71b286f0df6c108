//! The recording ground: one clock, the payload stamp, the open-loop
//! schedule and its seeded randomness, and the hot-path recorders
//! (histograms, the ledger and its tallies, timelines) with the named
//! metrics and spreads they become.

pub mod clock;
pub mod histogram;
pub mod ledger;
pub mod metrics;
pub mod names;
pub mod random;
pub mod schedule;
pub mod signed;
pub mod spread;
pub mod stamp;
pub mod tally;
pub mod timeline;
pub mod tsc;
