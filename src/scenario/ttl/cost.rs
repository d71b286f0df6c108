//! The `cost` variant: what pending TTL'd messages cost the server.
//! `cost_messages` are published without a TTL into one stream and as
//! many with `Nats-TTL: cost_ttl` into a second; the server's resident
//! memory (/proc/<pid>/status VmRSS) is read before and after each fill,
//! both streams kept, so each delta is that fill's own. Then the server's
//! CPU is read (process accounting) from just before the first deadline
//! until stream info reports the TTL stream empty, less the server's idle
//! CPU over as long: the expiry pass's CPU per message. Needs the server's
//! process, so only the embedded server (one node) is weighed; RSS moves
//! with the Go runtime's heap, so the figures are what one fill added,
//! not a model of the store.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};

use super::verify::{EXPIRED_REMOVED, NOTHING_REMOVED_EARLY};
use super::{EXPIRY_CPU_PER_MSG, Plan, SERVER_BYTES_PER_PLAIN_MSG, SERVER_BYTES_PER_TTL_MSG};
use crate::drive::{DriveSpec, RunContext, drive};
use crate::profile::{MsgId, PublishPlan};
use crate::record::metrics::{Direction, Metric};
use crate::scenario::ScenarioPlan;
use crate::scenario::lifecycle::variant;
use crate::streams::expiry::{TTL_HEADER, ttl_stream_config};
use crate::streams::provision::stream_config;
use crate::system::cpu::ServerCpu;
use crate::variant::{Invariant, VariantResult};

/// Time for the server to settle (its allocator, its flushes) before RSS
/// is read.
const SETTLE: Duration = Duration::from_secs(1);
/// How often stream info is asked while the expiry pass runs.
const STATE_EVERY: Duration = Duration::from_millis(100);
/// The expiry pass is given this long beyond the deadlines.
const PASS_LIMIT: Duration = Duration::from_secs(120);

pub async fn weigh_variant(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    plan: &Plan,
) -> VariantResult {
    let (result, _) = variant("cost", async |r| {
        r.param("cost_messages", plan.cost_messages);
        r.param("cost_ttl_s", plan.cost_ttl.as_secs());
        let ServerCpu::Processes(pids) = &ctx.server_cpu else {
            r.warnings.push(
                "the server's memory and CPU need its process: only the embedded server \
                 (one node) is weighed"
                    .into(),
            );
            return Ok(());
        };
        let &[pid] = pids.as_slice() else {
            r.warnings
                .push("a cluster's memory is not weighed: run the cost variant on one node".into());
            return Ok(());
        };
        let names = ["cost-plain", "cost-ttl"].map(|v| {
            (
                ctx.names.stream(scenario.name(), v),
                ctx.names.subject(scenario.name(), v),
            )
        });
        for (stream, base) in &names {
            let config = stream_config(stream, base, &ctx.server, &ctx.stream);
            ctx.provisioner
                .create_stream(ttl_stream_config(config, None))
                .await?;
        }
        let weighed = weigh(ctx, scenario, plan, pid, &names, r).await;
        let mut deleted = Ok(());
        for (stream, _) in &names {
            deleted = deleted.and(ctx.provisioner.delete_stream(stream).await);
        }
        weighed?;
        deleted.context("cleaning up after the variant")
    })
    .await;
    result
}

async fn weigh(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    plan: &Plan,
    pid: u32,
    [(plain, plain_base), (ttl, ttl_base)]: &[(String, String); 2],
    r: &mut VariantResult,
) -> Result<()> {
    let n = plan.cost_messages;
    tokio::time::sleep(SETTLE).await;
    let before = rss(pid)?;
    fill(ctx, scenario, (plain, plain_base), plan, None).await?;
    tokio::time::sleep(SETTLE).await;
    let after_plain = rss(pid)?;
    let ttl_started = Instant::now();
    fill(ctx, scenario, (ttl, ttl_base), plan, Some(plan.cost_ttl)).await?;
    let filled_in = ttl_started.elapsed();
    if filled_in + SETTLE >= plan.cost_ttl {
        return Err(anyhow!(
            "publishing {n} messages took {filled_in:?}, too close to cost_ttl = {:?}: \
             raise cost_ttl so every message is pending when memory is read",
            plan.cost_ttl
        ));
    }
    tokio::time::sleep(SETTLE).await;
    let after_ttl = rss(pid)?;
    let held = stored(ctx, ttl).await?;
    r.invariants.push(Invariant::check(
        NOTHING_REMOVED_EARLY,
        held == n,
        format!(
            "{held} of {n} TTL'd messages stored before their deadline ({filled_in:?} to publish)"
        ),
    ));
    let per = |d: u64| d as f64 / n as f64;
    r.metrics.push(Metric::new(
        SERVER_BYTES_PER_PLAIN_MSG,
        "bytes",
        per(after_plain.saturating_sub(before)),
        Direction::Lower,
    ));
    r.metrics.push(Metric::new(
        SERVER_BYTES_PER_TTL_MSG,
        "bytes",
        per(after_ttl.saturating_sub(after_plain)),
        Direction::Lower,
    ));
    expiry_pass(ctx, ttl, n, ttl_started + plan.cost_ttl, r).await
}

