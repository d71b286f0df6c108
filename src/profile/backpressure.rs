//! `kind = "backpressure"`: keys and checks.

use serde::Deserialize;

use super::arrival::ArrivalSpec;
use super::behaviour::BehaviourSection;
use super::common::{
    ConsumerSection, PublishKeys, SizeSpec, Timing, common_plan, paced_rate, publish_plan,
    require_explicit_ack,
};
use super::{BackpressurePlan, Dur, MsgId, Problems, read_section};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BackpressureSection {
    name: Option<String>,
    duration: Option<Dur>,
    warmup: Option<Dur>,
    drain_timeout: Option<Dur>,
    rate: Option<u64>,
    #[serde(default)]
    arrival: ArrivalSpec,
    publishers: Option<usize>,
    message_size: Option<SizeSpec>,
    max_ack_pending: Option<Vec<i64>>,
    expiry_ack_waits: Option<Vec<Dur>>,
    expiry_max_ack_pending: Option<i64>,
    #[serde(default)]
    consumer: ConsumerSection,
    #[serde(default)]
    behaviour: BehaviourSection,
}

pub(super) fn read(
    table: toml::Table,
    prefix: &str,
    problems: &mut Problems,
) -> Option<BackpressurePlan> {
    let s: BackpressureSection = read_section(table, prefix, problems)?;
    let mut common = common_plan(
        "backpressure",
        Timing {
            name: s.name,
            duration: s.duration,
            warmup: s.warmup,
            drain_timeout: s.drain_timeout,
        },
        prefix,
        problems,
    );
    let (rate, arrival) = paced_rate(s.rate, &s.arrival, &common, prefix, 2000, problems);
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
    require_explicit_ack(&consumer, "backpressure", prefix, problems);
    let behaviour = s.behaviour.validate(prefix, &consumer, problems);
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
    if behaviour
        .classes
        .iter()
        .any(|c| c.name == "poison" || c.name == "term")
    {
        problems.push(
            format!("{prefix}.behaviour"),
            "backpressure measures completed work: poison and term classes belong in the redelivery scenario",
        );
    }
    if s.drain_timeout.is_none() {
        common.drain_timeout = common.drain_timeout.max(common.duration * 4);
    }
    Some(BackpressurePlan {
        common,
        rate,
        publish,
        consumer,
        behaviour,
        max_ack_pending,
        expiry_ack_waits,
        expiry_max_ack_pending,
    })
}
