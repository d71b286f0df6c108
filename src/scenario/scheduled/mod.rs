//! `scheduled`: message schedules (ADR-51) published into a stream that
//! allows them, and the messages they fire watched, one variant per shape:
//!
//! - `at`: `schedules` one-off `@at` schedules due evenly over `duration`;
//! - `every` and `cron`: `schedules` repeating ones (`@every <every>`,
//!   `*/cron_step * * * * *`) watched for `duration`;
//! - `burst`: `burst` `@at` schedules all due at one instant;
//! - `restart`: `@at` schedules due while the server is down (SIGKILL,
//!   started again on its store after `down_for`).
//!
//! Measures the firing error (a fired message's stored time minus its due
//! time) and the receipt error (when a consumer here had it, minus the due
//! time) as distributions, a burst's firings per second, and how soon
//! after a restart the missed firings come. Verifies that each due time
//! fires once, none early, none lost (server or client), and that a fired
//! `@at` schedule is gone.

pub mod audit;
pub mod plan;

use std::time::Duration;

use anyhow::{Context, Result, anyhow};

use self::audit::{Audit, Due, audit};
use super::table::{self, Column, Show};
use super::{Kind, Scope, Variants};
use crate::drive::RunContext;
use crate::profile::{CommonPlan, FaultKind, format_duration};
use crate::record::metrics::{Direction, Metric};
use crate::streams::provision::Need;
use crate::streams::schedules::{self, Pattern, Watcher, now_ns};
use crate::variant::{Invariant, VariantResult};

pub use plan::{Plan, Shape};

/// Stored time minus due time, per firing (histogram; `.p50` ... in µs).
pub const FIRING_ERROR: &str = "firing_error";
/// Received time minus due time, per firing.
pub const RECEIPT_ERROR: &str = "receipt_error";
/// Firings received.
pub const FIRINGS: &str = "firings";
/// Schedules published.
pub const SCHEDULES: &str = "schedules";
/// A burst's firings over the span from its due instant to its last
/// firing stored, msg/s.
pub const FIRING_RATE: &str = "firing_rate";
/// From the server accepting connections again to the first and the last
/// firing of the schedules due during the outage stored, ms.
pub const CATCH_UP_FIRST: &str = "catch_up_first";
pub const CATCH_UP_LAST: &str = "catch_up_last";
/// From the kill to the server accepting connections again, ms.
pub const DOWN: &str = "down";

const POLL: Duration = Duration::from_millis(20);

/// The registry's row for `scheduled`: schedules fired by the server.
pub struct Scheduled;

impl Kind for Scheduled {
    const NAME: &'static str = "scheduled";
    const FIGURES: &'static [&'static str] = &[FIRING_ERROR, RECEIPT_ERROR, FIRING_RATE];
    const COLUMNS: &'static [Column] = &[
        table::VARIANT,
        Column::metric("schedules", SCHEDULES, Show::Whole),
        Column::metric("firings", FIRINGS, Show::Whole),
        table::quantile("err p50", FIRING_ERROR, "p50"),
        table::quantile("p99", FIRING_ERROR, "p99"),
        table::quantile("max", FIRING_ERROR, "max"),
        table::quantile("recv p99", RECEIPT_ERROR, "p99"),
        Column::metric("fired/s", FIRING_RATE, Show::Rate),
        Column::metric("catch-up", CATCH_UP_LAST, Show::Ms),
        table::LOST,
        table::VERDICT,
    ];
    type Plan = Plan;

    fn need(plan: &Plan, common: &CommonPlan) -> Need {
        // A schedule and its firings, a few hundred bytes each.
        let firings = (common.duration.as_secs_f64() + 1.0) as u64 + 1;
        Need::one_stream(plan.schedules.max(plan.burst) * firings * 512)
    }

    fn estimated_duration(plan: &Plan, common: &CommonPlan) -> Duration {
        plan.variants
            .iter()
            .map(|s| plan.lead + variant_span(*s, plan, common))
            .sum()
    }

    fn faults(plan: &Plan) -> Option<FaultKind> {
        plan.variants
            .contains(&Shape::Restart)
            .then_some(FaultKind::Kill)
    }

    type Group = ();
    type Shared = ();
    type Variant = Shape;

    fn variants(plan: &Plan, _: &()) -> Variants<Shape> {
        Variants::List(plan.variants.clone())
    }

    fn label(_plan: &Plan, shape: &Shape) -> String {
        shape.label().into()
    }

    /// The stream (deleted by the scope), the watcher, the schedules, the
    /// wait (and the restart), then what the stream held.
    async fn run(
        s: &mut Scope<'_>,
        r: &mut VariantResult,
        plan: &Plan,
        _: &mut (),
        &shape: &Shape,
    ) -> Result<()> {
        describe(&s.scenario.common, plan, shape, r);
        let base = s.names().base;
        let stream = s
            .stream(schedules::stream_config(s.stream_config(), &base))
            .await?;
        let observed = fire(s, plan, shape, &stream, &base, r).await?;
        verify(shape, &observed, r);
        Ok(())
    }
}

