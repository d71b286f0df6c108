//! One priority variant: provision, drive, measure, verify.

use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::jetstream::consumer::PriorityPolicy;
use futures::future::join_all;
use tokio_util::sync::CancellationToken;

use super::plan::{Plan, PolicyPlan};
use super::verify::{self, Observed};
use super::*;
use crate::consume::group::{GroupClient, GroupClientConfig, GroupDelivery, pin_index};
use crate::drive::{DriveSpec, RunContext, drive_announcing};
use crate::profile::ArrivalPlan;
use crate::record::clock;
use crate::record::metrics::Direction;
use crate::record::names;
use crate::scenario::Scope;
use crate::streams::pins::{self, PinWatch};
use crate::streams::provision::durable_config;
use crate::variant::VariantResult;
use crate::wire::jetstream::next_subject;

/// One variant: the stream and its durable in the plan's priority group,
/// the group clients, the load through the shared drive with the kill
/// and the unpin at their instants, the drain until every persisted
/// message is acked; measure and verify.
pub async fn one(s: &mut Scope<'_>, plan: &Plan, r: &mut VariantResult) -> Result<()> {
    let name = plan.policy().name();
    r.param("policy", name);
    r.param("clients", plan.clients);
    r.param("processing_ms", plan.processing.as_secs_f64() * 1e3);
    crate::scenario::shape::describe_arrival(&plan.load.publish.arrival, r);

    // Provision.
    let n = s.names();
    let stream = s.stream(s.stream_config()).await?;
    let mut config = durable_config(&n.durable, &plan.load.consumer, &n.base);
    config.priority_groups = vec![plan.group.clone()];
    config.priority_policy = match plan.policy {
        PolicyPlan::Pinned(p) => {
            config.priority_timeout = p.priority_timeout;
            PriorityPolicy::PinnedClient
        }
        PolicyPlan::Overflow { .. } => PriorityPolicy::Overflow,
        PolicyPlan::Prioritized { .. } => PriorityPolicy::Prioritized,
    };
    s.durable(&stream, config, plan.load.consumer.pedantic)
        .await?;

    // Drive, measure, verify.
    let observed = drive(s, plan, (&n.stream, &n.durable)).await?;
    judge(plan, &observed, r);
    Ok(())
}

