//! The `cost` variant: what pending TTL'd messages cost the server.
//! `cost_messages` are published without a TTL into one stream and as
//! many with `Nats-TTL: cost_ttl` into a second; the server's resident
//! memory (/proc/<pid>/status VmRSS) is read before and after each fill,
//! both streams kept, so each delta is that fill's own. Then the server's
//! CPU is read (process accounting) from just before the first deadline
//! until stream info reports the TTL stream empty, less the server's idle
//! CPU over as long: the expiry pass's CPU per message. Needs the server's
//! process, so only one node whose pid jsbench knows is weighed (elsewhere
//! both checks read "not applicable" with the reason, and the variant
//! fails for having checked nothing); RSS moves with the Go runtime's
//! heap, so the figures are what one fill added, not a model of the store.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};

use super::verify::{EXPIRED_REMOVED, NOTHING_REMOVED_EARLY};
use super::{EXPIRY_CPU_PER_MSG, Plan, SERVER_BYTES_PER_PLAIN_MSG, SERVER_BYTES_PER_TTL_MSG};
use crate::drive::{DriveSpec, RunContext};
use crate::record::metrics::Direction;
use crate::scenario::Scope;
use crate::scenario::checks;
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

/// The cost variant: both streams (deleted by the scope), both fills and
/// the expiry pass.
pub async fn weigh(s: &mut Scope<'_>, plan: &Plan, r: &mut VariantResult) -> Result<()> {
    r.param("cost_messages", plan.cost_messages);
    r.param("cost_ttl_s", plan.cost_ttl.as_secs());
    let pid = match weighed(&s.ctx.server_cpu) {
        Ok(pid) => pid,
        Err(why) => {
            // Its checks say why they could not apply, and the variant
            // fails for having checked nothing rather than pass in silence.
            let early = Invariant::not_applicable(NOTHING_REMOVED_EARLY, why);
            let see = format!("the server was not weighed: see \"{NOTHING_REMOVED_EARLY}\"");
            let removed = Invariant::not_applicable(EXPIRED_REMOVED, see);
            r.invariants.extend([early, removed]);
            return Ok(());
        }
    };
    let (names, scenario) = (&s.ctx.names, s.scenario.name());
    let [plain, ttl] =
        ["cost-plain", "cost-ttl"].map(|v| (names.stream(scenario, v), names.subject(scenario, v)));
    for (stream, base) in [&plain, &ttl] {
        let config = stream_config(stream, base, &s.ctx.server, &s.ctx.stream);
        s.stream(ttl_stream_config(config, None)).await?;
    }

    let n = plan.cost_messages;
    tokio::time::sleep(SETTLE).await;
    let before = rss(pid)?;
    fill(s, &plain, plan, None).await?;
    tokio::time::sleep(SETTLE).await;
    let after_plain = rss(pid)?;
    let ttl_started = Instant::now();
    fill(s, &ttl, plan, Some(plan.cost_ttl)).await?;
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
    let held = stored(s.ctx, &ttl.0).await?;
    r.invariants.push(Invariant::check(
        NOTHING_REMOVED_EARLY,
        held == n,
        format!(
            "{held} of {n} TTL'd messages stored before their deadline ({filled_in:?} to publish)"
        ),
    ));
    let per = |d: u64| d as f64 / n as f64;
    r.metric(
        SERVER_BYTES_PER_PLAIN_MSG,
        "bytes",
        per(after_plain.saturating_sub(before)),
        Direction::Lower,
    );
    r.metric(
        SERVER_BYTES_PER_TTL_MSG,
        "bytes",
        per(after_ttl.saturating_sub(after_plain)),
        Direction::Lower,
    );
    expiry_pass(s.ctx, &ttl.0, n, ttl_started + plan.cost_ttl, r).await
}

