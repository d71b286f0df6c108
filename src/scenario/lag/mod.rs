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
pub mod plan;
pub mod topology;
pub mod watch;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use async_nats::jetstream::{self, stream};

use self::audit::CopyAudit;
use self::fault::Happened;
use self::topology::Topology;
use self::watch::{Copied, CopyReader, Origins};
use super::checks;
use super::table::{self, ChartSpec, Column, Show};
use super::{Kind, Scope, Variants};
use crate::drive::{DriveOutcome, DriveSpec, RunContext, StreamLoad, drive};
use crate::profile::{CommonPlan, FaultKind, PublishClient, PublishPlan, format_duration};
use crate::record::clock;
use crate::record::histogram::Recorder;
use crate::record::ledger::{Event, LedgerShard};
use crate::record::metrics::Direction;
use crate::record::timeline::Timeline;
use crate::streams::provision::{Need, placement};
use crate::variant::{Invariant, VariantResult};

pub use audit::{COUNT, DRAINED, ONCE, ORDER, PERSISTED};
pub use fault::{CUT, KILL, PAUSED};
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
            total_bytes: 2 * bytes,
            ..Need::one_stream(bytes)
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
            Mode::Leaf => Some(topology::LeafSide::open(s.ctx).await?),
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
    if mode.struck() {
        r.param("cut_after", format_duration(plan.cut_after));
        r.param("down_for", format_duration(plan.down_for));
    }
}

/// What one variant saw.
struct Observed {
    /// The load as the shared drive ran it, its counts per origin.
    outcome: DriveOutcome,
    /// Per origin: stored time by sequence, from its republish.
    origin_stored: Vec<HashMap<u64, i128>>,
    copied: Vec<Copied>,
    /// The copy against what each origin stored: confirmed by a PubAck
    /// (the primer's too) or republished.
    audit: CopyAudit,
    copy_count: checks::StreamCount,
    /// A work-queue origin: messages it still held at the end, and ns
    /// from the copy's last message to its being found empty.
    origin_left: Option<u64>,
    drain_ns: Option<u64>,
    fault: Option<Happened>,
    /// Of the missing, how many their origin still holds.
    origin_holds: u64,
    names: Vec<String>,
}

async fn observe(
    s: &mut Scope<'_>,
    plan: &Plan,
    mode: Mode,
    t: &Topology,
    leaf: Option<&topology::LeafSide>,
    r: &mut VariantResult,
) -> Result<Observed> {
    let (ctx, common) = (s.ctx, &s.scenario.common);
    let js = ctx.provisioner.jetstream();
    let mut listeners = Vec::new();
    for o in &t.origins {
        listeners.push(watch::listen(&js.client(), &o.base).await?);
    }
    let copy = topology::provision(s, mode, t, leaf).await?;
    let struck = match mode.struck() {
        true => Some(fault::arrange(ctx, t, mode).await?),
        false => None,
    };
    let names: Vec<String> = t.origins.iter().map(|o| o.name.clone()).collect();
    let origins = Origins {
        names: names.clone(),
        mirror: mode.mirror(),
    };
    let expected = (plan.rate as f64 * common.duration.as_secs_f64()) as usize;
    let reader = CopyReader::start(&copy, origins, expected).await?;
    let subjects: Vec<String> = t.origins.iter().map(|o| o.subject()).collect();
    let primers = prime(js, &subjects).await?;
    let primed = until(|| reader.seen() >= primers.len() as u64);
    if tokio::time::timeout(PRIME_TIMEOUT, primed).await.is_err() {
        bail!(
            "the copy held {} of the {} primer message(s) after {}: is the server copying \
             at all?",
            reader.seen(),
            primers.len(),
            format_duration(PRIME_TIMEOUT)
        );
    }
    // Slowed for the load and its settling; let go on the way out.
    let _throttle = leaf.map(|l| l.throttle(plan));
    let mut spec = load_spec(s, plan, mode, t);
    spec.avoid_server = struck.as_ref().map(|n| n.url.clone());
    let (outcome, fault) = tokio::join!(
        drive(ctx, &spec),
        fault::inject(ctx, plan, mode, t, struck.as_ref())
    );
    let (mut outcome, fault) = (outcome?, fault?);
    uncounted_losses(&mut outcome);
    let mut stored = acked(&outcome, t.origins.len())?;
    // The primers are in the copy too.
    for (seqs, primer) in stored.iter_mut().zip(primers) {
        seqs.insert(primer);
    }
    // Until the copy holds as many messages as were confirmed, or none
    // came for `drain_timeout`.
    let due: u64 = stored.iter().map(|s| s.len() as u64).sum();
    let (mut seen, mut came) = (reader.seen(), tokio::time::Instant::now());
    until(|| {
        if reader.seen() > seen {
            (seen, came) = (reader.seen(), tokio::time::Instant::now());
        }
        ctx.stop.is_cancelled() || seen >= due || came.elapsed() >= common.drain_timeout
    })
    .await;
    if let Some(l) = leaf
        && let Some(c) = l.compression().await
    {
        r.param("leaf_compression", c);
    }
    let (origin_left, drain_ns) = match mode.work_queue() {
        true => drain(ctx, common, &t.origins[0].name).await?,
        false => (None, None),
    };
    let copied = reader.finish().await?;
    let mut origin_stored = Vec::new();
    for l in listeners {
        origin_stored.push(l.finish("origin listener").await?);
    }
    for (seqs, republished) in stored.iter_mut().zip(&origin_stored) {
        seqs.extend(republished.keys());
    }
    let copy_count = match leaf {
        Some(l) => (l.provisioner.stream_info(&t.copy).await)
            .map(|i| {
                r.streams.push(placement(&i));
                i.state.messages
            })
            .map_err(|e| format!("{e:#}")),
        None => s.stored(r, &t.copy).await,
    };
    let audit = audit::audit(&stored, &copied);
    Ok(Observed {
        origin_holds: still_held(ctx, &audit, &names).await?,
        outcome,
        origin_stored,
        copied,
        audit,
        copy_count,
        origin_left,
        drain_ns,
        fault,
        names,
    })
}

