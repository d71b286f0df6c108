//! `ack`: what acknowledging costs a consumer. One stream is filled once;
//! a fresh durable per ack mode (none, all, explicit, double) and read mode
//! (consume, fetch) reads all of it as fast as it can, side by side in one
//! run. Double ack waits for the server to confirm each ack, so its round
//! trip is measured too.

pub mod plan;

use std::time::Duration;

use anyhow::{Context, Result, bail};
use async_nats::jetstream::stream;

use super::checks;
use super::table::{self, Column, Show};
use super::{Field, Kind, Scope, Variants};
use crate::consume::reference::{self, ReferenceConfig, ReferenceReport};
use crate::drive::{ConsumerSpec, DriveOutcome, DriveSpec};
use crate::profile::{AckPolicy, CommonPlan, ConsumerKind, ConsumerPlan};
use crate::record::ledger::{Event, LedgerCounts, SeqSet};
use crate::record::metrics::{Direction, rate_and_throughput};
use crate::record::names;
use crate::streams::provision::{Need, PER_MESSAGE_OVERHEAD, durable_config};
use crate::variant::{Invariant, VariantResult};

pub use plan::{AckMode, ConsumeReference, Plan};
use plan::{Pass, passes};

/// The figures this scenario reports that its table, the charts and
/// report.html read, by name.
/// The double ack's round trip, a histogram.
pub const DOUBLE_ACK_RTT: &str = "double_ack_rtt";
/// An ack mode's consume rate against explicit acks'.
pub const VS_EXPLICIT_THROUGHPUT: &str = "vs_explicit.throughput_ratio";

/// The registry's row for `ack`: what acknowledging costs a consumer.
pub struct Ack;

