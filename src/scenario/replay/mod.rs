//! `replay`: record a stream with a known, irregular arrival pattern, then
//! rewind it with fresh consumers, instantly or at the original pace, from
//! every deliver policy, through an ordered push consumer and a durable pull
//! consumer.
//!
//! Provision: one stream over several subjects for the whole scenario.
//! Drive: the record phase publishes the pattern (steady, Poisson, bursts or
//! explicit gaps) and reads the stream back as ground truth (server
//! timestamps); each replay variant then creates its consumer and reads
//! until the last selected message has arrived. `new` and the live tail
//! publish while they read (and the recording is extended by what they
//! added), so they run last.
//! Measure: instant replays their catch-up rate (msg/s, MB/s) and, for the
//! live tail, the time to reach it while publishing continues; original
//! replays their gap error, drift and duration ratio against the recorded
//! timestamps, per class of gap, and a sampled series for the chart.
//! Verify: the replayed set is exactly the set the deliver policy selects
//! from the recording (first message, count, order, nothing lost, nothing
//! extra), each delivery is the recorded message, and the server has nothing
//! left pending.

pub mod plan;

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use async_nats::Client;
use async_nats::jetstream::{self, consumer::DeliverPolicy};
use tokio::sync::watch;

use super::lifecycle::{each, record_stream, variant};
use super::table::{self, Cell, Column, Show};
use super::{ScenarioKind, ScenarioPlan};
use crate::drive::{DriveOutcome, DriveSpec, RunContext, drive};
use crate::profile::{
    ArrivalPlan, CommonPlan, Problems, REPLAY_MAX_ACK_PENDING, ReplayDeliver, ReplayPace,
    ReplayReader, Section, format_duration,
};
use crate::record::histogram::Recorder;
use crate::record::ledger::{Event, LedgerCounts};
use crate::record::metrics::{Direction, Metric, count, latency_metrics};
use crate::record::names;
use crate::replay::pacing::{self, GAP_CLASSES, Pacing, Signed};
use crate::replay::read::{self, Delivery, End, ReplayLog, ReplaySpec};
use crate::replay::recording::{self, Recorded, Start, select};
use crate::streams::provision::{Need, PER_MESSAGE_OVERHEAD};
use crate::variant::{Invariant, VariantResult, VariantSink};

pub use plan::Plan;

/// The figures this scenario reports that its table, the charts and
/// report.html read, by name.
/// Messages a replay delivered, and the first sequence.
pub const MESSAGES: &str = "messages";
pub const FIRST_SEQ: &str = "first_seq";
pub const TIME_TO_LIVE_TAIL: &str = "time_to_live_tail";
/// Replayed gap against recorded gap, signed µs; `.late` and `.early` histograms.
pub const GAP_ERROR: &str = "gap_error";
pub const GAP_ERROR_LATE: &str = "gap_error.late";
pub const GAP_ERROR_EARLY: &str = "gap_error.early";
pub const GAP_ERROR_BY_GAP: &str = "gap_error_by_gap";
pub const DRIFT_FINAL: &str = "drift.final";
pub const DURATION_RATIO: &str = "duration_ratio";
pub const SMALLEST_GAP_WITHIN_1MS: &str = "smallest_gap_within_1ms";

/// How long a replay keeps reading after its last selected message, to
/// catch a delivery that should not come.
const SETTLE: Duration = Duration::from_millis(250);

/// How long reading the recording back may go without a message.
const READ_IDLE: Duration = Duration::from_secs(10);

/// Pacing is "within" this of the original for the smallest-gap figure.
const WITHIN: Duration = Duration::from_millis(1);

/// Gaps a class needs before its error counts towards that figure.
const MIN_CLASS_GAPS: u64 = 20;

/// One replay variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OneReplay {
    pace: ReplayPace,
    deliver: ReplayDeliver,
    reader: ReplayReader,
    /// Reads while a publisher appends to the stream.
    live: Live,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Live {
    No,
    /// Deliver `new`: the consumer exists before the publisher starts.
    New,
    /// Deliver all, instantly, created while the publisher runs.
    Tail,
}

impl OneReplay {
    fn name(&self) -> String {
        let deliver = match self.live {
            Live::Tail => "live_tail",
            _ => self.deliver.label(),
        };
        format!("{}.{deliver}.{}", self.pace.label(), self.reader.label())
    }
}

/// The variants in the order they run: replays of the recording first,
/// then those that append to the stream.
fn variants(plan: &Plan) -> Vec<OneReplay> {
    let mut still = Vec::new();
    let mut live = Vec::new();
    for (pace, list) in [
        (ReplayPace::Instant, &plan.instant),
        (ReplayPace::Original, &plan.original),
    ] {
        for &deliver in list {
            for &reader in &plan.readers {
                let new = deliver == ReplayDeliver::New;
                let v = OneReplay {
                    pace,
                    deliver,
                    reader,
                    live: if new { Live::New } else { Live::No },
                };
                if new { &mut live } else { &mut still }.push(v);
            }
        }
    }
    if plan.live_tail {
        for &reader in &plan.readers {
            live.push(OneReplay {
                pace: ReplayPace::Instant,
                deliver: ReplayDeliver::All,
                reader,
                live: Live::Tail,
            });
        }
    }
    still.extend(live);
    still
}

