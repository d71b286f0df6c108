//! `publish`: publishers only. Measures what a publish costs (achieved rate,
//! PubAck latency, client and server CPU per message) with and without
//! Nats-Msg-Id, and proves the dedup promise: retries inside the duplicate
//! window are flagged and not stored, retries after it are stored again,
//! and the stream, read back, holds exactly what the PubAcks confirmed.
//!
//! Variants: every rate times every msg_id mode, back to back, so the price
//! of dedup is a ratio from one run. With `reference`, at `max` rate
//! reference loops run beside jsbench's own publisher ([`reference`]): its
//! own path without measurement (`raw`, before and after, so drift cancels
//! in their mean: what the recording costs, and whether the load generator
//! sets the limit), the idiomatic async-nats loop (what jsbench gains over
//! the obvious client code), and core publish (no persistence).

pub mod batch;
pub mod fast;
pub mod fast_keys;
pub mod plan;

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::jetstream::stream;
use futures::future::join_all;

use super::lifecycle::{record_stream, variant};
use super::table::{self, Cell, Column, Show};
use super::{ScenarioKind, ScenarioPlan};
use crate::drive::{DriveOutcome, DriveSpec, RunContext, drive};
use crate::load::reference::{self, ReferenceConfig, ReferenceReport};
use crate::profile::{
    CommonPlan, MsgId, Problems, Rate, RatePer, Reference, Section, SizePlan, format_duration,
};
use crate::record::metrics::{Direction, Metric, count, latency_metrics, ratio};
use crate::record::names;
use crate::streams::provision;
use crate::streams::provision::{MAX_RATE_ESTIMATE, Need};
use crate::streams::readback::{self, Reconciliation};
use crate::system::cpu;
use crate::variant::{Invariant, VariantResult, VariantSink};

pub use plan::Plan;

/// The figures this scenario reports that its table, the charts and
/// report.html read, by name.
/// Retries injected with an earlier message's id.
pub const DUPLICATES_INJECTED: &str = "duplicates_injected";
/// PubAcks that flagged a duplicate.
pub const DUPLICATES_FLAGGED: &str = "duplicates_flagged";
/// With ids against without: the price of dedup.
pub const DEDUP_PRICE_THROUGHPUT: &str = "dedup_price.throughput_ratio";
pub const DEDUP_PRICE_P99: &str = "dedup_price.p99_ratio";
pub const DEDUP_PRICE_CLIENT_CPU: &str = "dedup_price.client_cpu_per_msg";
pub const DEDUP_PRICE_SERVER_CPU: &str = "dedup_price.server_cpu_per_msg";
/// PubAcks a second confirming the sends the publish rate counts.
pub const PUBLISH_ACKED_RATE: &str = "publish_acked_rate";
/// The server's own count of it: /varz in_msgs between its first and last
/// sample inside the publishing span.
pub const SERVER_IN_MSGS_RATE: &str = "server_in_msgs_rate";
/// jsbench's publisher against the reference loops.
pub const VS_RAW_THROUGHPUT: &str = "vs_raw.throughput_ratio";
pub const VS_IDIOMATIC_THROUGHPUT: &str = "vs_idiomatic.throughput_ratio";
pub const VS_CORE_THROUGHPUT: &str = "vs_core.throughput_ratio";

/// The figures a variant is compared on.
#[derive(Debug, Clone, Copy)]
struct Figures {
    rate: f64,
    p99_us: f64,
    client_us_per_msg: f64,
    server_us_per_msg: Option<f64>,
}

/// The registry's row for `publish`: what a publish costs, with and without ids.
pub struct Publish;

