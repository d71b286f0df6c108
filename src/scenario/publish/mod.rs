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

use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::jetstream::stream;
use futures::future::join_all;

use super::checks::StreamCount;
use super::recording::with_ids;
use super::table::{self, Cell, Column, Show};
use super::{Kind, Scope, Variants};
use crate::drive::{DriveOutcome, DriveSpec};
use crate::load::reference::{self, ReferenceConfig, ReferenceReport};
use crate::profile::{CommonPlan, MsgId, Rate, RatePer, Reference, SizePlan, format_duration};
use crate::record::metrics::{Direction, rate_and_throughput, ratio};
use crate::record::names;
use crate::streams::provision::{MAX_RATE_ESTIMATE, Need};
use crate::streams::readback::{self, Reconciliation};
use crate::system::cpu;
use crate::variant::{Invariant, VariantResult};

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

impl Figures {
    /// What a variant reported: none when it failed.
    fn of(r: &VariantResult) -> Option<Figures> {
        if r.error.is_some() {
            return None;
        }
        let p99 = format!("{}.p99", names::PUB_ACK_LATENCY);
        Some(Figures {
            rate: r.value(names::PUBLISH.rate)?,
            // A reference has no PubAck histogram, and an empty one no
            // percentiles: 0 either way, as its summary says.
            p99_us: r.value(&p99).unwrap_or(0.0),
            client_us_per_msg: r.value(names::CLIENT_CPU_PER_MSG)?,
            server_us_per_msg: r.value(names::SERVER_CPU_PER_MSG),
        })
    }
}

/// The registry's row for `publish`: what a publish costs, with and without ids.
pub struct Publish;