impl Kind for Ack {
    const NAME: &'static str = "ack";
    const FIGURES: &'static [&'static str] = &[DOUBLE_ACK_RTT];
    const COLUMNS: &'static [Column] = &[
        table::VARIANT,
        Column::metric("consumed/s", names::CONSUME.rate, Show::Rate),
        Column::metric("MB/s", names::CONSUME.throughput, Show::Decimals(1)),
        Column::metric("vs explicit", VS_EXPLICIT_THROUGHPUT, Show::Times(2)),
        table::quantile("double-ack p50", DOUBLE_ACK_RTT, "p50"),
        table::quantile("p99", DOUBLE_ACK_RTT, "p99"),
        table::LOST,
        table::VERDICT,
    ];
    type Plan = Plan;

    fn need(plan: &Plan, _common: &CommonPlan) -> Need {
        let bytes = plan.messages * (plan.message_size as u64 + PER_MESSAGE_OVERHEAD);
        Need {
            streams: 1,
            // Every variant's durable lives until the scenario's stream goes.
            consumers: plan.variant_count(),
            bytes,
            total_bytes: bytes,
            max_ack_pending: plan.consumer.max_ack_pending,
        }
    }

    fn estimated_duration(plan: &Plan, _common: &CommonPlan) -> Duration {
        // Count-based: about 100k messages a second, plus the fill.
        let each = Duration::from_secs_f64(plan.messages as f64 / 100_000.0);
        each * (plan.variant_count() as u32 + 1)
    }

    const CONSUMER: Option<Field<Plan>> = Some((|p| &p.consumer, |p| &mut p.consumer));

    type Group = ();
    /// The filled stream, once set up.
    type Shared = Option<Filled>;
    type Variant = Read;
    const COMPARES: bool = true;

    fn setup_label(_plan: &Plan, _: &()) -> String {
        "fill".into()
    }

    /// Publishes the messages every variant reads, as fast as the server
    /// takes them. Reads go by the sequences the fill's PubAcks name, so a
    /// retried publish is no reason to fail it
    /// ([`checks::filled_in_order`] would).
    async fn setup(
        s: &mut Scope<'_>,
        _: &mut VariantResult,
        plan: &Plan,
        _: &(),
    ) -> Result<Option<Filled>> {
        let names = s.names();
        let stream = s.stream(s.stream_config()).await?;
        let spec = DriveSpec::fill(
            s.drive_label(),
            &names.stream,
            vec![format!("{}.0", names.base)],
            (plan.messages, plan.message_size),
            s.scenario.common.drain_timeout,
        );
        let fill = s.drive(&spec).await?;
        let stored = fill.counts.persisted;
        if stored != plan.messages || !fill.errors.is_empty() {
            bail!(
                "filling the stream stored {stored} of {} messages: {}",
                plan.messages,
                fill.errors.join("; ")
            );
        }
        let ledger = &fill.ledger;
        Ok(Some(Filled {
            stream,
            name: names.stream,
            base: names.base,
            due: (1..=ledger.max_seq())
                .filter(|&seq| ledger.count(seq, Event::Persisted) > 0)
                .collect(),
            published: fill.counts.published,
        }))
    }

    /// Per read mode, every ack mode in both passes ([`passes`]), the
    /// references around their paired run.
    fn variants(plan: &Plan, _: &()) -> Variants<Read> {
        let mut list = Vec::new();
        for &read in &plan.reads {
            for (mode, pass) in passes(&plan.modes) {
                let references: &[ConsumeReference] = match paired(read, mode, pass) {
                    true => &plan.reference,
                    false => &[],
                };
                let around = |when| move |&kind| Read::Reference(kind, when);
                list.extend(references.iter().map(around("before")));
                list.push(Read::Mine(read, mode, pass));
                list.extend(references.iter().rev().map(around("after")));
            }
        }
        Variants::List(list)
    }

    fn label(_plan: &Plan, v: &Read) -> String {
        match *v {
            Read::Mine(read, mode, pass) => {
                let suffix = match pass {
                    Pass::Listed => "",
                    Pass::Reversed => ".reversed",
                };
                format!("{}.{}{suffix}", read_label(read), mode.label())
            }
            Read::Reference(kind, when) => format!("consume.explicit.{}-{when}", kind.label()),
        }
    }

    async fn run(
        s: &mut Scope<'_>,
        r: &mut VariantResult,
        plan: &Plan,
        filled: &mut Option<Filled>,
        v: &Read,
    ) -> Result<()> {
        let filled = filled.as_ref().context("the stream was never filled")?;
        match *v {
            Read::Mine(read, mode, _) => consume_variant(s, plan, filled, (read, mode), r).await,
            Read::Reference(kind, _) => reference_variant(s, plan, filled, kind, r).await,
        }
    }

    /// Each run keeps its own rate; a mode's `vs_explicit` ratio, on its
    /// listed-order run, is the mean of its two rates over the mean of
    /// explicit's two; the paired run's `vs_<reference>` ratios are over
    /// the mean of each reference's runs before and after it.
    fn compare(_plan: &Plan, _: &(), done: &mut [(Read, VariantResult)]) {
        let rate = |r: &VariantResult| r.value(names::CONSUME.rate).filter(|_| r.error.is_none());
        let mut modes = Rates::<(ConsumerKind, AckMode)>::default();
        let mut references = Rates::<ConsumeReference>::default();
        for (v, r) in done.iter() {
            match *v {
                Read::Mine(read, mode, _) => modes.note((read, mode), rate(r)),
                Read::Reference(kind, _) => references.note(kind, rate(r)),
            }
        }
        for (v, r) in done.iter_mut() {
            let Read::Mine(read, mode, pass) = *v else {
                continue;
            };
            if paired(read, mode, pass)
                && let Some(rate) = rate(r)
            {
                references.compare(rate, r);
            }
            if pass == Pass::Listed
                && mode != AckMode::Explicit
                && let Some(ratio) = modes.vs_explicit(read, mode)
            {
                r.metric(VS_EXPLICIT_THROUGHPUT, "ratio", ratio, Direction::None);
            }
        }
    }
}

/// What the fill left for every read: the stream, and which of its
/// sequences the fill's PubAcks confirmed.
pub struct Filled {
    stream: stream::Stream,
    name: String,
    base: String,
    /// What every read must deliver: the fill's PubAcks and the read's
    /// deliveries in one ledger, so the never-seen messages are told the
    /// server's or the client's.
    due: SeqSet,
    published: u64,
}

/// One read of the filled stream: jsbench's consumer in a read and ack
/// mode on one pass, or a reference loop before or after jsbench's paired
/// run.
#[derive(Debug, Clone, Copy)]
pub enum Read {
    Mine(ConsumerKind, AckMode, Pass),
    Reference(ConsumeReference, &'static str),
}

/// The references pair with the listed-order explicit-ack consume: before
/// it in the profile's order, after it in reverse, so each one's mean sits
/// on jsbench's run and a drift over them cancels.
fn paired(read: ConsumerKind, mode: AckMode, pass: Pass) -> bool {
    read == ConsumerKind::Pull && mode == AckMode::Explicit && pass == Pass::Listed
}

fn read_label(read: ConsumerKind) -> &'static str {
    match read {
        ConsumerKind::Pull => "consume",
        ConsumerKind::Fetch => "fetch",
        ConsumerKind::Push => "push",
    }
}

