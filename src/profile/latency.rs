//! `kind = "latency"`: keys and checks.

use serde::Deserialize;

use super::common::{ConsumerSection, PublishKeys, SizeSpec, Timing, common_plan, publish_plan};
use super::{Dur, LatencyPlan, MsgId, Problems, read_section};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LatencySection {
    name: Option<String>,
    duration: Option<Dur>,
    warmup: Option<Dur>,
    drain_timeout: Option<Dur>,
    rates: Option<Vec<u64>>,
    publishers: Option<usize>,
    message_size: Option<SizeSpec>,
    #[serde(default = "default_msg_id")]
    msg_id: MsgId,
    pub_ack_window: Option<usize>,
    pub_ack_timeout: Option<Dur>,
    #[serde(default)]
    consumer: ConsumerSection,
}

fn default_msg_id() -> MsgId {
    MsgId::None
}

/// Highest rate a latency variant may ask for.
const MAX_RATE: u64 = 10_000_000;

pub(super) fn read(
    table: toml::Table,
    prefix: &str,
    problems: &mut Problems,
) -> Option<LatencyPlan> {
    let s: LatencySection = read_section(table, prefix, problems)?;
    let common = common_plan(
        "latency",
        Timing {
            name: s.name,
            duration: s.duration,
            warmup: s.warmup,
            drain_timeout: s.drain_timeout,
        },
        prefix,
        problems,
    );
    let rates = s.rates.unwrap_or_default();
    if rates.is_empty() {
        problems.push(
            format!("{prefix}.rates"),
            "missing or empty; list total msg/s per variant, e.g. rates = [1000, 10000]",
        );
    }
    for (i, &rate) in rates.iter().enumerate() {
        problems.range(&format!("{prefix}.rates[{i}]"), rate, 1, MAX_RATE, " msg/s");
    }
    let mut sorted = rates.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != rates.len() {
        problems.push(
            format!("{prefix}.rates"),
            "lists a rate twice; each rate is one variant",
        );
    }
    let publish = publish_plan(
        PublishKeys {
            publishers: s.publishers,
            message_size: s.message_size,
            msg_id: s.msg_id,
            pub_ack_window: s.pub_ack_window,
            pub_ack_timeout: s.pub_ack_timeout,
            ..Default::default()
        },
        prefix,
        problems,
    );
    let consumer = s.consumer.validate(prefix, false, problems);
    // Its checks count acks against deliveries and ask the server for
    // nothing pending: both need every delivery acked on its own.
    super::common::require_explicit_ack(&consumer, "latency", prefix, problems);
    let messages = rates
        .iter()
        .map(|&r| r as f64 * (common.duration + common.warmup).as_secs_f64())
        .fold(0.0, f64::max);
    if messages > 500e6 {
        problems.push(
            format!("{prefix}.duration"),
            format!(
                "a variant would publish {messages:.0} messages; the ledger holds at most 500 million per variant"
            ),
        );
    }
    Some(LatencyPlan {
        common,
        rates,
        publish,
        consumer,
    })
}
