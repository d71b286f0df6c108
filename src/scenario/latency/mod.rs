//! `latency`: fixed-rate open-loop publishers and a durable pull consumer
//! with explicit acks; one variant per rate, which makes a
//! latency-versus-throughput curve.
//!
//! Measures end-to-end latency (intended send to receive, and actual send to
//! receive), PubAck latency the same two ways, the generator's own send lag,
//! and achieved against target rate. Verifies that nothing was lost, nothing
//! redelivered, and that the server agrees.

mod hops;
pub mod plan;
mod traced;

use std::time::Duration;

use anyhow::Result;

use super::checks;
use super::recording::with_ids;
use super::table::{self, Column, Figures, Show};
use super::{Field, Kind, Paced, Scope, Variants};
use crate::drive::{ConsumerSpec, DriveOutcome, DriveSpec};
use crate::profile::{CommonPlan, MsgId, format_duration};
use crate::record::metrics::Direction;
use crate::record::names;
use crate::scenario::search::SEARCH_PROBES;
use crate::streams::provision::Need;
use crate::variant::{Invariant, VariantResult};

pub use hops::{DELIVER_LATENCY, INGEST_LATENCY, MEAN_SUM_RATIO};
pub use plan::Plan;
pub use traced::{CLIENT_TO_INGRESS, INGRESS_TO_STORED, ROUTE, SAMPLED, SUM_VS_INGEST};

/// The registry's row for `latency`: end-to-end latency at paced rates.
pub struct Latency;

impl Kind for Latency {
    const NAME: &'static str = "latency";
    const FIGURES: &'static [&'static str] = &[
        INGEST_LATENCY,
        DELIVER_LATENCY,
        CLIENT_TO_INGRESS,
        ROUTE,
        INGRESS_TO_STORED,
    ];
    const RETENTION: bool = true;
    const COLUMNS: &'static [Column] = table::PACED;
    type Plan = Plan;

    fn need(plan: &Plan, common: &CommonPlan) -> Need {
        let fattest = plan.rates.iter().copied().max().unwrap_or(0) as f64;
        Need::paced(
            fattest,
            common,
            &plan.publish,
            plan.consumer.max_ack_pending,
        )
    }

    fn estimated_duration(plan: &Plan, common: &CommonPlan) -> Duration {
        let variants = match plan.search {
            Some(_) => SEARCH_PROBES,
            None => plan.rates.len() * (1 + usize::from(plan.core_baseline)),
        };
        (common.duration + common.warmup) * variants as u32
    }

    const CONSUMER: Option<Field<Plan>> = Some((|p| &p.consumer, |p| &mut p.consumer));

    type Group = ();
    type Shared = ();
    type Variant = Rate;

    /// Each rate, and after it the same rate over core NATS when asked;
    /// or the rates a search picks.
    fn variants(plan: &Plan, _: &()) -> Variants<Rate> {
        if let Some(search) = &plan.search {
            return Variants::Search {
                search: search.clone(),
                prefix: String::new(),
                at: Box::new(|rate| Rate { rate, core: false }),
            };
        }
        let twins = |rate| [false, true].map(|core| Rate { rate, core });
        let core = |v: &Rate| !v.core || plan.core_baseline;
        Variants::List(
            plan.rates
                .iter()
                .flat_map(|&r| twins(r))
                .filter(core)
                .collect(),
        )
    }

    /// `rate-<n>`, or the shape's name when the arrival sets the rate; its
    /// core baseline `core-<n>` or `core-<shape>`.
    fn label(plan: &Plan, v: &Rate) -> String {
        let arrival = &plan.publish.arrival;
        match (v.core, arrival.uses_rate()) {
            (false, true) => format!("rate-{}", v.rate),
            (false, false) => arrival.name().to_string(),
            (true, true) => format!("core-{}", v.rate),
            (true, false) => format!("core-{}", arrival.name()),
        }
    }

    async fn run(
        s: &mut Scope<'_>,
        r: &mut VariantResult,
        plan: &Plan,
        _: &mut (),
        &Rate { rate, core }: &Rate,
    ) -> Result<()> {
        describe(&s.scenario.common, plan, rate, r);
        if core {
            r.param("consumers", 1);
            r.param(
                "transport",
                "core NATS: no stream; the subscriber answers each message",
            );
            return core_variant(s, plan, rate, r).await;
        }
        let reader = ConsumerSpec {
            hops: plan.hops,
            ..ConsumerSpec::acking(String::new(), plan.consumer.clone())
        };
        s.drive_durable(r, Paced::new(rate, &plan.publish, reader), |d, r| {
            measure(&d.outcome, rate, r);
            if plan.hops {
                hops::measure(&d.outcome, r);
            }
            traced::measure(&d.outcome, plan.publish.trace_every, r);
            verify(&d.outcome, plan.publish.msg_id, &d.stored, r);
        })
        .await
    }

    /// Where the time went: every message's split at the server's stored
    /// stamp against its end to end (from the actual send), and the
    /// traced sample's hops against the stamp-based ingest, each with the
    /// ratio that says whether the parts add up.
    fn lines(v: &dyn Figures) -> Vec<String> {
        let p = |name: &str, q: &str| v.shown(&names::quantile(name, q), Show::Us);
        let both = |name: &str| format!("p50 {} p99 {}", p(name, "p50"), p(name, "p99"));
        let mut lines = Vec::new();
        if v.value(&names::quantile(INGEST_LATENCY, "p50")).is_some() {
            lines.push(format!(
                "hops: ingest (send to stored stamp) {}, delivery (stamp to receipt) {}, end to \
                 end from the actual send {}; means' sum / total {}",
                both(INGEST_LATENCY),
                both(DELIVER_LATENCY),
                both(names::E2E_LATENCY_ACTUAL),
                v.shown(MEAN_SUM_RATIO, Show::Decimals(2))
            ));
        }
        if let Some(n) = v.value(SAMPLED).filter(|&n| n > 0.0) {
            let mut parts = vec![format!("client to ingress {}", both(CLIENT_TO_INGRESS))];
            if v.value(&names::quantile(ROUTE, "p50")).is_some() {
                parts.push(format!("route to the leader {}", both(ROUTE)));
            }
            parts.push(format!("ingress to stored {}", both(INGRESS_TO_STORED)));
            lines.push(format!(
                "traced ({n:.0} sampled): {}; means' sum / ingest {}",
                parts.join(", "),
                v.shown(SUM_VS_INGEST, Show::Decimals(2))
            ));
        }
        lines
    }
}