/// What every variant of the scenario shares: the recorded stream, and
/// how long a read may go without a delivery.
struct Stage<'a> {
    scenario: &'a str,
    common: &'a CommonPlan,
    stream: &'a str,
    base: &'a str,
    subjects: Vec<String>,
    client: Client,
    js: jetstream::Context,
}

/// The registry's row for `replay`: instant catch-up against original pacing.
pub struct Replay;

impl ScenarioKind for Replay {
    const NAME: &'static str = "replay";
    const COLUMNS: &'static [Column] = &[
        table::VARIANT,
        Column {
            header: "msgs",
            cell: Cell::Metric(MESSAGES, Show::Whole),
        },
        Column {
            header: "first",
            cell: Cell::Metric(FIRST_SEQ, Show::Whole),
        },
        Column {
            header: "msg/s",
            cell: Cell::FirstOf(
                &[
                    names::CATCH_UP.rate,
                    names::PUBLISH.rate,
                    names::DELIVERY_RATE,
                ],
                Show::Rate,
            ),
        },
        Column {
            header: "MB/s",
            cell: Cell::FirstOf(
                &[names::CATCH_UP.throughput, names::PUBLISH.throughput],
                Show::Decimals(1),
            ),
        },
        Column {
            header: "to tail",
            cell: Cell::Metric(TIME_TO_LIVE_TAIL, Show::Ms),
        },
        Column {
            header: "gap err p50",
            cell: Cell::Quantile(GAP_ERROR, "p50", Show::SignedUs),
        },
        Column {
            header: "p99",
            cell: Cell::Quantile(GAP_ERROR, "p99", Show::SignedUs),
        },
        Column {
            header: "drift end",
            cell: Cell::Metric(DRIFT_FINAL, Show::SignedUs),
        },
        Column {
            header: "ratio",
            cell: Cell::Metric(DURATION_RATIO, Show::Times(3)),
        },
        table::LOST,
        table::VERDICT,
    ];
    type Plan = Plan;

    fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
        plan::read(section, problems)
    }

    fn run<'a>(
        ctx: &'a RunContext,
        scenario: &'a ScenarioPlan,
        plan: &'a Plan,
        sink: &'a mut dyn VariantSink,
    ) -> impl Future<Output = Result<()>> + 'a {
        run(ctx, scenario, plan, sink)
    }

    fn need(plan: &Plan, _common: &CommonPlan) -> Need {
        // One stream: the recording, plus what the live variants append.
        let live_variants = plan.readers.len()
            * (usize::from(plan.live_tail)
                + [&plan.instant, &plan.original]
                    .iter()
                    .filter(|l| l.contains(&ReplayDeliver::New))
                    .count());
        let live = plan.live_rate as f64 * plan.live_duration.as_secs_f64() * live_variants as f64;
        let per_message = plan.publish.message_size.mean() as u64 + PER_MESSAGE_OVERHEAD;
        let bytes = (plan.planned_messages + live as u64) * per_message;
        Need {
            streams: 1,
            // A replay's own consumer, and an ordered one the server may still hold.
            consumers: 2,
            bytes,
            total_bytes: bytes,
            max_ack_pending: REPLAY_MAX_ACK_PENDING,
        }
    }

    fn estimated_duration(plan: &Plan, common: &CommonPlan) -> Duration {
        plan.estimated_duration(common)
    }
}

async fn run(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    plan: &Plan,
    sink: &mut dyn VariantSink,
) -> Result<()> {
    // Provision.
    let name = scenario.name();
    let stream_name = ctx.names.stream(name, "rec");
    let base = ctx.names.subject(name, "rec");
    ctx.provisioner
        .create_stream(crate::streams::provision::stream_config(
            &stream_name,
            &base,
            &ctx.server,
            &ctx.stream,
        ))
        .await?;
    let client = ctx.connect.connect("replay").await?;
    let target = Stage {
        scenario: name,
        common: &scenario.common,
        stream: &stream_name,
        base: &base,
        subjects: (0..plan.publish.subjects)
            .map(|i| format!("{base}.{i}"))
            .collect(),
        js: ctx.connect.jetstream(client.clone()),
        client,
    };

    // Record.
    let (result, recording) = variant("record", async |r| {
        describe_record(&scenario.common, plan, r);
        record(ctx, plan, &target, r).await
    })
    .await;
    sink.record(&scenario.common, result)?;

    // Replay.
    if let Some(mut recording) = recording.filter(|r| !r.is_empty()) {
        let recording = &mut recording;
        each(ctx, scenario, sink, variants(plan), async |v| {
            let (result, _) = variant(v.name(), async |r| {
                describe_replay(plan, &v, r);
                super::checks::server_clock(ctx, r);
                replay_variant(ctx, plan, &target, recording, v, r).await
            })
            .await;
            result
        })
        .await?;
    }
    ctx.provisioner
        .delete_stream(&stream_name)
        .await
        .context("cleaning up after the scenario")
}

fn describe_record(common: &CommonPlan, plan: &Plan, r: &mut VariantResult) {
    r.param("arrival", plan.publish.arrival.to_string());
    r.param("rate", plan.rate);
    r.param("duration", format_duration(common.duration));
    r.param("planned_messages", plan.planned_messages);
    r.param("publishers", plan.publish.publishers);
    r.param("message_size", plan.publish.message_size.to_string());
    r.param("subjects", plan.publish.subjects);
}

