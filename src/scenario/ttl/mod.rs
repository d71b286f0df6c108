//! `kind = "ttl"`: per-message TTL and subject delete markers (ADR-43).
//!
//! Provision: a stream that allows per-message TTLs, with subject delete
//! markers or without (one variant each), max_age from
//! `[scenario.stream]`. Drive: `messages` published at `rate` with mixed
//! `Nats-TTL`s over `subjects` subjects. Measure: every message polled by
//! sequence from just before its deadline until a message get finds it
//! gone (the expiry lag: that reply's instant minus the stored time plus
//! the TTL, resolved to the poll interval); every marker followed live
//! (its delay: its stored time minus the deadline of its subject's last
//! message); a late reader started between two deadline groups. Verify:
//! nothing removed before its deadline, every expired message removed,
//! nothing delivered after its deadline, every unexpired one delivered,
//! every marker accounted for. A `cost` variant weighs what pending TTLs
//! cost the server (cost.rs).

mod cost;
pub mod plan;
mod verify;

use std::time::Duration;

use anyhow::Result;
use async_nats::jetstream::stream;
use tokio_util::sync::CancellationToken;

use super::table::{self, Column, Show};
use super::{Kind, Scope, Variants};
use crate::drive::RunContext;
use crate::profile::CommonPlan;
use crate::record::clock::{self, now_ns};
use crate::record::metrics::Direction;
use crate::streams::expiry::{self, Polled, Polling, Tracked, Ttl, TtlLoad, ttl_stream_config};
use crate::streams::provision::{Need, PER_MESSAGE_OVERHEAD};
use crate::variant::VariantResult;

pub use plan::Plan;
pub use verify::{
    DELIVERY_TOLERANCE, EXPIRED_REMOVED, MARKERS_ACCOUNTED, NOTHING_DELIVERED_LATE,
    NOTHING_REMOVED_EARLY, UNEXPIRED_DELIVERED,
};

/// A message's deadline (stored time + TTL) to the reply of the first
/// message get that found it gone.
pub const EXPIRY_LAG: &str = "expiry_lag";
/// How much of each expiry lag is uncertain: from the later of the
/// deadline and the last message get that still found the message, to
/// the reply that found it gone. The removal lies in that window.
pub const EXPIRY_WINDOW: &str = "expiry_window";
/// The deadline of a subject's last message to its marker's stored time.
pub const MARKER_DELAY: &str = "marker_delay";
/// The param that states how far a deadline may sit from where jsbench's
/// clock meets the server's (the server's wall-clock stamp put on
/// jsbench's clock), and so how much "nothing removed before its
/// deadline" tolerates.
pub const DEADLINE_CLOCK_TOLERANCE: &str = "deadline_clock_tolerance";
/// The cost variant's figures ([`cost`]).
pub const SERVER_BYTES_PER_TTL_MSG: &str = "server_bytes_per_ttl_msg";
pub const SERVER_BYTES_PER_PLAIN_MSG: &str = "server_bytes_per_plain_msg";
pub const EXPIRY_CPU_PER_MSG: &str = "expiry_cpu_per_msg";

/// A message is first asked for at least this long before its deadline.
const MIN_LEAD: Duration = Duration::from_millis(250);
/// A message still stored this long after its deadline is given up on.
const GIVE_UP: Duration = Duration::from_secs(5);
/// Message gets in flight at once.
const CONCURRENCY: usize = 32;
/// How long the marker follower keeps reading after the last expiry.
const MARKER_GRACE: Duration = Duration::from_secs(2);
/// The late reader stops after this long without a delivery.
const READ_IDLE: Duration = Duration::from_secs(2);

pub struct TtlKind;

