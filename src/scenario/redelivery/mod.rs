//! `redelivery`: what happens when a message fails. Load at a fixed rate;
//! consumers follow a seeded behaviour plan (nak, nak with delay, term,
//! ignore, in-progress, transient and poison failures), so every message's
//! fate and every redelivery delay is known before the run.
//!
//! Measures each redelivery delay against the one configured (AckWait,
//! BackOff[n-1] with its last entry repeating, the nak delay, or none) per
//! cause, the deliveries per message, consumer info over time, and the
//! overhead against the same load all acked (the baseline variant). Checks
//! that every message ends as planned (acked, termed, or exhausted after
//! exactly MaxDeliver deliveries), that the MAX_DELIVERIES and
//! MSG_TERMINATED advisories match, and that nothing is lost.

pub mod plan;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use super::checks;
use super::recording;
use super::table::{self, Cell, Column, Figures, Show};
use super::{Field, Kind, Paced, Scope, Variants, Work};
use crate::consume::fates::Analysis;
use crate::drive::DriveOutcome;
use crate::profile::{BehaviourPlan, CommonPlan, format_duration};
use crate::record::ledger::Event;
use crate::record::metrics::{Direction, Metric, ratio};
use crate::record::names;
use crate::streams::advisory::Advisories;
use crate::streams::provision::Need;
use crate::variant::{Invariant, VariantResult};

pub use plan::Plan;

/// The figures this scenario reports that its table, the charts and
/// report.html read, by name.
pub const DELIVERIES_PER_MESSAGE: &str = "deliveries_per_message";
pub const ADVISORIES_MAX_DELIVERIES: &str = "advisories.max_deliveries";
pub const ADVISORIES_TERMINATED: &str = "advisories.terminated";
/// The plan variant against the all-acked baseline.
pub const OVERHEAD_E2E_P50: &str = "overhead.e2e_p50_ratio";
pub const OVERHEAD_E2E_P99: &str = "overhead.e2e_p99_ratio";
pub const OVERHEAD_DELIVERIES: &str = "overhead.deliveries_ratio";
pub const OVERHEAD_COMPLETION: &str = "overhead.completion_time";

/// The figures the overhead sets against the baseline's.
const E2E: &str = names::E2E_LATENCY;
const COMPLETION_TIME: &str = "completion_time";

/// The registry's row for `redelivery`: what happens when a message fails.
pub struct Redelivery;

