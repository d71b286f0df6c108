//! `kind = "redelivery"`: its keys beside the shared paced load.

use crate::profile::shared::{Offer, Paced, take};
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

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let (mut shared, mut k) = take(section.table, Offer::PACED, section.prefix, problems)?;
    let mut common = shared.common("redelivery", problems);
    let load = shared.paced(&common, Paced::of("redelivery", 200), problems);
    // Long enough for a message to run through every planned delay.
    shared.drain_at_least(&mut common, load.every_delivery());
    let plan = Plan {
        load,
        baseline: k.or("baseline", true),
        idempotent: k.or("idempotent", false),
    };
    k.finish(problems);
    Some((common, plan))
}
