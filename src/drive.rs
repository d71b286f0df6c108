//! The shared mechanics of a publish (and consume) variant: connect, start
//! consumers, run open-loop publishers, drain, stop, merge.
//!
//! Scenarios provision their stream (and durable), call [`drive`] and then
//! measure and verify from the [`DriveOutcome`]; none of them repeats this.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use async_nats::jetstream;
use futures::StreamExt;
use futures::future::join_all;
use futures::stream::FuturesUnordered;
use tokio_util::sync::CancellationToken;

use crate::clock;
use crate::consume::{
    self, ConsumerConfig, ConsumerProgress, ConsumerReport, Crash, CrashReport, DeliveryEvent,
};
use crate::cpu;
use crate::histogram::Recorder;
use crate::ledger::{LedgerCounts, LedgerShard};
use crate::load::{AckReport, Publisher, PublisherConfig, RetryPlan, SendReport, Timing};
use crate::profile::{
    BehaviourPlan, CommonPlan, ConsumerPlan, CrashPoint, FaultNode, PublishPlan, late_retry_margin,
};
use crate::scenario::RunContext;
use crate::schedule::Schedule;
use crate::timeline::Timeline;
use crate::worker::{Crew, Orders};

/// One variant's load. It travels whole to workers, which each run the
/// part of it their [`Share`] names.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct DriveSpec {
    /// Shown on the progress bar.
    pub label: String,
    /// The stream's subjects, published to round-robin by message number.
    pub subjects: Vec<String>,
    pub stream: String,
    pub publish: PublishPlan,
    /// The durable to read, and how; `None` publishes only.
    pub consumer: Option<ConsumerSpec>,
    /// Total msg/s; `None` publishes as fast as the server accepts.
    pub rate: Option<u64>,
    /// With `rate = None`: publish exactly this many messages and stop (a
    /// fill) instead of running for warm-up plus duration.
    pub count: Option<u64>,
    /// Messages already in the stream that the consumers must also finish.
    pub preloaded: u64,
    pub warmup: Duration,
    pub duration: Duration,
    pub drain_timeout: Duration,
    pub msg_id_prefix: String,
    /// Seeds sizes and retry choices.
    pub seed: u64,
    /// Kill a server mid-run and start it again (restart).
    pub fault: Option<FaultPlan>,
}

/// When to kill which server, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FaultPlan {
    /// From the start of the schedule.
    pub after: Duration,
    pub node: FaultNode,
    /// From the kill to the restart.
    pub down_for: Duration,
}

/// What the kill and the restart looked like.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultOutcome {
    pub node: String,
    pub killed_ns: u64,
    /// When the node accepted connections again.
    pub restarted_ns: u64,
    pub leader_before: Option<String>,
    /// The stream's leader once a new one was elected (cluster).
    pub leader_after: Option<String>,
    /// From the kill until the stream had a leader again (cluster).
    pub election_gap: Option<Duration>,
}

/// The durable a variant reads and what its clients do with deliveries.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ConsumerSpec {
    pub durable: String,
    pub plan: ConsumerPlan,
    pub behaviour: Arc<BehaviourPlan>,
    /// Keep a record of every delivery (for redelivery delays).
    pub log_events: bool,
    /// Poll consumer info this often while the variant runs.
    pub sample_every: Option<Duration>,
    /// Crash the first client mid-run and bind a new one (resume).
    pub crash: Option<CrashPlan>,
}

/// When and how the first consumer client crashes, and when a new client
/// binds to the same durable in its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CrashPlan {
    /// From the start of the schedule.
    pub after: Duration,
    pub point: CrashPoint,
    /// From the crash to the new client's bind.
    pub rebind_after: Duration,
}

/// What the crash and the rebind looked like.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrashOutcome {
    pub report: CrashReport,
    /// The server's ack pending once the crashed client was gone: what
    /// must be redelivered.
    pub ack_pending_after: Option<u64>,
    /// When the new client bound, ns on [`crate::clock`].
    pub rebound_ns: u64,
}

impl ConsumerSpec {
    /// A durable whose clients follow `behaviour`, with every delivery
    /// logged and consumer info sampled: what fates and redelivery
    /// accounting are built from.
    pub fn observed(
        durable: String,
        plan: ConsumerPlan,
        behaviour: Arc<BehaviourPlan>,
        sample_every: Duration,
    ) -> Self {
        ConsumerSpec {
            durable,
            plan,
            behaviour,
            log_events: true,
            sample_every: Some(sample_every),
            crash: None,
        }
    }

    /// An explicit-ack durable whose clients ack everything at once.
    pub fn acking(durable: String, plan: ConsumerPlan) -> Self {
        ConsumerSpec {
            durable,
            plan,
            behaviour: Arc::new(BehaviourPlan::all_ack()),
            log_events: false,
            sample_every: None,
            crash: None,
        }
    }
}

/// Consumer info at one moment of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerSample {
    pub at_ns: u64,
    pub num_pending: u64,
    pub num_ack_pending: u64,
    pub num_redelivered: u64,
    /// Deliveries the clients hold unanswered (the client's own view of
    /// ack pending, without what async-nats has buffered).
    pub client_in_flight: u64,
}

