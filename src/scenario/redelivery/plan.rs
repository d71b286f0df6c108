//! `kind = "redelivery"`: its keys beside the shared paced load.

use serde::Deserialize;

use crate::profile::shared::{Offer, Paced, split};
use crate::profile::{CommonPlan, PacedLoad, Problems, Section};

/// The `redelivery` scenario: load at a fixed rate, consumers following a
/// behaviour plan, and (optionally first) the same load all acked.
#[derive(Debug, Clone)]
pub struct Plan {
    pub load: PacedLoad,
    /// Run a clean all-ack variant first, for the overhead.
    pub baseline: bool,
    /// Handlers with a dedup store: work redelivered after it was done
    /// (an ack deadline that expired mid-work) is not applied again.
    pub idempotent: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RedeliverySection {
    baseline: Option<bool>,
    idempotent: Option<bool>,
}

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let (table, prefix) = (section.table, section.prefix);
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
    let plan = Plan {
        load,
        baseline: s.baseline.unwrap_or(true),
        idempotent: s.idempotent.unwrap_or(false),
    };
    Some((common, plan))
}
