//! `fanout`: S streams of F subjects, each fed at its share of the rate,
//! and D durables per stream, each filtering on one subject, on two, or on
//! none (every subject); one variant per (S, D) pair, so a list of D is a
//! consumer-count sweep.
//!
//! Measures aggregate, per-stream and per-durable rates and latencies
//! (the parts table), the server's memory per stream and per durable (its
//! resident memory before and after creating them, idle), the time the
//! server took to create them, and CPU per delivery on both sides.
//! Verifies every stream and every durable as a one-durable variant is:
//! each durable received every message its filter selects (as the stream
//! holds them), nothing else, once, acked, with nothing left pending.

pub mod plan;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::StreamExt;

use super::checks;
use super::table::{self, Column};
use super::{Field, Kind, Scope, Variants};
use crate::drive::{ConsumerSpec, DriveOutcome, DriveSpec, Reader, RunContext, StreamLoad};
use crate::profile::{BehaviourPlan, CommonPlan, format_duration};
use crate::record::histogram::Recorder;
use crate::record::ledger::LedgerCounts;
use crate::record::metrics::Direction;
use crate::record::names;
use crate::scenario::search::SEARCH_PROBES;
use crate::streams::provision::{Need, stored_bytes};
use crate::variant::{Invariant, Part, VariantResult};

pub use plan::{FilterShape, Plan};

/// Requests to the server at once while creating streams and durables.
const AT_ONCE: usize = 16;

/// The registry's row for `fanout`: many streams, many filtered durables.
pub struct Fanout;

impl Kind for Fanout {
    const NAME: &'static str = "fanout";
    const COLUMNS: &'static [Column] = table::PACED;
    type Plan = Plan;

    fn need(plan: &Plan, common: &CommonPlan) -> Need {
        let fewest = plan.streams.iter().copied().min().unwrap_or(1).max(1);
        let most = plan.streams.iter().copied().max().unwrap_or(1);
        let durables = plan.durables.iter().copied().max().unwrap_or(1);
        Need {
            streams: most,
            consumers: most * durables,
            bytes: stored_bytes(plan.rate as f64 / fewest as f64, common, &plan.publish),
            total_bytes: stored_bytes(plan.rate as f64, common, &plan.publish),
            max_ack_pending: plan.consumer.max_ack_pending,
        }
    }

    fn estimated_duration(plan: &Plan, common: &CommonPlan) -> Duration {
        let variants = plan.variants().len();
        let probes = if plan.search.is_some() {
            SEARCH_PROBES
        } else {
            1
        };
        (common.duration + common.warmup) * (variants * probes) as u32
    }

    const CONSUMER: Option<Field<Plan>> = Some((|p| &p.consumer, |p| &mut p.consumer));

    /// A (streams, durables) pair: one variant, or one search.
    type Group = (usize, usize);
    type Shared = ();
    type Variant = Shape;

    fn groups(plan: &Plan) -> Vec<(usize, usize)> {
        plan.variants()
    }

    /// The pair at the plan's rate, or per pair the highest total rate its
    /// durables keep up with.
    fn variants(plan: &Plan, &(streams, durables): &(usize, usize)) -> Variants<Shape> {
        let at = move |rate| Shape {
            rate,
            streams,
            durables,
        };
        match &plan.search {
            Some(search) => Variants::Search {
                search: search.clone(),
                prefix: format!("s{streams}-d{durables}."),
                at: Box::new(at),
            },
            None => Variants::List(vec![at(plan.rate)]),
        }
    }

    fn label(_: &Plan, v: &Shape) -> String {
        format!("s{}-d{}", v.streams, v.durables)
    }

    async fn run(
        s: &mut Scope<'_>,
        r: &mut VariantResult,
        plan: &Plan,
        _: &mut (),
        &shape: &Shape,
    ) -> Result<()> {
        describe(&s.scenario.common, plan, shape, r);
        let spec = spec(s, plan, shape);
        let provisioned = provision(s, plan, &spec).await?;
        let o = s.drive(&spec).await?;
        measure(&o, &provisioned, &spec, r);
        verify(&o, r);
        Ok(())
    }
}

