//! `kind = "resume"`: its keys beside the shared paced load.

use std::time::Duration;

use serde::Deserialize;

use crate::profile::common::OneOrMany;
use crate::profile::shared::{Offer, Paced, split};
use crate::profile::{CommonPlan, CrashPoint, Dur, PacedLoad, Problems, Section};

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResumeSection {
    crash_after: Option<Dur>,
    crash_at: Option<OneOrMany<CrashPoint>>,
    rebind_after: Option<Dur>,
    idempotent: Option<OneOrMany<bool>>,
}

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let (table, prefix) = (section.table, section.prefix);
    let (mut shared, s) = split::<ResumeSection>(table, Offer::PACED, prefix, problems)?;
    let key = |k: &str| format!("{prefix}.{k}");
    let mut common = shared.common("resume", problems);
    let load = shared.paced(&common, Paced::of("resume", 300), problems);
    let (consumer, behaviour) = (&load.consumer, &load.behaviour);
    // With one client, what the server holds unacked after the crash is
    // exactly what the crashed client took with it.
    if consumer.consumers != 1 {
        problems.push(
            key("consumer.consumers"),
            "resume crashes the one client bound to the durable; use 1",
        );
    }
    if !behaviour.classes.is_empty() {
        problems.push(
            key("behaviour"),
            "resume acks every message so that every redelivery is the crash's; naks and terms belong in redelivery",
        );
    }
    if behaviour.handlers < 2 || behaviour.processing.is_zero() {
        problems.push(
            key("behaviour"),
            "a crash needs work in hand: set processing > 0 and handlers >= 2",
        );
    }
    let crash_after = s.crash_after.map(|d| d.0).unwrap_or(Duration::ZERO);
    if s.crash_after.is_none() {
        problems.push(
            key("crash_after"),
            "missing; when the client crashes, from the start, e.g. crash_after = \"3s\"",
        );
    } else if crash_after >= common.warmup + common.duration {
        problems.push(
            key("crash_after"),
            "must come before the end of warmup + duration, while the load runs",
        );
    }
    let crash_at = s.crash_at.map(|c| c.0).unwrap_or_else(|| {
        vec![
            CrashPoint::BeforeProcessing,
            CrashPoint::DuringProcessing,
            CrashPoint::AfterProcessing,
            CrashPoint::Drain,
        ]
    });
    if crash_at.is_empty() {
        problems.push(key("crash_at"), "lists no crash point");
    }
    let rebind_after = s
        .rebind_after
        .map(|d| d.0)
        .unwrap_or(Duration::from_millis(500));
    problems.range(
        &key("rebind_after"),
        rebind_after.as_secs_f64(),
        0.0,
        600.0,
        " seconds",
    );
    if !shared.drain_timeout_given() {
        common.drain_timeout = common
            .drain_timeout
            .max(consumer.ack_wait * 3 + rebind_after);
    }
    let idempotent = s.idempotent.map(|i| i.0).unwrap_or_else(|| vec![false]);
    if idempotent.is_empty() || crate::profile::common::has_repeats(&idempotent) {
        problems.push(
            key("idempotent"),
            "false, true, or [false, true] (each once): handlers without and with a dedup store",
        );
    }
    let plan = Plan {
        load,
        crash_after,
        crash_at,
        rebind_after,
        idempotent,
    };
    Some((common, plan))
}