/// A variant: its rate, through a stream or (`core`) over core NATS.
#[derive(Debug, Clone, Copy)]
pub struct Rate {
    rate: u64,
    core: bool,
}

/// The core-NATS baseline at `rate`: the same publishers, stamps and
/// schedule to a subject no stream captures, read by one plain subscriber
/// that answers each message in place of a PubAck
/// ([`crate::consume::core`]). Its "PubAck" latency is that round trip.
async fn core_variant(s: &Scope<'_>, plan: &Plan, rate: u64, r: &mut VariantResult) -> Result<()> {
    // Every subscriber would get every message: one.
    let mut consumer = plan.consumer.clone();
    consumer.consumers = 1;
    let mut spec = DriveSpec::paced(
        s.drive_label(),
        "",
        format!("{}.0", s.names().base),
        &plan.publish,
        &s.scenario.common,
        rate,
        ConsumerSpec::core(consumer),
    );
    spec.msg_id_prefix = s.msg_id_prefix();
    // No stream stores the message, so no server would send a `js` event:
    // tracing is for the JetStream variants.
    spec.publish.trace_every = 0;
    let outcome = s.drive(&spec).await?;
    measure(&outcome, rate, r);
    super::shape::per_step(
        &outcome.e2e_intended,
        (outcome.t0_ns, outcome.record_from_ns),
        true,
        &plan.publish.arrival,
        r,
    );
    verify_core(&outcome, r);
    checks::drive_records(&outcome, None, r);
    Ok(())
}