impl DriveSpec {
    /// Messages a paced variant or a fill publishes, warm-up included; 0
    /// when it runs for a time instead.
    pub fn messages(&self) -> u64 {
        if let Some(arrivals) = self.arrivals() {
            return arrivals.len() as u64;
        }
        match (self.rate, self.count) {
            (Some(rate), _) => ((rate as f64) * (self.warmup + self.duration).as_secs_f64())
                .round()
                .max(1.0) as u64,
            (None, Some(n)) => n,
            (None, None) => 0,
        }
    }

    /// Intended send offsets of an irregular arrival pattern
    /// (`publish.arrival`, over warm-up plus duration; `rate` is its mean),
    /// or `None` for the steady schedule at `rate`.
    pub fn arrivals(&self) -> Option<Arc<[u64]>> {
        crate::profile::arrival_offsets(
            &self.publish.arrival,
            self.rate,
            self.warmup + self.duration,
        )
        .map(Arc::from)
    }

    /// The shape most scenarios drive: `rate` msg/s over the plan's
    /// warm-up and duration to one subject, read by `consumer`, seeded by
    /// the rate so variants at one rate publish alike. Scenarios change
    /// the fields that make them different (ids, a crash, a kill).
    pub fn paced(
        label: String,
        stream: &str,
        subject: String,
        publish: &PublishPlan,
        common: &CommonPlan,
        rate: u64,
        consumer: ConsumerSpec,
    ) -> Self {
        DriveSpec {
            label,
            subjects: vec![subject],
            stream: stream.to_string(),
            publish: publish.clone(),
            consumer: Some(consumer),
            rate: Some(rate),
            count: None,
            preloaded: 0,
            warmup: common.warmup,
            duration: common.duration,
            drain_timeout: common.drain_timeout,
            msg_id_prefix: String::new(),
            seed: rate,
            fault: None,
        }
    }

    /// A spec that publishes nothing and only consumes what is stored.
    pub fn consume_only(
        label: String,
        stream: String,
        consumer: ConsumerSpec,
        preloaded: u64,
        drain_timeout: Duration,
    ) -> Self {
        let mut publish = PublishPlan::simple(
            0,
            128,
            crate::profile::MsgId::None,
            1,
            Duration::from_secs(10),
        );
        publish.publishers = 0;
        DriveSpec {
            label,
            subjects: Vec::new(),
            stream,
            publish,
            consumer: Some(consumer),
            rate: None,
            count: Some(0),
            preloaded,
            warmup: Duration::ZERO,
            duration: Duration::ZERO,
            drain_timeout,
            msg_id_prefix: String::new(),
            seed: 0,
            fault: None,
        }
    }
}

/// Which publishers and consumer clients, by their index in the whole
/// variant, one process runs. Publisher *p* keeps its slots of the one
/// schedule (every *P*-th message from *p*) wherever it runs, so a split
/// changes who sends a message, never when it is due or what it carries.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Share {
    pub publishers: Vec<usize>,
    pub consumers: Vec<usize>,
}

impl Share {
    /// Everything: a single-process run.
    pub fn all(spec: &DriveSpec) -> Share {
        Share {
            publishers: (0..spec.publish.publishers).collect(),
            consumers: (0..spec.consumer.as_ref().map_or(0, |c| c.plan.consumers)).collect(),
        }
    }

    /// Round-robin over `parts` processes, the coordinator first: the
    /// coordinator's share is never smaller than a worker's.
    pub fn split(spec: &DriveSpec, parts: usize) -> Vec<Share> {
        let parts = parts.max(1);
        let all = Share::all(spec);
        (0..parts)
            .map(|k| Share {
                publishers: all
                    .publishers
                    .iter()
                    .copied()
                    .filter(|i| i % parts == k)
                    .collect(),
                consumers: all
                    .consumers
                    .iter()
                    .copied()
                    .filter(|i| i % parts == k)
                    .collect(),
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.publishers.is_empty() && self.consumers.is_empty()
    }
}

/// How this process takes part in a variant.
pub enum Role<'a> {
    /// The whole variant in this process.
    Alone,
    /// This process runs its share and leads workers that run theirs.
    Lead(&'a mut Crew),
    /// A worker: its share, on the coordinator's start time and stop.
    Follow(&'a mut Orders),
}

impl Role<'_> {
    /// Whether this process watches the server (consumer info, settling):
    /// one watcher per variant, the coordinator.
    fn watches_server(&self) -> bool {
        !matches!(self, Role::Follow(_))
    }
}

/// What the other processes of a variant report while it runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerCounts {
    pub sent: u64,
    pub received: u64,
    pub finished: u64,
    /// PubAcks that confirmed a stored message (new, late or retried).
    pub stored: u64,
    /// Deliveries the clients hold unanswered.
    pub in_flight: u64,
}

/// Server-side view of the durable at the end of the drain.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumerState {
    pub num_pending: u64,
    pub num_ack_pending: usize,
    pub num_redelivered: usize,
}