impl Kind for Redelivery {
    const NAME: &'static str = "redelivery";
    const RETENTION: bool = true;
    const COLUMNS: &'static [Column] = &[
        table::VARIANT,
        table::ACHIEVED,
        Column::metric("deliveries/msg", DELIVERIES_PER_MESSAGE, Show::Decimals(2)),
        table::quantile("e2e p50", names::E2E_LATENCY, "p50"),
        table::quantile("p99", names::E2E_LATENCY, "p99"),
        Column {
            header: "acked/termed/exhausted",
            cell: Cell::Counts(
                &[
                    checks::OBSERVED_ACKED,
                    checks::OBSERVED_TERMED,
                    checks::OBSERVED_EXHAUSTED,
                ],
                "/",
            ),
        },
        Column::new(
            "advisories",
            Cell::Counts(&[ADVISORIES_MAX_DELIVERIES, ADVISORIES_TERMINATED], "+"),
        ),
        table::LOST,
        table::VERDICT,
    ];
    type Plan = Plan;

    fn need(plan: &Plan, common: &CommonPlan) -> Need {
        Need::of_load(&plan.load, common)
    }

    fn estimated_duration(plan: &Plan, common: &CommonPlan) -> Duration {
        (common.duration + common.warmup) * (1 + u32::from(plan.baseline))
    }

    const CONSUMER: Option<Field<Plan>> = Some((|p| &p.load.consumer, |p| &mut p.load.consumer));

    type Group = ();
    type Shared = ();
    type Variant = Run;
    /// The plan variant's overhead is set against the baseline's figures.
    const COMPARES: bool = true;

    /// The baseline first, when asked, then the plan.
    fn variants(plan: &Plan, _: &()) -> Variants<Run> {
        let baseline = plan.baseline.then_some(Run::Baseline);
        Variants::List(baseline.into_iter().chain([Run::Plan]).collect())
    }

    /// In declaration order.
    fn label(_plan: &Plan, v: &Run) -> String {
        ["baseline", "plan"][*v as usize].into()
    }

    /// The load with the durable's clients following the behaviour (the
    /// baseline's: the same load, processing time and handlers, every
    /// message acked at once), the advisories watched.
    async fn run(
        s: &mut Scope<'_>,
        r: &mut VariantResult,
        plan: &Plan,
        _: &mut (),
        v: &Run,
    ) -> Result<()> {
        let behaviour = match v {
            Run::Baseline => BehaviourPlan {
                classes: Vec::new(),
                ..plan.load.behaviour.clone()
            },
            Run::Plan => plan.load.behaviour.clone(),
        };
        describe(&s.scenario.common, plan, &behaviour, r);
        checks::server_clock(s.ctx, r);
        let load = &plan.load;
        let behaviour = Arc::new(behaviour);
        let reader = recording::observed(&load.consumer, behaviour.clone());
        let paced = Paced {
            advisories: true,
            work: match plan.idempotent {
                true => Work::Idempotent,
                false => Work::Counted,
            },
            ..Paced::new(load.rate, &load.publish, reader)
        };
        s.drive_durable(r, paced, |d, r| {
            let o = &d.outcome;
            let analysis = checks::fates(o, &behaviour, &load.consumer);
            measure(o, &analysis, &d.advisories, r);
            verify(o, &analysis, &d.advisories, &d.stored, r);
        })
        .await
    }

    /// The plan variant's overhead against the baseline: its latency,
    /// deliveries per message and completion time; from a baseline that
    /// ran to its end, into a plan variant that measured them.
    fn compare(_plan: &Plan, _: &(), done: &mut [(Run, VariantResult)]) {
        let [(Run::Baseline, base), (Run::Plan, r)] = done else {
            return;
        };
        let measured = |r: &VariantResult| r.value(DELIVERIES_PER_MESSAGE).is_some();
        if base.error.is_some() || !measured(base) || !measured(r) {
            return;
        }
        // An empty histogram has no percentile metrics: 0, as its summary says.
        let of = |r: &VariantResult, name: &str| r.value(name).unwrap_or(0.0);
        let against =
            |name, figure: &str| ratio(name, of(r, figure), of(base, figure), Direction::Lower);
        let completion = of(r, COMPLETION_TIME) - of(base, COMPLETION_TIME);
        let overhead = [
            against(OVERHEAD_E2E_P50, &format!("{E2E}.p50")),
            against(OVERHEAD_E2E_P99, &format!("{E2E}.p99")),
            against(OVERHEAD_DELIVERIES, DELIVERIES_PER_MESSAGE),
            Metric::new(OVERHEAD_COMPLETION, "ms", completion, Direction::Lower),
        ];
        r.metrics.extend(overhead);
    }

    /// The plan variant's overhead against the baseline, in words.
    fn lines(v: &dyn Figures) -> Vec<String> {
        let (Some(p50), Some(p99), Some(d)) = (
            v.value(OVERHEAD_E2E_P50),
            v.value(OVERHEAD_E2E_P99),
            v.value(OVERHEAD_DELIVERIES),
        ) else {
            return Vec::new();
        };
        vec![format!(
            "overhead vs baseline: deliveries x{d:.2}, e2e p50 x{p50:.2}, p99 x{p99:.2}, completion +{}",
            v.shown(OVERHEAD_COMPLETION, Show::Ms)
        )]
    }
}

/// A variant: the same load all acked (the baseline), or with the
/// consumers following the behaviour plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Run {
    Baseline,
    Plan,
}

fn describe(common: &CommonPlan, plan: &Plan, behaviour: &BehaviourPlan, r: &mut VariantResult) {
    let c = &plan.load.consumer;
    super::shape::describe(plan.load.rate, &plan.load.publish.arrival, common, r);
    r.param("publishers", plan.load.publish.publishers);
    r.param("consumers", c.consumers);
    r.param("read", c.kind);
    r.param("ack_wait", format_duration(c.ack_wait));
    let backoff: Vec<String> = c.backoff.iter().map(|d| format_duration(*d)).collect();
    r.param("backoff", backoff);
    r.param("max_deliver", c.max_deliver);
    r.param("max_ack_pending", c.max_ack_pending);
    r.param("processing", behaviour.processing.to_string());
    r.param("handlers", behaviour.handlers);
    r.param("seed", behaviour.seed);
    r.param("classes", &behaviour.classes);
}