/// From the first due time to the last, or the watch of the repeating
/// (which always waits out its grace).
fn variant_span(shape: Shape, plan: &Plan, common: &CommonPlan) -> Duration {
    match shape {
        Shape::At => common.duration,
        Shape::Every | Shape::Cron => common.duration + plan.grace,
        Shape::Burst => Duration::ZERO,
        Shape::Restart => plan.down_for,
    }
}

fn describe(common: &CommonPlan, plan: &Plan, shape: Shape, r: &mut VariantResult) {
    r.param("shape", shape.label());
    r.param("lead", format_duration(plan.lead));
    r.param("grace", format_duration(plan.grace));
    match shape {
        Shape::At => r.param("window", format_duration(common.duration)),
        Shape::Every => r.param("every", format_duration(plan.every)),
        Shape::Cron => r.param("cron", Pattern::CronStep(plan.cron_step).header()),
        Shape::Burst => {}
        Shape::Restart => r.param("down_for", format_duration(plan.down_for)),
    }
    if shape.repeats() {
        r.param("watched", format_duration(common.duration));
    }
}

/// The patterns of a variant's schedules, the first due `lead` from `t0`.
fn patterns(shape: Shape, plan: &Plan, common: &CommonPlan, t0: i128) -> Vec<(u64, Pattern)> {
    let first = t0 + plan.lead.as_nanos() as i128;
    let spread = |n: u64, over: Duration, i: u64| {
        first + (over.as_nanos() as i128 * i128::from(i)) / i128::from(n.max(1))
    };
    let n = match shape {
        Shape::Burst => plan.burst,
        _ => plan.schedules,
    };
    // Restart's are due from half a second after the kill to half a second
    // before the restart: none can fire while the server still runs.
    let inside = plan.down_for.saturating_sub(Duration::from_secs(1));
    let pattern = |i| match shape {
        Shape::At => Pattern::At(spread(n, common.duration, i)),
        Shape::Every => Pattern::Every(plan.every),
        Shape::Cron => Pattern::CronStep(plan.cron_step),
        Shape::Burst => Pattern::At(first),
        Shape::Restart => Pattern::At(spread(n, inside, i) + 500_000_000),
    };
    (0..n).map(|i| (i, pattern(i))).collect()
}

/// What a variant watched and what the stream held.
struct Observed {
    audit: Audit,
    schedules: u64,
    /// Schedule messages still stored after the `@at` ones fired.
    left: Option<u64>,
    /// Ns: the first due time, the kill and the server back.
    first_due: i128,
    restart: Option<(i128, i128)>,
}