impl Kind for TtlKind {
    const NAME: &'static str = "ttl";
    const FIGURES: &'static [&'static str] = &[
        EXPIRY_LAG,
        EXPIRY_WINDOW,
        MARKER_DELAY,
        SERVER_BYTES_PER_TTL_MSG,
        SERVER_BYTES_PER_PLAIN_MSG,
        EXPIRY_CPU_PER_MSG,
    ];
    const COLUMNS: &'static [Column] = &[
        table::VARIANT,
        Column::metric("published", "published", Show::Whole),
        table::quantile("expiry lag p50", EXPIRY_LAG, "p50"),
        table::quantile("p99", EXPIRY_LAG, "p99"),
        table::quantile("max", EXPIRY_LAG, "max"),
        table::quantile("marker p50", MARKER_DELAY, "p50"),
        Column::metric("markers", "markers_seen", Show::Whole),
        Column::metric(
            "late past deadline",
            "late_reader_past_deadline",
            Show::Whole,
        ),
        Column::metric("B/ttl msg", SERVER_BYTES_PER_TTL_MSG, Show::Decimals(0)),
        Column::metric("expiry cpu", EXPIRY_CPU_PER_MSG, Show::MicrosPerMsg),
        table::VERDICT,
    ];
    type Plan = Plan;

    fn need(plan: &Plan, _common: &CommonPlan) -> Need {
        let each = plan.message_size as u64 + PER_MESSAGE_OVERHEAD;
        let bytes = plan.messages.max(plan.cost_messages) * each;
        Need {
            // The cost variant keeps its two streams at once.
            streams: if plan.cost_messages > 0 { 2 } else { 1 },
            consumers: 2,
            total_bytes: bytes + plan.cost_messages * each,
            ..Need::one_stream(bytes)
        }
    }

    fn estimated_duration(plan: &Plan, _common: &CommonPlan) -> Duration {
        let longest = plan.ttls.iter().filter_map(Ttl::secs).max().unwrap_or(0);
        let publish = Duration::from_secs_f64(plan.messages as f64 / plan.rate as f64);
        let each = publish + Duration::from_secs(longest + 1);
        let cost = match plan.cost_messages {
            0 => Duration::ZERO,
            n => plan.cost_ttl + Duration::from_secs_f64(n as f64 / 50_000.0),
        };
        each * plan.markers.len() as u32 + cost
    }

    type Group = ();
    type Shared = ();
    type Variant = Variant;

    /// One per marker setting, then the cost variant when asked.
    fn variants(plan: &Plan, _: &()) -> Variants<Variant> {
        let expiry = plan.markers.iter().map(|&m| Variant::Expiry(m));
        let cost = (plan.cost_messages > 0).then_some(Variant::Cost);
        Variants::List(expiry.chain(cost).collect())
    }

    fn label(_plan: &Plan, v: &Variant) -> String {
        match v {
            Variant::Expiry(None) => "markers-off".into(),
            Variant::Expiry(Some(d)) => format!("markers-{}s", d.as_secs()),
            Variant::Cost => "cost".into(),
        }
    }

    /// An expiry variant: its stream (recorded and deleted by the scope),
    /// the load published and watched, then measured and verified.
    async fn run(
        s: &mut Scope<'_>,
        r: &mut VariantResult,
        plan: &Plan,
        _: &mut (),
        v: &Variant,
    ) -> Result<()> {
        let Variant::Expiry(markers) = *v else {
            return cost::weigh(s, plan, r).await;
        };
        describe(plan, markers, r);
        // Provision.
        let config = ttl_stream_config(s.stream_config(), markers);
        let rules = (markers, config.max_age, config.max_messages_per_subject);
        let stream = s.stream(config).await?;
        // Drive and watch.
        let (observed, polled) = observe(s.ctx, plan, (&stream, &s.names().base), rules, r).await?;
        // Measure and verify.
        r.param(
            DEADLINE_CLOCK_TOLERANCE,
            format!("{} µs", observed.clock_tolerance.as_micros()),
        );
        verify::measure(&observed, r);
        r.invariants.extend(verify::verify(&observed));
        r.count("gets", polled.gets);
        r.count("get_errors", polled.errors);
        Ok(())
    }
}