impl ScenarioKind for Publish {
    const NAME: &'static str = "publish";
    const COLUMNS: &'static [Column] = &[
        table::VARIANT,
        table::TARGET,
        table::ACHIEVED,
        Column {
            header: "MB/s",
            cell: Cell::Metric(names::PUBLISH.throughput, Show::Decimals(1)),
        },
        table::quantile("pubAck p50", names::PUB_ACK_LATENCY, "p50"),
        table::quantile("p99", names::PUB_ACK_LATENCY, "p99"),
        table::quantile("max", names::PUB_ACK_LATENCY, "max"),
        table::quantile("commit p50", names::BATCH_COMMIT_LATENCY, "p50"),
        table::quantile("p99", names::BATCH_COMMIT_LATENCY, "p99"),
        table::quantile("flow ack p50", names::FAST_ACK_LATENCY, "p50"),
        table::quantile("p99", names::FAST_ACK_LATENCY, "p99"),
        Column {
            header: "client/msg",
            cell: Cell::Metric(names::CLIENT_CPU_PER_MSG, Show::MicrosPerMsg),
        },
        Column {
            header: "server/msg",
            cell: Cell::Metric(names::SERVER_CPU_PER_MSG, Show::MicrosPerMsg),
        },
        Column {
            header: "dups flagged/injected",
            cell: Cell::Counts(&[DUPLICATES_FLAGGED, DUPLICATES_INJECTED], "/"),
        },
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
        let per_publisher = match plan.rate_per {
            RatePer::Publisher => plan.publish.publishers as f64,
            RatePer::Total => 1.0,
        };
        let fattest = plan
            .rates
            .iter()
            .map(|r| match r {
                Rate::PerSecond(r) => *r as f64 * per_publisher,
                Rate::Max => MAX_RATE_ESTIMATE,
            })
            .fold(0.0, f64::max);
        Need::paced(fattest, common, &plan.publish, 0)
    }

    fn estimated_duration(plan: &Plan, common: &CommonPlan) -> Duration {
        (common.duration + common.warmup) * plan.variant_count() as u32
    }
}

async fn run(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    plan: &Plan,
    sink: &mut dyn VariantSink,
) -> Result<()> {
    if let Some(search) = &plan.search {
        return run_searches(ctx, scenario, plan, search, sink).await;
    }
    let mut without_id: HashMap<String, Figures> = HashMap::new();
    for &rate in &plan.rates {
        let rate_label = rate.label();
        let references = rate == Rate::Max;
        let mut core = None;
        if references && plan.reference.contains(&Reference::Core) {
            let variant = format!("rate-{rate_label}.core");
            let (result, figures) =
                run_reference(ctx, scenario, plan, Reference::Core, MsgId::None, &variant).await;
            core = figures;
            sink.record(&scenario.common, result)?;
        }
        for &msg_id in &plan.msg_ids {
            if ctx.stop.is_cancelled() {
                return Ok(());
            }
            let id_label = id_label(msg_id);
            let mut refs = References::default();
            if references && plan.reference.contains(&Reference::Idiomatic) {
                let variant = format!("rate-{rate_label}.id-{id_label}.idiomatic");
                let (result, figures) =
                    run_reference(ctx, scenario, plan, Reference::Idiomatic, msg_id, &variant)
                        .await;
                refs.idiomatic = figures;
                sink.record(&scenario.common, result)?;
            }
            let raw = references && plan.reference.contains(&Reference::Raw);
            if raw {
                let variant = format!("rate-{rate_label}.id-{id_label}.raw-before");
                let (result, figures) =
                    run_reference(ctx, scenario, plan, Reference::Raw, msg_id, &variant).await;
                refs.raw_before = figures;
                sink.record(&scenario.common, result)?;
            }

            let name = format!("rate-{rate_label}.id-{id_label}");
            let (mut result, figures) = own_variant(ctx, scenario, plan, rate, msg_id, name).await;
            if raw {
                let variant = format!("rate-{rate_label}.id-{id_label}.raw-after");
                let (after, figures) =
                    run_reference(ctx, scenario, plan, Reference::Raw, msg_id, &variant).await;
                refs.raw_after = figures;
                sink.record(&scenario.common, after)?;
            }
            refs.core = core;
            if let Some(figures) = figures {
                compare(
                    &mut result,
                    figures,
                    (rate, msg_id),
                    without_id.get(&rate_label),
                    &refs,
                );
                if msg_id == MsgId::None {
                    without_id.insert(rate_label.clone(), figures);
                }
            }
            sink.record(&scenario.common, result)?;
            for &size in &plan.batches {
                if ctx.stop.is_cancelled() {
                    return Ok(());
                }
                let name = format!("rate-{rate_label}.id-{id_label}.batch-{size}");
                let (result, _) = variant(name, async |r| {
                    batch::run_variant(ctx, scenario, plan, (rate, msg_id, size), r).await
                })
                .await;
                sink.record(&scenario.common, result)?;
            }
            run_fast(ctx, scenario, plan, (rate, msg_id), sink).await?;
        }
    }
    Ok(())
}

