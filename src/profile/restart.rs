//! `kind = "restart"`: keys and checks.

use std::time::Duration;

use serde::Deserialize;

use super::arrival::ArrivalSpec;
use super::common::{
    ConsumerSection, PublishKeys, SizeSpec, Timing, common_plan, paced_rate, publish_plan,
    require_explicit_ack,
};
use super::{Dur, MsgId, Problems, RestartPlan, read_section};
use super::{FaultKind, FaultNode};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RestartSection {
    name: Option<String>,
    duration: Option<Dur>,
    warmup: Option<Dur>,
    drain_timeout: Option<Dur>,
    rate: Option<u64>,
    #[serde(default)]
    arrival: ArrivalSpec,
    publishers: Option<usize>,
    message_size: Option<SizeSpec>,
    pub_ack_window: Option<usize>,
    pub_ack_timeout: Option<Dur>,
    resend_after: Option<Dur>,
    kill_after: Option<Dur>,
    down_for: Option<Dur>,
    node: Option<FaultNode>,
    fault: Option<FaultKind>,
    #[serde(default)]
    consumer: ConsumerSection,
}

pub(super) fn read(
    table: toml::Table,
    prefix: &str,
    problems: &mut Problems,
) -> Option<RestartPlan> {
    let s: RestartSection = read_section(table, prefix, problems)?;
    let key = |k: &str| format!("{prefix}.{k}");
    let mut common = common_plan(
        "restart",
        Timing {
            name: s.name,
            duration: s.duration,
            warmup: s.warmup,
            drain_timeout: s.drain_timeout,
        },
        prefix,
        problems,
    );
    let (rate, arrival) = paced_rate(s.rate, &s.arrival, &common, prefix, 500, problems);
    let down_for = s.down_for.map(|d| d.0).unwrap_or(Duration::from_secs(1));
    problems.range(
        &key("down_for"),
        down_for.as_secs_f64(),
        0.0,
        600.0,
        " seconds",
    );
    let mut publish = publish_plan(
        PublishKeys {
            publishers: s.publishers,
            message_size: s.message_size,
            msg_id: MsgId::Unique,
            pub_ack_window: s.pub_ack_window,
            // PubAcks stop for the whole outage; give up only well after it.
            pub_ack_timeout: s
                .pub_ack_timeout
                .or(Some(super::Dur(down_for * 4 + Duration::from_secs(10)))),
            ..Default::default()
        },
        prefix,
        problems,
    );
    publish.arrival = arrival;
    let resend_after = s
        .resend_after
        .map(|d| d.0)
        .unwrap_or(Duration::from_millis(500));
    problems.range(
        &key("resend_after"),
        resend_after.as_secs_f64(),
        0.01,
        60.0,
        " seconds",
    );
    publish.resend_after = Some(resend_after);
    let consumer = s.consumer.validate(prefix, false, problems);
    require_explicit_ack(&consumer, "restart", prefix, problems);
    let kill_after = s.kill_after.map(|d| d.0).unwrap_or_default();
    if s.kill_after.is_none() {
        problems.push(
            key("kill_after"),
            "missing; when the server dies, from the start, e.g. kill_after = \"2s\"",
        );
    } else if kill_after >= common.warmup + common.duration {
        problems.push(
            key("kill_after"),
            "must come before the end of warmup + duration, while the load runs",
        );
    }
    if s.drain_timeout.is_none() {
        common.drain_timeout = common
            .drain_timeout
            .max(consumer.ack_wait * 2 + down_for * 2);
    }
    Some(RestartPlan {
        common,
        rate,
        publish,
        consumer,
        kill_after,
        down_for,
        node: s.node.unwrap_or(FaultNode::Server),
        fault: s.fault.unwrap_or_default(),
    })
}
