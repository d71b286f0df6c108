//! The streams of one variant: its origins (run-scoped, republishing what
//! they store for [`super::watch::listen`]) and the copy the
//! server fills from them: a mirror, an aggregate of sources, or a source
//! of a work-queue origin through a durable jsbench creates itself
//! (durable sourcing, ADR-60); for the `leaf` variant, the leafnode
//! server the copy lives on.

use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use async_nats::jetstream::response::Response;
use async_nats::jetstream::stream::{self, External, Republish, Source, StreamConsumerSource};

use super::plan::{Mode, Plan};
use super::watch::stored_subject;
use crate::drive::RunContext;
use crate::profile::CommonPlan;
use crate::scenario::Scope;
use crate::server::LeafHandle;
use crate::server::leaf::HUB_DOMAIN;
use crate::server::relay::Shape;
use crate::streams::provision::{Provisioner, stream_config};

/// The flow-control durable's idle heartbeat: with nothing new to send,
/// the origin's server asks for flow control this often, and the answer
/// acknowledges (on a work-queue origin: removes) what the copy stored.
pub const SOURCING_HEARTBEAT: Duration = Duration::from_secs(1);

/// One origin stream.
#[derive(Debug, Clone)]
pub struct Origin {
    pub name: String,
    /// Its subjects are `<base>.*`; it is published to on `<base>.m`.
    pub base: String,
}

impl Origin {
    pub fn subject(&self) -> String {
        format!("{}.m", self.base)
    }
}

/// A variant's streams.
#[derive(Debug, Clone)]
pub struct Topology {
    pub origins: Vec<Origin>,
    pub copy: String,
    /// The work-queue origin's sourcing durable, jsbench's.
    pub durable: Option<String>,
}

/// The names of `mode`'s streams, before any is made.
pub fn plan(ctx: &RunContext, common: &CommonPlan, mode: Mode, origins: usize) -> Topology {
    let n = if mode == Mode::Source { origins } else { 1 };
    let label = mode.label();
    let origins = (0..n)
        .map(|i| {
            let part = format!("{label}_o{i}");
            Origin {
                name: ctx.names.stream(common.name(), &part),
                base: ctx.names.subject(common.name(), &part),
            }
        })
        .collect();
    Topology {
        origins,
        copy: ctx.names.stream(common.name(), &format!("{label}_copy")),
        durable: mode
            .work_queue()
            .then(|| ctx.names.durable(common.name(), label)),
    }
}

/// Creates the origins, the work-queue origin's durable, then the copy;
/// the `leaf` variant's copy on the leaf server, through `leaf`. All in
/// the variant's scope, which deletes them.
pub async fn provision(
    s: &mut Scope<'_>,
    mode: Mode,
    t: &Topology,
    leaf: Option<&LeafSide>,
) -> Result<stream::Stream> {
    let ctx = s.ctx;
    for o in &t.origins {
        let mut config = stream_config(&o.name, &o.base, &ctx.server, &ctx.stream);
        config.retention = if mode.work_queue() {
            stream::RetentionPolicy::WorkQueue
        } else {
            stream::RetentionPolicy::Limits
        };
        config.republish = Some(Republish {
            source: format!("{}.*", o.base),
            destination: format!("{}.{{{{wildcard(1)}}}}", stored_subject(&o.base)),
            headers_only: true,
        });
        s.stream(config).await?;
    }
    if let Some(durable) = &t.durable {
        create_sourcing_durable(ctx, &t.origins[0], durable).await?;
    }
    let first = &t.origins[0];
    let mut config = stream_config(&t.copy, &first.base, &ctx.server, &ctx.stream);
    config.subjects = Vec::new();
    let source = |o: &Origin| Source {
        name: o.name.clone(),
        consumer: t
            .durable
            .as_ref()
            .map(|d| StreamConsumerSource::new(d.clone(), deliver_subject(o))),
        ..Default::default()
    };
    if let Some(leaf) = leaf {
        // One leaf server: one replica, wherever the hub's are.
        config.mirror = Some(mirror_across(&first.name));
        config.num_replicas = 1;
        config.placement = None;
        return s.stream_on(&leaf.provisioner, config).await;
    }
    if mode.mirror() {
        config.mirror = Some(source(first));
    } else {
        config.sources = Some(t.origins.iter().map(source).collect());
    }
    s.stream(config).await
}

/// Where the sourcing durable delivers: beside the origin's subjects.
fn deliver_subject(o: &Origin) -> String {
    format!("{}_deliver", o.base)
}