/// The fast-ingest batch variants of one rate and msg_id mode: every
/// size, outstanding-ack setting and gap mode.
async fn run_fast(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    plan: &Plan,
    (rate, msg_id): (Rate, MsgId),
    sink: &mut dyn VariantSink,
) -> Result<()> {
    for v in fast::variants(&plan.fast, rate, msg_id) {
        if ctx.stop.is_cancelled() {
            return Ok(());
        }
        let name = v.name(&rate.label(), id_label(msg_id));
        let (result, _) = variant(name, async |r| {
            fast::run_variant(ctx, scenario, plan, v, r).await
        })
        .await;
        sink.record(&scenario.common, result)?;
    }
    Ok(())
}

/// `rates = "search"`: per msg_id mode, a search for the highest rate
/// whose PubAck latency holds the SLO, its probes and answer named
/// `id-<mode>.`.
async fn run_searches(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    plan: &Plan,
    search: &crate::profile::SearchPlan,
    sink: &mut dyn VariantSink,
) -> Result<()> {
    for &msg_id in &plan.msg_ids {
        if ctx.stop.is_cancelled() {
            break;
        }
        let probe = async |rate, name| {
            own_variant(ctx, scenario, plan, Rate::PerSecond(rate), msg_id, name)
                .await
                .0
        };
        let prefix = format!("id-{}.", id_label(msg_id));
        super::search::run(ctx, scenario, search, &prefix, sink, probe).await?;
    }
    Ok(())
}

/// jsbench's own publisher at `rate` with `msg_id`, and its figures for
/// the comparisons.
async fn own_variant(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    plan: &Plan,
    rate: Rate,
    msg_id: MsgId,
    name: String,
) -> (VariantResult, Option<Figures>) {
    variant(name, async |r| {
        describe(&scenario.common, plan, rate, msg_id, r);
        run_variant(ctx, scenario, plan, rate, msg_id, r).await
    })
    .await
}

fn id_label(msg_id: MsgId) -> &'static str {
    match msg_id {
        MsgId::None => "none",
        MsgId::Unique => "unique",
    }
}

fn describe(common: &CommonPlan, plan: &Plan, rate: Rate, msg_id: MsgId, r: &mut VariantResult) {
    let p = &plan.publish;
    r.param("rate", rate.label());
    r.param("rate_per", plan.rate_per);
    r.param("duration", format_duration(common.duration));
    r.param("warmup", format_duration(common.warmup));
    r.param("publishers", p.publishers);
    r.param("mode", p.mode);
    r.param("pub_ack_window", p.pub_ack_window);
    if rate == Rate::Max && p.pub_ack_window > 1 {
        // The reader shares the sender's thread at max rate (it measured
        // faster there): a PubAck is timed when the sender next yields,
        // so the figure includes up to one burst of sends of waiting.
        r.param(
            "pub_ack_timed",
            "when the sender yields (the reader shares its thread at max rate)",
        );
    }
    r.param("message_size", p.message_size.to_string());
    r.param("subjects", p.subjects);
    r.param("headers", p.headers.len());
    r.param("msg_id", msg_id);
    r.param("duplicates", p.duplicates);
    r.param("late_duplicates", p.late_duplicates);
    r.param("duplicate_window", format_duration(p.duplicate_window));
}

/// The stream every publish variant gets: its own subjects, the profile's
/// storage, replicas and duplicate window.
fn stream_config(ctx: &RunContext, name: &str, base: &str, window: Duration) -> stream::Config {
    stream::Config {
        duplicate_window: window,
        ..provision::stream_config(name, base, &ctx.server, &ctx.stream)
    }
}

fn total_rate(plan: &Plan, rate: Rate) -> Option<u64> {
    match (rate, plan.rate_per) {
        (Rate::PerSecond(r), RatePer::Total) => Some(r),
        (Rate::PerSecond(r), RatePer::Publisher) => Some(r * plan.publish.publishers as u64),
        (Rate::Max, _) => None,
    }
}