fn describe_replay(plan: &Plan, v: &OneReplay, r: &mut VariantResult) {
    r.param("replay_policy", v.pace.label());
    r.param("deliver_policy", v.deliver.label());
    r.param("consumer", v.reader.label());
    match v.deliver {
        ReplayDeliver::ByStartSequence => r.param("start_sequence", plan.start_sequence),
        ReplayDeliver::ByStartTime => r.param("start_time", format_duration(plan.start_time)),
        _ => {}
    }
    if v.live != Live::No {
        r.param("live_rate", plan.live_rate);
        r.param("live_duration", format_duration(plan.live_duration));
    }
}

/// Publishes the pattern and reads the stream back as the recording.
async fn record(
    ctx: &RunContext,
    plan: &Plan,
    t: &Stage<'_>,
    r: &mut VariantResult,
) -> Result<Vec<Recorded>> {
    let spec = DriveSpec {
        streams: vec![crate::drive::StreamLoad::new(t.stream, t.subjects.clone())],
        readers: Vec::new(),
        shared_connections: None,
        label: format!("{} record", t.scenario),
        publish: plan.publish.clone(),
        rate: Some(plan.rate),
        count: None,
        warmup: Duration::ZERO,
        duration: t.common.duration,
        drain_timeout: t.common.drain_timeout,
        msg_id_prefix: String::new(),
        seed: 0x5eed,
        fault: None,
        avoid_server: None,
    };
    let outcome = drive(ctx, &spec).await?;
    record_stream(ctx, t.stream, r).await;
    let recording = recording::read(&t.js, t.stream, 1, READ_IDLE).await?;

    // Measure.
    let planned = spec.messages();
    r.metrics.push(count("planned_messages", planned));
    r.metrics.push(count(MESSAGES, recording.len() as u64));
    r.metrics.push(Metric::new(
        names::TARGET_RATE,
        "msg/s",
        plan.rate as f64,
        Direction::None,
    ));
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
    r.metrics.push(Metric::new(
        "recorded_span",
        "s",
        fidelity.replayed_span_ns as f64 / 1e9,
        Direction::None,
    ));
    r.metrics.extend(latency_metrics(
        "recorded_gap",
        &fidelity.original_gaps.summary(),
    ));
    r.histograms
        .push(("recorded_gap".into(), recorded_gaps(&recording)));
    r.metrics
        .extend(signed_metrics("record_gap_error", &fidelity.gap_error));
    r.ledger = outcome.counts;
    r.timelines
        .insert(names::PUBLISHED.into(), outcome.published_timeline.clone());
    if outcome.interrupted {
        r.warnings
            .push("interrupted: the recording covers what was sent".into());
    }
    let backwards = recording
        .windows(2)
        .filter(|w| w[1].published_ns < w[0].published_ns)
        .count();
    if backwards > 0 {
        r.warnings.push(format!(
            "{backwards} server timestamps are earlier than the one before (the server's clock \
             stepped back); by_start_time selects from the first match onwards regardless"
        ));
    }
    r.warnings.extend(outcome.errors.iter().cloned());

    // Verify.
    let c = &outcome.counts;
    r.invariants.push(super::checks::every_publish_persisted(
        "every publish persisted",
        &outcome,
    ));
    // Without consumers the ledger sees no deliveries: "lost" is what the
    // recording does not hold.
    let recorded_persisted = recording
        .iter()
        .filter(|m| outcome.ledger.count(m.seq, Event::Persisted) > 0)
        .count() as u64;
    r.ledger.lost = c.persisted.saturating_sub(recorded_persisted);
    let unconfirmed: Vec<u64> = recording
        .iter()
        .filter(|m| outcome.ledger.count(m.seq, Event::Persisted) == 0)
        .map(|m| m.seq)
        .take(10)
        .collect();
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
    if recording.len() < 2 {
        return Err(anyhow!(
            "the recording holds {} message(s); nothing to replay",
            recording.len()
        ));
    }
    Ok(recording)
}

/// The recorded gaps as a histogram (ns), in stream order.
fn recorded_gaps(recording: &[Recorded]) -> Recorder {
    let mut gaps = Recorder::new();
    for w in recording.windows(2) {
        gaps.record(w[1].published_ns.saturating_sub(w[0].published_ns));
    }
    gaps
}

