//! Scenarios: one module per row of the design's scenario table, each
//! reading as provision, drive, measure, verify.

pub mod ack;
pub mod backpressure;
pub mod checks;
pub mod dlq;
pub mod latency;
pub mod publish;
pub mod redelivery;
pub mod replay;
pub mod restart;
pub mod resume;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::connect::ConnectSettings;
use crate::cpu::ServerCpu;
use crate::histogram::Recorder;
use crate::ledger::LedgerCounts;
use crate::metrics::Metric;
use crate::profile::{ScenarioPlan, ServerPlan};
use crate::progress::Progress;
use crate::provision::{Names, Provisioner};
use crate::provision::StreamPlacement;
use crate::timeline::Timeline;

/// What every scenario needs from the run.
pub struct RunContext {
    pub connect: ConnectSettings,
    pub provisioner: Provisioner,
    pub names: Names,
    pub server: ServerPlan,
    pub progress: Progress,
    /// Cancelled on Ctrl-C: scenarios stop publishing, keep what they
    /// measured and return.
    pub stop: CancellationToken,
    /// Where the server's CPU time is read from.
    pub server_cpu: ServerCpu,
    /// The servers scenarios may kill and restart; `None` for a server
    /// jsbench did not start.
    pub faults: Option<crate::fault::FaultHandle>,
    /// Workers recruited with `run --workers N`: every drive is split
    /// among them and this process.
    pub workers: Option<std::sync::Arc<crate::worker::Workers>>,
}

/// A delivery guarantee checked after a variant, with the evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Invariant {
    pub name: String,
    pub passed: bool,
    pub detail: String,
}

impl Invariant {
    pub fn check(name: &str, passed: bool, detail: impl Into<String>) -> Self {
        Invariant {
            name: name.to_string(),
            passed,
            detail: detail.into(),
        }
    }

    /// `actual == expected`, with both in the evidence.
    pub fn equal(name: &str, actual: u64, expected: u64) -> Self {
        Invariant::check(
            name,
            actual == expected,
            format!("{actual} (expected {expected})"),
        )
    }
}

/// Everything one variant produced: what the results writer stores.
#[derive(Debug, Clone)]
pub struct VariantResult {
    pub name: String,
    /// The settings that distinguish this variant (rate, sizes, counts).
    pub params: BTreeMap<String, serde_json::Value>,
    pub metrics: Vec<Metric>,
    pub histograms: Vec<(String, Recorder)>,
    pub ledger: LedgerCounts,
    pub invariants: Vec<Invariant>,
    /// Problems that do not break a guarantee but weaken a number (a
    /// generator that fell behind, a server log warning).
    pub warnings: Vec<String>,
    pub timelines: BTreeMap<String, Timeline>,
    /// Set when the variant could not complete; what was measured stays.
    pub error: Option<String>,
    pub elapsed: Duration,
    /// Where the variant's streams were placed (leader, replicas).
    pub streams: Vec<StreamPlacement>,
}

impl VariantResult {
    pub fn new(name: impl Into<String>) -> Self {
        VariantResult {
            name: name.into(),
            params: BTreeMap::new(),
            metrics: Vec::new(),
            histograms: Vec::new(),
            ledger: LedgerCounts::default(),
            invariants: Vec::new(),
            warnings: Vec::new(),
            timelines: BTreeMap::new(),
            error: None,
            elapsed: Duration::ZERO,
            streams: Vec::new(),
        }
    }

    pub fn param(&mut self, key: &str, value: impl Serialize) {
        self.params.insert(
            key.to_string(),
            serde_json::to_value(value).expect("plain values serialise"),
        );
    }

    pub fn passed(&self) -> bool {
        self.error.is_none() && self.invariants.iter().all(|i| i.passed)
    }
}

/// Receives each variant as soon as it is done, so a later failure or a
/// Ctrl-C never loses an earlier result.
pub trait VariantSink {
    fn record(&mut self, scenario: &ScenarioPlan, variant: VariantResult) -> Result<()>;
}

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
        .create_stream(crate::provision::stream_config(
            &names.stream,
            &names.base,
            &ctx.server,
        ))
        .await?;
    ctx.provisioner
        .create_consumer(
            &stream,
            crate::provision::pull_config(&names.durable, consumer, &names.base),
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
        .extend(info.as_ref().map(crate::provision::placement));
    info.map(|i| i.state.messages)
}

/// Runs one scenario of a profile.
pub async fn run(ctx: &RunContext, plan: &ScenarioPlan, sink: &mut dyn VariantSink) -> Result<()> {
    match plan {
        ScenarioPlan::Latency(p) => latency::run(ctx, plan, p, sink).await,
        ScenarioPlan::Publish(p) => publish::run(ctx, plan, p, sink).await,
        ScenarioPlan::Ack(p) => ack::run(ctx, plan, p, sink).await,
        ScenarioPlan::Redelivery(p) => redelivery::run(ctx, plan, p, sink).await,
        ScenarioPlan::Backpressure(p) => backpressure::run(ctx, plan, p, sink).await,
        ScenarioPlan::Resume(p) => resume::run(ctx, plan, p, sink).await,
        ScenarioPlan::Restart(p) => restart::run(ctx, plan, p, sink).await,
        ScenarioPlan::Replay(p) => replay::run(ctx, plan, p, sink).await,
        ScenarioPlan::Dlq(p) => dlq::run(ctx, plan, p, sink).await,
    }
}
