//! What several kinds record alike beside [`super::checks`]: the reader
//! of a paced durable
//! whose deliveries are logged and its consumer info sampled, the
//! deliveries and redelivery delays a fate analysis counted, and a check
//! only message ids make possible. One place, so the kinds that share
//! them (publish, restart, resume, backpressure, redelivery, outage, ack,
//! latency) report them the same way.

use std::sync::Arc;
use std::time::Duration;

use crate::consume::fates::Analysis;
use crate::drive::ConsumerSpec;
use crate::profile::{BehaviourPlan, ConsumerPlan, MsgId};
use crate::variant::{Invariant, VariantResult};

/// How often consumer info is sampled while a paced variant runs.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// A durable's clients following `behaviour`, every delivery logged and
/// the durable's info sampled every [`SAMPLE_EVERY`]: the reader of the
/// kinds that judge each message's fate.
pub fn observed(consumer: &ConsumerPlan, behaviour: Arc<BehaviourPlan>) -> ConsumerSpec {
    ConsumerSpec::observed(String::new(), consumer.clone(), behaviour, SAMPLE_EVERY)
}

/// Every delivery the analysis counted: each message times the
/// deliveries it got.
pub fn deliveries(a: &Analysis) -> u64 {
    a.delivered_times
        .iter()
        .map(|(n, m)| u64::from(*n) * m)
        .sum()
}

/// The redelivery delays by cause, measured against the configured ones:
/// their metrics and histograms.
pub fn delays(a: &Analysis, r: &mut VariantResult) {
    let (metrics, histograms) = a.delay_metrics();
    r.metrics.extend(metrics);
    r.histograms.extend(histograms);
}

/// A check of what only a message id lets the server do (flag a
/// duplicate): `actual` must equal `expected` with ids, and without them
/// the check does not apply.
pub fn with_ids(name: &str, msg_id: MsgId, actual: u64, expected: u64) -> Invariant {
    match msg_id {
        MsgId::None => {
            Invariant::not_applicable(name, "no Nats-Msg-Id: the server cannot flag a duplicate")
        }
        MsgId::Unique => Invariant::equal(name, actual, expected),
    }
}