/// A core variant's checks: core NATS keeps nothing, so a message it
/// dropped is a publish nobody answered, and no stream or durable can be
/// asked.
fn verify_core(o: &DriveOutcome, r: &mut VariantResult) {
    let c = &o.counts;
    r.invariants.push(Invariant::check(
        "every message received once",
        c.publish_errors == 0 && c.persisted == c.published && c.delivered == c.persisted,
        format!(
            "{} sent, {} received, {} answered, {} unanswered or refused",
            c.published, c.delivered, c.persisted, c.publish_errors
        ),
    ));
    r.invariants.push(checks::stamped(o));
    for name in [
        checks::NOTHING_LOST,
        checks::STREAM_HOLDS,
        checks::NOTHING_PENDING,
    ] {
        r.invariants.push(Invariant::not_applicable(
            name,
            "core NATS: no stream, no durable; a dropped message is a publish nobody answered",
        ));
    }
}

fn describe(common: &CommonPlan, plan: &Plan, rate: u64, r: &mut VariantResult) {
    super::shape::describe(rate, &plan.publish.arrival, common, r);
    r.param("warmup", format_duration(common.warmup));
    r.param("publishers", plan.publish.publishers);
    r.param("message_size", plan.publish.message_size.to_string());
    r.param("msg_id", plan.publish.msg_id);
    r.param("pub_ack_window", plan.publish.pub_ack_window);
    r.param("consumers", plan.consumer.consumers);
    r.param("consumer_kind", plan.consumer.kind);
    r.param("ack", plan.consumer.ack);
    r.param("batch", plan.consumer.batch);
    r.param("max_ack_pending", plan.consumer.max_ack_pending);
    r.param("ack_wait", format_duration(plan.consumer.ack_wait));
    r.param("hops", plan.hops);
    if plan.publish.trace_every > 0 {
        r.param("trace_every", plan.publish.trace_every);
    }
}

fn measure(o: &DriveOutcome, rate: u64, r: &mut VariantResult) {
    r.metric(names::TARGET_RATE, "msg/s", rate as f64, Direction::None);
    checks::publishing(o, r);
    let consumed = o.consume_rate();
    r.metric(names::CONSUME.rate, "msg/s", consumed, Direction::Higher);
    r.latency(names::E2E_LATENCY, &o.e2e_intended);
    r.latency(names::E2E_LATENCY_ACTUAL, &o.e2e_sent);
    r.ms("drain_time", o.drain_time.as_nanos() as u64);
    r.warnings
        .extend(super::schedule::fell_behind(o, rate as f64));
}

fn verify(o: &DriveOutcome, msg_id: MsgId, stored: &checks::StreamCount, r: &mut VariantResult) {
    let c = &o.counts;
    r.invariants.push(checks::nothing_lost(o));
    r.invariants.push(checks::nothing_dropped(o));
    r.invariants
        .push(checks::every_publish_persisted(checks::PERSISTED, o));
    r.invariants.push(Invariant::equal(
        "no unexpected redelivery",
        c.redelivered,
        0,
    ));
    let dedup = with_ids("no duplicates flagged", msg_id, c.duplicates, 0);
    r.invariants.push(dedup);
    // Acks sent against deliveries received: two of jsbench's own counts.
    r.invariants
        .push(Invariant::equal("every delivery acked", c.acked, c.delivered).client_side());
    r.invariants.push(checks::stamped(o));
    r.invariants.push(checks::stream_holds(stored, c));
    checks::evictions(o, r);
    checks::refusals(o, r);
    r.invariants.push(checks::nothing_pending(o));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks a real server cannot be made to break on demand, with the
    /// counts forged: jsbench's own acks, and a clean baseline.
    #[test]
    fn an_ack_jsbench_did_not_send_fails_every_delivery_acked() {
        let mut o = DriveOutcome::settled(3);
        o.counts.published = 3;
        o.counts.persisted = 3;
        o.counts.delivered = 3;
        o.counts.acked = 3;
        let failing = |o: &DriveOutcome| {
            let mut r = VariantResult::new("t");
            verify(o, MsgId::Unique, &Ok(3), &mut r);
            r.broken().into_iter().map(String::from).collect::<Vec<_>>()
        };
        assert!(failing(&o).is_empty());
        o.counts.acked = 2;
        assert_eq!(failing(&o), ["every delivery acked"]);
    }
}
