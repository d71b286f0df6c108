//! `resume`: the second seed's story. A consumer client working under load
//! crashes with work in hand (its connection closes, nothing more is acked)
//! and a new client binds to the same durable. Measures how long until work
//! resumes, what was redelivered, and the latency spike; verifies that the
//! redelivered messages are exactly those the crashed client held unacked
//! and that nothing is lost. Crashing after processing but before the ack
//! runs that work twice, and the scenario says how often.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{VariantNames, checks, idempotence, provision_durable, record_stream};
use crate::drive::RunContext;
use crate::drive::{ConsumerSpec, CrashOutcome, CrashPlan, DriveOutcome, DriveSpec, drive};
use crate::profile::CrashPoint;
use crate::profile::{ResumePlan, ScenarioPlan, format_duration};
use crate::record::ledger::Event;
use crate::record::metrics::{Direction, Metric, count, latency_metrics};
use crate::variant::{Invariant, VariantResult, VariantSink};

/// How often consumer info is sampled while a variant runs.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

pub async fn run(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    plan: &ResumePlan,
    sink: &mut dyn VariantSink,
) -> Result<()> {
    let runs = plan
        .crash_at
        .iter()
        .flat_map(|&p| plan.idempotent.iter().map(move |&i| (p, i)));
    for (point, idempotent) in runs {
        if ctx.stop.is_cancelled() {
            break;
        }
        let started = Instant::now();
        let name = match point {
            CrashPoint::BeforeProcessing => "before-processing",
            CrashPoint::DuringProcessing => "during-processing",
            CrashPoint::AfterProcessing => "after-processing",
            CrashPoint::Drain => "graceful-drain",
        };
        let name = if idempotent {
            format!("{name}.idempotent")
        } else {
            name.to_string()
        };
        let mut result = VariantResult::new(name);
        result.param("rate", plan.load.rate);
        result.param("duration", format_duration(plan.common.duration));
        result.param("crash_after", format_duration(plan.crash_after));
        result.param("crash_at", point);
        result.param("rebind_after", format_duration(plan.rebind_after));
        result.param("ack_wait", format_duration(plan.load.consumer.ack_wait));
        result.param("processing", plan.load.behaviour.processing.to_string());
        result.param("handlers", plan.load.behaviour.handlers);
        result.param("idempotent", idempotent);
        super::shape::describe(&plan.load.publish.arrival, &mut result);
        let run = (point, idempotent);
        if let Err(e) = run_variant(ctx, scenario.name(), plan, run, &mut result).await {
            result.error = Some(format!("{e:#}"));
        }
        result.elapsed = started.elapsed();
        sink.record(scenario, result)?;
    }
    Ok(())
}

async fn run_variant(
    ctx: &RunContext,
    scenario: &str,
    plan: &ResumePlan,
    (point, idempotent): (CrashPoint, bool),
    result: &mut VariantResult,
) -> Result<()> {
    // Provision.
    let variant = result.name.clone();
    let VariantNames {
        stream: stream_name,
        base,
        durable,
    } = provision_durable(ctx, scenario, &variant, &plan.load.consumer).await?;

    // Drive, with the crash and the rebind.
    let mut consumer = ConsumerSpec::observed(
        durable,
        plan.load.consumer.clone(),
        Arc::new(plan.load.behaviour.clone()),
        SAMPLE_EVERY,
    );
    consumer.crash = Some(CrashPlan {
        after: plan.crash_after,
        point,
        rebind_after: plan.rebind_after,
    });
    // Idempotent handlers: a dedup store both clients share, as a database
    // outside the crashed process would be.
    if idempotent {
        consumer.dedup = Some(idempotence::store(ctx, scenario, &variant).await?);
    }
    let bucket = consumer.dedup.clone();
    let spec = DriveSpec::paced(
        format!("{scenario} {variant}"),
        &stream_name,
        format!("{base}.0"),
        &plan.load.publish,
        &plan.common,
        plan.load.rate,
        consumer,
    );
    let outcome = drive(ctx, &spec).await;
    let stored = record_stream(ctx, &stream_name, result).await;
    let deleted = ctx.provisioner.delete_stream(&stream_name).await;
    let (store, dropped) = idempotence::finish(ctx, bucket.as_deref()).await;
    let deleted = deleted.and(dropped);
    let outcome = outcome?;

    // Measure and verify.
    let recovery = Recovery::of(&outcome);
    measure(&outcome, &recovery, result);
    idempotence::measure(&outcome, store, result);
    verify(&outcome, &recovery, stored, result);
    deleted.context("cleaning up after the variant")?;
    Ok(())
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
        let redelivered: BTreeSet<u64> = o
            .events
            .iter()
            .filter(|e| e.delivery > 1)
            .map(|e| e.seq)
            .collect();
        let redeliveries = || {
            o.events
                .iter()
                .filter(|e| e.delivery > 1)
                .map(|e| e.received_ns)
        };
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
            first_redelivery_ns: redeliveries().min(),
            last_redelivery_ns: redeliveries().max(),
            crash,
        }
    }
}