async fn replay_variant(
    ctx: &RunContext,
    plan: &Plan,
    t: &Stage<'_>,
    recording: &mut Vec<Recorded>,
    v: OneReplay,
    r: &mut VariantResult,
) -> Result<()> {
    // Provision: the consumer is created by the reader; here, what it must deliver.
    let start = Start {
        sequence: plan.start_sequence,
        time_ns: recording[0].published_ns + plan.start_time.as_nanos() as u64,
    };
    let deliver = match v.deliver {
        ReplayDeliver::All => DeliverPolicy::All,
        ReplayDeliver::ByStartSequence => DeliverPolicy::ByStartSequence {
            start_sequence: start.sequence,
        },
        ReplayDeliver::ByStartTime => DeliverPolicy::ByStartTime {
            start_time: time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(start.time_ns))
                .context("the start time is out of range")?,
        },
        ReplayDeliver::Last => DeliverPolicy::Last,
        ReplayDeliver::LastPerSubject => DeliverPolicy::LastPerSubject,
        ReplayDeliver::New => DeliverPolicy::New,
    };
    let before = recording.last().map_or(0, |m| m.seq);
    let selected_now = select(recording, v.deliver, start);
    let (target_tx, target_rx) = watch::channel(match v.live {
        Live::No => selected_now.last().copied().unwrap_or(0),
        Live::New | Live::Tail => u64::MAX,
    });
    let live_messages = (plan.live_rate as f64 * plan.live_duration.as_secs_f64()) as usize;
    let spec = ReplaySpec {
        reader: v.reader,
        stream: t.stream.to_string(),
        name: ctx.names.durable(t.scenario, &r.name),
        deliver,
        pace: v.pace,
        // The server refuses last_per_subject without one (pinned in tests).
        filter: (v.deliver == ReplayDeliver::LastPerSubject).then(|| format!("{}.*", t.base)),
        until_seq: target_rx,
        settle: SETTLE,
        idle: t.common.drain_timeout,
        capacity: selected_now.len()
            + if v.live == Live::No {
                0
            } else {
                live_messages + 1024
            },
    };

    // Drive, metering both sides' CPU over the whole read.
    let client_start = crate::system::cpu::ClientCpu::now();
    let server_meter = ctx.server_cpu.start();
    let (log, live) = match v.live {
        Live::No => (
            read::replay(&t.client, &t.js, spec, ctx.stop.clone()).await?,
            None,
        ),
        Live::New | Live::Tail => {
            let publishing = async {
                let outcome = drive(ctx, &live_spec(plan, t, &r.name)).await;
                // Now the last sequence is known: the reader may finish.
                let last = ctx
                    .provisioner
                    .stream_info(t.stream)
                    .await
                    .map_or(before, |i| i.state.last_sequence);
                let _ = target_tx.send(last);
                outcome
            };
            let (outcome, log) = if v.live == Live::New {
                // The consumer must exist before the first new message.
                let opened = read::open(&t.client, &t.js, spec).await?;
                tokio::join!(publishing, opened.read(ctx.stop.clone()))
            } else {
                let reading = async {
                    // Let the publisher get going first: the consumer then
                    // catches up with a stream that keeps growing.
                    tokio::time::sleep(live_lead(plan)).await;
                    read::replay(&t.client, &t.js, spec, ctx.stop.clone()).await
                };
                tokio::join!(publishing, reading)
            };
            // Extend the recording by what was appended, even when this
            // variant failed: later variants replay those messages too.
            let added = recording::read(&t.js, t.stream, before + 1, READ_IDLE).await;
            let (outcome, log) = (outcome?, log?);
            recording.extend(added?);
            (log, Some(outcome))
        }
    };
    let expected = match v.live {
        Live::No => selected_now,
        Live::New => recording
            .iter()
            .filter(|m| m.seq > before)
            .map(|m| m.seq)
            .collect(),
        Live::Tail => select(recording, ReplayDeliver::All, start),
    };

    // Measure and verify.
    let client = crate::system::cpu::ClientCpu::since(client_start).total();
    // The reader runs on the run's own runtime: what the live publishers
    // (if any) did not use is the reading's.
    let publisher = live.as_ref().map(DriveOutcome::publisher_cpu);
    let split = super::checks::CpuSplit {
        client,
        publisher,
        consumer: Some(client.saturating_sub(publisher.unwrap_or_default())),
        server: server_meter.stop(),
    };
    super::checks::cpu_per_message(&split, log.deliveries.len() as u64, r);
    r.param("selected", expected.len());
    r.param("recording_messages", recording.len());
    measure(&v, &log, live.as_ref(), r);
    verify(&v, &log, &expected, recording, live.as_ref(), r);
    Ok(())
}

/// When the live-tail consumer is created: a quarter into the live
/// publishing, after the drive's 200 ms lead-in.
fn live_lead(plan: &Plan) -> Duration {
    Duration::from_millis(200) + plan.live_duration / 4
}

/// The publisher of the live variants: steady at `live_rate`.
fn live_spec(plan: &Plan, t: &Stage<'_>, variant: &str) -> DriveSpec {
    let mut publish = plan.publish.clone();
    publish.arrival = ArrivalPlan::Steady;
    DriveSpec {
        streams: vec![crate::drive::StreamLoad::new(t.stream, t.subjects.clone())],
        readers: Vec::new(),
        shared_connections: None,
        label: format!("{} {variant}", t.scenario),
        publish,
        rate: Some(plan.live_rate),
        count: None,
        warmup: Duration::ZERO,
        duration: plan.live_duration,
        drain_timeout: t.common.drain_timeout,
        msg_id_prefix: String::new(),
        seed: 0x11fe,
        fault: None,
        avoid_server: None,
    }
}

fn ms(name: &str, ns: u64) -> Metric {
    Metric::new(name, "ms", ns as f64 / 1e6, Direction::Lower)
}

