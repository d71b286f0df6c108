//! `kind = "resume"`: its keys beside the shared paced load.

use std::time::Duration;

use crate::profile::shared::{Offer, Paced, moment, take, variants};
use crate::profile::{CommonPlan, CrashPoint, PacedLoad, Problems, Section};

/// The `resume` scenario: a consumer client crashes under load with work
/// in hand, and a new client binds to the same durable.
#[derive(Debug, Clone)]
pub struct Plan {
    pub load: PacedLoad,
    /// From the start of the schedule to the crash.
    pub crash_after: Duration,
    /// One variant each.
    pub crash_at: Vec<CrashPoint>,
    /// From the crash to the new client's bind (a restart's downtime).
    pub rebind_after: Duration,
    /// Each crash point runs once per entry: handlers without (false) and
    /// with (true) a dedup store that makes their work idempotent.
    pub idempotent: Vec<bool>,
}

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let (mut shared, mut k) = take(section.table, Offer::PACED, section.prefix, problems)?;
    let mut common = shared.common("resume", problems);
    let load = shared.paced(&common, Paced::of("resume", 300), problems);
    let (consumer, behaviour) = (&load.consumer, &load.behaviour);
    // With one client, what the server holds unacked after the crash is
    // exactly what the crashed client took with it.
    if consumer.consumers != 1 {
        k.problem(
            "consumer.consumers",
            "resume crashes the one client bound to the durable; use 1",
        );
    }
    if !behaviour.classes.is_empty() {
        k.problem(
            "behaviour",
            "resume acks every message so that every redelivery is the crash's; naks and terms belong in redelivery",
        );
    }
    if behaviour.handlers < 2 || behaviour.processing.is_zero() {
        k.problem(
            "behaviour",
            "a crash needs work in hand: set processing > 0 and handlers >= 2",
        );
    }
    let crash_after = moment(
        &mut k,
        "crash_after",
        &common,
        Some("when the client crashes, from the start, e.g. crash_after = \"3s\""),
    );
    let crash_at = variants(
        &mut k,
        "crash_at",
        vec![
            CrashPoint::BeforeProcessing,
            CrashPoint::DuringProcessing,
            CrashPoint::AfterProcessing,
            CrashPoint::Drain,
        ],
        "one or more of \"before_processing\", \"during_processing\", \"after_processing\", \"drain\"",
    );
    let rebind_after = k.duration(
        "rebind_after",
        Duration::from_millis(500),
        Duration::ZERO..=Duration::from_secs(600),
    );
    shared.drain_at_least(&mut common, consumer.ack_wait * 3 + rebind_after);
    let idempotent = variants(
        &mut k,
        "idempotent",
        vec![false],
        "false, true or both: handlers without and with a dedup store",
    );
    let plan = Plan {
        crash_after: crash_after.unwrap_or_default(),
        crash_at,
        rebind_after,
        idempotent,
        load,
    };
    k.finish(problems);
    Some((common, plan))
}
