//! `kind = "lag"`: replication lag through mirrors and sources.
//!
//! Provision: origin streams that republish what they store (headers
//! only), and the copy the server fills from them: a mirror (`mirror`,
//! and `cut` on a local cluster), an aggregate sourcing `origins` origins
//! (`source`), or a source of a work-queue origin through a durable with
//! `ack_policy = flow_control` that jsbench creates (`wq_source`, and
//! `wq_paused` with that durable paused a while). Drive: `rate` msg/s
//! for `duration` through the shared drive ([`crate::drive`]), one paced
//! publisher per origin and no consumer on them, the copy read from its
//! first sequence as it fills. Measure, per message: the lag from stored
//! in the origin (its stored time) to stored in the copy (a source's own
//! stored time; a mirror keeps the origin's, so there: read from the
//! copy), the send to the copy's read, the copy's rate, and how soon a
//! paused or cut-off copy caught up. The `leaf` variant's mirror is on
//! a leafnode server (`run --leafnode`), sourcing across JetStream domains
//! through a link slowed to `leaf_bandwidth` and `leaf_delay` for the
//! load, and read on the leaf. Verify: every origin
//! message in the copy once, nothing else; the origin's order where the
//! copy keeps it; a work-queue origin drained by the flow-control acks.

mod audit;
mod fault;
mod leaf;
mod load;
pub mod plan;
pub mod topology;
pub mod watch;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use anyhow::{Context as _, Result};
use async_nats::jetstream::stream;

use self::audit::CopyAudit;
use self::fault::Happened;
use self::topology::Topology;
use self::watch::{Copied, CopyReader, OriginListener, Origins};
use super::checks;
use super::table::{self, ChartSpec, Column, Show};
use super::{Kind, Scope, Variants};
use crate::drive::{DriveOutcome, RunContext, drive};
use crate::profile::{CommonPlan, FaultKind, format_duration};
use crate::record::clock;
use crate::record::histogram::Recorder;
use crate::record::metrics::{Direction, rate_and_throughput};
use crate::record::names;
use crate::record::timeline::Timeline;
use crate::streams::provision::{Need, placement};
use crate::variant::{Invariant, VariantResult};

pub use audit::{COUNT, CUT, DRAINED, KILL, ONCE, ORDER, PAUSED, PERSISTED};
pub use plan::{Mode, Plan};

/// Stored in the origin (its stored time) to stored in the copy (a
/// source's stored time) or, for a mirror, which keeps the origin's
/// stored time, read from the copy here. Server clocks of one host
/// against each other (and, for a mirror, against jsbench's).
pub const LAG: &str = "lag";
/// A source's stored time to the copy's read here: what reading adds,
/// the part of a mirror's lag that is not the copying.
pub const READ_DELAY: &str = "copy_read_delay";
/// The message's send (the stamp its publisher wrote in it) to the copy's
/// read here, both on jsbench's clock: the lag as a client sees it, no
/// server clock involved. From the send, not the PubAck's receipt: the
/// shared publisher times PubAcks into histograms and keeps no receipt
/// per message, which its hot path would pay for.
pub const SENT_TO_READ: &str = "sent_to_copy_read";
/// Messages stored in the copy over the span from its first to its last.
pub const COPY_RATE: &str = "copy_rate";
/// Messages the copy held.
pub const COPIED: &str = "copied";
/// Messages the origins stored (PubAck or their own republish), the
/// primers (one per origin, before the load) included.
pub const STORED: &str = "origin_stored";
/// From the fault's end (pause over, routes healed) to the copy holding
/// everything the origins stored before it, ms.
pub const CATCH_UP: &str = "catch_up";
/// From the copy holding every message to the work-queue origin found
/// empty, ms: how long the flow-control acks trail the copy.
pub const DRAIN: &str = "origin_drain";
/// How long the pause or the cut lasted as injected, ms.
pub const FAULT_LASTED: &str = "fault_lasted";
/// Copied messages counted per second of their copy instant (a timeline).
pub const COPIED_PER_SECOND: &str = "copied_per_second";

