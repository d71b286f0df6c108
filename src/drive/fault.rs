//! The restart scenario's fault, timed from inside the run-and-sample
//! phase: a server (or the stream's leader or a follower) killed with
//! SIGKILL, kept down, started again on its store, or its routes cut or
//! paused and let through again; the election of a new leader timed.

use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::jetstream;
use futures::StreamExt;
use futures::stream::FuturesUnordered;

use super::{DriveSpec, FaultOutcome, FaultPlan, RunContext};
use crate::profile::{FaultKind, FaultNode};
use crate::record::clock;
use crate::server::relay::Block;

/// Kills the planned node, waits out the downtime (and, for a stream
/// leader, the election of a new one), and starts it again. The caller's
/// loop pauses meanwhile; publishers and consumers carry on against the
/// remaining (or no) servers.
pub(super) async fn inject(
    ctx: &RunContext,
    spec: &DriveSpec,
    plan: FaultPlan,
) -> Result<FaultOutcome> {
    let faults = ctx.faults.clone().ok_or_else(|| {
        anyhow::anyhow!(
            "killing a server needs one jsbench started itself; this one was given with --server"
        )
    })?;
    let names = faults.node_names();
    let js = ctx.provisioner.jetstream();
    let leader_before = leader(js, spec.stream()).await;
    let node = match plan.node {
        FaultNode::Server => 0,
        // A lone server leads every stream it has.
        FaultNode::Leader if names.len() == 1 => 0,
        FaultNode::Leader => {
            let name = leader_before.clone().ok_or_else(|| {
                anyhow::anyhow!(
                    "stream {} reports no leader to kill (is it replicated?)",
                    spec.stream()
                )
            })?;
            names.iter().position(|n| *n == name).ok_or_else(|| {
                anyhow::anyhow!("the stream's leader {name} is not a node jsbench started")
            })?
        }
        FaultNode::Follower => {
            let name = follower(js, spec.stream()).await.ok_or_else(|| {
                anyhow::anyhow!(
                    "stream {} reports no follower to kill: a follower needs a replicated \
                     stream on a cluster (--cluster 3, replicas 3)",
                    spec.stream()
                )
            })?;
            names.iter().position(|n| *n == name).ok_or_else(|| {
                anyhow::anyhow!("the stream's follower {name} is not a node jsbench started")
            })?
        }
    };
    // Kill and restart block this worker thread only: block_in_place keeps
    // the restarted server's parent thread alive for the rest of the run.
    // Stamped as the signal goes: clients see the sockets close before
    // the kill has reaped the process.
    let killed_ns = clock::now_ns();
    let how = match plan.kind {
        FaultKind::Kill => None,
        FaultKind::Cut => Some(Block::Cut),
        FaultKind::Pause => Some(Block::Pause),
    };
    match how {
        None => tokio::task::block_in_place(|| faults.kill(node)).context("killing the server")?,
        Some(how) => faults
            .block_routes(node, how)
            .context("cutting the node's routes")?,
    }
    let faulted = names.get(node).cloned().unwrap_or_default();
    let mut outcome = FaultOutcome {
        node: faulted.clone(),
        kind: plan.kind,
        killed_ns,
        leader_before: leader_before.clone(),
        ..Default::default()
    };
    let back_at = clock::instant_at(killed_ns + plan.down_for.as_nanos() as u64);
    // The stream has a leader again when its info is answered: the request
    // goes to the leader, and a dead one answers nothing. Watched while the
    // node is down and after it is back, up to a deadline fixed now. A
    // probe goes out every PROBE_EVERY, each waiting up to PROBE_TIMEOUT,
    // so the first answer arrives within a probe interval and a round
    // trip of the election, rather than at the next request timeout.
    // A lone server elects nothing: its stream is back when it is.
    // A node cut off from its peers may still answer as the leader it
    // was: while it is cut off, only another node's answer ends the
    // election; once healed, any answer does (it may have kept the lead).
    let healed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = (plan.node == FaultNode::Leader && names.len() > 1).then(|| {
        let (js, stream) = (js.clone(), spec.stream().to_string());
        let (faulted, healed) = (faulted.clone(), healed.clone());
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + ELECTION_WATCH;
            let mut probes = FuturesUnordered::new();
            let mut every = tokio::time::interval(PROBE_EVERY);
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => return None,
                    _ = every.tick() => probes.push(leader_within(&js, &stream, PROBE_TIMEOUT)),
                    Some(answer) = probes.next(), if !probes.is_empty() => {
                        let settled = |l: &String| *l != faulted || healed.load(std::sync::atomic::Ordering::Relaxed);
                        if let Some(now_leader) = answer.filter(settled) {
                            return Some((clock::now_ns(), now_leader));
                        }
                    }
                }
            }
        })
    });
    tokio::time::sleep_until(back_at.into()).await;
    match how {
        None => {
            tokio::task::block_in_place(|| faults.restart(node)).context("restarting the server")?
        }
        Some(_) => faults
            .heal_routes(node)
            .context("letting the node's routes through again")?,
    }
    healed.store(true, std::sync::atomic::Ordering::Relaxed);
    outcome.restarted_ns = clock::now_ns();
    if let Some(watcher) = watcher {
        if let Ok(Some((at, new_leader))) = watcher.await {
            outcome.election_gap = Some(Duration::from_nanos(at - killed_ns));
            outcome.leader_after = Some(new_leader);
        }
    } else if names.len() > 1 {
        // No election was due: who leads now says whether one happened
        // anyway.
        outcome.leader_after = leader(js, spec.stream()).await;
    }
    Ok(outcome)
}

/// A replica of the stream that is not its leader, from stream info.
async fn follower(js: &jetstream::Context, stream: &str) -> Option<String> {
    let mut handle = js.get_stream(stream).await.ok()?;
    let info = handle.info().await.ok()?;
    let cluster = info.cluster.as_ref()?;
    cluster
        .replicas
        .iter()
        .map(|p| p.name.clone())
        .find(|name| Some(name) != cluster.leader.as_ref())
}

/// How long after a kill a new stream leader is waited for.
const ELECTION_WATCH: Duration = Duration::from_secs(30);
/// How often the stream is asked for its leader while one is awaited.
const PROBE_EVERY: Duration = Duration::from_millis(50);
/// How long one such question waits for its answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The stream's current leader, from stream info; `None` while it has
/// none, or when the question went unanswered.
pub async fn leader(js: &jetstream::Context, stream: &str) -> Option<String> {
    leader_within(js, stream, PROBE_TIMEOUT).await
}

/// The stream's leader, if its info is answered within `timeout`: the
/// context's own request timeout (seconds) is too coarse to time an
/// election with.
async fn leader_within(js: &jetstream::Context, stream: &str, timeout: Duration) -> Option<String> {
    let response: jetstream::response::Response<jetstream::stream::Info> = tokio::time::timeout(
        timeout,
        js.request(format!("STREAM.INFO.{stream}"), &serde_json::json!({})),
    )
    .await
    .ok()?
    .ok()?;
    match response {
        jetstream::response::Response::Ok(info) => info.cluster.and_then(|c| c.leader),
        jetstream::response::Response::Err { .. } => None,
    }
}