fn measure(o: &DriveOutcome, rec: &Recovery, r: &mut VariantResult) {
    let ms = |ns: u64| ns as f64 / 1e6;
    r.metrics.push(Metric::new(
        "publish_rate",
        "msg/s",
        o.publish_rate(),
        Direction::None,
    ));
    r.metrics
        .extend(latency_metrics("e2e_latency", &o.e2e_intended.summary()));
    r.histograms
        .push(("e2e_latency".into(), o.e2e_intended.clone()));
    // Latencies taken at a later delivery: the first went to a client that
    // never saw it. These are the fault's slowest messages.
    r.metrics.push(count(
        "e2e_latency.from_later_delivery",
        o.late_first_latencies,
    ));
    if let Some(c) = &rec.crash {
        let at = c.report.at_ns;
        r.metrics.push(count("in_hand_at_crash", c.report.in_hand));
        // From the crash (or the stop) until the client was gone: a drain
        // finishes its work first.
        r.metrics.push(Metric::new(
            "time_to_stop",
            "ms",
            ms(c.report.stopped_ns.saturating_sub(at)),
            Direction::Lower,
        ));
        if c.report.drained > 0 {
            r.metrics.push(count("drained", c.report.drained));
        }
        if let Some(pending) = c.ack_pending_after {
            r.metrics.push(count("unacked_at_crash", pending));
        }
        r.metrics.push(count(
            "processed_unacked",
            c.report.processed_unacked.len() as u64,
        ));
        r.metrics.push(count("work_ran_twice", rec.ran_twice));
        if let Some(first) = rec.first_after_rebind_ns {
            r.metrics.push(Metric::new(
                "time_to_resume",
                "ms",
                ms(first.saturating_sub(at)),
                Direction::Lower,
            ));
            r.metrics.push(Metric::new(
                "bind_to_first_delivery",
                "ms",
                ms(first.saturating_sub(c.rebound_ns)),
                Direction::Lower,
            ));
        }
        if let (Some(first), Some(last)) = (rec.first_redelivery_ns, rec.last_redelivery_ns) {
            r.metrics.push(Metric::new(
                "time_to_first_redelivery",
                "ms",
                ms(first.saturating_sub(at)),
                Direction::Lower,
            ));
            r.metrics.push(Metric::new(
                "time_to_last_redelivery",
                "ms",
                ms(last.saturating_sub(at)),
                Direction::Lower,
            ));
        }
    }
    r.metrics
        .push(count("redelivered", rec.redelivered.len() as u64));
    // The latency spike: what the crashed client saw before against what
    // its replacement saw while catching up.
    for (label, report) in [
        ("before_crash", o.consumers.first()),
        ("after_rebind", o.consumers.last()),
    ] {
        if let Some(report) = report {
            r.metrics.extend(latency_metrics(
                &format!("e2e_latency_{label}"),
                &report.e2e_intended.summary(),
            ));
        }
    }
    r.metrics.push(Metric::new(
        "completion_time",
        "ms",
        o.drain_time.as_secs_f64() * 1e3,
        Direction::Lower,
    ));
    checks::drive_records(o, SAMPLE_EVERY, r);
}

fn verify(o: &DriveOutcome, rec: &Recovery, stored: Option<u64>, r: &mut VariantResult) {
    let c = &o.counts;
    r.invariants.push(Invariant::check(
        "lost = 0",
        c.lost == 0 && c.acked == c.persisted,
        format!(
            "{} persisted, {} acked, {} never delivered",
            c.persisted, c.acked, c.lost
        ),
    ));
    r.invariants.push(checks::nothing_dropped_by_client(
        c.client_dropped,
        o.client_drop_cause.as_deref(),
    ));
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
        verify(o, rec, Some(0), &mut r);
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
            ["lost = 0", "stream holds every persisted message"]
        );
    }
}
