//! The dead letters' latencies, the handler's figures, the counts.

use super::readback::Evidence;
use super::{
    ADVISORY_AFTER_DEADLINE, COPIES_DUPLICATES_FLAGGED, DEAD_LETTERS_EXPECTED, DEAD_LETTERS_IN_DLQ,
    DLQ_AFTER_DEADLINE, DLQ_LATENCY, HANDLER_CAPACITY, HANDLER_LATENCY, HANDLER_RESTARTS, Plan,
    SAMPLE_EVERY,
};
use crate::consume::fates::Analysis;
use crate::dlq::{Outcome, PipelineReport};
use crate::drive::DriveOutcome;
use crate::profile::ConsumerPlan;
use crate::record::histogram::Recorder;
use crate::record::metrics::{Direction, latency_metrics};
use crate::record::names;
use crate::scenario::checks;
use crate::streams::advisory::Kind;
use crate::variant::VariantResult;

/// Per-message latencies of the dead letters.
#[derive(Default)]
struct Latencies {
    /// Final delivery to the copy's PubAck.
    dlq: Recorder,
    /// Final delivery to the advisory's first receipt by the handler.
    advisory: Recorder,
    /// From the server giving up on the message (the advisory's time
    /// stamp) to the advisory's receipt.
    advisory_after_deadline: Recorder,
    /// From the server giving up on the message to the copy's PubAck: what
    /// the pipeline adds once the server has given up.
    dlq_after_deadline: Recorder,
    /// Advisory receipt to the copy's PubAck: the handler's own part.
    handler: Recorder,
    /// Term to the copy's PubAck (with `terminated`).
    term_dlq: Recorder,
    /// Dead letters whose deadline came from the server's advisory time
    /// stamp (the rest: receipt of the final delivery plus the deadline).
    anchored_to_server: u64,
}

fn latencies(o: &DriveOutcome, a: &Analysis, e: &Evidence, consumer: &ConsumerPlan) -> Latencies {
    let mut l = Latencies::default();
    let stories = e.pipeline.stories();
    let deadline = consumer
        .ack_deadline(consumer.max_deliver.max(1) as u32)
        .as_nanos() as u64;
    for (key, kind) in &e.expected {
        let Some(story) = stories.get(key) else {
            continue;
        };
        let Some(persisted) = story.persisted_ns else {
            continue;
        };
        match kind {
            Kind::MaxDeliveries => {
                let Some(&last) = a.final_delivery_ns.get(&key.1) else {
                    continue;
                };
                l.dlq.record_between(last, persisted);
                // The deadline expired when the server says it gave up (the
                // advisory's time stamp); without one, at jsbench's receipt
                // of the final delivery plus the deadline, which is later
                // than the server's send.
                let gave_up = match story.gave_up_ns {
                    Some(t) => {
                        l.anchored_to_server += 1;
                        t
                    }
                    None => last + deadline,
                };
                l.dlq_after_deadline.record_between(gave_up, persisted);
                l.advisory.record_between(last, story.advisory_ns);
                l.advisory_after_deadline
                    .record_between(gave_up, story.advisory_ns);
                l.handler.record_between(story.advisory_ns, persisted);
            }
            Kind::Terminated => {
                let termed = o
                    .events
                    .iter()
                    .filter(|e| e.seq == key.1)
                    .map(|e| e.answered_ns)
                    .max();
                if let Some(t) = termed {
                    l.term_dlq.record_between(t, persisted);
                }
            }
            // A nak dead-letters nothing: the pipeline never expects one.
            Kind::Naked => {}
        }
    }
    l
}

/// Every figure of a variant but the comparison with the baseline
/// (`compare`, once the group has run): latencies, the handler,
/// the counts, the drive's records; and the handler's complaints as
/// warnings.
pub(super) fn measure(
    o: &DriveOutcome,
    a: &Analysis,
    e: &Evidence,
    plan: &Plan,
    r: &mut VariantResult,
) {
    r.metric(
        names::PUBLISH.rate,
        "msg/s",
        o.publish_rate(),
        Direction::Higher,
    );
    let e2e = o.e2e_intended.summary();
    r.metrics.extend(latency_metrics(names::E2E_LATENCY, &e2e));
    r.histograms
        .push((names::E2E_LATENCY.into(), o.e2e_intended.clone()));
    dead_letter_latencies(&latencies(o, a, e, &plan.load.consumer), r);
    handler_pace(&e.pipeline, r);
    counts(e, r);
    checks::fate_metrics(a, r);
    checks::drive_records(o, Some(SAMPLE_EVERY), r);
    handler_warnings(&e.pipeline, r);
}

