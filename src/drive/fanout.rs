//! A fan-out variant: S streams, each fed by a publisher of its own at
//! its share of the rate (round-robin over the stream's subjects), and D
//! durables per stream, each reading what its filter selects, over a few
//! connections they share. The phases are drive's, for many streams and
//! durables at once: connect, start the consumers, publish, drain,
//! collect.
//!
//! The outcome is one [`DriveOutcome`] per stream (its publisher) and one
//! per durable: its client's deliveries against the messages of the
//! stream its filter selects, as the stream itself holds them (read back
//! after the run, so the expectation is the server's, not jsbench's
//! round-robin). Every durable is then checked as a one-durable variant
//! is, with its losses attributed the same way.
//!
//! One process runs it all: with `--workers` the fan-out stays here.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::StreamExt;
use futures::future::join_all;
use tokio_util::sync::CancellationToken;

use super::collect::finish_telemetry;
use super::connect::Meters;
use super::outcome::merge;
use super::pace::Pace;
use super::sample::reports;
use super::state::settled_state;
use super::{ConsumerState, DriveOutcome, RunContext};
use crate::consume::{self, ConsumerConfig, ConsumerProgress, ConsumerReport};
use crate::load::{AckReport, Publisher, PublisherConfig, RetryPlan, SendReport, Timing};
use crate::profile::{BehaviourPlan, ConsumerPlan, PublishPlan};
use crate::record::clock;
use crate::record::ledger::{Event, LedgerShard};
use crate::record::schedule::Schedule;
use crate::streams::readback::{self, ReadBack, Reconciliation};
use crate::system::cpu;
use crate::system::progress::VariantBar;

/// One fan-out variant's load.
#[derive(Debug, Clone)]
pub struct FanoutSpec {
    pub label: String,
    pub streams: Vec<FanStream>,
    pub publish: PublishPlan,
    pub consumer: ConsumerPlan,
    /// msg/s per stream.
    pub rate: u64,
    pub warmup: Duration,
    pub duration: Duration,
    pub drain_timeout: Duration,
    /// Connections the durables share, round-robin.
    pub connections: usize,
    pub msg_id_prefix: String,
}

#[derive(Debug, Clone)]
pub struct FanStream {
    pub name: String,
    pub subjects: Vec<String>,
    pub durables: Vec<FanDurable>,
}

#[derive(Debug, Clone)]
pub struct FanDurable {
    pub name: String,
    /// Indices into its stream's subjects.
    pub filters: Vec<usize>,
}

/// What a fan-out variant measured.
#[derive(Debug)]
pub struct FanoutOutcome {
    /// Every publisher merged, with the run's CPU and server telemetry.
    pub publish: DriveOutcome,
    pub streams: Vec<StreamPart>,
    /// Whether every durable finished what it was due before the drain
    /// timeout.
    pub drained: bool,
    pub drain_time: Duration,
    /// How long binding every durable to its client took, before the clock
    /// started.
    pub bind_time: Duration,
    pub interrupted: bool,
}

#[derive(Debug)]
pub struct StreamPart {
    pub name: String,
    /// Its publisher's reports.
    pub outcome: DriveOutcome,
    /// PubAcks against what the stream holds; the read-back's error when
    /// it could not be read.
    pub stored: Result<Reconciliation, String>,
    pub durables: Vec<DurablePart>,
}

#[derive(Debug)]
pub struct DurablePart {
    pub name: String,
    pub filters: Vec<String>,
    /// Its client's deliveries against the stream's messages its filter
    /// selects (`counts.persisted`), losses attributed.
    pub outcome: DriveOutcome,
    /// The client's error, when it failed.
    pub error: Option<String>,
    /// Whether its due is known: its stream was read back.
    pub due_known: bool,
}

impl FanoutOutcome {
    pub fn durables(&self) -> impl Iterator<Item = (&StreamPart, &DurablePart)> {
        self.streams
            .iter()
            .flat_map(|s| s.durables.iter().map(move |d| (s, d)))
    }
}

