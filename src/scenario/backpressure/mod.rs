//! `backpressure`: what MaxAckPending does to a consumer with a given
//! processing time. The same load runs against each MaxAckPending of a
//! sweep; each point reports throughput, latency, ack-pending over time,
//! time spent at the cap, and the efficiency against the Little's-law bound
//! `min(rate, concurrency / processing time, MaxAckPending / processing time)`.
//!
//! An optional second sweep shows the pathology: with a large MaxAckPending
//! a client pulls more than it can work through before AckWait expires, the
//! server redelivers messages still waiting in the client, and work is
//! wasted. Each such expiry is counted, checked to be consistent with an
//! expired deadline, and the AckWait at which they stop is visible.

pub mod plan;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use super::checks;
use super::recording;
use super::table::{self, Cell, Column, Show};
use super::{Field, Kind, Paced, Scope, Variants};
use crate::consume::fates::Analysis;
use crate::drive::{ConsumerSample, DriveOutcome};
use crate::profile::{Action, CommonPlan, ConsumerPlan, format_duration};
use crate::record::metrics::{Direction, ratio};
use crate::record::names;
use crate::streams::provision::Need;
use crate::variant::{Invariant, VariantResult};

pub use plan::Plan;

/// The figures this scenario reports that its table, the charts and
/// report.html read, by name.
/// Completed messages a second, and the Little's-law bound.
pub const THROUGHPUT: &str = "throughput";
pub const BOUND: &str = "bound";
pub const EFFICIENCY: &str = "efficiency";
pub const EFFICIENCY_MEASURED: &str = "efficiency_measured";
pub const TIME_AT_CAP: &str = "time_at_cap";
pub const REDELIVERIES: &str = "redeliveries";
pub const REDELIVERIES_EXPIRED: &str = "redeliveries.expired";

/// The registry's row for `backpressure`: MaxAckPending against Little's law.
pub struct Backpressure;

impl Kind for Backpressure {
    const NAME: &'static str = "backpressure";
    const RETENTION: bool = true;
    const COLUMNS: &'static [Column] = &[
        table::VARIANT,
        Column::param("max_ack_pending", "max_ack_pending"),
        Column::param("ack_wait", "ack_wait"),
        Column::metric("done/s", THROUGHPUT, Show::Rate),
        Column::metric("bound/s", BOUND, Show::Rate),
        Column::metric("efficiency", EFFICIENCY, Show::Percent),
        Column::metric("vs measured", EFFICIENCY_MEASURED, Show::Percent),
        table::quantile("e2e p50", names::E2E_LATENCY, "p50"),
        table::quantile("p99", names::E2E_LATENCY, "p99"),
        Column::metric("at cap", TIME_AT_CAP, Show::Percent),
        Column::new(
            "redelivered (expired)",
            Cell::CountAndPart(REDELIVERIES, REDELIVERIES_EXPIRED),
        ),
        table::VERDICT,
    ];
    type Plan = Plan;

    fn need(plan: &Plan, common: &CommonPlan) -> Need {
        let largest = plan.max_ack_pending.iter().copied().max().unwrap_or(0);
        let expiry = if plan.expiry_ack_waits.is_empty() {
            0
        } else {
            plan.expiry_max_ack_pending
        };
        Need {
            max_ack_pending: largest.max(expiry),
            ..Need::of_load(&plan.load, common)
        }
    }

    fn estimated_duration(plan: &Plan, common: &CommonPlan) -> Duration {
        (common.duration + common.warmup)
            * (plan.max_ack_pending.len() + plan.expiry_ack_waits.len()) as u32
    }

    const CONSUMER: Option<Field<Plan>> = Some((|p| &p.load.consumer, |p| &mut p.load.consumer));

    type Group = ();
    type Shared = ();
    /// A point of the sweeps: its name, and the consumer at its
    /// MaxAckPending and AckWait.
    type Variant = (String, ConsumerPlan);

    /// The MaxAckPending sweep at the consumer's AckWait, then the
    /// AckWait sweep at `expiry_max_ack_pending`.
    fn variants(plan: &Plan, _: &()) -> Variants<(String, ConsumerPlan)> {
        let mut points = Vec::new();
        for &map in &plan.max_ack_pending {
            let mut consumer = plan.load.consumer.clone();
            consumer.max_ack_pending = map;
            points.push((format!("map-{map}"), consumer));
        }
        for &ack_wait in &plan.expiry_ack_waits {
            let mut consumer = plan.load.consumer.clone();
            consumer.max_ack_pending = plan.expiry_max_ack_pending;
            consumer.ack_wait = ack_wait;
            points.push((format!("expiry-{}", format_duration(ack_wait)), consumer));
        }
        Variants::List(points)
    }

    fn label(_plan: &Plan, (name, _): &(String, ConsumerPlan)) -> String {
        name.clone()
    }

    /// The load against the point's MaxAckPending and AckWait.
    async fn run(
        s: &mut Scope<'_>,
        r: &mut VariantResult,
        plan: &Plan,
        _: &mut (),
        (_, consumer): &(String, ConsumerPlan),
    ) -> Result<()> {
        describe(&s.scenario.common, plan, consumer, r);
        checks::server_clock(s.ctx, r);
        let load = &plan.load;
        let behaviour = Arc::new(load.behaviour.clone());
        let reader = recording::observed(consumer, behaviour.clone());
        let paced = Paced::new(load.rate, &load.publish, reader);
        s.drive_durable(r, paced, |d, r| {
            let o = &d.outcome;
            let analysis = checks::fates(o, &behaviour, consumer);
            measure(o, &analysis, plan, consumer, r);
            verify(o, &analysis, &d.stored, r);
        })
        .await
    }
}