async fn run_variant(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    plan: &Plan,
    rate: Rate,
    msg_id: MsgId,
    result: &mut VariantResult,
) -> Result<Figures> {
    let (common, scenario) = (&scenario.common, scenario.name());
    // Provision.
    let variant = result.name.clone();
    let stream_name = ctx.names.stream(scenario, &variant);
    let base = ctx.names.subject(scenario, &variant);
    let mut publish = plan.publish.clone();
    publish.msg_id = msg_id;
    ctx.provisioner
        .create_stream(stream_config(
            ctx,
            &stream_name,
            &base,
            publish.duplicate_window,
        ))
        .await?;

    // Drive.
    let spec = DriveSpec {
        streams: vec![crate::drive::StreamLoad::new(
            &stream_name,
            (0..publish.subjects)
                .map(|i| format!("{base}.{i}"))
                .collect(),
        )],
        readers: Vec::new(),
        shared_connections: None,
        label: format!("{scenario} {variant}"),
        publish,
        rate: total_rate(plan, rate),
        count: None,
        warmup: common.warmup,
        duration: common.duration,
        drain_timeout: common.drain_timeout,
        msg_id_prefix: format!("{}-{scenario}-{variant}", ctx.names.token()),
        seed: 0x9e37_79b9,
        fault: None,
        avoid_server: None,
    };
    let outcome = drive(ctx, &spec).await;
    let stored = record_stream(ctx, &stream_name, result).await;
    let read_back = match (&outcome, plan.verify_stored) {
        (Ok(_), true) => Some(
            readback::read_stream(
                ctx.provisioner.jetstream(),
                &stream_name,
                Duration::from_secs(5),
            )
            .await,
        ),
        _ => None,
    };
    let deleted = ctx.provisioner.delete_stream(&stream_name).await;
    let outcome = outcome?;

    // Measure and verify.
    let figures = measure(&outcome, total_rate(plan, rate), result);
    let reconciliation = match read_back {
        Some(Ok(read)) => {
            let confirmed: Vec<&crate::record::tally::Tally> =
                outcome.acks.iter().map(|a| &a.stored_by_message).collect();
            result.param("read_back_messages", read.messages);
            Some(Ok((
                read.reconcile(&confirmed),
                read.complete,
                read.malformed,
            )))
        }
        Some(Err(e)) => Some(Err(format!("{e:#}"))),
        None => None,
    };
    // Without consumers the ledger cannot see deliveries; "lost" is what the
    // read-back did not find.
    result.ledger.lost = match &reconciliation {
        Some(Ok((rec, _, _))) => rec.missing,
        _ => 0,
    };
    verify(&outcome, plan, stored, reconciliation, result);
    deleted.context("cleaning up after the variant")?;
    Ok(figures)
}

fn per_message_us(cpu: Duration, messages: u64) -> f64 {
    if messages == 0 {
        0.0
    } else {
        cpu.as_secs_f64() * 1e6 / messages as f64
    }
}