fn measure(o: &DriveOutcome, a: &Analysis, advisories: &Advisories, r: &mut VariantResult) {
    let (published, delivered) = (o.publish_rate(), o.consume_rate());
    r.metric(names::PUBLISH.rate, "msg/s", published, Direction::Higher);
    r.metric(names::DELIVERY_RATE, "msg/s", delivered, Direction::None);
    r.latency_kept(E2E, &o.e2e_intended);
    let deliveries = recording::deliveries(a);
    let per_message = match a.messages {
        0 => 0.0,
        n => deliveries as f64 / n as f64,
    };
    r.metric(
        DELIVERIES_PER_MESSAGE,
        "count",
        per_message,
        Direction::Lower,
    );
    for (n, messages) in &a.delivered_times {
        r.count(format!("messages_delivered_{n}x"), *messages);
    }
    recording::delays(a, r);
    r.count("unplanned_redeliveries", a.unplanned_redeliveries);
    checks::fate_metrics(a, r);
    r.count(
        ADVISORIES_MAX_DELIVERIES,
        advisories.max_deliveries.len() as u64,
    );
    r.count(ADVISORIES_TERMINATED, advisories.terminated.len() as u64);
    r.count("advisories.naked", advisories.naked.len() as u64);
    checks::completion_time(o, r);
}

fn verify(
    o: &DriveOutcome,
    a: &Analysis,
    advisories: &Advisories,
    stored: &checks::StreamCount,
    r: &mut VariantResult,
) {
    let c = &o.counts;
    checks::fate_invariants(o, a, r);
    let early: Vec<String> = a
        .delays
        .iter()
        .filter(|(_, s)| s.early_beyond_tolerance > 0)
        .map(|(cause, s)| {
            format!(
                "{} {} (up to {:.1} ms early)",
                s.early_beyond_tolerance,
                cause.name(),
                s.lateness.min_ns().unsigned_abs() as f64 / 1e6
            )
        })
        .collect();
    let which = match early.is_empty() {
        true => "none".to_string(),
        false => early.join(", "),
    };
    r.invariants.push(Invariant::check(
        "no redelivery earlier than configured",
        early.is_empty(),
        format!(
            "{which} earlier than configured by more than the tolerance ({})",
            a.tolerance.describe()
        ),
    ));
    r.invariants.push(Invariant::equal(
        "no unplanned redelivery",
        a.unplanned_redeliveries,
        0,
    ));
    for (name, advised, observed) in [
        (
            "MAX_DELIVERIES advisories = exhausted",
            &advisories.max_deliveries,
            &a.exhausted,
        ),
        (
            "MSG_TERMINATED advisories = termed",
            &advisories.terminated,
            &a.termed,
        ),
    ] {
        let advised: BTreeSet<u64> = advised.iter().map(|x| x.stream_seq).collect();
        let observed: BTreeSet<u64> = observed.iter().copied().collect();
        let missing = observed.difference(&advised).count();
        let extra = advised.difference(&observed).count();
        r.invariants.push(Invariant::check(
            name,
            missing == 0 && extra == 0,
            format!(
                "{} advisories for {} messages: {missing} missing, {extra} for other messages",
                advised.len(),
                observed.len()
            ),
        ));
    }
    r.invariants
        .push(naks_advised(&o.ledger, &advisories.naked));
    r.invariants.push(term_reasons(&advisories.terminated));
    r.invariants.push(checks::stream_holds(stored, c));
    r.invariants.push(checks::nothing_pending(o));
}