fn describe(common: &CommonPlan, plan: &Plan, c: &ConsumerPlan, r: &mut VariantResult) {
    super::shape::describe(plan.load.rate, &plan.load.publish.arrival, common, r);
    r.param("max_ack_pending", c.max_ack_pending);
    r.param("ack_wait", format_duration(c.ack_wait));
    r.param("consumers", c.consumers);
    r.param("batch", c.batch);
    r.param("read", c.kind);
    r.param("processing", plan.load.behaviour.processing.to_string());
    r.param("handlers", plan.load.behaviour.handlers);
    r.param("classes", &plan.load.behaviour.classes);
}

/// Little's law for a consumer: it cannot complete faster than messages
/// arrive, than its handlers can work, or than MaxAckPending slots free up
/// (each slot is held at least for the processing time).
pub fn bound(rate: f64, concurrency: f64, max_ack_pending: f64, processing: Duration) -> f64 {
    let t = processing.as_secs_f64();
    if t <= 0.0 {
        return rate;
    }
    rate.min(concurrency / t).min(max_ack_pending / t)
}

/// A point's figures, by what they are about: its pace against Little's
/// law, its latency, the bound again at the processing time the handlers
/// really took, MaxAckPending's hold on the durable, the redeliveries it
/// caused, the slots delayed naks hold, and how long the drain took.
fn measure(o: &DriveOutcome, a: &Analysis, plan: &Plan, c: &ConsumerPlan, r: &mut VariantResult) {
    let throughput = completion_rate(o, a);
    // The point's pace against Little's law: the rate it was offered, the
    // completions it made, the bound from the planned processing time, and
    // how close it came to it.
    let limit = point_bound(plan, c, plan.load.behaviour.processing.mean());
    checks::publish_rate(o, r);
    r.metric(THROUGHPUT, "msg/s", throughput, Direction::Higher);
    r.metric(BOUND, "msg/s", limit, Direction::None);
    r.metrics
        .push(ratio(EFFICIENCY, throughput, limit, Direction::Higher));
    r.latency_kept(names::E2E_LATENCY, &o.e2e_intended);
    measured_efficiency(o, throughput, plan, c, r);
    ack_pending(&o.samples, c.max_ack_pending as u64, r);
    redeliveries(a, r);
    delayed_nak_slots(plan, r);
    checks::completion_time(o, r);
}

/// Completed messages a second: every acked message over the span from
/// the first delivery to the last, the figure the bound is judged against.
fn completion_rate(o: &DriveOutcome, a: &Analysis) -> f64 {
    let first = o
        .consumers
        .iter()
        .filter(|c| c.first_ns > 0)
        .map(|c| c.first_ns)
        .min();
    let last = o.consumers.iter().map(|c| c.last_ns).max();
    match (first, last) {
        (Some(f), Some(l)) if l > f => {
            a.observed.acked as f64 / Duration::from_nanos(l - f).as_secs_f64()
        }
        _ => 0.0,
    }
}

/// This point's Little's-law bound at a given processing time: the same
/// rate, handlers and MaxAckPending whether the processing time is the
/// planned one or the one measured.
fn point_bound(plan: &Plan, c: &ConsumerPlan, processing: Duration) -> f64 {
    let concurrency = (c.consumers * plan.load.behaviour.handlers) as f64;
    bound(
        plan.load.rate as f64,
        concurrency,
        c.max_ack_pending as f64,
        processing,
    )
}

/// The processing time the handlers really took (a timer sleeps at least
/// as long as asked, often a millisecond more), and the bound and the
/// efficiency from it, so a timer's oversleep does not read as a gap.
fn measured_efficiency(
    o: &DriveOutcome,
    throughput: f64,
    plan: &Plan,
    c: &ConsumerPlan,
    r: &mut VariantResult,
) {
    let mut handled = crate::record::histogram::Recorder::new();
    for e in &o.events {
        handled.record_between(e.received_ns, e.answered_ns);
    }
    let measured = handled.summary();
    r.latency_kept("processing_measured", &handled);
    let limit_measured = point_bound(plan, c, Duration::from_secs_f64(measured.mean_us / 1e6));
    r.metric("bound_measured", "msg/s", limit_measured, Direction::None);
    r.metrics.push(ratio(
        EFFICIENCY_MEASURED,
        throughput,
        limit_measured,
        Direction::Higher,
    ));
}

