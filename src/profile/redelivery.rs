//! `kind = "redelivery"`: its keys beside the shared paced load.

use serde::Deserialize;

use super::shared::{Offer, Paced, split};
use super::{Problems, RedeliveryPlan};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RedeliverySection {
    baseline: Option<bool>,
    idempotent: Option<bool>,
}

pub(super) fn read(
    table: toml::Table,
    prefix: &str,
    problems: &mut Problems,
) -> Option<RedeliveryPlan> {
    let (mut shared, s) = split::<RedeliverySection>(table, Offer::PACED, prefix, problems)?;
    let mut common = shared.common("redelivery", problems);
    let load = shared.paced(&common, Paced::of("redelivery", 200), problems);
    if !shared.drain_timeout_given() {
        // Long enough for a message to run through every planned delay.
        let consumer = &load.consumer;
        let longest: std::time::Duration = (1..=consumer.max_deliver.max(1) as u32)
            .map(|n| consumer.ack_deadline(n))
            .sum::<std::time::Duration>()
            + load.behaviour.processing.mean() * 4;
        common.drain_timeout = common
            .drain_timeout
            .max(longest + std::time::Duration::from_secs(10));
    }
    Some(RedeliveryPlan {
        common,
        load,
        baseline: s.baseline.unwrap_or(true),
        idempotent: s.idempotent.unwrap_or(false),
    })
}