/// How often the copy's progress and the origin's drain are polled.
const POLL: Duration = Duration::from_millis(20);
/// Missing messages looked up in their origin, at most.
const LOOKUPS: usize = 1_000;

const COLUMNS: &[Column] = &[
    table::VARIANT,
    Column::metric("copied", COPIED, Show::Whole),
    table::quantile("lag p50", LAG, "p50"),
    table::quantile("p99", LAG, "p99"),
    table::quantile("max", LAG, "max"),
    table::quantile("sent→read p50", SENT_TO_READ, "p50"),
    table::quantile("p99", SENT_TO_READ, "p99"),
    Column::metric("copy/s", COPY_RATE, Show::Rate),
    Column::metric("catch-up", CATCH_UP, Show::Ms),
    Column::metric("drain", DRAIN, Show::Ms),
    table::LOST,
    table::VERDICT,
];

/// The registry's row for `lag`: origins copied by the server.
pub struct Lag;

impl Kind for Lag {
    const NAME: &'static str = "lag";
    const CHARTS: &'static [ChartSpec] = &[
        ChartSpec::Percentiles {
            stem: LAG,
            title: "Replication lag by percentile",
            caption: "Per variant (one colour each). Solid: from the origin's stored time to the \
                      copy's (a source's own stored time; a mirror keeps the origin's, so its copy \
                      instant is its read here). Dashed: from the publisher's send to the copy's \
                      read here, both on jsbench's clock.",
            families: &[
                (LAG, "stored to stored", false),
                (SENT_TO_READ, "sent to read", true),
            ],
        },
        ChartSpec::PerSecond {
            histogram: LAG,
            title: "Replication lag",
            measured: "replication lags (origin stored to copy stored, by the second of the copy \
                       instant)",
        },
    ];
    const COLUMNS: &'static [Column] = COLUMNS;
    type Plan = Plan;

    fn need(plan: &Plan, common: &CommonPlan) -> Need {
        let messages = plan.rate as f64 * common.duration.as_secs_f64();
        let bytes = messages as u64 * (plan.publish.message_size.mean() as u64 + 200);
        let origins = if plan.variants.contains(&Mode::Source) {
            plan.origins
        } else {
            1
        };
        Need {
            streams: origins + 1,
            consumers: 2,
            bytes,
            total_bytes: 2 * bytes,
            max_ack_pending: 0,
        }
    }

    fn estimated_duration(plan: &Plan, common: &CommonPlan) -> Duration {
        common.duration * plan.variants.len() as u32
    }

    fn faults(plan: &Plan) -> Option<FaultKind> {
        // A cut needs the route relays, which also allow a kill.
        if plan.variants.contains(&Mode::Cut) {
            Some(FaultKind::Cut)
        } else {
            plan.variants
                .contains(&Mode::Kill)
                .then_some(FaultKind::Kill)
        }
    }

    type Group = ();
    type Shared = ();
    type Variant = Mode;

    fn variants(plan: &Plan, _: &()) -> Variants<Mode> {
        Variants::List(plan.variants.clone())
    }

    fn label(_: &Plan, mode: &Mode) -> String {
        mode.label().to_string()
    }

    /// The streams, the watchers, the load, the settling; measure and
    /// verify.
    async fn run(
        s: &mut Scope<'_>,
        r: &mut VariantResult,
        plan: &Plan,
        _: &mut (),
        &mode: &Mode,
    ) -> Result<()> {
        let common = &s.scenario.common;
        describe(common, plan, mode, r);
        let t = topology::plan(s.ctx, common, mode, plan.origins);
        let leaf = match mode {
            Mode::Leaf => Some(leaf::LeafSide::open(s.ctx).await?),
            _ => None,
        };
        let observed = observe(s, plan, mode, &t, leaf.as_ref(), r).await?;
        measure(mode, &observed, r);
        verify(mode, &observed, r);
        Ok(())
    }
}