fn measure(o: &DriveOutcome, target: Option<u64>, r: &mut VariantResult) -> Figures {
    let publish_rate = o.publish_rate();
    if let Some(target) = target {
        r.metrics.push(Metric::new(
            names::TARGET_RATE,
            "msg/s",
            target as f64,
            Direction::None,
        ));
    }
    r.metrics
        .extend(crate::record::metrics::rate_and_throughput(
            names::PUBLISH,
            publish_rate,
            o.publish_throughput(),
        ));
    r.metrics.push(Metric::new(
        PUBLISH_ACKED_RATE,
        "msg/s",
        o.acked_rate(),
        Direction::Higher,
    ));
    let (first, last) = o.publish_window();
    r.param(
        "publish_rate_window",
        format!(
            "{} sends from {:.1} ms to {:.1} ms after t0 (the warm-up ends at {:.1} ms), resends apart",
            o.measured_sends(),
            first.saturating_sub(o.t0_ns) as f64 / 1e6,
            last.saturating_sub(o.t0_ns) as f64 / 1e6,
            o.record_from_ns.saturating_sub(o.t0_ns) as f64 / 1e6,
        ),
    );
    if let Some(server) = o
        .telemetry
        .as_ref()
        .and_then(|t| t.in_msgs_rate(first, last))
    {
        r.metrics.push(Metric::new(
            SERVER_IN_MSGS_RATE,
            "msg/s",
            server,
            Direction::None,
        ));
    }
    let mut recorders = vec![
        (names::PUB_ACK_LATENCY, &o.pub_ack_intended),
        (names::PUB_ACK_LATENCY_ACTUAL, &o.pub_ack_sent),
    ];
    if target.is_some() {
        recorders.push((names::SEND_LAG, &o.send_lag));
    }
    for (name, recorder) in recorders {
        r.metrics.extend(latency_metrics(name, &recorder.summary()));
        r.histograms.push((name.to_string(), recorder.clone()));
    }
    // What the sends the rate counts cost: both sides from the end of the
    // warm-up to the end of the drain. With workers only the whole span's
    // CPU is known, over every send.
    let (client_cpu, server_cpu, sent) = match o.cpu_after_warmup {
        Some(c) => (c.client.total(), c.server, o.measured_sends()),
        None => (o.client_cpu.total(), o.server_cpu, o.sent()),
    };
    let client_us = per_message_us(client_cpu, sent);
    let server_us = server_cpu.map(|c| per_message_us(c, sent));
    r.metrics.push(Metric::new(
        names::CLIENT_CPU_PER_MSG,
        "us",
        client_us,
        Direction::Lower,
    ));
    if let Some(s) = server_us {
        r.metrics.push(Metric::new(
            names::SERVER_CPU_PER_MSG,
            "us",
            s,
            Direction::Lower,
        ));
    }
    super::checks::client_figures(o, r);
    let retries = o.sends_sum(|s| s.retries);
    let late = o.sends_sum(|s| s.late_retries);
    r.metrics.push(count(DUPLICATES_INJECTED, retries));
    let resends = o.sends_sum(|s| s.resends);
    if resends > 0 {
        r.metrics.push(count("resends", resends));
    }
    r.metrics
        .push(count(DUPLICATES_FLAGGED, o.acks_sum(|a| a.duplicates)));
    if late > 0 {
        r.metrics.push(count("late_retries", late));
        r.metrics
            .push(count("late_retries_stored", o.acks_sum(|a| a.late_stored)));
    }
    r.ledger = o.counts;
    r.timelines
        .insert(names::PUBLISHED.into(), o.published_timeline.clone());

    if let Some(target) = target {
        r.warnings
            .extend(super::schedule::fell_behind(o, target as f64));
    }
    if o.interrupted {
        r.warnings
            .push("interrupted: the variant stopped early; its counts cover what was sent".into());
    }
    r.warnings.extend(o.errors.iter().cloned());
    Figures {
        rate: publish_rate,
        p99_us: o.pub_ack_intended.summary().p99_us,
        client_us_per_msg: client_us,
        server_us_per_msg: server_us,
    }
}

