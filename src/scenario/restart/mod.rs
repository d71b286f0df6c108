//! `restart`: a server jsbench started is killed with SIGKILL under load
//! (file storage) and started again on its store; in a local cluster the
//! node leading the stream can be the one killed. Publishers send with
//! unique Nats-Msg-Ids and resend any message whose PubAck is overdue, as a
//! careful publisher would; the stream's deduplication keeps the resends
//! from being stored twice.
//!
//! Measures the outage as publishers and consumers saw it, the time from
//! the restart to the first PubAck, the leader election gap, and the
//! resends (and whether each found its original stored). Verifies, reading
//! the stream back, that every message that got a PubAck is still there,
//! that nothing was stored twice, and that consumers lost nothing.

pub mod plan;

use std::time::Duration;

use anyhow::Result;

use super::checks;
use super::recording;
use super::table::{self, Cell, Column, Show};
use super::{Field, Kind, Paced, Scope, Variants};
use crate::drive::{ConsumerSpec, DriveOutcome, FaultPlan, RunContext};
use crate::profile::{CommonPlan, FaultKind, format_duration};
use crate::record::metrics::Direction;
use crate::record::names;
use crate::streams::provision::Need;
use crate::streams::readback::ReadBack;
use crate::variant::{Invariant, VariantResult};

pub use plan::Plan;

/// The figures this scenario reports that its table, the charts and
/// report.html read, by name.
/// The node the fault hit (a parameter).
pub const KILLED_NODE: &str = "killed_node";
/// The longest gap the publishers and the consumers saw, ms.
pub const OUTAGE_PUBLISH: &str = "outage.publish";
pub const OUTAGE_CONSUME: &str = "outage.consume";
pub const ELECTION_GAP: &str = "election_gap";
/// From the node back (restarted, or its routes healed) to the first PubAck, ms.
pub const ACKS_RESUMED_AFTER_RESTART: &str = "acks_resumed_after_restart";
pub const ACKS_RESUMED_AFTER_HEAL: &str = "acks_resumed_after_heal";
pub const RESENDS: &str = "resends";
pub const RESENDS_FOUND_STORED: &str = "resends_found_stored";

/// The registry's row for `restart`: a server killed (or cut off) and back.
pub struct Restart;

impl Kind for Restart {
    const NAME: &'static str = "restart";
    const COORDINATOR_SIDE: Option<&'static str> =
        Some("the whole load runs on the coordinator: it kills and restarts a server it started");
    const COLUMNS: &'static [Column] = &[
        table::VARIANT,
        Column::param("faulted", KILLED_NODE),
        Column::metric("outage pub", OUTAGE_PUBLISH, Show::Ms),
        Column::metric("outage consume", OUTAGE_CONSUME, Show::Ms),
        Column::metric("election", ELECTION_GAP, Show::Ms),
        Column {
            // After the restart, or after a route fault's heal.
            header: "acks after back",
            cell: Cell::FirstOf(
                &[ACKS_RESUMED_AFTER_RESTART, ACKS_RESUMED_AFTER_HEAL],
                Show::Ms,
            ),
        },
        Column::new(
            "resends (found stored)",
            Cell::CountAndPart(RESENDS, RESENDS_FOUND_STORED),
        ),
        table::quantile("pubAck p99", names::PUB_ACK_LATENCY, "p99"),
        table::LOST,
        table::VERDICT,
    ];
    type Plan = Plan;

    fn need(plan: &Plan, common: &CommonPlan) -> Need {
        Need::of_load(&plan.load, common)
    }

    fn estimated_duration(_plan: &Plan, common: &CommonPlan) -> Duration {
        common.duration + common.warmup
    }

    const CONSUMER: Option<Field<Plan>> = Some((|p| &p.load.consumer, |p| &mut p.load.consumer));

    fn faults(plan: &Plan) -> Option<FaultKind> {
        Some(plan.fault)
    }

    type Group = ();
    type Shared = ();
    /// One variant: the plan's fault at its node.
    type Variant = ();

    fn variants(_plan: &Plan, _: &()) -> Variants<()> {
        Variants::List(vec![()])
    }

    /// `<fault>-<node>`, as the profile spells them: `kill-leader`.
    fn label(plan: &Plan, _: &()) -> String {
        let word = |v| match v {
            Ok(serde_json::Value::String(s)) => s,
            _ => String::new(),
        };
        let fault = word(serde_json::to_value(plan.fault));
        format!("{fault}-{}", word(serde_json::to_value(plan.node)))
    }

    /// The load with the kill (or the route fault) and the restart, the
    /// stream read back afterwards.
    async fn run(
        s: &mut Scope<'_>,
        r: &mut VariantResult,
        plan: &Plan,
        _: &mut (),
        _: &(),
    ) -> Result<()> {
        let ctx = s.ctx;
        describe(ctx, &s.scenario.common, plan, r);
        if ctx.faults.is_none() {
            anyhow::bail!(
                "the restart scenario kills servers, so it runs only on servers jsbench starts itself \
                 (the embedded server or --cluster), never on one given with --server"
            );
        }
        let load = &plan.load;
        let reader = ConsumerSpec {
            sample_every: Some(recording::SAMPLE_EVERY),
            ..ConsumerSpec::acking(String::new(), load.consumer.clone())
        };
        let paced = Paced {
            read_back: true,
            fault: Some(FaultPlan {
                after: plan.kill_after,
                node: plan.node,
                down_for: plan.down_for,
                kind: plan.fault,
            }),
            ..Paced::new(load.rate, &load.publish, reader)
        };
        s.drive_durable(r, paced, |d, r| {
            measure(ctx, &d.outcome, r);
            verify(&d.outcome, d.read.as_ref(), r);
        })
        .await
    }
}