/// How long a read-back waits for the next message before calling the
/// stream read.
const READ_IDLE: Duration = Duration::from_secs(2);
/// How long the server may take, after the clients are done, to show
/// nothing pending for every durable.
const SETTLE: Duration = Duration::from_secs(3);
/// Requests to the server at once when asking about every durable.
const AT_ONCE: usize = 16;
/// Durables bound at once: more only queue at the server's API.
const BIND_AT_ONCE: usize = 32;
/// How long binding every durable may take.
const BIND_TIMEOUT: Duration = Duration::from_secs(120);

/// Messages `n` in `0..sent` with `n mod subjects == subject`: what one
/// subject of a round-robin publisher received.
fn on_subject(sent: u64, subjects: usize, subject: usize) -> u64 {
    let (f, s) = (subjects as u64, subject as u64);
    if sent > s { (sent - s).div_ceil(f) } else { 0 }
}

/// Runs a fan-out variant through drive's phases: connect (and bind
/// every durable), start the consumers and the publishers on one clock,
/// publish, drain, collect, and the per-stream and per-durable outcomes.
pub async fn drive_fanout(ctx: &RunContext, spec: &FanoutSpec) -> Result<FanoutOutcome> {
    let (scenario, variant) = spec.label.split_once(' ').unwrap_or(("", &spec.label));
    crate::system::live::variant_started(scenario, variant);
    let bar = ctx
        .progress
        .variant(&spec.label, spec.warmup + spec.duration + ctx.lead_in);
    let run = Fanout::new(spec);
    let connected = run.connect(ctx, &bar).await?;
    let bind_time = connected.bind_time;
    let (running, publishers) = run.start(ctx, connected).await?;
    let (sends, acks) = run.publish(&running, publishers, &bar).await?;
    bar.phase("draining");
    let drained = run.drain(ctx, &running, &sends).await;
    let collected = run.collect(ctx, running, &bar).await?;
    bar.finish();
    let mut outcome = run.outcome(ctx, (sends, acks), &drained, collected).await;
    outcome.bind_time = bind_time;
    Ok(outcome)
}

/// A fan-out variant's durables, by stream, and each stream's schedule.
struct Fanout<'a> {
    spec: &'a FanoutSpec,
    /// (stream, durable of that stream), in the order the clients run.
    durables: Vec<(usize, usize)>,
    schedules: Vec<Schedule>,
}

/// Every durable bound to a client, before anything is timed.
struct Connected {
    clients: Vec<async_nats::Client>,
    configs: Vec<ConsumerConfig>,
    bound: Vec<consume::Bound>,
    bind_time: Duration,
}

/// The variant on its clock: the consumers reading, the publishers
/// sending, both sides' CPU metered.
struct Running {
    timing: Timing,
    meters: Meters,
    publish_stop: CancellationToken,
    consumers_stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<Result<ConsumerReport>>>,
    progress: Vec<Arc<ConsumerProgress>>,
    telemetry: Option<crate::server::telemetry::TelemetrySampler>,
}

/// How the drain ended, and every durable as the server saw it then.
struct Drained {
    drained: bool,
    time: Duration,
    states: Vec<Option<ConsumerState>>,
}

/// Every client's report (or error), every stream read back, and what
/// the run cost.
struct Collected {
    timing: Timing,
    meters: Meters,
    reports: Vec<Result<ConsumerReport>>,
    reads: Vec<Result<ReadBack>>,
    telemetry: Option<crate::server::telemetry::Telemetry>,
}

impl<'a> Fanout<'a> {
    fn new(spec: &'a FanoutSpec) -> Self {
        Fanout {
            spec,
            durables: spec
                .streams
                .iter()
                .enumerate()
                .flat_map(|(s, stream)| (0..stream.durables.len()).map(move |d| (s, d)))
                .collect(),
            schedules: schedules(spec),
        }
    }