/// Everything measured while driving one variant, merged across tasks.
#[derive(Debug)]
pub struct DriveOutcome {
    pub t0_ns: u64,
    pub record_from_ns: u64,
    pub sends: Vec<SendReport>,
    pub acks: Vec<AckReport>,
    pub consumers: Vec<ConsumerReport>,
    pub send_lag: Recorder,
    pub pub_ack_intended: Recorder,
    pub pub_ack_sent: Recorder,
    pub e2e_intended: Recorder,
    pub e2e_sent: Recorder,
    pub ledger: LedgerShard,
    pub counts: LedgerCounts,
    pub published_timeline: Timeline,
    pub delivered_timeline: Timeline,
    /// Whether every persisted message was delivered before the drain timeout
    /// (always true without consumers).
    pub drained: bool,
    /// Time from the last publish to the end of the drain.
    pub drain_time: Duration,
    pub server_state: Option<ConsumerState>,
    /// Consumer info sampled over the run (when asked for).
    pub samples: Vec<ConsumerSample>,
    /// Every delivery, ordered by sequence and delivery (when asked for).
    pub events: Vec<DeliveryEvent>,
    /// Double-ack round trips.
    pub ack_rtt: Recorder,
    /// The planned crash, when there was one.
    pub crash: Option<CrashOutcome>,
    /// The planned server kill, when there was one.
    pub fault: Option<FaultOutcome>,
    /// CPU jsbench used from the start of publishing to the last PubAck.
    pub client_cpu: Duration,
    /// CPU the server used over the same span, when it can be measured.
    pub server_cpu: Option<Duration>,
    pub interrupted: bool,
    /// Errors the tasks reported; each makes the variant suspect.
    pub errors: Vec<String>,
}

impl DriveOutcome {
    pub fn sent(&self) -> u64 {
        self.sends.iter().map(|s| s.sent).sum()
    }

    pub fn sent_bytes(&self) -> u64 {
        self.sends.iter().map(|s| s.bytes).sum()
    }

    /// A sum over the PubAck readers.
    pub fn acks_sum(&self, field: impl Fn(&AckReport) -> u64) -> u64 {
        self.acks.iter().map(field).sum()
    }

    /// A sum over the senders.
    pub fn sends_sum(&self, field: impl Fn(&SendReport) -> u64) -> u64 {
        self.sends.iter().map(field).sum()
    }

    /// The publishing span: first intended send to last actual send.
    pub fn publish_span(&self) -> Duration {
        let last = self.sends.iter().map(|s| s.last_sent_ns).max().unwrap_or(0);
        Duration::from_nanos(last.saturating_sub(self.t0_ns))
    }

    /// Achieved publish rate over the publishing span.
    pub fn publish_rate(&self) -> f64 {
        rate(self.sent(), self.publish_span())
    }

    /// Achieved delivery rate across consumers, first to last delivery.
    pub fn consume_rate(&self) -> f64 {
        let first = self
            .consumers
            .iter()
            .filter(|c| c.first_ns > 0)
            .map(|c| c.first_ns)
            .min();
        let last = self.consumers.iter().map(|c| c.last_ns).max();
        match (first, last) {
            (Some(f), Some(l)) => rate(
                self.consumers.iter().map(|c| c.received).sum(),
                Duration::from_nanos(l - f),
            ),
            _ => 0.0,
        }
    }

    /// Consumer info samples as series: `num_pending`, `num_ack_pending`,
    /// `num_redelivered` and `client_in_flight`, one value per interval.
    pub fn sample_timelines(&self, every: Duration) -> Vec<(String, Timeline)> {
        let bucket_ns = every.as_nanos().max(1) as u64;
        let series = |name: &str, value: fn(&ConsumerSample) -> u64| {
            let mut t = Timeline {
                origin_ns: self.t0_ns,
                bucket_ns,
                counts: Vec::new(),
            };
            for s in &self.samples {
                let i = (s.at_ns.saturating_sub(self.t0_ns) / bucket_ns) as usize;
                if t.counts.len() <= i {
                    t.counts.resize(i + 1, 0);
                }
                t.counts[i] = value(s);
            }
            (name.to_string(), t)
        };
        vec![
            series("num_pending", |s| s.num_pending),
            series("num_ack_pending", |s| s.num_ack_pending),
            series("num_redelivered", |s| s.num_redelivered),
            series("client_in_flight", |s| s.client_in_flight),
        ]
    }

    /// How far the last message was sent behind its intended time.
    pub fn final_lag(&self) -> Duration {
        let lag = self
            .sends
            .iter()
            .map(|s| s.last_sent_ns.saturating_sub(s.last_intended_ns))
            .max()
            .unwrap_or(0);
        Duration::from_nanos(lag)
    }
}

fn rate(count: u64, span: Duration) -> f64 {
    if span.is_zero() {
        0.0
    } else {
        count as f64 / span.as_secs_f64()
    }
}

/// Lead time between scheduling t0 and the first intended send, so every
/// publisher thread is up before its first message is due.
const LEAD_IN: Duration = Duration::from_millis(200);

/// The drain allowed after a Ctrl-C: enough for in-flight messages.
const INTERRUPTED_DRAIN: Duration = Duration::from_secs(2);

/// How long the server may take, after the clients are done, to show
/// nothing pending.
const SETTLE: Duration = Duration::from_secs(3);

/// Runs one variant's load: in this process, or split with the run's
/// workers when it has some.
pub async fn drive(ctx: &RunContext, spec: &DriveSpec) -> Result<DriveOutcome> {
    match &ctx.workers {
        Some(crew) => crate::worker::coordinator::drive(ctx, crew, spec).await,
        None => drive_part(ctx, spec, &Share::all(spec), &mut Role::Alone).await,
    }
}