/// The one server process whose memory and CPU are read, or why none is.
fn weighed(cpu: &ServerCpu) -> Result<u32, &'static str> {
    match cpu {
        ServerCpu::Processes(pids) => match pids.as_slice() {
            &[pid] => Ok(pid),
            _ => Err(
                "a cluster's memory is not weighed: run the cost variant on one node \
                 (without --cluster, or with one --server-pid)",
            ),
        },
        _ => Err(
            "the server's memory and CPU are read from its process: run on the server \
             jsbench starts (no --server), or give its pid on this host with --server-pid",
        ),
    }
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
    let idle = idle.stop().map(|d| d.as_secs_f64() / SETTLE.as_secs_f64());
    let started = Instant::now();
    let meter = ctx.server_cpu.start();
    let mut left = stored(ctx, stream).await?;
    while left > 0 && started.elapsed() < PASS_LIMIT + SETTLE * 2 {
        tokio::time::sleep(STATE_EVERY).await;
        left = stored(ctx, stream).await?;
    }
    let span = started.elapsed();
    let cpu = meter.stop().map(|d| d.as_secs_f64());
    r.invariants.push(Invariant::check(
        EXPIRED_REMOVED,
        left == 0,
        format!("{left} of {n} TTL'd messages still stored {span:?} after the pass began"),
    ));
    match cpu_per_message(cpu, idle, span, n) {
        Ok(per) => r.metric(EXPIRY_CPU_PER_MSG, "us", per, Direction::Lower),
        Err(why) => r.warnings.push(format!(
            "{why} ({}): no {EXPIRY_CPU_PER_MSG}",
            ctx.server_cpu.describe()
        )),
    }
    r.metric("expiry_pass_span", "s", span.as_secs_f64(), Direction::None);
    Ok(())
}

/// The expiry pass's server CPU per message, µs: `cpu` seconds over
/// `span` less `idle` CPU seconds per second over as long. A meter that
/// could not read the server, or a pass that used no more than idle (the
/// second read for idle was the busier), gives no figure and says why: 0
/// would read as an expiry pass that cost nothing.
fn cpu_per_message(
    cpu: Option<f64>,
    idle: Option<f64>,
    span: Duration,
    n: u64,
) -> Result<f64, String> {
    let (Some(cpu), Some(idle)) = (cpu, idle) else {
        return Err("the server's CPU could not be read".into());
    };
    let idle = idle * span.as_secs_f64();
    if cpu <= idle {
        return Err(format!(
            "the expiry pass used {cpu:.3} s of the server's CPU, no more than its idle \
             {idle:.3} s over as long"
        ));
    }
    Ok((cpu - idle) * 1e6 / n as f64)
}

async fn stored(ctx: &RunContext, stream: &str) -> Result<u64> {
    Ok(ctx.provisioner.stream_info(stream).await?.state.messages)
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

/// Publishes `cost_messages` to `<base>.0` as fast as the server takes
/// them, with `Nats-TTL` on each when `ttl` is given: each stored once,
/// so the stream's growth is theirs alone.
async fn fill(
    s: &Scope<'_>,
    (stream, base): &(String, String),
    plan: &Plan,
    ttl: Option<Duration>,
) -> Result<()> {
    let mut spec = DriveSpec::fill(
        format!("{} fill", s.drive_label()),
        stream,
        vec![format!("{base}.0")],
        (plan.cost_messages, plan.message_size),
        s.scenario.common.drain_timeout,
    );
    if let Some(ttl) = ttl {
        spec.publish.headers = vec![(TTL_HEADER.to_string(), ttl.as_secs().to_string())];
    }
    checks::filled_in_order(&s.drive(&spec).await?, plan.cost_messages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_one_server_process_is_weighed_and_anything_else_says_which_flag() {
        assert_eq!(weighed(&ServerCpu::Processes(vec![7])), Ok(7));
        let cluster = weighed(&ServerCpu::Processes(vec![7, 8])).unwrap_err();
        assert!(cluster.contains("--cluster"), "{cluster}");
        for cpu in [
            ServerCpu::Unavailable,
            ServerCpu::Varz(vec!["http://h:8222".into()]),
        ] {
            let why = weighed(&cpu).unwrap_err();
            assert!(why.contains("--server-pid"), "{why}");
        }
    }

    /// 0.5 s of CPU over a 2 s pass, 0.1 s a second when idle: 0.3 s for
    /// 1,000 messages. A meter that could not read, or an idle second
    /// busier than the pass, gives no figure and says why.
    #[test]
    fn an_expiry_pass_measured_below_idle_or_unread_gives_no_figure() {
        let span = Duration::from_secs(2);
        let per = cpu_per_message(Some(0.5), Some(0.1), span, 1000).unwrap();
        assert!((per - 300.0).abs() < 1e-6, "{per}");
        let unread = cpu_per_message(None, Some(0.1), span, 1000).unwrap_err();
        assert!(unread.contains("could not be read"), "{unread}");
        let below = cpu_per_message(Some(0.1), Some(0.1), span, 1000);
        assert!(
            below.as_ref().is_err_and(|why| why.contains("idle")),
            "{below:?}"
        );
    }
}
