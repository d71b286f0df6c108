//! `kind = "backpressure"`: keys and checks.

use std::time::Duration;

use crate::profile::shared::{Offer, Paced, take};
use crate::profile::{CommonPlan, Dur, PacedLoad, Problems, Section};

/// The `backpressure` scenario: the same load against a sweep of
/// MaxAckPending values, and optionally against a sweep of AckWait values
/// at a large MaxAckPending, where messages can expire in the client.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The offered load; the consumer's `max_ack_pending` and `ack_wait`
    /// are set per variant.
    pub load: PacedLoad,
    /// One variant each, at the consumer's AckWait.
    pub max_ack_pending: Vec<i64>,
    /// One variant each, at `expiry_max_ack_pending`.
    pub expiry_ack_waits: Vec<Duration>,
    pub expiry_max_ack_pending: i64,
}

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let (mut shared, mut k) = take(section.table, Offer::PACED, section.prefix, problems)?;
    let mut common = shared.common("backpressure", problems);
    let load = shared.paced(&common, Paced::of("backpressure", 2000), problems);
    let given = ["max_ack_pending", "expiry_ack_waits"].map(|key| k.given(key));
    let max_ack_pending = k.get::<Vec<i64>>("max_ack_pending");
    let waits = k.get::<Vec<Dur>>("expiry_ack_waits");
    // A malformed list is refused as it is read, not as missing besides.
    let malformed = (given[0] && max_ack_pending.is_none()) || (given[1] && waits.is_none());
    let max_ack_pending = max_ack_pending.unwrap_or_default();
    let expiry_ack_waits: Vec<Duration> = waits.unwrap_or_default().iter().map(|d| d.0).collect();
    if !malformed && max_ack_pending.is_empty() && expiry_ack_waits.is_empty() {
        k.problem(
            "max_ack_pending",
            "missing; list the MaxAckPending values to sweep, e.g. max_ack_pending = [1, 10, 100, 1000]",
        );
    }
    for (i, &m) in max_ack_pending.iter().enumerate() {
        k.bound(&format!("max_ack_pending[{i}]"), m, 1..=10_000_000, "");
    }
    for (i, w) in expiry_ack_waits.iter().enumerate() {
        let key = format!("expiry_ack_waits[{i}]");
        k.bound(&key, w.as_secs_f64(), 0.001..=3_600.0, " seconds");
    }
    let classes = &load.behaviour.classes;
    if classes
        .iter()
        .any(|c| c.name == "poison" || c.name == "term")
    {
        k.problem(
            "behaviour",
            "backpressure measures completed work: poison and term classes belong in the redelivery scenario",
        );
    }
    let floor = common.duration * 4;
    shared.drain_at_least(&mut common, floor);
    let plan = Plan {
        load,
        max_ack_pending,
        expiry_ack_waits,
        expiry_max_ack_pending: k.within("expiry_max_ack_pending", 10_000, 1..=10_000_000, ""),
    };
    k.finish(problems);
    Some((common, plan))
}