impl Rates<(ConsumerKind, AckMode)> {
    /// `mode`'s mean rate over explicit acks' mean rate, in one read mode.
    fn vs_explicit(&self, read: ConsumerKind, mode: AckMode) -> Option<f64> {
        Some(self.mean((read, mode))? / self.mean((read, AckMode::Explicit))?)
    }
}

/// A fresh durable over the filled stream from its start, named for the
/// variant: jsbench's variants and the references each read on one of
/// their own.
async fn durable(s: &mut Scope<'_>, filled: &Filled, consumer: &ConsumerPlan) -> Result<String> {
    let durable = s.names().durable;
    let config = durable_config(&durable, consumer, &filled.base);
    s.durable(&filled.stream, config, consumer.pedantic).await?;
    Ok(durable)
}

/// The consumer a read uses, the scenario's own in its read and ack
/// mode, and the params every read states: what it read and how.
fn reading(
    plan: &Plan,
    (read, mode): (ConsumerKind, AckMode),
    r: &mut VariantResult,
) -> ConsumerPlan {
    r.param("messages", plan.messages);
    r.param("message_size", plan.message_size);
    r.param("read", read_label(read));
    r.param("ack", mode.label());
    ConsumerPlan {
        kind: read,
        ack: match mode {
            AckMode::None => AckPolicy::None,
            AckMode::All => AckPolicy::All,
            AckMode::Explicit | AckMode::Double => AckPolicy::Explicit,
        },
        double_ack: mode == AckMode::Double,
        ..plan.consumer.clone()
    }
}

async fn consume_variant(
    s: &mut Scope<'_>,
    plan: &Plan,
    filled: &Filled,
    (read, mode): (ConsumerKind, AckMode),
    r: &mut VariantResult,
) -> Result<()> {
    let consumer_plan = reading(plan, (read, mode), r);
    r.param("batch", plan.consumer.batch);
    r.param("ack_every", plan.consumer.ack_every);
    r.param("consumers", plan.consumer.consumers);
    let durable = durable(s, filled, &consumer_plan).await?;

    // Drive: read everything the fill stored.
    let spec = DriveSpec::consume_only(
        s.drive_label(),
        filled.name.clone(),
        ConsumerSpec::acking(durable, consumer_plan),
        filled.due.clone(),
        s.scenario.common.drain_timeout,
    );
    let outcome = s.drive(&spec).await?;

    // Measure.
    consume_figures(outcome.consume_rate(), plan.message_size, r);
    if mode == AckMode::Double {
        r.latency_kept(DOUBLE_ACK_RTT, &outcome.ack_rtt);
    }
    let mut counts = outcome.counts;
    counts.published = filled.published;
    r.ledger = counts;
    r.timelines
        .insert(names::DELIVERED.into(), outcome.delivered_timeline.clone());
    r.warnings.extend(outcome.errors.iter().cloned());
    checks::server_figures(&outcome, r);
    super::client_cost::client_figures(&outcome, r);
    verify(&outcome, mode, r);
    Ok(())
}

/// The rates read by each of several loops (reference loops, or ack
/// modes), each run twice around a point (before and after jsbench's
/// explicit-ack consume; in the listed order and reversed).
#[derive(Debug)]
struct Rates<K> {
    runs: Vec<(K, f64)>,
}

impl<K> Default for Rates<K> {
    fn default() -> Self {
        Rates { runs: Vec::new() }
    }
}

impl<K: PartialEq + Copy> Rates<K> {
    /// A run that failed has no rate, and leaves the mean to the other.
    fn note(&mut self, kind: K, rate: Option<f64>) {
        if let Some(rate) = rate.filter(|r| *r > 0.0) {
            self.runs.push((kind, rate));
        }
    }

    /// The mean of `kind`'s runs.
    fn mean(&self, kind: K) -> Option<f64> {
        let rates: Vec<f64> = self
            .runs
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, r)| *r)
            .collect();
        (!rates.is_empty()).then(|| rates.iter().sum::<f64>() / rates.len() as f64)
    }
}