/// Every nak jsbench sent, message by message, against the MSG_NAKED
/// advisories the server sent for it: one each, none for a message never
/// nak'ed.
fn naks_advised(
    ledger: &crate::record::ledger::LedgerShard,
    naked: &[crate::streams::advisory::Advisory],
) -> Invariant {
    let mut advised: BTreeMap<u64, u64> = BTreeMap::new();
    for a in naked {
        *advised.entry(a.stream_seq).or_default() += 1;
    }
    let mut sent_total = 0;
    let (mut fewer, mut more) = (Vec::new(), Vec::new());
    for seq in 1..=ledger
        .max_seq()
        .max(advised.keys().last().copied().unwrap_or(0))
    {
        let sent = u64::from(ledger.count(seq, Event::Naked));
        sent_total += sent;
        let got = advised.get(&seq).copied().unwrap_or(0);
        if got < sent {
            fewer.push(seq);
        } else if got > sent {
            more.push(seq);
        }
    }
    let few = |v: &[u64]| {
        v.iter()
            .take(5)
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    Invariant::check(
        "MSG_NAKED advisories = naks sent",
        fewer.is_empty() && more.is_empty(),
        format!(
            "{} advisories for {sent_total} naks; messages with fewer: {} [{}], with more: {} [{}]",
            naked.len(),
            fewer.len(),
            few(&fewer),
            more.len(),
            few(&more)
        ),
    )
}

/// Every MSG_TERMINATED advisory carries the reason jsbench's term gave.
fn term_reasons(terminated: &[crate::streams::advisory::Advisory]) -> Invariant {
    let other: Vec<&str> = terminated
        .iter()
        .filter(|a| a.reason != crate::consume::TERM_REASON)
        .map(|a| a.reason.as_str())
        .collect();
    if terminated.is_empty() {
        return Invariant::not_applicable(
            "MSG_TERMINATED advisories carry the reason",
            "nothing was termed",
        );
    }
    Invariant::check(
        "MSG_TERMINATED advisories carry the reason",
        other.is_empty(),
        format!(
            "{} of {} carry {:?}; others: {:?}",
            terminated.len() - other.len(),
            terminated.len(),
            crate::consume::TERM_REASON,
            other.iter().take(3).collect::<Vec<_>>()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::streams::advisory::Advisory;

    fn advisory(seq: u64, reason: &str) -> Advisory {
        Advisory {
            stream_seq: seq,
            deliveries: 1,
            received_ns: 0,
            server_ns: None,
            reason: reason.into(),
        }
    }

    /// The nak reconciliation, with the server's side forged: a nak it
    /// never advised, and an advisory for a message jsbench never nak'ed.
    #[test]
    fn a_nak_without_its_advisory_or_an_advisory_without_a_nak_fails() {
        let mut ledger = crate::record::ledger::LedgerShard::new();
        ledger.mark(3, Event::Naked);
        ledger.mark(3, Event::Naked);
        ledger.mark(5, Event::Naked);
        let held = |naked: &[Advisory]| naks_advised(&ledger, naked).passed;
        let all = [advisory(3, ""), advisory(3, ""), advisory(5, "")];
        assert!(held(&all));
        let missing = naks_advised(&ledger, &all[1..]);
        assert!(!missing.passed);
        assert!(
            missing.detail.contains("with fewer: 1 [3]"),
            "{}",
            missing.detail
        );
        let extra = naks_advised(&ledger, &[&all[..], &[advisory(9, "")]].concat());
        assert!(!extra.passed);
        assert!(
            extra.detail.contains("with more: 1 [9]"),
            "{}",
            extra.detail
        );
    }

    /// The plan variant's overhead, from the baseline's figures; none
    /// from a baseline that failed, none into a plan that measured nothing.
    #[test]
    fn the_overhead_is_set_against_a_baseline_that_ran() {
        let text =
            "name = \"t\"\n[[scenario]]\nkind = \"redelivery\"\nduration = \"1s\"\nrate = 10\n";
        let profile = crate::scenario::parse("test", text).unwrap();
        let crate::scenario::KindPlan::Redelivery(plan) = &profile.scenarios[0].kind else {
            unreachable!()
        };
        let measured = |name: &str, p50: f64, per_message: f64, completion: f64| {
            let mut r = VariantResult::new(name);
            for (metric, value) in [
                ("e2e_latency.p50", p50),
                ("e2e_latency.p99", p50 * 2.0),
                (DELIVERIES_PER_MESSAGE, per_message),
                (COMPLETION_TIME, completion),
            ] {
                r.metric(metric, "", value, Direction::Lower);
            }
            r
        };
        let both = || {
            [
                (Run::Baseline, measured("baseline", 100.0, 1.0, 50.0)),
                (Run::Plan, measured("plan", 300.0, 1.5, 80.0)),
            ]
        };
        let mut done = both();
        Redelivery::compare(plan, &(), &mut done);
        let overhead = |r: &VariantResult| {
            [
                OVERHEAD_E2E_P50,
                OVERHEAD_E2E_P99,
                OVERHEAD_DELIVERIES,
                OVERHEAD_COMPLETION,
            ]
            .map(|m| r.value(m))
        };
        assert_eq!(
            overhead(&done[1].1),
            [Some(3.0), Some(3.0), Some(1.5), Some(30.0)]
        );
        assert_eq!(overhead(&done[0].1), [None; 4], "the baseline has none");

        let mut failed = both();
        failed[0].1.error = Some("cleaning up after the variant".into());
        Redelivery::compare(plan, &(), &mut failed);
        assert_eq!(overhead(&failed[1].1), [None; 4]);
        let mut unmeasured = both();
        unmeasured[1].1 = VariantResult::new("plan");
        Redelivery::compare(plan, &(), &mut unmeasured);
        assert_eq!(overhead(&unmeasured[1].1), [None; 4]);
        let mut alone = [(Run::Plan, measured("plan", 300.0, 1.5, 80.0))];
        Redelivery::compare(plan, &(), &mut alone);
        assert_eq!(overhead(&alone[0].1), [None; 4]);
    }

    #[test]
    fn a_term_advised_without_jsbench_reason_fails() {
        let ours = advisory(4, crate::consume::TERM_REASON);
        assert!(term_reasons(std::slice::from_ref(&ours)).passed);
        let theirs = term_reasons(&[ours, advisory(6, "")]);
        assert!(!theirs.passed);
        assert!(theirs.detail.contains("1 of 2"), "{}", theirs.detail);
    }
}