impl Kind for Publish {
    const NAME: &'static str = "publish";
    const COORDINATOR_SIDE: Option<&'static str> = Some(
        "reference loops (raw, idiomatic, core) and the read-back run on the coordinator; jsbench's own publishers are split",
    );
    const COLUMNS: &'static [Column] = &[
        table::VARIANT,
        table::TARGET,
        table::ACHIEVED,
        Column::metric("MB/s", names::PUBLISH.throughput, Show::Decimals(1)),
        table::quantile("pubAck p50", names::PUB_ACK_LATENCY, "p50"),
        table::quantile("p99", names::PUB_ACK_LATENCY, "p99"),
        table::quantile("max", names::PUB_ACK_LATENCY, "max"),
        table::quantile("commit p50", names::BATCH_COMMIT_LATENCY, "p50"),
        table::quantile("p99", names::BATCH_COMMIT_LATENCY, "p99"),
        table::quantile("flow ack p50", names::FAST_ACK_LATENCY, "p50"),
        table::quantile("p99", names::FAST_ACK_LATENCY, "p99"),
        Column::metric("client/msg", names::CLIENT_CPU_PER_MSG, Show::MicrosPerMsg),
        Column::metric("server/msg", names::SERVER_CPU_PER_MSG, Show::MicrosPerMsg),
        Column::new(
            "dups flagged/injected",
            Cell::Counts(&[DUPLICATES_FLAGGED, DUPLICATES_INJECTED], "/"),
        ),
        table::VERDICT,
    ];
    type Plan = Plan;

    fn need(plan: &Plan, common: &CommonPlan) -> Need {
        let fattest = plan
            .rates
            .iter()
            .map(|&r| total_rate(plan, r).map_or(MAX_RATE_ESTIMATE, |r| r as f64))
            .fold(0.0, f64::max);
        Need::paced(fattest, common, &plan.publish, 0)
    }

    fn estimated_duration(plan: &Plan, common: &CommonPlan) -> Duration {
        (common.duration + common.warmup) * plan.variant_count() as u32
    }

    type Group = Group;
    type Shared = ();
    type Variant = Run;
    const COMPARES: bool = true;

    /// Every rate; with `rates = "search"`, a search per msg_id mode.
    fn groups(plan: &Plan) -> Vec<Group> {
        match &plan.search {
            Some(_) => plan.msg_ids.iter().map(|&m| Group::Search(m)).collect(),
            None => plan.rates.iter().map(|&r| Group::Rate(r)).collect(),
        }
    }

    /// At a rate: core first (at `max`), then per msg_id mode the
    /// idiomatic loop, raw before, jsbench's own, raw after, the atomic
    /// batches and the fast-ingest ones. A search's probes and answer are
    /// named `id-<mode>.`.
    fn variants(plan: &Plan, group: &Group) -> Variants<Run> {
        if let (&Group::Search(msg_id), Some(search)) = (group, &plan.search) {
            return Variants::Search {
                search: search.clone(),
                prefix: format!("id-{}.", id_label(msg_id)),
                at: Box::new(move |rate| Run::Own(Rate::PerSecond(rate), msg_id)),
            };
        }
        let rate = match *group {
            Group::Rate(rate) => rate,
            Group::Search(_) => Rate::Max,
        };
        let with = |kind| rate == Rate::Max && plan.reference.contains(&kind);
        let mut list = Vec::new();
        if with(Reference::Core) {
            list.push(Run::Reference(Reference::Core, MsgId::None, ""));
        }
        for &msg_id in &plan.msg_ids {
            if with(Reference::Idiomatic) {
                list.push(Run::Reference(Reference::Idiomatic, msg_id, ""));
            }
            let raw =
                |when| with(Reference::Raw).then_some(Run::Reference(Reference::Raw, msg_id, when));
            list.extend(raw("-before"));
            list.push(Run::Own(rate, msg_id));
            list.extend(raw("-after"));
            list.extend(
                plan.batches
                    .iter()
                    .map(|&size| Run::Batch(rate, msg_id, size)),
            );
            list.extend(
                fast::variants(&plan.fast, rate, msg_id)
                    .into_iter()
                    .map(Run::Fast),
            );
        }
        Variants::List(list)
    }

    fn label(_plan: &Plan, v: &Run) -> String {
        match *v {
            Run::Own(rate, msg_id) => format!("rate-{}.id-{}", rate.label(), id_label(msg_id)),
            Run::Reference(Reference::Core, ..) => format!("rate-{}.core", Rate::Max.label()),
            Run::Reference(kind, msg_id, when) => format!(
                "rate-{}.id-{}.{}{when}",
                Rate::Max.label(),
                id_label(msg_id),
                reference_label(kind)
            ),
            Run::Batch(rate, msg_id, size) => {
                format!("rate-{}.id-{}.batch-{size}", rate.label(), id_label(msg_id))
            }
            Run::Fast(v) => v.name(&v.rate.label(), id_label(v.msg_id)),
        }
    }

    async fn run(
        s: &mut Scope<'_>,
        r: &mut VariantResult,
        plan: &Plan,
        _: &mut (),
        v: &Run,
    ) -> Result<()> {
        match *v {
            Run::Own(rate, msg_id) => run_variant(s, plan, rate, msg_id, r).await,
            Run::Reference(kind, msg_id, _) => reference_variant(s, plan, kind, msg_id, r).await,
            Run::Batch(rate, msg_id, size) => {
                batch::run_variant(s, plan, (rate, msg_id, size), r).await
            }
            Run::Fast(v) => fast::run_variant(s, plan, v, r).await,
        }
    }

    /// Each of jsbench's own variants against the id-less one run before
    /// it at the same rate (the price of dedup) and the reference loops
    /// around it; a variant that failed has no figures to compare.
    fn compare(_plan: &Plan, group: &Group, done: &mut [(Run, VariantResult)]) {
        let Group::Rate(rate) = *group else {
            return;
        };
        let find = |want: &dyn Fn(&Run) -> bool| {
            done.iter()
                .find(|(v, _)| want(v))
                .and_then(|(_, r)| Figures::of(r))
        };
        let core = find(&|v| matches!(v, Run::Reference(Reference::Core, ..)));
        let mut without_id = None;
        let mut sets = Vec::new();
        for (i, (v, r)) in done.iter().enumerate() {
            let Run::Own(_, msg_id) = *v else {
                continue;
            };
            let Some(mine) = Figures::of(r) else {
                continue;
            };
            let reference = |kind, when| {
                find(
                    &|v| matches!(*v, Run::Reference(k, m, w) if k == kind && m == msg_id && w == when),
                )
            };
            let refs = References {
                raw_before: reference(Reference::Raw, "-before"),
                raw_after: reference(Reference::Raw, "-after"),
                idiomatic: reference(Reference::Idiomatic, ""),
                core,
            };
            sets.push((i, mine, msg_id, refs, without_id));
            if msg_id == MsgId::None {
                without_id = Some(mine);
            }
        }
        for (i, mine, msg_id, refs, without_id) in sets {
            ratios(
                &mut done[i].1,
                mine,
                (rate, msg_id),
                without_id.as_ref(),
                &refs,
            );
        }
    }

    /// The price of dedup, and jsbench's publisher against the
    /// reference loops.
    fn lines(v: &dyn super::table::Figures) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(t) = v.value(DEDUP_PRICE_THROUGHPUT) {
            let mut parts = vec![format!("throughput x{t:.2}")];
            let price = [
                (DEDUP_PRICE_P99, "PubAck p99 x", ""),
                (DEDUP_PRICE_CLIENT_CPU, "client CPU ", "us/msg"),
                (DEDUP_PRICE_SERVER_CPU, "server CPU ", "us/msg"),
            ];
            for (name, what, unit) in price {
                if let Some(x) = v.value(name) {
                    let x = if unit.is_empty() {
                        format!("{x:.2}")
                    } else {
                        format!("{x:+.2}")
                    };
                    parts.push(format!("{what}{x}{unit}"));
                }
            }
            lines.push(format!("price of dedup (vs no id): {}", parts.join(", ")));
        }
        let against = [
            (
                VS_RAW_THROUGHPUT,
                "its own path without measurement (raw, before and after)",
            ),
            (VS_IDIOMATIC_THROUGHPUT, "idiomatic async-nats loop"),
            (VS_CORE_THROUGHPUT, "core publish"),
        ];
        for (name, what) in against {
            if let Some(m) = v.value(name) {
                lines.push(format!("jsbench / {what}: {m:.2}x throughput"));
            }
        }
        lines
    }
}

