//! The faults a variant meets while the copy fills: the work-queue
//! origin's sourcing durable paused (`wq_paused`), or the node leading the
//! copy cut off from the cluster's routes (`cut`). Each returns when its
//! fault began and ended (Unix ns on [`clock`]) and what the server said.

use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};
use async_nats::jetstream::stream;

use super::topology::Topology;
use crate::drive::RunContext;
use crate::record::clock;
use crate::server::relay::Block;

/// A fault as it happened.
#[derive(Debug, Clone, Default)]
pub struct Happened {
    pub began_ns: u64,
    pub ended_ns: u64,
    /// `wq_paused`: the server answered `paused: true`.
    pub paused: Option<bool>,
    /// `cut`: the node cut off (it led the copy), healed again.
    pub cut: Option<String>,
}

/// Pauses the sourcing durable `after` into the publishing until `lasts`
/// later; the server resumes it on its own at that instant.
pub async fn pause(
    ctx: &RunContext,
    t: &Topology,
    after: Duration,
    lasts: Duration,
) -> Result<Happened> {
    tokio::time::sleep(after).await;
    let durable = t
        .durable
        .as_deref()
        .expect("a work-queue variant's durable");
    let origin = &t.origins[0].name;
    let stream = ctx
        .provisioner
        .jetstream()
        .get_stream_no_info(origin)
        .await
        .with_context(|| format!("getting {origin} to pause its sourcing durable"))?;
    let began_ns = clock::now_ns();
    let until = time::OffsetDateTime::now_utc() + lasts;
    let answer = stream
        .pause_consumer(durable, until)
        .await
        .with_context(|| format!("pausing the sourcing durable {durable}"))?;
    Ok(Happened {
        began_ns,
        ended_ns: began_ns + lasts.as_nanos() as u64,
        paused: Some(answer.paused),
        cut: None,
    })
}

/// Leaders tried for the copy before giving up on one apart from the
/// origin's and the client's node.
const STEP_DOWNS: usize = 6;

/// Cuts the routes of the node leading the copy `after` into the
/// publishing, heals them `lasts` later. The copy's leadership is first
/// moved (step-downs) off the node leading the origin and off the node
/// jsbench's client is connected to, so the cut stops the copying and
/// nothing else: publishing goes on, the copy's other replicas elect a
/// leader that resumes it.
pub async fn cut(
    ctx: &RunContext,
    t: &Topology,
    after: Duration,
    lasts: Duration,
) -> Result<Happened> {
    let faults = ctx.faults.clone().ok_or_else(|| {
        anyhow!("the cut variant cuts a node's routes: run it on a local cluster (--cluster 3)")
    })?;
    let node = copy_leader_apart(ctx, t).await?;
    let names = faults.node_names();
    let index = names
        .iter()
        .position(|n| *n == node)
        .ok_or_else(|| anyhow!("the copy's leader {node} is none of the cluster's {names:?}"))?;
    tokio::time::sleep(after).await;
    let f = faults.clone();
    tokio::task::spawn_blocking(move || f.block_routes(index, Block::Cut))
        .await
        .context("cutting the copy leader's routes")??;
    let began_ns = clock::now_ns();
    tokio::time::sleep(lasts).await;
    tokio::task::spawn_blocking(move || faults.heal_routes(index))
        .await
        .context("healing the copy leader's routes")??;
    Ok(Happened {
        began_ns,
        ended_ns: clock::now_ns(),
        paused: None,
        cut: Some(node),
    })
}

async fn leader(js: &async_nats::jetstream::Context, name: &str) -> Result<String> {
    let mut s: stream::Stream = js
        .get_stream(name)
        .await
        .with_context(|| format!("getting stream {name}"))?;
    let info = s
        .info()
        .await
        .with_context(|| format!("stream info of {name}"))?;
    info.cluster
        .as_ref()
        .and_then(|c| c.leader.clone())
        .ok_or_else(|| anyhow!("stream {name} has no leader: is this a cluster?"))
}

async fn copy_leader_apart(ctx: &RunContext, t: &Topology) -> Result<String> {
    let js = ctx.provisioner.jetstream();
    let origin = leader(js, &t.origins[0].name).await?;
    let client = js.client().server_info().server_name;
    for _ in 0..STEP_DOWNS {
        let copy = leader(js, &t.copy).await?;
        if copy != origin && copy != client {
            return Ok(copy);
        }
        let _: serde_json::Value = js
            .request(format!("STREAM.LEADER.STEPDOWN.{}", t.copy), &())
            .await
            .with_context(|| format!("moving the leadership of {}", t.copy))?;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(anyhow!(
        "the copy {} kept its leader on the origin's ({origin}) or the client's ({client}) node \
         after {STEP_DOWNS} step-downs; a cut would stop the publishing too",
        t.copy
    ))
}
