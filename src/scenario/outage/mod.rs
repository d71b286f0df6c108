//! `outage`: the consumer's downstream dependency goes down for a while
//! under a steady load, and the consumer rides it out one of two ways the
//! source articles describe, one variant each:
//!
//! - `pause`: the durable is paused (`pause_until` the outage's end) as
//!   soon as the outage begins; what the handlers already hold is left
//!   unanswered, so its ack deadlines run on while the durable is paused.
//! - `nak_delay`: the consumer keeps pulling and naks every delivery with
//!   a delay of `retry` until the dependency is back.
//!
//! Measures what each costs: deliveries and redeliveries during the
//! outage, how soon deliveries resume after it, how long the backlog it
//! left takes to drain, and how late the messages stored during it end.
//! Verifies that nothing is lost, every message is acked once in the end,
//! nothing is left pending, and (pause) that nothing was delivered while
//! the durable was paused.

pub mod plan;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use super::checks;
use super::recording;
use super::table::{self, Column};
use super::{Field, Kind, Paced, Scope, Variants};
use crate::consume::events::DeliveryEvent;
use crate::drive::{ConsumerSpec, DriveOutcome, OutagePlan, PauseOutcome};
use crate::profile::{Action, CommonPlan, format_duration};
use crate::record::histogram::Recorder;
use crate::record::metrics::Direction;
use crate::record::names;
use crate::streams::provision::Need;
use crate::variant::{Invariant, VariantResult};

pub use plan::{OutagePattern, Plan};

/// How long after the server answered the pause a delivery may still
/// arrive: it left the server before the pause (on the wire, or in the
/// client's buffer behind the handlers).
pub const PAUSE_GRACE: Duration = Duration::from_millis(100);

/// The registry's row for `outage`: a dependency down under steady load.
pub struct Outage;

impl Kind for Outage {
    const NAME: &'static str = "outage";
    const COLUMNS: &'static [Column] = table::PACED;
    type Plan = Plan;

    fn need(plan: &Plan, common: &CommonPlan) -> Need {
        Need::of_load(&plan.load, common)
    }

    fn estimated_duration(plan: &Plan, common: &CommonPlan) -> Duration {
        (common.duration + common.warmup) * plan.patterns.len() as u32
    }

    const CONSUMER: Option<Field<Plan>> = Some((|p| &p.load.consumer, |p| &mut p.load.consumer));

    type Group = ();
    type Shared = ();
    type Variant = OutagePattern;

    fn variants(plan: &Plan, _: &()) -> Variants<OutagePattern> {
        Variants::List(plan.patterns.clone())
    }

    fn label(_plan: &Plan, pattern: &OutagePattern) -> String {
        pattern.label().to_string()
    }

    /// The load, with the handlers seeing the dependency down for the
    /// outage (and, paused, the durable paused for it).
    async fn run(
        s: &mut Scope<'_>,
        r: &mut VariantResult,
        plan: &Plan,
        _: &mut (),
        &pattern: &OutagePattern,
    ) -> Result<()> {
        describe(&s.scenario.common, plan, pattern, r);
        // The outage's messages are told by their store times, and their
        // delay runs from them: the server's clock beside jsbench's.
        checks::server_clock(s.ctx, r);
        let load = &plan.load;
        let reader = ConsumerSpec {
            outage: Some(plan_for(plan, pattern)),
            ..recording::observed(&load.consumer, Arc::new(load.behaviour.clone()))
        };
        let paced = Paced::new(load.rate, &load.publish, reader);
        s.drive_durable(r, paced, |d, r| {
            let o = &d.outcome;
            let start = o.t0_ns + plan.after.as_nanos() as u64;
            let window = Window {
                start,
                end: start + plan.lasts.as_nanos() as u64,
                ack_wait: load.consumer.ack_wait,
            };
            let figures = Figures::of(&o.events, &window, o.pause.as_ref());
            measure(o, &figures, &window, load.rate, r);
            verify(o, &figures, pattern, &d.stored, r);
        })
        .await
    }
}

fn describe(common: &CommonPlan, plan: &Plan, pattern: OutagePattern, r: &mut VariantResult) {
    let c = &plan.load.consumer;
    r.param("pattern", pattern.label());
    super::shape::describe(plan.load.rate, &plan.load.publish.arrival, common, r);
    r.param("warmup", format_duration(common.warmup));
    r.param("outage_after", format_duration(plan.after));
    r.param("outage_lasts", format_duration(plan.lasts));
    if pattern == OutagePattern::NakDelay {
        r.param("retry", format_duration(plan.retry));
    }
    r.param("ack_wait", format_duration(c.ack_wait));
    r.param("max_ack_pending", c.max_ack_pending);
    r.param("consumers", c.consumers);
    r.param("read", c.kind);
}

