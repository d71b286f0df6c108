//! A scenario runs once per combination of its `[scenario.stream]` lists
//! (storage, retention, discard) and of its consumer's swept pull keys;
//! each combination's variants are named with its suffix and run on
//! streams of their own names.

use anyhow::Result;

use super::ScenarioPlan;
use crate::drive::RunContext;
use crate::profile::CommonPlan;
use crate::variant::{VariantResult, VariantSink};

/// Runs one scenario of a profile: all its variants once per combination
/// of its `[scenario.stream]` lists (storage, retention, discard) and of
/// its consumer's swept keys (kind, pull tuning), each combination's
/// variants named with its suffix and on streams of their own names.
pub(super) async fn run(
    ctx: &mut RunContext,
    plan: &ScenarioPlan,
    sink: &mut dyn VariantSink,
) -> Result<()> {
    let streams = plan.common.stream.settings();
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
                recorded: &plan.common,
                settings: &ctx.stream,
                suffix: (!suffix.is_empty()).then(|| suffix.join(".")),
                pull: pull_suffix.as_ref().and(pulled.kind.consumer()),
                default_storage: ctx.server.storage,
            };
            let result = pulled.kind.run(ctx, pulled, &mut labelled).await;
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
    recorded: &'a CommonPlan,
    settings: &'a crate::profile::StreamSettings,
    suffix: Option<String>,
    /// The consumer plan of a swept pull combination.
    pull: Option<&'a crate::profile::ConsumerPlan>,
    default_storage: crate::profile::Storage,
}

impl VariantSink for OnStream<'_> {
    fn record(&mut self, _ran: &CommonPlan, mut variant: VariantResult) -> Result<()> {
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