/// What one variant runs: the total rate over its streams and durables.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    rate: u64,
    streams: usize,
    durables: usize,
}

fn describe(common: &CommonPlan, plan: &Plan, shape: Shape, r: &mut VariantResult) {
    let Shape {
        rate,
        streams,
        durables,
    } = shape;
    super::shape::describe(
        per_stream(rate, streams) * streams as u64,
        &plan.publish.arrival,
        common,
        r,
    );
    r.param("rate_per_stream", per_stream(rate, streams));
    r.param("streams", streams);
    r.param("durables_per_stream", durables);
    r.param("consumers", streams * durables);
    r.param("subjects_per_stream", plan.subjects);
    r.param("filters", &plan.filters);
    r.param("connections", plan.connections.min(streams * durables));
    r.param("warmup", format_duration(common.warmup));
    r.param("message_size", plan.publish.message_size.to_string());
    r.param("msg_id", plan.publish.msg_id);
    r.param("consumer_kind", plan.consumer.kind);
    r.param("batch", plan.consumer.batch);
    r.param("max_ack_pending", plan.consumer.max_ack_pending);
}

/// Each stream's share of the total rate.
fn per_stream(rate: u64, streams: usize) -> u64 {
    (rate / streams.max(1) as u64).max(1)
}

/// What provisioning measured: the server's memory before and after each
/// step, and how long each step took.
#[derive(Debug, Default)]
struct Provisioned {
    mem_before: Option<u64>,
    mem_streams: Option<u64>,
    mem_durables: Option<u64>,
    create_streams: Duration,
    create_durables: Duration,
}

/// The variant's load: S streams of the plan's subjects, each read back
/// afterwards (a durable is due what its filter selects of what the
/// stream holds), each fed by a publisher of its own at its share of the
/// rate, and D durables on each, one client apiece, the clients sharing
/// the plan's connections.
fn spec(s: &Scope<'_>, plan: &Plan, shape: Shape) -> DriveSpec {
    let (label, names) = (s.label(), &s.ctx.names);
    let scenario = s.scenario.name();
    let mut streams = Vec::new();
    let mut readers = Vec::new();
    for i in 0..shape.streams {
        let part = format!("{label}-{i}");
        let base = names.subject(scenario, &part);
        let subjects = (0..plan.subjects).map(|f| format!("{base}.{f}")).collect();
        let stream = names.stream(scenario, &part);
        streams.push(StreamLoad {
            read_back: true,
            ..StreamLoad::new(&stream, subjects)
        });
        for k in 0..shape.durables {
            let mut consumer = plan.consumer.clone();
            consumer.consumers = 1;
            let durable = names.durable(scenario, &format!("{part}-{k}"));
            let filter = plan.filters[k % plan.filters.len()].subjects(k, plan.subjects);
            readers.push(Reader {
                stream: i,
                consumer: ConsumerSpec {
                    behaviour: Arc::new(BehaviourPlan::all_ack()),
                    ..ConsumerSpec::acking(durable, consumer)
                },
                filter: Some(filter),
            });
        }
    }
    let mut publish = plan.publish.clone();
    publish.publishers = shape.streams;
    let per_stream = per_stream(shape.rate, shape.streams);
    let common = &s.scenario.common;
    DriveSpec {
        streams,
        readers,
        shared_connections: Some(plan.connections),
        msg_id_prefix: s.msg_id_prefix(),
        ..DriveSpec::publish_only(
            s.drive_label(),
            "",
            Vec::new(),
            &publish,
            common,
            per_stream * shape.streams as u64,
        )
    }
}