/// The durable a work-queue origin is sourced through, as ADR-60 asks:
/// push (a deliver subject), `ack_policy = flow_control`, flow control
/// and an idle heartbeat, no ack wait, no back-off, max deliver unset.
/// Sent as the API's JSON so every field is exactly what is named here.
/// nats-server 2.15.1 refuses an ack wait or back-off (10221), a max
/// deliver (10222) and a pull durable (10218); it turns flow control on
/// and sets a heartbeat of its own when they are left out (tests/lag.rs).
pub fn sourcing_durable_config(durable: &str, deliver: &str) -> serde_json::Value {
    serde_json::json!({
        "durable_name": durable,
        "ack_policy": "flow_control",
        "deliver_policy": "all",
        "deliver_subject": deliver,
        "flow_control": true,
        "idle_heartbeat": SOURCING_HEARTBEAT.as_nanos() as u64,
        "max_deliver": -1,
        "description": "created by jsbench: a copy sources its origin through it",
    })
}

async fn create_sourcing_durable(ctx: &RunContext, origin: &Origin, durable: &str) -> Result<()> {
    let request = serde_json::json!({
        "stream_name": origin.name,
        "config": sourcing_durable_config(durable, &deliver_subject(origin)),
        "action": "create",
    });
    let answer: Response<serde_json::Value> = ctx
        .provisioner
        .jetstream()
        .request(
            format!("CONSUMER.CREATE.{}.{durable}", origin.name),
            &request,
        )
        .await
        .with_context(|| format!("creating the sourcing durable {durable} on {}", origin.name))?;
    match answer {
        Response::Ok(_) => Ok(()),
        Response::Err { error } => Err(anyhow!(
            "the server refused the sourcing durable {durable} on {} (ack_policy flow_control, \
             nats-server 2.14 or later): {error}",
            origin.name
        )),
    }
}

// The `leaf` variant's other side: the leafnode server the copy lives
// on, reached directly (the copy is read there, not across the link), and
// its link to the hub slowed for the load and let go after.

/// The leaf's JetStream, and the link to slow.
pub struct LeafSide {
    pub provisioner: Provisioner,
    leaf: LeafHandle,
}

impl LeafSide {
    /// Connects to the run's leaf; a clear refusal when the run has none.
    pub async fn open(ctx: &RunContext) -> Result<LeafSide> {
        let Some(leaf) = ctx.leaf.clone() else {
            bail!(
                "the lag scenario's leaf variant mirrors onto a leafnode server: add --leafnode \
                 to jsbench run (it starts one beside the server jsbench starts; not with \
                 -s/--server)"
            );
        };
        let client = async_nats::connect(leaf.url())
            .await
            .with_context(|| format!("connecting to the leaf server at {}", leaf.url()))?;
        Ok(LeafSide {
            provisioner: Provisioner::new(
                async_nats::jetstream::new(client),
                ctx.provisioner.keeps(),
            ),
            leaf,
        })
    }

    /// How the link compresses now, from the leaf's `/leafz`: with the
    /// server's default (`s2_auto`) it follows the round trip time, and a
    /// compressed link carries more messages through the same bandwidth.
    pub async fn compression(&self) -> Option<String> {
        let leaf = self.leaf.clone();
        let links = tokio::task::spawn_blocking(move || leaf.links())
            .await
            .ok()?;
        links.ok()?.first().map(|l| l.compression.clone())
    }

    /// Slows the link to the plan's `leaf_bandwidth` and `leaf_delay`
    /// until the returned guard is dropped.
    pub fn throttle(&self, plan: &Plan) -> Throttle {
        self.leaf.shape(Shape {
            bandwidth: plan.leaf_bandwidth,
            delay: plan.leaf_delay,
        });
        Throttle(self.leaf.clone())
    }
}

/// The link slowed; dropped, it runs at loopback speed again (so the
/// streams are deleted and the next variant starts without the backlog).
pub struct Throttle(LeafHandle);

impl Drop for Throttle {
    fn drop(&mut self) {
        self.0.shape(Shape::default());
    }
}

/// A mirror of `origin` in the hub's domain, read through its API prefix.
pub fn mirror_across(origin: &str) -> Source {
    Source {
        name: origin.to_string(),
        external: Some(External {
            api_prefix: format!("$JS.{HUB_DOMAIN}.API"),
            delivery_prefix: None,
        }),
        ..Default::default()
    }
}