/// A variant: the expiry watch on a stream with markers off or at this
/// TTL, or the server's cost of pending TTLs ([`cost`]).
#[derive(Debug, Clone, Copy)]
pub enum Variant {
    Expiry(Option<Duration>),
    Cost,
}

/// How long a message published with `ttl` lives by the server's rules
/// (pinned in tests/server_behaviour.rs): a marker TTL raises a shorter
/// TTL unless the stream keeps one message per subject; max_age removes a
/// longer-lived message at its age; "never" outlives max_age.
pub fn lifetime(
    ttl: Ttl,
    markers: Option<Duration>,
    max_age: Duration,
    per_subject: i64,
) -> Option<u64> {
    let secs = ttl.secs()?;
    let raised = match markers {
        Some(m) if per_subject != 1 => secs.max(m.as_secs()),
        _ => secs,
    };
    let ns = raised * 1_000_000_000;
    Some(match max_age.as_nanos() as u64 {
        0 => ns,
        age => ns.min(age),
    })
}

fn describe(plan: &Plan, markers: Option<Duration>, r: &mut VariantResult) {
    r.param("messages", plan.messages);
    r.param("rate", plan.rate);
    r.param("subjects", plan.subjects);
    let ttls: Vec<String> = plan.ttls.iter().map(Ttl::label).collect();
    r.param("ttls", ttls);
    r.param(
        "markers",
        markers.map_or("off".to_string(), |m| format!("{}s", m.as_secs())),
    );
    r.param("poll_ms", plan.poll.as_millis() as u64);
    r.param("late_reader", plan.late_reader);
    if let Some(m) = markers {
        for t in &plan.ttls {
            if let Ttl::Secs(s) = t
                && *s < m.as_secs()
            {
                r.warnings.push(format!(
                    "Nats-TTL {s}s is raised to the marker TTL {}s by the server (ADR-43): \
                     its deadlines are counted from {}s",
                    m.as_secs(),
                    m.as_secs()
                ));
            }
        }
    }
}

/// Publishes the load, then watches it expire: the poller, the late
/// reader and the marker follower run side by side. What they saw, and
/// the poller's count of its gets.
async fn observe(
    ctx: &RunContext,
    plan: &Plan,
    (stream, base): (&stream::Stream, &str),
    (markers, max_age, per_subject): (Option<Duration>, Duration, i64),
    r: &mut VariantResult,
) -> Result<(verify::Observed, Polled)> {
    let lifetime = move |t: Ttl| lifetime(t, markers, max_age, per_subject);
    let load = TtlLoad {
        base,
        messages: plan.messages,
        rate: plan.rate,
        subjects: plan.subjects,
        ttls: &plan.ttls,
        lifetime: &lifetime,
        message_size: plan.message_size,
    };
    let started = now_ns();
    let mut tracked = expiry::publish(ctx.provisioner.jetstream(), &load, &ctx.stop).await?;
    let span = now_ns().saturating_sub(started);
    r.count("published", tracked.len() as u64);
    r.metric("publish_span", "s", span as f64 / 1e9, Direction::None);
    let last_seq = tracked.last().map_or(0, |t| t.seq);
    let late_at = plan.late_reader.then(|| late_reader_at(&tracked)).flatten();
    let polling = Polling {
        every: plan.poll,
        lead: MIN_LEAD.max(plan.poll * 2),
        give_up_after: GIVE_UP,
        concurrency: CONCURRENCY,
    };
    let done = CancellationToken::new();
    let watching = async {
        let polled = expiry::watch(stream, &mut tracked, polling, &ctx.stop).await;
        let until = now_ns();
        if markers.is_some() {
            tokio::time::sleep(MARKER_GRACE).await;
        }
        done.cancel();
        polled.map(|p| (p, until))
    };
    let following = async {
        match markers {
            Some(ttl) => {
                let seen = expiry::follow_markers(stream, base, last_seq + 1, done.clone()).await;
                Some(seen.map(|seen| verify::MarkerWatch {
                    ttl,
                    seen,
                    until_ns: now_ns(),
                }))
            }
            None => None,
        }
    };
    let reading = async {
        let at = late_at?;
        let wait = at.saturating_sub(now_ns());
        tokio::time::sleep(Duration::from_nanos(wait)).await;
        Some(expiry::read_late(stream, last_seq, READ_IDLE).await)
    };
    let (watched, followed, read) = tokio::join!(watching, following, reading);
    let (polled, watched_until_ns) = watched?;
    // A stored time is read by the first get, from `lead` before the
    // deadline to a round after it: the deadline is that far from the
    // conversion at most.
    let apart = polling.lead + polling.every;
    let clock_tolerance =
        Duration::from_nanos(clock::from_wall_uncertainty_ns(apart.as_nanos() as u64));
    let observed = verify::Observed {
        clock_tolerance,
        tracked,
        late: read.transpose()?,
        markers: followed.transpose()?,
        give_up: GIVE_UP,
        watched_until_ns,
    };
    Ok((observed, polled))
}