/// Creates every stream, then every durable, a few requests at a time,
/// reading the server's memory before, between and after.
async fn provision(s: &mut Scope<'_>, plan: &Plan, spec: &DriveSpec) -> Result<Provisioned> {
    let ctx = s.ctx;
    let mut p = Provisioned {
        mem_before: memory_now(ctx).await,
        ..Default::default()
    };
    let started = Instant::now();
    let configs = spec.streams.iter().map(|stream| {
        let base = stream.subjects[0].rsplit_once('.').map_or("", |(b, _)| b);
        crate::streams::provision::stream_config(&stream.name, base, &ctx.server, &ctx.stream)
    });
    let created = s.streams(configs.collect(), AT_ONCE).await?;
    p.create_streams = started.elapsed();
    p.mem_streams = memory_now(ctx).await;

    let started = Instant::now();
    let s = &*s;
    let durables = spec.readers.iter().map(|reader| {
        let stream = &spec.streams[reader.stream];
        let config = durable_config(plan, stream, reader);
        s.durable(&created[reader.stream], config, plan.consumer.pedantic)
    });
    let done: Vec<Result<()>> = futures::stream::iter(durables)
        .buffered(AT_ONCE)
        .collect()
        .await;
    done.into_iter().collect::<Result<Vec<_>>>()?;
    p.create_durables = started.elapsed();
    p.mem_durables = memory_now(ctx).await;
    Ok(p)
}

/// The durable's configuration: the scenario's consumer plan, filtered
/// on its subjects (one as `filter_subject`, several as
/// `filter_subjects`, all of them as no filter).
fn durable_config(
    plan: &Plan,
    stream: &StreamLoad,
    reader: &Reader,
) -> async_nats::jetstream::consumer::Config {
    let base = stream.subjects[0].rsplit_once('.').map_or("", |(b, _)| b);
    let durable = &reader.consumer.durable;
    let mut config = crate::streams::provision::durable_config(durable, &plan.consumer, base);
    let subjects: Vec<String> = (reader.filter.iter().flatten())
        .map(|&f| stream.subjects[f].clone())
        .collect();
    match subjects.len() {
        n if n == stream.subjects.len() && n != 2 => {}
        1 => config.filter_subject = subjects[0].clone(),
        _ => config.filter_subjects = subjects,
    }
    config
}

/// The servers' resident memory now, when their monitoring endpoints are
/// known.
async fn memory_now(ctx: &RunContext) -> Option<u64> {
    let monitors = ctx.monitors.clone();
    tokio::task::spawn_blocking(move || crate::server::telemetry::memory_now(&monitors))
        .await
        .ok()
        .flatten()
}

/// A variant's figures, by what they are about: its rates, the spread of
/// its durables, its latencies, what creating its streams and durables
/// cost the server (time, memory), CPU per delivery, the drive's records,
/// a row per stream and per durable, and what fell short of the plan.
fn measure(o: &DriveOutcome, p: &Provisioned, spec: &DriveSpec, r: &mut VariantResult) {
    let consumers = spec.readers.len();
    let target = spec.rate.unwrap_or(0) as f64;
    let d = delivered(o);
    r.ledger = d.counts;
    rates(o, target, &d, r);
    let (rates, p99s) = (d.durable_rates, d.durable_p99s);
    across_durables("durable_consume_rate", "msg/s", rates, Direction::Higher, r);
    across_durables("durable_e2e_p99", "us", p99s, Direction::Lower, r);
    // End to end over every durable, from the intended and the actual send.
    r.latency(names::E2E_LATENCY, &d.e2e);
    r.latency(names::E2E_LATENCY_ACTUAL, &d.e2e_sent);
    checks::pub_acks(o, r);
    // Durables filter subjects, so a message's deliveries vary: no count
    // per step to hold them to.
    let span = (o.t0_ns, o.record_from_ns);
    super::shape::per_step(&d.e2e, span, false, &spec.publish.arrival, r);
    r.ms("drain_time", o.drain_time.as_nanos() as u64);
    creation_times(o, p, consumers, r);
    server_memory(p, spec.streams.len(), consumers, r);
    cpu_per_delivery(o, d.counts.deliveries, r);
    checks::server_figures(o, r);
    super::client_cost::client_figures(o, r);
    r.timelines
        .insert(names::PUBLISHED.into(), o.published_timeline.clone());
    parts(o, r);
    shortfalls(o, target, r);
}

