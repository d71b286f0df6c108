//! `resume`: the restarts article's story. A consumer client working under load
//! crashes with work in hand (its connection closes, nothing more is acked)
//! and a new client binds to the same durable. Measures how long until work
//! resumes, what was redelivered, and the latency spike; verifies that the
//! redelivered messages are exactly those the crashed client held unacked
//! and that nothing is lost. Crashing after processing but before the ack
//! runs that work twice, and the scenario says how often.

pub mod plan;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use super::checks;
use super::recording;
use super::table::{self, Column, Show};
use super::{Field, Kind, Paced, Scope, Variants, Work};
use crate::drive::{ConsumerSpec, CrashOutcome, CrashPlan, DriveOutcome};
use crate::profile::{CommonPlan, CrashPoint, format_duration};
use crate::record::ledger::Event;
use crate::record::metrics::latency_metrics;
use crate::record::names;
use crate::streams::provision::Need;
use crate::variant::{Invariant, VariantResult};

pub use plan::Plan;

/// The figures this scenario reports that its table, the charts and
/// report.html read, by name.
/// What the server held unacked once the crashed client was gone.
pub const UNACKED_AT_CRASH: &str = "unacked_at_crash";
pub const REDELIVERED: &str = "redelivered";
pub const WORK_RAN_TWICE: &str = "work_ran_twice";
/// From the crash to the first delivery to the new client, ms.
pub const TIME_TO_RESUME: &str = "time_to_resume";
pub const TIME_TO_FIRST_REDELIVERY: &str = "time_to_first_redelivery";
/// End-to-end latency seen by the crashed client and by its replacement.
pub const E2E_LATENCY_BEFORE_CRASH: &str = "e2e_latency_before_crash";
pub const E2E_LATENCY_AFTER_REBIND: &str = "e2e_latency_after_rebind";

/// The registry's row for `resume`: a consumer crashing and a new one resuming.
pub struct Resume;

impl Kind for Resume {
    const NAME: &'static str = "resume";
    const COORDINATOR_SIDE: Option<&'static str> =
        Some("the whole load runs on the coordinator: it crashes and rebinds a consumer client");
    const RETENTION: bool = true;
    const COLUMNS: &'static [Column] = &[
        table::VARIANT,
        Column::metric("unacked at crash", UNACKED_AT_CRASH, Show::Whole),
        Column::metric("redelivered", REDELIVERED, Show::Whole),
        Column::metric("ran twice", WORK_RAN_TWICE, Show::Whole),
        Column::metric("resumed after", TIME_TO_RESUME, Show::Ms),
        Column::metric("redelivered after", TIME_TO_FIRST_REDELIVERY, Show::Ms),
        table::quantile("e2e max after", E2E_LATENCY_AFTER_REBIND, "max"),
        table::LOST,
        table::VERDICT,
    ];
    type Plan = Plan;

    fn need(plan: &Plan, common: &CommonPlan) -> Need {
        Need::of_load(&plan.load, common)
    }

    fn estimated_duration(plan: &Plan, common: &CommonPlan) -> Duration {
        (common.duration + common.warmup) * (plan.crash_at.len() * plan.idempotent.len()) as u32
    }

    const CONSUMER: Option<Field<Plan>> = Some((|p| &p.load.consumer, |p| &mut p.load.consumer));

    type Group = ();
    type Shared = ();
    /// Where the client crashes, and whether its handlers are idempotent.
    type Variant = (CrashPoint, bool);

    /// Each crash point, once per `idempotent` entry.
    fn variants(plan: &Plan, _: &()) -> Variants<(CrashPoint, bool)> {
        let idempotent = |p| plan.idempotent.iter().map(move |&i| (p, i));
        Variants::List(plan.crash_at.iter().flat_map(|&p| idempotent(p)).collect())
    }

    fn label(_plan: &Plan, &(point, idempotent): &(CrashPoint, bool)) -> String {
        let name = match point {
            CrashPoint::BeforeProcessing => "before-processing",
            CrashPoint::DuringProcessing => "during-processing",
            CrashPoint::AfterProcessing => "after-processing",
            CrashPoint::Drain => "graceful-drain",
        };
        match idempotent {
            true => format!("{name}.idempotent"),
            false => name.to_string(),
        }
    }

    /// The load, with the first client crashing at `point` and a new one
    /// binding in its place; idempotent handlers share a dedup store, as a
    /// database outside the crashed process would be.
    async fn run(
        s: &mut Scope<'_>,
        r: &mut VariantResult,
        plan: &Plan,
        _: &mut (),
        &(point, idempotent): &(CrashPoint, bool),
    ) -> Result<()> {
        describe(&s.scenario.common, plan, (point, idempotent), r);
        let load = &plan.load;
        let reader = ConsumerSpec {
            crash: Some(CrashPlan {
                after: plan.crash_after,
                point,
                rebind_after: plan.rebind_after,
            }),
            ..recording::observed(&load.consumer, Arc::new(load.behaviour.clone()))
        };
        let paced = Paced {
            work: match idempotent {
                true => Work::Idempotent,
                false => Work::Counted,
            },
            ..Paced::new(load.rate, &load.publish, reader)
        };
        s.drive_durable(r, paced, |d, r| {
            let recovery = Recovery::of(&d.outcome);
            measure(&d.outcome, &recovery, r);
            verify(&d.outcome, &recovery, &d.stored, r);
        })
        .await
    }
}

