//! Scenarios: one module per row of the design's scenario table, each
//! reading as provision, drive, measure, verify.

pub mod ack;
pub mod backpressure;
pub mod checks;
pub mod dlq;
pub mod fanout;
pub mod idempotence;
pub mod latency;
pub mod outage;
pub mod publish;
pub mod redelivery;
pub mod replay;
pub mod restart;
pub mod resume;
pub mod search;
pub mod shape;

use anyhow::Result;

use crate::drive::RunContext;
use crate::profile::ScenarioPlan;
use crate::variant::{VariantResult, VariantSink};

/// The names of a variant's stream, its subjects and its durable.
pub struct VariantNames {
    pub stream: String,
    /// Subjects are `<base>.<n>`.
    pub base: String,
    pub durable: String,
}

/// The provision step most scenarios share: the variant's stream (storage
/// and replicas from the server plan) and one pull durable reading it.
pub async fn provision_durable(
    ctx: &RunContext,
    scenario: &str,
    variant: &str,
    consumer: &crate::profile::ConsumerPlan,
) -> Result<VariantNames> {
    let names = VariantNames {
        stream: ctx.names.stream(scenario, variant),
        base: ctx.names.subject(scenario, variant),
        durable: ctx.names.durable(scenario, variant),
    };
    let stream = ctx
        .provisioner
        .create_stream(crate::streams::provision::stream_config(
            &names.stream,
            &names.base,
            &ctx.server,
            &ctx.stream,
        ))
        .await?;
    ctx.provisioner
        .create_consumer(
            &stream,
            crate::streams::provision::durable_config(&names.durable, consumer, &names.base),
            consumer.pedantic,
        )
        .await?;
    Ok(names)
}

/// How many messages a variant's stream holds after its drive, with its
/// placement (leader, replicas) added to the results: asked whatever the
/// drive's fate, so a failed variant still says where it ran. `None` when
/// stream info is unavailable, which the stream-holds check reports.
pub async fn record_stream(ctx: &RunContext, stream: &str, r: &mut VariantResult) -> Option<u64> {
    let info = ctx.provisioner.stream_info(stream).await;
    r.streams
        .extend(info.as_ref().map(crate::streams::provision::placement));
    info.map(|i| i.state.messages)
}

/// Runs one scenario of a profile: all its variants once per combination
/// of its `[scenario.stream]` lists (storage, retention, discard) and of
/// its consumer's swept keys (kind, pull tuning), each combination's
/// variants named with its suffix and on streams of their own names.
pub async fn run(
    ctx: &mut RunContext,
    plan: &ScenarioPlan,
    sink: &mut dyn VariantSink,
) -> Result<()> {
    let streams = plan.common().stream.settings();
    let pulls = plan.pull_combinations();
    let mut first = true;
    for settings in streams {
        for (pull_suffix, pulled) in &pulls {
            if !first {
                // With --keep the previous combination's streams are still
                // there under the same variant names.
                ctx.names = crate::streams::provision::Names::generate();
            }
            first = false;
            ctx.stream = settings.clone();
            let suffix: Vec<&str> = [settings.suffix.as_deref(), pull_suffix.as_deref()]
                .into_iter()
                .flatten()
                .collect();
            let mut labelled = OnStream {
                inner: &mut *sink,
                recorded: plan,
                settings: &ctx.stream,
                suffix: (!suffix.is_empty()).then(|| suffix.join(".")),
                pull: pull_suffix.as_ref().and(pulled.consumer()),
                default_storage: ctx.server.storage,
            };
            let result = run_on_stream(ctx, pulled, &mut labelled).await;
            ctx.stream = Default::default();
            result?;
        }
    }
    Ok(())
}

/// Names each variant for its stream's and pull keys' combination,
/// records the settings it ran on among its parameters, and hands it on
/// under the profile's scenario plan (`recorded`): the results hold one
/// scenario whichever combination ran.
struct OnStream<'a> {
    inner: &'a mut dyn VariantSink,
    recorded: &'a ScenarioPlan,
    settings: &'a crate::profile::StreamSettings,
    suffix: Option<String>,
    /// The consumer plan of a swept pull combination.
    pull: Option<&'a crate::profile::ConsumerPlan>,
    default_storage: crate::profile::Storage,
}

impl VariantSink for OnStream<'_> {
    fn record(&mut self, _ran: &ScenarioPlan, mut variant: VariantResult) -> Result<()> {
        let s = self.settings;
        if let Some(suffix) = &self.suffix {
            variant.name = format!("{}.{suffix}", variant.name);
        }
        if let Some(c) = self.pull {
            variant.param("consumer_kind", crate::profile::kind_name(c.kind));
            variant.param("batch", c.batch);
            variant.param("pull", c.pull);
            if let Some(w) = c.max_waiting {
                variant.param("max_waiting", w);
            }
        }
        let storage = s.storage.unwrap_or(self.default_storage);
        variant.param("stream.storage", crate::profile::storage_name(storage));
        if let Some(r) = s.retention {
            variant.param("stream.retention", crate::profile::retention_name(r));
        }
        if let Some(d) = s.discard {
            variant.param("stream.discard", d);
        }
        if s.limits != Default::default() {
            variant.param("stream.limits", &s.limits);
        }
        self.inner.record(self.recorded, variant)
    }
}

/// Runs `plan`: the profile's, or one pull combination of it. Each
/// scenario's future is boxed: together they would be as large as the
/// largest, and a debug build runs the whole run's future on a test
/// thread's stack.
async fn run_on_stream(
    ctx: &RunContext,
    plan: &ScenarioPlan,
    sink: &mut dyn VariantSink,
) -> Result<()> {
    let run: futures::future::LocalBoxFuture<'_, Result<()>> = match plan {
        ScenarioPlan::Latency(p) => Box::pin(latency::run(ctx, plan, p, sink)),
        ScenarioPlan::Publish(p) => Box::pin(publish::run(ctx, plan, p, sink)),
        ScenarioPlan::Ack(p) => Box::pin(ack::run(ctx, plan, p, sink)),
        ScenarioPlan::Redelivery(p) => Box::pin(redelivery::run(ctx, plan, p, sink)),
        ScenarioPlan::Backpressure(p) => Box::pin(backpressure::run(ctx, plan, p, sink)),
        ScenarioPlan::Resume(p) => Box::pin(resume::run(ctx, plan, p, sink)),
        ScenarioPlan::Restart(p) => Box::pin(restart::run(ctx, plan, p, sink)),
        ScenarioPlan::Replay(p) => Box::pin(replay::run(ctx, plan, p, sink)),
        ScenarioPlan::Dlq(p) => Box::pin(dlq::run(ctx, plan, p, sink)),
        ScenarioPlan::Fanout(p) => Box::pin(fanout::run(ctx, plan, p, sink)),
        ScenarioPlan::Outage(p) => Box::pin(outage::run(ctx, plan, p, sink)),
    };
    run.await
}
