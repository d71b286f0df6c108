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

/// Leadership moves tried before giving up on a copy leader apart from
/// the origin's, the client's and the publishers' nodes.
const STEP_DOWNS: usize = 12;

/// Cuts the routes of the node leading the copy `after` into the
/// publishing, heals them `lasts` later. The copy's leadership is first
/// moved (step-downs) off the node leading the origin and off the nodes
/// jsbench's client and publishers are connected to, so the cut stops the copying and
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
    let started = tokio::time::Instant::now();
    // Chosen once the publishers are connected: a publisher on the node
    // cut off could publish nothing (no responders) until the heal.
    let publishers = publisher_nodes(ctx, t.origins.len()).await;
    let node = copy_leader_apart(ctx, t, &publishers).await?;
    tokio::time::sleep(after.saturating_sub(started.elapsed())).await;
    let names = faults.node_names();
    let index = names
        .iter()
        .position(|n| *n == node)
        .ok_or_else(|| anyhow!("the copy's leader {node} is none of the cluster's {names:?}"))?;
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

/// The nodes the variant's `n` publishers landed on, once all have
/// connected (the drive connects them as the fault starts), waiting
/// [`PUBLISHERS_WAIT`] at most.
async fn publisher_nodes(ctx: &RunContext, n: usize) -> Vec<String> {
    let started = tokio::time::Instant::now();
    loop {
        let nodes: Vec<String> = ctx
            .connect
            .attached(n)
            .into_iter()
            .filter(|(role, _)| role.starts_with("publisher-"))
            .map(|(_, node)| node)
            .collect();
        if nodes.len() >= n || started.elapsed() >= PUBLISHERS_WAIT {
            return nodes;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How long the cut waits for the publishers to connect.
const PUBLISHERS_WAIT: Duration = Duration::from_secs(5);

/// The node to cut: the copy's leader, once it is on none of the nodes
/// jsbench's client (which reads the copy) and publishers are connected
/// to, and the origin's leader is elsewhere. On three nodes with client
/// and publisher on two of them that is one node for the copy and
/// another for the origin, so both leaderships are moved (step-downs)
/// until they land so.
async fn copy_leader_apart(
    ctx: &RunContext,
    t: &Topology,
    publishers: &[String],
) -> Result<String> {
    let js = ctx.provisioner.jetstream();
    let client = js.client().server_info().server_name;
    let (mut copy, mut origin) = (String::new(), String::new());
    for _ in 0..STEP_DOWNS {
        copy = leader(js, &t.copy).await?;
        origin = leader(js, &t.origins[0].name).await?;
        let moving = if copy == client || publishers.contains(&copy) {
            &t.copy
        } else if copy == origin {
            &t.origins[0].name
        } else {
            return Ok(copy);
        };
        let _: serde_json::Value = js
            .request(format!("STREAM.LEADER.STEPDOWN.{moving}"), &())
            .await
            .with_context(|| format!("moving the leadership of {moving}"))?;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(anyhow!(
        "after {STEP_DOWNS} step-downs the copy {} leads on {copy}, which the origin's leader \
         ({origin}), jsbench's client ({client}) or a publisher ({publishers:?}) shares; a cut \
         there would stop the publishing or the reading too",
        t.copy
    ))
}
