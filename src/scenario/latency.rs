//! `latency`: fixed-rate open-loop publishers and a durable pull consumer
//! with explicit acks; one variant per rate, which makes a
//! latency-versus-throughput curve.
//!
//! Measures end-to-end latency (intended send to receive, and actual send to
//! receive), PubAck latency the same two ways, the generator's own send lag,
//! and achieved against target rate. Verifies that nothing was lost, nothing
//! redelivered, and that the server agrees.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{VariantNames, checks, provision_durable, record_stream};
use crate::drive::RunContext;
use crate::drive::{ConsumerSpec, DriveOutcome, DriveSpec, drive};
use crate::profile::{LatencyPlan, MsgId, ScenarioPlan, format_duration};
use crate::record::metrics::{Direction, Metric, latency_metrics};
use crate::variant::{Invariant, VariantResult, VariantSink};

pub async fn run(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    plan: &LatencyPlan,
    sink: &mut dyn VariantSink,
) -> Result<()> {
    if let Some(search) = &plan.search {
        let probe = async |rate, name| one_variant(ctx, scenario, plan, rate, name, false).await;
        return super::search::run(ctx, scenario, search, "", sink, probe).await;
    }
    for &rate in &plan.rates {
        if ctx.stop.is_cancelled() {
            break;
        }
        let name = variant_name(plan, rate, false);
        sink.record(
            scenario,
            one_variant(ctx, scenario, plan, rate, name, false).await,
        )?;
        if plan.core_baseline && !ctx.stop.is_cancelled() {
            let name = variant_name(plan, rate, true);
            sink.record(
                scenario,
                one_variant(ctx, scenario, plan, rate, name, true).await,
            )?;
        }
    }
    Ok(())
}

/// One variant at `rate`, named `name`, through a stream or (`core`) over
/// core NATS: described, run, its error kept, timed.
async fn one_variant(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    plan: &LatencyPlan,
    rate: u64,
    name: String,
    core: bool,
) -> VariantResult {
    let started = Instant::now();
    let mut result = VariantResult::new(name);
    describe(plan, rate, &mut result);
    let ran = if core {
        result.param("consumers", 1);
        result.param(
            "transport",
            "core NATS: no stream; the subscriber answers each message",
        );
        run_core_variant(ctx, scenario.name(), plan, rate, &mut result).await
    } else {
        run_variant(ctx, scenario.name(), plan, rate, &mut result).await
    };
    if let Err(e) = ran {
        result.error = Some(format!("{e:#}"));
    }
    result.elapsed = started.elapsed();
    result
}

/// The core-NATS baseline at `rate`: the same publishers, stamps and
/// schedule to a subject no stream captures, read by one plain subscriber
/// that answers each message in place of a PubAck
/// ([`crate::consume::core`]). Its "PubAck" latency is that round trip.
async fn run_core_variant(
    ctx: &RunContext,
    scenario: &str,
    plan: &LatencyPlan,
    rate: u64,
    result: &mut VariantResult,
) -> Result<()> {
    let variant = result.name.clone();
    // Every subscriber would get every message: one.
    let mut consumer = plan.consumer.clone();
    consumer.consumers = 1;
    let mut spec = DriveSpec::paced(
        format!("{scenario} {variant}"),
        "",
        format!("{}.0", ctx.names.subject(scenario, &variant)),
        &plan.publish,
        &plan.common,
        rate,
        ConsumerSpec::core(consumer),
    );
    spec.msg_id_prefix = format!("{}-{scenario}-{variant}", ctx.names.token());
    let outcome = drive(ctx, &spec).await?;
    measure(&outcome, rate, result);
    super::shape::per_step(
        &outcome.e2e_intended,
        outcome.t0_ns,
        &plan.publish.arrival,
        result,
    );
    verify_core(&outcome, result);
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
    let malformed: u64 = o.consumers.iter().map(|c| c.malformed).sum();
    r.invariants.push(Invariant::equal(
        "every payload carries its stamp",
        malformed,
        0,
    ));
    r.invariants.push(checks::publishers_finished(o));
    for name in [
        "lost = 0",
        "stream holds every persisted message",
        "server reports nothing pending",
    ] {
        r.invariants.push(Invariant::not_applicable(
            name,
            "core NATS: no stream, no durable; a dropped message is a publish nobody answered",
        ));
    }
}

/// `rate-<n>`, or the shape's name when the arrival sets the rate; its
/// core baseline `core-<n>` or `core-<shape>`.
fn variant_name(plan: &LatencyPlan, rate: u64, core: bool) -> String {
    let arrival = &plan.publish.arrival;
    match (core, arrival.uses_rate()) {
        (false, true) => format!("rate-{rate}"),
        (false, false) => arrival.name().to_string(),
        (true, true) => format!("core-{rate}"),
        (true, false) => format!("core-{}", arrival.name()),
    }
}

fn describe(plan: &LatencyPlan, rate: u64, r: &mut VariantResult) {
    r.param("rate", rate);
    super::shape::describe(&plan.publish.arrival, r);
    r.param("duration", format_duration(plan.common.duration));
    r.param("warmup", format_duration(plan.common.warmup));
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
}