/// Signed percentiles (µs; early is negative) and magnitudes of a signed
/// distribution: `<name>.p1` ... `.max`, `.mean`, `.abs_p50`, `.abs_p99`.
fn signed_metrics(name: &str, s: &Signed) -> Vec<Metric> {
    if s.count() == 0 {
        return Vec::new();
    }
    let us = |ns: f64| ns / 1e3;
    let signed = |suffix: &str, ns: f64| {
        Metric::new(format!("{name}.{suffix}"), "us", us(ns), Direction::None)
    };
    let magnitude = s.magnitude();
    vec![
        signed("min", s.min_ns() as f64),
        signed("p1", s.quantile_ns(0.01) as f64),
        signed("p50", s.quantile_ns(0.50) as f64),
        signed("p90", s.quantile_ns(0.90) as f64),
        signed("p99", s.quantile_ns(0.99) as f64),
        signed("max", s.max_ns() as f64),
        signed("mean", s.mean_ns()),
        Metric::new(
            format!("{name}.abs_p50"),
            "us",
            us(magnitude.quantile(0.50) as f64),
            Direction::Lower,
        ),
        Metric::new(
            format!("{name}.abs_p99"),
            "us",
            us(magnitude.quantile(0.99) as f64),
            Direction::Lower,
        ),
    ]
}

fn measure(v: &OneReplay, log: &ReplayLog, live: Option<&DriveOutcome>, r: &mut VariantResult) {
    let d = &log.deliveries;
    r.metrics.push(count(MESSAGES, d.len() as u64));
    if let Some(first) = d.first() {
        r.metrics.push(count(FIRST_SEQ, first.seq));
        r.metrics.push(ms(
            "time_to_first",
            first.received_ns.saturating_sub(log.requested_ns),
        ));
    }
    if let (Some(first), Some(last)) = (d.first(), d.last())
        && d.len() >= 2
    {
        let span = last.received_ns.saturating_sub(first.received_ns);
        r.metrics.push(Metric::new(
            names::DELIVERY_RATE,
            "msg/s",
            (d.len() - 1) as f64 / (span as f64 / 1e9).max(1e-9),
            Direction::Higher,
        ));
    }
    let seconds = |ns: u64| (ns as f64 / 1e9).max(1e-9);
    match (v.pace, v.live) {
        (ReplayPace::Instant, Live::No) => {
            if let Some(last) = d.last() {
                let took = last.received_ns.saturating_sub(log.requested_ns);
                r.metrics.push(ms("catch_up_time", took));
                r.metrics
                    .extend(crate::record::metrics::rate_and_throughput(
                        names::CATCH_UP,
                        d.len() as f64 / seconds(took),
                        log.bytes as f64 / seconds(took),
                    ));
            }
        }
        (_, Live::Tail) => live_tail(log, live, r),
        (ReplayPace::Original, _) => original(log, r),
        (ReplayPace::Instant, Live::New) => {}
    }
    if let Some(o) = live {
        r.metrics.push(Metric::new(
            "live_publish_rate",
            "msg/s",
            o.publish_rate(),
            Direction::None,
        ));
    }
    if v.pace == ReplayPace::Original || v.live != Live::No {
        r.timelines
            .insert(names::DELIVERED.into(), log.timeline.clone());
    }
    let ledger = replay_ledger(log, live);
    r.ledger = ledger;
    match log.end {
        End::Stalled => r.warnings.push(format!(
            "the replay stopped after {} deliveries: nothing arrived for the drain timeout",
            d.len()
        )),
        End::Interrupted => r
            .warnings
            .push("interrupted: the variant stopped early".into()),
        End::Closed => r
            .warnings
            .push("the consumer's message stream closed before the replay ended".into()),
        End::Reached => {}
    }
    r.warnings
        .extend(log.errors.iter().map(|e| format!("consumer: {e}")));
    if let Some(o) = live {
        r.warnings.extend(o.errors.iter().cloned());
    }
}

/// Catching up with a stream that keeps growing: the first delivery after
/// which the server had nothing more pending is the live tail.
fn live_tail(log: &ReplayLog, live: Option<&DriveOutcome>, r: &mut VariantResult) {
    let d = &log.deliveries;
    let Some(at) = d.iter().position(|x| x.pending == 0) else {
        r.warnings
            .push("the consumer never reached the live tail".into());
        return;
    };
    let tail = d[at].received_ns;
    let took = tail.saturating_sub(log.requested_ns);
    r.metrics.push(ms(TIME_TO_LIVE_TAIL, took));
    r.metrics.push(count("caught_up_messages", at as u64 + 1));
    r.metrics.push(Metric::new(
        names::CATCH_UP.rate,
        "msg/s",
        (at + 1) as f64 / (took as f64 / 1e9).max(1e-9),
        Direction::Higher,
    ));
    let bytes_per_message = log.bytes as f64 / d.len().max(1) as f64;
    r.metrics.push(Metric::new(
        names::CATCH_UP.throughput,
        "MB/s",
        (at + 1) as f64 * bytes_per_message / (took as f64 / 1e9).max(1e-9) / 1e6,
        Direction::Higher,
    ));
    // Once at the tail, a delivery's lag behind its storing is the live
    // end-to-end latency (server clock to jsbench's clock, one host).
    let mut lag = Recorder::new();
    for x in &d[at + 1..] {
        lag.record_between(x.published_ns, x.received_ns);
    }
    if lag.count() > 0 {
        r.metrics
            .extend(latency_metrics("live_lag", &lag.summary()));
        r.histograms.push(("live_lag".into(), lag));
    }
    let publishing_ended = live
        .and_then(|o| o.sends.iter().map(|s| s.last_sent_ns).max())
        .unwrap_or(0);
    if tail > publishing_ended {
        r.warnings.push(format!(
            "the consumer reached the tail only after publishing ended ({:.0} ms later): a longer \
             live_duration or a lower live_rate measures catching up with a live stream",
            (tail - publishing_ended) as f64 / 1e6
        ));
    }
}