/// What the handlers answer during the outage under each pattern.
fn plan_for(plan: &Plan, pattern: OutagePattern) -> OutagePlan {
    OutagePlan {
        after: plan.after,
        lasts: plan.lasts,
        answer: match pattern {
            // Left unanswered: the dependency is down and the durable is
            // paused; the ack deadline brings it back.
            OutagePattern::Pause => Action::Ignore,
            OutagePattern::NakDelay => Action::NakDelay(plan.retry),
        },
        pause: pattern == OutagePattern::Pause,
    }
}

/// The outage, ns on [`crate::record::clock`], and the durable's ack deadline.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: u64,
    end: u64,
    ack_wait: Duration,
}

/// What the delivery log says about the outage.
#[derive(Debug, Default)]
struct Figures {
    messages: u64,
    deliveries: u64,
    /// Deliveries received during the outage.
    in_outage: u64,
    /// Of them, received after `grace_from` (the pause's answer plus
    /// [`PAUSE_GRACE`]); `None` without a pause.
    while_paused: Option<u64>,
    /// From the outage's end to the first delivery after it.
    resume: Option<Duration>,
    /// From the outage's end to the last ack of a message stored before it.
    drain: Option<Duration>,
    /// Store to final answer of the messages stored during the outage.
    outage_messages: Recorder,
    /// Deliveries the handlers held unanswered through the outage, and
    /// when each came back: after its ack deadline by, and after the
    /// outage's end by.
    held: u64,
    held_back_after_deadline: Recorder,
    held_back_after_end: Recorder,
}

impl Figures {
    fn of(events: &[DeliveryEvent], w: &Window, pause: Option<&PauseOutcome>) -> Figures {
        let mut f = Figures::default();
        let inside = |t: u64| (w.start..w.end).contains(&t);
        f.while_paused = pause.map(|p| {
            let from = p.answered_ns + PAUSE_GRACE.as_nanos() as u64;
            events
                .iter()
                .filter(|e| (from..w.end).contains(&e.received_ns))
                .count() as u64
        });
        let mut by_seq: BTreeMap<u64, Vec<&DeliveryEvent>> = BTreeMap::new();
        for e in events {
            by_seq.entry(e.seq).or_default().push(e);
        }
        f.messages = by_seq.len() as u64;
        f.deliveries = events.len() as u64;
        f.in_outage = events.iter().filter(|e| inside(e.received_ns)).count() as u64;
        f.resume = events
            .iter()
            .map(|e| e.received_ns)
            .filter(|&t| t >= w.end)
            .min()
            .map(|t| Duration::from_nanos(t - w.end));
        let mut last_ack = None::<u64>;
        for deliveries in by_seq.values() {
            let last = deliveries.last().expect("one delivery at least");
            if last.published_ns < w.end {
                last_ack = last_ack.max(Some(last.answered_ns));
            }
            if inside(last.published_ns) || inside(deliveries[0].published_ns) {
                f.outage_messages
                    .record_between(deliveries[0].published_ns, last.answered_ns);
            }
            for pair in deliveries.windows(2) {
                // Received inside and never answered (the pause pattern
                // ignores): held until the deadline brought it back.
                let (held, next) = (pair[0], pair[1]);
                if inside(held.received_ns) && held.answered_ns == held.received_ns {
                    f.held += 1;
                    let deadline = held.received_ns + w.ack_wait.as_nanos() as u64;
                    f.held_back_after_deadline
                        .record_between(deadline, next.received_ns);
                    f.held_back_after_end
                        .record_between(w.end, next.received_ns);
                }
            }
        }
        f.drain = last_ack.map(|t| Duration::from_nanos(t.saturating_sub(w.end)));
        f
    }
}

fn measure(o: &DriveOutcome, f: &Figures, w: &Window, rate: u64, r: &mut VariantResult) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    r.metric(names::TARGET_RATE, "msg/s", rate as f64, Direction::None);
    checks::publish_rate(o, r);
    r.count("deliveries_in_outage", f.in_outage);
    r.count("redeliveries", f.deliveries.saturating_sub(f.messages));
    if f.messages > 0 {
        let per_message = f.deliveries as f64 / f.messages as f64;
        r.metric("deliveries_per_message", "x", per_message, Direction::Lower);
    }
    if let Some(d) = f.resume {
        r.metric("time_to_resume", "ms", ms(d), Direction::Lower);
    }
    if let Some(d) = f.drain {
        r.metric("backlog_drain_time", "ms", ms(d), Direction::Lower);
    }
    if let Some(p) = &o.pause {
        r.ms("pause_request", p.answered_ns - p.requested_ns);
        let late_ms = p.requested_ns.saturating_sub(w.start) as f64 / 1e6;
        r.metric("pause_late", "ms", late_ms, Direction::None);
    }
    if f.held > 0 {
        r.count("held_in_outage", f.held);
    }
    r.latency("outage_message_delay", &f.outage_messages);
    r.latency("held_back_after_deadline", &f.held_back_after_deadline);
    r.latency("held_back_after_end", &f.held_back_after_end);
    r.latency(names::E2E_LATENCY, &o.e2e_intended);
}