/// When the late reader starts: midway between the latest deadline of
/// the shortest-lived messages and the earliest of the next group, so
/// some have expired and some have not; with one group, two delivery
/// tolerances after its last deadline. `None` when nothing expires.
fn late_reader_at(tracked: &[Tracked]) -> Option<u64> {
    let mut lifetimes: Vec<u64> = tracked.iter().filter_map(|t| t.ttl_ns).collect();
    lifetimes.sort_unstable();
    lifetimes.dedup();
    let first = *lifetimes.first()?;
    let latest_first = tracked
        .iter()
        .filter(|t| t.ttl_ns == Some(first))
        .map(|t| t.acked_ns + first)
        .max()?;
    match lifetimes.get(1) {
        Some(&second) => {
            let earliest_second = tracked
                .iter()
                .filter(|t| t.ttl_ns == Some(second))
                .map(|t| t.sent_ns + second)
                .min()?;
            Some(latest_first / 2 + earliest_second / 2)
        }
        None => Some(latest_first + 2 * DELIVERY_TOLERANCE.as_nanos() as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lifetime_follows_the_servers_rules() {
        let s = Duration::from_secs;
        let ns = |secs: u64| Some(secs * 1_000_000_000);
        assert_eq!(lifetime(Ttl::Secs(2), None, Duration::ZERO, -1), ns(2));
        assert_eq!(lifetime(Ttl::Never, Some(s(5)), s(1), -1), None);
        assert_eq!(
            lifetime(Ttl::Secs(2), Some(s(5)), Duration::ZERO, -1),
            ns(5),
            "raised"
        );
        assert_eq!(
            lifetime(Ttl::Secs(2), Some(s(5)), Duration::ZERO, 1),
            ns(2),
            "one per subject"
        );
        assert_eq!(
            lifetime(Ttl::Secs(9), None, s(4), -1),
            ns(4),
            "max_age first"
        );
    }

    fn at(seq: u64, ttl_s: u64, sent_s: u64) -> Tracked {
        Tracked {
            seq,
            ttl_ns: Some(ttl_s * 1_000_000_000),
            sent_ns: sent_s * 1_000_000_000,
            acked_ns: sent_s * 1_000_000_000 + 1_000_000,
            ..Tracked::default()
        }
    }

    #[test]
    fn the_late_reader_starts_between_the_first_two_deadline_groups() {
        let tracked = [at(1, 2, 0), at(2, 6, 0), at(3, 2, 1), at(4, 6, 1)];
        let start = late_reader_at(&tracked).unwrap();
        // Group 2 s ends at 3.001 s, group 6 s starts at 6 s.
        assert_eq!(start, 3_001_000_000 / 2 + 3_000_000_000);
        let one = [at(1, 2, 0)];
        assert_eq!(late_reader_at(&one).unwrap(), 2_001_000_000 + 2_000_000_000);
        let never = [Tracked::default()];
        assert_eq!(late_reader_at(&never), None);
    }
}
