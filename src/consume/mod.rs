//! Consumption: durable consumers that time every delivery, mark the ledger
//! and acknowledge.

mod pull;

pub use pull::{ConsumerConfig, ConsumerProgress, ConsumerReport, run};