fn describe(ctx: &RunContext, common: &CommonPlan, plan: &Plan, r: &mut VariantResult) {
    r.param("fault", plan.fault);
    super::shape::describe(plan.load.rate, &plan.load.publish.arrival, common, r);
    r.param("kill_after", format_duration(plan.kill_after));
    r.param("down_for", format_duration(plan.down_for));
    r.param("node", plan.node);
    r.param("replicas", ctx.server.replicas);
    r.param(
        "resend_after",
        plan.load.publish.resend_after.map(format_duration),
    );
    r.param("ack_wait", format_duration(plan.load.consumer.ack_wait));
}

fn measure(ctx: &RunContext, o: &DriveOutcome, r: &mut VariantResult) {
    // Distinct messages over the schedule's span: resends are counted apart.
    checks::publish_rate(o, r);
    // From each message's first intended send: a message resent through
    // the outage carries the outage in its latency.
    for (name, recorder) in [
        (names::E2E_LATENCY, &o.e2e_intended),
        (names::PUB_ACK_LATENCY, &o.pub_ack_intended),
    ] {
        r.latency_kept(name, recorder);
    }
    // Latencies taken at a later delivery: the first went to a client that
    // never saw it. These are the fault's slowest messages.
    r.count("e2e_latency.from_later_delivery", o.late_first_latencies);
    let publish_gap = o.acks.iter().map(|a| a.max_gap_ns).max().unwrap_or(0);
    let consume_gap = o.consumers.iter().map(|c| c.max_gap_ns).max().unwrap_or(0);
    r.ms(OUTAGE_PUBLISH, publish_gap);
    r.ms(OUTAGE_CONSUME, consume_gap);
    if let Some(f) = &o.fault {
        r.param(KILLED_NODE, &f.node);
        // Which node each client was attached to: a client on the faulted
        // node is cut off with it, which the outages show.
        let clients = o.sends.len() + o.consumers.len();
        let on: std::collections::BTreeMap<String, String> =
            ctx.connect.attached(clients).into_iter().collect();
        r.param("clients_on", on);
        // A kill ends at the restart; a route fault when the routes are
        // let through again.
        let (end, acks_resumed) = if f.kind.is_route() {
            ("heal", ACKS_RESUMED_AFTER_HEAL)
        } else {
            ("restart", ACKS_RESUMED_AFTER_RESTART)
        };
        let down_ms = f.restarted_ns.saturating_sub(f.killed_ns) as f64 / 1e6;
        r.metric(format!("{end}_time"), "ms", down_ms, Direction::None);
        // The first PubAck after the restart, from the publishers' view of
        // the gap: it ended when PubAcks resumed.
        let resumed = o.acks.iter().map(|a| a.max_gap_end_ns).max().unwrap_or(0);
        if resumed > f.restarted_ns {
            r.ms(acks_resumed, resumed - f.restarted_ns);
        }
        // The clients' side of the outage: connections that dropped with
        // the node and when the last of them was back.
        let links = ctx.connect.link_events();
        let since_kill = |times: &[u64]| -> Vec<u64> {
            times
                .iter()
                .copied()
                .filter(|&t| t >= f.killed_ns)
                .collect()
        };
        let dropped = since_kill(&links.disconnected_ns).len();
        r.count("connections_dropped", dropped as u64);
        if let Some(back) = since_kill(&links.connected_ns).into_iter().max() {
            r.ms("reconnected_after_kill", back - f.killed_ns);
            if back > f.restarted_ns {
                r.ms(format!("reconnected_after_{end}"), back - f.restarted_ns);
            }
        }
        if let Some(gap) = f.election_gap {
            let gap_ms = gap.as_secs_f64() * 1e3;
            r.metric(ELECTION_GAP, "ms", gap_ms, Direction::Lower);
        }
        if f.leader_before.is_some() || f.leader_after.is_some() {
            r.param("leader_before", &f.leader_before);
            r.param("leader_after", &f.leader_after);
        }
    }
    r.count(RESENDS, o.sends_sum(|s| s.resends));
    r.count("resends_stored", o.acks_sum(|a| a.resent_stored));
    r.count(RESENDS_FOUND_STORED, o.acks_sum(|a| a.resent_duplicates));
    r.count("late_pub_acks", o.acks_sum(|a| a.late_responses));
    r.count("redelivered", o.counts.redelivered);
    checks::completion_time(o, r);
}