    /// The connections the durables share, and every durable bound to
    /// one: binding a thousand takes the server seconds, and a durable
    /// bound late would find its first messages waiting.
    async fn connect(&self, ctx: &RunContext, bar: &VariantBar) -> Result<Connected> {
        let connections = self.spec.connections.min(self.durables.len()).max(1);
        // Many durables share each connection here: async-nats' job.
        if self.spec.consumer.client == crate::profile::ConsumerClient::Direct {
            anyhow::bail!(
                "scenario.consumer.client = \"direct\" cannot apply to {}: its durables share connections, which the direct client does not",
                self.spec.label
            );
        }
        let clients = join_all((0..connections).map(|i| async move {
            ctx.connect
                .connect_on(crate::system::runtimes::consume(), &format!("fanout-{i}"))
                .await
        }))
        .await
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
        bar.phase("binding the durables");
        let configs = self.consumer_configs(ctx);
        let binding = Instant::now();
        let bound = futures::stream::iter(
            configs
                .iter()
                .enumerate()
                .map(|(k, config)| consume::bind(&clients[k % connections], config)),
        )
        .buffered(BIND_AT_ONCE)
        .collect::<Vec<_>>();
        let bound = tokio::time::timeout(BIND_TIMEOUT, bound)
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "binding {} durables took longer than {} s",
                    configs.len(),
                    BIND_TIMEOUT.as_secs()
                )
            })?
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        Ok(Connected {
            clients,
            configs,
            bound,
            bind_time: binding.elapsed(),
        })
    }

    /// Each durable's client: all acked, its messages due from its
    /// stream's schedule; timed once the clock starts.
    fn consumer_configs(&self, ctx: &RunContext) -> Vec<ConsumerConfig> {
        let behaviour = Arc::new(BehaviourPlan::all_ack());
        self.durables
            .iter()
            .enumerate()
            .map(|(k, &(s, d))| ConsumerConfig {
                index: k,
                stream: self.spec.streams[s].name.clone(),
                durable: self.spec.streams[s].durables[d].name.clone(),
                plan: self.spec.consumer.clone(),
                behaviour: behaviour.clone(),
                // Set once the clock starts.
                record_from_ns: 0,
                timeline_origin_ns: 0,
                expected_messages: self.schedules[s].count(),
                log_events: false,
                hops: false,
                js_api_prefix: ctx.connect.js_api.prefix(),
                crash: None,
                keep_doomed: false,
                outage: None,
                dedup: None,
            })
            .collect()
    }

    /// The publishers connected, then one clock for all: the consumers
    /// start reading and the publishers sending on it.
    async fn start(
        &self,
        ctx: &RunContext,
        connected: Connected,
    ) -> Result<(Running, Vec<Publisher>)> {
        let spec = self.spec;
        let meters = Meters {
            client_cpu_start: cpu::ClientCpu::now(),
            server_cpu: ctx.server_cpu.start(),
            after_warmup: None,
        };
        let publish_stop = ctx.stop.child_token();
        let mut publishers =
            join_all(spec.streams.iter().enumerate().map(|(s, stream)| {
                let config = publisher_config(spec, s, stream, self.schedules[s].clone());
                let stop = publish_stop.clone();
                async move {
                    Publisher::start(&ctx.connect, &format!("publisher-{s}"), config, stop).await
                }
            }))
            .await
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        // Many publisher threads wake for their first send: a longer lead-in.
        let lead_in = ctx.lead_in + Duration::from_millis(2) * spec.streams.len() as u32;
        let t0_ns = super::align_start(
            &spec.publish.arrival,
            clock::now_ns() + lead_in.as_nanos() as u64,
        );
        let record_from_ns = t0_ns + spec.warmup.as_nanos() as u64;
        let timing = Timing {
            t0_ns,
            record_from_ns,
            end_ns: record_from_ns + spec.duration.as_nanos() as u64,
        };
        let consumers_stop = CancellationToken::new();
        let progress: Vec<Arc<ConsumerProgress>> = self
            .durables
            .iter()
            .map(|_| Arc::new(ConsumerProgress::default()))
            .collect();
        let Connected {
            clients,
            mut configs,
            bound,
            ..
        } = connected;
        let tasks = configs
            .iter_mut()
            .zip(bound)
            .enumerate()
            .map(|(k, (config, bound))| {
                config.record_from_ns = record_from_ns;
                config.timeline_origin_ns = t0_ns;
                crate::system::runtimes::consume().spawn(consume::run_bound(
                    clients[k % clients.len()].clone(),
                    bound,
                    config.clone(),
                    progress[k].clone(),
                    consumers_stop.clone(),
                ))
            })
            .collect();
        drop(clients);
        for p in &mut publishers {
            p.go(timing);
        }
        let running = Running {
            timing,
            meters,
            publish_stop,
            consumers_stop,
            tasks,
            progress,
            telemetry: crate::server::telemetry::TelemetrySampler::start(
                &ctx.monitors,
                crate::server::telemetry::SAMPLE_EVERY,
            ),
        };
        Ok((running, publishers))
    }

    /// Until every publisher has sent its schedule; publishing stops
    /// early when a consumer fails.
    async fn publish(
        &self,
        running: &Running,
        publishers: Vec<Publisher>,
        bar: &VariantBar,
    ) -> Result<(Vec<SendReport>, Vec<AckReport>)> {
        let mut pace = Pace::of(&publishers);
        let received = || -> u64 {
            running
                .progress
                .iter()
                .map(|p| p.received.load(Ordering::Relaxed))
                .sum()
        };
        let finishing = join_all(publishers.into_iter().map(Publisher::finish));
        tokio::pin!(finishing);
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        let results = loop {
            tokio::select! {
                results = &mut finishing => break results,
                _ = tick.tick() => {
                    pace.show(bar, pace.local_sent(), received(), 0);
                    if running.tasks.iter().any(|t| t.is_finished()) {
                        // A consumer ended on its own: it failed.
                        running.publish_stop.cancel();
                    }
                }
            }
        };
        reports(results)
    }

    /// Each durable until it has finished what its filter selected, then
    /// every durable as the server settles it.
    async fn drain(&self, ctx: &RunContext, running: &Running, sends: &[SendReport]) -> Drained {
        let spec = self.spec;
        let end = Instant::now();
        let due: Vec<u64> = self
            .durables
            .iter()
            .map(|&(s, d)| {
                let stream = &spec.streams[s];
                stream.durables[d]
                    .filters
                    .iter()
                    .map(|&f| on_subject(sends[s].sent, stream.subjects.len(), f))
                    .sum()
            })
            .collect();
        let mut drained = false;
        let deadline = end + spec.drain_timeout;
        while Instant::now() < deadline && !ctx.stop.is_cancelled() {
            let behind = due
                .iter()
                .zip(&running.progress)
                .any(|(&due, p)| p.finished.load(Ordering::Relaxed) < due);
            if !behind {
                drained = true;
                break;
            }
            if running.tasks.iter().any(|t| t.is_finished()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let time = end.elapsed();
        let settle_until = Instant::now() + if drained { SETTLE } else { Duration::ZERO };
        let js = ctx.provisioner.jetstream();
        let states = futures::stream::iter(self.durables.iter().map(|&(s, d)| {
            let stream = &spec.streams[s];
            settled_state(js, &stream.name, &stream.durables[d].name, settle_until)
        }))
        .buffered(AT_ONCE)
        .collect()
        .await;
        Drained {
            drained,
            time,
            states,
        }
    }

    /// The consumers stopped and their reports gathered, every stream read
    /// back, the servers' telemetry finished.
    async fn collect(
        &self,
        ctx: &RunContext,
        running: Running,
        bar: &VariantBar,
    ) -> Result<Collected> {
        running.consumers_stop.cancel();
        let mut reports = Vec::new();
        for task in running.tasks {
            reports.push(task.await.context("joining a consumer task")?);
        }
        bar.phase("reading the streams back");
        let js = ctx.provisioner.jetstream();
        let reads = futures::stream::iter(
            self.spec
                .streams
                .iter()
                .map(|s| readback::read_stream(js, &s.name, READ_IDLE)),
        )
        .buffered(AT_ONCE)
        .collect()
        .await;
        Ok(Collected {
            timing: running.timing,
            meters: running.meters,
            reports,
            reads,
            telemetry: finish_telemetry(running.telemetry).await?,
        })
    }

    /// One outcome per stream (its publisher, against what it stores) and
    /// per durable (its deliveries, against what its filter selects of
    /// the stream read back), and every publisher together.
    async fn outcome(
        &self,
        ctx: &RunContext,
        (sends, acks): (Vec<SendReport>, Vec<AckReport>),
        drained: &Drained,
        collected: Collected,
    ) -> FanoutOutcome {
        let Timing {
            t0_ns,
            record_from_ns,
            ..
        } = collected.timing;
        let sends_of_all = sends.clone();
        let mut reports = collected.reports.into_iter();
        let mut states = drained.states.iter().copied();
        let mut streams = Vec::new();
        for (((stream, send), ack), read) in self
            .spec
            .streams
            .iter()
            .zip(sends)
            .zip(acks)
            .zip(collected.reads)
        {
            let outcome = merge(vec![send], vec![ack], Vec::new(), t0_ns, record_from_ns);
            let stored = match &read {
                Ok(r) => Ok(r.reconcile_sequences(&outcome.ledger)),
                Err(e) => Err(format!("{e:#}")),
            };
            let mut parts = Vec::new();
            for durable in &stream.durables {
                let report = reports
                    .next()
                    .unwrap_or_else(|| Err(anyhow::anyhow!("no report")));
                let state = states.next().flatten();
                parts.push(
                    durable_part(
                        ctx,
                        stream,
                        durable,
                        (report, state),
                        &read,
                        collected.timing,
                    )
                    .await,
                );
            }
            streams.push(StreamPart {
                name: stream.name.clone(),
                outcome,
                stored,
                durables: parts,
            });
        }
        let mut publish = merge(sends_of_all, Vec::new(), Vec::new(), t0_ns, record_from_ns);
        sum_streams(&mut publish, &streams);
        // From the publishers' connect to the end of the drain.
        publish.client_cpu = cpu::ClientCpu::since(collected.meters.client_cpu_start);
        publish.server_cpu = collected.meters.server_cpu.stop();
        publish.telemetry = collected.telemetry;
        publish.interrupted = ctx.stop.is_cancelled();
        publish.drained = drained.drained;
        publish.drain_time = drained.time;
        for refusal in ctx.connect.take_refusals() {
            publish
                .errors
                .push(format!("the server refused: {refusal}"));
        }
        FanoutOutcome {
            publish,
            streams,
            drained: drained.drained,
            drain_time: drained.time,
            bind_time: Duration::ZERO,
            interrupted: ctx.stop.is_cancelled(),
        }
    }
}

/// One durable's outcome: its client's deliveries against the messages of
/// its stream (`read`) its filters select, its losses attributed.
async fn durable_part(
    ctx: &RunContext,
    stream: &FanStream,
    durable: &FanDurable,
    (report, state): (Result<ConsumerReport>, Option<ConsumerState>),
    read: &Result<ReadBack>,
    timing: Timing,
) -> DurablePart {
    let filters: Vec<&str> = durable
        .filters
        .iter()
        .map(|&f| stream.subjects[f].as_str())
        .collect();
    let (report, error) = match report {
        Ok(r) => (Some(r), None),
        Err(e) => (None, Some(format!("{e:#}"))),
    };
    let mut o = merge(
        Vec::new(),
        Vec::new(),
        report.into_iter().collect(),
        timing.t0_ns,
        timing.record_from_ns,
    );
    if let Ok(read) = read {
        o.ledger.merge(&selected(read, &filters));
        o.counts = o.ledger.counts();
    } else {
        o.errors
            .push("what its filter selected is unknown: the stream was not read back".into());
    }
    o.server_state = state;
    if let Some(e) = &error {
        o.errors.push(format!("consumer: {e}"));
    }
    o.attribute_losses(ctx.provisioner.jetstream(), &stream.name)
        .await;
    DurablePart {
        name: durable.name.clone(),
        filters: filters.iter().map(|f| f.to_string()).collect(),
        outcome: o,
        error,
        due_known: read.is_ok(),
    }
}

/// Every publisher together: their streams' PubAck figures and counts
/// summed (sequences repeat across streams, so their ledgers are never
/// merged into one).
fn sum_streams(publish: &mut DriveOutcome, streams: &[StreamPart]) {
    for s in streams {
        let o = &s.outcome;
        publish.pub_ack_intended.merge(&o.pub_ack_intended);
        publish.pub_ack_sent.merge(&o.pub_ack_sent);
        let (sum, c) = (&mut publish.counts, &o.counts);
        sum.persisted += c.persisted;
        sum.persisted_twice += c.persisted_twice;
        sum.duplicates += c.duplicates;
        sum.publish_errors += c.publish_errors;
        sum.refused_by_limit += c.refused_by_limit;
    }
}

/// Each stream's schedule. Steady: its own share of the rate. A shape:
/// the streams together follow it at the total rate, stream s taking
/// arrivals s, s + S, s + 2S, ... of it (Poisson in sum; a step or a burst
/// reaches every stream at once).
fn schedules(spec: &FanoutSpec) -> Vec<Schedule> {
    let streams = spec.streams.len().max(1) as u64;
    let span = spec.warmup + spec.duration;
    let total = spec.rate * streams;
    let shared: Option<Arc<[u64]>> =
        crate::profile::arrival_offsets(&spec.publish.arrival, Some(total), span).map(Arc::from);
    (0..streams)
        .map(|s| match &shared {
            None => Schedule {
                // Set by `go`.
                t0_ns: 0,
                total_rate: Some(spec.rate),
                stride: 1,
                offset: 0,
                total_messages: ((spec.rate as f64) * span.as_secs_f64()).round() as u64,
                end_ns: u64::MAX,
                arrivals: None,
            },
            Some(arrivals) => Schedule {
                t0_ns: 0,
                total_rate: Some(total),
                stride: streams,
                offset: s,
                total_messages: arrivals.len() as u64,
                end_ns: u64::MAX,
                arrivals: Some(arrivals.clone()),
            },
        })
        .collect()
}

/// The stream's publisher: its schedule over its subjects.
fn publisher_config(
    spec: &FanoutSpec,
    index: usize,
    stream: &FanStream,
    schedule: Schedule,
) -> PublisherConfig {
    PublisherConfig {
        index: index as u16,
        subjects: stream.subjects.clone(),
        message_size: spec.publish.message_size,
        schedule,
        window: spec.publish.pub_ack_window,
        msg_id: spec.publish.msg_id,
        msg_id_prefix: format!("{}-{index}-", spec.msg_id_prefix),
        headers: spec.publish.headers.clone(),
        retries: RetryPlan::default(),
        seed: index as u64,
        record_from_ns: 0,
        pub_ack_timeout: spec.publish.pub_ack_timeout,
        timeline_origin_ns: 0,
        resend_after: None,
        wake_every: spec.publish.wake_every,
        // Kept on async-nats: the direct client is the paced drive's.
        client: crate::profile::PublishClient::AsyncNats,
        trace_every: 0,
        trace_prefix: String::new(),
        drop_pub_acks: 0,
    }
}

/// The stream's messages on `filters`' subjects, as `Persisted` marks: a
/// durable's due, from what the stream holds.
fn selected(read: &ReadBack, filters: &[&str]) -> LedgerShard {
    let mut due = LedgerShard::new();
    for (seq, &here) in read.present.iter().enumerate() {
        if here
            && read
                .subject(seq as u64)
                .is_some_and(|s| filters.contains(&s))
        {
            due.mark(seq as u64, Event::Persisted);
        }
    }
    due
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_robin_publisher_splits_its_messages_over_its_subjects() {
        // 10 messages over 4 subjects: 0,4,8 / 1,5,9 / 2,6 / 3,7.
        let counts: Vec<u64> = (0..4).map(|f| on_subject(10, 4, f)).collect();
        assert_eq!(counts, [3, 3, 2, 2]);
        assert_eq!(on_subject(0, 4, 0), 0);
        assert_eq!(on_subject(1, 4, 3), 0);
    }
}
