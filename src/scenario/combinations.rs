//! A scenario runs once per combination of its `[scenario.stream]` lists
//! (persist, storage, retention, discard, and a `[server] sync` list) and
//! of its consumer's swept pull keys; each combination's variants are
//! named with its suffix and run on streams of their own names, on a
//! server jsbench started brought to the combination's sync setting first.

use anyhow::{Result, anyhow};

use super::ScenarioPlan;
use crate::drive::RunContext;
use crate::profile::{CommonPlan, StreamSettings, SyncSetting};
use crate::server::fault::RESTART_TIMEOUT;
use crate::server::telemetry::{self, Persistence};
use crate::system::cpu::ServerCpu;
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
            let persistence = server_persistence(ctx, &settings).await?;
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
                persistence: &persistence,
                server_cpu_method: ctx.server_cpu.describe(),
            };
            let result = pulled.kind.run(ctx, pulled, &mut labelled).await;
            ctx.stream = Default::default();
            result?;
        }
    }
    Ok(())
}

/// Brings a server jsbench started to the combination's sync setting
/// (restarting it when it runs another), then reads back what the server
/// says it runs with: /varz, or for a server without a monitoring URL the
/// API level from the account info and the sync setting as unknown.
async fn server_persistence(
    ctx: &mut RunContext,
    settings: &StreamSettings,
) -> Result<Persistence> {
    if let Some(faults) = ctx.faults.clone() {
        let wanted = settings
            .sync
            .or(ctx.server.sync)
            .unwrap_or(SyncSetting::Default);
        // block_in_place, not spawn_blocking: the restarted server dies
        // with the thread that started it (PR_SET_PDEATHSIG), and a
        // blocking-pool thread exits once idle.
        tokio::task::block_in_place(|| faults.set_sync(wanted))?;
        if let ServerCpu::Processes(_) = ctx.server_cpu {
            ctx.server_cpu = ServerCpu::Processes(faults.pids());
        }
        wait_for_jetstream(ctx).await?;
    }
    telemetry::read_persistence(&ctx.monitors, ctx.provisioner.jetstream()).await
}

/// After a restart the clients reconnect on their own; the first variant
/// waits until JetStream answers again rather than fail its stream create.
async fn wait_for_jetstream(ctx: &RunContext) -> Result<()> {
    let deadline = tokio::time::Instant::now() + RESTART_TIMEOUT;
    loop {
        match ctx.provisioner.jetstream().query_account().await {
            Ok(_) => return Ok(()),
            Err(e) if tokio::time::Instant::now() > deadline => {
                return Err(anyhow!(
                    "JetStream did not answer within {RESTART_TIMEOUT:?} after the server restarted with a new sync setting: {e}"
                ));
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
        }
    }
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
    /// What the server said of its sync setting and API level before the
    /// combination ran.
    persistence: &'a Persistence,
    /// How the server's CPU is read for this combination: after a restart
    /// for its sync setting, from the new process.
    server_cpu_method: String,
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
            variant.param("stream.retention", r.label());
        }
        if let Some(d) = s.discard {
            variant.param("stream.discard", d);
        }
        variant.param(
            "stream.persist_mode",
            s.persist
                .map_or("default (unset)", crate::profile::persist_name),
        );
        if variant
            .metrics
            .iter()
            .any(|m| m.name.contains("server_cpu"))
        {
            variant.param("server_cpu_method", &self.server_cpu_method);
        }
        let p = self.persistence;
        variant.param("server.sync", p.sync_label());
        match (&p.sync_interval, p.sync_always) {
            (Some(interval), Some(always)) => {
                variant.param("server.sync_interval", interval);
                variant.param("server.sync_always", always);
            }
            _ => variant.param("server.sync_source", &p.source),
        }
        match p.api_level {
            Some(level) => variant.param("server.api_level", level),
            None => variant.param("server.api_level", "unknown"),
        }
        if s.limits != Default::default() {
            variant.param("stream.limits", &s.limits);
        }
        self.inner.record(self.recorded, variant)
    }
}
