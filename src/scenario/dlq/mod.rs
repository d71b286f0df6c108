//! `dlq`: the dead-letter queue of the seed, under load. A stream takes a
//! fixed rate; its consumer follows a behaviour plan in which a fraction of
//! messages are poison (they fail every delivery and run out of
//! MaxDeliver); the [`crate::dlq`] pipeline captures the MAX_DELIVERIES
//! advisories and its handler copies each poison message into the DLQ
//! stream. One variant per retention of the source stream: limits (the
//! original stays), work queue (the handler deletes it once the copy is
//! persisted), interest (a second consumer acks everything; the original
//! stays for the one that gave up on it); and first, optionally, the same
//! load without poison, for the effect on healthy messages.
//!
//! Measures the time from a poison message's final delivery to its copy's
//! PubAck, and its parts: to the advisory's arrival at the handler, and the
//! handler's own work; the handler's throughput; and healthy messages'
//! end-to-end latency against the baseline. Checks, by reading the DLQ
//! stream back, that every poison message is there exactly once with its
//! original payload and headers (publish control dropped) and nothing else
//! is; that originals are deleted or kept as the retention says; that a
//! handler killed after a copy and before its ack still leaves one copy;
//! and that nothing is lost.

pub mod plan;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use async_nats::jetstream::stream;

use super::table::{self, Cell, Column, Show};
use super::{ScenarioKind, ScenarioPlan, checks};
use crate::consume::fates::{self, Analysis};
use crate::consume::{self, ConsumerConfig, ConsumerProgress, ConsumerReport};
use crate::dlq::audit::{self, Audit};
use crate::dlq::{Key, Outcome, Pipeline, PipelineReport, PipelineSpec, Watched, redrive};
use crate::drive::{ConsumerSpec, DriveOutcome, DriveSpec, RunContext, drive};
use crate::profile::{
    BehaviourPlan, Capture, CommonPlan, ConsumerPlan, OriginalGet, Problems, Retention, Section,
    ServerPlan, format_duration,
};
use crate::record::histogram::Recorder;
use crate::record::ledger::Event;
use crate::record::metrics::{Direction, Metric, count, latency_metrics, ratio};
use crate::record::names;
use crate::streams::advisory::Kind;
use crate::streams::provision::{Need, durable_config, placement};
use crate::variant::{Invariant, VariantResult, VariantSink};

pub use plan::Plan;

/// The figures this scenario reports that its table, the charts and
/// report.html read, by name.
/// Dead letters due, and those found in the DLQ.
pub const DEAD_LETTERS_EXPECTED: &str = "dead_letters.expected";
pub const DEAD_LETTERS_IN_DLQ: &str = "dead_letters.in_dlq";
/// From the final delivery to the copy's PubAck, a histogram.
pub const DLQ_LATENCY: &str = "dlq_latency";
pub const DLQ_AFTER_DEADLINE: &str = "dlq_after_deadline";
pub const ADVISORY_AFTER_DEADLINE: &str = "advisory_after_deadline";
pub const HANDLER_LATENCY: &str = "handler_latency";
pub const HANDLER_CAPACITY: &str = "handler_capacity";
pub const HANDLER_RESTARTS: &str = "handler.restarts";
pub const COPIES_DUPLICATES_FLAGGED: &str = "copies.duplicates_flagged";
/// Healthy messages against the poison-free baseline.
pub const VS_BASELINE_E2E_P50: &str = "vs_baseline.e2e_p50_ratio";
pub const VS_BASELINE_E2E_P99: &str = "vs_baseline.e2e_p99_ratio";

/// How often consumer info is sampled while a variant runs.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// After a Ctrl-C, how long the copies of what was exhausted may take.
const INTERRUPTED_WAIT: Duration = Duration::from_secs(2);

/// The watched consumer's index in the pipeline: the scenario watches one.
const WATCHED: usize = 0;

/// What the retention variants are compared with.
#[derive(Debug, Clone, Copy)]
struct Figures {
    e2e_p50_us: f64,
    e2e_p99_us: f64,
}

/// The registry's row for `dlq`: the advisory-built dead-letter queue.
pub struct Dlq;