/// Every durable's deliveries together, and each durable's own rate and
/// p99 for their spread.
struct Delivered {
    e2e: Recorder,
    e2e_sent: Recorder,
    /// Deliveries are the durables' counts summed; publishing is the
    /// streams', not the durables' dues.
    counts: LedgerCounts,
    /// From the first delivery of any durable to the last.
    span: Duration,
    durable_rates: Vec<f64>,
    durable_p99s: Vec<f64>,
}

/// Sums the durables' outcomes into the variant's: one latency histogram
/// over every delivery, one ledger, one span.
fn delivered(o: &DriveOutcome) -> Delivered {
    let (mut e2e, mut e2e_sent) = (Recorder::new(), Recorder::new());
    let mut counts = LedgerCounts::default();
    let (mut first_ns, mut last_ns) = (u64::MAX, 0u64);
    let (mut durable_rates, mut durable_p99s) = (Vec::new(), Vec::new());
    for (_, d) in o.durables() {
        let c = &d.outcome.counts;
        e2e.merge(&d.outcome.e2e_intended);
        e2e_sent.merge(&d.outcome.e2e_sent);
        counts += *c;
        for report in &d.outcome.consumers {
            if report.first_ns > 0 {
                first_ns = first_ns.min(report.first_ns);
            }
            last_ns = last_ns.max(report.last_ns);
        }
        durable_rates.push(d.outcome.consume_rate());
        durable_p99s.push(d.outcome.e2e_intended.summary().p99_us);
    }
    let sent = &o.counts;
    counts.published = sent.published;
    counts.publish_errors = sent.publish_errors;
    counts.persisted = sent.persisted;
    counts.persisted_twice = sent.persisted_twice;
    counts.duplicates = sent.duplicates;
    counts.refused_by_limit = sent.refused_by_limit;
    Delivered {
        e2e,
        e2e_sent,
        counts,
        span: Duration::from_nanos(last_ns.saturating_sub(first_ns)),
        durable_rates,
        durable_p99s,
    }
}

/// The variant's pace: the total rate planned, published and consumed
/// over every durable, and how many deliveries each message fanned out to.
fn rates(publish: &DriveOutcome, target: f64, d: &Delivered, r: &mut VariantResult) {
    r.metric(names::TARGET_RATE, "msg/s", target, Direction::None);
    let consumed = crate::drive::rate(d.counts.deliveries, d.span);
    for (name, rate) in [
        (names::PUBLISH.rate, publish.publish_rate()),
        (names::CONSUME.rate, consumed),
    ] {
        r.metric(name, "msg/s", rate, Direction::Higher);
    }
    if d.counts.persisted > 0 {
        let per_message = d.counts.deliveries as f64 / d.counts.persisted as f64;
        r.metric("deliveries_per_message", "x", per_message, Direction::None);
    }
}

/// How one figure spreads across the durables (`<name>_min`, `_median`,
/// `_max`): a slow durable hides in the aggregate, not here. Nothing
/// without durables.
fn across_durables(
    name: &str,
    unit: &str,
    mut values: Vec<f64>,
    direction: Direction,
    r: &mut VariantResult,
) {
    values.sort_by(f64::total_cmp);
    if let (Some(&min), Some(&max)) = (values.first(), values.last()) {
        let median = values[values.len() / 2];
        r.metric(format!("{name}_min"), unit, min, direction);
        r.metric(format!("{name}_median"), unit, median, direction);
        r.metric(format!("{name}_max"), unit, max, direction);
    }
}

/// What creating the variant cost the server in time: every stream, a
/// durable on average, and binding the durables to their clients.
fn creation_times(o: &DriveOutcome, p: &Provisioned, durables: usize, r: &mut VariantResult) {
    let each = p.create_durables.as_nanos() as u64 / durables.max(1) as u64;
    r.ms("create_streams_time", p.create_streams.as_nanos() as u64);
    r.ms("create_durable_time", each);
    r.ms(
        "bind_durables_time",
        o.bind_time.unwrap_or_default().as_nanos() as u64,
    );
}

