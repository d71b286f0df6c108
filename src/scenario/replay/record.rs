//! The record phase: the pattern published into the scenario's stream and
//! read back, as the server stored it, as the recording every replay is
//! judged against.

use anyhow::{Result, anyhow};

use super::measure::signed_metrics;
use super::{MESSAGES, Plan, READ_IDLE, Recording};
use crate::drive::DriveOutcome;
use crate::profile::format_duration;
use crate::record::histogram::Recorder;
use crate::record::ledger::Event;
use crate::record::metrics::{Direction, latency_metrics};
use crate::record::names;
use crate::replay::pacing;
use crate::replay::recording::{self, Recorded};
use crate::scenario::Scope;
use crate::scenario::checks;
use crate::variant::{Invariant, VariantResult};

/// Provisions the stream (in the group's scope: it lives until every
/// replay has run), publishes the pattern and reads the stream back as the
/// recording.
pub(super) async fn record(
    s: &mut Scope<'_>,
    r: &mut VariantResult,
    plan: &Plan,
) -> Result<Recording> {
    r.param("arrival", plan.publish.arrival.to_string());
    r.param("rate", plan.rate);
    r.param("duration", format_duration(s.scenario.common.duration));
    r.param("planned_messages", plan.planned_messages);
    r.param("publishers", plan.publish.publishers);
    r.param("message_size", plan.publish.message_size.to_string());
    r.param("subjects", plan.publish.subjects);

    // Provision: the stream is `rec` (the name results and kept streams
    // have always shown), not the setup's label.
    let (scenario, names) = (s.scenario.name(), &s.ctx.names);
    let (stream, base) = (
        names.stream(scenario, "rec"),
        names.subject(scenario, "rec"),
    );
    let config =
        crate::streams::provision::stream_config(&stream, &base, &s.ctx.server, &s.ctx.stream);
    s.stream(config).await?;
    let client = s.ctx.connect.connect("replay").await?;
    let mut t = Recording {
        subjects: (0..plan.publish.subjects)
            .map(|i| format!("{base}.{i}"))
            .collect(),
        js: s.ctx.connect.jetstream(client.clone()),
        client,
        stream,
        base,
        messages: Vec::new(),
    };

    // Drive.
    let rate = (plan.rate, s.scenario.common.duration);
    let spec = super::publisher(s, &t, &plan.publish, rate, 0x5eed);
    let outcome = s.drive(&spec).await?;
    s.place(r, &t.stream).await;
    let recording = recording::read(&t.js, &t.stream, 1, READ_IDLE).await?;
    measure(plan, spec.messages(), &outcome, &recording, r);
    verify(&outcome, &recording, r);
    if recording.len() < 2 {
        return Err(anyhow!(
            "the recording holds {} message(s); nothing to replay",
            recording.len()
        ));
    }
    t.messages = recording;
    Ok(t)
}

/// The record phase's pace and the recorded pattern's fidelity.
fn measure(
    plan: &Plan,
    planned: u64,
    outcome: &DriveOutcome,
    recording: &[Recorded],
    r: &mut VariantResult,
) {
    r.count("planned_messages", planned);
    r.count(MESSAGES, recording.len() as u64);
    r.metric(
        names::TARGET_RATE,
        "msg/s",
        plan.rate as f64,
        Direction::None,
    );
    r.metrics
        .extend(crate::record::metrics::rate_and_throughput(
            names::PUBLISH,
            outcome.publish_rate(),
            outcome.publish_throughput(),
        ));
    r.metrics.extend(latency_metrics(
        names::SEND_LAG,
        &outcome.send_lag.summary(),
    ));
    r.histograms
        .push((names::SEND_LAG.into(), outcome.send_lag.clone()));
    // How the server stored the pattern: its gaps, and their distance from
    // the intended ones (publisher lag and PubAck path included).
    let stored: Vec<(u64, u64)> = recording
        .iter()
        .map(|m| (m.intended_ns, m.published_ns))
        .collect();
    let fidelity = pacing::analyse(&stored);
    // The stored gaps themselves, and how often the server's clock stepped back.
    let (mut gaps, mut backwards) = (Recorder::new(), 0);
    for w in recording.windows(2) {
        let (before, at) = (w[0].published_ns, w[1].published_ns);
        gaps.record(at.saturating_sub(before));
        backwards += usize::from(at < before);
    }
    r.metric(
        "recorded_span",
        "s",
        fidelity.replayed_span_ns as f64 / 1e9,
        Direction::None,
    );
    r.metrics.extend(latency_metrics(
        "recorded_gap",
        &fidelity.original_gaps.summary(),
    ));
    r.histograms.push(("recorded_gap".into(), gaps));
    r.metrics
        .extend(signed_metrics("record_gap_error", &fidelity.gap_error));
    r.ledger = outcome.counts;
    r.timelines
        .insert(names::PUBLISHED.into(), outcome.published_timeline.clone());
    if outcome.interrupted {
        r.warnings
            .push("interrupted: the recording covers what was sent".into());
    }
    if backwards > 0 {
        r.warnings.push(format!(
            "{backwards} server timestamps are earlier than the one before (the server's clock \
             stepped back); by_start_time selects from the first match onwards regardless"
        ));
    }
    r.warnings.extend(outcome.errors.iter().cloned());
}

/// Every publish persisted, and the recording holds exactly what was.
fn verify(outcome: &DriveOutcome, recording: &[Recorded], r: &mut VariantResult) {
    let c = &outcome.counts;
    r.invariants
        .push(checks::every_publish_persisted(checks::PERSISTED, outcome));
    // Without consumers the ledger sees no deliveries: "lost" is what the
    // recording does not hold.
    let (confirmed, mut unconfirmed): (Vec<u64>, Vec<u64>) = (recording.iter().map(|m| m.seq))
        .partition(|&seq| outcome.ledger.count(seq, Event::Persisted) > 0);
    r.ledger.lost = c.persisted.saturating_sub(confirmed.len() as u64);
    unconfirmed.truncate(10);
    let contiguous = recording
        .iter()
        .enumerate()
        .all(|(i, m)| m.seq == i as u64 + 1);
    r.invariants.push(Invariant::check(
        "the recording holds every persisted message",
        recording.len() as u64 == c.persisted && contiguous && unconfirmed.is_empty(),
        format!(
            "{} messages read back, sequences 1..={} {}, {} persisted; unconfirmed by a PubAck: {:?}",
            recording.len(),
            recording.last().map_or(0, |m| m.seq),
            if contiguous { "without gaps" } else { "with gaps" },
            c.persisted,
            unconfirmed
        ),
    ));
    let unstamped = recording.iter().filter(|m| m.origin == u64::MAX).count();
    r.invariants.push(Invariant::equal(
        "every payload carries its stamp",
        unstamped as u64,
        0,
    ));
}
