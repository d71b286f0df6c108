//! `kind = "restart"`: its keys beside the shared paced load.

use std::time::Duration;

use serde::Deserialize;

use crate::profile::shared::{Offer, Paced, needs_file_storage, split};
use crate::profile::{CommonPlan, Dur, FaultKind, FaultNode, MsgId, PacedLoad, Problems, Section};

/// The `restart` scenario: a server jsbench started is killed with SIGKILL
/// under load and started again on its store.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Ids are unique and overdue messages are resent
    /// (`publish.resend_after`).
    pub load: PacedLoad,
    /// From the start of the schedule to the kill.
    pub kill_after: Duration,
    /// From the kill to the restart.
    pub down_for: Duration,
    pub node: FaultNode,
    /// What happens to the node: killed, or its routes cut or paused.
    pub fault: FaultKind,
}

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

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    needs_file_storage(
        &section,
        problems,
        "a restart scenario kills the server: its streams need storage = \"file\" to survive",
    );
    let (table, prefix) = (section.table, section.prefix);
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
    crate::profile::common::refuse_direct(
        &load.publish,
        "the restart kills the server and the direct client does not reconnect",
        prefix,
        problems,
    );
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
    let plan = Plan {
        load,
        kill_after,
        down_for,
        node: s.node.unwrap_or(FaultNode::Server),
        fault: s.fault.unwrap_or_default(),
    };
    Some((common, plan))
}