/// CPU per delivery on each side, the server's when it is known: a
/// fan-out's work is its deliveries, not its messages. Nothing without
/// deliveries.
fn cpu_per_delivery(publish: &DriveOutcome, deliveries: u64, r: &mut VariantResult) {
    let sides = [
        ("server_cpu_per_delivery", publish.server_cpu),
        ("client_cpu_per_delivery", Some(publish.client_cpu.total())),
    ];
    for (name, cpu) in sides.into_iter().filter(|_| deliveries > 0) {
        if let Some(cpu) = cpu {
            let us = cpu.as_secs_f64() * 1e6 / deliveries as f64;
            r.metric(name, "us", us, Direction::Lower);
        }
    }
}

/// What kept the variant short of its plan, as warnings: a generator that
/// fell behind, a run interrupted, the publishers' errors, and durable
/// clients that failed.
fn shortfalls(o: &DriveOutcome, target: f64, r: &mut VariantResult) {
    if !o.interrupted {
        r.warnings.extend(super::schedule::fell_behind(o, target));
    }
    checks::warnings(o, r);
    let failed: Vec<String> = o
        .durables()
        .filter_map(|(_, d)| d.error.as_ref().map(|e| format!("{}: {e}", d.name)))
        .collect();
    if let Some(first) = failed.first() {
        r.warnings.push(format!(
            "{} durable client(s) failed; first: {first}",
            failed.len()
        ));
    }
}

/// The server's resident memory (/varz mem) per stream and per durable:
/// its growth while they were created, before any message. Go keeps heap
/// that earlier variants freed and reuses it, so only growth is a
/// figure; none at all is said, not reported as zero.
fn server_memory(p: &Provisioned, streams: usize, durables: usize, r: &mut VariantResult) {
    let Some(before) = p.mem_before else {
        return;
    };
    r.param(
        "server_memory",
        "resident memory (/varz mem) before and after creating the streams, then the durables, \
         before any message; understated when the server reuses heap freed by an earlier variant \
         (a run's first variant on a fresh server is clean)",
    );
    for (name, after, from, n, what) in [
        (
            "server_mem_per_stream",
            p.mem_streams,
            Some(before),
            streams,
            "streams",
        ),
        (
            "server_mem_per_durable",
            p.mem_durables,
            p.mem_streams,
            durables,
            "durables",
        ),
    ] {
        let (Some(after), Some(from)) = (after, from) else {
            continue;
        };
        let grown = after.saturating_sub(from);
        if grown == 0 {
            r.warnings.push(format!(
                "the server's resident memory did not grow while {n} {what} were created: it reused \
                 heap freed by an earlier variant, so {name} is not reported (run the variant first \
                 on a fresh server)"
            ));
            continue;
        }
        let kb_each = grown as f64 / 1e3 / n.max(1) as f64;
        r.metric(name, "KB", kb_each, Direction::Lower);
    }
}

/// One row per stream and per durable.
fn parts(o: &DriveOutcome, r: &mut VariantResult) {
    let us = |v: f64| (v * 10.0).round() / 10.0;
    for s in &o.parts {
        let c = &s.outcome.counts;
        let mut part = Part::new("stream", &s.name);
        part.set(names::PUBLISHED, c.published);
        part.set("persisted", c.persisted);
        part.set(names::PUBLISH.rate, s.outcome.publish_rate().round());
        part.set(
            "pub_ack_p99_us",
            us(s.outcome.pub_ack_intended.summary().p99_us),
        );
        r.parts.push(part);
    }
    for (s, d) in o.durables() {
        let c = &d.outcome.counts;
        let e2e = d.outcome.e2e_intended.summary();
        let mut part = Part::new("durable", &d.name);
        part.set("stream", &s.name);
        part.set("filter", d.filters.join(" "));
        part.set("due", c.persisted);
        part.set(names::DELIVERED, c.delivered);
        part.set("redelivered", c.redelivered);
        part.set("lost", c.lost);
        part.set("client_dropped", c.client_dropped);
        part.set("outside_filter", c.delivered_unconfirmed);
        part.set(names::CONSUME.rate, d.outcome.consume_rate().round());
        part.set("e2e_p50_us", us(e2e.p50_us));
        part.set("e2e_p99_us", us(e2e.p99_us));
        part.set("e2e_max_us", us(e2e.max_us));
        r.parts.push(part);
    }
}