impl ScenarioKind for Dlq {
    const NAME: &'static str = "dlq";
    const COLUMNS: &'static [Column] = &[
        table::VARIANT,
        table::ACHIEVED,
        table::quantile("e2e p50", names::E2E_LATENCY, "p50"),
        table::quantile("p99", names::E2E_LATENCY, "p99"),
        Column {
            header: "in DLQ/dead",
            cell: Cell::Counts(&[DEAD_LETTERS_IN_DLQ, DEAD_LETTERS_EXPECTED], "/"),
        },
        table::quantile("DLQ p50", DLQ_LATENCY, "p50"),
        table::quantile("p99", DLQ_LATENCY, "p99"),
        table::quantile("after deadline p50", DLQ_AFTER_DEADLINE, "p50"),
        table::quantile("p99", DLQ_AFTER_DEADLINE, "p99"),
        Column {
            header: "handler/s",
            cell: Cell::Metric(HANDLER_CAPACITY, Show::Rate),
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

    fn need(plan: &Plan, common: &CommonPlan) -> Need {
        Need {
            // The source, the advisory capture and the DLQ stream; the
            // durable, the handler's and (interest) a second one.
            streams: 3,
            consumers: 3,
            ..Need::of_load(&plan.load, common)
        }
    }

    fn estimated_duration(plan: &Plan, common: &CommonPlan) -> Duration {
        (common.duration + common.warmup)
            * (plan.retentions.len() + usize::from(plan.baseline)) as u32
    }

    fn consumer(plan: &Plan) -> Option<&ConsumerPlan> {
        Some(&plan.load.consumer)
    }

    fn consumer_mut(plan: &mut Plan) -> Option<&mut ConsumerPlan> {
        Some(&mut plan.load.consumer)
    }
}

async fn run(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    plan: &Plan,
    sink: &mut dyn VariantSink,
) -> Result<()> {
    let mut baseline = None;
    if plan.baseline {
        // The same load and pipeline, every message acked at once.
        let clean = BehaviourPlan {
            classes: Vec::new(),
            ..plan.load.behaviour.clone()
        };
        let (result, figures) = one_variant(
            ctx,
            scenario,
            plan,
            Variant {
                name: "baseline",
                retention: Retention::Limits,
                behaviour: clean,
                restart_after: None,
            },
            None,
        )
        .await;
        baseline = figures;
        sink.record(&scenario.common, result)?;
    }
    for retention in &plan.retentions {
        if ctx.stop.is_cancelled() {
            break;
        }
        let (result, _) = one_variant(
            ctx,
            scenario,
            plan,
            Variant {
                name: retention.label(),
                retention: *retention,
                behaviour: plan.load.behaviour.clone(),
                restart_after: plan.handler.restart_after,
            },
            baseline,
        )
        .await;
        sink.record(&scenario.common, result)?;
    }
    Ok(())
}

struct Variant {
    name: &'static str,
    retention: Retention,
    behaviour: BehaviourPlan,
    restart_after: Option<u64>,
}

async fn one_variant(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    plan: &Plan,
    v: Variant,
    baseline: Option<Figures>,
) -> (VariantResult, Option<Figures>) {
    super::lifecycle::variant(v.name, async |r| {
        describe(&scenario.common, plan, &v, r);
        super::checks::server_clock(ctx, r);
        run_variant(ctx, scenario, plan, v, baseline, r).await
    })
    .await
}

fn describe(common: &CommonPlan, plan: &Plan, v: &Variant, r: &mut VariantResult) {
    let c = &plan.load.consumer;
    let h = &plan.handler;
    r.param("retention", v.retention);
    r.param("rate", plan.load.rate);
    super::shape::describe(&plan.load.publish.arrival, r);
    r.param("duration", format_duration(common.duration));
    r.param("warmup", format_duration(common.warmup));
    r.param("publishers", plan.load.publish.publishers);
    r.param("msg_id", plan.load.publish.msg_id);
    r.param("consumers", c.consumers);
    r.param("ack_wait", format_duration(c.ack_wait));
    r.param(
        "backoff",
        c.backoff
            .iter()
            .map(|d| format_duration(*d))
            .collect::<Vec<_>>(),
    );
    r.param("max_deliver", c.max_deliver);
    r.param("classes", &v.behaviour.classes);
    r.param("seed", v.behaviour.seed);
    r.param("capture", plan.capture);
    r.param("terminated", plan.terminated);
    r.param("handler.ack_wait", format_duration(h.ack_wait));
    r.param("handler.retry_delay", format_duration(h.retry_delay));
    r.param("handler.concurrency", h.concurrency);
    r.param("handler.get", h.get);
    r.param("handler.erase", h.erase);
    r.param("handler.restart_after", v.restart_after);
    r.param("handler.origin_headers", &h.origin_headers);
}

/// The seed's warning, measured: a dead letter whose original a stream
/// limit evicted before the handler read it cannot be copied; the handler
/// terms its advisory and the letter is lost. Every original the handler
/// found gone must lie below the first sequence the stream kept.
fn originals_gone(o: &DriveOutcome, gone: &BTreeSet<u64>, r: &mut VariantResult) {
    const NAME: &str = "originals found gone were evicted by the stream's limits";
    r.metrics
        .push(count("dead_letters.lost_to_eviction", gone.len() as u64));
    if gone.is_empty() {
        r.invariants.push(Invariant::not_applicable(
            NAME,
            "the handler found every original it looked for",
        ));
        return;
    }
    let first_kept = o.eviction.as_ref().map(|e| e.first_kept);
    let unexplained: Vec<u64> = gone
        .iter()
        .copied()
        .filter(|&s| first_kept.is_none_or(|f| s >= f))
        .collect();
    r.warnings.push(format!(
        "{} dead letters lost: the stream's limits evicted their originals before the handler \
         read them (the handler termed their advisories)",
        gone.len()
    ));
    r.invariants.push(Invariant::check(
        NAME,
        unexplained.is_empty(),
        match first_kept {
            Some(f) => format!(
                "{} originals gone, {} of them below the first sequence the stream kept ({f}); \
                 not evicted: {:?}",
                gone.len(),
                gone.len() - unexplained.len(),
                &unexplained[..unexplained.len().min(5)]
            ),
            None => format!(
                "{} originals gone, and the stream has no limit that evicts: {:?}",
                gone.len(),
                &unexplained[..unexplained.len().min(5)]
            ),
        },
    ));
}

/// How long the healthy durable may take to read a redrive, and how long
/// it must then stay quiet (a second delivery of a redriven message would
/// come within it).
const REDRIVE_DEADLINE: Duration = Duration::from_secs(30);
const REDRIVE_QUIET: Duration = Duration::from_millis(300);

/// A variant's redrive: two passes over the dead letters, what the
/// durable read of the first, and the source stream's count around the
/// second.
struct Redriven {
    letters: u64,
    first: redrive::Pass,
    second: redrive::Pass,
    received: redrive::Received,
    stored_before_second: Option<u64>,
    stored_after_second: Option<u64>,
}

/// Sends the letters back onto their subjects, reads them with the
/// variant's durable (healthy now: it acks everything), then sends them
/// again: the second pass must be answered as duplicates.
async fn redrive(
    ctx: &RunContext,
    (stream, durable): (&str, &str),
    letters: &[audit::DeadLetter],
    names: &crate::profile::OriginHeaders,
) -> Result<Redriven> {
    let js = ctx.provisioner.jetstream();
    let first = redrive::publish(js, letters, names).await;
    let consumer: async_nats::jetstream::consumer::PullConsumer = js
        .get_stream(stream)
        .await
        .with_context(|| format!("opening {stream} to read the redrive"))?
        .get_consumer(durable)
        .await
        .map_err(|e| anyhow::anyhow!("binding to {durable} to read the redrive: {e}"))?;
    let deadline = tokio::time::Instant::now() + REDRIVE_DEADLINE;
    let received =
        redrive::consume(&consumer, &first, letters, names, REDRIVE_QUIET, deadline).await?;
    let count = || async {
        ctx.provisioner
            .stream_info(stream)
            .await
            .map(|i| i.state.messages)
    };
    let stored_before_second = count().await;
    let second = redrive::publish(js, letters, names).await;
    Ok(Redriven {
        letters: letters.len() as u64,
        first,
        second,
        received,
        stored_before_second,
        stored_after_second: count().await,
    })
}

/// The redrive's figures and checks.
fn redrive_results(redriven: &Result<Redriven>, r: &mut VariantResult) {
    const NAMES: [&str; 3] = [
        "every dead letter redriven",
        "a second redrive stores nothing",
        "every redriven message consumed once",
    ];
    let d = match redriven {
        Ok(d) if d.letters > 0 => d,
        Ok(_) => {
            for name in NAMES {
                r.invariants
                    .push(Invariant::not_applicable(name, "nothing was dead-lettered"));
            }
            return;
        }
        Err(e) => {
            for name in NAMES {
                r.invariants.push(Invariant::check(
                    name,
                    false,
                    format!("the redrive failed: {e:#}"),
                ));
            }
            return;
        }
    };
    let (first, second, got) = (&d.first, &d.second, &d.received);
    r.metrics.push(Metric::new(
        "redrive_rate",
        "msg/s",
        first.rate(),
        Direction::Higher,
    ));
    r.metrics.push(count("redriven", first.stored));
    r.metrics
        .push(count("redrive_second_pass_duplicates", second.duplicates));
    r.latency("redrive_pub_ack_latency", &first.pub_ack);
    r.latency("redrive_e2e_latency", &got.e2e);
    let errors = |p: &redrive::Pass| {
        if p.errors.is_empty() {
            String::new()
        } else {
            format!("; e.g. {}", p.errors.join("; "))
        }
    };
    r.invariants.push(Invariant::check(
        NAMES[0],
        first.failed == 0 && first.stored == d.letters,
        format!(
            "{} letters: {} stored back, {} already there, {} failed{}",
            d.letters,
            first.stored,
            first.duplicates,
            first.failed,
            errors(first)
        ),
    ));
    let unchanged =
        d.stored_before_second.is_some() && d.stored_before_second == d.stored_after_second;
    r.invariants.push(Invariant::check(
        NAMES[1],
        second.duplicates == d.letters && second.stored == 0 && unchanged,
        format!(
            "second pass: {} flagged duplicate, {} stored, {} failed; the stream held {} \
             messages before it and {} after{}",
            second.duplicates,
            second.stored,
            second.failed,
            show(d.stored_before_second),
            show(d.stored_after_second),
            errors(second)
        ),
    ));
    let missing = first
        .sent_ns
        .keys()
        .filter(|id| !got.deliveries.contains_key(*id))
        .count();
    let twice = got.deliveries.values().filter(|&&n| n > 1).count();
    r.invariants.push(Invariant::check(
        NAMES[2],
        missing == 0 && twice == 0 && got.others == 0 && got.altered == 0,
        format!(
            "{} redriven: {missing} never received, {twice} received more than once, {} \
             payloads altered, {} other deliveries{}",
            first.sent_ns.len(),
            got.altered,
            got.others,
            if got.errors.is_empty() {
                String::new()
            } else {
                format!("; {}", got.errors.join("; "))
            }
        ),
    ));
}

/// Everything read back after the load, before the streams go.
struct Evidence {
    pipeline: PipelineReport,
    contents: Result<audit::DlqContents>,
    /// The expected originals as the source holds them now.
    now: Result<BTreeMap<u64, Option<async_nats::jetstream::message::StreamMessage>>>,
    /// Messages in the source stream at the end.
    stored: Option<u64>,
    other: Option<OtherEnd>,
    watched: Vec<Watched>,
    dlq_prefix: String,
    /// What the copies name their origin headers.
    origin_headers: crate::profile::OriginHeaders,
    /// Sequences whose original the handler found gone.
    gone: BTreeSet<u64>,
}

async fn run_variant(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    plan: &Plan,
    v: Variant,
    baseline: Option<Figures>,
    result: &mut VariantResult,
) -> Result<Figures> {
    let (common, scenario) = (&scenario.common, scenario.name());
    // Provision: the source stream and its durable, a second durable on an
    // interest stream, the pipeline.
    let variant = result.name.clone();
    let stream_name = ctx.names.stream(scenario, &variant);
    let base = ctx.names.subject(scenario, &variant);
    let durable = ctx.names.durable(scenario, &variant);
    let durable_name = durable.clone();
    let stream = ctx
        .provisioner
        .create_stream({
            let config = crate::streams::provision::stream_config(
                &stream_name,
                &base,
                &ctx.server,
                &ctx.stream,
            );
            stream::Config {
                retention: match v.retention {
                    Retention::Limits => stream::RetentionPolicy::Limits,
                    Retention::Workqueue => stream::RetentionPolicy::WorkQueue,
                    Retention::Interest => stream::RetentionPolicy::Interest,
                },
                allow_direct: config.allow_direct || plan.handler.get == OriginalGet::Direct,
                ..config
            }
        })
        .await?;
    let c = &plan.load.consumer;
    ctx.provisioner
        .create_consumer(&stream, durable_config(&durable, c, &base), c.pedantic)
        .await?;
    let other = if v.retention == Retention::Interest {
        let name = ctx.names.durable(scenario, &format!("{variant}_other"));
        ctx.provisioner
            .create_consumer(
                &stream,
                durable_config(&name, &ConsumerPlan::simple(), &base),
                false,
            )
            .await?;
        Some(name)
    } else {
        None
    };
    let spec = PipelineSpec::named(
        &ctx.names,
        scenario,
        &variant,
        plan.capture,
        plan.terminated,
        vec![Watched {
            stream: stream_name.clone(),
            consumer: durable.clone(),
            delete_original: v.retention == Retention::Workqueue,
        }],
        crate::profile::DlqHandlerPlan {
            restart_after: v.restart_after,
            ..plan.handler.clone()
        },
    );
    let names = [
        stream_name.clone(),
        spec.advisory_stream.clone(),
        spec.dlq_stream.clone(),
    ];
    let (watched, dlq_prefix) = (spec.watched.clone(), spec.dlq_prefix.clone());
    // The advisory capture and the DLQ live on the storage under test.
    let server = ServerPlan {
        storage: ctx.stream.storage.unwrap_or(ctx.server.storage),
        ..ctx.server
    };
    let pipeline = Pipeline::start(&ctx.provisioner, &ctx.connect, &server, spec).await?;

    // Drive.
    let behaviour = Arc::new(v.behaviour);
    let mut drive_spec = DriveSpec::paced(
        format!("{scenario} {variant}"),
        &stream_name,
        format!("{base}.0"),
        &plan.load.publish,
        common,
        plan.load.rate,
        ConsumerSpec {
            // The audit's record of originals that may be gone by then.
            keep_doomed: true,
            ..ConsumerSpec::observed(durable, c.clone(), behaviour.clone(), SAMPLE_EVERY)
        },
    );
    drive_spec.msg_id_prefix = variant.clone();
    let other = match other {
        Some(name) => Some(Other::start(ctx, &stream_name, name, drive_spec.messages()).await),
        None => None,
    };
    let outcome = drive(ctx, &drive_spec).await;
    let analysis = outcome.as_ref().ok().map(|o| {
        fates::analyse(
            &o.events,
            &o.ledger,
            &behaviour,
            c,
            fates::early_tolerance(Duration::from_nanos(o.e2e_intended.quantile(0.999))),
        )
    });
    let expected = expected(analysis.as_ref(), plan.terminated);

    // Read back: the pipeline's work, the DLQ stream, the originals.
    let js = ctx.provisioner.jetstream();
    let deadline = Instant::now()
        + if ctx.stop.is_cancelled() {
            INTERRUPTED_WAIT
        } else {
            common.drain_timeout
        };
    let keys: BTreeSet<Key> = expected.keys().copied().collect();
    let pipeline_report = pipeline.finish(js, &keys, deadline).await;
    // Originals the handler found gone have no copy to expect: the seed
    // warns that a stream limit may evict them first.
    let gone: BTreeSet<u64> = pipeline_report
        .attempts()
        .filter(|a| a.watched == Some(WATCHED) && matches!(a.outcome, Outcome::OriginalGone))
        .map(|a| a.seq)
        .collect();
    let other_end = match (other, &outcome) {
        (Some(Ok(o)), Ok(out)) => Some(o.finish(out.counts.persisted, deadline).await),
        (Some(Ok(o)), Err(_)) => Some(o.finish(0, Instant::now()).await),
        (Some(Err(e)), _) => Some(OtherEnd::failed(e)),
        (None, _) => None,
    };
    let evidence = Evidence {
        contents: audit::read(js, &names[2], Duration::from_secs(2)).await,
        now: audit::originals(js, &stream_name, expected.keys().map(|k| k.1)).await,
        stored: ctx
            .provisioner
            .stream_info(&stream_name)
            .await
            .map(|i| i.state.messages),
        pipeline: pipeline_report,
        other: other_end,
        watched,
        dlq_prefix,
        origin_headers: plan.handler.origin_headers.clone(),
        gone,
    };
    let redriven = match (&evidence.contents, plan.redrive) {
        (_, false) => None,
        (Ok(contents), true) => Some(
            redrive(
                ctx,
                (&stream_name, &durable_name),
                &contents.letters,
                &plan.handler.origin_headers,
            )
            .await,
        ),
        (Err(e), true) => Some(Err(anyhow::anyhow!("the DLQ could not be read: {e:#}"))),
    };
    for name in &names {
        result.streams.extend(
            ctx.provisioner
                .stream_info(name)
                .await
                .as_ref()
                .map(placement),
        );
    }
    let mut deleted = Ok(());
    for name in &names {
        // An account-wide capture holds every MAX_DELIVERIES subject: kept,
        // it would overlap the next variant's and fail it.
        let d = if plan.capture == Capture::Account && *name == names[1] {
            match ctx.provisioner.delete_stream_anyway(name).await {
                Ok(true) => {
                    result.warnings.push(format!(
                        "--keep: stream {name} (the account-wide advisory capture) was deleted \
                         anyway; kept, it would overlap the next variant's capture"
                    ));
                    Ok(())
                }
                Ok(false) => Ok(()),
                Err(e) => Err(e),
            }
        } else {
            ctx.provisioner.delete_stream(name).await
        };
        if deleted.is_ok() {
            deleted = d;
        }
    }
    let outcome = outcome?;
    let analysis = analysis.expect("analysed when driven");
    // A copy is due for every dead letter whose original the handler got.
    let expected: BTreeMap<Key, Kind> = expected
        .into_iter()
        .filter(|(k, _)| !evidence.gone.contains(&k.1))
        .collect();

    // Measure and verify.
    let figures = measure(
        &outcome, &analysis, &expected, &evidence, plan, baseline, result,
    );
    super::shape::per_step(
        &outcome.e2e_intended,
        outcome.t0_ns,
        &plan.load.publish.arrival,
        result,
    );
    verify(
        &outcome,
        &analysis,
        &expected,
        &evidence,
        v.retention,
        v.restart_after,
        result,
    );
    if let Some(redriven) = &redriven {
        redrive_results(redriven, result);
    }
    deleted.context("cleaning up after the variant")?;
    Ok(figures)
}

/// The messages that must end up in the DLQ, and by which advisory.
fn expected(analysis: Option<&Analysis>, terminated: bool) -> BTreeMap<Key, Kind> {
    let mut out = BTreeMap::new();
    if let Some(a) = analysis {
        for seq in &a.exhausted {
            out.insert((WATCHED, *seq), Kind::MaxDeliveries);
        }
        if terminated {
            for seq in &a.termed {
                out.insert((WATCHED, *seq), Kind::Terminated);
            }
        }
    }
    out
}

/// The consumer of an interest stream that acks everything: the one whose
/// interest keeps an original alive until it has acked it.
struct Other {
    progress: Arc<ConsumerProgress>,
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<Result<ConsumerReport>>,
}

/// What the other consumer did.
struct OtherEnd {
    report: Result<ConsumerReport, String>,
}

impl OtherEnd {
    fn failed(e: anyhow::Error) -> Self {
        OtherEnd {
            report: Err(format!("{e:#}")),
        }
    }
}

impl Other {
    async fn start(
        ctx: &RunContext,
        stream: &str,
        durable: String,
        messages: u64,
    ) -> Result<Other> {
        let client = ctx.connect.connect("consumer-other").await?;
        let progress = Arc::new(ConsumerProgress::default());
        let stop = tokio_util::sync::CancellationToken::new();
        let config = ConsumerConfig {
            index: 0,
            stream: stream.to_string(),
            durable,
            plan: ConsumerPlan::simple(),
            behaviour: Arc::new(BehaviourPlan::all_ack()),
            // Its latency is not this scenario's subject.
            record_from_ns: u64::MAX,
            timeline_origin_ns: crate::record::clock::now_ns(),
            expected_messages: messages,
            log_events: false,
            js_api_prefix: ctx.connect.js_api.prefix(),
            crash: None,
            keep_doomed: false,
            outage: None,
            dedup: None,
        };
        let task = tokio::spawn(consume::run(client, config, progress.clone(), stop.clone()));
        Ok(Other {
            progress,
            stop,
            task,
        })
    }