/// Pacing fidelity of a replay at the original pace.
fn original(log: &ReplayLog, r: &mut VariantResult) {
    let pairs: Vec<(u64, u64)> = log
        .deliveries
        .iter()
        .map(|x| (x.published_ns, x.received_ns))
        .collect();
    let p = pacing::analyse(&pairs);
    if p.messages < 2 {
        return;
    }
    pacing_metrics(&p, r);
    for (late, early, s) in [
        (GAP_ERROR_LATE, GAP_ERROR_EARLY, &p.gap_error),
        ("drift.late", "drift.early", &p.drift),
    ] {
        r.histograms.push((late.into(), s.late().clone()));
        r.histograms.push((early.into(), s.early().clone()));
    }
    r.histograms
        .push(("original_gap".into(), p.original_gaps.clone()));
    let origin = log.deliveries[0].published_ns;
    r.timelines.extend(p.series_timelines(origin));
}

fn pacing_metrics(p: &Pacing, r: &mut VariantResult) {
    if let Some(ratio) = p.duration_ratio() {
        r.metrics
            .push(Metric::new(DURATION_RATIO, "ratio", ratio, Direction::None));
    }
    r.metrics.push(Metric::new(
        "original_span",
        "s",
        p.original_span_ns as f64 / 1e9,
        Direction::None,
    ));
    r.metrics.push(Metric::new(
        "replayed_span",
        "s",
        p.replayed_span_ns as f64 / 1e9,
        Direction::None,
    ));
    r.metrics.extend(signed_metrics(GAP_ERROR, &p.gap_error));
    r.metrics.extend(signed_metrics("drift", &p.drift));
    r.metrics.push(Metric::new(
        DRIFT_FINAL,
        "us",
        p.final_drift_ns as f64 / 1e3,
        Direction::None,
    ));
    for (class, errors) in GAP_CLASSES.iter().zip(&p.by_gap) {
        if errors.count() == 0 {
            continue;
        }
        let prefix = format!("{GAP_ERROR_BY_GAP}.{}", class.name);
        r.metrics
            .push(count(format!("{prefix}.count"), errors.count()));
        r.metrics.push(Metric::new(
            format!("{prefix}.p50"),
            "us",
            errors.quantile_ns(0.5) as f64 / 1e3,
            Direction::None,
        ));
        let magnitude = errors.magnitude();
        for (suffix, q) in [("abs_p50", 0.5), ("abs_p99", 0.99)] {
            r.metrics.push(Metric::new(
                format!("{prefix}.{suffix}"),
                "us",
                magnitude.quantile(q) as f64 / 1e3,
                Direction::Lower,
            ));
        }
    }
    // The smallest gap reproduced within 1 ms, by the median and by the
    // 99th percentile of each gap class's error.
    for (suffix, q) in [("p50", 0.5), ("p99", 0.99)] {
        if let Some(gap) = p.smallest_gap_within(WITHIN.as_nanos() as u64, q, MIN_CLASS_GAPS) {
            r.metrics.push(Metric::new(
                format!("{SMALLEST_GAP_WITHIN_1MS}.{suffix}"),
                "us",
                gap as f64 / 1e3,
                Direction::Lower,
            ));
        }
    }
}

/// The ledger of a replay: what the live publisher stored, what was
/// delivered, how often.
fn replay_ledger(log: &ReplayLog, live: Option<&DriveOutcome>) -> LedgerCounts {
    let mut c = live.map(|o| o.counts).unwrap_or_default();
    let mut times: HashMap<u64, u64> = HashMap::with_capacity(log.deliveries.len());
    for x in &log.deliveries {
        *times.entry(x.seq).or_default() += 1;
    }
    c.deliveries = log.deliveries.len() as u64;
    c.delivered = times.len() as u64;
    c.redelivered = times.values().filter(|&&n| n > 1).count() as u64;
    c.redeliveries = times.values().map(|n| n - 1).sum();
    // A live publisher's ledger has no deliveries: its "lost" is for the
    // replay's invariants to say.
    c.lost = 0;
    c
}

