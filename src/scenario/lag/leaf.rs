//! The `leaf` variant's other side: the leafnode server the copy lives
//! on, reached directly (the copy is read there, not across the link), and
//! its link to the hub slowed for the load and let go after.

use anyhow::{Context as _, Result, bail};
use async_nats::jetstream::stream::{External, Source};

use super::plan::Plan;
use crate::drive::RunContext;
use crate::server::LeafHandle;
use crate::server::leaf::HUB_DOMAIN;
use crate::server::relay::Shape;
use crate::streams::provision::Provisioner;

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
