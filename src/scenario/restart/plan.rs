//! `kind = "restart"`: its keys beside the shared paced load.

use std::time::Duration;

use crate::profile::shared::{Offer, Paced, moment, needs_file_storage, take};
use crate::profile::{CommonPlan, FaultKind, FaultNode, MsgId, PacedLoad, Problems, Section};

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
    let (mut shared, mut k) = take(section.table, OFFER, section.prefix, problems)?;
    let mut common = shared.common("restart", problems);
    let (secs, ms) = (Duration::from_secs, Duration::from_millis);
    let down_for = k.duration("down_for", secs(1), Duration::ZERO..=secs(600));
    let mut load = shared.paced(
        &common,
        Paced {
            // Unique ids: a resend must find its original stored.
            msg_id: MsgId::Unique,
            // PubAcks stop for the whole outage; give up only well after it.
            pub_ack_timeout: Some(down_for * 4 + secs(10)),
            ..Paced::of("restart", 500)
        },
        problems,
    );
    let resend_after = k.duration("resend_after", ms(500), ms(10)..=secs(60));
    load.publish.resend_after = Some(resend_after);
    crate::profile::publish::refuse_direct(
        &load.publish,
        "the restart kills the server and the direct client does not reconnect",
        section.prefix,
        problems,
    );
    let kill_after = moment(
        &mut k,
        "kill_after",
        &common,
        Some("when the server dies, from the start, e.g. kill_after = \"2s\""),
    );
    shared.drain_at_least(&mut common, load.consumer.ack_wait * 2 + down_for * 2);
    let plan = Plan {
        load,
        kill_after: kill_after.unwrap_or_default(),
        down_for,
        node: k.or("node", FaultNode::Server),
        fault: k.or("fault", FaultKind::default()),
    };
    k.finish(problems);
    Some((common, plan))
}
