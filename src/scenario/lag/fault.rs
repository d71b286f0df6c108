//! The faults a variant meets while the copy fills: the work-queue
//! origin's sourcing durable paused (`wq_paused`), or the node leading the
//! copy cut off from the cluster's routes (`cut`) or killed and restarted
//! (`kill`), chosen and given the copy's leadership before the load. Each returns when its fault began
//! and ended (Unix ns on [`clock`]) and what the server said.

use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};

use super::plan::{Mode, Plan};
use super::topology::Topology;
use crate::drive::RunContext;
use crate::record::clock;
use crate::server::fault::FaultHandle;
use crate::server::relay::Block;
use crate::variant::Invariant;

pub const PAUSED: &str = "the server paused the sourcing durable";
pub const CUT: &str = "the copy's node was cut off and healed";
pub const KILL: &str = "the copy's leader was killed and restarted";

/// A fault as it happened.
#[derive(Debug, Clone)]
pub struct Happened {
    pub began_ns: u64,
    pub ended_ns: u64,
    /// That it happened: `wq_paused`'s server answered `paused: true`;
    /// `cut`'s and `kill`'s node struck (it led the copy), back again.
    pub done: Invariant,
}

/// The variant's fault, from about the first publish (started with the
/// drive, which connects and then waits its lead-in before the first
/// send): none, a pause, or a strike at `struck` (arranged before the
/// load).
pub async fn inject(
    ctx: &RunContext,
    plan: &Plan,
    mode: Mode,
    t: &Topology,
    struck: Option<&Struck>,
) -> Result<Option<Happened>> {
    let (after, lasts) = match mode {
        Mode::WqPaused => (plan.pause_after, plan.pause_for),
        Mode::Cut | Mode::Kill => (plan.cut_after, plan.down_for),
        Mode::Mirror | Mode::Source | Mode::WqSource | Mode::Leaf => return Ok(None),
    };
    tokio::time::sleep(ctx.lead_in + after).await;
    match struck {
        None => pause(ctx, t, lasts).await,
        Some(node) => strike(ctx, t, node, mode, lasts).await,
    }
    .map(Some)
}

/// Pauses the sourcing durable until `lasts` later; the server resumes
/// it on its own at that instant.
async fn pause(ctx: &RunContext, t: &Topology, lasts: Duration) -> Result<Happened> {
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
    let done = "the pause request answered paused: true";
    Ok(Happened {
        began_ns,
        ended_ns: began_ns + lasts.as_nanos() as u64,
        done: Invariant::check(PAUSED, answer.paused, done),
    })
}

/// The node a `cut` or `kill` variant strikes, chosen and given the
/// copy's leadership before any load.
pub struct Struck {
    pub name: String,
    index: usize,
    /// Its client URL: the load's clients stay off it.
    pub url: String,
    faults: FaultHandle,
}

/// How long a moved leadership may take to settle where it was asked.
const SETTLE: Duration = Duration::from_secs(15);

/// Chooses the node to strike and moves the copy's leadership onto it,
/// before the load: a node that leads no origin and is not the one
/// jsbench's client (which reads the copy) is connected to. On three
/// nodes with the client on one and an origin leading on another that
/// leaves one; when the origins' leaders and the client cover every
/// node, the origins' leaderships move to the client's node first. Each
/// move names the new leader (a step-down with a preferred server), so
/// where leadership lands is decided, not drawn, and nothing is moved
/// while messages flow: a moved origin answers no publish until its new
/// leader is elected. The load's clients then stay off the node
/// ([`crate::drive::DriveSpec::avoid_server`]).
pub async fn arrange(ctx: &RunContext, t: &Topology, how: Mode) -> Result<Struck> {
    let faults = ctx.faults.clone().ok_or_else(|| {
        anyhow!(
            "the {} variant strikes one node of a cluster jsbench started: run it on a \
             local cluster (--cluster 3)",
            how.label()
        )
    })?;
    let (names, urls) = (faults.node_names(), faults.client_urls());
    let js = ctx.provisioner.jetstream();
    let client = js.client().server_info().server_name;
    let mut leaders = Vec::new();
    for o in &t.origins {
        leaders.push(leader(js, &o.name).await?);
    }
    let apart = |leaders: &[String]| {
        names
            .iter()
            .position(|n| *n != client && !leaders.contains(n))
    };
    let index = match apart(&leaders) {
        Some(i) => i,
        None => {
            for (o, l) in t.origins.iter().zip(&mut leaders) {
                if *l != client {
                    move_leader(js, &o.name, &client).await?;
                    *l = client.clone();
                }
            }
            apart(&leaders).ok_or_else(|| {
                anyhow!(
                    "the {} needs a node apart from jsbench's client ({client}) and the \
                     origins' leaders: the cluster has only {names:?}",
                    how.label()
                )
            })?
        }
    };
    let name = names[index].clone();
    if leader(js, &t.copy).await? != name {
        move_leader(js, &t.copy, &name).await?;
    }
    let url = urls.get(index).cloned().ok_or_else(|| {
        anyhow!("no client URL for node {name}: these servers cannot be struck one by one")
    })?;
    Ok(Struck {
        name,
        index,
        url,
        faults,
    })
}