fn verify(o: &DriveOutcome, r: &mut VariantResult) {
    let per_stream: [fn(&crate::drive::StreamPart) -> Invariant; 3] = [
        |s| checks::every_publish_persisted(checks::PERSISTED, &s.outcome),
        stream_holds,
        |s| checks::publishers_finished(&s.outcome),
    ];
    for check in per_stream {
        let parts: Vec<(String, Invariant)> =
            o.parts.iter().map(|s| (s.name.clone(), check(s))).collect();
        r.invariants.extend(checks::across(&parts, "streams"));
    }
    let per_durable: [fn(&crate::drive::DurablePart) -> Invariant; 7] = [
        |d| due_unknown(d, "lost = 0").unwrap_or_else(|| checks::nothing_lost(&d.outcome)),
        |d| checks::nothing_dropped(&d.outcome),
        |d| {
            const NAME: &str = "only what its filter selects delivered";
            if let Some(unknown) = due_unknown(d, NAME) {
                return unknown;
            }
            let c = &d.outcome.counts;
            Invariant::check(
                NAME,
                c.delivered_unconfirmed == 0,
                format!(
                    "{} of {} messages delivered outside its filter ({})",
                    c.delivered_unconfirmed,
                    c.delivered,
                    d.filters.join(" ")
                ),
            )
        },
        |d| Invariant::equal("no unexpected redelivery", d.outcome.counts.redelivered, 0),
        |d| {
            let c = &d.outcome.counts;
            Invariant::equal("every delivery acked", c.acked, c.delivered).client_side()
        },
        |d| checks::stamped(&d.outcome),
        |d| checks::nothing_pending(&d.outcome),
    ];
    for check in per_durable {
        let parts: Vec<(String, Invariant)> = o
            .durables()
            .map(|(_, d)| (d.name.clone(), check(d)))
            .collect();
        r.invariants.extend(checks::across(&parts, "durables"));
    }
}

/// A check against a durable's due fails when the due is unknown (its
/// stream was not read back), rather than hold over nothing.
fn due_unknown(d: &crate::drive::DurablePart, name: &str) -> Option<Invariant> {
    (!d.due_known).then(|| {
        Invariant::check(
            name,
            false,
            "what its filter selected is unknown: its stream was not read back",
        )
    })
}

/// Every message a PubAck confirmed is in the stream, and nothing else:
/// the read-back the durables' dues were taken from, checked against the
/// publisher.
fn stream_holds(part: &crate::drive::StreamPart) -> Invariant {
    const NAME: &str = "stream holds every PubAcked message, and no other";
    match &part.stored {
        Some(s) => Invariant::check(
            NAME,
            s.missing == 0 && s.unconfirmed == 0,
            format!(
                "read back: {} PubAcked missing, {} stored without a PubAck",
                s.missing, s.unconfirmed
            ),
        ),
        None => {
            let why = part.read_error.as_deref().unwrap_or("not asked");
            Invariant::check(NAME, false, format!("not read back: {why}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FilterShape;

    #[test]
    fn durables_cycle_through_the_filter_shapes() {
        let shapes = [FilterShape::One, FilterShape::Two, FilterShape::All];
        let got: Vec<Vec<usize>> = (0..4).map(|k| shapes[k % 3].subjects(k, 4)).collect();
        assert_eq!(got, [vec![0], vec![1, 2], vec![0, 1, 2, 3], vec![3]]);
    }
}