async fn run_variant(
    ctx: &RunContext,
    scenario: &str,
    plan: &LatencyPlan,
    rate: u64,
    result: &mut VariantResult,
) -> Result<()> {
    // Provision.
    let variant = result.name.clone();
    let VariantNames {
        stream: stream_name,
        base,
        durable,
    } = provision_durable(ctx, scenario, &variant, &plan.consumer).await?;

    // Drive.
    let mut spec = DriveSpec::paced(
        format!("{scenario} {variant}"),
        &stream_name,
        format!("{base}.0"),
        &plan.publish,
        &plan.common,
        rate,
        ConsumerSpec::acking(durable, plan.consumer.clone()),
    );
    spec.msg_id_prefix = format!("{}-{scenario}-{variant}", ctx.names.token());
    let outcome = drive(ctx, &spec).await;
    let stored = record_stream(ctx, &stream_name, result).await;
    let deleted = ctx.provisioner.delete_stream(&stream_name).await;
    let outcome = outcome?;

    // Measure and verify.
    measure(&outcome, rate, result);
    super::shape::per_step(
        &outcome.e2e_intended,
        outcome.t0_ns,
        &plan.publish.arrival,
        result,
    );
    verify(&outcome, plan.publish.msg_id, stored, result);
    deleted.context("cleaning up after the variant")?;
    Ok(())
}

fn measure(o: &DriveOutcome, rate: u64, r: &mut VariantResult) {
    let publish_rate = o.publish_rate();
    r.metrics.push(Metric::new(
        "target_rate",
        "msg/s",
        rate as f64,
        Direction::None,
    ));
    r.metrics
        .extend(crate::record::metrics::rate_and_throughput(
            "publish",
            publish_rate,
            o.sent_bytes() as f64 / o.publish_span().as_secs_f64().max(1e-9),
        ));
    r.metrics.push(Metric::new(
        "consume_rate",
        "msg/s",
        o.consume_rate(),
        Direction::Higher,
    ));
    for (name, recorder) in [
        ("e2e_latency", &o.e2e_intended),
        ("e2e_latency_actual", &o.e2e_sent),
        ("pub_ack_latency", &o.pub_ack_intended),
        ("pub_ack_latency_actual", &o.pub_ack_sent),
        ("send_lag", &o.send_lag),
    ] {
        r.metrics.extend(latency_metrics(name, &recorder.summary()));
        r.histograms.push((name.to_string(), recorder.clone()));
    }
    r.metrics.push(Metric::new(
        "drain_time",
        "ms",
        o.drain_time.as_secs_f64() * 1e3,
        Direction::Lower,
    ));
    r.ledger = o.counts;
    checks::server_figures(o, r);
    checks::client_figures(o, r);
    r.timelines
        .insert("published".into(), o.published_timeline.clone());
    r.timelines
        .insert("delivered".into(), o.delivered_timeline.clone());

    let behind = publish_rate < 0.97 * rate as f64 || o.final_lag() > Duration::from_millis(10);
    if behind && !o.interrupted {
        r.warnings.push(format!(
            "the load generator fell behind: achieved {publish_rate:.0} of {rate} msg/s, last message \
             sent {:.1} ms late, send lag p99 {:.0} us; latency from the intended send includes that delay",
            o.final_lag().as_secs_f64() * 1e3,
            o.send_lag.summary().p99_us
        ));
    }
    if o.interrupted {
        r.warnings
            .push("interrupted: the variant stopped early; its counts cover what was sent".into());
    }
    r.warnings.extend(o.errors.iter().cloned());
}

fn verify(o: &DriveOutcome, msg_id: MsgId, stored: Option<u64>, r: &mut VariantResult) {
    let c = &o.counts;
    r.invariants.push(checks::nothing_lost(o));
    r.invariants.push(checks::nothing_dropped_by_client(
        c.client_dropped,
        o.client_drop_cause.as_deref(),
    ));
    r.invariants.push(checks::every_publish_persisted(
        "every publish persisted",
        o,
    ));
    r.invariants.push(Invariant::equal(
        "no unexpected redelivery",
        c.redelivered,
        0,
    ));
    r.invariants.push(if msg_id == MsgId::None {
        Invariant::not_applicable(
            "no duplicates flagged",
            "no Nats-Msg-Id: the server cannot flag a duplicate",
        )
    } else {
        Invariant::equal("no duplicates flagged", c.duplicates, 0)
    });
    // Acks sent against deliveries received: two of jsbench's own counts.
    r.invariants
        .push(Invariant::equal("every delivery acked", c.acked, c.delivered).client_side());
    let malformed: u64 = o.consumers.iter().map(|c| c.malformed).sum();
    r.invariants.push(Invariant::equal(
        "every payload carries its stamp",
        malformed,
        0,
    ));
    r.invariants.push(checks::stream_holds(stored, c));
    checks::evictions(o, r);
    checks::refusals(o, r);
    r.invariants.push(checks::nothing_pending(o));
    r.invariants.push(checks::publishers_finished(o));
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
            verify(o, MsgId::Unique, Some(3), &mut r);
            r.broken().into_iter().map(String::from).collect::<Vec<_>>()
        };
        assert!(failing(&o).is_empty());
        o.counts.acked = 2;
        assert_eq!(failing(&o), ["every delivery acked"]);
    }
}