/// Asks `stream`'s leader to hand its leadership to `to`, and waits
/// until it has.
async fn move_leader(js: &async_nats::jetstream::Context, stream: &str, to: &str) -> Result<()> {
    let body = serde_json::json!({ "placement": { "preferred": to } });
    let answer: serde_json::Value = js
        .request(format!("STREAM.LEADER.STEPDOWN.{stream}"), &body)
        .await
        .with_context(|| format!("moving the leadership of {stream} to {to}"))?;
    if let Some(e) = answer.get("error") {
        return Err(anyhow!(
            "the server refused to move the leadership of {stream} to {to}: {e}"
        ));
    }
    // A new leader answers stream info; until then the old one may
    // still, or nobody.
    let moved = async {
        while leader(js, stream).await.ok().as_deref() != Some(to) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(SETTLE, moved)
        .await
        .map_err(|_| anyhow!("the leadership of {stream} did not reach {to} within {SETTLE:?}"))
}

/// Strikes `node` (leading the copy since [`arrange`]) and ends the
/// outage `lasts` later (heal, or restart): the copying stops and nothing
/// else, the publishing goes on. Fails, striking nothing, if the copy's
/// leadership left the node on its own meanwhile.
async fn strike(
    ctx: &RunContext,
    t: &Topology,
    node: &Struck,
    how: Mode,
    lasts: Duration,
) -> Result<Happened> {
    let now = leader(ctx.provisioner.jetstream(), &t.copy).await?;
    if now != node.name {
        return Err(anyhow!(
            "the copy {}'s leadership moved from {} to {now} on its own before the {}: \
             one there could stop the publishing too, so none was made",
            t.copy,
            node.name,
            how.label()
        ));
    }
    let (index, cut) = (node.index, how == Mode::Cut);
    let (f, faults) = (node.faults.clone(), node.faults.clone());
    tokio::task::spawn_blocking(move || match cut {
        true => f.block_routes(index, Block::Cut),
        false => f.kill(index),
    })
    .await
    .context("striking the copy's leader")?
    .with_context(|| format!("{} of {}", how.label(), node.name))?;
    let began_ns = clock::now_ns();
    tokio::time::sleep(lasts).await;
    tokio::task::spawn_blocking(move || match cut {
        true => faults.heal_routes(index),
        false => faults.restart(index),
    })
    .await
    .context("ending the outage of the copy's leader")?
    .with_context(|| format!("ending the {} of {}", how.label(), node.name))?;
    let (name, done) = match cut {
        true => (CUT, "cut off and healed"),
        false => (KILL, "killed and restarted"),
    };
    let detail = format!("{}, the copy's leader, {done}", node.name);
    Ok(Happened {
        began_ns,
        ended_ns: clock::now_ns(),
        done: Invariant::check(name, true, detail),
    })
}

/// The stream's leader, or why there is none to strike or move.
async fn leader(js: &async_nats::jetstream::Context, name: &str) -> Result<String> {
    crate::drive::stream_leader(js, name).await.ok_or_else(|| {
        anyhow!("stream {name} has no leader (or did not answer): is this a cluster?")
    })
}