fn verify(
    v: &OneReplay,
    log: &ReplayLog,
    expected: &[u64],
    recording: &[Recorded],
    live: Option<&DriveOutcome>,
    r: &mut VariantResult,
) {
    let d = &log.deliveries;
    let delivered: Vec<u64> = d.iter().map(|x| x.seq).collect();
    let first = |seqs: &[u64]| seqs.first().map_or("none".to_string(), u64::to_string);
    // A policy that selects nothing (`new` with nothing appended) leaves
    // the order and content checks nothing to look at.
    let nothing = expected.is_empty() && delivered.is_empty();
    let none_selected = "the policy selected no message, and none was delivered";
    r.invariants.push(if nothing {
        Invariant::not_applicable("first message = the policy's first", none_selected)
    } else {
        Invariant::check(
            "first message = the policy's first",
            delivered.first() == expected.first(),
            format!(
                "first delivered sequence {} (selected: {})",
                first(&delivered),
                first(expected)
            ),
        )
    });
    r.invariants.push(Invariant::equal(
        "count = selected count",
        delivered.len() as u64,
        expected.len() as u64,
    ));
    let out_of_order = delivered.windows(2).position(|w| w[1] <= w[0]);
    r.invariants.push(if nothing {
        Invariant::not_applicable("in stream order", none_selected)
    } else {
        Invariant::check(
            "in stream order",
            out_of_order.is_none(),
            match out_of_order {
                None => format!("{} deliveries, each after the one before", delivered.len()),
                Some(i) => format!(
                    "delivery {} (sequence {}) came after sequence {}",
                    i + 1,
                    delivered[i + 1],
                    delivered[i]
                ),
            },
        )
    });
    let (missing, extra) = difference(expected, &delivered);
    let lost_detail = if missing.is_empty() {
        format!("all {} selected messages delivered", expected.len())
    } else {
        format!(
            "{} of {} selected messages never delivered (first sequences: {:?})",
            missing.len(),
            expected.len(),
            &missing[..missing.len().min(10)]
        )
    };
    r.invariants.push(Invariant::check(
        "nothing lost",
        missing.is_empty(),
        lost_detail,
    ));
    r.ledger.lost = missing.len() as u64;
    r.invariants.push(Invariant::check(
        "nothing extra",
        extra.is_empty() && log.redelivered == 0,
        if extra.is_empty() && log.redelivered == 0 {
            "no delivery outside the selection, none twice".to_string()
        } else {
            format!(
                "{} deliveries outside the selection or repeated (first sequences: {:?}), {} \
                 marked redelivered",
                extra.len(),
                &extra[..extra.len().min(10)],
                log.redelivered
            )
        },
    ));
    let by_seq: HashMap<u64, &Recorded> = recording.iter().map(|m| (m.seq, m)).collect();
    let differing: Vec<u64> = d
        .iter()
        .filter(|x| by_seq.get(&x.seq).is_none_or(|m| !same_message(m, x)))
        .map(|x| x.seq)
        .collect();
    r.invariants.push(if nothing {
        Invariant::not_applicable("each delivery is the recorded message", none_selected)
    } else {
        Invariant::check(
            "each delivery is the recorded message",
            differing.is_empty() && log.malformed == 0,
            format!(
                "{} deliveries differ from the recording in timestamp or stamp (first: {:?}), {} \
             without a stamp",
                differing.len(),
                &differing[..differing.len().min(10)],
                log.malformed
            ),
        )
    });
    let (passed, detail) = match (v.reader, log.server_state, d.last()) {
        (ReplayReader::Pull, Some((pending, ack_pending)), _) => (
            pending == 0 && ack_pending == 0,
            format!("num_pending {pending}, num_ack_pending {ack_pending}"),
        ),
        (ReplayReader::Pull, None, _) => (false, "consumer info unavailable".to_string()),
        (ReplayReader::Ordered, _, Some(last)) => (
            last.pending == 0,
            format!("{} pending after the last delivery", last.pending),
        ),
        (ReplayReader::Ordered, _, None) => (
            true,
            "no delivery, none selected to report pending".to_string(),
        ),
    };
    r.invariants.push(Invariant::check(
        "server reports nothing pending",
        passed,
        detail,
    ));
    if let Some(o) = live {
        r.invariants.push(super::checks::every_publish_persisted(
            "every live publish persisted",
            o,
        ));
    }
}

/// A delivery carries what was recorded under its sequence: the server's
/// timestamp and jsbench's stamp.
fn same_message(m: &Recorded, x: &Delivery) -> bool {
    m.published_ns == x.published_ns && m.origin == x.origin
}