fn describe(
    common: &CommonPlan,
    plan: &Plan,
    (point, idempotent): (CrashPoint, bool),
    r: &mut VariantResult,
) {
    super::shape::describe(plan.load.rate, &plan.load.publish.arrival, common, r);
    r.param("crash_after", format_duration(plan.crash_after));
    r.param("crash_at", point);
    r.param("rebind_after", format_duration(plan.rebind_after));
    r.param("ack_wait", format_duration(plan.load.consumer.ack_wait));
    r.param("processing", plan.load.behaviour.processing.to_string());
    r.param("handlers", plan.load.behaviour.handlers);
    r.param("idempotent", idempotent);
}

/// What the crash cost, read from the delivery log.
struct Recovery {
    crash: Option<CrashOutcome>,
    /// Sequences delivered more than once (the server's delivery count).
    redelivered: BTreeSet<u64>,
    /// Work done and never acked that was delivered and acked again.
    ran_twice: u64,
    first_after_rebind_ns: Option<u64>,
    first_redelivery_ns: Option<u64>,
    last_redelivery_ns: Option<u64>,
}

impl Recovery {
    fn of(o: &DriveOutcome) -> Recovery {
        let crash = o.crash.clone();
        let redeliveries = || o.events.iter().filter(|e| e.delivery > 1);
        let redelivered: BTreeSet<u64> = redeliveries().map(|e| e.seq).collect();
        let rebound = crash.as_ref().map_or(0, |c| c.rebound_ns);
        let ran_twice = crash.as_ref().map_or(0, |c| {
            c.report
                .processed_unacked
                .iter()
                .filter(|&&seq| o.ledger.count(seq, Event::Acked) > 0 && redelivered.contains(&seq))
                .count() as u64
        });
        Recovery {
            redelivered,
            ran_twice,
            first_after_rebind_ns: o
                .events
                .iter()
                .filter(|e| rebound > 0 && e.received_ns >= rebound)
                .map(|e| e.received_ns)
                .min(),
            first_redelivery_ns: redeliveries().map(|e| e.received_ns).min(),
            last_redelivery_ns: redeliveries().map(|e| e.received_ns).max(),
            crash,
        }
    }
}

fn measure(o: &DriveOutcome, rec: &Recovery, r: &mut VariantResult) {
    checks::publish_rate(o, r);
    r.latency_kept(names::E2E_LATENCY, &o.e2e_intended);
    // Latencies taken at a later delivery: the first went to a client that
    // never saw it. These are the fault's slowest messages.
    r.count("e2e_latency.from_later_delivery", o.late_first_latencies);
    if let Some(c) = &rec.crash {
        let at = c.report.at_ns;
        r.count("in_hand_at_crash", c.report.in_hand);
        // From the crash (or the stop) until the client was gone: a drain
        // finishes its work first.
        r.ms("time_to_stop", c.report.stopped_ns.saturating_sub(at));
        if c.report.drained > 0 {
            r.count("drained", c.report.drained);
        }
        if let Some(pending) = c.ack_pending_after {
            r.count(UNACKED_AT_CRASH, pending);
        }
        r.count("processed_unacked", c.report.processed_unacked.len() as u64);
        r.count(WORK_RAN_TWICE, rec.ran_twice);
        if let Some(first) = rec.first_after_rebind_ns {
            r.ms(TIME_TO_RESUME, first.saturating_sub(at));
            r.ms("bind_to_first_delivery", first.saturating_sub(c.rebound_ns));
        }
        if let (Some(first), Some(last)) = (rec.first_redelivery_ns, rec.last_redelivery_ns) {
            r.ms(TIME_TO_FIRST_REDELIVERY, first.saturating_sub(at));
            r.ms("time_to_last_redelivery", last.saturating_sub(at));
        }
    }
    r.count(REDELIVERED, rec.redelivered.len() as u64);
    // The latency spike: what the crashed client saw before against what
    // its replacement saw while catching up.
    for (name, report) in [
        (E2E_LATENCY_BEFORE_CRASH, o.consumers.first()),
        (E2E_LATENCY_AFTER_REBIND, o.consumers.last()),
    ] {
        if let Some(report) = report {
            r.metrics
                .extend(latency_metrics(name, &report.e2e_intended.summary()));
        }
    }
    checks::completion_time(o, r);
}