fn describe(common: &CommonPlan, plan: &Plan, mode: Mode, r: &mut VariantResult) {
    r.param("mode", mode.label());
    r.param("rate", plan.rate);
    // One fixed size (the plan refuses a distribution): its number.
    r.param("message_size", plan.publish.message_size.max());
    r.param("published_for", format_duration(common.duration));
    r.param("settle", format_duration(common.drain_timeout));
    match mode {
        Mode::Source => r.param("origins", plan.origins),
        Mode::WqSource | Mode::WqPaused => {
            r.param("sourcing", "durable, ack_policy flow_control");
            r.param(
                "sourcing_heartbeat",
                format_duration(topology::SOURCING_HEARTBEAT),
            );
        }
        Mode::Mirror | Mode::Cut | Mode::Kill => {}
        Mode::Leaf => {
            r.param("copy_on", "leafnode server, domain leaf");
            r.param(
                "leaf_bandwidth",
                plan.leaf_bandwidth
                    .map_or("unlimited".to_string(), |b| format!("{b} bytes/s")),
            );
            r.param("leaf_delay", format_duration(plan.leaf_delay));
        }
    }
    if mode == Mode::WqPaused {
        r.param("pause_after", format_duration(plan.pause_after));
        r.param("pause_for", format_duration(plan.pause_for));
    }
    if mode.outage().is_some() {
        r.param("cut_after", format_duration(plan.cut_after));
        r.param("down_for", format_duration(plan.down_for));
    }
}

/// What one variant saw.
struct Observed {
    /// The load as the shared drive ran it, its counts per origin.
    outcome: DriveOutcome,
    /// Per origin: the sequences a PubAck confirmed, the primer's too.
    acked: Vec<BTreeSet<u64>>,
    /// Per origin: stored time by sequence, from its republish.
    origin_stored: Vec<HashMap<u64, i128>>,
    copied: Vec<Copied>,
    copy_count: Option<u64>,
    /// A work-queue origin: messages it still held at the end, and ms
    /// from the copy's last message to its being found empty.
    origin_left: Option<u64>,
    drain_ms: Option<f64>,
    fault: Option<Happened>,
    /// Of the missing, how many their origin still holds.
    origin_holds: Option<u64>,
    names: Vec<String>,
}

async fn observe(
    s: &mut Scope<'_>,
    plan: &Plan,
    mode: Mode,
    t: &Topology,
    leaf: Option<&leaf::LeafSide>,
    r: &mut VariantResult,
) -> Result<Observed> {
    let (ctx, common) = (s.ctx, &s.scenario.common);
    let js = ctx.provisioner.jetstream();
    let client = js.client();
    let mut listeners = Vec::new();
    for o in &t.origins {
        listeners.push(OriginListener::start(&client, &o.base).await?);
    }
    let copy = topology::provision(s, mode, t, leaf).await?;
    let struck = match mode.outage() {
        Some(how) => Some(fault::arrange(ctx, t, how).await?),
        None => None,
    };
    let names: Vec<String> = t.origins.iter().map(|o| o.name.clone()).collect();
    let origins = Origins {
        names: names.clone(),
        mirror: mode.mirror(),
    };
    let expected = (plan.rate as f64 * common.duration.as_secs_f64()) as usize;
    let reader = CopyReader::start(&copy, origins, expected).await?;
    let subjects: Vec<String> = t.origins.iter().map(|o| o.subject()).collect();
    let primers = load::prime(js, &subjects).await?;
    primed(&reader, subjects.len() as u64).await?;
    // Slowed for the load and its settling; let go on the way out.
    let _throttle = leaf.map(|l| l.throttle(plan));
    let mut spec = load::spec(s, plan, mode, t);
    spec.avoid_server = struck.as_ref().map(|n| n.url.clone());
    let (outcome, fault) = tokio::join!(
        drive(ctx, &spec),
        inject(ctx, plan, mode, t, struck.as_ref())
    );
    let mut outcome = outcome?;
    let fault = fault?;
    load::uncounted_losses(&mut outcome);
    let mut acked = load::acked(&outcome, t.origins.len())?;
    // The primers are in the copy too.
    for (seqs, primer) in acked.iter_mut().zip(primers) {
        seqs.insert(primer);
    }
    let due = acked.iter().map(|s| s.len() as u64).sum();
    settle(ctx, common, &reader, due).await;
    if let Some(l) = leaf
        && let Some(c) = l.compression().await
    {
        r.param("leaf_compression", c);
    }
    let (origin_left, drain_ms) = if mode.work_queue() {
        let (left, ms) = drain(ctx, common, &t.origins[0].name).await?;
        (Some(left), ms)
    } else {
        (None, None)
    };
    let copied = reader.finish().await?;
    let mut origin_stored = Vec::new();
    for l in listeners {
        origin_stored.push(l.finish().await?);
    }
    let copy_count = match leaf {
        Some(l) => l.provisioner.stream_info(&t.copy).await.map(|i| {
            r.streams.push(placement(&i));
            i.state.messages
        }),
        None => s.stored(r, &t.copy).await,
    };
    let mut o = Observed {
        outcome,
        acked,
        origin_stored,
        copied,
        copy_count,
        origin_left,
        drain_ms,
        fault,
        origin_holds: None,
        names,
    };
    o.origin_holds = Some(still_held(ctx, &o).await?);
    Ok(o)
}