/// (selected but not delivered, delivered but not selected or repeated),
/// both sorted.
fn difference(expected: &[u64], delivered: &[u64]) -> (Vec<u64>, Vec<u64>) {
    let mut seen: HashMap<u64, u32> = HashMap::with_capacity(delivered.len());
    for &s in delivered {
        *seen.entry(s).or_default() += 1;
    }
    let mut missing = Vec::new();
    for s in expected {
        match seen.get_mut(s) {
            Some(n) if *n > 0 => *n -= 1,
            _ => missing.push(*s),
        }
    }
    let mut extra: Vec<u64> = seen
        .into_iter()
        .flat_map(|(s, n)| std::iter::repeat_n(s, n as usize))
        .collect();
    extra.sort_unstable();
    (missing, extra)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_name_missing_extra_and_repeated_sequences() {
        assert_eq!(difference(&[1, 2, 3], &[1, 2, 3]), (vec![], vec![]));
        assert_eq!(
            difference(&[1, 2, 3, 4], &[1, 3, 3, 9]),
            (vec![2, 4], vec![3, 9])
        );
        assert_eq!(difference(&[], &[5]), (vec![], vec![5]));
    }

    /// A recording of sequences 1..=5 and a clean replay of 2..=5.
    fn clean() -> (Vec<Recorded>, Vec<u64>, ReplayLog) {
        let recording: Vec<Recorded> = (1..=5)
            .map(|seq| Recorded {
                seq,
                published_ns: 1_000 * seq,
                subject: 0,
                origin: seq,
                intended_ns: 0,
            })
            .collect();
        let expected = vec![2, 3, 4, 5];
        let deliveries = expected
            .iter()
            .map(|&seq| Delivery {
                seq,
                published_ns: 1_000 * seq,
                received_ns: 0,
                pending: 5 - seq,
                origin: seq,
            })
            .collect();
        let log = ReplayLog {
            requested_ns: 0,
            deliveries,
            bytes: 0,
            malformed: 0,
            redelivered: 0,
            errors: Vec::new(),
            end: End::Reached,
            server_state: Some((0, 0)),
            timeline: crate::record::timeline::Timeline::per_second(0),
        };
        (recording, expected, log)
    }

    /// The names of the invariants `verify` fails for `log`.
    fn failing(reader: ReplayReader, log: &ReplayLog) -> Vec<String> {
        let (recording, expected, _) = clean();
        let v = OneReplay {
            pace: ReplayPace::Instant,
            deliver: ReplayDeliver::ByStartSequence,
            reader,
            live: Live::No,
        };
        let mut r = VariantResult::new("t");
        verify(&v, log, &expected, &recording, None, &mut r);
        r.broken().into_iter().map(String::from).collect()
    }

    /// Each check fails on the fault it is for and on nothing else: the
    /// server cannot be made to break these on demand, so the deliveries
    /// are forged.
    #[test]
    fn each_replay_check_fails_on_its_own_fault() {
        let (_, _, log) = clean();
        assert!(failing(ReplayReader::Pull, &log).is_empty());
        assert!(failing(ReplayReader::Ordered, &log).is_empty());

        let mut wrong_start = clean().2;
        wrong_start.deliveries.insert(0, wrong_start.deliveries[0]);
        wrong_start.deliveries[0].seq = 1;
        wrong_start.deliveries[0].published_ns = 1_000;
        wrong_start.deliveries[0].origin = 1;
        assert_eq!(
            failing(ReplayReader::Pull, &wrong_start),
            [
                "first message = the policy's first",
                "count = selected count",
                "nothing extra"
            ]
        );

        let mut swapped = clean().2;
        swapped.deliveries.swap(1, 2);
        assert_eq!(failing(ReplayReader::Pull, &swapped), ["in stream order"]);

        let mut short = clean().2;
        short.deliveries.pop();
        short.deliveries[2].pending = 0;
        assert_eq!(
            failing(ReplayReader::Ordered, &short),
            ["count = selected count", "nothing lost"]
        );

        let mut marked = clean().2;
        marked.redelivered = 1;
        assert_eq!(failing(ReplayReader::Pull, &marked), ["nothing extra"]);

        let mut altered = clean().2;
        altered.deliveries[1].origin = 99;
        assert_eq!(
            failing(ReplayReader::Pull, &altered),
            ["each delivery is the recorded message"]
        );
        let mut retimed = clean().2;
        retimed.deliveries[1].published_ns += 1;
        assert_eq!(
            failing(ReplayReader::Pull, &retimed),
            ["each delivery is the recorded message"]
        );
        let mut unstamped = clean().2;
        unstamped.malformed = 1;
        assert_eq!(
            failing(ReplayReader::Pull, &unstamped),
            ["each delivery is the recorded message"]
        );

        let mut pending = clean().2;
        pending.server_state = Some((0, 1));
        assert_eq!(
            failing(ReplayReader::Pull, &pending),
            ["server reports nothing pending"]
        );
        pending.server_state = None;
        assert_eq!(
            failing(ReplayReader::Pull, &pending),
            ["server reports nothing pending"]
        );
        let mut behind = clean().2;
        behind.deliveries.last_mut().unwrap().pending = 3;
        assert_eq!(
            failing(ReplayReader::Ordered, &behind),
            ["server reports nothing pending"]
        );

        // A live publisher's publish the server did not persist.
        let (recording, expected, log) = clean();
        let mut live = DriveOutcome::empty();
        live.counts.published = 3;
        live.counts.persisted = 2;
        let v = OneReplay {
            pace: ReplayPace::Instant,
            deliver: ReplayDeliver::New,
            reader: ReplayReader::Pull,
            live: Live::New,
        };
        let mut r = VariantResult::new("t");
        verify(&v, &log, &expected, &recording, Some(&live), &mut r);
        assert_eq!(r.broken(), ["every live publish persisted"]);
    }

    #[test]
    fn variants_replay_the_recording_first_and_append_last() {
        let plan = crate::scenario::parse(
            "t",
            "name = \"t\"\n[[scenario]]\nkind = \"replay\"\nduration = \"1s\"\nrate = 100\n\
             instant = [\"new\", \"all\"]\noriginal = [\"last\"]\nconsumers = [\"pull\"]\nlive_tail = true\n",
        )
        .unwrap();
        let super::super::KindPlan::Replay(plan) = &plan.scenarios[0].kind else {
            panic!("replay")
        };
        let names: Vec<String> = variants(plan).iter().map(OneReplay::name).collect();
        assert_eq!(
            names,
            [
                "instant.all.pull",
                "original.last.pull",
                "instant.new.pull",
                "instant.live_tail.pull"
            ]
        );
        assert_eq!(plan.variant_count(), 1 + names.len());
    }
}
