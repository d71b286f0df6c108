//! `kind = "redelivery"`: keys and checks.

use serde::Deserialize;

use super::arrival::ArrivalSpec;
use super::behaviour::BehaviourSection;
use super::common::{
    ConsumerSection, PublishKeys, SizeSpec, Timing, common_plan, paced_rate, publish_plan,
    require_explicit_ack,
};
use super::{Dur, MsgId, Problems, RedeliveryPlan, read_section};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RedeliverySection {
    name: Option<String>,
    duration: Option<Dur>,
    warmup: Option<Dur>,
    drain_timeout: Option<Dur>,
    rate: Option<u64>,
    #[serde(default)]
    arrival: ArrivalSpec,
    publishers: Option<usize>,
    message_size: Option<SizeSpec>,
    baseline: Option<bool>,
    idempotent: Option<bool>,
    #[serde(default)]
    consumer: ConsumerSection,
    #[serde(default)]
    behaviour: BehaviourSection,
}

pub(super) fn read(
    table: toml::Table,
    prefix: &str,
    problems: &mut Problems,
) -> Option<RedeliveryPlan> {
    let s: RedeliverySection = read_section(table, prefix, problems)?;
    let mut common = common_plan(
        "redelivery",
        Timing {
            name: s.name,
            duration: s.duration,
            warmup: s.warmup,
            drain_timeout: s.drain_timeout,
        },
        prefix,
        problems,
    );
    let (rate, arrival) = paced_rate(s.rate, &s.arrival, &common, prefix, 200, problems);
    let mut publish = publish_plan(
        PublishKeys {
            publishers: s.publishers,
            message_size: s.message_size,
            msg_id: MsgId::None,
            ..Default::default()
        },
        prefix,
        problems,
    );
    publish.arrival = arrival;
    let consumer = s.consumer.validate(prefix, false, problems);
    require_explicit_ack(&consumer, "redelivery", prefix, problems);
    let behaviour = s.behaviour.validate(prefix, &consumer, problems);
    if s.drain_timeout.is_none() {
        // Long enough for a message to run through every planned delay.
        let longest: std::time::Duration = (1..=consumer.max_deliver.max(1) as u32)
            .map(|n| consumer.ack_deadline(n))
            .sum::<std::time::Duration>()
            + behaviour.processing.mean() * 4;
        common.drain_timeout = common
            .drain_timeout
            .max(longest + std::time::Duration::from_secs(10));
    }
    Some(RedeliveryPlan {
        common,
        rate,
        publish,
        consumer,
        behaviour,
        baseline: s.baseline.unwrap_or(true),
        idempotent: s.idempotent.unwrap_or(false),
    })
}