fn verify(
    o: &DriveOutcome,
    f: &Figures,
    pattern: OutagePattern,
    stored: &checks::StreamCount,
    r: &mut VariantResult,
) {
    let c = &o.counts;
    r.invariants.push(checks::nothing_lost(o));
    r.invariants.push(Invariant::equal(
        "every message acked once",
        c.acked,
        c.persisted,
    ));
    match (pattern, &o.pause) {
        (OutagePattern::Pause, Some(p)) => {
            r.invariants.push(Invariant::check(
                "the server paused the durable",
                p.paused,
                format!(
                    "the pause was answered in {:.1} ms, with {} of it left",
                    (p.answered_ns.saturating_sub(p.requested_ns)) as f64 / 1e6,
                    p.remaining
                        .map_or("nothing".into(), |d| format!("{:.3} s", d.as_secs_f64()))
                ),
            ));
            r.invariants.push(nothing_while_paused(f));
        }
        (OutagePattern::Pause, None) => r.invariants.push(Invariant::check(
            "the server paused the durable",
            false,
            "no pause was made (the run ended before the outage?)",
        )),
        (OutagePattern::NakDelay, _) => {
            let why = "the nak_delay pattern does not pause the durable";
            for name in [
                "the server paused the durable",
                "nothing delivered while paused",
            ] {
                r.invariants.push(Invariant::not_applicable(name, why));
            }
        }
    }
    r.invariants.push(checks::stream_holds(stored, c));
    r.invariants.push(checks::nothing_pending(o));
}

fn nothing_while_paused(f: &Figures) -> Invariant {
    let n = f.while_paused.unwrap_or(0);
    Invariant::check(
        "nothing delivered while paused",
        n == 0,
        format!(
            "{n} deliveries from {} ms after the pause's answer to the outage's end; \
             {} during the outage in all",
            PAUSE_GRACE.as_millis(),
            f.in_outage
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64, delivery: u32, received_ms: u64, answered_ms: u64) -> DeliveryEvent {
        let ms = 1_000_000;
        DeliveryEvent {
            seq,
            delivery,
            consumer: 0,
            published_ns: received_ms * ms,
            received_ns: received_ms * ms,
            answered_ns: answered_ms * ms,
        }
    }

    /// The pause check with the server's side forged: a delivery that
    /// arrives well after the server answered the pause fails it; one
    /// inside the grace (sent before the pause) does not.
    #[test]
    fn a_delivery_while_paused_fails_and_one_sent_before_the_pause_does_not() {
        let ms = 1_000_000;
        let w = Window {
            start: 1_000 * ms,
            end: 2_000 * ms,
            ack_wait: Duration::from_millis(300),
        };
        let pause = PauseOutcome {
            requested_ns: 1_001 * ms,
            answered_ns: 1_002 * ms,
            planned_end_ns: w.end,
            paused: true,
            remaining: None,
        };
        // Held at 1,050 ms (inside the grace), back after the end.
        let held = [event(1, 1, 1_050, 1_050), event(1, 2, 2_003, 2_004)];
        let f = Figures::of(&held, &w, Some(&pause));
        assert!(nothing_while_paused(&f).passed);
        assert_eq!(f.held, 1);
        assert_eq!(f.resume, Some(Duration::from_millis(3)));
        // Delivered again at 1,500 ms: while paused.
        let leaked = [event(1, 1, 1_050, 1_050), event(1, 2, 1_500, 1_501)];
        let f = Figures::of(&leaked, &w, Some(&pause));
        let check = nothing_while_paused(&f);
        assert!(!check.passed);
        assert!(check.detail.starts_with("1 deliveries"), "{}", check.detail);
    }

    /// The counting checks, with the outcome forged: an ack jsbench never
    /// sent, and a pause the server answered as not paused.
    #[test]
    fn a_missing_ack_or_a_refused_pause_fails_the_variant() {
        let failing = |o: &DriveOutcome| {
            let mut r = VariantResult::new("pause");
            verify(o, &Figures::default(), OutagePattern::Pause, &Ok(3), &mut r);
            r.broken().into_iter().map(String::from).collect::<Vec<_>>()
        };
        let mut o = DriveOutcome::settled(3);
        o.counts.published = 3;
        o.counts.persisted = 3;
        o.counts.delivered = 3;
        o.counts.acked = 3;
        o.pause = Some(PauseOutcome {
            paused: true,
            ..Default::default()
        });
        assert!(failing(&o).is_empty(), "{:?}", failing(&o));
        o.counts.acked = 2;
        assert_eq!(failing(&o), ["every message acked once"]);
        o.counts.acked = 3;
        o.pause.as_mut().unwrap().paused = false;
        assert_eq!(failing(&o), ["the server paused the durable"]);
    }
}
