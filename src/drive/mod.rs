//! One variant's load, in the phases every scenario shares: connect the
//! clients, agree on t0, start the consumers, start the publishers, run
//! and sample until the last message is sent, drain, collect.
//!
//! Scenarios provision their stream (and durable), describe the load as a
//! [`DriveSpec`], call [`drive`], and measure and verify from the
//! [`DriveOutcome`]; none of them repeats these mechanics.
//!
//! A variant may be spread over several processes (`run --workers N`).
//! Drive knows the other processes only through two seams it defines and
//! the worker layer implements: [`Distribute`] (how a run splits a drive)
//! and [`Peers`] (what the phases tell the other processes and hear back).
//! A variant in one process has the peers [`Alone`].
//!
//! - [`spec`](DriveSpec): the load, the consumer's crash plan, the
//!   server kill, and the [`Share`] one process runs.
//! - `connect`, `start`, `sample`, `drain`, `collect`: the phases, in order;
//!   `launch` starts a consumer client and keeps the clients' counters,
//!   `state` asks the server how the durable stands.
//! - [`fanout`](drive_fanout): the same phases for many streams and
//!   durables at once, one outcome per stream and per durable.
//! - `crash`, `fault`: the consumer crash and the server kill, timed from
//!   inside the run-and-sample phase.
//! - [`outcome`](DriveOutcome): what the phases measured, merged.
//! - [`peers`](Peers): the seam with the other processes.
//! - [`trace`]: the trace events of a sample of messages (`trace_every`),
//!   collected beside the phases by the process that watches the server.

mod collect;
mod connect;
mod crash;
mod drain;
mod fault;
mod launch;
mod outcome;
mod pace;
mod parts;
mod pause;
mod peers;
mod sample;
mod spec;
mod start;
mod state;
pub mod trace;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use anyhow::Result;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::connect::ConnectSettings;
use crate::load::Timing;
use crate::profile::{ServerPlan, StreamSettings};
use crate::server::fault::FaultHandle;
use crate::streams::provision::{Names, Provisioner};
use crate::system::cpu::ServerCpu;
use crate::system::progress::{Progress, VariantBar};

pub use fault::leader as stream_leader;
pub use outcome::{
    Attribution, ConsumerSample, ConsumerState, CpuAfterWarmup, CrashOutcome, DriveOutcome,
    DurablePart, FaultOutcome, HELD_LOOKUPS, Holding, PauseOutcome, StreamPart, StreamSpan,
    attribute, evicted_below, evicted_count, held_sequences, rate, stream_eviction,
};
pub use peers::{Alone, Exchange, LocalReports, PeerCounts, PeerPart, Peers, PublisherPart};
pub use spec::{
    ConsumerSpec, CrashPlan, DriveSpec, FaultPlan, OutagePlan, Reader, Share, StreamLoad,
};

/// What every scenario needs from the run.
pub struct RunContext {
    pub connect: ConnectSettings,
    pub provisioner: Provisioner,
    pub names: Names,
    pub server: ServerPlan,
    /// The stream settings of the variants now running: one combination
    /// of the scenario's `[scenario.stream]` lists.
    pub stream: StreamSettings,
    pub progress: Progress,
    /// Cancelled on Ctrl-C: scenarios stop publishing, keep what they
    /// measured and return.
    pub stop: CancellationToken,
    /// Where the server's CPU time is read from.
    pub server_cpu: ServerCpu,
    /// The servers' monitoring endpoints, sampled during every variant.
    pub monitors: Vec<crate::server::telemetry::Monitor>,
    /// The servers scenarios may kill and restart; `None` for a server
    /// jsbench did not start.
    pub faults: Option<FaultHandle>,
    /// The leafnode server started beside the hub (`run --leafnode`), its
    /// link's relay: the lag scenario's `leaf` variant mirrors across it.
    pub leaf: Option<crate::server::LeafHandle>,
    /// Workers recruited with `run --workers N`: every drive is split
    /// among them and this process.
    pub workers: Option<Arc<dyn Distribute>>,
    /// From agreeing on t0 to the first intended send: [`LEAD_IN`], or
    /// less in a process that keeps its code and connections warm.
    pub lead_in: Duration,
}

/// A way of running a drive over several processes. The worker layer
/// implements it; drive sees no more of workers than this.
pub trait Distribute: Send + Sync {
    fn drive<'a>(
        &'a self,
        ctx: &'a RunContext,
        spec: &'a DriveSpec,
    ) -> BoxFuture<'a, Result<DriveOutcome>>;
}

/// Lead time between scheduling t0 and the first intended send, so every
/// publisher thread is up before its first message is due.
pub const LEAD_IN: Duration = Duration::from_millis(200);

/// Runs one variant's load: in this process, or split with the run's
/// workers when it has some.
pub async fn drive(ctx: &RunContext, spec: &DriveSpec) -> Result<DriveOutcome> {
    match &ctx.workers {
        Some(workers) => workers.drive(ctx, spec).await,
        None => drive_share(ctx, spec, &Share::all(spec), &mut Alone).await,
    }
}

/// Runs a load in this process alone, telling `t0` (ns on the clock) once
/// its schedule is agreed: a kind that acts at instants of the load (kills
/// a client of its own, calls an API) times them from it.
pub async fn drive_announcing(
    ctx: &RunContext,
    spec: &DriveSpec,
    t0: tokio::sync::watch::Sender<Option<u64>>,
) -> Result<DriveOutcome> {
    run_share(ctx, spec, &Share::all(spec), &mut Alone, Some(t0)).await
}