    /// Waits until it has acked `stored` messages (or `deadline`), then stops it.
    async fn finish(self, stored: u64, deadline: Instant) -> OtherEnd {
        while self.progress.finished.load(Ordering::Relaxed) < stored
            && Instant::now() < deadline
            && !self.task.is_finished()
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.stop.cancel();
        let report = match self.task.await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(format!("{e:#}")),
            Err(e) => Err(format!("the consumer task failed: {e}")),
        };
        OtherEnd { report }
    }
}

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

fn latencies(
    o: &DriveOutcome,
    a: &Analysis,
    expected: &BTreeMap<Key, Kind>,
    pipeline: &PipelineReport,
    consumer: &ConsumerPlan,
) -> Latencies {
    let mut l = Latencies::default();
    let stories = pipeline.stories();
    let deadline = consumer
        .ack_deadline(consumer.max_deliver.max(1) as u32)
        .as_nanos() as u64;
    for (key, kind) in expected {
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

fn measure(
    o: &DriveOutcome,
    a: &Analysis,
    expected: &BTreeMap<Key, Kind>,
    e: &Evidence,
    plan: &Plan,
    baseline: Option<Figures>,
    r: &mut VariantResult,
) -> Figures {
    r.metrics.push(Metric::new(
        names::PUBLISH.rate,
        "msg/s",
        o.publish_rate(),
        Direction::Higher,
    ));
    let e2e = o.e2e_intended.summary();
    r.metrics.extend(latency_metrics(names::E2E_LATENCY, &e2e));
    r.histograms
        .push((names::E2E_LATENCY.into(), o.e2e_intended.clone()));

    let l = latencies(o, a, expected, &e.pipeline, &plan.load.consumer);
    for (name, h) in [
        (DLQ_LATENCY, &l.dlq),
        (DLQ_AFTER_DEADLINE, &l.dlq_after_deadline),
        ("advisory_latency", &l.advisory),
        (ADVISORY_AFTER_DEADLINE, &l.advisory_after_deadline),
        (HANDLER_LATENCY, &l.handler),
        ("term_dlq_latency", &l.term_dlq),
    ] {
        if h.count() > 0 {
            r.metrics.extend(latency_metrics(name, &h.summary()));
            r.histograms.push((name.into(), h.clone()));
        }
    }
    r.metrics.push(count(
        "deadlines_from_server_timestamp",
        l.anchored_to_server,
    ));

    // The handler: how fast it went, and how fast it could have gone.
    let p = &e.pipeline;
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
    if work.count() > 0 {
        r.metrics
            .extend(latency_metrics("handler_time", &work.summary()));
        r.histograms.push(("handler_time".into(), work));
    }
    let attempts = p.attempts().count() as u64;
    let busy = p.busy().as_secs_f64();
    r.metrics.push(Metric::new(
        HANDLER_CAPACITY,
        "msg/s",
        if busy > 0.0 {
            attempts as f64 / busy
        } else {
            0.0
        },
        Direction::Higher,
    ));
    r.metrics.push(Metric::new(
        "handler_rate",
        "msg/s",
        if last > first {
            copied as f64 / ((last - first) as f64 / 1e9)
        } else {
            0.0
        },
        Direction::None,
    ));
    let redelivered = p.attempts().filter(|at| at.delivery > 1).count() as u64;
    for (name, v) in [
        (DEAD_LETTERS_EXPECTED, expected.len() as u64),
        (
            DEAD_LETTERS_IN_DLQ,
            e.contents.as_ref().map_or(0, |c| c.letters.len() as u64),
        ),
        ("advisories.handled", attempts),
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
            p.count(|o| matches!(o, Outcome::OriginalGone)),
        ),
        (
            "handler.retries",
            p.count(|o| matches!(o, Outcome::Retried(_))),
        ),
        (HANDLER_RESTARTS, p.restarts() as u64),
    ] {
        r.metrics.push(count(name, v));
    }
    checks::fate_metrics(a, r);
    let mine = Figures {
        e2e_p50_us: e2e.p50_us,
        e2e_p99_us: e2e.p99_us,
    };
    if let Some(b) = baseline {
        r.metrics.push(ratio(
            VS_BASELINE_E2E_P50,
            mine.e2e_p50_us,
            b.e2e_p50_us,
            Direction::Lower,
        ));
        r.metrics.push(ratio(
            VS_BASELINE_E2E_P99,
            mine.e2e_p99_us,
            b.e2e_p99_us,
            Direction::Lower,
        ));
    }
    checks::drive_records(o, Some(SAMPLE_EVERY), r);
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
    mine
}

fn verify(
    o: &DriveOutcome,
    a: &Analysis,
    expected: &BTreeMap<Key, Kind>,
    e: &Evidence,
    retention: Retention,
    restart_after: Option<u64>,
    r: &mut VariantResult,
) {
    let c = &o.counts;
    checks::fate_invariants(o, a, r);
    originals_gone(o, &e.gone, r);

    // The DLQ, read back.
    let letters = match &e.contents {
        Ok(contents) if contents.complete => Ok(contents.letters.as_slice()),
        Ok(contents) => Err(format!(
            "the DLQ stream could not be read to its end ({} read)",
            contents.letters.len()
        )),
        Err(err) => Err(format!("{err:#}")),
    };
    let now = e.now.as_ref().map_err(|err| format!("{err:#}"));
    let audit = match (&letters, &now) {
        (Ok(letters), Ok(now)) => {
            // A work queue's originals are gone once copied: the copies are
            // held to what the consumer saw at delivery, not to what the
            // handler itself read before deleting them.
            // As the consumer saw them at delivery: a work queue's are
            // deleted once copied, and a stream's limits may evict others
            // after their copy was made.
            let mut seen = BTreeMap::new();
            for m in o.consumers.iter().flat_map(|c| &c.doomed) {
                seen.entry((WATCHED, m.seq))
                    .or_insert_with(|| audit::Original::seen(m));
            }
            // Otherwise as the stream holds them now: the copy is held to
            // the stored original, not to the handler's own reading of it.
            let originals: BTreeMap<Key, audit::Original> = if retention == Retention::Workqueue {
                seen
            } else {
                let mut stored: BTreeMap<Key, audit::Original> = now
                    .iter()
                    .filter_map(|(seq, m)| {
                        m.as_ref()
                            .map(|m| ((WATCHED, *seq), audit::Original::stored(m)))
                    })
                    .collect();
                for (key, original) in seen {
                    stored.entry(key).or_insert(original);
                }
                stored
            };
            Ok(audit::check(
                letters,
                expected,
                &originals,
                &e.watched,
                &e.dlq_prefix,
                &e.origin_headers,
            ))
        }
        (Err(err), _) | (_, Err(err)) => Err(err.clone()),
    };
    dlq_invariants(&audit, expected, r);

    // The originals, as the retention says.
    let stored = e.stored;
    match (&now, retention) {
        // Unreadable originals fail the retention's own check.
        (Err(err), _) => r.invariants.push(Invariant::check(
            match retention {
                Retention::Limits => "limits: originals remain",
                Retention::Workqueue => "workqueue: originals deleted once copied",
                Retention::Interest => "interest: originals remain until every consumer acks",
            },
            false,
            format!("the originals could not be read: {err}"),
        )),
        (Ok(now), Retention::Limits) => {
            // Unless the stream's limits evicted them, before the handler
            // read them or after.
            let first_kept = o.eviction.as_ref().map_or(0, |ev| ev.first_kept);
            let present = now.values().filter(|m| m.is_some()).count();
            let evicted = now
                .iter()
                .filter(|(seq, m)| m.is_none() && **seq < first_kept)
                .count();
            r.invariants.push(Invariant::check(
                "limits: originals remain",
                present + evicted == now.len() && stored == Some(c.persisted - c.evicted),
                format!(
                    "{present} of {} dead-lettered originals still readable, {evicted} evicted by the \
                     stream's limits; the stream holds {} of {} messages ({} evicted)",
                    now.len(),
                    show(stored),
                    c.persisted,
                    c.evicted
                ),
            ));
        }
        (Ok(now), Retention::Workqueue) => {
            let present = now.values().filter(|m| m.is_some()).count();
            r.invariants.push(Invariant::check(
                "workqueue: originals deleted once copied",
                present == 0 && stored == Some(0),
                format!(
                    "{present} of {} dead-lettered originals still readable; the stream holds {} messages (acked ones are removed by the server, dead-lettered ones by the handler)",
                    expected.len(),
                    show(stored)
                ),
            ));
        }
        (Ok(now), Retention::Interest) => {
            let present = now.values().filter(|m| m.is_some()).count();
            let other = match e.other.as_ref().map(|o| &o.report) {
                Some(Ok(report)) => {
                    let acked = (1..=o.ledger.max_seq())
                        .filter(|&s| {
                            o.ledger.count(s, Event::Persisted) > 0
                                && report.ledger.count(s, Event::Acked) > 0
                        })
                        .count() as u64;
                    Ok(acked)
                }
                Some(Err(err)) => Err(err.clone()),
                None => Err("the other consumer did not run".into()),
            };
            let acked = other.as_ref().copied().unwrap_or(0);
            r.invariants.push(Invariant::check(
                "interest: originals remain until every consumer acks",
                present == expected.len()
                    && stored == Some(expected.len() as u64)
                    && acked == c.persisted,
                match other {
                    Ok(acked) => format!(
                        "the other consumer acked {acked} of {}; {present} of {} dead-lettered originals still readable; the stream holds {} messages (the acked-by-both are removed)",
                        c.persisted,
                        expected.len(),
                        show(stored)
                    ),
                    Err(err) => format!("the other consumer: {err}"),
                },
            ));
        }
    }

    // The handler.
    let p = &e.pipeline;
    let stories = p.stories();
    let advised: BTreeSet<Key> = stories.keys().copied().collect();
    // Every dead letter is advised, its original found or gone.
    let wanted: BTreeSet<Key> = expected
        .keys()
        .copied()
        .chain(e.gone.iter().map(|&seq| (WATCHED, seq)))
        .collect();
    let missing = wanted.difference(&advised).count();
    let extra = advised.difference(&wanted).count();
    r.invariants.push(Invariant::check(
        "one advisory per dead letter, others skipped",
        missing == 0 && extra == 0,
        format!(
            "advisories for {} of {} dead letters, {extra} for other messages of the watched consumer; {} about other streams or consumers skipped, {} malformed termed",
            wanted.len() - missing,
            wanted.len(),
            p.count(|o| matches!(o, Outcome::Foreign)),
            p.count(|o| matches!(o, Outcome::Malformed(_)))
        ),
    ));
    r.invariants.push(Invariant::check(
        "the handler answered every advisory",
        p.errors.is_empty() && p.handler_state == Some((0, 0)),
        match p.handler_state {
            Some((pending, ack_pending)) => format!(
                "handler durable: num_pending {pending}, num_ack_pending {ack_pending}{}",
                if p.errors.is_empty() {
                    String::new()
                } else {
                    format!("; {}", p.errors.join("; "))
                }
            ),
            None => format!("handler durable info unavailable; {}", p.errors.join("; ")),
        },
    ));
    if let Some(n) = restart_after {
        let killed: Vec<(u64, bool)> = p
            .attempts()
            .filter_map(|at| match at.outcome {
                Outcome::Killed { .. } => at.watched.map(|w| (at.seq, w == WATCHED)),
                _ => None,
            })
            .collect();
        let detail;
        let passed = match killed.as_slice() {
            [(seq, true)] => {
                let story = stories.get(&(WATCHED, *seq)).copied().unwrap_or_default();
                let once = audit.as_ref().is_ok_and(|a| {
                    !a.missing.contains(seq) && !a.repeated.iter().any(|x| x.0 == *seq)
                });
                detail = format!(
                    "killed after copy {n} (sequence {seq}), before its delete and ack; a new handler got the advisory again ({} deliveries, {} copies published, {} flagged duplicate); the DLQ holds it {}",
                    story.deliveries,
                    story.published,
                    story.duplicates,
                    if once { "once" } else { "not exactly once" }
                );
                p.restarts() == 1 && story.deliveries >= 2 && story.done && once
            }
            [] => {
                detail = format!(
                    "no restart: the handler made fewer than {n} copies ({} dead letters)",
                    expected.len()
                );
                false
            }
            more => {
                detail = format!("{} kills, expected one", more.len());
                false
            }
        };
        r.invariants.push(Invariant::check(
            "a restarted handler still dead-letters exactly once",
            passed,
            detail,
        ));
    }
    r.invariants.push(checks::nothing_pending(o));
}

fn dlq_invariants(
    audit: &Result<Audit, String>,
    expected: &BTreeMap<Key, Kind>,
    r: &mut VariantResult,
) {
    let a = match audit {
        Ok(a) => a,
        Err(err) => {
            for name in [
                "every dead letter in the DLQ exactly once",
                "copies hold the original payload and headers",
                "no other message in the DLQ",
            ] {
                r.invariants
                    .push(Invariant::check(name, false, err.clone()));
            }
            return;
        }
    };
    r.invariants.push(Invariant::check(
        "every dead letter in the DLQ exactly once",
        a.missing.is_empty() && a.repeated.is_empty() && a.once == expected.len() as u64,
        format!(
            "{} of {} found once; missing {}; more than once {}",
            a.once,
            expected.len(),
            listed(&a.missing),
            listed(
                &a.repeated
                    .iter()
                    .map(|(s, n)| format!("{s} x{n}"))
                    .collect::<Vec<_>>()
            )
        ),
    ));
    r.invariants.push(Invariant::check(
        "copies hold the original payload and headers",
        a.mismatched_count == 0,
        if a.mismatched_count == 0 {
            format!(
                "{} copies equal their original, publish-control headers dropped, origin headers added",
                a.compared
            )
        } else {
            format!("{} differ: {}", a.mismatched_count, a.mismatched.join("; "))
        },
    ));
    r.invariants.push(Invariant::check(
        "no other message in the DLQ",
        a.unexpected_count == 0,
        if a.unexpected_count == 0 {
            format!("{} messages in the DLQ, all dead letters", a.letters)
        } else {
            format!("{} others: {}", a.unexpected_count, a.unexpected.join("; "))
        },
    ));
}

fn listed<T: std::fmt::Display>(items: &[T]) -> String {
    if items.is_empty() {
        return "none".into();
    }
    let shown: Vec<String> = items.iter().take(10).map(|i| i.to_string()).collect();
    if items.len() > 10 {
        format!("{} and {} more", shown.join(", "), items.len() - 10)
    } else {
        shown.join(", ")
    }
}

fn show(n: Option<u64>) -> String {
    n.map_or("(unknown)".into(), |n| n.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two letters redriven, read once each, the second pass flagged.
    fn clean() -> Redriven {
        let ids = ["redrive.S.c.3", "redrive.S.c.5"];
        let pass = |stored, duplicates| redrive::Pass {
            letters: 2,
            stored,
            duplicates,
            sent_ns: ids.iter().map(|id| (id.to_string(), 1)).collect(),
            ..Default::default()
        };
        Redriven {
            letters: 2,
            first: pass(2, 0),
            second: pass(0, 2),
            received: redrive::Received {
                deliveries: ids.iter().map(|id| (id.to_string(), 1)).collect(),
                ..Default::default()
            },
            stored_before_second: Some(10),
            stored_after_second: Some(10),
        }
    }

    fn broken(d: Redriven) -> Vec<String> {
        let mut r = VariantResult::new("v");
        redrive_results(&Ok(d), &mut r);
        r.broken().into_iter().map(String::from).collect()
    }

    /// The redrive checks with the server's and the consumer's side forged:
    /// a second pass stored anew (an id not derived from the origin), a
    /// redriven message read twice, one never read.
    #[test]
    fn a_redrive_stored_twice_or_read_twice_or_never_fails_its_check() {
        assert!(broken(clean()).is_empty());
        let mut d = clean();
        d.second.stored = 2;
        d.second.duplicates = 0;
        d.stored_after_second = Some(12);
        assert_eq!(broken(d), ["a second redrive stores nothing"]);
        let mut d = clean();
        d.received.deliveries.insert("redrive.S.c.3".into(), 2);
        assert_eq!(broken(d), ["every redriven message consumed once"]);
        let mut d = clean();
        d.received.deliveries.remove("redrive.S.c.5");
        assert_eq!(broken(d), ["every redriven message consumed once"]);
        let mut d = clean();
        d.first.stored = 1;
        d.first.failed = 1;
        assert_eq!(broken(d), ["every dead letter redriven"]);
    }

    /// The gone check with the stream's side forged: an original the
    /// handler found gone though the stream kept everything from below it,
    /// or though the stream has no limit that evicts.
    #[test]
    fn an_original_gone_without_an_eviction_fails_its_check() {
        let gone = BTreeSet::from([5]);
        let check = |first_kept: Option<u64>| {
            let mut o = DriveOutcome::settled(10);
            o.eviction = first_kept.map(|first_kept| crate::streams::readback::Eviction {
                limits: vec!["max_msgs 5".into()],
                reached: vec!["max_msgs 5: holds 5".into()],
                evicted: first_kept - 1,
                first_kept,
                held: 5,
            });
            let mut r = VariantResult::new("v");
            originals_gone(&o, &gone, &mut r);
            r.broken().into_iter().map(String::from).collect::<Vec<_>>()
        };
        assert!(check(Some(6)).is_empty());
        let name = "originals found gone were evicted by the stream's limits";
        assert_eq!(check(Some(3)), [name]);
        assert_eq!(check(None), [name]);
    }
}
