//! `kind = "backpressure"`: keys and checks.

use std::time::Duration;

use serde::Deserialize;

use crate::profile::shared::{Offer, Paced, split};
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BackpressureSection {
    max_ack_pending: Option<Vec<i64>>,
    expiry_ack_waits: Option<Vec<Dur>>,
    expiry_max_ack_pending: Option<i64>,
}

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let (table, prefix) = (section.table, section.prefix);
    let (mut shared, s) = split::<BackpressureSection>(table, Offer::PACED, prefix, problems)?;
    let mut common = shared.common("backpressure", problems);
    let load = shared.paced(&common, Paced::of("backpressure", 2000), problems);
    let max_ack_pending = s.max_ack_pending.unwrap_or_default();
    let expiry_ack_waits: Vec<_> = s
        .expiry_ack_waits
        .unwrap_or_default()
        .into_iter()
        .map(|d| d.0)
        .collect();
    if max_ack_pending.is_empty() && expiry_ack_waits.is_empty() {
        problems.push(
            format!("{prefix}.max_ack_pending"),
            "missing; list the MaxAckPending values to sweep, e.g. max_ack_pending = [1, 10, 100, 1000]",
        );
    }
    for (i, m) in max_ack_pending.iter().enumerate() {
        problems.range(
            &format!("{prefix}.max_ack_pending[{i}]"),
            *m,
            1,
            10_000_000,
            "",
        );
    }
    for (i, w) in expiry_ack_waits.iter().enumerate() {
        problems.range(
            &format!("{prefix}.expiry_ack_waits[{i}]"),
            w.as_secs_f64(),
            0.001,
            3_600.0,
            " seconds",
        );
    }
    let expiry_max_ack_pending = s.expiry_max_ack_pending.unwrap_or(10_000);
    problems.range(
        &format!("{prefix}.expiry_max_ack_pending"),
        expiry_max_ack_pending,
        1,
        10_000_000,
        "",
    );
    if load
        .behaviour
        .classes
        .iter()
        .any(|c| c.name == "poison" || c.name == "term")
    {
        problems.push(
            format!("{prefix}.behaviour"),
            "backpressure measures completed work: poison and term classes belong in the redelivery scenario",
        );
    }
    if !shared.drain_timeout_given() {
        common.drain_timeout = common.drain_timeout.max(common.duration * 4);
    }
    let plan = Plan {
        load,
        max_ack_pending,
        expiry_ack_waits,
        expiry_max_ack_pending,
    };
    Some((common, plan))
}