fn verify(
    o: &DriveOutcome,
    plan: &Plan,
    stored: Option<u64>,
    reconciliation: Option<Result<(Reconciliation, bool, u64), String>>,
    r: &mut VariantResult,
) {
    let c = &o.counts;
    let new_stored = o.acks_sum(|a| a.acked);
    let late_stored = o.acks_sum(|a| a.late_stored);
    let retries = o.sends_sum(|s| s.retries);
    let late = o.sends_sum(|s| s.late_retries);
    r.invariants.push(super::checks::publishers_finished(o));
    r.invariants.push(Invariant::check(
        "every publish answered",
        c.publish_errors == 0,
        format!(
            "{} published, {} PubAck errors or timeouts",
            c.published, c.publish_errors
        ),
    ));
    if plan.publish.msg_id == MsgId::None {
        let why = "no Nats-Msg-Id: the server cannot flag a duplicate";
        r.invariants.push(Invariant::not_applicable(
            "duplicates flagged = injected",
            why,
        ));
        r.invariants.push(Invariant::not_applicable(
            "no retry inside the window stored",
            why,
        ));
    } else {
        r.invariants.push(Invariant::equal(
            "duplicates flagged = injected",
            o.acks_sum(|a| a.duplicates),
            retries,
        ));
        r.invariants.push(Invariant::equal(
            "no retry inside the window stored",
            o.acks_sum(|a| a.retries_stored),
            0,
        ));
    }
    if plan.publish.late_duplicates > 0.0 {
        r.invariants.push(Invariant::check(
            "retries after the window stored",
            late_stored == late && o.acks_sum(|a| a.late_flagged) == 0,
            format!(
                "{late} late retries: {late_stored} stored, {} flagged duplicate",
                o.acks_sum(|a| a.late_flagged)
            ),
        ));
    }
    r.invariants.push(if plan.publish.msg_id == MsgId::None {
        Invariant::not_applicable(
            "no fresh id flagged duplicate",
            "no Nats-Msg-Id: the server cannot flag a duplicate",
        )
    } else {
        Invariant::equal(
            "no fresh id flagged duplicate",
            o.acks_sum(|a| a.unexpected_duplicates),
            0,
        )
    });
    let unique = new_stored + late_stored + o.acks_sum(|a| a.retries_stored);
    match stored {
        Some(n) => r.invariants.push(Invariant::equal(
            "stream count = unique persisted",
            n,
            unique,
        )),
        None => r.invariants.push(Invariant::check(
            "stream count = unique persisted",
            false,
            "stream info unavailable",
        )),
    }
    match reconciliation {
        Some(Ok((rec, complete, malformed))) => {
            r.invariants.push(Invariant::check(
                "nothing lost (read back)",
                rec.missing == 0 && complete,
                format!(
                    "{} confirmed copies missing from the stream{}",
                    rec.missing,
                    if complete {
                        ""
                    } else {
                        "; the read-back stalled before the end"
                    }
                ),
            ));
            r.invariants.push(Invariant::check(
                "nothing stored unconfirmed (read back)",
                rec.unconfirmed == 0 && malformed == 0,
                format!(
                    "{} unconfirmed copies, {malformed} without a stamp",
                    rec.unconfirmed
                ),
            ));
        }
        Some(Err(e)) => r
            .invariants
            .push(Invariant::check("nothing lost (read back)", false, e)),
        None if !plan.verify_stored => {
            let why = "verify_stored = false: the stream is not read back";
            r.invariants
                .push(Invariant::not_applicable("nothing lost (read back)", why));
            r.invariants.push(Invariant::not_applicable(
                "nothing stored unconfirmed (read back)",
                why,
            ));
        }
        None => {}
    }
}

/// The reference loops' figures beside one of jsbench's variants.
#[derive(Debug, Clone, Copy, Default)]
struct References {
    raw_before: Option<Figures>,
    raw_after: Option<Figures>,
    idiomatic: Option<Figures>,
    core: Option<Figures>,
}

impl References {
    /// The raw path's figures: the mean of its runs before and after
    /// jsbench's variant, so a drift over the three cancels.
    fn raw(&self) -> Option<Figures> {
        match (self.raw_before, self.raw_after) {
            (Some(b), Some(a)) => Some(Figures {
                rate: (b.rate + a.rate) / 2.0,
                p99_us: 0.0,
                client_us_per_msg: (b.client_us_per_msg + a.client_us_per_msg) / 2.0,
                server_us_per_msg: b
                    .server_us_per_msg
                    .zip(a.server_us_per_msg)
                    .map(|(x, y)| (x + y) / 2.0),
            }),
            (one, other) => one.or(other),
        }
    }
}