/// The group clients first, then the load, the kill and the unpin at
/// their instants from its schedule's start; the drain until every
/// persisted message is acked.
async fn drive(s: &Scope<'_>, plan: &Plan, (stream, durable): (&str, &str)) -> Result<Observed> {
    let ctx = s.ctx;
    let admin = ctx.provisioner.jetstream().client();
    let watch = match plan.policy {
        PolicyPlan::Pinned(_) => Some(PinWatch::start(&admin, stream, durable).await?),
        _ => None,
    };
    let stop = ctx.stop.child_token();
    // An error on the way stops the clients already started.
    let _stop_on_error = stop.clone().drop_guard();
    let api = ctx.connect.js_api.prefix();
    let mut clients = Vec::new();
    for i in 0..plan.clients {
        let client = ctx
            .connect
            .connect_on(crate::system::runtimes::consume(), &format!("group-{i}"))
            .await?;
        let config = client_config(plan, i, &api, stream, durable);
        clients.push(GroupClient::start(client, config, stop.clone()).await?);
        if i == 0 {
            // The first client takes the pin before the others ask.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let load = &plan.load;
    let mut spec = DriveSpec::publish_only(
        s.drive_label(),
        stream,
        vec![format!("{}.0", s.names().base)],
        &load.publish,
        &s.scenario.common,
        load.rate,
    );
    spec.msg_id_prefix = s.msg_id_prefix();
    let (t0, started) = tokio::sync::watch::channel(None);
    let (outcome, faults) = tokio::join!(
        drive_announcing(ctx, &spec, t0),
        faults(ctx, plan, &clients, started, (&api, stream, durable))
    );
    let o = outcome?;
    let (killed, unpin_ns) = faults?;
    let publish_rate = o
        .sends
        .iter()
        .map(|sends| {
            let span = sends.last_sent_ns.saturating_sub(sends.first_sent_ns) as f64 / 1e9;
            sends.sent as f64 / span.max(1e-9)
        })
        .sum();
    let acked = o.acks.iter().map(|a| a.acked).sum();
    drain(&clients, acked, s.scenario.common.drain_timeout, &ctx.stop).await;
    stop.cancel();
    let mut observed = Observed {
        ledger: o.ledger,
        killed,
        unpin_ns,
        t0_ns: o.t0_ns,
        publish_rate,
        ..Observed::default()
    };
    collect(clients, &mut observed).await?;
    if let Some(w) = watch {
        observed.events = w.finish().await?;
    }
    if let Some(e) = o.errors.first() {
        anyhow::bail!("publishing failed: {e}");
    }
    Ok(observed)
}

fn client_config(
    plan: &Plan,
    index: usize,
    api: &str,
    stream: &str,
    durable: &str,
) -> GroupClientConfig {
    let (min_pending, min_ack_pending, priority) = match &plan.policy {
        PolicyPlan::Overflow {
            min_pending,
            min_ack_pending,
            overflow_clients,
        } if index >= plan.clients - overflow_clients => (*min_pending, *min_ack_pending, 0),
        PolicyPlan::Prioritized { levels } => (0, 0, levels[index]),
        _ => (0, 0, 0),
    };
    GroupClientConfig {
        index,
        subject: next_subject(api, stream, durable),
        group: plan.group.clone(),
        batch: plan.load.consumer.batch,
        expires: plan.expires,
        min_pending,
        min_ack_pending,
        priority,
        processing: plan.processing,
        pinned: matches!(plan.policy, PolicyPlan::Pinned(_)),
    }
}

/// Kills the pinned client (the one that received last: only the pinned
/// one receives) and calls the unpin API, each at its time from `t0_ns`.
async fn faults(
    ctx: &RunContext,
    plan: &Plan,
    clients: &[GroupClient],
    mut started: tokio::sync::watch::Receiver<Option<u64>>,
    (api, stream, durable): (&str, &str, &str),
) -> Result<(Option<(usize, u64)>, Option<u64>)> {
    let PolicyPlan::Pinned(p) = plan.policy else {
        return Ok((None, None));
    };
    // The drive says when its schedule starts; a drive that failed first
    // says nothing, and nothing is struck.
    let Ok(t0) = started.wait_for(Option::is_some).await else {
        return Ok((None, None));
    };
    let t0_ns = t0.unwrap_or_default();
    let mut steps = vec![(p.kill_after, true)];
    steps.extend(p.unpin_after.map(|u| (u, false)));
    steps.sort();
    let (mut killed, mut unpin_ns) = (None, None);
    for (after, kill) in steps {
        let at = clock::instant_at(t0_ns + after.as_nanos() as u64);
        tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
        if ctx.stop.is_cancelled() {
            break;
        }
        if kill {
            let (i, c) = clients
                .iter()
                .enumerate()
                .max_by_key(|(_, c)| c.progress.last_received_ns.load(Ordering::Relaxed))
                .context("no client to kill")?;
            c.kill();
            killed = Some((i, clock::now_ns()));
        } else {
            let admin = ctx.provisioner.jetstream().client();
            unpin_ns = Some(clock::now_ns());
            pins::unpin(&admin, api, stream, durable, &plan.group).await?;
        }
    }
    Ok((killed, unpin_ns))
}

/// Waits until the clients acked as many messages as were persisted (the
/// killed client's share returns after AckWait), or the drain timeout.
async fn drain(
    clients: &[GroupClient],
    persisted: u64,
    timeout: Duration,
    stop: &CancellationToken,
) {
    let deadline = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < deadline && !stop.is_cancelled() {
        let acked: u64 = clients
            .iter()
            .map(|c| c.progress.acked.load(Ordering::Relaxed))
            .sum();
        if acked >= persisted {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Merges the clients' reports; each client's pin indices become indices
/// into one table of every pin seen.
async fn collect(clients: Vec<GroupClient>, o: &mut Observed) -> Result<()> {
    let mut all_pins: Vec<String> = Vec::new();
    for report in join_all(clients.into_iter().map(GroupClient::finish)).await {
        let report = report?;
        if let Some(s) = &report.first_status {
            anyhow::bail!("a group client's pull failed: {s}");
        }
        let global: Vec<u16> = (report.pins.iter())
            .map(|p| pin_index(&mut all_pins, p))
            .collect();
        o.deliveries
            .extend(report.deliveries.iter().map(|d| GroupDelivery {
                pin: d.pin.map(|p| global[p as usize]),
                ..*d
            }));
        o.pulls.extend(report.pulls);
        o.ledger.merge(&report.ledger);
        o.wrong_pin += report.wrong_pin;
    }
    Ok(())
}

/// Measures what the clients observed and checks it, policy by policy.
fn judge(plan: &Plan, o: &Observed, r: &mut VariantResult) {
    r.metric(
        names::PUBLISH.rate,
        "msg/s",
        o.publish_rate,
        Direction::Higher,
    );
    r.count(DELIVERIES, o.deliveries.len() as u64);
    r.ledger = o.ledger.counts();
    for c in 0..plan.clients {
        let n = o.deliveries.iter().filter(|d| d.client == c).count();
        r.count(format!("client{c}.deliveries"), n as u64);
    }
    r.invariants
        .push(verify::nothing_lost(&o.ledger, &o.deliveries));
    let arrival = &plan.load.publish.arrival;
    match &plan.policy {
        PolicyPlan::Pinned(p) => pinned(p.priority_timeout, o, r),
        PolicyPlan::Overflow {
            min_pending,
            min_ack_pending,
            overflow_clients,
        } => {
            let regular = plan.clients - overflow_clients;
            measure_overflow(*min_pending, regular, arrival, o, r);
            let overflow = |c| c >= regular;
            let (pending, ack_pending) = (*min_pending, *min_ack_pending);
            let check = verify::overflow_threshold(&o.deliveries, overflow, pending, ack_pending);
            r.invariants.push(check);
        }
        PolicyPlan::Prioritized { levels } => prioritized(levels, plan.expires, arrival, o, r),
    }
}

fn pinned(timeout: Duration, o: &Observed, r: &mut VariantResult) {
    r.param("priority_timeout_ms", timeout.as_secs_f64() * 1e3);
    let outside = verify::outside_pin(&o.deliveries).len() as u64;
    r.count(OUTSIDE_PIN, outside);
    let (explained, unexplained) = verify::doubles(&o.deliveries, o.killed);
    r.count(
        DOUBLE_DELIVERIES,
        (explained.len() + unexplained.len()) as u64,
    );
    r.count("wrong_pin_answers", o.wrong_pin);
    // What the killed client held came back with a delivery count above 1.
    let returned = o.deliveries.iter().filter(|d| d.delivered > 1).count();
    r.count("redelivered", returned as u64);
    if let Some((client, kill_ns)) = o.killed
        && let Some((pinned_ns, _)) = verify::next_pin(&o.events, kill_ns)
    {
        let failover = pinned_ns - kill_ns;
        r.ms(FAILOVER_TIME, failover);
        if let Some(last) = verify::last_pull_before(&o.pulls, client, kill_ns) {
            let after = pinned_ns.saturating_sub(last);
            r.ms(FAILOVER_AFTER_LAST_PULL, after);
            r.metric(
                "failover_over_priority_timeout",
                "ratio",
                after as f64 / timeout.as_nanos() as f64,
                Direction::None,
            );
        }
    }
    if let Some(unpin_ns) = o.unpin_ns
        && let Some((pinned_ns, _)) = verify::next_pin(&o.events, unpin_ns)
    {
        r.ms(UNPIN_TO_NEW_PIN, pinned_ns - unpin_ns);
    }
    r.invariants.push(verify::within_pin(&o.deliveries));
    r.invariants
        .push(verify::doubles_explained(&o.deliveries, o.killed));
    r.invariants.push(verify::pin_moves_after_kill(o));
    let timeout_ns = timeout.as_nanos() as u64;
    r.invariants.push(verify::no_early_failover(o, timeout_ns));
    r.invariants.push(verify::pin_moves_after_unpin(o));
}

/// The share of deliveries `chosen` took, overall and per step: the step
/// a delivery's message was intended in (the last one past its end).
fn shares(
    name: &str,
    arrival: &ArrivalPlan,
    o: &Observed,
    chosen: impl Fn(&GroupDelivery) -> bool,
    r: &mut VariantResult,
) {
    let steps = match arrival {
        ArrivalPlan::Steps(steps) => &steps[..],
        _ => &[],
    };
    // (deliveries, chosen ones): overall, then step by step.
    let mut tally = vec![(0u64, 0u64); 1 + steps.len()];
    for d in &o.deliveries {
        let mut end = o.t0_ns;
        let step = (steps.iter()).position(|(_, length)| {
            end += length.as_nanos() as u64;
            d.intended_ns < end
        });
        let step = step.unwrap_or(steps.len().saturating_sub(1));
        for i in [0]
            .into_iter()
            .chain((!steps.is_empty()).then_some(1 + step))
        {
            tally[i].0 += 1;
            tally[i].1 += u64::from(chosen(d));
        }
    }
    for (i, &(all, hit)) in tally.iter().enumerate().filter(|(_, t)| t.0 > 0) {
        let share = hit as f64 / all as f64;
        match i {
            // The highest level's share falls when the server hands lower
            // levels what the highest could take: judged, higher is better.
            0 if name == LEVEL0_SHARE => r.metric(name, "ratio", share, Direction::Higher),
            0 => r.metric(name, "ratio", share, Direction::None),
            _ => r.metric(format!("step{i}.{name}"), "ratio", share, Direction::None),
        }
    }
}

fn measure_overflow(
    min_pending: u64,
    regular: usize,
    arrival: &ArrivalPlan,
    o: &Observed,
    r: &mut VariantResult,
) {
    let mut ordered: Vec<&GroupDelivery> = o.deliveries.iter().collect();
    ordered.sort_by_key(|d| d.consumer_seq);
    let first = ordered.iter().find(|d| d.client >= regular);
    let last = ordered.iter().rev().find(|d| d.client >= regular);
    if let Some(f) = first {
        r.metric(
            OVERFLOW_ONSET_PENDING,
            "messages",
            (f.pending + 1) as f64,
            Direction::Lower,
        );
        if min_pending > 0
            && let Some(crossing) = ordered.iter().find(|d| d.pending + 1 >= min_pending)
        {
            r.ms(
                OVERFLOW_ONSET_DELAY,
                f.received_ns.saturating_sub(crossing.received_ns),
            );
        }
    }
    if let Some(l) = last {
        r.metric(
            OVERFLOW_LAST_PENDING,
            "messages",
            (l.pending + 1) as f64,
            Direction::None,
        );
    }
    shares(OVERFLOW_SHARE, arrival, o, |d| d.client >= regular, r);
}

fn prioritized(
    levels: &[u8],
    expires: Duration,
    arrival: &ArrivalPlan,
    o: &Observed,
    r: &mut VariantResult,
) {
    let mut distinct: Vec<u8> = levels.to_vec();
    distinct.sort();
    distinct.dedup();
    for (rank, level) in distinct.iter().enumerate() {
        let name = format!("level{rank}_share");
        r.param(&format!("level{rank}"), level);
        shares(&name, arrival, o, |d| levels[d.client] == *level, r);
    }
    let found = verify::inversions(&o.deliveries, &o.pulls, levels, expires).len() as u64;
    r.count(INVERSIONS, found);
    r.invariants.push(verify::priority_order(
        &o.deliveries,
        &o.pulls,
        levels,
        expires,
    ));
}