/// How long the copy may take to hold the primers.
const PRIME_TIMEOUT: Duration = Duration::from_secs(30);

/// Waits for the copy to hold the primers (one per origin).
async fn primed(reader: &CopyReader, primers: u64) -> Result<()> {
    let started = tokio::time::Instant::now();
    while reader.seen() < primers {
        if started.elapsed() >= PRIME_TIMEOUT {
            return Err(anyhow::anyhow!(
                "the copy held {} of the {primers} primer message(s) after {}: is the \
                 server copying at all?",
                reader.seen(),
                format_duration(PRIME_TIMEOUT)
            ));
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

/// The variant's fault, from about the first publish (started with the
/// drive, which connects and then waits its lead-in before the first
/// send): none, a pause, a cut.
async fn inject(
    ctx: &RunContext,
    plan: &Plan,
    mode: Mode,
    t: &Topology,
    struck: Option<&fault::Struck>,
) -> Result<Option<Happened>> {
    match mode {
        Mode::WqPaused => fault::pause(ctx, t, ctx.lead_in + plan.pause_after, plan.pause_for)
            .await
            .map(Some),
        Mode::Cut | Mode::Kill => {
            let (node, how) = struck
                .zip(mode.outage())
                .expect("an outage variant's node, arranged before the load");
            let when = (ctx.lead_in + plan.cut_after, plan.down_for);
            fault::strike(ctx, t, node, how, when).await.map(Some)
        }
        Mode::Mirror | Mode::Source | Mode::WqSource | Mode::Leaf => Ok(None),
    }
}

/// Waits until the copy holds as many messages as were confirmed, or
/// none came for `drain_timeout`.
async fn settle(ctx: &RunContext, common: &CommonPlan, reader: &CopyReader, due: u64) {
    let (mut seen, mut came) = (reader.seen(), tokio::time::Instant::now());
    while !ctx.stop.is_cancelled() && reader.seen() < due {
        if reader.seen() > seen {
            (seen, came) = (reader.seen(), tokio::time::Instant::now());
        }
        if came.elapsed() >= common.drain_timeout {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Polls a work-queue origin until it is empty, for `drain_timeout` plus
/// the sourcing heartbeat (which paces the flow-control acks when the
/// origin is idle) at most: what it still holds, and how long it took.
async fn drain(ctx: &RunContext, common: &CommonPlan, origin: &str) -> Result<(u64, Option<f64>)> {
    let js = ctx.provisioner.jetstream();
    let mut s = js
        .get_stream(origin)
        .await
        .with_context(|| format!("getting {origin} to watch it drain"))?;
    let started = tokio::time::Instant::now();
    let limit = common.drain_timeout + topology::SOURCING_HEARTBEAT;
    loop {
        let left = s
            .info()
            .await
            .with_context(|| format!("stream info of {origin}"))?
            .state
            .messages;
        if left == 0 {
            return Ok((0, Some(started.elapsed().as_secs_f64() * 1e3)));
        }
        if started.elapsed() >= limit || ctx.stop.is_cancelled() {
            return Ok((left, None));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Per origin, what it stored: confirmed by a PubAck, or republished.
fn stored_sets(o: &Observed) -> Vec<BTreeSet<u64>> {
    o.acked
        .iter()
        .zip(&o.origin_stored)
        .map(|(acked, republished)| acked.iter().chain(republished.keys()).copied().collect())
        .collect()
}

/// Of the messages the copy is missing, how many their origin still
/// holds (the first [`LOOKUPS`], by message get).
async fn still_held(ctx: &RunContext, o: &Observed) -> Result<u64> {
    let a = audit::audit(&stored_sets(o), &o.copied);
    let js = ctx.provisioner.jetstream();
    let mut held = 0;
    let mut looked = 0;
    for (origin, seqs) in &a.missing {
        let name = &o.names[*origin];
        let s: stream::Stream<()> = js
            .get_stream_no_info(name)
            .await
            .with_context(|| format!("getting {name} to look for what the copy lacks"))?;
        for &seq in seqs {
            if looked >= LOOKUPS {
                return Ok(held);
            }
            looked += 1;
            if s.get_raw_message(seq).await.is_ok() {
                held += 1;
            }
        }
    }
    Ok(held)
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The copy instant of a message: a source's stored time; a mirror's
/// read here (its stored time is the origin's).
fn copy_instant(mode: Mode, c: &Copied) -> u64 {
    if mode.mirror() {
        c.received_ns
    } else {
        c.stored_ns.max(0) as u64
    }
}

fn measure(mode: Mode, o: &Observed, r: &mut VariantResult) {
    publishing(&o.outcome, r);
    let measured_from = o.outcome.record_from_ns;
    let mut lag = Recorder::with_intervals();
    let (mut read, mut sent_to_read) = (Recorder::new(), Recorder::new());
    let mut per_second = Timeline::per_second(
        o.copied
            .first()
            .map_or(0, |c| copy_instant(mode, c) / 1_000_000_000 * 1_000_000_000),
    );
    let mut unstamped = 0u64;
    for c in &o.copied {
        let Some(origin) = c.origin else { continue };
        let at = copy_instant(mode, c);
        per_second.mark(at);
        // The origin's stamp on the server's wall clock, put on jsbench's
        // where it meets jsbench's own readings: a mirror's read instant
        // and the warm-up's end (a source's stored time is the server's
        // too, and stays on its clock).
        let stored = o.origin_stored[origin].get(&c.origin_seq).map(|&s| {
            (
                s.max(0) as u64,
                clock::from_wall(s.max(0) as u64, c.received_ns),
            )
        });
        // The primers and the warm-up: checked, not measured.
        if stored.is_some_and(|(_, local)| local < measured_from) {
            continue;
        }
        match stored {
            Some((_, local)) if mode.mirror() => lag.record_between(local, at),
            Some((server, _)) => lag.record_between(server, at),
            None => unstamped += 1,
        }
        if !mode.mirror() {
            let stored = clock::from_wall(c.stored_ns.max(0) as u64, c.received_ns);
            read.record_between(stored, c.received_ns);
        }
        if let Some(sent) = c.sent_ns {
            sent_to_read.record_between(sent, c.received_ns);
        }
    }
    r.latency(LAG, &lag);
    r.add_per_second(LAG);
    r.latency(READ_DELAY, &read);
    r.latency(SENT_TO_READ, &sent_to_read);
    r.timelines.insert(COPIED_PER_SECOND.into(), per_second);
    r.count(COPIED, o.copied.len() as u64);
    let stored: usize = stored_sets(o).iter().map(BTreeSet::len).sum();
    r.count(STORED, stored as u64);
    if let (Some(first), Some(last)) = (o.copied.first(), o.copied.last()) {
        let span = copy_instant(mode, last).saturating_sub(copy_instant(mode, first));
        if span > 0 {
            let rate = (o.copied.len() - 1) as f64 / (span as f64 / 1e9);
            r.metric(COPY_RATE, "msg/s", rate, Direction::Higher);
        }
    }
    if let Some(ms_) = o.drain_ms {
        r.metric(DRAIN, "ms", ms_, Direction::Lower);
    }
    if let Some(f) = &o.fault {
        let lasted = ms(f.ended_ns.saturating_sub(f.began_ns));
        r.metric(FAULT_LASTED, "ms", lasted, Direction::Lower);
        if let Some(caught) = caught_up(mode, o, f.ended_ns) {
            let took = ms(caught.saturating_sub(f.ended_ns));
            r.metric(CATCH_UP, "ms", took, Direction::Lower);
        }
    }
    if unstamped > 0 {
        r.warnings.push(format!(
            "{unstamped} copied messages without their origin's stored time (the republish \
             listener missed them): left out of {LAG}"
        ));
    }
}

/// When the copy held the last message its origins stored before
/// `ended_ns`; `None` when it never held them all (the copying had not
/// caught up when the variant ended: no figure, the audit says what is
/// missing).
fn caught_up(mode: Mode, o: &Observed, ended_ns: u64) -> Option<u64> {
    let before = |origin: usize, seq: &u64| {
        o.origin_stored[origin]
            .get(seq)
            .is_some_and(|&s| s.max(0) as u64 <= ended_ns)
    };
    let due: usize = (0..o.origin_stored.len())
        .map(|origin| {
            o.origin_stored[origin]
                .keys()
                .filter(|s| before(origin, s))
                .count()
        })
        .sum();
    let held: BTreeSet<(usize, u64)> = o
        .copied
        .iter()
        .filter_map(|c| c.origin.map(|origin| (origin, c.origin_seq)))
        .filter(|(origin, seq)| before(*origin, seq))
        .collect();
    if held.len() < due {
        return None;
    }
    o.copied
        .iter()
        .filter(|c| c.origin.is_some_and(|origin| before(origin, &c.origin_seq)))
        .map(|c| copy_instant(mode, c))
        .max()
}

/// The publishing as every drive reports it: PubAck latency and send
/// lag, the rate, the CPU per message, the ledger, the timelines, the
/// drive's warnings and whether every publisher finished.
fn publishing(o: &DriveOutcome, r: &mut VariantResult) {
    checks::drive_records(o, None, r);
    checks::pub_acks(o, r);
    r.metrics.extend(rate_and_throughput(
        names::PUBLISH,
        o.publish_rate(),
        o.publish_throughput(),
    ));
}

fn verify(mode: Mode, o: &Observed, r: &mut VariantResult) {
    let a: CopyAudit = audit::audit(&stored_sets(o), &o.copied);
    // The drive saw the publishing; the copy is what was delivered.
    r.ledger.delivered = o.copied.len() as u64;
    r.ledger.deliveries = o.copied.len() as u64;
    r.ledger.lost = a.missing_count();
    r.invariants
        .push(checks::every_publish_persisted(PERSISTED, &o.outcome));
    r.invariants.extend(audit::invariants(
        &a,
        &o.names,
        o.origin_holds,
        o.copy_count,
    ));
    r.invariants.push(drained(mode, o));
    match (mode, &o.fault) {
        (Mode::WqPaused, f) => r.invariants.push(Invariant::check(
            PAUSED,
            f.as_ref().and_then(|f| f.paused) == Some(true),
            "the pause request answered paused: true",
        )),
        (Mode::Cut | Mode::Kill, f) => {
            let (name, done) = match mode {
                Mode::Cut => (CUT, "cut off and healed"),
                _ => (KILL, "killed and restarted"),
            };
            let struck = f.as_ref().and_then(|f| f.struck.clone());
            r.invariants.push(Invariant::check(
                name,
                struck.is_some(),
                match struck {
                    Some(node) => format!("{node}, the copy's leader, {done}"),
                    None => format!("no node was {done}"),
                },
            ));
        }
        _ => {}
    }
}

fn drained(mode: Mode, o: &Observed) -> Invariant {
    if !mode.work_queue() {
        return Invariant::not_applicable(
            DRAINED,
            "a limits origin keeps what it stored; nothing is acknowledged away",
        );
    }
    let detail = match o.origin_left {
        Some(0) => "the origin held nothing once the copy had every message".to_string(),
        Some(left) => format!(
            "the origin still holds {left} after the copy settled: the sourcing durable \
             never acknowledged them (flow control)"
        ),
        None => "the origin's state was never read".to_string(),
    };
    Invariant::check(DRAINED, o.origin_left == Some(0), detail)
}