/// The variants that share a rate (and so its comparisons), or one
/// msg_id mode's rate search (`search`, which has no rate of its own).
#[derive(Debug, Clone, Copy)]
pub enum Group {
    Rate(Rate),
    Search(MsgId),
}

/// The shared loop's lone group of a kind that lists none: publish
/// always lists its own.
impl Default for Group {
    fn default() -> Self {
        Group::Rate(Rate::Max)
    }
}

/// One variant: jsbench's own publisher, a reference loop (at `max` only;
/// raw's two runs told apart by `-before` and `-after`), an atomic batch
/// size or a fast-ingest setting.
#[derive(Debug, Clone, Copy)]
pub enum Run {
    Own(Rate, MsgId),
    Reference(Reference, MsgId, &'static str),
    Batch(Rate, MsgId, usize),
    Fast(fast::FastVariant),
}

fn reference_label(kind: Reference) -> &'static str {
    match kind {
        Reference::Raw => "raw",
        Reference::Idiomatic => "idiomatic",
        Reference::Core => "core",
    }
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

/// The params an atomic and a fast-ingest batch variant state alike: one
/// publisher sending batches of one size at `rate`, with `msg_id`.
fn describe_batches(plan: &Plan, mode: &str, (rate, msg_id): (Rate, MsgId), r: &mut VariantResult) {
    let p = &plan.publish;
    r.param("mode", mode);
    r.param("rate", rate.label());
    r.param("rate_per", plan.rate_per);
    r.param("publishers", 1);
    r.param("msg_id", msg_id);
    r.param("message_size", p.message_size.max());
    r.param("pub_ack_timeout", format_duration(p.pub_ack_timeout));
}

/// The stream every publish variant gets: its own subjects, the profile's
/// storage, replicas and duplicate window.
fn stream_config(s: &Scope<'_>, window: Duration) -> stream::Config {
    stream::Config {
        duplicate_window: window,
        ..s.stream_config()
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
    s: &mut Scope<'_>,
    plan: &Plan,
    rate: Rate,
    msg_id: MsgId,
    result: &mut VariantResult,
) -> Result<()> {
    let common = &s.scenario.common;
    describe(common, plan, rate, msg_id, result);
    // Provision.
    let mut publish = plan.publish.clone();
    publish.msg_id = msg_id;
    let config = stream_config(s, publish.duplicate_window);
    let (stream_name, base) = (config.name.clone(), s.names().base);
    s.stream(config).await?;

    // Drive.
    let subjects = (0..publish.subjects)
        .map(|i| format!("{base}.{i}"))
        .collect();
    let label = s.drive_label();
    let mut spec = DriveSpec::publish_only(label, &stream_name, subjects, &publish, common, 0);
    (spec.rate, spec.seed) = (total_rate(plan, rate), 0x9e37_79b9);
    spec.msg_id_prefix = s.msg_id_prefix();
    let outcome = s.drive(&spec).await;
    let stored = s.stored(result, &stream_name).await;
    let read_back = match (&outcome, plan.verify_stored) {
        (Ok(_), true) => {
            let js = s.ctx.provisioner.jetstream();
            Some(readback::read_stream(js, &stream_name, Duration::from_secs(5)).await)
        }
        _ => None,
    };
    let outcome = outcome?;

    // Measure and verify.
    measure(&outcome, total_rate(plan, rate), result);
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
    verify(&outcome, plan, msg_id, stored, reconciliation, result);
    Ok(())
}

/// The target (paced) and the publish rate and throughput reached: every
/// variant reports them alike.
fn publish_rate(r: &mut VariantResult, target: Option<u64>, rate: f64, throughput: f64) {
    if let Some(target) = target {
        r.metric(names::TARGET_RATE, "msg/s", target as f64, Direction::None);
    }
    let pace = rate_and_throughput(names::PUBLISH, rate, throughput);
    r.metrics.extend(pace);
}

/// The read-back's note for a check's evidence when it stopped short.
fn stalled(complete: bool) -> &'static str {
    if complete {
        ""
    } else {
        "; the read-back stalled before the end"
    }
}

/// A batch variant's audit of its read-back and whether that read the
/// stream whole; none when nothing was read, or when the read failed (then
/// each read-back check fails with the reason).
fn audited<A>(
    audited: Option<Result<(A, bool)>>,
    checks: [&str; 2],
    r: &mut VariantResult,
) -> Option<(A, bool)> {
    match audited? {
        Ok(audited) => Some(audited),
        Err(e) => {
            let e = format!("{e:#}");
            for name in checks {
                r.invariants.push(Invariant::check(name, false, e.clone()));
            }
            None
        }
    }
}

/// What each side's CPU cost a message sent, in µs: jsbench's variants,
/// the fast batches and the references report it alike, before the
/// shared client figures (which keep a figure already there).
fn cpu_per_msg(client: Duration, server: Option<Duration>, sent: u64, r: &mut VariantResult) {
    let per = |cpu: Duration| match sent {
        0 => 0.0,
        n => cpu.as_secs_f64() * 1e6 / n as f64,
    };
    let server = server.map(|s| (names::SERVER_CPU_PER_MSG, per(s)));
    for (name, us) in [(names::CLIENT_CPU_PER_MSG, per(client))]
        .into_iter()
        .chain(server)
    {
        r.metric(name, "us", us, Direction::Lower);
    }
}

fn measure(o: &DriveOutcome, target: Option<u64>, r: &mut VariantResult) {
    publish_rate(r, target, o.publish_rate(), o.publish_throughput());
    let acked = o.acked_rate();
    r.metric(PUBLISH_ACKED_RATE, "msg/s", acked, Direction::Higher);
    let (first, last) = o.publish_window();
    let burst = match o.burst_sends() {
        0 => String::new(),
        n => format!("; the PubAck windows' first burst, {n} sends, left out"),
    };
    r.param(
        "publish_rate_window",
        format!(
            "{} sends from {:.1} ms to {:.1} ms after t0 (the warm-up ends at {:.1} ms{burst}), resends apart",
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
        r.metric(SERVER_IN_MSGS_RATE, "msg/s", server, Direction::None);
    }
    let mut recorders = vec![
        (names::PUB_ACK_LATENCY, &o.pub_ack_intended),
        (names::PUB_ACK_LATENCY_ACTUAL, &o.pub_ack_sent),
    ];
    if target.is_some() {
        recorders.push((names::SEND_LAG, &o.send_lag));
    }
    for (name, recorder) in recorders {
        r.latency_kept(name, recorder);
    }
    // What the sends after the warm-up cost: both sides from its end to
    // the end of the drain, over the sends the rate counts and the first
    // burst it leaves out, which that span holds. With workers only the
    // whole span's CPU is known, over every send.
    let (client_cpu, server_cpu, sent) = match o.cpu_after_warmup {
        Some(c) => (
            c.client.total(),
            c.server,
            o.measured_sends() + o.burst_sends(),
        ),
        None => (o.client_cpu.total(), o.server_cpu, o.sent()),
    };
    cpu_per_msg(client_cpu, server_cpu, sent, r);
    super::client_cost::client_figures(o, r);
    let retries = o.sends_sum(|s| s.retries);
    let late = o.sends_sum(|s| s.late_retries);
    r.count(DUPLICATES_INJECTED, retries);
    let resends = o.sends_sum(|s| s.resends);
    if resends > 0 {
        r.count("resends", resends);
    }
    r.count(DUPLICATES_FLAGGED, o.acks_sum(|a| a.duplicates));
    if late > 0 {
        r.count("late_retries", late);
        r.count("late_retries_stored", o.acks_sum(|a| a.late_stored));
    }
    r.ledger = o.counts;
    r.timelines
        .insert(names::PUBLISHED.into(), o.published_timeline.clone());

    if let Some(target) = target {
        r.warnings
            .extend(super::schedule::fell_behind(o, target as f64));
    }
    super::checks::warnings(o, r);
}

/// `msg_id` is the variant's: the profile's `msg_id` may list several.
fn verify(
    o: &DriveOutcome,
    plan: &Plan,
    msg_id: MsgId,
    stored: StreamCount,
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
    // Without ids the server cannot flag a duplicate: the dedup checks
    // do not apply.
    let dedup = |name, actual, expected| with_ids(name, msg_id, actual, expected);
    r.invariants.push(dedup(
        "duplicates flagged = injected",
        o.acks_sum(|a| a.duplicates),
        retries,
    ));
    r.invariants.push(dedup(
        "no retry inside the window stored",
        o.acks_sum(|a| a.retries_stored),
        0,
    ));
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
    r.invariants.push(dedup(
        "no fresh id flagged duplicate",
        o.acks_sum(|a| a.unexpected_duplicates),
        0,
    ));
    let unique = new_stored + late_stored + o.acks_sum(|a| a.retries_stored);
    r.invariants.push(super::checks::count_is(
        "stream count = unique persisted",
        &stored,
        unique,
    ));
    match reconciliation {
        Some(Ok((rec, complete, malformed))) => {
            r.invariants.push(Invariant::check(
                "nothing lost (read back)",
                rec.missing == 0 && complete,
                format!(
                    "{} confirmed copies missing from the stream{}",
                    rec.missing,
                    stalled(complete)
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
            for name in [
                "nothing lost (read back)",
                "nothing stored unconfirmed (read back)",
            ] {
                r.invariants.push(Invariant::not_applicable(name, why));
            }
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
fn ratios(
    r: &mut VariantResult,
    mine: Figures,
    (rate, msg_id): (Rate, MsgId),
    without_id: Option<&Figures>,
    refs: &References,
) {
    let (higher, lower) = (Direction::Higher, Direction::Lower);
    if let (MsgId::Unique, Some(base)) = (msg_id, without_id) {
        r.metrics
            .push(ratio(DEDUP_PRICE_THROUGHPUT, mine.rate, base.rate, higher));
        r.metrics
            .push(ratio(DEDUP_PRICE_P99, mine.p99_us, base.p99_us, lower));
        let client = mine.client_us_per_msg - base.client_us_per_msg;
        r.metric(DEDUP_PRICE_CLIENT_CPU, "us", client, lower);
        if let (Some(m), Some(b)) = (mine.server_us_per_msg, base.server_us_per_msg) {
            r.metric(DEDUP_PRICE_SERVER_CPU, "us", m - b, lower);
        }
    }
    // `vs_<reference>.throughput_ratio` ([`VS_RAW_THROUGHPUT`] ...) and,
    // against the loops a client would run instead, the client's CPU.
    let against = [
        (Reference::Raw, refs.raw()),
        (Reference::Idiomatic, refs.idiomatic),
        (Reference::Core, refs.core),
    ];
    for (kind, theirs) in against {
        let Some(theirs) = theirs else { continue };
        let vs = format!("vs_{}", reference_label(kind));
        let direction = if kind == Reference::Core {
            Direction::None
        } else {
            higher
        };
        r.metrics.push(ratio(
            format!("{vs}.throughput_ratio"),
            mine.rate,
            theirs.rate,
            direction,
        ));
        if kind != Reference::Core {
            let cpu = format!("{vs}.client_cpu_ratio");
            r.metrics.push(ratio(
                cpu,
                mine.client_us_per_msg,
                theirs.client_us_per_msg,
                lower,
            ));
        }
        if kind == Reference::Raw && mine.rate < 0.95 * theirs.rate {
            r.warnings.push(format!(
                "jsbench's publisher reached {:.0}% of its own path without measurement (the raw reference, mean of before and after); its recording costs more than 5% here",
                100.0 * mine.rate / theirs.rate
            ));
        }
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
/// publishers, for the same span: a variant of its own.
async fn reference_variant(
    s: &mut Scope<'_>,
    plan: &Plan,
    kind: Reference,
    msg_id: MsgId,
    result: &mut VariantResult,
) -> Result<()> {
    let (ctx, common) = (s.ctx, &s.scenario.common);
    describe(common, plan, Rate::Max, msg_id, result);
    result.param(
        "publisher",
        match kind {
            Reference::Raw => "jsbench's path without measurement (reference)",
            Reference::Idiomatic => "idiomatic async-nats loop (reference)",
            Reference::Core => "core NATS publish, no stream (reference)",
        },
    );
    let (variant, base) = (s.label(), s.names().base);
    let jetstream = kind != Reference::Core;
    let config = stream_config(s, plan.publish.duplicate_window);
    let stream_name = config.name.clone();
    if jetstream {
        s.stream(config).await?;
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
    let stored = match jetstream {
        true => Some(s.stored(result, &stream_name).await),
        false => None,
    };

    let sent: u64 = reports.iter().map(|r| r.sent).sum();
    let acked: u64 = reports.iter().map(|r| r.acked).sum();
    let errors: u64 = reports.iter().map(|r| r.errors).sum();
    // The same rule as jsbench's publishers: first send to last, and the
    // connections sent side by side from one start.
    let span = reports.iter().map(|r| r.span).max().unwrap_or_default();
    let rate = crate::drive::rate(sent, span);
    publish_rate(result, None, rate, rate * size as f64);
    cpu_per_msg(client_cpu, server_cpu, sent, result);
    result.ledger.published = sent;
    result.ledger.publish_errors = errors;
    for e in reports.iter().filter_map(|r| r.first_error.as_ref()) {
        result.warnings.push(e.clone());
    }
    result
        .invariants
        .push(Invariant::equal("no publish errors", errors, 0));
    if let Some(stored) = &stored {
        result.ledger.persisted = acked;
        result
            .invariants
            .push(Invariant::equal("every publish acknowledged", acked, sent));
        (result.invariants).push(super::checks::count_is(
            "stream count = acknowledged",
            stored,
            acked,
        ));
    }
    Ok(())
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
        ratios(
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

    /// With `msg_id = ["none", "unique"]` the profile's publish plan holds
    /// the first; the unique variant's dedup checks are still its own.
    #[test]
    fn the_variants_msg_id_decides_the_dedup_checks() {
        use crate::scenario::{KindPlan, one_scenario};
        let plan = match one_scenario("publish", "rates = [1000]\nmsg_id = [\"none\", \"unique\"]")
            .unwrap()
            .kind
        {
            KindPlan::Publish(plan) => plan,
            _ => unreachable!("a publish section"),
        };
        let applicable = |msg_id| {
            let mut r = VariantResult::new("t");
            verify(
                &DriveOutcome::settled(0),
                &plan,
                msg_id,
                Ok(0),
                None,
                &mut r,
            );
            let applies = r.invariants.iter().filter(|i| i.applicable);
            applies.map(|i| i.name.clone()).collect::<Vec<_>>()
        };
        let (none, unique) = (applicable(MsgId::None), applicable(MsgId::Unique));
        for name in [
            "duplicates flagged = injected",
            "no retry inside the window stored",
            "no fresh id flagged duplicate",
        ] {
            assert!(!none.iter().any(|n| n == name), "{name}: {none:?}");
            assert!(unique.iter().any(|n| n == name), "{name}: {unique:?}");
        }
    }
}