fn verify(o: &DriveOutcome, read: Option<&ReadBack>, r: &mut VariantResult) {
    let c = &o.counts;
    let Some(read) = read else {
        r.invariants.push(Invariant::check(
            SURVIVED,
            false,
            "the stream was not read back",
        ));
        return;
    };
    let rec = read.reconcile_sequences(&o.ledger);
    r.invariants.push(Invariant::check(
        SURVIVED,
        rec.missing == 0 && read.complete,
        format!(
            "{} confirmed messages missing after the restart ({} read back{})",
            rec.missing,
            read.messages,
            if read.complete {
                ""
            } else {
                ", the read-back stalled"
            }
        ),
    ));
    r.invariants.push(Invariant::equal(
        "no message stored twice",
        read.stored_twice(),
        0,
    ));
    r.invariants.push(Invariant::check(
        "every stored message confirmed",
        rec.unconfirmed == 0,
        format!(
            "{} messages stored without any PubAck naming them",
            rec.unconfirmed
        ),
    ));
    r.invariants.push(Invariant::check(
        "every publish answered",
        c.publish_errors == 0,
        format!(
            "{} PubAck errors or timeouts after resends",
            c.publish_errors
        ),
    ));
    r.invariants.push(checks::nothing_lost(o));
    r.invariants.push(checks::nothing_dropped(o));
    r.invariants.push(fault_happened(o));
    r.invariants.push(checks::nothing_pending(o));
}

/// Every message a PubAck confirmed is still stored after the fault.
const SURVIVED: &str = "every PubAcked message survived the restart";

/// The planned fault happened and ended: the node was killed and came
/// back, or its routes were cut (or paused) and let through again.
fn fault_happened(o: &DriveOutcome) -> Invariant {
    let route = o.fault.as_ref().is_some_and(|f| f.kind.is_route());
    let name = if route {
        "the node's routes were cut and healed"
    } else {
        "the server was killed and came back"
    };
    Invariant::check(
        name,
        o.fault
            .as_ref()
            .is_some_and(|f| f.restarted_ns > f.killed_ns),
        o.fault
            .as_ref()
            .map_or("the fault never happened".into(), |f| {
                format!("node {}", f.node)
            }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drive::FaultOutcome;
    use crate::record::ledger::Event;

    /// Three messages confirmed and read back after a kill and a restart.
    fn clean() -> (DriveOutcome, ReadBack) {
        let mut o = DriveOutcome::settled(3);
        for seq in 1..=3 {
            o.ledger.mark(seq, Event::Persisted);
        }
        o.fault = Some(FaultOutcome {
            node: "n1".into(),
            kind: Default::default(),
            killed_ns: 10,
            restarted_ns: 20,
            leader_before: None,
            leader_after: None,
            election_gap: None,
        });
        let read = ReadBack {
            messages: 3,
            by_origin: vec![vec![1, 1, 1]],
            malformed: 0,
            complete: true,
            present: vec![false, true, true, true],
            ..Default::default()
        };
        (o, read)
    }

    fn failing(o: &DriveOutcome, read: &ReadBack) -> Vec<String> {
        let mut r = VariantResult::new("t");
        verify(o, Some(read), &mut r);
        r.broken().into_iter().map(String::from).collect()
    }

    /// Each survival check fails on the fault it is for and on nothing
    /// else: this scenario refuses servers it did not start, so no
    /// saboteur can reach its stream; the read-backs are forged.
    #[test]
    fn each_survival_check_fails_on_its_own_fault() {
        let (o, read) = clean();
        assert!(failing(&o, &read).is_empty());

        let (o, mut read) = clean();
        read.present[2] = false;
        assert_eq!(
            failing(&o, &read),
            ["every PubAcked message survived the restart"]
        );
        let (o, mut read) = clean();
        read.complete = false;
        assert_eq!(
            failing(&o, &read),
            ["every PubAcked message survived the restart"]
        );

        let (o, mut read) = clean();
        read.by_origin[0][1] = 2;
        assert_eq!(failing(&o, &read), ["no message stored twice"]);

        let (o, mut read) = clean();
        read.present.push(true);
        assert_eq!(failing(&o, &read), ["every stored message confirmed"]);

        let (mut o, read) = clean();
        o.counts.publish_errors = 1;
        assert_eq!(failing(&o, &read), ["every publish answered"]);

        let (mut o, read) = clean();
        o.fault = None;
        assert_eq!(failing(&o, &read), ["the server was killed and came back"]);
        let (mut o, read) = clean();
        o.fault.as_mut().unwrap().restarted_ns = 5;
        assert_eq!(failing(&o, &read), ["the server was killed and came back"]);
        // A route fault that never healed.
        let (mut o, read) = clean();
        let f = o.fault.as_mut().unwrap();
        f.kind = crate::profile::FaultKind::Cut;
        f.restarted_ns = 0;
        assert_eq!(
            failing(&o, &read),
            ["the node's routes were cut and healed"]
        );
    }
}