/// Runs `share` of the variant; with [`Role::Lead`] the workers' shares
/// run beside it and their reports join the outcome, which then reads as
/// if one process had run everything.
pub async fn drive_part(
    ctx: &RunContext,
    spec: &DriveSpec,
    share: &Share,
    role: &mut Role<'_>,
) -> Result<DriveOutcome> {
    let publishers = spec.publish.publishers;
    let arrivals = spec.arrivals();
    let messages = match &arrivals {
        Some(table) => table.len() as u64,
        None => spec.messages(),
    };
    let expected = messages + spec.preloaded;

    let consumer_clients = join_all(
        share
            .consumers
            .iter()
            .map(|i| async move { ctx.connect.connect(&format!("consumer-{i}")).await }),
    )
    .await
    .into_iter()
    .collect::<Result<Vec<_>>>()?;

    let retries = RetryPlan {
        in_window: spec.publish.duplicates,
        late: spec.publish.late_duplicates,
        window: spec.publish.duplicate_window,
        late_margin: late_retry_margin(spec.publish.duplicate_window),
    };
    let client_cpu_start = cpu::own_cpu_time();
    let server_cpu = ctx.server_cpu.start();
    let publish_stop = ctx.stop.child_token();
    let mut starting = Vec::new();
    for &i in &share.publishers {
        let config = PublisherConfig {
            index: i as u16,
            subjects: spec.subjects.clone(),
            message_size: spec.publish.message_size,
            schedule: Schedule {
                // Set by `go` once every publisher is connected.
                t0_ns: 0,
                total_rate: spec.rate,
                stride: publishers as u64,
                offset: i as u64,
                total_messages: messages,
                end_ns: u64::MAX,
                arrivals: arrivals.clone(),
            },
            window: spec.publish.pub_ack_window,
            msg_id: spec.publish.msg_id,
            msg_id_prefix: format!("{}-{i}-", spec.msg_id_prefix),
            headers: spec.publish.headers.clone(),
            retries,
            seed: spec.seed,
            record_from_ns: 0,
            pub_ack_timeout: spec.publish.pub_ack_timeout,
            timeline_origin_ns: 0,
            resend_after: spec.publish.resend_after,
        };
        let stop = publish_stop.clone();
        starting.push(async move {
            Publisher::start(&ctx.connect, &format!("publisher-{i}"), config, stop).await
        });
    }
    let mut running = join_all(starting)
        .await
        .into_iter()
        .collect::<Result<Vec<_>>>()?;

    // Every publisher is connected (on every worker too): now the clock
    // starts, on the coordinator's time base, which workers share.
    let t0_ns = match role {
        Role::Alone => clock::now_ns() + LEAD_IN.as_nanos() as u64,
        Role::Lead(crew) => {
            crew.prepare(spec).await?;
            let t0 = clock::now_ns() + (LEAD_IN + crew.lead_in()).as_nanos() as u64;
            crew.go(t0).await;
            t0
        }
        Role::Follow(orders) => orders.ready_then_go().await?,
    };
    let record_from_ns = t0_ns + spec.warmup.as_nanos() as u64;
    let end_ns = record_from_ns + spec.duration.as_nanos() as u64;
    let consumer_stop = CancellationToken::new();
    let launcher = spec.consumer.as_ref().map(|c| Launcher {
        stream: spec.stream.clone(),
        spec: c.clone(),
        record_from_ns,
        t0_ns,
        expected,
        js_api_prefix: ctx.connect.js_api.prefix(),
        stop: consumer_stop.clone(),
    });
    // One progress slot per client, and one more for a client that
    // replaces a crashed one, so the sums never lose a crashed client's count.
    let crash_plan = spec.consumer.as_ref().and_then(|c| c.crash);
    let consumer_progress: Vec<Arc<ConsumerProgress>> = (0..share.consumers.len()
        + usize::from(crash_plan.is_some()))
        .map(|_| Arc::new(ConsumerProgress::default()))
        .collect();
    let mut consumer_tasks = Vec::new();
    let mut crash = None;
    if let Some(launcher) = &launcher {
        for (k, (client, &i)) in consumer_clients
            .into_iter()
            .zip(&share.consumers)
            .enumerate()
        {
            let token = (k == 0).then(CancellationToken::new);
            let crash_signal = crash_plan.zip(token.clone()).map(|(plan, at)| Crash {
                at,
                point: plan.point,
            });
            consumer_tasks.push(launcher.spawn(
                client,
                i,
                consumer_progress[k].clone(),
                crash_signal,
            ));
            if let (Some(plan), Some(token)) = (crash_plan, token) {
                crash = Some(CrashState {
                    plan,
                    token,
                    due_ns: t0_ns + plan.after.as_nanos() as u64,
                    outcome: None,
                });
            }
        }
    }
    let mut crashed_reports = Vec::new();
    let mut fault: Option<FaultOutcome> = None;

    for p in &mut running {
        p.go(Timing {
            t0_ns,
            record_from_ns,
            end_ns,
        });
    }

    // Publish phase: show progress until every publisher has finished.
    let bar = ctx
        .progress
        .variant(&spec.label, spec.warmup + spec.duration + LEAD_IN);
    let sent_counters: Vec<_> = running.iter().map(|p| p.progress.clone()).collect();
    let received = || -> u64 {
        consumer_progress
            .iter()
            .map(|p| p.received.load(Ordering::Relaxed))
            .sum()
    };
    let finished = || -> u64 {
        consumer_progress
            .iter()
            .map(|p| p.finished.load(Ordering::Relaxed))
            .sum()
    };
    let in_flight = || -> u64 {
        consumer_progress
            .iter()
            .map(|p| {
                let received = p.received.load(Ordering::Relaxed);
                received.saturating_sub(p.answered.load(Ordering::Relaxed))
            })
            .sum()
    };
    let watches_server = role.watches_server();
    // The workers' clients' unanswered deliveries, as last reported, for
    // the sampler's client-side view of ack pending.
    let peer_in_flight = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampler = spec
        .consumer
        .as_ref()
        .filter(|_| watches_server)
        .and_then(|c| {
            c.sample_every.map(|every| {
                Sampler::start(
                    ctx.provisioner.jetstream().clone(),
                    &spec.stream,
                    &c.durable,
                    consumer_progress.clone(),
                    peer_in_flight.clone(),
                    every,
                )
            })
        });
    let started = Instant::now();
    let finishing = join_all(running.into_iter().map(Publisher::finish));
    tokio::pin!(finishing);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut last = (Instant::now(), 0u64);
    let results = loop {
        tokio::select! {
            results = &mut finishing => break results,
            _ = tick.tick() => {
                let local_sent: u64 = sent_counters.iter().map(|p| p.sent.load(Ordering::Relaxed)).sum();
                let local = PeerCounts { sent: local_sent, received: received(), finished: finished(), stored: 0, in_flight: in_flight() };
                let peers = match role {
                    Role::Alone => PeerCounts::default(),
                    Role::Lead(crew) => {
                        if ctx.stop.is_cancelled() {
                            // Interrupted: the workers stop publishing too,
                            // and keep what they measured.
                            crew.halt().await;
                        }
                        let peers = crew.counts();
                        peer_in_flight.store(peers.in_flight, Ordering::Relaxed);
                        peers
                    }
                    Role::Follow(orders) => {
                        orders.report(local, false).await;
                        if orders.halted() {
                            publish_stop.cancel();
                        }
                        PeerCounts::default()
                    }
                };
                let sent = local_sent + peers.sent;
                let now = Instant::now();
                let rate = sent.saturating_sub(last.1) as f64 / now.duration_since(last.0).as_secs_f64().max(1e-3);
                last = (now, sent);
                bar.update(started.elapsed(), sent, local.received + peers.received, rate);
                if let (Some(state), Some(launcher)) = (crash.as_mut(), launcher.as_ref()) {
                    state.advance(ctx, launcher, &mut consumer_tasks, &mut crashed_reports, &consumer_progress).await?;
                }
                if let Some(plan) = spec.fault
                    && fault.is_none()
                    && clock::now_ns() >= t0_ns + plan.after.as_nanos() as u64
                {
                    bar.phase("server down");
                    fault = Some(inject(ctx, spec, plan).await?);
                }
                if consumer_tasks.iter().any(|t| t.is_finished()) {
                    // A consumer ended on its own: it failed. Stop publishing.
                    publish_stop.cancel();
                }
            }
        }
    };
    let client_cpu = cpu::own_cpu_time().saturating_sub(client_cpu_start);
    let server_cpu = server_cpu.stop();
    let mut sends = Vec::new();
    let mut acks = Vec::new();
    for result in results {
        let (s, a) = result?;
        sends.push(s);
        acks.push(a);
    }
    let local_stored = acks
        .iter()
        .map(|a| a.acked + a.late_stored + a.retries_stored)
        .sum::<u64>();
    // Workers publish on their own schedule's slots and finish about when
    // this process does; the drain starts once the last of them has.
    let peer_stored = match role {
        Role::Alone => 0,
        Role::Lead(crew) => {
            bar.phase("waiting for workers to finish publishing");
            crew.published(&ctx.stop).await
        }
        Role::Follow(orders) => {
            let local = PeerCounts {
                sent: sends.iter().map(|s| s.sent).sum(),
                received: received(),
                finished: finished(),
                stored: local_stored,
                in_flight: in_flight(),
            };
            orders.report(local, true).await;
            0
        }
    };
    let publish_end = Instant::now();

    // Drain: wait until every stored message was delivered once. Interrupted
    // runs still drain briefly, so their ledger is not a list of "lost"
    // messages that were merely in flight.
    // Everything the consumers must finish: what was in the stream before
    // and what this run stored.
    let stored: u64 = spec.preloaded + local_stored + peer_stored;
    let mut drained = spec.consumer.is_none();
    let mut server_state = None;
    let mut drain_time = Duration::ZERO;
    if let Role::Follow(orders) = role {
        // A worker drains until the coordinator, which sees every
        // process's count, says the variant is done.
        if spec.consumer.is_some() {
            bar.phase("draining (until the coordinator stops it)");
            orders
                .until_stopped(spec.drain_timeout + SETTLE, || PeerCounts {
                    sent: sends.iter().map(|s| s.sent).sum(),
                    received: received(),
                    finished: finished(),
                    stored: local_stored,
                    in_flight: in_flight(),
                })
                .await;
        }
    } else if let Some(c) = &spec.consumer {
        bar.phase("draining");
        let mut deadline = publish_end + spec.drain_timeout;
        loop {
            if ctx.stop.is_cancelled() {
                deadline = deadline.min(publish_end + INTERRUPTED_DRAIN);
            }
            if Instant::now() >= deadline {
                break;
            }
            if let (Some(state), Some(launcher)) = (crash.as_mut(), launcher.as_ref()) {
                state
                    .advance(
                        ctx,
                        launcher,
                        &mut consumer_tasks,
                        &mut crashed_reports,
                        &consumer_progress,
                    )
                    .await?;
            }
            let peers_finished = match role {
                Role::Lead(crew) => {
                    let peers = crew.counts();
                    peer_in_flight.store(peers.in_flight, Ordering::Relaxed);
                    peers.finished
                }
                _ => 0,
            };
            if finished() + peers_finished >= stored && crash.as_ref().is_none_or(|c| c.done()) {
                drained = true;
                break;
            }
            if consumer_tasks.iter().any(|t| t.is_finished()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drain_time = publish_end.elapsed();
        // The server settles later than the clients: fire-and-forget acks
        // are processed after they are sent, and a message that failed its
        // last delivery is let go only when that delivery's deadline expires.
        let js = ctx.provisioner.jetstream();
        let settle_until = if drained {
            deadline.max(Instant::now() + SETTLE)
        } else {
            Instant::now()
        };
        server_state = settled_state(js, &spec.stream, &c.durable, settle_until).await;
    }
    let samples = match sampler {
        Some(s) => s.finish().await,
        None => Vec::new(),
    };
    consumer_stop.cancel();
    let mut consumer_reports = crashed_reports;
    let mut errors = Vec::new();
    for (i, task) in consumer_tasks.into_iter().enumerate() {
        match task.await.context("joining a consumer task")? {
            Ok(report) => consumer_reports.push(report),
            Err(e) => errors.push(format!("consumer {i}: {e:#}")),
        }
    }
    bar.finish();

    for (s, i) in sends.iter().zip(&share.publishers) {
        for e in [&s.first_error, &s.stalled].into_iter().flatten() {
            errors.push(format!("publisher {i}: {e}"));
        }
    }
    for (a, i) in acks.iter().zip(&share.publishers) {
        if let Some(e) = &a.first_error {
            errors.push(format!("publisher {i} PubAcks: {e}"));
        }
    }
    for (c, i) in consumer_reports.iter().zip(&share.consumers) {
        if let Some(e) = &c.first_error {
            errors.push(format!("consumer {i}: {e}"));
        }
    }

    // Say why publishes or acks went unanswered when a server refused them.
    for refusal in ctx.connect.take_refusals() {
        errors.push(format!("the server refused: {refusal}"));
    }

    let mut client_cpu = client_cpu;
    if let Role::Lead(crew) = role {
        // The workers' parts, by publisher index, so every reader of
        // `sends` and `acks` (read-back reconciliation) finds publisher p
        // at position p as in a single process.
        let local_counts = crate::worker::merge::part_counts(&sends, &acks, &consumer_reports);
        let parts = crew.collect(local_counts).await;
        let mut by_index: Vec<(usize, SendReport, AckReport)> = share
            .publishers
            .iter()
            .copied()
            .zip(sends.drain(..).zip(acks.drain(..)))
            .map(|(i, (s, a))| (i, s, a))
            .collect();
        for part in parts {
            by_index.extend(
                part.publishers
                    .into_iter()
                    .map(|p| (p.index, p.send, p.ack)),
            );
            consumer_reports.extend(part.consumers);
            errors.extend(part.errors);
            client_cpu += part.client_cpu;
        }
        by_index.sort_by_key(|(i, _, _)| *i);
        for (_, s, a) in by_index {
            sends.push(s);
            acks.push(a);
        }
    }

    let mut outcome = merge(sends, acks, consumer_reports, t0_ns, record_from_ns);
    outcome.drained = drained;
    outcome.drain_time = drain_time;
    outcome.server_state = server_state;
    outcome.samples = samples;
    outcome.crash = crash.and_then(|c| c.outcome());
    outcome.fault = fault;
    outcome.client_cpu = client_cpu;
    outcome.server_cpu = server_cpu;
    outcome.interrupted = ctx.stop.is_cancelled();
    outcome.errors = errors;
    Ok(outcome)
}

fn merge(
    sends: Vec<SendReport>,
    acks: Vec<AckReport>,
    consumers: Vec<ConsumerReport>,
    t0_ns: u64,
    record_from_ns: u64,
) -> DriveOutcome {
    let mut send_lag = Recorder::new();
    let mut published_timeline = Timeline::per_second(t0_ns);
    for s in &sends {
        send_lag.merge(&s.send_lag);
        published_timeline.merge(&s.timeline);
    }
    let mut pub_ack_intended = Recorder::new();
    let mut pub_ack_sent = Recorder::new();
    let mut ledger = LedgerShard::new();
    for a in &acks {
        pub_ack_intended.merge(&a.from_intended);
        pub_ack_sent.merge(&a.from_sent);
        ledger.merge(&a.ledger);
    }
    let mut e2e_intended = Recorder::new();
    let mut e2e_sent = Recorder::new();
    let mut ack_rtt = Recorder::new();
    let mut delivered_timeline = Timeline::per_second(t0_ns);
    let mut logs = Vec::new();
    for c in &consumers {
        e2e_intended.merge(&c.e2e_intended);
        e2e_sent.merge(&c.e2e_sent);
        ack_rtt.merge(&c.ack_rtt);
        ledger.merge(&c.ledger);
        delivered_timeline.merge(&c.timeline);
        logs.push(c.events.clone());
    }
    let mut counts = ledger.counts();
    counts.published = sends.iter().map(|s| s.sent).sum();
    counts.publish_errors = acks.iter().map(|a| a.errors + a.missing).sum();
    DriveOutcome {
        t0_ns,
        record_from_ns,
        sends,
        acks,
        consumers,
        send_lag,
        pub_ack_intended,
        pub_ack_sent,
        e2e_intended,
        e2e_sent,
        ledger,
        counts,
        published_timeline,
        delivered_timeline,
        drained: false,
        drain_time: Duration::ZERO,
        server_state: None,
        samples: Vec::new(),
        events: crate::consume::events::merge(logs),
        ack_rtt,
        crash: None,
        fault: None,
        client_cpu: Duration::ZERO,
        server_cpu: None,
        interrupted: false,
        errors: Vec::new(),
    }
}

async fn current_state(
    js: &jetstream::Context,
    stream: &str,
    durable: &str,
) -> Option<ConsumerState> {
    let stream = js.get_stream(stream).await.ok()?;
    let consumer: jetstream::consumer::PullConsumer = stream.get_consumer(durable).await.ok()?;
    let info = consumer.get_info().await.ok()?;
    Some(ConsumerState {
        num_pending: info.num_pending,
        num_ack_pending: info.num_ack_pending,
        num_redelivered: info.num_redelivered,
    })
}

/// Polls consumer info until nothing is pending or `until` passes.
async fn settled_state(
    js: &jetstream::Context,
    stream: &str,
    durable: &str,
    until: Instant,
) -> Option<ConsumerState> {
    loop {
        let state = current_state(js, stream, durable).await;
        let settled = state.is_some_and(|s| s.num_pending == 0 && s.num_ack_pending == 0);
        if settled || Instant::now() >= until {
            return state;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Samples consumer info on a fixed interval, from the control connection.
struct Sampler {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Vec<ConsumerSample>>,
}

impl Sampler {
    fn start(
        js: jetstream::Context,
        stream: &str,
        durable: &str,
        clients: Vec<Arc<ConsumerProgress>>,
        peers_in_flight: Arc<std::sync::atomic::AtomicU64>,
        every: Duration,
    ) -> Sampler {
        let stop = CancellationToken::new();
        let (stream, durable, halt) = (stream.to_string(), durable.to_string(), stop.clone());
        let task = tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tokio::select! {
                    _ = halt.cancelled() => break,
                    _ = tick.tick() => {}
                }
                let client_in_flight = clients
                    .iter()
                    .map(|p| {
                        let received = p.received.load(Ordering::Relaxed);
                        received.saturating_sub(p.answered.load(Ordering::Relaxed))
                    })
                    .sum::<u64>()
                    + peers_in_flight.load(Ordering::Relaxed);
                if let Some(s) = current_state(&js, &stream, &durable).await {
                    samples.push(ConsumerSample {
                        at_ns: clock::now_ns(),
                        num_pending: s.num_pending,
                        num_ack_pending: s.num_ack_pending as u64,
                        num_redelivered: s.num_redelivered as u64,
                        client_in_flight,
                    });
                }
            }
            samples
        });
        Sampler { stop, task }
    }

    async fn finish(self) -> Vec<ConsumerSample> {
        self.stop.cancel();
        self.task.await.unwrap_or_default()
    }
}

/// Everything needed to start a consumer client for a variant.
struct Launcher {
    stream: String,
    spec: ConsumerSpec,
    record_from_ns: u64,
    t0_ns: u64,
    expected: u64,
    js_api_prefix: String,
    stop: CancellationToken,
}

impl Launcher {
    fn spawn(
        &self,
        client: async_nats::Client,
        index: usize,
        progress: Arc<ConsumerProgress>,
        crash: Option<Crash>,
    ) -> tokio::task::JoinHandle<Result<ConsumerReport>> {
        let config = ConsumerConfig {
            index,
            stream: self.stream.clone(),
            durable: self.spec.durable.clone(),
            plan: self.spec.plan.clone(),
            behaviour: self.spec.behaviour.clone(),
            record_from_ns: self.record_from_ns,
            timeline_origin_ns: self.t0_ns,
            expected_messages: self.expected,
            log_events: self.spec.log_events,
            js_api_prefix: self.js_api_prefix.clone(),
            crash,
        };
        // The client moves into the task: when the task ends, its
        // connection closes, which is what a crash must do.
        tokio::spawn(consume::run(client, config, progress, self.stop.clone()))
    }
}

struct CrashState {
    plan: CrashPlan,
    token: CancellationToken,
    due_ns: u64,
    outcome: Option<CrashOutcome>,
}

/// How long after a crash the server is asked what the dead client left
/// unacked: long enough for it to notice the closed connection.
const CRASH_SETTLE: Duration = Duration::from_millis(200);

impl CrashState {
    fn done(&self) -> bool {
        self.outcome.is_some()
    }

    fn outcome(self) -> Option<CrashOutcome> {
        self.outcome
    }

    /// When due, crashes the first client, asks the server what it left
    /// unacked, and binds a new client at the planned time. The caller's
    /// loop pauses meanwhile; publishers and other clients do not.
    async fn advance(
        &mut self,
        ctx: &RunContext,
        launcher: &Launcher,
        tasks: &mut Vec<tokio::task::JoinHandle<Result<ConsumerReport>>>,
        crashed: &mut Vec<ConsumerReport>,
        progress: &[Arc<ConsumerProgress>],
    ) -> Result<()> {
        if self.outcome.is_some() || clock::now_ns() < self.due_ns || tasks.is_empty() {
            return Ok(());
        }
        self.token.cancel();
        let report = tasks
            .remove(0)
            .await
            .context("joining the crashing consumer")??;
        let crash = report.crashed.clone().unwrap_or_default();
        crashed.push(report);
        tokio::time::sleep(CRASH_SETTLE).await;
        let ack_pending_after = current_state(
            ctx.provisioner.jetstream(),
            &launcher.stream,
            &launcher.spec.durable,
        )
        .await
        .map(|s| s.num_ack_pending as u64);
        let rebind_at = clock::instant_at(crash.at_ns + self.plan.rebind_after.as_nanos() as u64);
        tokio::time::sleep_until(rebind_at.into()).await;
        let client = ctx.connect.connect("consumer-rebound").await?;
        let index = progress.len() - 1;
        let rebound_ns = clock::now_ns();
        tasks.push(launcher.spawn(client, index, progress[index].clone(), None));
        self.outcome = Some(CrashOutcome {
            report: crash,
            ack_pending_after,
            rebound_ns,
        });
        Ok(())
    }
}

/// Kills the planned node, waits out the downtime (and, for a stream
/// leader, the election of a new one), and starts it again. The caller's
/// loop pauses meanwhile; publishers and consumers carry on against the
/// remaining (or no) servers.
async fn inject(ctx: &RunContext, spec: &DriveSpec, plan: FaultPlan) -> Result<FaultOutcome> {
    let faults = ctx.faults.clone().ok_or_else(|| {
        anyhow::anyhow!(
            "killing a server needs one jsbench started itself; this one was given with --server"
        )
    })?;
    let names = faults.node_names();
    let js = ctx.provisioner.jetstream();
    let leader_before = leader(js, &spec.stream).await;
    let node = match plan.node {
        FaultNode::Server => 0,
        // A lone server leads every stream it has.
        FaultNode::Leader if names.len() == 1 => 0,
        FaultNode::Leader => {
            let name = leader_before.clone().ok_or_else(|| {
                anyhow::anyhow!(
                    "stream {} reports no leader to kill (is it replicated?)",
                    spec.stream
                )
            })?;
            names.iter().position(|n| *n == name).ok_or_else(|| {
                anyhow::anyhow!("the stream's leader {name} is not a node jsbench started")
            })?
        }
    };
    // Kill and restart block this worker thread only: block_in_place keeps
    // the restarted server's parent thread alive for the rest of the run.
    // Stamped as the signal goes: clients see the sockets close before
    // the kill has reaped the process.
    let killed_ns = clock::now_ns();
    tokio::task::block_in_place(|| faults.kill(node)).context("killing the server")?;
    let mut outcome = FaultOutcome {
        node: names.get(node).cloned().unwrap_or_default(),
        killed_ns,
        leader_before: leader_before.clone(),
        ..Default::default()
    };
    let back_at = clock::instant_at(killed_ns + plan.down_for.as_nanos() as u64);
    // The stream has a leader again when its info is answered: the request
    // goes to the leader, and a dead one answers nothing. Watched while the
    // node is down and after it is back, up to a deadline fixed now. A
    // probe goes out every PROBE_EVERY, each waiting up to PROBE_TIMEOUT,
    // so the first answer arrives within a probe interval and a round
    // trip of the election, rather than at the next request timeout.
    // A lone server elects nothing: its stream is back when it is.
    let watcher = (plan.node == FaultNode::Leader && names.len() > 1).then(|| {
        let (js, stream) = (js.clone(), spec.stream.clone());
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + ELECTION_WATCH;
            let mut probes = FuturesUnordered::new();
            let mut every = tokio::time::interval(PROBE_EVERY);
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => return None,
                    _ = every.tick() => probes.push(leader_within(&js, &stream, PROBE_TIMEOUT)),
                    Some(answer) = probes.next(), if !probes.is_empty() => {
                        if let Some(now_leader) = answer {
                            return Some((clock::now_ns(), now_leader));
                        }
                    }
                }
            }
        })
    });
    tokio::time::sleep_until(back_at.into()).await;
    tokio::task::block_in_place(|| faults.restart(node)).context("restarting the server")?;
    outcome.restarted_ns = clock::now_ns();
    if let Some(watcher) = watcher
        && let Ok(Some((at, new_leader))) = watcher.await
    {
        outcome.election_gap = Some(Duration::from_nanos(at - killed_ns));
        outcome.leader_after = Some(new_leader);
    }
    Ok(outcome)
}

/// How long after a kill a new stream leader is waited for.
const ELECTION_WATCH: Duration = Duration::from_secs(30);
/// How often the stream is asked for its leader while one is awaited.
const PROBE_EVERY: Duration = Duration::from_millis(50);
/// How long one such question waits for its answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The stream's current leader, from stream info.
async fn leader(js: &jetstream::Context, stream: &str) -> Option<String> {
    leader_within(js, stream, PROBE_TIMEOUT).await
}

/// The stream's leader, if its info is answered within `timeout`: the
/// context's own request timeout (seconds) is too coarse to time an
/// election with.
async fn leader_within(js: &jetstream::Context, stream: &str, timeout: Duration) -> Option<String> {
    let response: jetstream::response::Response<jetstream::stream::Info> = tokio::time::timeout(
        timeout,
        js.request(format!("STREAM.INFO.{stream}"), &serde_json::json!({})),
    )
    .await
    .ok()?
    .ok()?;
    match response {
        jetstream::response::Response::Ok(info) => info.cluster.and_then(|c| c.leader),
        jetstream::response::Response::Err { .. } => None,
    }
}