fn verify(o: &DriveOutcome, rec: &Recovery, stored: &checks::StreamCount, r: &mut VariantResult) {
    let c = &o.counts;
    r.invariants.push(checks::nothing_lost(o));
    // Stronger than nothing lost: after the crash and the rebind, every
    // message is also acked (none left to an expired deadline).
    r.invariants.push(Invariant::equal(
        "every persisted message acked",
        c.acked,
        c.persisted,
    ));
    r.invariants.push(checks::nothing_dropped(o));
    match &rec.crash {
        Some(crash) => {
            let pending = crash.ack_pending_after;
            r.invariants.push(Invariant::check(
                "redelivered = unacked at the crash",
                pending == Some(rec.redelivered.len() as u64),
                format!(
                    "{} redelivered; the server held {} unacked once the client was gone",
                    rec.redelivered.len(),
                    pending.map_or("an unknown number of".into(), |p| p.to_string())
                ),
            ));
            let unacked = crash.report.processed_unacked.len() as u64;
            r.invariants.push(Invariant::check(
                "work done but not acked runs again",
                rec.ran_twice == unacked,
                format!(
                    "{unacked} messages processed and not acked, {} of them processed again",
                    rec.ran_twice
                ),
            ));
            r.invariants.push(Invariant::check(
                "a new client resumed",
                rec.first_after_rebind_ns.is_some(),
                "deliveries to the client bound after the crash",
            ));
        }
        None => r.invariants.push(Invariant::check(
            "the client crashed",
            false,
            "the crash never happened",
        )),
    }
    r.invariants.push(checks::stream_holds(stored, c));
    r.invariants.push(checks::nothing_pending(o));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consume::CrashReport;

    /// A crash with two messages unacked, one of them processed: both
    /// redelivered, the processed one run again, a new client resumed.
    fn clean() -> (DriveOutcome, Recovery) {
        let o = DriveOutcome::settled(0);
        let rec = Recovery {
            crash: Some(CrashOutcome {
                report: CrashReport {
                    at_ns: 1,
                    in_hand: 2,
                    processed_unacked: vec![7],
                    ..CrashReport::default()
                },
                ack_pending_after: Some(2),
                rebound_ns: 2,
            }),
            redelivered: BTreeSet::from([7, 8]),
            ran_twice: 1,
            first_after_rebind_ns: Some(3),
            first_redelivery_ns: Some(3),
            last_redelivery_ns: Some(4),
        };
        (o, rec)
    }

    fn failing(o: &DriveOutcome, rec: &Recovery) -> Vec<String> {
        let mut r = VariantResult::new("t");
        verify(o, rec, &Ok(0), &mut r);
        r.broken().into_iter().map(String::from).collect()
    }

    /// Each recovery check fails on the fault it is for and on nothing
    /// else: a real server always redelivers what a crash left unacked,
    /// so the recoveries are forged.
    #[test]
    fn each_recovery_check_fails_on_its_own_fault() {
        let (o, rec) = clean();
        assert!(failing(&o, &rec).is_empty());

        let (o, mut rec) = clean();
        rec.redelivered.remove(&8);
        assert_eq!(failing(&o, &rec), ["redelivered = unacked at the crash"]);
        rec.crash.as_mut().unwrap().ack_pending_after = None;
        rec.redelivered.insert(8);
        assert_eq!(failing(&o, &rec), ["redelivered = unacked at the crash"]);

        let (o, mut rec) = clean();
        rec.ran_twice = 0;
        assert_eq!(failing(&o, &rec), ["work done but not acked runs again"]);

        let (o, mut rec) = clean();
        rec.first_after_rebind_ns = None;
        assert_eq!(failing(&o, &rec), ["a new client resumed"]);

        let (o, mut rec) = clean();
        rec.crash = None;
        assert_eq!(failing(&o, &rec), ["the client crashed"]);

        let (mut o, rec) = clean();
        o.counts.persisted = 3;
        o.counts.acked = 2;
        assert_eq!(
            failing(&o, &rec),
            [
                "every persisted message acked",
                "stream holds every persisted message"
            ]
        );
    }
}