/// When a schedule starts: at `t0_ns`, or for steps on the next whole
/// second. Steps are measured from the per-second histograms; starting on a
/// whole second puts each step's seconds inside it.
pub fn align_start(arrival: &crate::profile::ArrivalPlan, t0_ns: u64) -> u64 {
    if matches!(arrival, crate::profile::ArrivalPlan::Steps(_)) {
        t0_ns.div_ceil(crate::record::histogram::INTERVAL_NS)
            * crate::record::histogram::INTERVAL_NS
    } else {
        t0_ns
    }
}

/// Runs `share` of the variant in this process, phase by phase, with
/// `peers` running the rest. When this process leads, the peers' parts
/// join the outcome, which then reads as if one process had run everything.
pub async fn drive_share<P: Peers>(
    ctx: &RunContext,
    spec: &DriveSpec,
    share: &Share,
    peers: &mut P,
) -> Result<DriveOutcome> {
    run_share(ctx, spec, share, peers, None).await
}

async fn run_share<P: Peers>(
    ctx: &RunContext,
    spec: &DriveSpec,
    share: &Share,
    peers: &mut P,
    announce: Option<tokio::sync::watch::Sender<Option<u64>>>,
) -> Result<DriveOutcome> {
    let (scenario, variant) = spec.label.split_once(' ').unwrap_or(("", &spec.label));
    crate::system::live::variant_started(scenario, variant);
    let connected = connect::connect(ctx, spec, share).await?;
    // Many publisher threads wake for their first send: a longer lead-in.
    // Every process rounds the same agreed t0 the same way.
    let lead_in = ctx.lead_in
        + Duration::from_millis(2) * (spec.streams.len() as u32).saturating_sub(1).min(500);
    let t0_ns = align_start(
        &spec.publish.arrival,
        peers.start_time(spec, lead_in).await?,
    );
    if let Some(t0) = announce {
        t0.send_replace(Some(t0_ns));
    }
    let mut variant = Variant::new(ctx, spec, share, t0_ns, connected.messages);
    // However the variant ends, failed included, its consumer clients end
    // with it rather than read on into the next one.
    let _consumers_stop = variant.consumers.stop.clone().drop_guard();
    let bind_time = connected.bound.as_ref().map(|(_, took)| *took);
    variant.start_consumers(
        connected.consumer_clients,
        connected.bound.map(|(bound, _)| bound),
    );
    let tracing = start_trace(ctx, spec, peers.watches_server(), variant.timing).await?;
    let publishers = start::start_publishers(connected.publishers, variant.timing);
    let published = variant
        .run_and_sample(peers, publishers, connected.meters, connected.publish_stop)
        .await?;
    let drained = variant.drain(peers, &published).await?;
    let mut outcome = variant.collect(peers, published, drained).await?;
    outcome.bind_time = bind_time;
    if let Some(collector) = tracing {
        // Every process's traced sends: the merged outcome has them all.
        let traced = outcome.sends.iter().map(|s| s.traced).sum();
        outcome.trace = Some(collector.finish(traced).await?);
    }
    Ok(outcome)
}

/// With `trace_every`, the process that watches the server subscribes to
/// the variant's trace events before any publisher starts: the subjects
/// are the variant's, whichever process sent the message, so one
/// subscription hears every process's sample.
async fn start_trace(
    ctx: &RunContext,
    spec: &DriveSpec,
    watches_server: bool,
    timing: Timing,
) -> Result<Option<trace::Collector>> {
    if spec.publish.trace_every == 0 || !watches_server {
        return Ok(None);
    }
    let client = ctx.connect.connect("trace").await?;
    let collector =
        trace::Collector::start(client, &spec.msg_id_prefix, timing.record_from_ns).await?;
    Ok(Some(collector))
}

/// One variant in flight in this process: what its phases hand each other.
struct Variant<'a> {
    ctx: &'a RunContext,
    spec: &'a DriveSpec,
    share: &'a Share,
    /// t0, the start of recording and the end of an unpaced run, shared
    /// by every process of the variant.
    timing: Timing,
    /// Messages the consumers must finish: the stream's preload and every
    /// message the variant publishes.
    expected: u64,
    bar: VariantBar,
    consumers: start::Consumers,
    /// Consumer info on an interval, when the spec asks and this process
    /// watches the server.
    sampler: Option<sample::Sampler>,
    /// The servers' telemetry, when this process watches the server and
    /// their endpoints are known.
    telemetry: Option<crate::server::telemetry::TelemetrySampler>,
    /// The other processes' clients' unanswered deliveries, as last
    /// reported: the sampler's client-side view of ack pending.
    peer_in_flight: Arc<AtomicU64>,
    /// This process's resident memory, sampled on the run loop, its peak
    /// from the variant's start to the end of collect.
    memory: crate::system::cpu::MemoryTrace,
}

impl<'a> Variant<'a> {
    fn new(
        ctx: &'a RunContext,
        spec: &'a DriveSpec,
        share: &'a Share,
        t0_ns: u64,
        messages: u64,
    ) -> Self {
        let record_from_ns = t0_ns + spec.warmup.as_nanos() as u64;
        // The first sample starts the peak's span, which collect closes.
        let mut memory = crate::system::cpu::MemoryTrace::default();
        memory.note(crate::record::clock::now_ns(), 0);
        Variant {
            ctx,
            spec,
            share,
            timing: Timing {
                t0_ns,
                record_from_ns,
                end_ns: record_from_ns + spec.duration.as_nanos() as u64,
            },
            expected: messages + spec.preloaded(),
            bar: ctx
                .progress
                .variant(&spec.label, spec.warmup + spec.duration + ctx.lead_in),
            consumers: start::Consumers::default(),
            sampler: None,
            telemetry: None,
            peer_in_flight: Arc::new(AtomicU64::new(0)),
            memory,
        }
    }
}