/// Watches, publishes and waits for the firings: the repeating ones for
/// `duration` after publishing and `grace` more, the others until all
/// came or none came for `grace` after the last was due; `restart` kills
/// the server first and starts it again. Due times after the cutoff are
/// not expected. The watcher stops with the variant, whether it got that
/// far or not.
async fn fire(
    s: &Scope<'_>,
    plan: &Plan,
    shape: Shape,
    stream: &async_nats::jetstream::stream::Stream,
    base: &str,
    r: &mut VariantResult,
) -> Result<Observed> {
    let (ctx, common) = (s.ctx, &s.scenario.common);
    let js = ctx.provisioner.jetstream();
    let t0 = now_ns();
    let specs = patterns(shape, plan, common, t0);
    let watcher = Watcher::start(stream, base, specs.len() * 4).await?;
    let seqs = schedules::publish(js, base, &specs).await?;
    let published = now_ns();
    // Each schedule's first due time: as given for `@at`, from its stored
    // time for the repeating ones.
    let stored = match shape.repeats() {
        true => schedules::stored_times(stream, &seqs).await?,
        false => vec![0; specs.len()],
    };
    let due = |(&(index, pattern), t)| Due {
        index,
        pattern,
        first_ns: pattern.first_due(t),
    };
    let dues: Vec<Due> = specs.iter().zip(stored).map(due).collect();
    let first_due = dues.iter().map(|d| d.first_ns).min().unwrap_or(published);
    // A repeating schedule's first due time is the server's to choose,
    // possibly before the last one is stored; a one-off's is ours.
    if !shape.repeats() && published > first_due {
        r.warnings.push(format!(
            "the last schedule was stored {} ms after the first was due: raise `lead`",
            (published - first_due) / 1_000_000
        ));
    }

    // Wait.
    let restart = if shape == Shape::Restart {
        let times = kill_and_restart(ctx, plan, t0 + plan.lead.as_nanos() as i128).await?;
        watcher.reset();
        Some(times)
    } else {
        None
    };
    let cutoff = if shape.repeats() {
        published + common.duration.as_nanos() as i128
    } else {
        dues.iter().map(|d| d.first_ns).max().unwrap_or(published)
    };
    // One firing each for the one-off schedules: all in, no need to wait;
    // while they still come (a burst stored slower than `grace` on a busy
    // host), none is called lost.
    let grace = plan.grace.as_nanos() as i128;
    let (mut seen, mut came) = (watcher.seen(), now_ns());
    while !ctx.stop.is_cancelled() {
        let (now, got) = (now_ns(), watcher.seen());
        if got > seen {
            (seen, came) = (got, now);
        }
        let done = match shape.repeats() {
            true => now >= cutoff + grace,
            false => got >= dues.len() as u64 || now >= cutoff.max(came) + grace,
        };
        if done {
            break;
        }
        tokio::time::sleep(POLL).await;
    }

    // What came, and what the stream holds.
    let firings = watcher.finish().await?;
    let held = schedules::counts(stream, base, "fired").await?;
    let left = match shape.repeats() {
        true => None,
        false => Some(schedules::counts(stream, base, "sched").await?.len() as u64),
    };
    Ok(Observed {
        audit: audit(&dues, &firings, cutoff, &held),
        schedules: specs.len() as u64,
        left,
        first_due,
        restart,
    })
}

/// Kills the server at `kill_ns` (Unix ns; the schedules are due from
/// half a second later) and starts it again on its store `down_for`
/// after: the kill's time and the server's accepting connections again.
async fn kill_and_restart(ctx: &RunContext, plan: &Plan, kill_ns: i128) -> Result<(i128, i128)> {
    let faults = ctx.faults.clone().ok_or_else(|| {
        anyhow!(
            "the restart variant kills the server, so it runs only on a server jsbench starts \
             itself"
        )
    })?;
    let until = Duration::from_nanos((kill_ns - now_ns()).max(0) as u64);
    tokio::time::sleep(until).await;
    // Blocking on this thread (block_in_place, as the drive's fault does),
    // not a spawn_blocking one: the restarted server dies with the thread
    // that started it (PR_SET_PDEATHSIG), and a blocking-pool thread ends
    // after idling, where this one lasts the run.
    tokio::task::block_in_place(|| faults.kill(0)).context("killing the server")?;
    let killed = now_ns();
    tokio::time::sleep(plan.down_for).await;
    tokio::task::block_in_place(|| faults.restart(0)).context("restarting the server")?;
    Ok((killed, now_ns()))
}