/// Each dead-letter latency that saw a letter, with its histogram: a
/// variant whose letters all took one path reports only that path.
fn dead_letter_latencies(l: &Latencies, r: &mut VariantResult) {
    for (name, h) in [
        (DLQ_LATENCY, &l.dlq),
        (DLQ_AFTER_DEADLINE, &l.dlq_after_deadline),
        ("advisory_latency", &l.advisory),
        (ADVISORY_AFTER_DEADLINE, &l.advisory_after_deadline),
        (HANDLER_LATENCY, &l.handler),
        ("term_dlq_latency", &l.term_dlq),
    ] {
        r.latency(name, h);
    }
    r.count("deadlines_from_server_timestamp", l.anchored_to_server);
}

/// The handler: how fast it went (copies over the span it copied in), and
/// how fast it could have gone (attempts over the time it was busy).
fn handler_pace(p: &PipelineReport, r: &mut VariantResult) {
    let mut work = Recorder::new();
    let mut first = u64::MAX;
    let mut last = 0u64;
    let mut copied = 0u64;
    for at in p.attempts() {
        if let Outcome::Copied { .. } = at.outcome {
            work.record_between(at.received_ns, at.answered_ns);
            copied += 1;
            first = first.min(at.received_ns);
            last = last.max(at.answered_ns);
        }
    }
    r.latency("handler_time", &work);
    let attempts = p.attempts().count() as u64;
    let busy = p.busy().as_secs_f64();
    let capacity = if busy > 0.0 {
        attempts as f64 / busy
    } else {
        0.0
    };
    r.metric(HANDLER_CAPACITY, "msg/s", capacity, Direction::Higher);
    let rate = if last > first {
        copied as f64 / ((last - first) as f64 / 1e9)
    } else {
        0.0
    };
    r.metric("handler_rate", "msg/s", rate, Direction::None);
}

/// What the pipeline did with each advisory, and what the DLQ holds.
fn counts(e: &Evidence, r: &mut VariantResult) {
    let p = &e.pipeline;
    let redelivered = p.attempts().filter(|at| at.delivery > 1).count() as u64;
    for (name, v) in [
        (DEAD_LETTERS_EXPECTED, e.expected.len() as u64),
        (
            DEAD_LETTERS_IN_DLQ,
            e.contents.as_ref().map_or(0, |c| c.letters.len() as u64),
        ),
        ("advisories.handled", p.attempts().count() as u64),
        ("advisories.redelivered", redelivered),
        (
            "advisories.foreign",
            p.count(|o| matches!(o, Outcome::Foreign)),
        ),
        (
            "advisories.malformed",
            p.count(|o| matches!(o, Outcome::Malformed(_))),
        ),
        (
            "copies.published",
            p.attempts().filter(|at| at.persisted_ns.is_some()).count() as u64,
        ),
        (
            COPIES_DUPLICATES_FLAGGED,
            p.count(|o| {
                matches!(
                    o,
                    Outcome::Copied {
                        duplicate: true,
                        ..
                    } | Outcome::Killed { duplicate: true }
                )
            }),
        ),
        (
            "originals.deleted",
            p.count(|o| matches!(o, Outcome::Copied { deleted: true, .. })),
        ),
        (
            "originals.gone",
            p.count(|o| matches!(o, Outcome::OriginalGone(_))),
        ),
        (
            "handler.retries",
            p.count(|o| matches!(o, Outcome::Retried(_))),
        ),
        (HANDLER_RESTARTS, p.restarts() as u64),
    ] {
        r.count(name, v);
    }
}

/// The pipeline's errors, and a few malformed advisories as examples.
fn handler_warnings(p: &PipelineReport, r: &mut VariantResult) {
    r.warnings.extend(p.errors.iter().cloned());
    let malformed: Vec<&str> = p
        .attempts()
        .filter_map(|at| match &at.outcome {
            Outcome::Malformed(why) => Some(why.as_str()),
            _ => None,
        })
        .take(3)
        .collect();
    if !malformed.is_empty() {
        r.warnings.push(format!(
            "the handler termed malformed advisories, e.g. {}",
            malformed.join("; ")
        ));
    }
}