/// Ack pending over the run, from the consumer info samples: the share
/// of them at the cap, the server's view on average and at most, and the
/// client's messages in flight.
fn ack_pending(samples: &[ConsumerSample], max_ack_pending: u64, r: &mut VariantResult) {
    // Shares and means of no samples are 0.
    let n = samples.len().max(1) as f64;
    let mean = |v: &dyn Fn(&ConsumerSample) -> u64| samples.iter().map(v).sum::<u64>() as f64 / n;
    let at_cap = mean(&|s| u64::from(s.num_ack_pending >= max_ack_pending));
    let (pending, in_flight) = (mean(&|s| s.num_ack_pending), mean(&|s| s.client_in_flight));
    let most = samples.iter().map(|s| s.num_ack_pending).max();
    r.metric(TIME_AT_CAP, "ratio", at_cap, Direction::None);
    r.metric("ack_pending.mean", "count", pending, Direction::None);
    r.count("ack_pending.max", most.unwrap_or(0));
    r.metric("client_in_flight.mean", "count", in_flight, Direction::None);
}

/// Redeliveries by cause: those the behaviour planned (their delays) and
/// the expired ack deadlines, which are the waste, with how long an
/// expired message waited for its answer.
fn redeliveries(a: &Analysis, r: &mut VariantResult) {
    let deliveries = recording::deliveries(a);
    r.count("deliveries", deliveries);
    r.count(REDELIVERIES, deliveries.saturating_sub(a.messages));
    recording::delays(a, r);
    r.count(REDELIVERIES_EXPIRED, a.expiries);
    checks::early_tolerance(a, r);
    r.count("wasted_deliveries", a.unplanned_redeliveries);
    if a.expiries > 0 {
        r.latency_kept("time_to_expired_answer", &a.time_to_expired_answer);
    }
}

/// Messages nak'ed with a delay hold a MaxAckPending slot for the delay:
/// how many slots the behaviour's delayed naks hold on average, when any.
fn delayed_nak_slots(plan: &Plan, r: &mut VariantResult) {
    let held: f64 = plan
        .load
        .behaviour
        .classes
        .iter()
        .flat_map(|class| {
            class
                .script
                .iter()
                .chain(std::iter::once(&class.then))
                .map(move |a| (class, a))
        })
        .filter_map(|(class, action)| match action {
            Action::NakDelay(d) => Some(class.fraction * d.as_secs_f64()),
            _ => None,
        })
        .sum::<f64>()
        * plan.load.rate as f64;
    if held > 0.0 {
        r.metric("slots_held_by_delayed_naks", "count", held, Direction::None);
    }
}

fn verify(o: &DriveOutcome, a: &Analysis, stored: &checks::StreamCount, r: &mut VariantResult) {
    let c = &o.counts;
    r.invariants.push(checks::nothing_lost(o));
    r.invariants.push(checks::nothing_dropped(o));
    r.invariants.push(Invariant::check(
        "every message completed",
        a.outcome_mismatches == 0 && a.observed.acked == a.messages,
        format!(
            "{} of {} acked, {} unfinished",
            a.observed.acked, a.messages, a.observed.unfinished
        ),
    ));
    r.invariants.push(Invariant::check(
        "redeliveries explained",
        a.unplanned_redeliveries == a.expiries && a.early() == 0,
        format!(
            "{} planned by the behaviour, {} expired ack deadlines, {} unexplained, {} early",
            a.delays.values().map(|d| d.measured.count()).sum::<u64>(),
            a.expiries,
            a.unplanned_redeliveries - a.expiries,
            a.early()
        ),
    ));
    r.invariants
        .push(checks::every_publish_persisted(checks::PERSISTED, o));
    r.invariants.push(checks::stream_holds(stored, c));
    r.invariants.push(checks::nothing_pending(o));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_is_the_tightest_of_rate_handlers_and_slots() {
        let ms = Duration::from_millis;
        // 10 ms each: 4 handlers finish 400/s, 2 slots only 200/s.
        assert_eq!(bound(1000.0, 4.0, 2.0, ms(10)), 200.0);
        assert_eq!(bound(1000.0, 4.0, 100.0, ms(10)), 400.0);
        assert_eq!(bound(100.0, 4.0, 100.0, ms(10)), 100.0);
        assert_eq!(
            bound(100.0, 4.0, 1.0, Duration::ZERO),
            100.0,
            "no processing: the rate"
        );
    }
}