impl Rates<ConsumeReference> {
    /// `vs_<reference>.consume_ratio` on jsbench's variant, and a warning
    /// when jsbench's consumer reads slower than the raw loop: then its
    /// own recording, not the server, sets the rate it reports.
    fn compare(&self, mine: f64, r: &mut VariantResult) {
        for kind in [ConsumeReference::Raw, ConsumeReference::Idiomatic] {
            let Some(theirs) = self.mean(kind) else {
                continue;
            };
            r.metric(
                format!("vs_{}.consume_ratio", kind.label()),
                "ratio",
                mine / theirs,
                Direction::Higher,
            );
            if kind == ConsumeReference::Raw && mine < theirs {
                r.warnings.push(format!(
                    "jsbench's consumer read {:.0}% as fast as the raw consume loop (mean of before and after): \
                     its own work, not the server, limits the consume rate measured here",
                    100.0 * mine / theirs
                ));
            }
        }
    }
}

/// The rate a variant read at, in messages and in bytes: jsbench's
/// variants and the references report it alike.
fn consume_figures(rate: f64, message_size: usize, r: &mut VariantResult) {
    let pace = rate_and_throughput(names::CONSUME, rate, rate * message_size as f64);
    r.metrics.extend(pace);
}

/// A reference loop on a fresh durable over the filled stream, recorded as
/// a variant of its own.
async fn reference_variant(
    s: &mut Scope<'_>,
    plan: &Plan,
    filled: &Filled,
    kind: ConsumeReference,
    r: &mut VariantResult,
) -> Result<()> {
    let consumer_plan = reading(plan, (ConsumerKind::Pull, AckMode::Explicit), r);
    r.param(
        "consumer",
        match kind {
            ConsumeReference::Idiomatic => "consumer.messages() and ack().await (reference)",
            ConsumeReference::Raw => "raw pull requests and +ACK publishes (reference)",
        },
    );
    if kind == ConsumeReference::Raw {
        r.param("batch", plan.consumer.batch);
    }
    let durable = durable(s, filled, &consumer_plan).await?;
    let ctx = s.ctx;
    let client = ctx
        .connect
        .connect(&format!("reference-consume-{}", kind.label()))
        .await?;
    let config = ReferenceConfig {
        stream: filled.name.clone(),
        durable,
        js_api_prefix: ctx.connect.js_api.prefix(),
        messages: plan.messages,
        batch: plan.consumer.batch,
        idle: s.scenario.common.drain_timeout,
        read_at_most: None,
    };
    let stop = ctx.stop.child_token();
    let client_cpu = crate::system::cpu::ClientCpu::now();
    let server_cpu = ctx.server_cpu.start();
    let report = match kind {
        ConsumeReference::Idiomatic => reference::idiomatic(client, config, stop).await,
        ConsumeReference::Raw => reference::raw(client, config, stop).await,
    }
    .with_context(|| format!("the {} consume reference", kind.label()))?;
    // The loop runs on the run's own runtime: the whole process is its.
    let client = crate::system::cpu::ClientCpu::since(client_cpu).total();
    let split = super::client_cost::CpuSplit {
        client,
        publisher: None,
        consumer: Some(client),
        server: server_cpu.stop(),
    };
    super::client_cost::cpu_per_message(&split, report.seen, r);
    consume_figures(reference_rate(&report), plan.message_size, r);
    r.ledger = LedgerCounts {
        published: plan.messages,
        persisted: plan.messages,
        delivered: report.seen,
        deliveries: report.received,
        redeliveries: report.duplicates,
        acked: report.acked,
        lost: plan.messages.saturating_sub(report.seen),
        ..LedgerCounts::default()
    };
    if let Some(e) = &report.first_error {
        r.warnings
            .push(format!("{} errors; the first: {e}", report.errors));
    }
    r.invariants
        .extend(reference_invariants(&report, plan.messages));
    Ok(())
}

/// The rule jsbench's consume rate follows
/// ([`crate::drive::DriveOutcome::consume_rate`]): every delivery, first
/// to last.
fn reference_rate(report: &ReferenceReport) -> f64 {
    crate::drive::rate(
        report.received,
        Duration::from_nanos(report.last_ns.saturating_sub(report.first_ns)),
    )
}

/// What a reference must show for its rate to mean anything: it read the
/// whole stream, each message once, and acked what it read. Public so a
/// test can judge a reference made to lose messages.
pub fn reference_invariants(report: &ReferenceReport, messages: u64) -> Vec<Invariant> {
    let once = report.seen == messages && report.duplicates == 0;
    vec![
        Invariant::check(
            "every message read once",
            once,
            format!(
                "{} of {messages} messages read, {} read again",
                report.seen, report.duplicates
            ),
        ),
        Invariant::equal("every delivery acked", report.acked, report.received).client_side(),
    ]
}