/// Adds the ratios against the id-less variant (the price of dedup) and the
/// reference loops; warns when the load generator may be the limit.
fn compare(
    r: &mut VariantResult,
    mine: Figures,
    (rate, msg_id): (Rate, MsgId),
    without_id: Option<&Figures>,
    refs: &References,
) {
    if let (MsgId::Unique, Some(base)) = (msg_id, without_id) {
        r.metrics.push(ratio(
            DEDUP_PRICE_THROUGHPUT,
            mine.rate,
            base.rate,
            Direction::Higher,
        ));
        r.metrics.push(ratio(
            DEDUP_PRICE_P99,
            mine.p99_us,
            base.p99_us,
            Direction::Lower,
        ));
        r.metrics.push(Metric::new(
            DEDUP_PRICE_CLIENT_CPU,
            "us",
            mine.client_us_per_msg - base.client_us_per_msg,
            Direction::Lower,
        ));
        if let (Some(m), Some(b)) = (mine.server_us_per_msg, base.server_us_per_msg) {
            r.metrics.push(Metric::new(
                DEDUP_PRICE_SERVER_CPU,
                "us",
                m - b,
                Direction::Lower,
            ));
        }
    }
    if let Some(raw) = refs.raw() {
        r.metrics.push(ratio(
            VS_RAW_THROUGHPUT,
            mine.rate,
            raw.rate,
            Direction::Higher,
        ));
        r.metrics.push(ratio(
            "vs_raw.client_cpu_ratio",
            mine.client_us_per_msg,
            raw.client_us_per_msg,
            Direction::Lower,
        ));
        if mine.rate < 0.95 * raw.rate {
            r.warnings.push(format!(
                "jsbench's publisher reached {:.0}% of its own path without measurement (the raw reference, mean of before and after); its recording costs more than 5% here",
                100.0 * mine.rate / raw.rate
            ));
        }
    }
    if let Some(m) = refs.idiomatic {
        r.metrics.push(ratio(
            VS_IDIOMATIC_THROUGHPUT,
            mine.rate,
            m.rate,
            Direction::Higher,
        ));
        r.metrics.push(ratio(
            "vs_idiomatic.client_cpu_ratio",
            mine.client_us_per_msg,
            m.client_us_per_msg,
            Direction::Lower,
        ));
    }
    if let Some(c) = refs.core {
        r.metrics.push(ratio(
            VS_CORE_THROUGHPUT,
            mine.rate,
            c.rate,
            Direction::None,
        ));
    }
    // At max, the server's limit or the client's: who spent more per
    // message. A paced rate that was met has no limit to name (a client
    // that idles between sends spends more per message, not too much); one
    // that was not is the generator falling behind, warned for elsewhere.
    if rate == Rate::Max
        && let Some(server) = mine.server_us_per_msg
        && mine.client_us_per_msg > server
    {
        r.warnings.push(format!(
            "the client spent {:.2} µs of CPU per message against the server's {server:.2}: at this rate the load generator may be the limit, not the server",
            mine.client_us_per_msg
        ));
    }
}

/// Runs a reference loop on as many connections as the profile's
/// publishers, for the same span, and records it as a variant of its own.
async fn run_reference(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    plan: &Plan,
    kind: Reference,
    msg_id: MsgId,
    variant: &str,
) -> (VariantResult, Option<Figures>) {
    super::lifecycle::variant(variant, async |r| {
        describe(&scenario.common, plan, Rate::Max, msg_id, r);
        r.param(
            "publisher",
            match kind {
                Reference::Raw => "jsbench's path without measurement (reference)",
                Reference::Idiomatic => "idiomatic async-nats loop (reference)",
                Reference::Core => "core NATS publish, no stream (reference)",
            },
        );
        reference_variant(ctx, scenario, plan, kind, msg_id, r).await
    })
    .await
}