/// The server's CPU from just before the first deadline to the TTL
/// stream found empty, less its idle CPU over as long (read over the
/// second before).
async fn expiry_pass(
    ctx: &RunContext,
    stream: &str,
    n: u64,
    first_deadline: Instant,
    r: &mut VariantResult,
) -> Result<()> {
    let idle_from = first_deadline.checked_sub(SETTLE * 2);
    if let Some(at) = idle_from {
        tokio::time::sleep_until(at.into()).await;
    }
    let idle = ctx.server_cpu.start();
    tokio::time::sleep(SETTLE).await;
    let idle = idle.stop().unwrap_or_default().as_secs_f64() / SETTLE.as_secs_f64();
    let started = Instant::now();
    let meter = ctx.server_cpu.start();
    let mut left = stored(ctx, stream).await?;
    while left > 0 && started.elapsed() < PASS_LIMIT + SETTLE * 2 {
        tokio::time::sleep(STATE_EVERY).await;
        left = stored(ctx, stream).await?;
    }
    let span = started.elapsed();
    let cpu = meter.stop().unwrap_or_default().as_secs_f64();
    let net = (cpu - idle * span.as_secs_f64()).max(0.0);
    r.invariants.push(Invariant::check(
        EXPIRED_REMOVED,
        left == 0,
        format!("{left} of {n} TTL'd messages still stored {span:?} after the pass began"),
    ));
    r.metrics.push(Metric::new(
        EXPIRY_CPU_PER_MSG,
        "us",
        net * 1e6 / n as f64,
        Direction::Lower,
    ));
    r.metrics.push(Metric::new(
        "expiry_pass_span",
        "s",
        span.as_secs_f64(),
        Direction::None,
    ));
    Ok(())
}

async fn stored(ctx: &RunContext, stream: &str) -> Result<u64> {
    ctx.provisioner
        .stream_info(stream)
        .await
        .map(|i| i.state.messages)
        .ok_or_else(|| anyhow!("stream info of {stream} unavailable"))
}

/// The server's resident memory, bytes.
fn rss(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading the server's memory (pid {pid})"))?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| anyhow!("no VmRSS in /proc/{pid}/status"))?;
    Ok(kb * 1024)
}

/// Publishes `cost_messages` as fast as the server takes them, with
/// `Nats-TTL` on each when `ttl` is given.
async fn fill(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    (stream, base): (&str, &str),
    plan: &Plan,
    ttl: Option<Duration>,
) -> Result<()> {
    let mut publish = PublishPlan::simple(
        1,
        plan.message_size,
        MsgId::None,
        4096,
        Duration::from_secs(10),
    );
    if let Some(ttl) = ttl {
        publish.headers = vec![(TTL_HEADER.to_string(), ttl.as_secs().to_string())];
    }
    let spec = DriveSpec {
        streams: vec![crate::drive::StreamLoad::new(
            stream,
            vec![format!("{base}.0")],
        )],
        readers: Vec::new(),
        shared_connections: None,
        label: format!("{} cost fill", scenario.name()),
        publish,
        rate: None,
        count: Some(plan.cost_messages),
        warmup: Duration::ZERO,
        duration: Duration::ZERO,
        drain_timeout: scenario.common.drain_timeout,
        msg_id_prefix: String::new(),
        seed: 1,
        fault: None,
        avoid_server: None,
    };
    let outcome = drive(ctx, &spec).await?;
    let stored = outcome.counts.persisted;
    if stored != plan.cost_messages || !outcome.errors.is_empty() {
        return Err(anyhow!(
            "filling {stream} stored {stored} of {} messages: {}",
            plan.cost_messages,
            outcome.errors.join("; ")
        ));
    }
    Ok(())
}
