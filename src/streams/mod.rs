//! The JetStream side a run leaves marks on: the run-scoped streams and
//! consumers jsbench creates and deletes, a stream read back after a run,
//! and the advisories the server sends about deliveries.

pub mod advisory;
pub mod batches;
pub mod expiry;
pub mod fast_batches;
pub mod pins;
pub mod provision;
pub mod readback;
pub mod schedules;