fn ms(ns: i128) -> f64 {
    ns as f64 / 1e6
}

fn verify(shape: Shape, o: &Observed, r: &mut VariantResult) {
    let a = &o.audit;
    r.count(SCHEDULES, o.schedules);
    r.count(FIRINGS, a.firings);
    r.latency(FIRING_ERROR, &a.stored_error);
    r.latency(RECEIPT_ERROR, &a.received_error);
    if shape == Shape::Burst
        && let Some(last) = a.last_stored_ns
        && last > o.first_due
    {
        let rate = a.firings as f64 / ((last - o.first_due) as f64 / 1e9);
        r.metric(FIRING_RATE, "msg/s", rate, Direction::Higher);
    }
    if let Some((killed, back)) = o.restart {
        r.metric(DOWN, "ms", ms(back - killed), Direction::Lower);
        if let (Some(first), Some(last)) = (a.first_stored_ns, a.last_stored_ns) {
            let m = |name, t: i128| Metric::new(name, "ms", ms(t - back), Direction::Lower);
            r.metrics.push(m(CATCH_UP_FIRST, first));
            r.metrics.push(m(CATCH_UP_LAST, last));
        }
    }
    r.ledger.lost = a.lost_server;
    r.ledger.client_dropped = a.lost_client;
    r.invariants.extend(a.invariants(o.left));
    if shape == Shape::Restart {
        r.invariants.push(Invariant::check(
            "the server was killed and came back",
            o.restart.is_some_and(|(k, b)| b > k),
            "SIGKILL with schedules due, started again on its store",
        ));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    const KILLED: &str = "the server was killed and came back";

    fn observed(restart: Option<(i128, i128)>) -> Observed {
        Observed {
            audit: audit(&[], &[], 0, &BTreeMap::new()),
            schedules: 0,
            left: Some(0),
            first_due: 0,
            restart,
        }
    }

    fn killed_state(o: &Observed) -> bool {
        let mut r = VariantResult::new("restart");
        verify(Shape::Restart, o, &mut r);
        r.invariants
            .iter()
            .find(|i| i.name == KILLED)
            .unwrap()
            .passed
    }

    #[test]
    fn a_restart_that_did_not_happen_fails_killed_and_came_back() {
        assert!(!killed_state(&observed(None)));
        assert!(!killed_state(&observed(Some((5, 5)))));
        assert!(killed_state(&observed(Some((5, 6)))));
        let mut r = VariantResult::new("at");
        verify(Shape::At, &observed(None), &mut r);
        assert!(r.invariants.iter().all(|i| i.name != KILLED));
    }

    #[test]
    fn restart_schedules_are_due_inside_the_outage() {
        let p = match crate::scenario::one_scenario(
            "scheduled",
            "variants = [\"restart\"]\nschedules = 10\nlead = \"2s\"\ndown_for = \"4s\"\n",
        )
        .unwrap()
        .kind
        {
            crate::scenario::KindPlan::Scheduled(p) => p,
            _ => unreachable!(),
        };
        let common = crate::scenario::one_scenario("scheduled", "")
            .unwrap()
            .common;
        let s = 1_000_000_000;
        let kill = 100 * s + 2 * s;
        for (_, pattern) in patterns(Shape::Restart, &p, &common, 100 * s) {
            let Pattern::At(due) = pattern else {
                panic!("{pattern:?}")
            };
            assert!(due >= kill + s / 2 && due <= kill + 4 * s - s / 2, "{due}");
        }
    }
}