/// How long the copy may take to hold the primers.
const PRIME_TIMEOUT: Duration = Duration::from_secs(30);

/// Polls every [`POLL`] until `done`.
async fn until(mut done: impl FnMut() -> bool) {
    while !done() {
        tokio::time::sleep(POLL).await;
    }
}

/// Polls a work-queue origin until it is empty, for `drain_timeout` plus
/// the sourcing heartbeat (which paces the flow-control acks when the
/// origin is idle) at most: what it still holds, and how long it took.
async fn drain(
    ctx: &RunContext,
    common: &CommonPlan,
    origin: &str,
) -> Result<(Option<u64>, Option<u64>)> {
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
            return Ok((Some(0), Some(started.elapsed().as_nanos() as u64)));
        }
        if started.elapsed() >= limit || ctx.stop.is_cancelled() {
            return Ok((Some(left), None));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Of the messages the copy is missing, how many their origin still
/// holds (the first [`LOOKUPS`], by message get).
async fn still_held(ctx: &RunContext, a: &CopyAudit, names: &[String]) -> Result<u64> {
    let js = ctx.provisioner.jetstream();
    let mut held = 0;
    let mut looked = 0;
    for (origin, seqs) in &a.missing {
        let name = &names[*origin];
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
    // The publishing as every drive reports it: PubAck latency and send
    // lag, the rate, the CPU per message, the ledger, the timelines, the
    // drive's warnings and whether every publisher finished.
    checks::drive_records(&o.outcome, None, r);
    checks::publishing(&o.outcome, r);
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
    r.count(STORED, o.audit.expected);
    if let (Some(first), Some(last)) = (o.copied.first(), o.copied.last()) {
        let span = copy_instant(mode, last).saturating_sub(copy_instant(mode, first));
        if span > 0 {
            let rate = (o.copied.len() - 1) as f64 / (span as f64 / 1e9);
            r.metric(COPY_RATE, "msg/s", rate, Direction::Higher);
        }
    }
    if let Some(ns) = o.drain_ns {
        r.ms(DRAIN, ns);
    }
    if let Some(f) = &o.fault {
        r.ms(FAULT_LASTED, f.ended_ns.saturating_sub(f.began_ns));
        if let Some(caught) = caught_up(mode, o, f.ended_ns) {
            r.ms(CATCH_UP, caught.saturating_sub(f.ended_ns));
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
    let due: usize = (o.origin_stored.iter().enumerate())
        .map(|(origin, stored)| stored.keys().filter(|s| before(origin, s)).count())
        .sum();
    let held: Vec<&Copied> = (o.copied.iter())
        .filter(|c| c.origin.is_some_and(|origin| before(origin, &c.origin_seq)))
        .collect();
    let distinct: BTreeSet<_> = held.iter().map(|c| (c.origin, c.origin_seq)).collect();
    if distinct.len() < due {
        return None;
    }
    held.iter().map(|c| copy_instant(mode, c)).max()
}

fn verify(mode: Mode, o: &Observed, r: &mut VariantResult) {
    // The drive saw the publishing; the copy is what was delivered.
    r.ledger.delivered = o.copied.len() as u64;
    r.ledger.deliveries = o.copied.len() as u64;
    r.ledger.lost = o.audit.missing_count();
    r.invariants
        .push(checks::every_publish_persisted(PERSISTED, &o.outcome));
    r.invariants.extend(audit::invariants(
        &o.audit,
        &o.names,
        Some(o.origin_holds),
        &o.copy_count,
    ));
    r.invariants.push(drained(mode, o));
    r.invariants
        .extend(o.fault.as_ref().map(|f| f.done.clone()));
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

// The origins' load, as the shared drive runs it ([`crate::drive`]): the
// paced publishers with their PubAck window, no consumer on the origins
// (the server's copying is the only reader). One publisher per origin,
// each feeding its origin's one subject, so publisher *p*'s PubAcks are
// origin *p*'s stream sequences: what the copy audit expects.

/// `rate` msg/s over warm-up and duration, split evenly over one
/// publisher per origin; nobody consumes. Through a route cut the
/// publishers stay off the node cut ([`DriveSpec::avoid_server`], set by
/// the variant) and are async-nats' all the same: should their link drop
/// they reconnect, where the direct client would end the run, and the
/// drive, which plans no fault of its own here, would choose that one.
fn load_spec(s: &Scope<'_>, plan: &Plan, mode: Mode, t: &Topology) -> DriveSpec {
    let mut publish = PublishPlan {
        publishers: t.origins.len(),
        ..plan.publish.clone()
    };
    if mode.struck() {
        publish.client = PublishClient::AsyncNats;
    }
    let streams = t.origins.iter();
    DriveSpec {
        streams: streams
            .map(|o| StreamLoad::new(&o.name, vec![o.subject()]))
            .collect(),
        ..DriveSpec::publish_only(
            s.drive_label(),
            "",
            Vec::new(),
            &publish,
            &s.scenario.common,
            plan.rate,
        )
    }
}

/// Per origin, the sequences its publisher's PubAcks confirmed stored:
/// each origin's part of the load, or the one origin's whole.
fn acked(o: &DriveOutcome, origins: usize) -> Result<Vec<BTreeSet<u64>>> {
    let ledgers: Vec<&LedgerShard> = match o.parts.is_empty() {
        true => vec![&o.ledger],
        false => o.parts.iter().map(|p| &p.outcome.ledger).collect(),
    };
    if ledgers.len() != origins {
        return Err(anyhow!(
            "the drive reported {} streams for {origins} origins: which origin stored \
             what cannot be told",
            ledgers.len()
        ));
    }
    Ok(ledgers.into_iter().map(persisted).collect())
}

fn persisted(ledger: &LedgerShard) -> BTreeSet<u64> {
    (1..=ledger.max_seq())
        .filter(|&s| ledger.count(s, Event::Persisted) > 0)
        .collect()
}

/// Nothing was consumed from the origins: what the copy delivered and
/// lost is the audit's to say, not the drive's.
fn uncounted_losses(o: &mut DriveOutcome) {
    let c = &mut o.counts;
    (c.lost, c.unattributed, c.client_dropped) = (0, 0, 0);
}

/// One message into each origin, confirmed: published before the load
/// and awaited in the copy, so the load starts on a copy whose sourcing
/// consumer is up (creating it takes the server 100-300 ms here, which
/// the first messages would otherwise wait out as lag). Set-up, not
/// load: its payload carries no stamp. The primers' sequences, by origin.
async fn prime(js: &jetstream::Context, subjects: &[String]) -> Result<Vec<u64>> {
    let mut seqs = Vec::new();
    for subject in subjects {
        let ack = js
            .publish(subject.clone(), u64::MAX.to_le_bytes().to_vec().into())
            .await
            .with_context(|| format!("priming {subject}"))?
            .await
            .with_context(|| format!("the PubAck of the primer on {subject}"))?;
        seqs.push(ack.sequence);
    }
    Ok(seqs)
}
