//! `kind = "restart"`: its keys beside the shared paced load.

use std::time::Duration;

use serde::Deserialize;

use super::shared::{Offer, Paced, split};
use super::{Dur, FaultKind, FaultNode, MsgId, Problems, RestartPlan};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RestartSection {
    resend_after: Option<Dur>,
    kill_after: Option<Dur>,
    down_for: Option<Dur>,
    node: Option<FaultNode>,
    fault: Option<FaultKind>,
}

/// Restart's publishers set their window and timeout; nothing in the
/// client's hands is planned to fail.
const OFFER: Offer = Offer::PACED
    .and(&["pub_ack_window", "pub_ack_timeout"])
    .less(&["behaviour"]);

pub(super) fn read(
    table: toml::Table,
    prefix: &str,
    problems: &mut Problems,
) -> Option<RestartPlan> {
    let (mut shared, s) = split::<RestartSection>(table, OFFER, prefix, problems)?;
    let key = |k: &str| format!("{prefix}.{k}");
    let mut common = shared.common("restart", problems);
    let down_for = s.down_for.map(|d| d.0).unwrap_or(Duration::from_secs(1));
    problems.range(
        &key("down_for"),
        down_for.as_secs_f64(),
        0.0,
        600.0,
        " seconds",
    );
    let mut load = shared.paced(
        &common,
        Paced {
            // Unique ids: a resend must find its original stored.
            msg_id: MsgId::Unique,
            // PubAcks stop for the whole outage; give up only well after it.
            pub_ack_timeout: Some(down_for * 4 + Duration::from_secs(10)),
            ..Paced::of("restart", 500)
        },
        problems,
    );
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
    load.publish.resend_after = Some(resend_after);
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
    if !shared.drain_timeout_given() {
        common.drain_timeout = common
            .drain_timeout
            .max(load.consumer.ack_wait * 2 + down_for * 2);
    }
    Some(RestartPlan {
        common,
        load,
        kill_after,
        down_for,
        node: s.node.unwrap_or(FaultNode::Server),
        fault: s.fault.unwrap_or_default(),
    })
}