/// The read's checks: its counts hold the fill's PubAcks (the drive
/// marked its sequences persisted) and the read's deliveries.
fn verify(o: &DriveOutcome, mode: AckMode, r: &mut VariantResult) {
    let c = &o.counts;
    r.invariants.push(checks::nothing_lost(o));
    r.invariants.push(checks::nothing_dropped(o));
    r.invariants
        .push(Invariant::equal("no redelivery", c.redelivered, 0));
    if matches!(mode, AckMode::Explicit | AckMode::Double) {
        // Acks sent against deliveries received: jsbench's own counts.
        r.invariants
            .push(Invariant::equal("every delivery acked", c.acked, c.delivered).client_side());
    }
    r.invariants.push(checks::nothing_pending(o));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_modes_run_in_the_listed_order_then_reversed() {
        use AckMode::*;
        let listed = [None, All, Explicit, Double];
        let order: Vec<(AckMode, Pass)> = passes(&listed);
        let (first, second): (Vec<_>, Vec<_>) = order.iter().partition(|(_, p)| *p == Pass::Listed);
        let modes = |v: Vec<&(AckMode, Pass)>| v.into_iter().map(|(m, _)| *m).collect::<Vec<_>>();
        assert_eq!(modes(first), listed);
        assert_eq!(modes(second), [Double, Explicit, All, None]);
        // Every mode's two runs centre on the same position.
        for mode in listed {
            let at: usize = order
                .iter()
                .enumerate()
                .filter(|(_, (m, _))| *m == mode)
                .map(|(i, _)| i)
                .sum();
            assert_eq!(at, 7, "{mode:?}");
        }
        assert_eq!(passes(&[Explicit]), [(Explicit, Pass::Listed)]);
    }

    #[test]
    fn a_mode_is_compared_with_explicit_by_the_means_of_their_runs() {
        use ConsumerKind::{Fetch, Pull};
        let mut rates = Rates::<(ConsumerKind, AckMode)>::default();
        rates.note((Pull, AckMode::Explicit), Some(100.0));
        rates.note((Pull, AckMode::None), Some(300.0));
        rates.note((Pull, AckMode::None), Some(100.0));
        rates.note((Pull, AckMode::Explicit), Some(300.0));
        assert_eq!(rates.vs_explicit(Pull, AckMode::None), Some(1.0));
        // A failed run leaves the mean to the other.
        rates.note((Pull, AckMode::All), None);
        rates.note((Pull, AckMode::All), Some(400.0));
        assert_eq!(rates.vs_explicit(Pull, AckMode::All), Some(2.0));
        assert_eq!(rates.vs_explicit(Pull, AckMode::Double), None);
        // Each read mode against its own explicit acks.
        rates.note((Fetch, AckMode::None), Some(50.0));
        assert_eq!(rates.vs_explicit(Fetch, AckMode::None), None);
        rates.note((Fetch, AckMode::Explicit), Some(100.0));
        assert_eq!(rates.vs_explicit(Fetch, AckMode::None), Some(0.5));
    }

    /// jsbench's own ack count is the only witness of "every delivery
    /// acked": a real server cannot make jsbench skip an ack, so the counts
    /// are forged.
    #[test]
    fn an_ack_jsbench_did_not_send_fails_every_delivery_acked() {
        let clean = LedgerCounts {
            persisted: 3,
            delivered: 3,
            deliveries: 3,
            acked: 3,
            ..Default::default()
        };
        let check = |counts: &LedgerCounts, mode| {
            let mut o = DriveOutcome::settled(3);
            o.counts = *counts;
            let mut r = VariantResult::new("t");
            verify(&o, mode, &mut r);
            r
        };
        assert!(check(&clean, AckMode::Explicit).broken().is_empty());
        let short = LedgerCounts { acked: 2, ..clean };
        let failed = check(&short, AckMode::Double);
        assert_eq!(failed.broken(), ["every delivery acked"]);
        assert!(failed.invariants.iter().any(|i| i.client_side && !i.passed));
        // With AckPolicy none or all, jsbench acks no delivery one by one.
        assert!(
            !check(&short, AckMode::All)
                .invariants
                .iter()
                .any(|i| i.name == "every delivery acked")
        );
    }
}