async fn reference_variant(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    plan: &Plan,
    kind: Reference,
    msg_id: MsgId,
    result: &mut VariantResult,
) -> Result<Figures> {
    let (common, scenario) = (&scenario.common, scenario.name());
    let variant = result.name.clone();
    let stream_name = ctx.names.stream(scenario, &variant);
    let base = ctx.names.subject(scenario, &variant);
    let jetstream = kind != Reference::Core;
    if jetstream {
        ctx.provisioner
            .create_stream(stream_config(
                ctx,
                &stream_name,
                &base,
                plan.publish.duplicate_window,
            ))
            .await?;
    }
    let size = match plan.publish.message_size {
        SizePlan::Fixed(n) => n,
        other => other.mean() as usize,
    };
    let clients = join_all(
        (0..plan.publish.publishers)
            .map(|i| async move { ctx.connect.connect(&format!("reference-{i}")).await }),
    )
    .await
    .into_iter()
    .collect::<Result<Vec<_>>>()?;
    let duration = common.warmup + common.duration;
    let client_cpu = cpu::own_cpu_time();
    let server_cpu = ctx.server_cpu.start();
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, client)| {
            let config = ReferenceConfig {
                subject: format!("{base}.0"),
                size,
                window: plan.publish.pub_ack_window,
                msg_id,
                id_prefix: format!("{}-{variant}-{i}-", ctx.names.token()),
                duration,
            };
            let stop = ctx.stop.child_token();
            tokio::spawn(async move {
                match kind {
                    Reference::Raw => reference::raw(client, config, stop).await,
                    Reference::Idiomatic => reference::idiomatic(client, config, stop).await,
                    Reference::Core => reference::core(client, config, stop).await,
                }
            })
        })
        .collect();
    let mut reports: Vec<ReferenceReport> = Vec::new();
    for task in tasks {
        reports.push(task.await.context("joining a reference publisher")??);
    }
    let client_cpu = cpu::own_cpu_time().saturating_sub(client_cpu);
    let server_cpu = server_cpu.stop();
    let stored = if jetstream {
        let n = ctx
            .provisioner
            .stream_info(&stream_name)
            .await
            .map(|i| i.state.messages);
        ctx.provisioner.delete_stream(&stream_name).await?;
        n
    } else {
        None
    };

    let sent: u64 = reports.iter().map(|r| r.sent).sum();
    let acked: u64 = reports.iter().map(|r| r.acked).sum();
    let errors: u64 = reports.iter().map(|r| r.errors).sum();
    // The same rule as jsbench's publishers: first send to last, and the
    // connections sent side by side from one start.
    let span = reports.iter().map(|r| r.span).max().unwrap_or_default();
    let rate = crate::drive::rate(sent, span);
    result
        .metrics
        .extend(crate::record::metrics::rate_and_throughput(
            names::PUBLISH,
            rate,
            rate * size as f64,
        ));
    let client_us = per_message_us(client_cpu, sent);
    let server_us = server_cpu.map(|c| per_message_us(c, sent));
    result.metrics.push(Metric::new(
        names::CLIENT_CPU_PER_MSG,
        "us",
        client_us,
        Direction::Lower,
    ));
    if let Some(s) = server_us {
        result.metrics.push(Metric::new(
            names::SERVER_CPU_PER_MSG,
            "us",
            s,
            Direction::Lower,
        ));
    }
    result.ledger.published = sent;
    result.ledger.publish_errors = errors;
    for e in reports.iter().filter_map(|r| r.first_error.as_ref()) {
        result.warnings.push(e.clone());
    }
    result
        .invariants
        .push(Invariant::equal("no publish errors", errors, 0));
    if jetstream {
        result.ledger.persisted = acked;
        result
            .invariants
            .push(Invariant::equal("every publish acknowledged", acked, sent));
        result.invariants.push(Invariant::equal(
            "stream count = acknowledged",
            stored.unwrap_or(u64::MAX),
            acked,
        ));
    }
    Ok(Figures {
        rate,
        p99_us: 0.0,
        client_us_per_msg: client_us,
        server_us_per_msg: server_us,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(rate: f64, client: f64, server: f64) -> Figures {
        Figures {
            rate,
            p99_us: 100.0,
            client_us_per_msg: client,
            server_us_per_msg: Some(server),
        }
    }

    fn warnings(rate: Rate, mine: Figures) -> Vec<String> {
        let mut r = VariantResult::new("t");
        compare(
            &mut r,
            mine,
            (rate, MsgId::None),
            None,
            &References::default(),
        );
        r.warnings
    }

    /// Only at max does CPU per message say who set the limit.
    #[test]
    fn a_client_dearer_than_the_server_is_warned_at_max_only() {
        assert_eq!(warnings(Rate::Max, figures(3e5, 1.2, 3.5)).len(), 0);
        let warned = warnings(Rate::Max, figures(3e5, 4.0, 3.5));
        assert!(warned[0].contains("may be the limit"), "{warned:?}");
        assert!(warnings(Rate::PerSecond(50_000), figures(5e4, 20.7, 15.1)).is_empty());
    }
}
