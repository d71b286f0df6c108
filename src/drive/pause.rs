//! The outage scenario's consumer pause, timed from inside the
//! run-and-sample phase: the durable paused (`CONSUMER.PAUSE`, nats-server
//! 2.11+) until the outage's planned end, when the server resumes it on
//! its own.

use std::time::Duration;

use anyhow::{Context, Result};

use super::{DriveSpec, OutagePlan, PauseOutcome, RunContext};
use crate::record::clock;

/// Pauses the variant's durable until `end_ns` (on [`clock`]).
pub(super) async fn pause(
    ctx: &RunContext,
    spec: &DriveSpec,
    durable: &str,
    end_ns: u64,
) -> Result<PauseOutcome> {
    let requested_ns = clock::now_ns();
    let left = Duration::from_nanos(end_ns.saturating_sub(requested_ns));
    let until = time::OffsetDateTime::now_utc() + left;
    let stream = ctx
        .provisioner
        .jetstream()
        .get_stream_no_info(spec.stream())
        .await
        .with_context(|| format!("getting stream {} to pause its durable", spec.stream()))?;
    let answer = stream
        .pause_consumer(durable, until)
        .await
        .with_context(|| format!("pausing durable {durable}"))?;
    Ok(PauseOutcome {
        requested_ns,
        answered_ns: clock::now_ns(),
        planned_end_ns: end_ns,
        paused: answer.paused,
        remaining: answer.pause_remaining,
    })
}

/// When the plan's outage begins and ends, ns on [`clock`].
pub(super) fn window(plan: &OutagePlan, t0_ns: u64) -> (u64, u64) {
    let start = t0_ns + plan.after.as_nanos() as u64;
    (start, start + plan.lasts.as_nanos() as u64)
}
